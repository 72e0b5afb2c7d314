//! `gpuctl import tensorboard DIR`: a tree of TensorBoard event files
//! becomes runs of a project, one per folder that holds event files
//! (TensorBoard's own notion of a run), named by the folder's path under
//! DIR. Scalars become points with their tags, steps and wall times (NaN and
//! ±Inf kept); the `hparams` plugin's values become the run's config. The
//! files are read by the agent's reader (`gpuplane-tfevents`).
//!
//! Idempotent and resumable: each run carries the tag `imported` and its
//! source in its config (`import.source`: `tensorboard:HOST:/abs/folder`). A
//! finished run is skipped; an unfinished one (an import cut off) is sent
//! again, and each batch's id (the file and the offset it starts at) lets
//! the server add nothing twice. Import finished training: a job still
//! writing its files is watched by the agent (`watch_dirs`) instead.

use super::{ImportReport, ImportedRun, Progress, encode, short_id, unreadable};
use crate::client::{CliError, Client};
use crate::exit::Failure;
use gpuplane_api::Page;
use gpuplane_api::metric::{Batch, IngestResult, NewRun, Point, Run, Value};
use gpuplane_tfevents::{EventFile, is_event_file};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct TensorboardArgs {
    /// The folder to read, as TensorBoard's --logdir.
    pub dir: PathBuf,
    /// The project the runs go to (you must be one of its editors).
    #[arg(long, default_value = "default")]
    pub project: String,
}

/// The tag every imported run carries.
pub const IMPORTED_TAG: &str = "imported";
/// The config key that says where an imported run came from.
pub const SOURCE_KEY: &str = "import.source";
/// Points sent in one request.
const BATCH_POINTS: usize = 20_000;

pub async fn import(
    client: &Client,
    args: &TensorboardArgs,
    progress: &Progress,
) -> Result<ImportReport, CliError> {
    let root = std::fs::canonicalize(&args.dir).map_err(|error| unreadable(&args.dir, &error))?;
    if !root.is_dir() {
        return Err(CliError::new(
            Failure::Invalid,
            "invalid_input",
            format!("{} is not a folder", root.display()),
        ));
    }
    let folders = folders_with_event_files(&root)?;
    if folders.is_empty() {
        return Err(CliError::new(
            Failure::Invalid,
            "invalid_input",
            format!(
                "no TensorBoard event files (events.out.tfevents.*) under {}",
                root.display()
            ),
        ));
    }
    let host = host_name();
    let imported = imported_runs(client, &args.project).await?;
    let mut report = ImportReport {
        project: args.project.clone(),
        runs: Vec::new(),
        points_added: 0,
        artifacts_added: 0,
    };
    for (index, (folder, files)) in folders.iter().enumerate() {
        let name = run_name(&root, folder);
        let source = format!("tensorboard:{host}:{}", folder.display());
        progress.show(&format!("[{}/{}] {name}", index + 1, folders.len()));
        let (run_id, outcome) = match imported.get(&source) {
            Some(run) if run.status == "FINISHED" => {
                report
                    .runs
                    .push(ImportedRun::new(None, name, run.id.clone(), "skipped"));
                continue;
            }
            Some(run) => (run.id.clone(), "resumed"),
            None => (
                create_run(client, &args.project, &name, &source).await?,
                "imported",
            ),
        };
        let mut run = ImportedRun::new(None, name, run_id, outcome);
        let mut hparams = BTreeMap::new();
        for file in files {
            send_file(
                client,
                &mut run,
                file,
                &mut hparams,
                progress,
                index,
                folders.len(),
            )
            .await?;
        }
        if !hparams.is_empty() {
            let _: serde_json::Value = client
                .post(
                    &format!("runs/{}/config", run.run_id),
                    &serde_json::json!({"config": hparams}),
                )
                .await?;
        }
        let _: serde_json::Value = client
            .post(&format!("runs/{}/finish", run.run_id), &serde_json::json!({}))
            .await?;
        report.points_added += run.points_added;
        report.runs.push(run);
    }
    Ok(report)
}

