//! `GET /api/v1/usage`: GPU-hours allocated to jobs and GPU-hours their
//! GPUs actually worked (from telemetry), grouped one way.

use serde::{Deserialize, Serialize};

/// How usage is grouped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    #[default]
    Project,
    User,
    Node,
    GpuModel,
}

names!("usage grouping", UsageBy {
    Project => "project",
    User => "user",
    Node => "node",
    GpuModel => "gpu_model",
});

/// One group's GPU time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageRow {
    /// The project, user, node or GPU model (`(none)` for a job no user submitted).
    pub key: String,
    /// GPUs held × the time they were held (each attempt from its start to
    /// its end, or now), inside the report's span.
    pub allocated_gpu_hours: f64,
    /// The part of it the GPUs worked: each held GPU's mean utilisation over
    /// the time it was held × that time, from the agents' telemetry.
    pub used_gpu_hours: f64,
    /// Allocated time of GPUs with no telemetry at all (agents started with
    /// `--telemetry-interval 0`): neither used nor idle as far as anyone knows.
    pub unmeasured_gpu_hours: f64,
    /// Attempts (each member of a multi-node one) that held GPUs in the span.
    pub attempts: u64,
}

/// `GET /api/v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageReport {
    pub by: UsageBy,
    /// RFC 3339: the span's start and end (now).
    pub since: String,
    pub until: String,
    /// Largest allocation first.
    pub rows: Vec<UsageRow>,
    /// Every row together.
    pub total: UsageRow,
}
