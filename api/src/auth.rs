//! Token scopes and `GET /api/v1/auth/whoami`.

use serde::{Deserialize, Serialize};

/// What a bearer token may do. `write` includes `read`; `sdk` may only ingest
/// metrics; `agent` is held by `gpuplane-agent` processes only; `metrics` may
/// only scrape `GET /metrics` (a server admin's, for Prometheus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
    Sdk,
    Agent,
    Metrics,
}

impl Scope {
    /// Whether a token holding `self` may use a route that requires `needed`.
    pub fn grants(self, needed: Scope) -> bool {
        self == needed || (self == Scope::Write && needed == Scope::Read)
    }
}

names!("scope", Scope { Read => "read", Write => "write", Sdk => "sdk", Agent => "agent", Metrics => "metrics" });

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    /// The user's name; `null` for agent tokens, which belong to no user.
    pub user: Option<String>,
    /// Whether the token has a server admin's rights (never one limited to a project).
    pub is_admin: bool,
    pub token_id: String,
    pub token_name: String,
    pub scope: Scope,
    /// RFC 3339 time, or `null` for a token that does not expire.
    pub expires_at: Option<String>,
}

/// The user a console session belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionUser {
    pub id: String,
    pub name: String,
    pub is_admin: bool,
}

/// A token as its owner sees it (never the secret, which is shown once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub scope: Scope,
    /// The only project it may reach, if limited.
    pub project: Option<String>,
    /// Set for a job's own sdk token: the run it may write to.
    pub run_id: Option<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// `POST /api/v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    pub name: String,
    /// read, write or sdk, at most what the creating token may do; metrics
    /// for a server admin's `write` token.
    pub scope: Scope,
    #[serde(default)]
    pub project: Option<String>,
    /// Lifetime in days (default: none).
    #[serde(default)]
    pub expires_in_days: Option<i64>,
}

/// The answer to a token creation: the secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedToken {
    pub token: TokenInfo,
    pub secret: String,
}

/// A pending device sign-in (`gpuctl login --device-flow`) as the approving user sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeviceRequest {
    /// `XXXX-XXXX`.
    pub user_code: String,
    /// Program and host as the terminal reported them (not verified).
    pub client_name: String,
    pub client_host: String,
    /// The address the request came from, as the server saw it.
    pub client_ip: String,
    /// The address of the browser looking at the request; when it differs
    /// from `client_ip`, the page warns that the terminal may not be yours.
    pub approver_ip: String,
    pub requested_at: String,
    pub expires_at: String,
    /// pending, approved, denied or consumed.
    pub status: String,
}

/// The client's address as the server resolved it (the peer, or the
/// `X-Forwarded-For` entry from a trusted proxy), put in each request's
/// extensions for handlers and server functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub std::net::IpAddr);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_grants_read_but_nothing_else_crosses() {
        assert!(Scope::Write.grants(Scope::Read));
        assert!(Scope::Write.grants(Scope::Write));
        assert!(!Scope::Read.grants(Scope::Write));
        assert!(!Scope::Sdk.grants(Scope::Read));
        assert!(!Scope::Write.grants(Scope::Agent));
        assert!(!Scope::Agent.grants(Scope::Read));
    }

    #[test]
    fn scope_names_round_trip() {
        for &scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
            assert_eq!(serde_json::to_string(&scope).unwrap(), format!("\"{scope}\""));
        }
        assert!("admin".parse::<Scope>().is_err());
    }
}
