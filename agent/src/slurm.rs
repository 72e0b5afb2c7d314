//! The Slurm runner: an attempt becomes an `sbatch` job on a Slurm login or
//! submit host (`gpuplane-agent --runner slurm`, or a job's `runner =
//! "slurm"` on such an agent).
//!
//! The batch script is fixed (`exec "$@"`): the job's argv follows it as
//! the script's arguments, so nothing of the job is ever read by a shell.
//! A job on several nodes (`resources.nodes`) is one `sbatch --nodes N`
//! allocation whose fixed script starts one task per node with `srun`,
//! each with the rendezvous variables torchrun and others read.
//! Slurm writes the job's output into the attempt's `stdout.log` and
//! `stderr.log`, which the agent tails as for a process (the jobs directory
//! must be on a filesystem the compute nodes share). The Slurm job id is
//! kept in `slurm.json` in the attempt directory, so a restarted agent
//! adopts the job. Its state is read with `scontrol show job` (and `sacct`
//! once slurmctld has forgotten it); cancel is `scancel`.
//!
//! A job cannot configure the agent's own `sbatch`: Slurm's commands run by
//! the absolute paths found on the agent's `PATH` when it started, with the
//! agent's environment (less its own settings); the job's variables go to
//! the job alone, through `--export-file` on a pipe (never a file, never
//! argv), so a job's `PATH`, `SBATCH_*` or `SLURM_*` change neither which
//! `sbatch` runs nor what it allocates. GPUs are always on the `sbatch` line.

use crate::files;
use crate::runner;
use gpuplane_api::agent::Dispatch;
use gpuplane_api::job::Runner;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

/// The handle of an attempt's Slurm job, in the attempt directory.
pub const HANDLE: &str = "slurm.json";
/// The fixed batch script, in the attempt directory.
const SCRIPT: &str = "slurm-batch.sh";
const SCRIPT_TEXT: &str =
    "#!/bin/sh\n# GPUPlane: the job's argv follows as arguments; no shell reads it.\nexec \"$@\"\n";
/// The fixed batch script of a job on several nodes: one task per node
/// (`srun`), each told its rank and the others' addresses (Slurm's
/// `NodeAddr` of each node, in rank order); the first task that fails
/// stops the others (`--kill-on-bad-exit`). The port is derived from the
/// Slurm job id, so concurrent jobs on a node differ.
const MULTI_NODE_SCRIPT_TEXT: &str = r#"#!/bin/sh
# GPUPlane: the job's argv follows as arguments; no shell reads it.
# One task per node, each told its rank and where the others are.
addrs=
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  addr=$(scontrol show node "$node" --oneliner | sed -n 's/.* NodeAddr=\([^ ]*\) .*/\1/p')
  addrs="$addrs${addrs:+,}${addr:-$node}"
done
MASTER_ADDR=${addrs%%,*}
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
GPUCTL_NODE_ADDRS=$addrs
PET_MASTER_ADDR=$MASTER_ADDR
PET_MASTER_PORT=$MASTER_PORT
export MASTER_ADDR MASTER_PORT GPUCTL_NODE_ADDRS PET_MASTER_ADDR PET_MASTER_PORT
exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 \
  /bin/sh -c 'export GPUCTL_NODE_RANK="$SLURM_NODEID" PET_NODE_RANK="$SLURM_NODEID"; exec "$@"' gpuplane-member "$@"
"#;
/// Variables the multi-node batch script sets per task; a job's own values
/// for them never reach it.
const RENDEZVOUS_VARIABLES: [&str; 10] = [
    "GPUCTL_NODE_RANK",
    "GPUCTL_NNODES",
    "GPUCTL_NODE_ADDRS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
];
/// How long one Slurm command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Slurm's client commands, by the absolute path found on the agent's own
/// `PATH` when it started (`tools`); a job's environment never picks them.
static TOOLS: std::sync::OnceLock<BTreeMap<&'static str, std::path::PathBuf>> = std::sync::OnceLock::new();
const TOOL_NAMES: [&str; 5] = ["sbatch", "scontrol", "sacct", "scancel", "sinfo"];

