//! `gpuplane-agent shim DIR`: the parent of one job process.
//!
//! The agent starts a shim per attempt and writes the dispatch, secrets
//! included, to its stdin (no file keeps them); with a device cgroup
//! (`isolation`), the job joins it before its program starts. The shim leaves the agent's session
//! (so it outlives an agent crash or restart), starts the job in its own
//! process group with stdin from /dev/null and its output appended to
//! `stdout.log` / `stderr.log`, records its pid in `shim.json`, waits for it,
//! and records how it ended in `exit.json`. A restarted agent reads these
//! files to adopt jobs it started before.

use crate::files::{self, EXIT, ExitState, SHIM, ShimState};
use crate::runner::command_line;
use gpuplane_api::agent::Dispatch;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};

pub fn run(dir: &Path, cgroup: Option<&Path>) -> anyhow::Result<()> {
    // SAFETY: setsid has no memory-safety preconditions; it fails harmlessly
    // if this process already leads a group.
    unsafe {
        libc::setsid();
    }
    // From the agent, on stdin: `dispatch.json` is kept without the secrets.
    let dispatch: Dispatch = serde_json::from_reader(std::io::stdin().lock())
        .map_err(|error| anyhow::anyhow!("cannot read the dispatch from the agent: {error}"))?;
    // Room for `exit.json`, taken before the job starts: a job that fills
    // the disk must not cost the record of how it ended.
    let _ = take_exit_room(dir);
    let stdout = files::append_private(&dir.join("stdout.log"))?;
    let stderr = files::append_private(&dir.join("stderr.log"))?;
    let (program, args, working_dir, env) = command_line(&dispatch, dir);
    let oom_before = oom_kills();
    let mut command = Command::new(&program);
    // The host's environment minus the agent's own settings; then the job's.
    for (name, _) in std::env::vars_os() {
        if crate::private_variable(&name) {
            command.env_remove(name);
        }
    }
    // Its device cgroup, joined before its program starts: a job that
    // cannot be isolated does not start (`isolation`).
    if let Some(cgroup) = cgroup {
        let procs = std::ffi::CString::new(cgroup.join("cgroup.procs").into_os_string().into_vec())?;
        // SAFETY: `join` only opens, writes and closes (async-signal-safe).
        unsafe {
            command.pre_exec(move || crate::isolation::join(&procs));
        }
    }
    // Taken before the spawn, so that a job's recorded time (its GPU time
    // for fair share) is never shorter than its process ran.
    let started_at = now_ms();
    let child = command
        .args(&args)
        .current_dir(&working_dir)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            let joining = match cgroup {
                Some(cgroup) => format!(" (or join its device cgroup {})", cgroup.display()),
                None => String::new(),
            };
            let state = ExitState {
                exit_code: None,
                signal: None,
                oom_killed: false,
                ended_at: now_ms(),
                spawn_error: Some(format!("cannot start {}{joining}: {error}", program.display())),
            };
            if let Some(cgroup) = cgroup {
                crate::isolation::remove(cgroup);
            }
            return record_exit(dir, &state);
        }
    };
    files::write_json(
        &dir.join(SHIM),
        &ShimState {
            shim_pid: std::process::id(),
            child_pid: child.id(),
            started_at,
        },
    )?;
    let status = child.wait()?;
    let signal = status.signal();
    let state = ExitState {
        exit_code: status.code(),
        signal,
        // A SIGKILL while the cgroup's OOM-kill count rose: the kernel's OOM killer.
        oom_killed: signal == Some(libc::SIGKILL) && oom_kills() > oom_before,
        ended_at: now_ms(),
        spawn_error: None,
    };
    let recorded = record_exit(dir, &state);
    // What the job left running in the background is still held to its
    // GPUs; its cgroup goes once empty.
    if let Some(cgroup) = cgroup {
        wait_until_empty(cgroup);
        crate::isolation::remove(cgroup);
    }
    recorded
}

/// Waits (up to 10 s) until no process is left in the job's cgroup: what
/// the job started in the background is still held to its GPUs.
fn wait_until_empty(cgroup: &Path) {
    for _ in 0..100 {
        match std::fs::read_to_string(cgroup.join("cgroup.procs")) {
            Ok(procs) if !procs.trim().is_empty() => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            _ => return,
        }
    }
}

/// The file that holds `exit.json`'s room until the job ends.
const EXIT_ROOM: &str = "exit.room";
const EXIT_ROOM_BYTES: usize = 1024;

/// Makes `exit.room`, private like the attempt's other files.
fn take_exit_room(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join(EXIT_ROOM))?
        .write_all(&[b' '; EXIT_ROOM_BYTES])
}

/// Writes `exit.json`: into the room taken at the start (overwritten in
/// place, padded with spaces, which JSON allows, then renamed), so no new
/// block is needed on a disk the job filled; else as a new file.
fn record_exit(dir: &Path, state: &ExitState) -> anyhow::Result<()> {
    use std::io::Write;
    let json = serde_json::to_vec(state)?;
    let room = dir.join(EXIT_ROOM);
    if json.len() <= EXIT_ROOM_BYTES
        && let Ok(mut file) = std::fs::OpenOptions::new().write(true).open(&room)
    {
        let mut padded = json;
        padded.resize(EXIT_ROOM_BYTES, b' ');
        if file.write_all(&padded).is_ok() && std::fs::rename(&room, dir.join(EXIT)).is_ok() {
            return Ok(());
        }
    }
    files::write_json(&dir.join(EXIT), state)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The `oom_kill` count of this process's cgroup (v2), or 0 when unknown.
fn oom_kills() -> u64 {
    let Ok(cgroup) = std::fs::read_to_string("/proc/self/cgroup") else {
        return 0;
    };
    let Some(path) = cgroup.lines().find_map(|line| line.strip_prefix("0::")) else {
        return 0;
    };
    let events = Path::new("/sys/fs/cgroup")
        .join(path.trim_start_matches('/'))
        .join("memory.events");
    std::fs::read_to_string(events)
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}
