//! Sweeps: a search over a space of parameters whose trials are ordinary
//! jobs. The file is W&B's sweep file (`method`, `metric`, `parameters`,
//! `early_terminate`, `run_cap`, `program`, `command`) with the job to run
//! in `job`, so a W&B sweep works with at most that section changed.
//! [`SweepSpec::check`] turns the file into a [`Checked`] sweep or says
//! what is wrong with each field.

mod space;

pub use space::{Distribution, Parameter, Scale};

use crate::error::FieldError;
use crate::metric::Goal;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The most trials one sweep may run.
pub const MAX_TRIALS: u32 = 10_000;
/// The most trials of one sweep at once.
pub const MAX_CONCURRENT: u32 = 1_000;
/// The most parameters one sweep may search.
pub const MAX_PARAMETERS: usize = 64;
/// The most values one categorical parameter may list.
pub const MAX_VALUES: usize = 1_000;
/// W&B's default command: `/usr/bin/env python PROGRAM --name=value …`.
pub const DEFAULT_COMMAND: [&str; 4] = ["${env}", "${interpreter}", "${program}", "${args}"];
/// The reduction factor (W&B's `eta`) when the file gives none: W&B's.
pub const DEFAULT_REDUCTION_FACTOR: u32 = 3;

/// How trials' parameters are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Every combination of the parameters' values, in order.
    Grid,
    /// Each trial drawn independently.
    Random,
    /// Tree-structured Parzen estimators: after 10 random trials, each
    /// trial is drawn where finished trials did well (running ones count
    /// as doing badly until they finish, so concurrent trials spread out).
    /// W&B's `bayes` is read as `tpe`.
    #[serde(alias = "bayes")]
    Tpe,
}

names!("method", Method {
    Grid => "grid",
    Random => "random",
    Tpe => "tpe",
});

/// The metric trials are judged by: the value each trial logs under `name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MetricGoal {
    pub name: String,
    /// `minimize` (default) or `maximize` (also `min`, `max`).
    #[serde(default = "minimize")]
    pub goal: Goal,
    /// The sweep finishes once a trial's metric reaches this (W&B's `target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<f64>,
}

fn minimize() -> Goal {
    Goal::Min
}

/// Stopping trials early, on the rungs ASHA or Hyperband set, as Optuna's
/// `SuccessiveHalvingPruner` and `HyperbandPruner` do. W&B's names are
/// read too: `min_iter`, `max_iter`, `eta`, `s`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EarlyTerminateSpec {
    /// `asha` or `hyperband`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The first rung, in steps (ASHA without it: a hundredth of the
    /// longest finished trial, once one has finished, as Optuna's `auto`).
    #[serde(default, alias = "min_iter", skip_serializing_if = "Option::is_none")]
    pub min_step: Option<u64>,
    /// The longest a trial runs, in steps (Hyperband needs it, or `s`).
    #[serde(default, alias = "max_iter", skip_serializing_if = "Option::is_none")]
    pub max_step: Option<u64>,
    /// η: a rung keeps the best 1/η of the trials that reached it (default 3).
    #[serde(default, alias = "eta", skip_serializing_if = "Option::is_none")]
    pub reduction_factor: Option<u32>,
    /// Hyperband's number of brackets (W&B's `s`), instead of `max_step`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<u32>,
    /// ASHA: the first rung is `min_step · η^rate` (Optuna's `min_early_stopping_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_early_stopping_rate: Option<u32>,
    /// A trial is stopped at a rung fewer than this many trials reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_count: Option<u32>,
    /// W&B's `strict`: accepted, and has no effect (the rules are Optuna's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A sweep file, as `POST /api/v1/sweeps` takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Default: the program's name, else `sweep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The project of the sweep and its trials (W&B's `project`); `job.project`
    /// may say it instead. Default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// W&B's team name: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    pub method: Method,
    /// Needed by `tpe` and `early_terminate`, and for a best trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<MetricGoal>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub parameters: BTreeMap<String, Value>,
    /// Trials in all (W&B's `run_cap`); grid defaults to every combination.
    #[serde(default, alias = "run_cap", skip_serializing_if = "Option::is_none")]
    pub max_trials: Option<u32>,
    /// Trials at once (default: as many as the queue will start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// The sweep stops after this many failed trials (default: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_terminate: Option<EarlyTerminateSpec>,
    /// W&B's script: `${program}` in `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// W&B's command with its macros (`${env}`, `${interpreter}`,
    /// `${program}`, `${args}`, `${args_no_hyphens}`, `${args_json}`),
    /// used when `job` has no `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Random and TPE draws are the same for the same seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The job each trial runs: a job spec, whose `name` and `command` may
    /// be left out (they come from the sweep). `${NAME}` in its command
    /// becomes the trial's value of parameter NAME.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub job: Map<String, Value>,
}

