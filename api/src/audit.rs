//! The audit log (`GET /api/v1/audit`, server admins): who did what, when
//! and from where, for every admin action and every change to a job's place
//! in the queue.

use serde::{Deserialize, Serialize};

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AuditAction {
    #[serde(rename = "job.cancel")]
    JobCancel,
    #[serde(rename = "job.retry")]
    JobRetry,
    #[serde(rename = "job.priority")]
    JobPriority,
    #[serde(rename = "job.hold")]
    JobHold,
    #[serde(rename = "job.release")]
    JobRelease,
    #[serde(rename = "maintenance.on")]
    MaintenanceOn,
    #[serde(rename = "maintenance.off")]
    MaintenanceOff,
    #[serde(rename = "node.drain")]
    NodeDrain,
    #[serde(rename = "node.undrain")]
    NodeUndrain,
    #[serde(rename = "node.labels")]
    NodeLabels,
    #[serde(rename = "quota.set")]
    QuotaSet,
    #[serde(rename = "quota.clear")]
    QuotaClear,
    #[serde(rename = "project.create")]
    ProjectCreate,
    #[serde(rename = "project.member")]
    ProjectMember,
    #[serde(rename = "project.settings")]
    ProjectSettings,
    #[serde(rename = "project.node_policy")]
    ProjectNodePolicy,
    #[serde(rename = "project.node_policy_clear")]
    ProjectNodePolicyClear,
    #[serde(rename = "recipe.publish")]
    RecipePublish,
    #[serde(rename = "recipe.deprecate")]
    RecipeDeprecate,
    #[serde(rename = "user.create")]
    UserCreate,
    #[serde(rename = "user.disable")]
    UserDisable,
    #[serde(rename = "user.enable")]
    UserEnable,
    #[serde(rename = "user.admin")]
    UserAdmin,
    #[serde(rename = "agent_token.create")]
    AgentTokenCreate,
    #[serde(rename = "agent_token.revoke")]
    AgentTokenRevoke,
    #[serde(rename = "run.archive")]
    RunArchive,
    #[serde(rename = "run.unarchive")]
    RunUnarchive,
    #[serde(rename = "run.delete")]
    RunDelete,
    #[serde(rename = "share_link.create")]
    ShareLinkCreate,
    #[serde(rename = "share_link.revoke")]
    ShareLinkRevoke,
    #[serde(rename = "alert_channel.create")]
    AlertChannelCreate,
    #[serde(rename = "alert_channel.delete")]
    AlertChannelDelete,
    #[serde(rename = "alert_subscription.create")]
    AlertSubscriptionCreate,
    #[serde(rename = "alert_subscription.delete")]
    AlertSubscriptionDelete,
    /// A user's token made on the server's host (`admin create-token`).
    #[serde(rename = "token.create")]
    TokenCreate,
    #[serde(rename = "sweep.create")]
    SweepCreate,
    #[serde(rename = "sweep.pause")]
    SweepPause,
    #[serde(rename = "sweep.resume")]
    SweepResume,
    #[serde(rename = "sweep.stop")]
    SweepStop,
    /// An MCP tool call that changed something (the tool, its arguments).
    #[serde(rename = "mcp.tool")]
    McpTool,
}

names!("audit action", AuditAction {
    JobCancel => "job.cancel",
    JobRetry => "job.retry",
    JobPriority => "job.priority",
    JobHold => "job.hold",
    JobRelease => "job.release",
    MaintenanceOn => "maintenance.on",
    MaintenanceOff => "maintenance.off",
    NodeDrain => "node.drain",
    NodeUndrain => "node.undrain",
    NodeLabels => "node.labels",
    QuotaSet => "quota.set",
    QuotaClear => "quota.clear",
    ProjectCreate => "project.create",
    ProjectMember => "project.member",
    ProjectSettings => "project.settings",
    ProjectNodePolicy => "project.node_policy",
    ProjectNodePolicyClear => "project.node_policy_clear",
    RecipePublish => "recipe.publish",
    RecipeDeprecate => "recipe.deprecate",
    UserCreate => "user.create",
    UserDisable => "user.disable",
    UserEnable => "user.enable",
    UserAdmin => "user.admin",
    AgentTokenCreate => "agent_token.create",
    AgentTokenRevoke => "agent_token.revoke",
    RunArchive => "run.archive",
    RunUnarchive => "run.unarchive",
    RunDelete => "run.delete",
    ShareLinkCreate => "share_link.create",
    ShareLinkRevoke => "share_link.revoke",
    AlertChannelCreate => "alert_channel.create",
    AlertChannelDelete => "alert_channel.delete",
    AlertSubscriptionCreate => "alert_subscription.create",
    AlertSubscriptionDelete => "alert_subscription.delete",
    TokenCreate => "token.create",
    McpTool => "mcp.tool",
    SweepCreate => "sweep.create",
    SweepPause => "sweep.pause",
    SweepResume => "sweep.resume",
    SweepStop => "sweep.stop",
});

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Its place in the log (the `before` cursor of the next page).
    pub seq: i64,
    /// RFC 3339.
    pub time: String,
    /// The user's name; `token NAME` for a token without a user; `server CLI`
    /// for `gpuplane-server admin` on the server's host.
    pub actor: String,
    /// The token's name (`session` for the console), when through the API.
    pub token: Option<String>,
    /// The client's IP address, when through the API.
    pub address: Option<String>,
    pub action: AuditAction,
    /// What it was done to: a job id, a node, a project or user name.
    pub target: String,
    /// What changed, in words (`priority 0 → 10`, the maintenance message).
    pub detail: String,
}
