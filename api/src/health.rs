//! `GET /api/v1/health` and `GET /api/v1/ready`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok` from `health` (the server answers and its database is
    /// reachable); `ready` from `ready` (send it traffic).
    pub status: String,
    pub version: String,
    /// Whether this server runs the scheduler, the liveness monitor and the
    /// other work only one server runs: always with SQLite; with
    /// PostgreSQL, one replica at a time.
    #[serde(default)]
    pub leader: bool,
}
