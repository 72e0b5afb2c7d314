//! Failure explanations and run diagnoses.

use crate::event::Severity;
use crate::log::LogStream;
use crate::metric::Value;
use serde::{Deserialize, Serialize};

/// Something that supports a conclusion: a log line, an event, a metric point, a fact of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    Log {
        attempt: i64,
        stream: LogStream,
        n: i64,
        text: String,
    },
    Event {
        time: String,
        event_kind: String,
        message: String,
    },
    Metric {
        key: String,
        step: i64,
        value: Value,
    },
    Job {
        text: String,
    },
}

/// `GET /api/v1/runs/{id}/failure`: why a run failed and what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FailureExplanation {
    pub run_id: String,
    pub job_id: Option<String>,
    pub status: String,
    pub failure_reason: Option<String>,
    /// The rule that matched (`unknown` when none did).
    pub rule: String,
    pub category: String,
    pub summary: String,
    pub evidence: Vec<Evidence>,
    pub likely_causes: Vec<String>,
    /// In the order to try them.
    pub actions: Vec<String>,
    pub retry_advice: String,
}

/// One thing `diagnose` noticed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Finding {
    pub severity: Severity,
    /// e.g. `LOSS_NAN`, `LOSS_DIVERGING`, `LOSS_FLAT`, `NO_OUTPUT`, `LOW_GPU_UTILIZATION`, `NODE_OFFLINE`, `FAILED`.
    pub kind: String,
    pub summary: String,
    pub evidence: Vec<Evidence>,
}

/// `GET /api/v1/runs/{id}/diagnosis`: works on running runs too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Diagnosis {
    pub run_id: String,
    pub status: String,
    pub findings: Vec<Finding>,
    /// Present when the run failed.
    pub failure: Option<FailureExplanation>,
}
