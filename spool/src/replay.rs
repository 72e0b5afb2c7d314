//! Replaying spool files: every record sent in order, each file deleted once
//! the server has all of it; what the server refuses goes to the quarantine
//! and the replay goes on.

use crate::about_the_record;
use crate::files::{QuarantineFile, ReadAt, Records, open_existing, remember_created, spool_files};
use serde::Serialize;
use serde_json::{Value, json};
use std::fs::{File, TryLockError};
use std::future::Future;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The HTTP method of a replayed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Post,
    Patch,
}

/// Why the server did not take a request.
#[derive(Debug, Clone)]
pub enum SendError {
    /// Not reached, or it answered "later" (5xx, 408, 429): try again later.
    Unreachable(String),
    /// It refused (another 4xx): sending the same again will not help.
    Refused { status: u16, message: String },
}

/// Sends one request to the server's `/api/v1/{path}` (`gpuctl`'s client,
/// or the agent's with a job's token).
pub trait Sender {
    fn send(
        &self,
        method: Method,
        path: &str,
        body: &Value,
    ) -> impl Future<Output = Result<Value, SendError>> + Send;
}

/// What a refusal of the replaying token itself (401) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTokenRefused {
    /// Stop and keep every file, for a token the server takes (`gpuctl sync`).
    Stop,
    /// Quarantine like any refusal: the token will not come back (the
    /// agent, with the token of a job that ended).
    Quarantine,
}

/// What a replay did.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Files done with (every record sent, or quarantined) and deleted.
    pub files: usize,
    /// Metric points and texts the server took.
    pub points: usize,
    pub texts: usize,
    /// Runs created for spooled runs that were started offline.
    pub runs_created: Vec<String>,
    /// Unreadable lines skipped (a crash while writing).
    pub skipped_lines: usize,
    /// What the server refused, now in the quarantine.
    pub quarantined: Vec<Quarantined>,
    /// Files left to another process that was replaying them.
    pub busy: usize,
    /// Files that could not be opened (not regular files, say), left as they are.
    pub unreadable: Vec<String>,
}

/// Records the server refused, and where they wait.
#[derive(Debug, Clone, Serialize)]
pub struct Quarantined {
    /// The quarantine file.
    pub file: String,
    pub records: usize,
    pub points: usize,
    /// The server's HTTP status and message.
    pub status: u16,
    pub reason: String,
}

impl Quarantined {
    fn count(&mut self, record: &Value) {
        if matches!(record["type"].as_str(), Some("run" | "run_created" | "refused")) {
            return;
        }
        self.records += 1;
        self.points += record["points"].as_array().map_or(0, Vec::len);
    }
}

