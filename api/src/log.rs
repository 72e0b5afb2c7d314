//! Job output lines as the API shows them.

use serde::{Deserialize, Serialize};

/// The longest output line shipped and kept, in bytes: the agent cuts longer
/// lines (saying how much it cut) and the whole line stays in the agent's
/// log file.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }

    /// The file the agent writes the stream to in the attempt's directory.
    pub fn file_name(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout.log",
            LogStream::Stderr => "stderr.log",
        }
    }
}

/// One line of output. `n` counts lines within its stream and attempt, from 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogLine {
    pub n: i64,
    pub stream: LogStream,
    pub text: String,
    pub attempt: i64,
    /// RFC 3339 time the agent read the line.
    pub time: String,
}

/// `GET /api/v1/jobs/{id}/logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Logs {
    pub lines: Vec<LogLine>,
    /// True when older lines exist than the server keeps (the agent has them all).
    pub truncated: bool,
    /// Where the lines came from: `server` (the newest lines it keeps) or `agent` (the full file).
    pub source: String,
}