/// Finds Slurm's commands on the agent's `PATH`, once (at start).
pub fn find_tools() {
    TOOLS.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        TOOL_NAMES
            .into_iter()
            .filter_map(|name| {
                std::env::split_paths(&path)
                    .filter(|dir| dir.is_absolute())
                    .map(|dir| dir.join(name))
                    .find(|candidate| runner::is_executable(candidate))
                    .map(|found| (name, found))
            })
            .collect()
    });
}

/// A Slurm command by its absolute path (found at start), or why not.
fn tool(name: &'static str) -> Result<Command, String> {
    find_tools();
    match TOOLS.get().and_then(|tools| tools.get(name)) {
        Some(path) => Ok(Command::new(path)),
        None => Err(format!(
            "`{name}` is not installed (Slurm's client commands are needed on the agent's PATH)"
        )),
    }
}

/// Where jobs go when neither the spec nor the node's labels say.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
}

impl Defaults {
    /// From the node's labels `slurm.partition`, `slurm.account`, `slurm.qos`.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Defaults {
        let label = |name: &str| labels.get(name).filter(|v| !v.is_empty()).cloned();
        Defaults {
            partition: label("slurm.partition"),
            account: label("slurm.account"),
            qos: label("slurm.qos"),
        }
    }
}

/// An attempt's Slurm job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlurmJob {
    pub id: u64,
    /// Epoch milliseconds of the submission.
    pub submitted_at: i64,
}

/// Where a Slurm job is.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Queued (or being configured), with Slurm's reason.
    Pending { reason: String },
    /// Running since this time (epoch milliseconds).
    Running { started_at: i64 },
    /// Over.
    Ended(Ended),
}

/// How a Slurm job ended.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ended {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    /// Slurm stopped it at its time limit.
    pub timed_out: bool,
    /// Slurm lost it, or cancelled it on its own: why.
    pub lost: Option<String>,
    /// Epoch milliseconds.
    pub ended_at: i64,
    /// Slurm's state word (COMPLETED, FAILED, …), for the agent's log.
    pub state: String,
}

/// Everything that would make the submission fail, named.
pub async fn check(dispatch: &Dispatch, attempt_dir: &Path, host: &str, enabled: bool) -> Result<(), String> {
    if !enabled {
        return Err(format!(
            "runner slurm: the agent on {host} does not submit to Slurm (start it with --runner slurm on a Slurm \
             login host, and send the job there with node_selector)"
        ));
    }
    if dispatch.spec.runner == Runner::Docker {
        return Err(format!(
            "runner docker: the agent on {host} sends jobs to Slurm (--runner slurm) and runs no containers"
        ));
    }
    let mut process = dispatch.clone();
    process.spec.runner = Runner::Process;
    runner::check(&process, attempt_dir, host, false).await?;
    let mut version = tool("sbatch").map_err(|error| format!("runner slurm: {error} on {host}"))?;
    match run(version.arg("--version")).await {
        Ok(_) => Ok(()),
        Err(error) => Err(format!("runner slurm: {error} on {host}")),
    }
}

