//! `gpuctl run show RUN`: a run's status, latest value per metric (with a
//! visible marker on NaN and infinities), checkpoints and recent events.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::Page;
use gpuplane_api::event::Event;
use gpuplane_api::metric::{Checkpoint, Run};
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, clap::Subcommand)]
pub enum RunCommand {
    /// Status, latest metrics, checkpoints and recent events of a run.
    Show { run_id: String },
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
    }
    Ok(())
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
