//! Jobs: what users submit, their states, failure reasons and attempts.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `QUEUED → DISPATCHING → RUNNING → SUCCEEDED | FAILED | CANCELLED | LOST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum JobStatus {
    Queued,
    Dispatching,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Lost,
}

names!("status", JobStatus {
    Queued => "QUEUED",
    Dispatching => "DISPATCHING",
    Running => "RUNNING",
    Succeeded => "SUCCEEDED",
    Failed => "FAILED",
    Cancelled => "CANCELLED",
    Lost => "LOST",
});

impl JobStatus {
    /// Whether the job has ended (and may be retried, unless it succeeded).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled | JobStatus::Lost
        )
    }

    /// Whether an attempt holds GPUs on a node.
    pub fn is_active(self) -> bool {
        matches!(self, JobStatus::Dispatching | JobStatus::Running)
    }
}

/// Why a job failed. Each names what the user should look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureReason {
    /// The agent could not start it: working_dir, command, docker or image missing.
    DispatchFailed,
    /// CUDA out of memory in its output, or the kernel's OOM killer.
    Oom,
    /// It exited with a non-zero code.
    ExitCode,
    /// A signal ended it (SIGSEGV, SIGKILL, ...).
    Signal,
    /// An evaluation exited 0 without a valid `{"metrics": {...}}` result.
    EvaluationResultInvalid,
    /// Its agent went away for longer than the grace period.
    JobLost,
    /// It ran past its `time_limit_s` and was stopped.
    Timeout,
    /// A job it waited for (`after`) ended in a way that can no longer satisfy it.
    DependencyFailed,
    /// A higher-priority job needed its GPUs: it was stopped (SIGTERM, then
    /// SIGKILL after the grace) and queued again. Ends an attempt, never a
    /// job, and does not count against `max_attempts`.
    Preempted,
    /// Its steps stopped advancing while its processes lived (JOB_HUNG) and
    /// its spec says `on_hang = "restart"`: it was stopped, and is retried
    /// from its last checkpoint while attempts remain.
    Hung,
    /// A sweep's early stopping (ASHA or Hyperband) stopped this trial: its
    /// metric was not among the best at a rung. Ends it CANCELLED.
    SweepPruned,
    /// Its GPUs stayed under `gpu_idle_threshold_percent` for
    /// `gpu_idle_after_s` and its project's `idle_action` is `stop`: it was
    /// stopped to free them. Ends it CANCELLED; never retried.
    Idle,
}

names!("failure reason", FailureReason {
    DispatchFailed => "DISPATCH_FAILED",
    Oom => "OOM",
    ExitCode => "EXIT_CODE",
    Signal => "SIGNAL",
    EvaluationResultInvalid => "EVALUATION_RESULT_INVALID",
    JobLost => "JOB_LOST",
    Timeout => "TIMEOUT",
    DependencyFailed => "DEPENDENCY_FAILED",
    Preempted => "PREEMPTED",
    Hung => "HUNG",
    SweepPruned => "SWEEP_PRUNED",
    Idle => "IDLE",
});

impl FailureReason {
    /// Whether retrying the same spec can reasonably succeed; automatic
    /// retries happen only for these.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            FailureReason::ExitCode | FailureReason::Signal | FailureReason::JobLost | FailureReason::Hung
        )
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum JobKind {
    #[default]
    Train,
    Evaluate,
}

names!("job kind", JobKind { Train => "TRAIN", Evaluate => "EVALUATE" });

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    /// A child process of the agent (argv, no shell).
    #[default]
    Process,
    /// `docker run` with `image`.
    Docker,
    /// An `sbatch` job, on an agent started with `--runner slurm` on a
    /// Slurm login host (such an agent sends every job through Slurm).
    Slurm,
}

names!("runner", Runner { Process => "process", Docker => "docker", Slurm => "slurm" });