/// Submits the attempt; the returned job is also written to `slurm.json`.
pub async fn submit(
    dispatch: &Dispatch,
    attempt_dir: &Path,
    defaults: &Defaults,
) -> Result<SlurmJob, String> {
    let nodes = dispatch.spec.resources.nodes.max(1);
    let script = attempt_dir.join(SCRIPT);
    let text = if nodes > 1 {
        MULTI_NODE_SCRIPT_TEXT
    } else {
        SCRIPT_TEXT
    };
    std::fs::write(&script, text).map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    let mut process = dispatch.clone();
    process.spec.runner = Runner::Process;
    let (program, args, working_dir, _) = runner::command_line(&process, attempt_dir);
    let mut command = tool("sbatch").map_err(|e| format!("runner slurm: {e}"))?;
    command.args(sbatch_options(dispatch, attempt_dir, &working_dir, defaults));
    // sbatch's own environment is the host's, less the agent's own settings
    // (`--export=ALL` gives the job that too); Slurm sets
    // CUDA_VISIBLE_DEVICES for the GPUs it allocates.
    for (name, _) in std::env::vars_os() {
        if crate::private_variable(&name) || name == "CUDA_VISIBLE_DEVICES" {
            command.env_remove(name);
        }
    }
    // The job's variables reach the job alone, through a pipe sbatch reads.
    let mut job_env: Vec<(String, String)> = runner::job_env(dispatch, attempt_dir)
        .into_iter()
        .filter(|(name, _)| name != "CUDA_VISIBLE_DEVICES")
        .collect();
    if nodes > 1 {
        // The rest of the rendezvous comes from the batch script, per task.
        job_env.retain(|(name, _)| !RENDEZVOUS_VARIABLES.contains(&name.as_str()));
        let per_node = dispatch.spec.resources.gpu.max(1).to_string();
        job_env.extend([
            ("GPUCTL_NNODES".to_string(), nodes.to_string()),
            ("PET_NNODES".to_string(), nodes.to_string()),
            ("PET_NPROC_PER_NODE".to_string(), per_node),
        ]);
    }
    let export = ExportPipe::new(&job_env)
        .map_err(|e| format!("runner slurm: cannot pass the job's environment: {e}"))?;
    command.arg(format!("--export-file={}", export.fd()));
    export.keep_open_in(&mut command);
    command.arg(&script).arg(&program).args(&args);
    let output = run(&mut command)
        .await
        .map_err(|e| format!("runner slurm: {e}"))?;
    drop(export);
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let id = output
        .trim()
        .split(';')
        .next()
        .and_then(|id| id.parse::<u64>().ok())
        .ok_or_else(|| format!("runner slurm: sbatch printed no job id: {output:?}"))?;
    let job = SlurmJob {
        id,
        submitted_at: now_ms(),
    };
    files::write_json(&attempt_dir.join(HANDLE), &job)
        .map_err(|e| format!("Slurm job {id} was submitted but its record cannot be written: {e:#}"))?;
    Ok(job)
}

/// The job's variables on a pipe for `sbatch --export-file=FD`: `NAME=value`
/// entries separated by NUL, written by a thread while sbatch reads. The
/// read end is open in sbatch alone (close-on-exec everywhere else, so no
/// other process the agent starts meanwhile inherits it).
struct ExportPipe {
    read: std::os::fd::OwnedFd,
}

