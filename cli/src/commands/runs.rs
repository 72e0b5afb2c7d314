//! `gpuctl run show RUN`: a run's status, latest value per metric (with a
//! visible marker on NaN and infinities), checkpoints and recent events;
//! `gpuctl run explain-failure RUN` and `gpuctl run diagnose RUN`. Each takes
//! a run id or the id of the job that made the run.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::Page;
use gpuplane_api::diagnosis::{Diagnosis, Evidence, FailureExplanation};
use gpuplane_api::event::Event;
use gpuplane_api::job::Job;
use gpuplane_api::metric::{Checkpoint, Run};
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, clap::Subcommand)]
pub enum RunCommand {
    /// Status, latest metrics, checkpoints and recent events of a run.
    Show { run_id: String },
    /// Why a failed run failed, the evidence, and what to change before retrying.
    ExplainFailure { run_id: String },
    /// What looks wrong with a run, running or ended: NaN or diverging loss,
    /// silence, idle GPUs, a lost host, and the failure if it failed.
    Diagnose { run_id: String },
}

#[derive(Serialize)]
struct RunView {
    run: Run,
    checkpoints: Vec<Checkpoint>,
    events: Vec<Event>,
}

pub async fn run(client: &Client, command: RunCommand, out: &Output) -> Result<(), CliError> {
    match command {
        RunCommand::Show { run_id } => {
            let run_id = resolve(client, run_id).await?;
            let run: Run = client.get(&format!("runs/{run_id}")).await?;
            let checkpoints: Page<Checkpoint> = client.get(&format!("runs/{run_id}/checkpoints")).await?;
            let events: Page<Event> = client.get(&format!("events?run_id={run_id}&limit=10")).await?;
            let view = RunView {
                run,
                checkpoints: checkpoints.items,
                events: events.items,
            };
            out.emit(&view, render);
        }
        RunCommand::ExplainFailure { run_id } => {
            let run_id = resolve(client, run_id).await?;
            let explanation: FailureExplanation = client.get(&format!("runs/{run_id}/failure")).await?;
            out.emit(&explanation, render_failure);
        }
        RunCommand::Diagnose { run_id } => {
            let run_id = resolve(client, run_id).await?;
            let diagnosis: Diagnosis = client.get(&format!("runs/{run_id}/diagnosis")).await?;
            out.emit(&diagnosis, render_diagnosis);
        }
    }
    Ok(())
}

/// A run id as given, or the run of a job id.
async fn resolve(client: &Client, id: String) -> Result<String, CliError> {
    if id.starts_with("job_") {
        let job: Job = client.get(&format!("jobs/{id}")).await?;
        return Ok(job.run_id);
    }
    Ok(id)
}

fn render_failure(explanation: &FailureExplanation) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{}  [{}]", explanation.summary, explanation.category);
    let _ = writeln!(
        text,
        "run {}{}  status {}{}",
        explanation.run_id,
        explanation
            .job_id
            .as_deref()
            .map(|j| format!("  job {j}"))
            .unwrap_or_default(),
        explanation.status,
        explanation
            .failure_reason
            .as_deref()
            .map(|r| format!("  ({r})"))
            .unwrap_or_default()
    );
    write_evidence(&mut text, &explanation.evidence);
    if !explanation.likely_causes.is_empty() {
        let _ = writeln!(text, "\nlikely causes");
        for cause in &explanation.likely_causes {
            let _ = writeln!(text, "  - {cause}");
        }
    }
    if !explanation.actions.is_empty() {
        let _ = writeln!(text, "\nwhat to do");
        for (i, action) in explanation.actions.iter().enumerate() {
            let _ = writeln!(text, "  {}. {action}", i + 1);
        }
    }
    let _ = writeln!(text, "\nretry: {}", explanation.retry_advice);
    text
}

fn render_diagnosis(diagnosis: &Diagnosis) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "run {}  status {}", diagnosis.run_id, diagnosis.status);
    if diagnosis.findings.is_empty() {
        let _ = writeln!(text, "nothing looks wrong");
    }
    for finding in &diagnosis.findings {
        let _ = writeln!(
            text,
            "\n{:<8} {}  {}",
            finding.severity.as_str(),
            finding.kind,
            finding.summary
        );
        write_evidence(&mut text, &finding.evidence);
    }
    if let Some(failure) = &diagnosis.failure {
        let _ = writeln!(text, "\n--- why it failed ---");
        text.push_str(&render_failure(failure));
    }
    text
}

fn write_evidence(text: &mut String, evidence: &[Evidence]) {
    if evidence.is_empty() {
        return;
    }
    let _ = writeln!(text, "evidence");
    for item in evidence {
        let _ = match item {
            Evidence::Log {
                attempt,
                stream,
                n,
                text: line,
            } => writeln!(text, "  attempt {attempt} {} line {n}: {line}", stream.as_str()),
            Evidence::Event {
                time,
                event_kind,
                message,
            } => writeln!(text, "  event {time} {event_kind}: {message}"),
            Evidence::Metric { key, step, value } => {
                writeln!(text, "  metric {key} = {} at step {step}", value.describe())
            }
            Evidence::Job { text: fact } => writeln!(text, "  {fact}"),
        };
    }
}

fn render(view: &RunView) -> String {
    let run = &view.run;
    let mut text = String::new();
    let _ = writeln!(text, "{}  {}  (project {})", run.id, run.name, run.project);
    let _ = writeln!(
        text,
        "status  {}{}",
        run.status,
        run.job_id
            .as_deref()
            .map(|j| format!("   job {j}"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        text,
        "primary metric  {}",
        run.primary_metric.as_deref().unwrap_or("none")
    );
    if run.latest.is_empty() {
        let _ = writeln!(
            text,
            "metrics  none yet: write TensorBoard events into a watch dir (--watch) or call run.log() from the SDK"
        );
    } else {
        let width = run.latest.keys().map(String::len).max().unwrap_or(0);
        let _ = writeln!(text, "metrics (latest)");
        for (key, latest) in &run.latest {
            let marker = if latest.non_finite { "  [non-finite]" } else { "" };
            let bad = if latest.non_finite_count > 0 {
                format!(
                    "  ({} of {} points non-finite)",
                    latest.non_finite_count, latest.count
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                text,
                "  {key:<width$}  step {:<8} {}{marker}{bad}",
                latest.step,
                latest.value.describe()
            );
        }
    }
    if !view.checkpoints.is_empty() {
        let _ = writeln!(text, "checkpoints");
        for checkpoint in &view.checkpoints {
            let step = checkpoint.step.map_or("-".to_string(), |s| s.to_string());
            let shared = if checkpoint.shared_with.is_empty() {
                String::new()
            } else {
                format!("  [shared with {}]", checkpoint.shared_with.join(", "))
            };
            let _ = writeln!(
                text,
                "  step {step:<8} {}  {} bytes{shared}",
                checkpoint.path, checkpoint.size
            );
        }
    }
    if !view.events.is_empty() {
        let _ = writeln!(text, "recent events");
        for event in &view.events {
            let _ = writeln!(
                text,
                "  {}  {:<8} {:<18} {}",
                event.time,
                event.severity.as_str(),
                event.kind.as_str(),
                event.message
            );
        }
    }
    text
}