/// Where a job goes in Slurm, when it runs through Slurm; each unset field
/// falls back to the node's label (`slurm.partition`, `slurm.account`,
/// `slurm.qos`), else to Slurm's own default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SlurmPlacement {
    /// `sbatch --partition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `sbatch --account`: whom Slurm charges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `sbatch --qos`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// GPUs the job needs on one node; 0 runs it in the cpu_only lane.
    #[serde(default)]
    pub gpu: i64,
    /// How many nodes it runs on at once, `gpu` GPUs on each (default 1).
    /// More than one makes it a multi-node job: all its members start
    /// together or none do, each with the rendezvous variables
    /// (`GPUCTL_NODE_RANK`, `MASTER_ADDR`, `PET_*`, …) torchrun reads.
    /// With `runner = "slurm"`, one `sbatch --nodes N` allocation.
    #[serde(default = "one_node", skip_serializing_if = "is_one_node")]
    pub nodes: i64,
    /// A node label its members must share one value of (one rack, one
    /// network): `rack` puts all of them on nodes with the same `rack`
    /// (not for Slurm jobs, whose nodes Slurm chooses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colocate: Option<String>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            gpu: 0,
            nodes: 1,
            colocate: None,
        }
    }
}

fn one_node() -> i64 {
    1
}

fn is_one_node(nodes: &i64) -> bool {
    *nodes == 1
}

/// The most nodes one job may run on at once.
pub const MAX_NODES_PER_JOB: i64 = 256;

/// Defaults of optional spec fields.
pub const DEFAULT_MAX_ATTEMPTS: i64 = 1;
pub const DEFAULT_RETRY_COOLDOWN_S: i64 = 30;

/// What `POST /api/v1/jobs` takes (and `gpuctl job submit -f` reads).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The job's and its run's name in lists and pages (1 to 200 characters).
    pub name: String,
    /// `TRAIN` (default), or `EVALUATE` for an evaluation of a checkpoint.
    #[serde(default)]
    pub kind: JobKind,
    /// The project it belongs to (default `default`): who may see and act on
    /// it, whose quotas, fair share and node policy apply.
    #[serde(default = "default_project")]
    pub project: String,
    /// argv; `command[0]` must exist on the agent host. Never run through a shell.
    pub command: Vec<String>,
    /// Absolute path as the agent host sees it. Default: the attempt's own
    /// directory under `~/.gpuctl/jobs/` on the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Variables for the job, besides the host's environment and the ones
    /// GPUPlane sets (`CUDA_VISIBLE_DEVICES`, `GPUCTL_*`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables whose values are secrets (API keys, passwords): stored
    /// encrypted, passed to the job, never shown back (answers list only
    /// their names, in `Job.secret_env`) and masked in the job's output.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
    /// How the agent runs it: `process` (default), `docker` or `slurm`; the
    /// project's node policy decides which it may use.
    #[serde(default)]
    pub runner: Runner,
    /// Required with `runner = docker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// What it needs on one node (default: no GPU).
    #[serde(default)]
    pub resources: Resources,
    /// Labels a node must have (`gpuplane.node` names one node). A
    /// placement hint, not a security boundary: node policies are.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Higher runs first; FIFO within a priority. |priority| ≤ 2^62.
    #[serde(default)]
    pub priority: i64,
    /// Attempts in all (default 1): failures with `EXIT_CODE`, `SIGNAL` or
    /// `LOST` are retried automatically until they are used up.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i64,
    /// Seconds between a failure and the automatic retry (default 30).
    #[serde(default = "default_retry_cooldown_s")]
    pub retry_cooldown_s: i64,
    /// Wall-clock seconds an attempt may run; then it gets SIGTERM, SIGKILL
    /// after the server's cancel grace, and fails with `TIMEOUT`. None: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<i64>,
    /// When its steps stop advancing while its processes live (JOB_HUNG):
    /// `warn` (default: the event alone) or `restart` (stop the attempt and
    /// retry from the last checkpoint; needs `max_attempts` of 2 or more).
    #[serde(default, skip_serializing_if = "OnHang::is_warn")]
    pub on_hang: OnHang,
    /// Jobs that must end first: `job_…` (it must succeed) or
    /// `job_…:finished` (any end). Until then it waits, saying for which;
    /// if one can no longer satisfy it, it fails with `DEPENDENCY_FAILED`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// TensorBoard and checkpoint directories to watch (relative to working_dir).
    #[serde(default)]
    pub watch_dirs: Vec<String>,
    /// `offline`: the job runs with `WANDB_MODE=offline` (and `WANDB_DIR`
    /// in its attempt's folder), and the agent reads the runs the `wandb`
    /// package writes there into the job's run as they grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb: Option<WandbMode>,
    /// Run a command that would wait for keyboard input (a REPL, `-i`, `--pdb`)
    /// anyway. Jobs get no input: such commands are refused unless this is set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_interactive: bool,
    /// The git checkout `gpuctl job submit` ran in (recorded by gpuctl);
    /// shown beside the commit each attempt ran, with a warning when they differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// Tags for the job's run (`baseline`, `lr-sweep`): shown on the run and
    /// filtered on in run lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Partition, account and QOS when the job runs through Slurm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmPlacement>,
    /// The recipe and experiment a job was submitted from; set by the
    /// server (`POST /recipes/{name}/{version}/jobs`), refused in a plain submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<crate::recipe::RecipeUse>,
    /// Where the job also reports its metrics (an `http(s)://` URL, at most
    /// 2,000 characters, without credentials); the run page links to it. A
    /// recipe with `observability = "external"` requires it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observability_url: Option<String>,
    /// Submit it as a job array, a task per index, as Slurm writes them:
    /// `0-99%8` (at most 8 at once), `1,3,5`, `0-98:2`. Each task sees
    /// `GPUCTL_ARRAY_INDEX` and `GPUCTL_ARRAY_ID`; `${GPUCTL_ARRAY_INDEX}`
    /// in the command becomes its index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
}

