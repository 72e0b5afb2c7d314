//! Types shared by every GPUPlane process: states, scopes, failure reasons and
//! the JSON bodies that cross the wire. One definition each, no I/O.

pub mod agent;
pub mod auth;
pub mod diagnosis;
pub mod error;
pub mod evaluation;
pub mod event;
pub mod health;
pub mod job;
pub mod log;
pub mod metric;
pub mod node;
pub mod project;

/// The largest integer the API accepts for priorities and cursors (2^62):
/// safely inside i64 and exact in the f64 of JavaScript and Python clients.
pub const MAX_I64_SAFE: i64 = 1 << 62;

/// The version of this build, the same for every GPUPlane binary.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `{"items": [...], "next_before": cursor or null}`, the shape of every list.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `before` to get the next page; `null` on the last page.
    pub next_before: Option<i64>,
}
