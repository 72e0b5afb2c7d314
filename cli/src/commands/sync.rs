//! `gpuctl sync`: replays the Python SDK's offline spool from the command
//! line, as `gpuplane.sync()` does. Same files (`$GPUCTL_SPOOL_DIR`, else
//! `~/.gpuctl/spool/sdk-*.jsonl`), same order (oldest first), same locks (a
//! file another process is replaying is left to it), same records:
//!
//! - `run`: the run's id, or the project and name to create it with (the new
//!   id is appended as `run_created`, so a later replay does not create it
//!   twice, and, for a run the file does not finish, left in
//!   `created-<local id>` for the process that may still log to it);
//! - `batch`: metric points and texts, idempotent by batch id;
//! - `config`, `details`: the run's config, tags and notes;
//! - `alert`: an alert the run raised (`run.alert`);
//! - `finish`: the run is finished.
//!
//! A file is deleted once every record was acknowledged. A partial last line
//! (a crash while writing) is skipped and counted. A record the server refuses
//! (404, 409, 422) is reported and dropped, as the SDK does; an unreachable
//! server, a server error or a refused token (401, 403) stops the replay with
//! the file kept.

use crate::Output;
use crate::client::{CliError, Client};
use crate::exit::Failure;
use serde::Serialize;
use serde_json::{Value, json};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What one `gpuctl sync` did.
#[derive(Debug, Default, Serialize)]
pub struct SyncReport {
    /// The spool directory read.
    pub spool_dir: String,
    /// Files replayed to the end and deleted.
    pub files: usize,
    /// Metric points and texts sent.
    pub points: usize,
    pub texts: usize,
    /// Runs created for spooled runs that were started offline.
    pub runs_created: Vec<String>,
    /// Unreadable lines skipped (a crash while writing).
    pub skipped_lines: usize,
    /// Records the server refused (each is named on stderr).
    pub refused: usize,
    /// Files left to another process that was replaying them.
    pub busy: usize,
}

/// `$GPUCTL_SPOOL_DIR`, else `~/.gpuctl/spool` (the SDK's rule).
fn spool_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUCTL_SPOOL_DIR").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".gpuctl").join("spool")
}

pub async fn run(client: &Client, out: &Output) -> Result<(), CliError> {
    let dir = spool_dir();
    let mut report = SyncReport {
        spool_dir: dir.display().to_string(),
        ..SyncReport::default()
    };
    for path in spool_files(&dir)? {
        replay_file(client, &path, &mut report).await?;
    }
    out.emit(&report, |r| {
        let mut text = format!(
            "replayed {} spool file(s) from {}: {} point(s), {} text(s)",
            r.files, r.spool_dir, r.points, r.texts
        );
        for run in &r.runs_created {
            text.push_str(&format!("\ncreated run {run}"));
        }
        if r.skipped_lines > 0 {
            text.push_str(&format!("\nskipped {} unreadable line(s)", r.skipped_lines));
        }
        if r.refused > 0 {
            text.push_str(&format!(
                "\nthe server refused {} record(s); see above",
                r.refused
            ));
        }
        if r.busy > 0 {
            text.push_str(&format!(
                "\n{} file(s) are being replayed by another process",
                r.busy
            ));
        }
        text
    });
    Ok(())
}

/// Where a replay that creates a run started offline leaves its id, named
/// by the run's local id, for the process that logs to it (the SDK's
/// `created_run`): still running, it goes on with that run instead of
/// creating another. Removed by that process, or by a sync a week later.
const CREATED_PREFIX: &str = "created-";
const CREATED_KEEP: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Leaves `run_id` for `local_id` beside the spool file `path` (only for a
/// local id the SDK could have made: letters, digits, `-` and `_`).
fn remember_created(path: &Path, local_id: &str, run_id: &str) -> Result<(), CliError> {
    let valid = (1..=64).contains(&local_id.len())
        && local_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let Some(dir) = path.parent().filter(|_| valid) else {
        return Ok(());
    };
    let marker = dir.join(format!("{CREATED_PREFIX}{local_id}"));
    let temporary = dir.join(format!("{CREATED_PREFIX}{local_id}.tmp"));
    std::fs::write(&temporary, run_id)
        .and_then(|()| std::fs::rename(&temporary, &marker))
        .map_err(|error| io_error(&marker, &error))
}

/// The spool's files, oldest first (ties by name). Run ids left for a
/// process more than [`CREATED_KEEP`] ago are removed on the way.
fn spool_files(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(io_error(dir, &error)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| io_error(dir, &error))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(CREATED_PREFIX) {
            let modified = entry.metadata().and_then(|m| m.modified()).ok();
            if modified
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age > CREATED_KEEP)
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        if name.starts_with("sdk-") && name.ends_with(".jsonl") {
            let modified = entry.metadata().and_then(|m| m.modified()).ok();
            files.push((modified, entry.path()));
        }
    }
    files.sort();
    Ok(files.into_iter().map(|(_, path)| path).collect())
}

fn io_error(path: &Path, error: &std::io::Error) -> CliError {
    CliError::new(
        Failure::Other,
        "spool_error",
        format!("{}: {error}", path.display()),
    )
}

