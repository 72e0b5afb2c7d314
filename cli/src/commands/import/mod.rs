//! `gpuctl import`: runs kept elsewhere become GPUPlane runs, idempotently
//! (a second import adds nothing) and resumably (an import cut off goes on
//! where it stopped): `tensorboard` (a tree of event files) and `mlflow` (a
//! running MLflow tracking server). Both send points in batches whose ids
//! say where in the source they start, so the server stores each once.

mod mlflow;
mod tensorboard;

use crate::Output;
use crate::client::{CliError, Client};
use crate::exit::Failure;
use serde::Serialize;
use std::io::IsTerminal;
use std::path::Path;

#[derive(Debug, clap::Subcommand)]
pub enum ImportCommand {
    /// A tree of TensorBoard event files (a --logdir): one run per folder
    /// holding event files, named by its path; scalars become metrics and
    /// hparams the config. A second import of the same tree adds nothing,
    /// and an import cut off goes on where it stopped.
    Tensorboard(tensorboard::TensorboardArgs),
    /// Experiments and runs of a running MLflow tracking server: params,
    /// tags, metric histories, status and times, and with --artifacts the
    /// artifacts. Experiments become named experiments of the project. A
    /// second import adds nothing, and an import cut off goes on where it
    /// stopped.
    Mlflow(mlflow::MlflowArgs),
}

/// What one `gpuctl import` did.
#[derive(Debug, Serialize)]
pub struct ImportReport {
    pub project: String,
    pub runs: Vec<ImportedRun>,
    /// Points the server stored in this import (0 when it had them all).
    pub points_added: u64,
    /// Artifact files copied in this import (MLflow with --artifacts).
    pub artifacts_added: u64,
}

#[derive(Debug, Serialize)]
pub struct ImportedRun {
    /// The MLflow experiment the run came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
    /// The run's name (a TensorBoard run's: its folder under the one imported).
    pub name: String,
    pub run_id: String,
    /// `imported`; `resumed` (an earlier import was cut off); `skipped`
    /// (imported before).
    pub outcome: &'static str,
    pub points_added: u64,
    pub artifacts_added: u64,
    /// What was not imported and why: an event file cut short by a corrupt
    /// record (every point before it imported), artifacts MLflow's server
    /// does not serve.
    pub warnings: Vec<String>,
}

impl ImportedRun {
    fn new(experiment: Option<String>, name: String, run_id: String, outcome: &'static str) -> ImportedRun {
        ImportedRun {
            experiment,
            name,
            run_id,
            outcome,
            points_added: 0,
            artifacts_added: 0,
            warnings: Vec::new(),
        }
    }
}

pub async fn run(client: &Client, command: &ImportCommand, out: &Output) -> Result<(), CliError> {
    let progress = Progress {
        shown: !out.json && std::io::stderr().is_terminal(),
    };
    let report = match command {
        ImportCommand::Tensorboard(args) => tensorboard::import(client, args, &progress).await,
        ImportCommand::Mlflow(args) => mlflow::import(client, args, &progress).await,
    };
    progress.done();
    out.emit(&report?, show_report);
    Ok(())
}

/// A short id of a name (a file's, a metric key's) for batch ids, which
/// hold at most 200 characters.
fn short_id(name: &str) -> String {
    format!(
        "{:08x}{:04x}",
        gpuplane_tfevents::masked_crc(name.as_bytes()),
        name.len() & 0xffff
    )
}

/// `name` as one line of at most `max` characters, its control characters
/// (hostile or not) shown as `?`.
fn one_line(name: &str, max: usize) -> String {
    name.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(max)
        .collect()
}

fn unreadable(path: &Path, error: &std::io::Error) -> CliError {
    CliError::new(Failure::Other, "io_error", format!("{}: {error}", path.display()))
}

fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// One line on stderr, rewritten in place, while a terminal watches.
struct Progress {
    shown: bool,
}

impl Progress {
    fn show(&self, line: &str) {
        if self.shown {
            let line = gpuplane_api::terminal::visible(line);
            eprint!("\r\x1b[2K{line}");
        }
    }

    fn done(&self) {
        if self.shown {
            eprint!("\r\x1b[2K");
        }
    }
}

fn show_report(report: &ImportReport) -> String {
    let count = |outcome: &str| report.runs.iter().filter(|run| run.outcome == outcome).count();
    let mut text = format!(
        "{} run(s) into project {}: {} imported, {} resumed, {} already imported; {} point(s) added",
        report.runs.len(),
        report.project,
        count("imported"),
        count("resumed"),
        count("skipped"),
        report.points_added
    );
    if report.artifacts_added > 0 {
        text.push_str(&format!(", {} artifact file(s)", report.artifacts_added));
    }
    for run in &report.runs {
        let name = match &run.experiment {
            Some(experiment) => format!("{experiment} / {}", run.name),
            None => run.name.clone(),
        };
        text.push_str(&format!(
            "\n  {}  {}  {name}  {} point(s)",
            run.run_id, run.outcome, run.points_added
        ));
        for warning in &run.warnings {
            text.push_str(&format!("\n    warning: {warning}"));
        }
    }
    text
}
