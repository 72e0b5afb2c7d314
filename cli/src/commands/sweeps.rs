//! Sweeps from the terminal: `gpuctl sweep create -f sweep.yaml` (a W&B
//! sweep file with the job to run under `job`), `list`, `show ID` (the best
//! trial, then every trial), `pause`, `resume` and `stop ID --confirm`.

use crate::Output;
use crate::client::{CliError, Client};
use crate::exit::Failure;
use clap::{Args, Subcommand};
use gpuplane_api::Page;
use gpuplane_api::job::CancelRequest;
use gpuplane_api::sweep::{EarlyStop, Params, Sweep, SweepAction, SweepSpec, Trial};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Create a sweep from a sweep file (.yaml, .yml or .json): W&B's keys
    /// (method, metric, parameters, early_terminate, run_cap, program,
    /// command) and the job each trial runs under `job`.
    Create(CreateArgs),
    /// Sweeps, newest first.
    List(ListArgs),
    /// A sweep: its best trial, then each trial's parameters, state, metric
    /// and the rungs it reached.
    Show { id: String },
    /// Make no new trials; running ones go on (and may still be stopped early).
    Pause { id: String },
    /// Make trials again.
    Resume { id: String },
    /// End the sweep and cancel its queued and running trials.
    Stop {
        id: String,
        /// Needed: running trials get SIGTERM, then SIGKILL after the grace period.
        #[arg(long)]
        confirm: bool,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The sweep file.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// The project of the sweep and its trials (else the file's, else `default`).
    #[arg(long)]
    project: Option<String>,
    /// Trials in all, instead of the file's `run_cap` (or `max_trials`).
    #[arg(long)]
    max_trials: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this project's sweeps.
    #[arg(long)]
    project: Option<String>,
    /// How many, 1–500.
    #[arg(long, default_value_t = 50)]
    limit: i64,
}

pub async fn run(client: &Client, command: SweepCommand, out: &Output) -> Result<(), CliError> {
    match command {
        SweepCommand::Create(args) => {
            let mut spec = read_sweep_file(&args.file)?;
            if let Some(project) = args.project {
                spec.project = Some(project);
            }
            if let Some(max_trials) = args.max_trials {
                spec.max_trials = Some(max_trials);
            }
            let folder = run_beside_the_file(&mut spec, &args.file);
            let sweep: Sweep = client.post("sweeps", &spec).await?;
            out.emit(&sweep, |sweep| {
                let folder = folder
                    .as_ref()
                    .map(|f| format!("Trials run {} in {f} on the agent's host.\n", spec.program.as_deref().unwrap_or("")))
                    .unwrap_or_default();
                format!(
                    "Created sweep {} ({} trials at most); trials start within a second.\n{folder}Follow it: gpuctl sweep show {}",
                    sweep.id, sweep.max_trials, sweep.id
                )
            });
        }
        SweepCommand::List(args) => {
            let mut query = form_urlencoded::Serializer::new(format!("limit={}", args.limit));
            if let Some(project) = &args.project {
                query.append_pair("project", project);
            }
            let page: Page<Sweep> = client.get(&format!("sweeps?{}", query.finish())).await?;
            out.emit(&page, |page| list_text(&page.items));
        }
        SweepCommand::Show { id } => {
            let sweep: Sweep = client.get(&format!("sweeps/{id}")).await?;
            out.emit(&sweep, show_text);
        }
        SweepCommand::Pause { id } => act(client, &id, SweepAction::Pause, false, out).await?,
        SweepCommand::Resume { id } => act(client, &id, SweepAction::Resume, false, out).await?,
        SweepCommand::Stop { id, confirm } => act(client, &id, SweepAction::Stop, confirm, out).await?,
    }
    Ok(())
}

async fn act(
    client: &Client,
    id: &str,
    action: SweepAction,
    confirm: bool,
    out: &Output,
) -> Result<(), CliError> {
    let sweep: Sweep = client
        .post(&format!("sweeps/{id}/{action}"), &CancelRequest { confirm })
        .await?;
    out.emit(&sweep, |sweep| {
        let why = sweep
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        format!("Sweep {} is {}{why}.", sweep.id, sweep.state)
    });
    Ok(())
}

/// A W&B file names its `program` beside it: without a `job.working_dir`,
/// trials run in the file's folder (its absolute path, as on this host).
/// Returns that folder when it was set.
fn run_beside_the_file(spec: &mut SweepSpec, file: &std::path::Path) -> Option<String> {
    if spec.program.is_none() || spec.job.contains_key("working_dir") {
        return None;
    }
    let folder = std::path::absolute(file).ok()?.parent()?.to_str()?.to_string();
    spec.job
        .insert("working_dir".into(), serde_json::Value::String(folder.clone()));
    Some(folder)
}

