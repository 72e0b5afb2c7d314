//! Projects and the roles of their members.

use crate::job::Runner;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a member may do in a project; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read jobs, runs, logs, metrics and events.
    Viewer,
    /// Also submit, cancel, retry, evaluate.
    Editor,
    /// Also manage the project's members.
    Admin,
}

names!("role", Role { Viewer => "viewer", Editor => "editor", Admin => "admin" });

/// What happens to a job whose GPUs sit idle (`gpu_idle_threshold_percent`
/// for `gpu_idle_after_s`): a GPU_IDLE event either way; `stop` also ends
/// it (CANCELLED, reason IDLE) and frees its GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum IdleAction {
    #[default]
    Warn,
    Stop,
}

names!("idle action", IdleAction { Warn => "warn", Stop => "stop" });

/// A project as a caller sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Project {
    pub name: String,
    /// The caller's role in it.
    pub role: Role,
    /// The primary metric of runs that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_metric: Option<crate::metric::SetPrimaryMetric>,
    /// Whether editors may share its runs by link (project admins change it).
    #[serde(default = "yes")]
    pub share_links: bool,
    /// The highest priority its members may give a job (server admins set
    /// it); none: no ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i64>,
    /// Which nodes its jobs may run on and through which runners (server
    /// admins set it); none: nodes no policy reserves, process runner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_policy: Option<NodePolicy>,
    /// What happens to its jobs whose GPUs sit idle (project admins set it).
    #[serde(default)]
    pub idle_action: IdleAction,
}

/// A project's node policy (`PUT /api/v1/projects/{name}/node-policy`,
/// server admins). The server enforces it at submit, at retry and in every
/// scheduling pass; a job's `node_selector` only chooses among the nodes
/// it allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NodePolicy {
    /// Its jobs run only on nodes carrying all of these labels, and such
    /// nodes serve only projects whose policy names them. Empty: any node
    /// that no policy reserves.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The runners its jobs may use (`process` when left out). A node
    /// running docker or Slurm jobs serves only projects granted that runner.
    #[serde(default = "process_only")]
    pub runners: Vec<Runner>,
}

fn process_only() -> Vec<Runner> {
    vec![Runner::Process]
}

impl Default for NodePolicy {
    /// A project without a policy: unreserved nodes, the process runner.
    fn default() -> Self {
        NodePolicy {
            labels: BTreeMap::new(),
            runners: process_only(),
        }
    }
}

/// One project's node policy in `GET /api/v1/node-policies`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectNodePolicy {
    pub project: String,
    pub policy: NodePolicy,
    /// RFC 3339 time it was set, and by whom.
    pub updated_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
}

fn yes() -> bool {
    true
}

/// `POST /api/v1/projects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    pub name: String,
}

/// `POST /api/v1/projects/{name}/members`: add a member or change their role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Membership {
    pub user: String,
    pub role: Role,
}
