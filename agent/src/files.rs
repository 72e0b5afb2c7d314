//! The attempt directory, `JOBS_DIR/<job-id>/attempt-<n>/` (`~/.gpuctl/jobs`
//! by default): the full output, and the small files through which the
//! agent, the shim and a restarted agent agree on what happened.
//!
//! | file | written by | means |
//! |---|---|---|
//! | `dispatch.json` | agent | the attempt as the server sent it |
//! | `stdout.log`, `stderr.log` | the job | its whole output |
//! | `shim.json` | shim | the job started: its pid |
//! | `exit.json` | shim | the job ended: code, signal, OOM kill |
//! | `cancelled` | agent | the server asked to stop it |
//! | `reported` | agent | the server acknowledged its end: forget it |

use anyhow::Context;
use gpuplane_api::agent::{AttemptRef, Dispatch};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DISPATCH: &str = "dispatch.json";
pub const SHIM: &str = "shim.json";
pub const EXIT: &str = "exit.json";
pub const CANCELLED: &str = "cancelled";
pub const REPORTED: &str = "reported";

/// `~/.gpuctl/jobs`.
pub fn default_jobs_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".gpuctl").join("jobs")
}

pub fn attempt_dir(jobs_dir: &Path, attempt: &AttemptRef) -> PathBuf {
    jobs_dir
        .join(&attempt.job_id)
        .join(format!("attempt-{}", attempt.attempt))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShimState {
    pub shim_pid: u32,
    pub child_pid: u32,
    /// Epoch milliseconds.
    pub started_at: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExitState {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    pub ended_at: i64,
    /// Set when the program could not be started at all.
    #[serde(default)]
    pub spawn_error: Option<String>,
}

/// Writes `value` as JSON atomically (temporary file, then rename).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, serde_json::to_vec_pretty(value)?)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

pub fn touch(path: &Path) -> anyhow::Result<()> {
    std::fs::write(path, b"").with_context(|| format!("cannot write {}", path.display()))
}

/// Attempts on disk whose end the server has not acknowledged, with their dispatch.
pub fn unfinished_attempts(jobs_dir: &Path) -> Vec<(PathBuf, Dispatch)> {
    let mut found = Vec::new();
    let Ok(jobs) = std::fs::read_dir(jobs_dir) else {
        return found;
    };
    for job in jobs.flatten() {
        let Ok(attempts) = std::fs::read_dir(job.path()) else {
            continue;
        };
        for attempt in attempts.flatten() {
            let dir = attempt.path();
            if dir.join(REPORTED).exists() {
                continue;
            }
            if let Some(dispatch) = read_json::<Dispatch>(&dir.join(DISPATCH)) {
                found.push((dir, dispatch));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Whether a process with this pid exists.
pub fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    let result = unsafe { libc::kill(pid as libc::pid_t, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
