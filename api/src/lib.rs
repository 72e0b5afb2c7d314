//! Types shared by every GPUPlane process: states, scopes, failure reasons and
//! the JSON bodies that cross the wire. One definition each, no I/O.

/// The names an enum's variants are stored and shown as, declared once:
/// `ALL`, `as_str`, `parse` (exact), `Display`, and `FromStr` (ASCII
/// case-insensitive; the error lists every name). Serde's `rename_all` on
/// the enum must give the same names: `tests::names_match_serde` checks it.
macro_rules! names {
    ($what:literal, $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The variant named exactly `text`.
            pub fn parse(text: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|variant| variant.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|variant| variant.as_str().eq_ignore_ascii_case(text))
                    .ok_or_else(|| {
                        let names: Vec<&str> = $name::ALL.iter().map(|variant| variant.as_str()).collect();
                        format!("unknown {} `{text}`; expected one of {}", $what, names.join(", "))
                    })
            }
        }
    };
}

pub mod agent;
pub mod alert;
pub mod array;
pub mod audit;
pub mod auth;
pub mod diagnosis;
pub mod duration;
pub mod error;
pub mod evaluation;
pub mod event;
pub mod experiment;
pub mod health;
pub mod job;
pub mod log;
pub mod mcp;
pub mod metric;
pub mod mlflow;
pub mod node;
pub mod paths;
pub mod project;
pub mod quota;
pub mod recipe;
pub mod share;
pub mod spec;
pub mod sweep;
pub mod telemetry;
pub mod terminal;
pub mod usage;
pub mod user;

/// The largest integer the API accepts for priorities and cursors (2^62):
/// safely inside i64 and exact in the f64 of JavaScript and Python clients.
pub const MAX_I64_SAFE: i64 = 1 << 62;

/// Whether a priority is within ±[`MAX_I64_SAFE`]. (Not `abs()`, which
/// overflows on `i64::MIN`: Schemathesis sent one.)
pub fn valid_priority(priority: i64) -> bool {
    (-MAX_I64_SAFE..=MAX_I64_SAFE).contains(&priority)
}

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

#[cfg(test)]
mod tests {
    use serde::Serialize;

    fn same_as_serde<T: Serialize + Copy + std::fmt::Display>(all: &[T]) {
        for value in all {
            assert_eq!(serde_json::to_string(value).unwrap(), format!("\"{value}\""));
        }
    }

    #[test]
    fn names_match_serde() {
        same_as_serde(crate::auth::Scope::ALL);
        same_as_serde(crate::event::Severity::ALL);
        same_as_serde(crate::event::EventKind::ALL);
        same_as_serde(crate::job::JobStatus::ALL);
        same_as_serde(crate::job::FailureReason::ALL);
        same_as_serde(crate::job::JobKind::ALL);
        same_as_serde(crate::job::Runner::ALL);
        same_as_serde(crate::log::LogStream::ALL);
        same_as_serde(crate::metric::Goal::ALL);
        same_as_serde(crate::node::NodeStatus::ALL);
        same_as_serde(crate::node::GpuSource::ALL);
        same_as_serde(crate::project::Role::ALL);
        same_as_serde(crate::sweep::Method::ALL);
        same_as_serde(crate::sweep::SweepState::ALL);
        same_as_serde(crate::sweep::SweepAction::ALL);
        same_as_serde(crate::quota::QuotaKind::ALL);
        same_as_serde(crate::alert::ChannelKind::ALL);
        same_as_serde(crate::alert::SubscriptionScope::ALL);
        same_as_serde(crate::alert::DeliveryStatus::ALL);
        same_as_serde(crate::audit::AuditAction::ALL);
    }

    #[test]
    fn names_parse_exactly_and_from_str_ignores_case() {
        use crate::job::JobStatus;
        assert_eq!(JobStatus::parse("RUNNING"), Some(JobStatus::Running));
        assert_eq!(JobStatus::parse("running"), None);
        assert_eq!("running".parse::<JobStatus>(), Ok(JobStatus::Running));
        let error = "runing".parse::<JobStatus>().unwrap_err();
        assert_eq!(
            error,
            "unknown status `runing`; expected one of QUEUED, DISPATCHING, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST"
        );
    }
}
