//! Projects and the roles of their members.

use serde::{Deserialize, Serialize};

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
