//! Events: what happened to jobs, runs and nodes, with a severity.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

names!("severity", Severity { Info => "info", Warning => "warning", Critical => "critical" });

/// Kinds of events. Stored and shown as SCREAMING_SNAKE_CASE strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventKind {
    /// A job's attempt failed (warning) with its reason.
    JobFailed,
    /// A failed or lost job was queued again for another attempt.
    JobRetrying,
    /// The agent could not start a job.
    DispatchFailed,
    /// CUDA or host out of memory.
    Oom,
    /// A node stopped sending heartbeats.
    AgentDisconnected,
    /// A node came back.
    AgentReconnected,
    /// A running job's agent stayed away past the grace period.
    JobLost,
    /// The filesystem of a job's working_dir has less than 5 % free.
    DiskLow,
    /// A loss-like metric turned NaN or infinite.
    LossNan,
    /// A TensorBoard event file has a corrupt record; points before it are kept.
    TensorboardCorrupt,
    /// A job ended without reporting any metric.
    NoMetrics,
    /// The server refused part of what the agent reported (too large, say);
    /// the message names the job and what was dropped.
    ReportDropped,
    /// A running job was stopped to free GPUs for a higher-priority job and
    /// queued again.
    JobPreempted,
    /// A GPU reported a hardware error through NVML (an Xid, an ECC error).
    GpuError,
    /// A run raised it itself (the SDK's `run.alert`), at the severity it chose.
    RunAlert,
    /// A job's SDK spooled metrics instead of sending them (the server was
    /// out of its reach), or what it spooled was sent later (info).
    MetricsSpooled,
    /// The server refused metrics a job's SDK sent (or its agent sent for
    /// it); they wait in the spool's quarantine, named in the message.
    MetricsRefused,
    /// A running job's steps stopped advancing for many times its usual
    /// wait while its processes live; the message quotes its last output.
    JobHung,
    /// A running job's GPUs stayed under `gpu_idle_threshold_percent` for
    /// `gpu_idle_after_s`; the message gives the figures and what follows.
    GpuIdle,
}

names!("event kind", EventKind {
    JobFailed => "JOB_FAILED",
    JobRetrying => "JOB_RETRYING",
    DispatchFailed => "DISPATCH_FAILED",
    Oom => "OOM",
    AgentDisconnected => "AGENT_DISCONNECTED",
    AgentReconnected => "AGENT_RECONNECTED",
    JobLost => "JOB_LOST",
    DiskLow => "DISK_LOW",
    LossNan => "LOSS_NAN",
    TensorboardCorrupt => "TENSORBOARD_CORRUPT",
    NoMetrics => "NO_METRICS",
    ReportDropped => "REPORT_DROPPED",
    JobPreempted => "JOB_PREEMPTED",
    GpuError => "GPU_ERROR",
    RunAlert => "RUN_ALERT",
    MetricsSpooled => "METRICS_SPOOLED",
    MetricsRefused => "METRICS_REFUSED",
    JobHung => "JOB_HUNG",
    GpuIdle => "GPU_IDLE",
});

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: String,
    pub time: String,
    pub severity: Severity,
    pub kind: EventKind,
    pub job_id: Option<String>,
    pub run_id: Option<String>,
    pub node_id: Option<String>,
    pub message: String,
}