/// Where a job was submitted from: a git checkout on the submitting machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GitSource {
    /// The `origin` remote's URL without credentials, else the checkout's
    /// path on the submitting machine.
    pub repository: String,
    /// The branch checked out; none when HEAD is detached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The commit checked out (hex).
    pub commit: String,
    /// Tracked files had uncommitted changes (submitted with `--allow-dirty`).
    #[serde(default)]
    pub dirty: bool,
}

impl GitSource {
    /// `https://git.example.com/team/repo @ main 1a2b3c4d5e6f (dirty)`.
    pub fn describe(&self) -> String {
        let short = &self.commit[..self.commit.len().min(12)];
        let branch = self
            .branch
            .as_deref()
            .map(|b| format!(" {b}"))
            .unwrap_or_default();
        let dirty = if self.dirty {
            " (dirty: uncommitted changes)"
        } else {
            ""
        };
        format!("{} @{branch} {short}{dirty}", self.repository)
    }

    /// Why attempt `n`, which found `ran` checked out in its working_dir,
    /// may not have run what was submitted; `None` when they agree.
    pub fn mismatch(&self, n: i64, ran: &str) -> Option<String> {
        let same = ran.starts_with(&self.commit) || self.commit.starts_with(ran);
        (!same).then(|| {
            format!(
                "attempt {n} ran commit {} but the job was submitted from {}: the agent's working_dir is checked out at another commit",
                &ran[..ran.len().min(12)],
                &self.commit[..self.commit.len().min(12)]
            )
        })
    }
}