/// Why a replay stopped before the end; the files not replayed stay.
#[derive(Debug)]
pub enum Stop {
    /// The server could not be reached: try again later.
    Unreachable(String),
    /// The server refused the replaying token (with [`OnTokenRefused::Stop`]).
    TokenRefused { status: u16, message: String },
    /// A file could not be read or written.
    Io { path: PathBuf, error: io::Error },
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Unreachable(message) => write!(f, "{message}"),
            Stop::TokenRefused { status, message } => {
                write!(f, "the server refused the token ({status}): {message}")
            }
            Stop::Io { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

fn io_error(path: &Path) -> impl Fn(io::Error) -> Stop + '_ {
    move |error| Stop::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Replays every spool file of `dir`, oldest first.
pub async fn replay_dir<S: Sender + Sync>(
    sender: &S,
    dir: &Path,
    on_token: OnTokenRefused,
    report: &mut Report,
) -> Result<(), Stop> {
    for path in spool_files(dir).map_err(io_error(dir))? {
        replay_file(sender, dir, &path, on_token, report).await?;
    }
    Ok(())
}

/// Whether `id` can be a run's id (and so a path segment of the API).
fn valid_run_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The request a record makes, or None for a record of no kind we send.
fn request(kind: &str, run_id: &str, record: &Value) -> Option<(Method, String, Value)> {
    Some(match kind {
        "batch" => {
            let mut batch = json!({
                "batch_id": record["batch_id"],
                "points": record.get("points").cloned().unwrap_or(json!([])),
            });
            if let Some(texts) = record.get("texts").filter(|texts| !texts.is_null()) {
                batch["texts"] = texts.clone();
            }
            (Method::Post, format!("runs/{run_id}/metrics"), batch)
        }
        "config" => (
            Method::Post,
            format!("runs/{run_id}/config"),
            json!({"config": record["config"]}),
        ),
        "details" => (Method::Patch, format!("runs/{run_id}"), record["changes"].clone()),
        "alert" => (
            Method::Post,
            format!("runs/{run_id}/alerts"),
            record["alert"].clone(),
        ),
        "finish" => (Method::Post, format!("runs/{run_id}/finish"), Value::Null),
        _ => return None,
    })
}

/// Replays one spool file of `dir` and deletes it. A file another process
/// is replaying (or appending to) is left to it.
pub async fn replay_file<S: Sender + Sync>(
    sender: &S,
    dir: &Path,
    path: &Path,
    on_token: OnTokenRefused,
    report: &mut Report,
) -> Result<(), Stop> {
    let io = io_error(path);
    let file = match open_existing(path) {
        Ok(Some(file)) => file,
        Ok(None) => return Ok(()),
        Err(error) => {
            report.unreadable.push(format!("{}: {error}", path.display()));
            return Ok(());
        }
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            report.busy += 1;
            return Ok(());
        }
        Err(TryLockError::Error(error)) => return Err(io(error)),
    }
    // Replayed and deleted by another process between opening and locking.
    if file.metadata().map_err(&io)?.nlink() == 0 {
        return Ok(());
    }
    // First a look at the whole file: the run id a cut-off replay left at
    // its end, and whether it finishes its run (else a process may still
    // log to it).
    let mut run_id: Option<String> = None;
    let mut finished = false;
    let mut records = Records::new(ReadAt::start(&file));
    while let Some(record) = records.next_record().map_err(&io)? {
        match record["type"].as_str() {
            Some("run_created") if run_id.is_none() => run_id = record["run_id"].as_str().map(str::to_string),
            Some("finish") => finished = true,
            _ => {}
        }
    }
    // Read from its start again, apart from the appends below.
    let mut records = Records::new(ReadAt::start(&file));
    let mut header = Value::Null;
    let mut quarantine: Option<QuarantineFile> = None;
    while let Some(record) = records.next_record().map_err(&io)? {
        let kind = record["type"].as_str().unwrap_or_default().to_string();
        if kind == "run" || kind == "run_created" {
            if kind == "run" && header.is_null() {
                header = record.clone();
            }
            if let Some(id) = record["run_id"].as_str() {
                run_id = Some(id.to_string());
            } else if kind == "run" && run_id.is_none() {
                match create_run(sender, &record).await {
                    Ok(id) => {
                        created(&file, path, &record, &id, finished).map_err(&io)?;
                        report.runs_created.push(id.clone());
                        run_id = Some(id);
                    }
                    Err(SendError::Unreachable(message)) => return Err(Stop::Unreachable(message)),
                    Err(SendError::Refused { status, message }) => {
                        if status == 401 && on_token == OnTokenRefused::Stop {
                            return Err(Stop::TokenRefused { status, message });
                        }
                        // Nowhere to send any of it: the whole file waits.
                        let mut held = QuarantineFile::open(dir, path, &header, None).map_err(&io)?;
                        let mut entry = quarantined(&held, status, &message);
                        held.refused(status, &message).map_err(&io)?;
                        while let Some(rest) = records.next_record().map_err(&io)? {
                            held.record(&rest).map_err(&io)?;
                            entry.count(&rest);
                        }
                        held.sync().map_err(&io)?;
                        report.quarantined.push(entry);
                        break;
                    }
                }
            }
            continue;
        }
        let Some(run) = run_id.as_deref() else { continue };
        let Some((method, api_path, body)) = request(&kind, run, &record) else {
            continue;
        };
        let sent = if valid_run_id(run) {
            sender.send(method, &api_path, &body).await
        } else {
            Err(SendError::Refused {
                status: 422,
                message: format!("refused before sending: `{run}` is not a run id"),
            })
        };
        match sent {
            Ok(_) => {
                if kind == "batch" {
                    report.points += record["points"].as_array().map_or(0, Vec::len);
                    report.texts += record["texts"].as_array().map_or(0, Vec::len);
                }
            }
            Err(SendError::Unreachable(message)) => return Err(Stop::Unreachable(message)),
            // Finishing a run that finished meanwhile (or a job's run, which
            // follows its job) is not worth keeping.
            Err(SendError::Refused { .. }) if kind == "finish" => {}
            Err(SendError::Refused { status, message })
                if status == 401 && on_token == OnTokenRefused::Stop =>
            {
                return Err(Stop::TokenRefused { status, message });
            }
            Err(SendError::Refused { status, message }) => {
                let held = match &mut quarantine {
                    Some(held) => held,
                    None => {
                        quarantine.insert(QuarantineFile::open(dir, path, &header, Some(run)).map_err(&io)?)
                    }
                };
                let mut entry = quarantined(held, status, &message);
                held.refused(status, &message).map_err(&io)?;
                held.record(&record).map_err(&io)?;
                entry.count(&record);
                let whole_rest = !about_the_record(status);
                if whole_rest {
                    while let Some(rest) = records.next_record().map_err(&io)? {
                        held.record(&rest).map_err(&io)?;
                        entry.count(&rest);
                    }
                }
                held.sync().map_err(&io)?;
                merge(&mut report.quarantined, entry);
                if whole_rest {
                    break;
                }
            }
        }
    }
    report.skipped_lines += records.skipped;
    std::fs::remove_file(path).map_err(&io)?;
    report.files += 1;
    Ok(())
}

fn quarantined(held: &QuarantineFile, status: u16, message: &str) -> Quarantined {
    Quarantined {
        file: held.path.display().to_string(),
        records: 0,
        points: 0,
        status,
        reason: message.to_string(),
    }
}

/// Adds `entry` to the last one when it is the same file and refusal.
fn merge(list: &mut Vec<Quarantined>, entry: Quarantined) {
    match list.last_mut() {
        Some(last)
            if last.file == entry.file && last.status == entry.status && last.reason == entry.reason =>
        {
            last.records += entry.records;
            last.points += entry.points;
        }
        _ => list.push(entry),
    }
}

/// Creates the run a file spooled while offline.
async fn create_run<S: Sender + Sync>(sender: &S, header: &Value) -> Result<String, SendError> {
    let body = json!({"project": header["project"], "name": header["name"]});
    let created = sender.send(Method::Post, "runs", &body).await?;
    created["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| SendError::Unreachable("the server's answer has no run id".into()))
}

/// Remembers a run just created for a file: appended to it (a later replay
/// does not create it again) and, for a run the file does not finish, left
/// for the process that may still log to it.
fn created(mut file: &File, path: &Path, header: &Value, run_id: &str, finished: bool) -> io::Result<()> {
    let mut line =
        serde_json::to_vec(&json!({"type": "run_created", "run_id": run_id})).map_err(io::Error::other)?;
    line.push(b'\n');
    file.write_all(&line)?;
    file.sync_all()?;
    if let Some(local_id) = header["local_id"].as_str()
        && !finished
    {
        remember_created(path, local_id, run_id)?;
    }
    Ok(())
}
