//! Quotas: how many GPUs and running jobs one project or one user may have
//! at once. Admins set them; a job over quota is accepted and stays QUEUED
//! with the reason (`quota: project vision uses 8 of 8 GPUs`), never refused.

use serde::{Deserialize, Serialize};

/// What a quota limits: a project (all its jobs) or a user (the jobs they submitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum QuotaKind {
    Project,
    User,
}

names!("quota kind", QuotaKind {
    Project => "project",
    User => "user",
});

/// One quota and what its project or user has running now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Quota {
    pub kind: QuotaKind,
    /// The project's or the user's name.
    pub name: String,
    /// GPUs its DISPATCHING and RUNNING jobs may hold together; null: no limit.
    pub max_gpus: Option<i64>,
    /// Jobs it may have DISPATCHING or RUNNING at once; null: no limit.
    pub max_running_jobs: Option<i64>,
    /// GPUs its DISPATCHING and RUNNING jobs hold now.
    pub gpus_in_use: i64,
    /// Its DISPATCHING and RUNNING jobs now.
    pub running_jobs: i64,
    /// When it was last set (RFC 3339), and by whom.
    pub updated_at: String,
    pub updated_by: Option<String>,
}

/// `PUT /api/v1/quotas/{kind}/{name}`: the limits; a missing one means no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetQuota {
    #[serde(default)]
    pub max_gpus: Option<i64>,
    #[serde(default)]
    pub max_running_jobs: Option<i64>,
}

/// Fair share as `GET /cluster` shows it: its window and the GPU time the
/// projects and users the caller may see used in it, most used first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FairShare {
    /// Among equal priorities, less GPU time in this window goes first.
    pub window_s: i64,
    /// After this long in the queue a job goes by submit time.
    pub max_wait_s: i64,
    pub usage: Vec<GpuUse>,
}

impl FairShare {
    /// `project vision 12h, user alice 3h`: who used how much GPU time.
    pub fn usage_text(&self) -> String {
        let used: Vec<String> = self
            .usage
            .iter()
            .map(|used| {
                format!(
                    "{} {} {}",
                    used.kind,
                    used.name,
                    crate::duration::format_seconds(used.gpu_seconds)
                )
            })
            .collect();
        used.join(", ")
    }
}

/// GPU time one project or user used in fair share's window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuUse {
    pub kind: QuotaKind,
    pub name: String,
    /// GPU-seconds: one GPU for one second is 1.
    pub gpu_seconds: i64,
}

/// The largest limit a quota takes.
pub const MAX_QUOTA: i64 = 1_000_000;

impl Quota {
    /// `6/8 GPUs, 2/4 jobs`; `3 GPUs (no limit)` where there is none.
    pub fn usage_text(&self) -> String {
        let part = |used: i64, max: Option<i64>, what: &str| match max {
            Some(max) => format!("{used}/{max} {what}"),
            None => format!("{used} {what} (no limit)"),
        };
        format!(
            "{}, {}",
            part(self.gpus_in_use, self.max_gpus, "GPUs"),
            part(self.running_jobs, self.max_running_jobs, "jobs")
        )
    }
}
