//! The attempt directory, `JOBS_DIR/<job-id>/attempt-<n>/` (`~/.gpuctl/jobs`
//! by default): the full output, and the small files through which the
//! agent, the shim and a restarted agent agree on what happened.
//!
//! | file | written by | means |
//! |---|---|---|
//! | `owner.json` | agent | the server (id, URL) and node it was dispatched by |
//! | `dispatch.json` | agent | the attempt as the server sent it, less its secret values and its token (`Dispatch::at_rest`): those reach the shim on a pipe and, after a restart, come again with the server's welcome |
//! | `stdout.log`, `stderr.log` | the job | its whole output |
//! | `shim.json` | shim | the job started: its pid |
//! | `exit.room` | shim | room for `exit.json`, taken at the start and renamed to it at the end, so a full disk keeps the exit |
//! | `exit.json` | shim | the job ended: code, signal, OOM kill |
//! | `cancelled` | agent | the server asked to stop it |
//! | `timed_out` | agent | it reached its time limit and was stopped |
//! | `reported` | agent | the server acknowledged its end: forget it |
//! | `spool/` | the job's SDK | metrics it could not send (`GPUCTL_SPOOL_DIR`), and in `spool/quarantine/` what the server refused; the agent reports both and sends what is left when the job ends (`spool.rs`) |
//!
//! Beside the attempts, `JOBS_DIR/<job-id>/exp/` holds the experiment folder
//! shipped with the job (`gpuctl job submit --exp DIR`), written before the
//! first attempt this host runs of it and shared by the later ones:
//! `GPUCTL_EXP_DIR`, and the job's working directory. `JOBS_DIR/<job-id>/job/`
//! is the job's own folder (`GPUCTL_JOB_DIR`), made before its first attempt
//! here and kept across its attempts, for checkpoints and what else a later
//! attempt needs; the agent watches it for checkpoint and event files.
//!
//! The jobs directory and every directory below it are 0700, and every file
//! the agent or the shim writes is 0600: other users of the host see nothing.

use anyhow::Context;
use gpuplane_api::agent::{AttemptRef, Dispatch};
use gpuplane_api::recipe::FolderFile;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const OWNER: &str = "owner.json";
pub const DISPATCH: &str = "dispatch.json";
pub const SHIM: &str = "shim.json";
pub const EXIT: &str = "exit.json";
pub const CANCELLED: &str = "cancelled";
pub const TIMED_OUT: &str = "timed_out";
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

/// The job's own folder on this host, kept across its attempts
/// (`GPUCTL_JOB_DIR`, see the module doc).
pub fn job_dir(attempt_dir: &Path) -> PathBuf {
    attempt_dir.parent().unwrap_or(attempt_dir).join("job")
}

/// The experiment folder shipped with an attempt's job (see the module doc).
pub fn experiment_dir(attempt_dir: &Path) -> PathBuf {
    attempt_dir.parent().unwrap_or(attempt_dir).join("exp")
}

/// Writes the experiment folder shipped with the attempt's job, checked
/// again here (no path leaves the folder), unless an earlier attempt on
/// this host wrote it: what that attempt changed in it stays, as on a
/// shared filesystem. Built in `exp.partial` and renamed when whole, so an
/// agent stopped halfway leaves no half folder. Files are 0600 (0700 when
/// executable), folders 0700.
pub fn write_experiment(attempt_dir: &Path, files: &[FolderFile]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let target = experiment_dir(attempt_dir);
    if target.is_dir() {
        return Ok(());
    }
    let checked = gpuplane_api::recipe::check_folder(files).map_err(|problems| {
        let listed: Vec<String> = problems
            .iter()
            .map(|problem| format!("{}: {}", problem.field, problem.message))
            .collect();
        anyhow::anyhow!(
            "the experiment folder shipped with the job is refused: {}",
            listed.join("; ")
        )
    })?;
    let partial = target.with_extension("partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial).with_context(|| format!("cannot remove {}", partial.display()))?;
    }
    create_private_dir(&partial)?;
    for file in checked {
        let path = partial.join(&file.path);
        if let Some(parent) = path.parent() {
            create_private_dir(parent)?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if file.executable { 0o700 } else { 0o600 })
            .open(&path)
            .and_then(|mut written| written.write_all(&file.bytes))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    std::fs::rename(&partial, &target).with_context(|| format!("cannot write {}", target.display()))
}

/// Which server and node an attempt belongs to, written before anything
/// else: a later agent connected to another server never reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub server_id: String,
    pub server_url: String,
    pub node_id: String,
    pub node_name: String,
}

/// Creates `dir` (and missing parents) readable by this user only, and
/// makes `dir` itself 0700 if it existed with looser rights.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private", dir.display()))
}

/// Opens `path` for appending, creating it with mode 0600.
pub fn append_private(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
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

/// Writes `value` as JSON atomically (temporary file, then rename), mode 0600.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temporary = path.with_extension("tmp");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut file| file.write_all(&serde_json::to_vec_pretty(value)?))
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

pub fn touch(path: &Path) -> anyhow::Result<()> {
    append_private(path).map(|_| ())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(path: &str, content: &str, executable: bool) -> FolderFile {
        use base64::Engine as _;
        FolderFile {
            path: path.into(),
            executable,
            content: base64::engine::general_purpose::STANDARD.encode(content),
        }
    }

    #[test]
    fn a_shipped_folder_is_written_once_privately_and_never_outside() {
        let jobs = tempfile::tempdir().unwrap();
        let attempt = jobs.path().join("job_A").join("attempt-1");
        create_private_dir(&attempt).unwrap();
        let folder = [
            file("train.sh", "echo hi\n", true),
            file("src/model.py", "x = 1\n", false),
        ];
        write_experiment(&attempt, &folder).unwrap();
        let exp = experiment_dir(&attempt);
        assert_eq!(exp, jobs.path().join("job_A").join("exp"));
        assert_eq!(
            std::fs::read_to_string(exp.join("src/model.py")).unwrap(),
            "x = 1\n"
        );
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&exp.join("train.sh")), 0o700);
        assert_eq!(mode(&exp.join("src/model.py")), 0o600);
        assert_eq!(mode(&exp.join("src")), 0o700);

        // A later attempt keeps what the first one changed.
        std::fs::write(exp.join("checkpoint"), "step 10").unwrap();
        let second = jobs.path().join("job_A").join("attempt-2");
        write_experiment(&second, &folder).unwrap();
        assert!(exp.join("checkpoint").exists());

        // A hostile folder (a server that should have refused it) writes nothing.
        let other = jobs.path().join("job_B").join("attempt-1");
        create_private_dir(&other).unwrap();
        let error = write_experiment(
            &other,
            &[file("ok", "", false), file("../../escaped", "x", false)],
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("files[1].path"), "{error}");
        assert!(!jobs.path().join("escaped").exists());
        assert!(!experiment_dir(&other).exists());
    }
}