/// Sends one event file's scalars to `run`, in batches named by the file and
/// where they start in it; adds the file's hyperparameters to `hparams`.
async fn send_file(
    client: &Client,
    run: &mut ImportedRun,
    path: &Path,
    hparams: &mut BTreeMap<String, serde_json::Value>,
    progress: &Progress,
    index: usize,
    of: usize,
) -> Result<(), CliError> {
    let file_name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let file_id = short_id(&file_name);
    let mut events = EventFile::new(path, 0);
    loop {
        let start = events.offset;
        let found = events.read().map_err(|error| unreadable(path, &error))?;
        hparams.extend(found.hparams);
        for (part, scalars) in found.scalars.chunks(BATCH_POINTS).enumerate() {
            let batch = Batch {
                batch_id: format!("tensorboard:{file_id}:{start}:{part}"),
                points: scalars
                    .iter()
                    .map(|scalar| Point {
                        key: found.tags[scalar.tag as usize].clone(),
                        step: scalar.step,
                        wall_time: scalar.wall_time,
                        value: Value(scalar.value),
                    })
                    .collect(),
                texts: Vec::new(),
            };
            let answer: IngestResult = client
                .post(&format!("runs/{}/metrics", run.run_id), &batch)
                .await
                .map_err(|error| in_file(error, path))?;
            run.points_added += answer.accepted;
            progress.show(&format!(
                "[{}/{of}] {}: {} point(s) added",
                index + 1,
                run.name,
                run.points_added
            ));
        }
        if found.end == start {
            break;
        }
    }
    if let Some(corrupt) = &events.corrupt {
        run.warnings.push(format!(
            "{}: stopped at byte {}: {}",
            path.display(),
            corrupt.offset,
            corrupt.reason
        ));
    }
    Ok(())
}

/// The folders under `root` (itself included) that hold event files, with
/// those files, in name order. Links are not followed.
fn folders_with_event_files(root: &Path) -> Result<Vec<(PathBuf, Vec<PathBuf>)>, CliError> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let mut files = Vec::new();
        let entries = std::fs::read_dir(&folder).map_err(|error| unreadable(&folder, &error))?;
        for entry in entries {
            let entry = entry.map_err(|error| unreadable(&folder, &error))?;
            let kind = entry
                .file_type()
                .map_err(|error| unreadable(&entry.path(), &error))?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() && is_event_file(&entry.file_name().to_string_lossy()) {
                files.push(entry.path());
            }
        }
        if !files.is_empty() {
            files.sort();
            found.push((folder, files));
        }
    }
    found.sort();
    Ok(found)
}

/// The run's name: the folder's path under `root`, or `root`'s own name;
/// one line of at most 200 characters.
fn run_name(root: &Path, folder: &Path) -> String {
    let relative = folder.strip_prefix(root).unwrap_or(folder);
    let name = if relative.as_os_str().is_empty() {
        root.file_name()
            .map_or_else(|| "tensorboard".into(), |name| name.to_string_lossy())
    } else {
        relative.to_string_lossy()
    };
    super::one_line(&name, gpuplane_api::experiment::MAX_RUN_NAME_LEN)
}

/// The runs of `project` made by an import, by their source.
async fn imported_runs(client: &Client, project: &str) -> Result<BTreeMap<String, Run>, CliError> {
    let mut runs = BTreeMap::new();
    let mut before = None;
    loop {
        let mut path = format!("runs?project={}&tag={IMPORTED_TAG}&limit=500", encode(project));
        if let Some(cursor) = before {
            path.push_str(&format!("&before={cursor}"));
        }
        let page: Page<Run> = client.get(&path).await?;
        for run in page.items {
            if let Some(serde_json::Value::String(source)) = run.config.get(SOURCE_KEY) {
                runs.insert(source.clone(), run);
            }
        }
        match page.next_before {
            Some(cursor) => before = Some(cursor),
            None => return Ok(runs),
        }
    }
}

async fn create_run(client: &Client, project: &str, name: &str, source: &str) -> Result<String, CliError> {
    let new = NewRun {
        project: project.to_string(),
        name: name.to_string(),
        config: BTreeMap::from([(SOURCE_KEY.to_string(), serde_json::Value::from(source))]),
        tags: vec![IMPORTED_TAG.to_string()],
        notes: String::new(),
    };
    let created: serde_json::Value = client.post("runs", &new).await?;
    Ok(created["id"].as_str().unwrap_or_default().to_string())
}

/// This machine's name, so that the same path on two machines is two sources.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_default()
}

/// A refusal while sending `path`'s points, naming the file.
fn in_file(mut error: CliError, path: &Path) -> CliError {
    error.error.message = format!("{}: {}", path.display(), error.error.message);
    error
}
