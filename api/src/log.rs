//! Job output lines as the API shows them.

use serde::{Deserialize, Serialize};

/// The longest output line shipped and kept, in bytes: the agent cuts longer
/// lines (saying how much it cut) and the whole line stays in the agent's
/// log file.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Output that means the GPU ran out of memory (matched case-insensitively).
const CUDA_OOM_PATTERNS: &[&str] = &[
    "cuda out of memory",
    "cuda error: out of memory",
    "outofmemoryerror",
    "cublas_status_alloc_failed",
    "cudaerrormemoryallocation",
    "resource_exhausted: out of memory",
    "failed to allocate memory on device",
];

/// Words that make a line look like an error (matched case-insensitively).
const ERROR_WORDS: &[&str] = &[
    "error",
    "exception",
    "traceback",
    "fatal",
    "failed",
    "abort",
    "panic",
    "killed",
    "out of memory",
];

/// Whether a line of output says the GPU ran out of memory: the OOM failure
/// reason comes from such a line.
pub fn is_cuda_out_of_memory(line: &str) -> bool {
    let lower = line.to_lowercase();
    CUDA_OOM_PATTERNS.iter().any(|pattern| lower.contains(pattern))
}

/// Whether a line of output looks like an error: the lines a failure's
/// explanation quotes when no rule knows it, and the console's "first
/// error" link. Every CUDA out-of-memory line is one.
pub fn looks_like_error(line: &str) -> bool {
    let lower = line.to_lowercase();
    ERROR_WORDS.iter().any(|word| lower.contains(word)) || is_cuda_out_of_memory(line)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    Stdout,
    Stderr,
}

names!("stream", LogStream { Stdout => "stdout", Stderr => "stderr" });

impl LogStream {
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
    /// The member of a multi-node job that printed it (`GPUCTL_NODE_RANK`);
    /// absent (0) for a one-node job.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rank: i64,
}

/// For `skip_serializing_if`: a rank of 0 (a one-node job's) is not written.
pub(crate) fn is_zero(rank: &i64) -> bool {
    *rank == 0
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_and_cuda_oom_lines() {
        let cases = [
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                true,
                true,
            ),
            ("RuntimeError: CUDA error: out of memory", true, true),
            (
                "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)",
                true,
                true,
            ),
            ("Traceback (most recent call last):", true, false),
            ("ValueError: bad shape", true, false),
            ("thread 'main' panicked at src/main.rs:3", true, false),
            ("Killed", true, false),
            ("epoch 3 loss 0.42", false, false),
            ("Host memory: 12 GiB free", false, false),
        ];
        for (line, error, oom) in cases {
            assert_eq!(looks_like_error(line), error, "{line}");
            assert_eq!(is_cuda_out_of_memory(line), oom, "{line}");
        }
    }
}