/// The file's records, and how many lines could not be read.
fn read_records(file: &mut File) -> std::io::Result<(Vec<Value>, usize)> {
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut records = Vec::new();
    let mut skipped = 0;
    for line in text.split_inclusive('\n') {
        match line.strip_suffix('\n').map(serde_json::from_str::<Value>) {
            Some(Ok(record)) => records.push(record),
            // A line without its newline is the partial last line of a crash.
            _ => skipped += 1,
        }
    }
    Ok((records, skipped))
}

/// Replays one file and deletes it; an unreachable server is an error (the
/// file stays for the next sync).
async fn replay_file(client: &Client, path: &Path, report: &mut SyncReport) -> Result<(), CliError> {
    let mut file = match OpenOptions::new().read(true).append(true).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error(path, &error)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            report.busy += 1;
            return Ok(());
        }
        Err(TryLockError::Error(error)) => return Err(io_error(path, &error)),
    }
    // Replayed and deleted by another process between opening and locking.
    if file.metadata().map_err(|error| io_error(path, &error))?.nlink() == 0 {
        return Ok(());
    }
    let (records, skipped) = read_records(&mut file).map_err(|error| io_error(path, &error))?;
    if skipped > 0 {
        eprintln!(
            "warning: skipped {skipped} unreadable line(s) in {}",
            path.display()
        );
        report.skipped_lines += skipped;
    }
    // A replay cut off after creating the run left its id at the end.
    let mut run_id: Option<String> = records
        .iter()
        .find(|record| record["type"] == "run_created")
        .and_then(|record| record["run_id"].as_str())
        .map(str::to_string);
    // A process may still log to a run it has not finished.
    let finished = records.iter().any(|record| record["type"] == "finish");
    for record in &records {
        let kind = record["type"].as_str().unwrap_or_default();
        if kind == "run" || kind == "run_created" {
            if let Some(id) = record["run_id"].as_str() {
                run_id = Some(id.to_string());
            } else if kind == "run" && run_id.is_none() {
                let id = create_run(client, record)
                    .await
                    .map_err(|error| left_in_spool(error, path))?;
                // Remembered at once, so a later replay does not create another.
                writeln!(file, "{}", json!({"type": "run_created", "run_id": id}))
                    .and_then(|()| file.sync_all())
                    .map_err(|error| io_error(path, &error))?;
                if let Some(local_id) = record["local_id"].as_str()
                    && !finished
                {
                    remember_created(path, local_id, &id)?;
                }
                report.runs_created.push(id.clone());
                run_id = Some(id);
            }
            continue;
        }
        let Some(run_id) = run_id.as_deref() else { continue };
        let sent: Result<Value, CliError> = match kind {
            "batch" => {
                let batch = json!({
                    "batch_id": record["batch_id"],
                    "points": record.get("points").cloned().unwrap_or(json!([])),
                    "texts": record.get("texts").cloned().unwrap_or(json!([])),
                });
                client.post(&format!("runs/{run_id}/metrics"), &batch).await
            }
            "config" => {
                let body = json!({"config": record["config"]});
                client.post(&format!("runs/{run_id}/config"), &body).await
            }
            "details" => client.patch(&format!("runs/{run_id}"), &record["changes"]).await,
            "alert" => {
                client
                    .post(&format!("runs/{run_id}/alerts"), &record["alert"])
                    .await
            }
            "finish" => client.post(&format!("runs/{run_id}/finish"), &json!(null)).await,
            _ => continue,
        };
        match sent {
            Ok(_) if kind == "batch" => {
                report.points += record["points"].as_array().map_or(0, Vec::len);
                report.texts += record["texts"].as_array().map_or(0, Vec::len);
            }
            Ok(_) => {}
            // Unreachable, a server error, or a token refused (401, 403):
            // the file stays for the next sync.
            Err(error) if !refuses_the_record(error.failure) => {
                return Err(left_in_spool(error, path));
            }
            // Finishing a run that finished meanwhile is not worth a word.
            Err(_) if kind == "finish" => {}
            Err(error) => {
                eprintln!(
                    "warning: the server refused a spooled {kind} of run {run_id} ({}); dropping it",
                    error.error.message
                );
                report.refused += 1;
            }
        }
    }
    std::fs::remove_file(path).map_err(|error| io_error(path, &error))?;
    report.files += 1;
    Ok(())
}

/// True when the server refused the record itself (no such run, a conflict,
/// invalid input): sending it again would never succeed, so it is dropped.
fn refuses_the_record(failure: Failure) -> bool {
    matches!(failure, Failure::NotFound | Failure::Conflict | Failure::Invalid)
}

/// Creates the run a file spooled while offline; a refusal stops the sync
/// with the file kept, since its data has nowhere else to go.
async fn create_run(client: &Client, record: &Value) -> Result<String, CliError> {
    let body = json!({"project": record["project"], "name": record["name"]});
    let created: Value = client.post("runs", &body).await?;
    created["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| CliError::new(Failure::Other, "bad_answer", "the created run has no id"))
}

fn left_in_spool(mut error: CliError, path: &Path) -> CliError {
    error.error.message = format!(
        "{}; {} and the files after it stay in the spool for the next sync",
        error.error.message,
        path.display()
    );
    error
}
