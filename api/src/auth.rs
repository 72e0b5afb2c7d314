//! Token scopes and `GET /api/v1/auth/whoami`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a bearer token may do. `write` includes `read`; `sdk` may only ingest
/// metrics; `agent` is held by `gpuplane-agent` processes only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
    Sdk,
    Agent,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Write, Scope::Sdk, Scope::Agent];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Sdk => "sdk",
            Scope::Agent => "agent",
        }
    }

    /// Whether a token holding `self` may use a route that requires `needed`.
    pub fn grants(self, needed: Scope) -> bool {
        self == needed || (self == Scope::Write && needed == Scope::Read)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| format!("unknown scope `{s}`; expected read, write, sdk or agent"))
    }
}

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    /// The user's name; `null` for agent tokens, which belong to no user.
    pub user: Option<String>,
    pub is_admin: bool,
    pub token_id: String,
    pub token_name: String,
    pub scope: Scope,
    /// RFC 3339 time, or `null` for a token that does not expire.
    pub expires_at: Option<String>,
}

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
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
            assert_eq!(serde_json::to_string(&scope).unwrap(), format!("\"{scope}\""));
        }
        assert!("admin".parse::<Scope>().is_err());
    }
}