/// Shows the names of secret variables, never their values.
impl std::fmt::Debug for JobSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured, so a new field cannot be forgotten here.
        let JobSpec {
            name,
            kind,
            project,
            command,
            working_dir,
            env,
            secret_env,
            runner,
            image,
            resources,
            node_selector,
            priority,
            max_attempts,
            retry_cooldown_s,
            time_limit_s,
            on_hang,
            after,
            watch_dirs,
            wandb,
            allow_interactive,
            git,
            tags,
            slurm,
            recipe,
            observability_url,
            array,
        } = self;
        let secret_names: Vec<&String> = secret_env.keys().collect();
        f.debug_struct("JobSpec")
            .field("name", name)
            .field("kind", kind)
            .field("project", project)
            .field("command", command)
            .field("working_dir", working_dir)
            .field("env", env)
            .field("secret_env (names)", &secret_names)
            .field("runner", runner)
            .field("image", image)
            .field("resources", resources)
            .field("node_selector", node_selector)
            .field("priority", priority)
            .field("max_attempts", max_attempts)
            .field("retry_cooldown_s", retry_cooldown_s)
            .field("time_limit_s", time_limit_s)
            .field("on_hang", on_hang)
            .field("after", after)
            .field("watch_dirs", watch_dirs)
            .field("wandb", wandb)
            .field("allow_interactive", allow_interactive)
            .field("git", git)
            .field("tags", tags)
            .field("slurm", slurm)
            .field("recipe", recipe)
            .field("observability_url", observability_url)
            .field("array", array)
            .finish()
    }
}

fn default_project() -> String {
    "default".to_string()
}

fn default_max_attempts() -> i64 {
    DEFAULT_MAX_ATTEMPTS
}

fn default_retry_cooldown_s() -> i64 {
    DEFAULT_RETRY_COOLDOWN_S
}

impl JobSpec {
    /// A spec with every default, for `command`.
    pub fn new(name: impl Into<String>, command: Vec<String>) -> JobSpec {
        JobSpec {
            name: name.into(),
            kind: JobKind::Train,
            project: default_project(),
            command,
            working_dir: None,
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            runner: Runner::Process,
            image: None,
            resources: Resources::default(),
            node_selector: BTreeMap::new(),
            priority: 0,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retry_cooldown_s: DEFAULT_RETRY_COOLDOWN_S,
            time_limit_s: None,
            on_hang: OnHang::Warn,
            after: Vec::new(),
            watch_dirs: Vec::new(),
            wandb: None,
            allow_interactive: false,
            git: None,
            tags: Vec::new(),
            slurm: None,
            recipe: None,
            observability_url: None,
            array: None,
        }
    }
}

/// What happens when a running job is found hung (JOB_HUNG): `warn` (the
/// event alone, the default) or `restart` (the attempt is stopped and the
/// job retried from its last checkpoint, spending an attempt).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnHang {
    #[default]
    Warn,
    Restart,
}

impl OnHang {
    fn is_warn(&self) -> bool {
        *self == OnHang::Warn
    }
}

/// How a job's `wandb` package logs: `offline`, into files the agent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WandbMode {
    Offline,
}

/// One try at running a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    pub n: i64,
    /// The node's name.
    pub node: String,
    pub node_id: String,
    /// GPU indices on that node (also the job's `CUDA_VISIBLE_DEVICES`).
    pub gpus: Vec<u32>,
    pub status: JobStatus,
    pub dispatched_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub exit_code: Option<i32>,
    /// Signal number that ended it, and its name (`SIGSEGV`).
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    pub failure_reason: Option<FailureReason>,
    pub failure_detail: Option<String>,
    /// The commit the working directory was checked out at, when it was a git checkout.
    #[serde(default)]
    pub git_commit: Option<String>,
    /// Where an attempt after the first picked up: the run's latest
    /// checkpoint when it was placed (its `GPUCTL_RESUME_FROM`; empty: none)
    /// and that checkpoint's step, past which earlier attempts' points were
    /// set aside. Absent on a first attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_step: Option<i64>,
    /// A multi-node job's members, by rank (rank 0's node and GPUs are
    /// also the attempt's `node` and `gpus`). Empty for a one-node job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Member>,
}

