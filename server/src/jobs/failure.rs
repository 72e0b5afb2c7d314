//! How an attempt ended, decided from what its agent reported: cancelled,
//! succeeded, or failed with a reason (OOM from the kernel's OOM killer or
//! from CUDA's own message in the output, its time limit, a signal, an exit code). Pure: the
//! caller gathers the facts; table-driven tests below.

use gpuplane_api::job::{FailureReason, JobStatus, signal_name};
use gpuplane_api::log::is_cuda_out_of_memory;

/// What the agent saw at an attempt's end, and whether a cancel was asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exit<'a> {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    pub cancelled: bool,
    /// The agent stopped it at its time limit (`time_limit_s`, given here).
    pub timed_out: Option<i64>,
    /// The attempt's last output lines, oldest first.
    pub output: &'a [String],
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: JobStatus,
    pub reason: Option<FailureReason>,
    pub detail: Option<String>,
}

impl Outcome {
    fn failed(reason: FailureReason, detail: String) -> Outcome {
        Outcome {
            status: JobStatus::Failed,
            reason: Some(reason),
            detail: Some(detail),
        }
    }
}

/// Cancel wins, then the OOM killer, then the time limit, then a clean
/// exit, then a CUDA out-of-memory line (the newest), then the signal or
/// exit code.
pub fn classify(exit: Exit<'_>) -> Outcome {
    if exit.cancelled {
        return Outcome {
            status: JobStatus::Cancelled,
            reason: None,
            detail: Some("cancelled on request".into()),
        };
    }
    if exit.oom_killed {
        return Outcome::failed(
            FailureReason::Oom,
            "killed by the kernel's OOM killer (host memory ran out)".into(),
        );
    }
    if let Some(limit) = exit.timed_out {
        let limit = gpuplane_api::duration::format_seconds(limit);
        let how = match (exit.signal, exit.exit_code) {
            (Some(signal), _) => match signal_name(signal) {
                Some("SIGKILL") => {
                    "it did not stop within the grace period after SIGTERM and was killed with SIGKILL"
                        .to_string()
                }
                Some(name) => format!("it was stopped with SIGTERM and ended by {name}"),
                None => format!("it was stopped with SIGTERM and ended by signal {signal}"),
            },
            (None, Some(code)) => format!("it was stopped with SIGTERM and exited with code {code}"),
            (None, None) => "it was stopped with SIGTERM".to_string(),
        };
        return Outcome::failed(
            FailureReason::Timeout,
            format!("reached its time limit of {limit}: {how}"),
        );
    }
    if exit.exit_code == Some(0) && exit.signal.is_none() {
        return Outcome {
            status: JobStatus::Succeeded,
            reason: None,
            detail: None,
        };
    }
    if let Some(line) = exit.output.iter().rev().find(|line| is_cuda_out_of_memory(line)) {
        return Outcome::failed(FailureReason::Oom, format!("CUDA out of memory: {}", line.trim()));
    }
    match (exit.signal, exit.exit_code) {
        (Some(signal), _) => {
            let name = signal_name(signal).unwrap_or("unknown signal");
            Outcome::failed(
                FailureReason::Signal,
                format!("killed by {name} (signal {signal})"),
            )
        }
        (None, Some(code)) => Outcome::failed(FailureReason::ExitCode, format!("exited with code {code}")),
        (None, None) => Outcome::failed(FailureReason::ExitCode, "ended without an exit code".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUDA_OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)";

    #[test]
    fn every_way_an_attempt_ends() {
        let traceback = [
            "Traceback (most recent call last):".to_string(),
            CUDA_OOM.to_string(),
        ];
        let value_error = ["ValueError: bad".to_string()];
        let exit = Exit::default();
        // (case, exit, status, reason, detail)
        let cases: &[(&str, Exit, JobStatus, Option<FailureReason>, &str)] = &[
            (
                "exit 0",
                Exit {
                    exit_code: Some(0),
                    ..exit
                },
                JobStatus::Succeeded,
                None,
                "",
            ),
            (
                "cancel wins over a signal",
                Exit {
                    signal: Some(15),
                    cancelled: true,
                    ..exit
                },
                JobStatus::Cancelled,
                None,
                "cancelled on request",
            ),
            (
                "cancel wins over exit 0",
                Exit {
                    exit_code: Some(0),
                    cancelled: true,
                    ..exit
                },
                JobStatus::Cancelled,
                None,
                "cancelled on request",
            ),
            (
                "the OOM killer",
                Exit {
                    signal: Some(9),
                    oom_killed: true,
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::Oom),
                "killed by the kernel's OOM killer (host memory ran out)",
            ),
            (
                "the time limit, stopped by SIGTERM",
                Exit {
                    signal: Some(15),
                    timed_out: Some(7200),
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::Timeout),
                "reached its time limit of 2h: it was stopped with SIGTERM and ended by SIGTERM",
            ),
            (
                "the time limit, killed after the grace",
                Exit {
                    signal: Some(9),
                    timed_out: Some(90),
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::Timeout),
                "reached its time limit of 1m30s: it did not stop within the grace period after SIGTERM and was killed with SIGKILL",
            ),
            (
                "the time limit wins over a clean exit after SIGTERM",
                Exit {
                    exit_code: Some(0),
                    timed_out: Some(60),
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::Timeout),
                "reached its time limit of 1m: it was stopped with SIGTERM and exited with code 0",
            ),
            (
                "cancel wins over the time limit",
                Exit {
                    signal: Some(15),
                    cancelled: true,
                    timed_out: Some(60),
                    ..exit
                },
                JobStatus::Cancelled,
                None,
                "cancelled on request",
            ),
            (
                "CUDA OOM in the output",
                Exit {
                    exit_code: Some(1),
                    output: &traceback,
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::Oom),
                "CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)",
            ),
            (
                "exit 0 after a CUDA OOM line is a success",
                Exit {
                    exit_code: Some(0),
                    output: &traceback,
                    ..exit
                },
                JobStatus::Succeeded,
                None,
                "",
            ),
            (
                "a named signal",
                Exit {
                    signal: Some(11),
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::Signal),
                "killed by SIGSEGV (signal 11)",
            ),
            (
                "an unknown signal",
                Exit {
                    signal: Some(77),
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::Signal),
                "killed by unknown signal (signal 77)",
            ),
            (
                "an exit code",
                Exit {
                    exit_code: Some(3),
                    output: &value_error,
                    ..exit
                },
                JobStatus::Failed,
                Some(FailureReason::ExitCode),
                "exited with code 3",
            ),
            (
                "nothing known",
                exit,
                JobStatus::Failed,
                Some(FailureReason::ExitCode),
                "ended without an exit code",
            ),
        ];
        for (case, exit, status, reason, detail) in cases {
            let outcome = classify(*exit);
            assert_eq!(outcome.status, *status, "{case}");
            assert_eq!(outcome.reason, *reason, "{case}");
            assert_eq!(outcome.detail.as_deref().unwrap_or(""), *detail, "{case}");
        }
    }
}
