//! Users and agent tokens as server admins manage them (`/api/v1/users`,
//! `/api/v1/agent-tokens`).

use serde::{Deserialize, Serialize};

/// A user account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct User {
    pub id: String,
    pub name: String,
    /// Server admin: manages users, projects, quotas, nodes and maintenance.
    pub is_admin: bool,
    /// RFC 3339; a disabled user's sessions and tokens stop working at once.
    pub disabled_at: Option<String>,
    /// Signs in with a password (local account), not only through SSO.
    pub local: bool,
    pub created_at: String,
}

/// `POST /api/v1/users`: a local account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    /// 1-64 letters, digits, '.', '_', '-' or '@'.
    pub name: String,
    /// At least 8 characters; stored as an argon2 hash.
    pub password: String,
    #[serde(default)]
    pub admin: bool,
}

/// `PATCH /api/v1/users/{name}`: what to change; absent fields stay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UserChanges {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<bool>,
    /// `true` disables the account (sessions and tokens stop working), `false` enables it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}

/// A token an agent speaks for its node with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentToken {
    pub id: String,
    pub name: String,
    /// The node it speaks for; `None` until its first hello binds it.
    pub node: Option<String>,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// `POST /api/v1/agent-tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewAgentToken {
    /// A name for people (default `agent`).
    #[serde(default)]
    pub name: Option<String>,
    /// Bind it to this node now; otherwise the first hello binds it.
    #[serde(default)]
    pub node: Option<String>,
}

/// A new agent token: the secret is in this answer only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedAgentToken {
    pub token: AgentToken,
    /// Give it to `gpuplane-agent --token-file`; it is not shown again.
    pub secret: String,
}