impl ExportPipe {
    fn new(env: &[(String, String)]) -> std::io::Result<ExportPipe> {
        use std::io::Write;
        use std::os::fd::{FromRawFd, OwnedFd};
        let mut ends = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array we own.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just opened and are owned here only.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        // Slurm takes descriptors of 3 and above only.
        // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor we own.
        let high = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&read), libc::F_DUPFD_CLOEXEC, 10) };
        if high < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fcntl returned a new descriptor that nothing else owns.
        let read = unsafe { OwnedFd::from_raw_fd(high) };
        let mut entries = Vec::new();
        for (name, value) in env {
            entries.extend_from_slice(name.as_bytes());
            entries.push(b'=');
            entries.extend_from_slice(value.as_bytes());
            entries.push(0);
        }
        let mut writer = std::fs::File::from(write);
        std::thread::spawn(move || {
            // A failed write ends the pipe early: sbatch then fails, and says why.
            let _ = writer.write_all(&entries);
        });
        Ok(ExportPipe { read })
    }

    fn fd(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.read)
    }

    /// Clears close-on-exec on the read end in `command`'s child only.
    fn keep_open_in(&self, command: &mut Command) {
        let fd = self.fd();
        // SAFETY: between fork and exec the closure only calls fcntl, which
        // is async-signal-safe, on a descriptor the child inherited.
        unsafe {
            command.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// sbatch's options for an attempt (everything before the script).
fn sbatch_options(
    dispatch: &Dispatch,
    attempt_dir: &Path,
    working_dir: &Path,
    defaults: &Defaults,
) -> Vec<String> {
    let spec = &dispatch.spec;
    let mut options = vec![
        "--parsable".to_string(),
        format!(
            "--job-name=gpuplane-{}-{}",
            dispatch.job_id.to_lowercase(),
            dispatch.attempt
        ),
        format!("--chdir={}", working_dir.display()),
        format!("--output={}", attempt_dir.join("stdout.log").display()),
        format!("--error={}", attempt_dir.join("stderr.log").display()),
        "--open-mode=append".to_string(),
        "--input=/dev/null".to_string(),
        // GPUPlane owns retries (max_attempts): Slurm never runs an attempt twice.
        "--no-requeue".to_string(),
        "--export=ALL".to_string(),
        format!("--nodes={}", spec.resources.nodes.max(1)),
    ];
    if spec.resources.nodes > 1 {
        options.push("--ntasks-per-node=1".to_string());
    }
    // Always on the line, so nothing in sbatch's environment decides it
    // (GRES are per node).
    if spec.resources.gpu > 0 {
        options.push(format!("--gres=gpu:{}", spec.resources.gpu));
    } else {
        options.push("--gres=none".to_string());
    }
    let placement = spec.slurm.clone().unwrap_or_default();
    let named = [
        ("partition", placement.partition.or(defaults.partition.clone())),
        ("account", placement.account.or(defaults.account.clone())),
        ("qos", placement.qos.or(defaults.qos.clone())),
    ];
    for (option, value) in named {
        if let Some(value) = value {
            options.push(format!("--{option}={value}"));
        }
    }
    // The agent stops the job at its own time limit (SIGTERM, then SIGKILL
    // after the grace); Slurm's limit, a minute later, is the backstop for
    // an agent that is gone.
    if let Some(limit) = spec.time_limit_s {
        let grace_s = (dispatch.stop_grace_ms / 1000) as i64;
        let minutes = (limit + grace_s + 59) / 60 + 1;
        options.push(format!("--time={minutes}"));
    }
    options
}

/// Reads where the job is: `scontrol`, else `sacct` (slurmctld forgets
/// ended jobs after `MinJobAge`). A job neither knows ended lost.
pub async fn state(job: &SlurmJob) -> Result<State, String> {
    let shown = run(tool("scontrol")?
        .args(["show", "job", "--oneliner"])
        .arg(job.id.to_string())
        .env("SLURM_TIME_FORMAT", "%s"))
    .await;
    match shown {
        Ok(text) => parse_scontrol(&text),
        Err(error) if error.contains("Invalid job id") => {
            let accounted = run(tool("sacct")?
                .args([
                    "--noheader",
                    "--parsable2",
                    "--allocations",
                    "--format=State,ExitCode,Start,End",
                    "--jobs",
                ])
                .arg(job.id.to_string())
                .env("SLURM_TIME_FORMAT", "%s"))
            .await
            .unwrap_or_default();
            match accounted.lines().find(|line| !line.trim().is_empty()) {
                Some(line) => parse_sacct(line),
                None => Ok(State::Ended(Ended {
                    lost: Some(format!(
                        "Slurm no longer knows job {} (slurmctld forgot it and there is no accounting)",
                        job.id
                    )),
                    ended_at: now_ms(),
                    state: "UNKNOWN".into(),
                    ..Ended::default()
                })),
            }
        }
        Err(error) => Err(error),
    }
}

/// The fields of `scontrol show job --oneliner` (the first of each name:
/// the job's own come before `Command=`, whose arguments could hold `=`).
fn parse_scontrol(text: &str) -> Result<State, String> {
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    for token in text.split_whitespace() {
        if let Some((key, value)) = token.split_once('=') {
            fields.entry(key).or_insert(value);
        }
    }
    let job_state = fields
        .get("JobState")
        .ok_or_else(|| format!("scontrol printed no JobState: {text:?}"))?;
    Ok(interpret(
        job_state,
        fields.get("Reason").copied().unwrap_or("None"),
        fields.get("ExitCode").copied().unwrap_or("0:0"),
        fields.get("StartTime").copied(),
        fields.get("EndTime").copied(),
    ))
}

/// One line of `sacct --parsable2 --format=State,ExitCode,Start,End`.
fn parse_sacct(line: &str) -> Result<State, String> {
    let parts: Vec<&str> = line.trim().split('|').collect();
    let [job_state, exit_code, start, end] = parts[..] else {
        return Err(format!("sacct printed {line:?}"));
    };
    Ok(interpret(job_state, "None", exit_code, Some(start), Some(end)))
}

/// Slurm's state word, reason, `CODE:SIGNAL` and times (epoch seconds) as a [`State`].
fn interpret(
    job_state: &str,
    reason: &str,
    exit_code: &str,
    start: Option<&str>,
    end: Option<&str>,
) -> State {
    // sacct writes `CANCELLED by 0`; scontrol may add flags after `+`.
    let word = job_state.split([' ', '+']).next().unwrap_or(job_state);
    let seconds = |time: Option<&str>| time.and_then(|t| t.parse::<i64>().ok()).filter(|t| *t > 0);
    let started_at = seconds(start).map_or_else(now_ms, |s| s * 1000);
    match word {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" | "CONFIGURING" => {
            State::Pending {
                reason: reason.to_string(),
            }
        }
        "RUNNING" | "SUSPENDED" | "STOPPED" | "COMPLETING" | "SIGNALING" | "STAGE_OUT" | "RESIZING" => {
            State::Running { started_at }
        }
        _ => {
            let (code, signal) = exit_code.split_once(':').unwrap_or((exit_code, "0"));
            let code: i32 = code.parse().unwrap_or(0);
            let signal: i32 = signal.parse().unwrap_or(0);
            let mut ended = Ended {
                exit_code: (signal == 0).then_some(code),
                signal: (signal != 0).then_some(signal),
                ended_at: seconds(end).map_or_else(now_ms, |s| s * 1000),
                state: word.to_string(),
                ..Ended::default()
            };
            match word {
                "TIMEOUT" => ended.timed_out = true,
                "OUT_OF_MEMORY" => ended.oom_killed = true,
                "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" | "DEADLINE" | "REVOKED" => {
                    ended.lost = Some(format!("Slurm ended the job with {word}"));
                }
                _ => {}
            }
            State::Ended(ended)
        }
    }
}

/// The GPUs of the cluster's nodes (of `partition`, when named), from
/// `sinfo`: the capacity this agent offers the GPUPlane scheduler.
pub async fn cluster_gpus(partition: Option<&str>) -> Result<u32, String> {
    let mut command = tool("sinfo")?;
    command.args(["--noheader", "--Node", "--format=%N %G"]);
    if let Some(partition) = partition {
        command.arg(format!("--partition={partition}"));
    }
    let text = run(&mut command).await?;
    Ok(count_gpus(&text))
}

/// Sums `gpu` GRES over the distinct nodes of `sinfo --Node --format="%N %G"`
/// (a node in two partitions is listed twice): `gpu:4`, `gpu:a100:4(S:0-1)`.
fn count_gpus(sinfo: &str) -> u32 {
    let mut nodes: BTreeMap<&str, u32> = BTreeMap::new();
    for line in sinfo.lines() {
        let Some((node, gres)) = line.trim().split_once(' ') else {
            continue;
        };
        let gpus: u32 = gres
            .split(',')
            .filter_map(|entry| {
                let entry = entry.split('(').next()?;
                let mut parts = entry.split(':');
                (parts.next()? == "gpu").then_some(())?;
                parts.next_back()?.parse::<u32>().ok()
            })
            .sum();
        nodes.insert(node, gpus);
    }
    nodes.values().sum()
}

/// Cancels a queued job, or sends `signal` (`TERM`, `KILL`) to a running
/// one: its batch step and every step of it.
pub async fn stop(job: &SlurmJob, running: bool, signal: &str) -> Result<(), String> {
    let mut command = tool("scancel")?;
    if running {
        command.arg(format!("--signal={signal}")).arg("--full");
    }
    run(command.arg(job.id.to_string())).await.map(|_| ())
}

/// Runs a Slurm command; its stdout, or why it failed (not installed, its
/// stderr, no answer within [`COMMAND_TIMEOUT`]).
async fn run(command: &mut Command) -> Result<String, String> {
    let program = command.as_std().get_program().to_string_lossy().into_owned();
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = match tokio::time::timeout(COMMAND_TIMEOUT, command.output()).await {
        Err(_) => {
            return Err(format!(
                "`{program}` did not answer within {}s",
                COMMAND_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "`{program}` is not installed (Slurm's client commands are needed)"
            ));
        }
        Ok(Err(error)) => return Err(format!("cannot run `{program}`: {error}")),
        Ok(Ok(output)) => output,
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let why = stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no details");
        return Err(format!("`{program}` failed: {why}"));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_states_map_to_gpuplane_ends() {
        let pending = "JobId=7 JobName=x JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0 \
                       StartTime=0 EndTime=0 Command=/a/slurm-batch.sh echo JobState=RUNNING";
        assert_eq!(
            parse_scontrol(pending).unwrap(),
            State::Pending {
                reason: "Resources".into()
            }
        );
        let running =
            "JobId=7 JobState=RUNNING Reason=None ExitCode=0:0 StartTime=1700000000 EndTime=1700003600";
        assert_eq!(
            parse_scontrol(running).unwrap(),
            State::Running {
                started_at: 1_700_000_000_000
            }
        );
        let ended = |line: &str| match parse_scontrol(line).unwrap() {
            State::Ended(ended) => ended,
            other => panic!("{line}: {other:?}"),
        };
        let failed = ended("JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 StartTime=1 EndTime=2");
        assert_eq!(
            (failed.exit_code, failed.signal, failed.ended_at),
            (Some(3), None, 2000)
        );
        let killed = ended("JobState=CANCELLED Reason=None ExitCode=0:15 EndTime=5");
        assert_eq!((killed.exit_code, killed.signal), (None, Some(15)));
        assert!(ended("JobState=TIMEOUT ExitCode=0:15").timed_out);
        assert!(ended("JobState=OUT_OF_MEMORY ExitCode=0:125").oom_killed);
        let lost = ended("JobState=NODE_FAIL ExitCode=0:0");
        assert_eq!(lost.lost.as_deref(), Some("Slurm ended the job with NODE_FAIL"));
        assert_eq!(ended("JobState=COMPLETED ExitCode=0:0").exit_code, Some(0));
        match parse_sacct("CANCELLED by 0|0:15|10|20").unwrap() {
            State::Ended(ended) => assert_eq!(
                (ended.signal, ended.ended_at, ended.state.as_str()),
                (Some(15), 20_000, "CANCELLED")
            ),
            other => panic!("{other:?}"),
        }
        assert!(parse_scontrol("slurm_load_jobs error").is_err());
    }

    #[test]
    fn gpus_are_counted_once_per_node() {
        let sinfo = "vm gpu:2\nvm gpu:2\nbig gpu:a100:4(S:0-1),gpu:h100:2\ncpu (null)\n";
        assert_eq!(count_gpus(sinfo), 8);
    }

    #[test]
    fn sbatch_options_name_placement_and_never_the_command() {
        let mut spec =
            gpuplane_api::job::JobSpec::new("train", vec!["python".into(), "--x=$(rm -rf /)".into()]);
        spec.resources.gpu = 2;
        spec.time_limit_s = Some(90);
        spec.slurm = Some(gpuplane_api::job::SlurmPlacement {
            partition: Some("a100".into()),
            ..Default::default()
        });
        let dispatch = Dispatch {
            job_id: "job_AB".into(),
            attempt: 2,
            run_id: "run_1".into(),
            spec,
            gpus: vec![0, 1],
            env: BTreeMap::new(),
            stop_grace_ms: 10_000,
            folder: Vec::new(),
            choose_master_port: false,
        };
        let defaults = Defaults::from_labels(&BTreeMap::from([
            ("slurm.partition".to_string(), "cpu".to_string()),
            ("slurm.account".to_string(), "ml".to_string()),
        ]));
        let options = sbatch_options(&dispatch, Path::new("/jobs/a"), Path::new("/work"), &defaults);
        for expected in [
            "--gres=gpu:2",
            "--partition=a100",
            "--account=ml",
            "--job-name=gpuplane-job_ab-2",
            "--chdir=/work",
            "--output=/jobs/a/stdout.log",
            "--no-requeue",
            "--time=3",
        ] {
            assert!(
                options.iter().any(|o| o == expected),
                "{expected} missing from {options:?}"
            );
        }
        assert!(!options.iter().any(|o| o.contains("qos") || o.contains("rm -rf")));
        assert!(options.iter().any(|o| o == "--nodes=1") && !options.iter().any(|o| o.contains("ntasks")));
        // Several nodes: one allocation, one task and the GRES on each.
        let mut several = dispatch.clone();
        several.spec.resources.nodes = 3;
        let options = sbatch_options(&several, Path::new("/jobs/a"), Path::new("/work"), &defaults);
        for expected in ["--nodes=3", "--ntasks-per-node=1", "--gres=gpu:2"] {
            assert!(
                options.iter().any(|o| o == expected),
                "{expected} missing from {options:?}"
            );
        }
    }
}