/// One member of a multi-node attempt: the part of it on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    /// Its `GPUCTL_NODE_RANK`: 0 hosts the rendezvous (`MASTER_ADDR`).
    pub rank: i64,
    /// The node's name, and id.
    pub node: String,
    pub node_id: String,
    /// The address the other members reach it at (the agent's
    /// `--advertise-addr`, else the address it connects from).
    pub address: Option<String>,
    pub gpus: Vec<u32>,
    /// DISPATCHING until its agent starts it, RUNNING, then how it ended.
    pub state: JobStatus,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    pub id: String,
    pub name: String,
    pub project: String,
    pub kind: JobKind,
    pub status: JobStatus,
    pub failure_reason: Option<FailureReason>,
    pub failure_detail: Option<String>,
    /// Why it is waiting, while QUEUED.
    pub queued_reason: Option<String>,
    /// Held in the queue (not scheduled until released), while QUEUED.
    #[serde(default)]
    pub held: bool,
    pub run_id: String,
    /// Its run's primary metric and best value (what `sort=primary_metric` orders by).
    #[serde(default)]
    pub primary_metric: Option<crate::metric::PrimaryMetric>,
    pub priority: i64,
    pub resources: Resources,
    pub max_attempts: i64,
    /// How many of its attempts were preempted: each queued the job again
    /// without spending one of `max_attempts`.
    #[serde(default)]
    pub preemptions: i64,
    pub attempts: Vec<Attempt>,
    /// The spec as submitted, without the values of `secret_env`.
    pub spec: JobSpec,
    /// The names of the secret variables set for the job (values are never shown).
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// The array it is a task of, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<crate::array::ArrayTask>,
    /// The sweep it is a trial of, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::sweep::TrialOf>,
    pub submitted_by: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl Job {
    /// Its name for lists: a task of an array with its index, `shards[3]`.
    pub fn title(&self) -> String {
        match &self.array {
            Some(array) => format!("{}[{}]", self.name, array.index),
            None => self.name.clone(),
        }
    }
}

impl Attempt {
    /// Where it picked up, for people: "resumed from step 300 (PATH)",
    /// "started over (no checkpoint recorded)"; none on a first attempt.
    pub fn resumed(&self) -> Option<String> {
        let path = self.resume_from.as_deref()?;
        Some(match (path, self.resume_step) {
            ("", _) => "started over (no checkpoint recorded)".to_string(),
            (path, Some(step)) => format!("resumed from step {step} ({path})"),
            (path, None) => format!("resumed from {path} (its step unknown)"),
        })
    }
}

impl Job {
    /// "2 of 3", and how many were preempted when any were.
    pub fn attempts_summary(&self) -> String {
        let summary = format!("{} of {}", self.attempts.len(), self.max_attempts);
        match self.preemptions {
            0 => summary,
            n => format!("{summary} ({n} preempted, which spend none)"),
        }
    }

    /// A warning for each attempt that ran another commit than the job was
    /// submitted from (`spec.git` against the attempt's `git_commit`).
    pub fn source_mismatches(&self) -> Vec<String> {
        let Some(git) = &self.spec.git else {
            return Vec::new();
        };
        self.attempts
            .iter()
            .filter_map(|attempt| git.mismatch(attempt.n, attempt.git_commit.as_deref()?))
            .collect()
    }
}

/// `POST /api/v1/jobs/{id}/retry`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// Retry even when the last attempt ran out of memory and nothing changed.
    #[serde(default)]
    pub force: bool,
    /// Fields to change first: `env.NAME`, `resources.gpu`, `command` (a JSON
    /// array, or words split on spaces), `working_dir`, `image`, `priority`,
    /// `max_attempts`, `retry_cooldown_s`, `time_limit_s` (`2h`, seconds, or `none`),
    /// `node_selector.KEY`, `watch_dirs` (comma-separated).
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// `POST /api/v1/jobs/{id}/priority`: a queued job's new priority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetPriority {
    /// Higher runs first; FIFO within a priority. |priority| ≤ 2^62.
    pub priority: i64,
}

/// `POST /api/v1/jobs/{id}/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Must be `true`: cancelling stops a running job.
    #[serde(default)]
    pub confirm: bool,
}

/// Signal names for the numbers jobs commonly die of (Linux numbering).
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return None,
    })
}

/// What a job waits for in another (`JobSpec::after`): `job_…` or
/// `job_…:succeeded` (it must succeed), `job_…:finished` (any end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub job_id: String,
    /// Any end will do, not only success.
    pub any_end: bool,
}

impl std::str::FromStr for Dependency {
    type Err = String;

