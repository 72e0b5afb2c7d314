//! Share links: a read-only view of one run (its page, charts and logs) for
//! people without an account. Editors make them; the link's secret is
//! answered once and stored hashed; links expire, can be revoked, and every
//! view is recorded. A project's admins may forbid them.

use serde::{Deserialize, Serialize};

/// A link's lifetime when none is asked for, and the longest one.
pub const DEFAULT_SHARE_DAYS: u32 = 7;
pub const MAX_SHARE_DAYS: u32 = 90;

/// `POST /api/v1/runs/{run_id}/shares`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewShareLink {
    /// Days until it expires: 1 to 90 (default 7).
    #[serde(default)]
    pub expires_in_days: Option<u32>,
}

/// A share link as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareLink {
    pub id: String,
    pub run_id: String,
    pub created_by: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    pub revoked_at: Option<String>,
    /// Whether it opens now: not expired, not revoked, and the project allows links.
    pub active: bool,
    /// Requests made through it (its page, charts and logs).
    pub views: i64,
    pub last_viewed_at: Option<String>,
}

impl ShareLink {
    /// `open`, `revoked`, or `closed` (expired, or its project forbids links).
    pub fn state(&self) -> &'static str {
        match (&self.revoked_at, self.active) {
            (Some(_), _) => "revoked",
            (None, true) => "open",
            (None, false) => "closed",
        }
    }
}

/// The answer to making a link: the link, and its URL with the secret,
/// shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedShareLink {
    pub link: ShareLink,
    /// `{public_url}/s/{secret}`: the read-only page.
    pub url: String,
}

/// One request made through a share link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareView {
    pub time: String,
    /// What was fetched: `page`, `chart.svg`, `chart.png` or `logs`.
    pub what: String,
    /// The client's address (behind `trusted_proxies`, the forwarded one).
    pub address: Option<String>,
    pub user_agent: Option<String>,
}

/// `PATCH /api/v1/projects/{name}` (project admins).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProjectChanges {
    /// Whether editors may make share links of the project's runs; turning
    /// it off closes the existing ones too (they open again if turned back on
    /// before they expire).
    #[serde(default)]
    pub share_links: Option<bool>,
    /// The highest priority its members may give a job (server admins set
    /// it); `null` removes the ceiling, left out leaves it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub max_priority: Option<Option<i64>>,
    /// `warn` or `stop`: what happens to its jobs whose GPUs sit idle
    /// (project admins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_action: Option<crate::project::IdleAction>,
}

/// A field that is present, `null` included, as `Some`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(field: D) -> Result<Option<T>, D::Error> {
    T::deserialize(field).map(Some)
}