/// A sweep file (.yaml, .yml or .json); an unknown key is named with the
/// closest known one.
fn read_sweep_file(path: &std::path::Path) -> Result<SweepSpec, CliError> {
    let invalid = |message: String| CliError::new(Failure::Invalid, "invalid_spec", message);
    let text = std::fs::read_to_string(path)
        .map_err(|error| invalid(format!("cannot read {}: {error}", path.display())))?;
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
    let parsed: Result<SweepSpec, String> = match extension {
        "yaml" | "yml" => serde_yaml::from_str(&text).map_err(|e| e.to_string()),
        "json" => serde_json::from_str(&text).map_err(|e| e.to_string()),
        _ => Err("a sweep file ends in .yaml, .yml or .json".into()),
    };
    parsed.map_err(|error| {
        let hint = super::jobs::did_you_mean(&error)
            .map(|hint| format!(" ({hint})"))
            .unwrap_or_default();
        invalid(format!("{}: {}{hint}", path.display(), error.trim_end()))
    })
}

fn list_text(sweeps: &[Sweep]) -> String {
    if sweeps.is_empty() {
        return "No sweeps.".into();
    }
    let mut text = format!(
        "{:<30} {:<20} {:<9} {:<7} {:>7}  BEST\n",
        "ID", "NAME", "STATE", "METHOD", "TRIALS"
    );
    for sweep in sweeps {
        let made: u32 = sweep.trial_states.values().sum();
        text.push_str(&format!(
            "{:<30} {:<20} {:<9} {:<7} {:>7}  {}\n",
            sweep.id,
            sweep.name,
            sweep.state,
            sweep.method,
            format!("{made}/{}", sweep.max_trials),
            best_text(sweep)
        ));
    }
    text
}

fn best_text(sweep: &Sweep) -> String {
    match (&sweep.best, &sweep.metric) {
        (Some(best), Some(metric)) => format!(
            "trial {}: {} {}",
            best.number,
            metric.name,
            best.value.map_or("-".into(), |v| v.to_string())
        ),
        _ => "-".into(),
    }
}

fn params_text(params: &Params) -> String {
    params
        .iter()
        .map(|(name, value)| format!("{name}={}", gpuplane_api::sweep::render(value)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn show_text(sweep: &Sweep) -> String {
    let why = sweep
        .reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    let metric = sweep.metric.as_ref().map_or("none".to_string(), |m| {
        let goal = match m.goal {
            gpuplane_api::metric::Goal::Min => "minimize",
            gpuplane_api::metric::Goal::Max => "maximize",
        };
        format!("{} ({goal})", m.name)
    });
    let early = match sweep.early_terminate {
        None => "none".to_string(),
        Some(EarlyStop::Asha {
            min_step,
            reduction_factor,
            ..
        }) => format!(
            "asha (first rung at step {}, η {reduction_factor})",
            min_step.map_or("auto".into(), |s| s.to_string())
        ),
        Some(EarlyStop::Hyperband {
            min_step,
            max_step,
            reduction_factor,
            ..
        }) => format!("hyperband (steps {min_step} to {max_step}, η {reduction_factor})"),
    };
    let states: Vec<String> = sweep
        .trial_states
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    let made: u32 = sweep.trial_states.values().sum();
    let mut text = format!(
        "{}  {}  (project {})  {}{why}\nmethod     {}, seed {}\nmetric     {metric}\nearly stop {early}\ntrials     {made} of {}: {}\n",
        sweep.id,
        sweep.name,
        sweep.project,
        sweep.state,
        sweep.method,
        sweep.seed,
        sweep.max_trials,
        if states.is_empty() {
            "none yet".into()
        } else {
            states.join(", ")
        },
    );
    if let Some(best) = &sweep.best {
        text.push_str(&format!(
            "best       trial {} ({}): {} at step {}  {}\n",
            best.number,
            best.job_id,
            best.value.map_or("-".into(), |v| v.to_string()),
            best.step.map_or("-".into(), |s| s.to_string()),
            params_text(&best.params)
        ));
    }
    if !sweep.trials.is_empty() {
        text.push_str(&format!(
            "\n{:>4} {:<10} {:>12} {:>7} {:>5}  PARAMS\n",
            "#", "STATE", "VALUE", "STEP", "RUNGS"
        ));
        for trial in &sweep.trials {
            text.push_str(&trial_line(trial));
        }
    }
    text
}

fn trial_line(trial: &Trial) -> String {
    let state = match trial.failure_reason.as_deref() {
        Some("SWEEP_PRUNED") => "PRUNED",
        _ => trial.state.as_str(),
    };
    format!(
        "{:>4} {:<10} {:>12} {:>7} {:>5}  {}\n",
        trial.number,
        state,
        trial.value.map_or("-".into(), |v| format!("{v:.6}")),
        trial.step.map_or("-".into(), |s| s.to_string()),
        trial.rungs.len(),
        params_text(&trial.params)
    )
}