    fn from_str(text: &str) -> Result<Dependency, String> {
        let (job_id, condition) = text.trim().split_once(':').unwrap_or((text.trim(), "succeeded"));
        let any_end = match condition {
            "succeeded" => false,
            "finished" => true,
            other => {
                return Err(format!(
                    "`{other}` is not a condition; use JOB, JOB:succeeded or JOB:finished"
                ));
            }
        };
        let well_formed = job_id
            .strip_prefix("job_")
            .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric()));
        if !well_formed {
            return Err(format!("`{job_id}` is not a job id (job_…)"));
        }
        Ok(Dependency {
            job_id: job_id.to_string(),
            any_end,
        })
    }
}

/// The registry an image reference pulls from, as docker reads it: the
/// first path component when it names a host (has a `.` or `:`, or is
/// `localhost`), else Docker Hub, `docker.io`. Lowercase.
pub fn image_registry(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let is_host = image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if !is_host {
        return "docker.io".to_string();
    }
    match first.to_lowercase().as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        host => host.to_string(),
    }
}

/// Whether an image reference is pinned to a digest (`@sha256:…`).
pub fn image_is_pinned(image: &str) -> bool {
    image.contains("@sha256:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_parse_case_insensitively() {
        assert_eq!("queued".parse::<JobStatus>(), Ok(JobStatus::Queued));
        assert_eq!("LOST".parse::<JobStatus>(), Ok(JobStatus::Lost));
        assert!("DONE".parse::<JobStatus>().unwrap_err().contains("QUEUED"));
    }

    #[test]
    fn dependencies_read_as_written_and_bad_ones_say_why() {
        let parsed = |text: &str| text.parse::<Dependency>();
        assert_eq!(
            parsed("job_01ABC"),
            Ok(Dependency {
                job_id: "job_01ABC".into(),
                any_end: false
            })
        );
        assert_eq!(parsed("job_01ABC:succeeded").map(|d| d.any_end), Ok(false));
        assert_eq!(parsed("job_01ABC:finished").map(|d| d.any_end), Ok(true));
        assert!(
            parsed("job_01ABC:done")
                .unwrap_err()
                .contains("`done` is not a condition")
        );
        assert!(parsed("run_01ABC").unwrap_err().contains("is not a job id"));
        assert!(parsed("job_").unwrap_err().contains("is not a job id"));
        assert!(parsed("job_a;b").unwrap_err().contains("is not a job id"));
    }

    #[test]
    fn a_minimal_spec_gets_the_defaults() {
        let spec: JobSpec = serde_json::from_str(r#"{"name": "x", "command": ["true"]}"#).unwrap();
        assert_eq!(spec, JobSpec::new("x", vec!["true".into()]));
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(serde_json::from_str::<JobSpec>(r#"{"name": "x", "command": ["true"], "gpus": 1}"#).is_err());
    }

    #[test]
    fn debug_output_never_shows_secret_values() {
        let mut spec = JobSpec::new("s", vec!["true".into()]);
        spec.secret_env.insert("API_KEY".into(), "hunter2-value".into());
        let shown = format!("{spec:?}");
        assert!(shown.contains("API_KEY") && !shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn image_registries_as_docker_reads_them() {
        let cases = [
            ("ubuntu", "docker.io"),
            ("pytorch/pytorch:2.4.0-cuda12.1", "docker.io"),
            ("index.docker.io/library/ubuntu", "docker.io"),
            ("nvcr.io/nvidia/pytorch:24.08-py3", "nvcr.io"),
            (
                "Registry.Example.com:5000/team/train@sha256:abc",
                "registry.example.com:5000",
            ),
            ("localhost/train", "localhost"),
            ("localhost:5000/train", "localhost:5000"),
        ];
        for (image, registry) in cases {
            assert_eq!(image_registry(image), registry, "{image}");
        }
        assert!(image_is_pinned("nvcr.io/nvidia/pytorch@sha256:0123"));
        assert!(!image_is_pinned("nvcr.io/nvidia/pytorch:24.08-py3"));
    }
}