/// How trials are stopped early, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum EarlyStop {
    /// Rung r at `min_step · η^(rate + r)`; `min_step` None: Optuna's `auto`.
    Asha {
        min_step: Option<u64>,
        reduction_factor: u32,
        min_early_stopping_rate: u32,
        bootstrap_count: u32,
    },
    /// Brackets of ASHA with rates 0, 1, …, each trial in one.
    Hyperband {
        min_step: u64,
        max_step: u64,
        reduction_factor: u32,
        bootstrap_count: u32,
    },
}

/// A sweep file that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub name: String,
    pub project: String,
    pub method: Method,
    pub metric: Option<MetricGoal>,
    pub parameters: Vec<Parameter>,
    pub max_trials: u32,
    pub max_concurrent: Option<u32>,
    pub max_failures: Option<u32>,
    pub early_stop: Option<EarlyStop>,
    /// The job template with its name and command (macros not yet filled).
    pub job: Map<String, Value>,
    /// W&B's `program`, for `${program}` in the command.
    pub program: Option<String>,
    pub seed: u64,
}

impl SweepSpec {
    /// Checks every field; `seed` is used when the file gives none.
    pub fn check(&self, seed: u64) -> Result<Checked, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut bad = |field: &str, message: String| {
            errors.push(FieldError {
                field: field.to_string(),
                message,
            })
        };
        let program_name = self.program.as_deref().map(|program| {
            let file = program.rsplit('/').next().unwrap_or(program);
            file.rsplit_once('.').map_or(file, |(stem, _)| stem).to_string()
        });
        let name = self
            .name
            .clone()
            .or(program_name)
            .unwrap_or_else(|| "sweep".to_string());
        if name.trim().is_empty() || name.chars().count() > crate::spec::MAX_NAME_LEN {
            bad(
                "name",
                format!("must be 1 to {} characters", crate::spec::MAX_NAME_LEN),
            );
        }
        let project = match (&self.project, self.job.get("project")) {
            (Some(project), Some(Value::String(job))) if project != job => {
                bad(
                    "project",
                    format!("is {project} but job.project is {job}: give one"),
                );
                project.clone()
            }
            (Some(project), _) => project.clone(),
            (None, Some(Value::String(job))) => job.clone(),
            (None, _) => "default".to_string(),
        };
        let mut parameters = Vec::new();
        if self.parameters.is_empty() {
            bad("parameters", "name at least one parameter to search".into());
        } else if self.parameters.len() > MAX_PARAMETERS {
            bad("parameters", format!("at most {MAX_PARAMETERS} parameters"));
        }
        for (name, value) in &self.parameters {
            let field = format!("parameters.{name}");
            if !space::is_name(name) {
                bad(
                    &field,
                    "a parameter's name is letters, digits, `_`, `-` and `.`, starting with a letter or `_`"
                        .into(),
                );
                continue;
            }
            match space::parameter(name, value) {
                Ok(parameter) => parameters.push(parameter),
                Err((key, message)) => bad(&format!("{field}{key}"), message),
            }
        }
        if self.method == Method::Grid {
            for parameter in &parameters {
                if parameter.distribution.grid_values().is_none() {
                    bad(
                        &format!("parameters.{}", parameter.name),
                        format!(
                            "grid search needs a finite set of values; {} is continuous (give `values`, or use random or tpe)",
                            parameter.distribution.kind()
                        ),
                    );
                }
            }
        }
        if self.method == Method::Tpe {
            for parameter in &parameters {
                if !parameter.distribution.bounded() {
                    bad(
                        &format!("parameters.{}", parameter.name),
                        format!(
                            "tpe searches bounded ranges and value lists; {} is unbounded (use random)",
                            parameter.distribution.kind()
                        ),
                    );
                }
            }
        }
        let grid_size = (self.method == Method::Grid).then(|| {
            parameters.iter().try_fold(1u64, |size, parameter| {
                let values = parameter.distribution.grid_values().map_or(1, |v| v.len() as u64);
                size.checked_mul(values).filter(|n| *n <= u64::from(MAX_TRIALS))
            })
        });
        let max_trials = match (self.max_trials, grid_size) {
            (Some(0), _) => {
                bad("max_trials", "must be 1 or more".into());
                1
            }
            (Some(n), _) if n > MAX_TRIALS => {
                bad("max_trials", format!("at most {MAX_TRIALS}"));
                MAX_TRIALS
            }
            (Some(n), Some(Some(size))) => n.min(size as u32),
            (Some(n), _) => n,
            (None, Some(Some(size))) => size as u32,
            (None, Some(None)) => {
                bad(
                    "parameters",
                    format!("the grid has more than {MAX_TRIALS} combinations"),
                );
                MAX_TRIALS
            }
            (None, None) => {
                bad(
                    "max_trials",
                    "random and tpe search until stopped: give max_trials (W&B's run_cap)".into(),
                );
                1
            }
        };
        match self.max_concurrent {
            Some(0) => bad("max_concurrent", "must be 1 or more".into()),
            Some(n) if n > MAX_CONCURRENT => bad("max_concurrent", format!("at most {MAX_CONCURRENT}")),
            _ => {}
        }
        if self.max_failures == Some(0) {
            bad(
                "max_failures",
                "must be 1 or more (leave it out to go on after any failure)".into(),
            );
        }
        if let Some(metric) = &self.metric {
            if metric.name.trim().is_empty() {
                bad("metric.name", "must not be empty".into());
            }
            if metric.target.is_some_and(|t| !t.is_finite()) {
                bad("metric.target", "must be a finite number".into());
            }
        } else if self.method == Method::Tpe {
            bad(
                "metric",
                "tpe needs the metric to optimise: `metric: {name, goal}`".into(),
            );
        }
        let early_stop = match &self.early_terminate {
            None => None,
            Some(spec) => {
                if self.metric.is_none() {
                    bad(
                        "metric",
                        "early_terminate judges trials by the metric: `metric: {name, goal}`".into(),
                    );
                }
                match early_stop(spec) {
                    Ok(stop) => Some(stop),
                    Err((key, message)) => {
                        bad(&format!("early_terminate.{key}"), message);
                        None
                    }
                }
            }
        };
        let mut job = self.job.clone();
        job.insert("project".into(), Value::String(project.clone()));
        if !job.contains_key("name") {
            job.insert("name".into(), Value::String(name.clone()));
        }
        if !job.contains_key("command") {
            match (&self.program, &self.command) {
                (None, None) => bad(
                    "job.command",
                    "give the trial's command (`${NAME}` takes a parameter's value), or W&B's program".into(),
                ),
                (_, command) => {
                    let command: Vec<Value> = match command {
                        Some(command) => command.iter().cloned().map(Value::String).collect(),
                        None => DEFAULT_COMMAND
                            .iter()
                            .map(|s| Value::String(s.to_string()))
                            .collect(),
                    };
                    job.insert("command".into(), Value::Array(command));
                }
            }
        }
        if let Some(Value::Array(command)) = job.get("command") {
            let uses_program = command
                .iter()
                .any(|arg| arg.as_str().is_some_and(|arg| arg.contains("${program}")));
            if uses_program && self.program.is_none() {
                bad("program", "the command has ${program}: name the script".into());
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Checked {
            name,
            project,
            method: self.method,
            metric: self.metric.clone(),
            parameters,
            max_trials,
            max_concurrent: self.max_concurrent,
            max_failures: self.max_failures,
            early_stop,
            job,
            program: self.program.clone(),
            seed: self.seed.unwrap_or(seed),
        })
    }
}

