//! Evaluations: an `EVALUATE` job run on a checkpoint of a training run,
//! whose result becomes `eval/` metrics of that run at the checkpoint's step.

use crate::job::{JobStatus, Resources};
use crate::metric::Value;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The file an evaluation writes its result to, in its attempt directory on
/// the agent host; `GPUCTL_EVAL_OUTPUT` names it.
pub const RESULT_FILE: &str = "eval_result.json";

/// The largest result file the agent sends.
pub const MAX_RESULT_BYTES: u64 = 1 << 20;

/// `POST /api/v1/evaluations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewEvaluation {
    /// The training run whose checkpoint is evaluated; the result lands on it.
    pub run_id: String,
    /// The checkpoint's path as the run recorded it (see `gpuctl run show`).
    pub checkpoint: String,
    /// argv, never run through a shell; the job gets `GPUCTL_CHECKPOINT` and `GPUCTL_EVAL_OUTPUT`.
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Default: the node that wrote the checkpoint (`gpuplane.node=<name>`);
    /// `{}` lets any node run it, for checkpoints on a shared filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Default: `eval <run name> @ <step>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An evaluation and, once it succeeded, its metrics (as recorded, without the `eval/` prefix).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Evaluation {
    /// The evaluation job's id.
    pub job_id: String,
    /// The run evaluated.
    pub run_id: String,
    pub checkpoint: String,
    /// The step the metrics are recorded at.
    pub step: i64,
    pub status: JobStatus,
    pub metrics: BTreeMap<String, Value>,
    /// Why the result was refused (`EVALUATION_RESULT_INVALID`) or the job failed.
    pub failure_detail: Option<String>,
    pub created_at: String,
}

/// What the agent found in the result file when an evaluation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResultFile {
    Missing { path: String },
    Unreadable { path: String, reason: String },
    Text { path: String, text: String },
}
