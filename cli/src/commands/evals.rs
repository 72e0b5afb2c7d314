//! `gpuctl eval create --run R --checkpoint PATH -- CMD…`, `gpuctl eval list
//! [--run R]` and `gpuctl eval show JOB`: evaluations of checkpoints, whose
//! results become `eval/` metrics of the run.

use crate::Output;
use crate::client::{CliError, Client};
use crate::commands::jobs::key_value;
use gpuplane_api::Page;
use gpuplane_api::evaluation::{Evaluation, NewEvaluation};
use gpuplane_api::job::Resources;
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Debug, clap::Subcommand)]
pub enum EvalCommand {
    /// Evaluate a checkpoint of a run. The command gets GPUCTL_CHECKPOINT (the
    /// path) and GPUCTL_EVAL_OUTPUT (where to write {"metrics": {...}}).
    Create {
        /// The run whose checkpoint to evaluate.
        #[arg(long = "run")]
        run_id: String,
        /// The checkpoint's path as the run recorded it (`gpuctl run show RUN`).
        #[arg(long)]
        checkpoint: String,
        /// GPUs on one node; 0 runs in the cpu_only lane.
        #[arg(long, default_value_t = 0)]
        gpus: i64,
        /// Absolute path on the agent host.
        #[arg(long = "workdir", alias = "working-dir")]
        working_dir: Option<String>,
        /// Environment variable for the job, KEY=VALUE (repeatable).
        #[arg(long = "env", value_parser = key_value)]
        env: Vec<(String, String)>,
        /// Node label the job needs, KEY=VALUE (repeatable). Default: the node
        /// that wrote the checkpoint.
        #[arg(long = "selector", value_parser = key_value)]
        selector: Vec<(String, String)>,
        /// Run on any node (the checkpoint is on a shared filesystem).
        #[arg(long, conflicts_with = "selector")]
        any_node: bool,
        /// Job name (default: eval <run name> @ <step>).
        #[arg(long)]
        name: Option<String>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Evaluations, newest first.
    List {
        /// Only evaluations of this run.
        #[arg(long = "run")]
        run_id: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One evaluation: its status, step and metrics, or why its result was refused.
    Show { job_id: String },
}

pub async fn run(client: &Client, command: EvalCommand, out: &Output) -> Result<(), CliError> {
    match command {
        EvalCommand::Create {
            run_id,
            checkpoint,
            gpus,
            working_dir,
            env,
            selector,
            any_node,
            name,
            command,
        } => {
            let node_selector = if any_node || !selector.is_empty() {
                Some(selector.into_iter().collect())
            } else {
                None
            };
            let request = NewEvaluation {
                run_id,
                checkpoint,
                command,
                working_dir,
                resources: Resources {
                    gpu: gpus,
                    ..Resources::default()
                },
                env: env.into_iter().collect(),
                node_selector,
                name,
            };
            let evaluation: Evaluation = client.post("evaluations", &request).await?;
            out.emit(&evaluation, |e| {
                format!(
                    "{} queued: evaluates {} of run {} (results at step {}).\n\
                     Follow it: gpuctl logs -f {}   Result: gpuctl eval show {}",
                    e.job_id, e.checkpoint, e.run_id, e.step, e.job_id, e.job_id
                )
            });
        }
        EvalCommand::List { run_id, limit } => {
            let mut path = format!("evaluations?limit={limit}");
            if let Some(run_id) = run_id {
                path.push_str(&format!("&run_id={run_id}"));
            }
            let page: Page<Evaluation> = client.get(&path).await?;
            out.emit(&page, |page| render_list(&page.items));
        }
        EvalCommand::Show { job_id } => {
            let evaluation: Evaluation = client.get(&format!("evaluations/{job_id}")).await?;
            out.emit(&evaluation, render);
        }
    }
    Ok(())
}

fn metrics_text(metrics: &BTreeMap<String, gpuplane_api::metric::Value>) -> String {
    let parts: Vec<String> = metrics
        .iter()
        .map(|(name, value)| format!("{name}={}", value.describe()))
        .collect();
    parts.join(" ")
}

fn render_list(items: &[Evaluation]) -> String {
    if items.is_empty() {
        return "No evaluations. Start one: gpuctl eval create --run RUN --checkpoint PATH -- CMD\n".into();
    }
    let mut text = format!(
        "{:<30} {:<30} {:<10} {:>8}  {}\n",
        "JOB", "RUN", "STATUS", "STEP", "METRICS / CHECKPOINT"
    );
    for e in items {
        let detail = if e.metrics.is_empty() {
            e.checkpoint.clone()
        } else {
            metrics_text(&e.metrics)
        };
        let _ = writeln!(
            text,
            "{:<30} {:<30} {:<10} {:>8}  {detail}",
            e.job_id, e.run_id, e.status, e.step
        );
    }
    text
}

fn render(e: &Evaluation) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{}  {}", e.job_id, e.status);
    let _ = writeln!(text, "run         {}", e.run_id);
    let _ = writeln!(text, "checkpoint  {}", e.checkpoint);
    let _ = writeln!(text, "step        {}", e.step);
    if !e.metrics.is_empty() {
        let _ = writeln!(text, "metrics (recorded on the run as eval/<name>)");
        for (name, value) in &e.metrics {
            let _ = writeln!(text, "  {name}  {}", value.describe());
        }
    }
    if let Some(detail) = &e.failure_detail {
        let _ = writeln!(text, "failed: {detail}");
        let _ = writeln!(
            text,
            "why and what to do: gpuctl run explain-failure {}",
            e.job_id
        );
    }
    text
}