/// The early stop `spec` asks for, or the key that is wrong and why.
fn early_stop(spec: &EarlyTerminateSpec) -> Result<EarlyStop, (&'static str, String)> {
    let reduction_factor = spec.reduction_factor.unwrap_or(DEFAULT_REDUCTION_FACTOR);
    if reduction_factor < 2 {
        return Err(("reduction_factor", "must be 2 or more".into()));
    }
    if spec.min_step == Some(0) {
        return Err(("min_step", "must be 1 or more".into()));
    }
    let bootstrap_count = spec.bootstrap_count.unwrap_or(0);
    match spec.kind.as_str() {
        "asha" => {
            if bootstrap_count > 0 && spec.min_step.is_none() {
                return Err((
                    "bootstrap_count",
                    "needs min_step (Optuna refuses it with an automatic first rung too)".into(),
                ));
            }
            Ok(EarlyStop::Asha {
                min_step: spec.min_step,
                reduction_factor,
                min_early_stopping_rate: spec.min_early_stopping_rate.unwrap_or(0),
                bootstrap_count,
            })
        }
        "hyperband" => {
            let min_step = spec.min_step.unwrap_or(1);
            let max_step = match (spec.max_step, spec.s) {
                (Some(max), _) => max,
                (None, Some(0)) => return Err(("s", "must be 1 or more".into())),
                // s brackets: the largest max_step that still gives s.
                (None, Some(s)) => (u64::from(reduction_factor).checked_pow(s))
                    .and_then(|n| n.checked_mul(min_step))
                    .map(|n| n - 1)
                    .ok_or(("s", "is too large".to_string()))?,
                (None, None) => {
                    return Err((
                        "max_step",
                        "hyperband needs the longest a trial runs, in steps (W&B's max_iter), or s".into(),
                    ));
                }
            };
            if max_step < min_step {
                return Err(("max_step", format!("must be at least min_step ({min_step})")));
            }
            if spec.min_early_stopping_rate.is_some() {
                return Err((
                    "min_early_stopping_rate",
                    "is ASHA's; Hyperband's brackets take each rate in turn".into(),
                ));
            }
            Ok(EarlyStop::Hyperband {
                min_step,
                max_step,
                reduction_factor,
                bootstrap_count,
            })
        }
        other => Err((
            "type",
            format!("`{other}`: early_terminate's type is asha or hyperband"),
        )),
    }
}

