//! The agent protocol (`/api/v1/agent/*`, `agent` scope).
//!
//! An agent says [`AgentHello`] when it connects, listing the attempts it
//! still has; the answer tells it where to resume shipping their output and
//! which are stale. It then long-polls ([`Poll`] → [`PollAnswer`]): a poll is
//! its heartbeat, and the server answers as soon as it has commands. What the
//! agent observes (starts, exits, output lines) goes up in [`Report`]s, in
//! order, retried until acknowledged; the server applies them idempotently.

use crate::job::JobSpec;

/// The largest report body the server accepts (`POST /agent/report`); the
/// agent keeps its batches well below it.
pub const MAX_REPORT_BYTES: usize = 8 * 1024 * 1024;
use crate::log::LogStream;
use crate::node::Gpu;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One attempt of one job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AttemptRef {
    pub job_id: String,
    pub attempt: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentHello {
    /// The node's name, unique in the cluster (defaults to the host name).
    pub name: String,
    pub hostname: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub gpus: Vec<Gpu>,
    pub agent_version: String,
    /// Attempts the agent has on disk whose end the server has not acknowledged.
    #[serde(default)]
    pub attempts: Vec<AttemptRef>,
    /// The runners it runs jobs with: `process` (and `docker` when started
    /// with `--docker`), or `slurm` alone for a Slurm login host. An agent
    /// that does not say is given no jobs (node policies need to know).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runners: Option<Vec<crate::job::Runner>>,
    /// Whether a job can reach GPUs it was not given: `cgroup: …` (each
    /// job's device cgroup allows only its own) or `advisory: WHY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// Where members of other nodes reach this node's jobs (`--advertise-addr`):
    /// a host name or IP address. Without it the server uses the address
    /// the hello came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise_addr: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentWelcome {
    pub node_id: String,
    /// This server installation; the agent records it in each attempt
    /// directory and never reports an attempt of another server here.
    pub server_id: String,
    /// How long a poll may wait for commands; also the heartbeat period.
    pub heartbeat_interval_ms: u64,
    /// For each attempt of the hello: where to resume, or to drop it.
    pub resume: Vec<Resume>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resume {
    pub job_id: String,
    pub attempt: i64,
    /// Lines of each stream the server already has: ship from the next one.
    pub stdout_lines: i64,
    pub stderr_lines: i64,
    /// False when the server has given up on the attempt (LOST and requeued,
    /// or cancelled): stop it if it still runs, report its end, forget it.
    pub keep: bool,
    /// False when this server never dispatched the attempt to this node
    /// (left by another server): the agent leaves it alone and reports nothing.
    pub known: bool,
    /// The job's secret values, for the agent to mask in what it ships:
    /// no file on the host keeps them (see [`Dispatch::at_rest`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mask: Vec<String>,
    /// The attempt's own token (`GPUCTL_TOKEN`), for what its spool left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Poll {
    pub node_id: String,
    pub gpus: Vec<Gpu>,
    /// Attempts whose process is alive on this host right now.
    pub running: Vec<AttemptRef>,
    /// Jobs whose folders the agent removed (or found gone) since its last
    /// poll, after a `forget` command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forgotten: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PollAnswer {
    pub commands: Vec<AgentCommand>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentCommand {
    /// Start an attempt. Sent until the agent reports it started or failed;
    /// the agent ignores an attempt it already has.
    Dispatch(Box<Dispatch>),
    /// Stop an attempt: SIGTERM to its process group, SIGKILL after the grace period.
    Cancel {
        job_id: String,
        attempt: i64,
        grace_ms: u64,
    },
    /// Upload a whole log file to `POST /agent/log-fetch/{request_id}`.
    FetchLog {
        request_id: String,
        job_id: String,
        attempt: i64,
        stream: LogStream,
        /// The job's secret values, masked in the upload; added as the
        /// command reaches the agent, never stored with it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        mask: Vec<String>,
    },
    /// The job's run was deleted: remove its attempt folders from this host
    /// (its output, state and spool), then say so in `Poll::forgotten`.
    Forget { job_id: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Dispatch {
    pub job_id: String,
    pub attempt: i64,
    pub run_id: String,
    pub spec: JobSpec,
    /// GPU indices to expose through `CUDA_VISIBLE_DEVICES`.
    pub gpus: Vec<u32>,
    /// Variables the server sets for the job (`GPUCTL_*`); they win over `spec.env`.
    pub env: BTreeMap<String, String>,
    /// Between SIGTERM and SIGKILL when the job reaches `spec.time_limit_s`.
    #[serde(default)]
    pub stop_grace_ms: u64,
    /// The experiment folder shipped with the job (`spec.recipe.shipped`):
    /// the agent writes it into the job's folder before the first attempt
    /// it runs of the job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folder: Vec<crate::recipe::FolderFile>,
    /// Rank 0 of a multi-node job: the agent chooses a free port on its
    /// host, sets [`MASTER_PORT_VARIABLES`] to it, and reports it with
    /// `Started`; the other members are dispatched with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub choose_master_port: bool,
}

/// The variables carrying a multi-node job's rendezvous port (torchrun
/// reads `PET_MASTER_PORT`, most launchers `MASTER_PORT`).
pub const MASTER_PORT_VARIABLES: [&str; 2] = ["MASTER_PORT", "PET_MASTER_PORT"];

/// The variable that carries an attempt's own token to its job.
pub const JOB_TOKEN_VARIABLE: &str = "GPUCTL_TOKEN";

/// An attempt after the first: the path of the run's latest recorded
/// checkpoint, and its step (each empty when there is none, or no step).
pub const RESUME_FROM_VARIABLE: &str = "GPUCTL_RESUME_FROM";
pub const RESUME_STEP_VARIABLE: &str = "GPUCTL_RESUME_STEP";

/// A task of a job array: the array's id and the task's index.
pub const ARRAY_ID_VARIABLE: &str = "GPUCTL_ARRAY_ID";
pub const ARRAY_INDEX_VARIABLE: &str = "GPUCTL_ARRAY_INDEX";

impl Dispatch {
    /// What the agent may keep on disk (`dispatch.json`): the dispatch less
    /// its secret values and the attempt's token. Those reach the job on a
    /// pipe, and after an agent restart come again with [`Resume`].
    pub fn at_rest(&self) -> Dispatch {
        let mut resting = self.clone();
        resting.spec.secret_env.clear();
        resting.env.remove(JOB_TOKEN_VARIABLE);
        resting.folder.clear();
        resting
    }

    /// The job's secret values, the strings the agent masks.
    pub fn secret_values(&self) -> Vec<String> {
        self.spec.secret_env.values().cloned().collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub node_id: String,
    pub items: Vec<ReportItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReportItem {
    /// The process started.
    Started {
        job_id: String,
        attempt: i64,
        pid: u32,
        /// Epoch milliseconds.
        time: i64,
        /// The commit the working directory is checked out at, when it is a git checkout.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git_commit: Option<String>,
        /// The rendezvous port it chose (`Dispatch::choose_master_port`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        master_port: Option<u16>,
    },
    /// The engine the agent handed it to (Slurm) holds it queued; `reason`
    /// says why (Slurm's own reason, with its job id). Sent again when the
    /// reason changes; shown as the job's queued reason until it starts.
    Waiting {
        job_id: String,
        attempt: i64,
        reason: String,
    },
    /// The agent could not start it; `detail` names the path, binary or image.
    DispatchFailed {
        job_id: String,
        attempt: i64,
        detail: String,
    },
    /// Consecutive lines of one stream, numbered from `first_n`.
    Lines {
        job_id: String,
        attempt: i64,
        stream: LogStream,
        first_n: i64,
        time: i64,
        lines: Vec<String>,
    },
    /// The process ended. Sent after all of its lines.
    Exited {
        job_id: String,
        attempt: i64,
        exit_code: Option<i32>,
        signal: Option<i32>,
        /// The kernel's OOM killer acted while it ran (cgroup `memory.events`).
        oom_killed: bool,
        /// The agent stopped it because the server asked.
        cancelled: bool,
        /// The agent stopped it because it reached `spec.time_limit_s`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        timed_out: bool,
        /// The engine it ran under lost it (Slurm's NODE_FAIL, BOOT_FAIL,
        /// PREEMPTED, or a job Slurm no longer knows): why, for JOB_LOST.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost: Option<String>,
        time: i64,
        /// For an `EVALUATE` job: what it wrote to `GPUCTL_EVAL_OUTPUT`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval_result: Option<crate::evaluation::ResultFile>,
    },
    /// Metric points read from the attempt's TensorBoard files (idempotent by `batch_id`).
    Points {
        job_id: String,
        attempt: i64,
        batch_id: String,
        points: Vec<crate::metric::Point>,
    },
    /// A checkpoint file appeared (or finished changing) in a watch dir.
    Checkpoint {
        job_id: String,
        attempt: i64,
        path: String,
        size: u64,
        /// Epoch milliseconds of its last modification.
        modified: i64,
        /// The training step, when the file name tells it (`step_1200.pt`).
        step: Option<i64>,
    },
    /// Hyperparameters read from the attempt's TensorBoard files (the
    /// `hparams` plugin), set on the job's run's config.
    Config {
        job_id: String,
        attempt: i64,
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        config: std::collections::BTreeMap<String, serde_json::Value>,
    },
    /// Something the user should know (a corrupt event file, say), as an
    /// event of `kind`: a warning, or `info` when `severity` says so.
    Notice {
        job_id: String,
        attempt: i64,
        kind: crate::event::EventKind,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        severity: Option<crate::event::Severity>,
    },
    /// Free space on the filesystem of the attempt's working_dir.
    Disk {
        job_id: String,
        attempt: i64,
        path: String,
        free_percent: f64,
    },
}

impl ReportItem {
    /// The job and attempt the item is about.
    pub fn attempt(&self) -> (&str, i64) {
        match self {
            ReportItem::Started { job_id, attempt, .. }
            | ReportItem::Waiting { job_id, attempt, .. }
            | ReportItem::DispatchFailed { job_id, attempt, .. }
            | ReportItem::Lines { job_id, attempt, .. }
            | ReportItem::Exited { job_id, attempt, .. }
            | ReportItem::Points { job_id, attempt, .. }
            | ReportItem::Checkpoint { job_id, attempt, .. }
            | ReportItem::Config { job_id, attempt, .. }
            | ReportItem::Notice { job_id, attempt, .. }
            | ReportItem::Disk { job_id, attempt, .. } => (job_id, *attempt),
        }
    }
}