/// A trial's parameters as its job sees them: `GPUCTL_SWEEP_PARAMS`.
pub type Params = BTreeMap<String, Value>;

/// The variables a trial's job gets besides its command's values.
pub const SWEEP_ID_VARIABLE: &str = "GPUCTL_SWEEP_ID";
pub const SWEEP_TRIAL_VARIABLE: &str = "GPUCTL_SWEEP_TRIAL";
pub const SWEEP_PARAMS_VARIABLE: &str = "GPUCTL_SWEEP_PARAMS";

/// Where a sweep is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum SweepState {
    /// Proposing trials while the budget lasts.
    Running,
    /// No new trials; those running go on, and are still stopped early.
    Paused,
    /// Every trial ended, or a trial reached the metric's target.
    Finished,
    /// Stopped by a user: its open trials were cancelled.
    Stopped,
    /// `max_failures` trials failed, or trials can no longer be made.
    Failed,
}

names!("sweep state", SweepState {
    Running => "RUNNING",
    Paused => "PAUSED",
    Finished => "FINISHED",
    Stopped => "STOPPED",
    Failed => "FAILED",
});

impl SweepState {
    /// Whether it has ended for good.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            SweepState::Finished | SweepState::Stopped | SweepState::Failed
        )
    }
}

/// A trial's job names its sweep (`Job.sweep`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrialOf {
    /// The sweep's id (`swp_…`): `GET /api/v1/sweeps/{id}`, `gpuctl sweep show ID`.
    pub id: String,
    /// The trial's number.
    pub trial: u64,
}

/// One trial of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Trial {
    /// From 0, in the order trials were proposed.
    pub number: u64,
    pub job_id: String,
    pub run_id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub params: Params,
    /// Its job's state (a stopped trial is CANCELLED with reason SWEEP_PRUNED).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The metric's latest value (the final one once it ended), and its step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Its value at each rung it reached (early stopping), in rung order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rungs: Vec<f64>,
}

/// A sweep, as `/api/v1/sweeps` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sweep {
    /// `swp_…`.
    pub id: String,
    pub name: String,
    pub project: String,
    pub state: SweepState,
    /// Why it is paused or ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub method: Method,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<MetricGoal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_terminate: Option<EarlyStop>,
    pub max_trials: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    pub seed: u64,
    /// Trials made so far, by their jobs' states (`PRUNED` for those
    /// stopped early, apart from other cancellations).
    pub trial_states: BTreeMap<String, u32>,
    /// The trial with the best metric value so far (finished or running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<Trial>,
    /// The file as submitted.
    pub spec: SweepSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Every trial, by number (only in `GET /api/v1/sweeps/{id}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trials: Vec<Trial>,
}

/// `POST /api/v1/sweeps/{id}/{pause|resume|stop}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SweepAction {
    Pause,
    Resume,
    Stop,
}

names!("sweep action", SweepAction {
    Pause => "pause",
    Resume => "resume",
    Stop => "stop",
});

/// How a value is written into a command: strings as they are, numbers
/// and booleans as JSON writes them, lists and objects as JSON.
pub fn render(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The trial's command: `${NAME}` becomes parameter NAME's value, and W&B's
/// macros their meaning (`${args}`: `--name=value` for each parameter, as
/// arguments of their own). Unknown `${…}` stay as they are.
pub fn trial_command(command: &[String], program: Option<&str>, params: &Params) -> Vec<String> {
    let mut argv = Vec::with_capacity(command.len() + params.len());
    for arg in command {
        match arg.as_str() {
            "${env}" => argv.push("/usr/bin/env".to_string()),
            "${interpreter}" => argv.push("python3".to_string()),
            "${program}" => argv.push(program.unwrap_or_default().to_string()),
            "${args}" => argv.extend(params.iter().map(|(k, v)| format!("--{k}={}", render(v)))),
            "${args_no_hyphens}" => argv.extend(params.iter().map(|(k, v)| format!("{k}={}", render(v)))),
            "${args_json}" => argv.push(Value::Object(params.clone().into_iter().collect()).to_string()),
            _ => {
                let mut text = arg.clone();
                for (name, value) in params {
                    let placeholder = format!("${{{name}}}");
                    if text.contains(&placeholder) {
                        text = text.replace(&placeholder, &render(value));
                    }
                }
                argv.push(text);
            }
        }
    }
    argv
}

#[cfg(test)]
mod tests;
