//! One attempt, from dispatch (or adoption) to its acknowledged end:
//! starting its shim (or its Slurm job), shipping its output, signalling
//! it on cancel, preemption or its time limit, and reporting how it ended.

use super::{Manager, Message, Start, now_ms};
use crate::files::{self, CANCELLED, EXIT, ExitState, REPORTED, SHIM, ShimState, TIMED_OUT};
use crate::mask;
use crate::reporter::Reporter;
use crate::runner;
use crate::slurm::{self, SlurmJob};
use crate::spool::JobSpool;
use crate::tail::LineReader;
use crate::watch::Watcher;
use gpuplane_api::agent::{Dispatch, ReportItem};
use gpuplane_api::job::{JobKind, Runner};
use gpuplane_api::log::LogStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Output lines queued for the server above which readers pause (the files keep everything).
const MAX_BACKLOG_LINES: usize = 200_000;
/// How often a running attempt's filesystem is measured.
const DISK_CHECK_EVERY: Duration = Duration::from_secs(30);
/// How long the shim may take to start the job.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Between SIGTERM and SIGKILL at the time limit, when the server sent none.
const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);
/// The running executable on Linux, whatever became of its file.
const SELF_EXE: &str = "/proc/self/exe";
/// How often a Slurm job's state is read.
const SLURM_POLL: Duration = Duration::from_secs(1);

/// One attempt, followed from dispatch (or adoption) to the acknowledged end.
pub(super) struct Attempt {
    pub(super) manager: Arc<Manager>,
    pub(super) dir: PathBuf,
    pub(super) dispatch: Dispatch,
    /// The job's secret values, masked in what is shipped.
    pub(super) secrets: Vec<Vec<u8>>,
    /// Shared with the manager's handle: the process id while it runs.
    pub(super) process: Arc<AtomicU32>,
    /// Shared with the manager's handle: Slurm holds the job.
    pub(super) in_slurm: Arc<AtomicBool>,
    pub(super) messages: mpsc::UnboundedReceiver<Message>,
}

/// What an attempt's job runs under, once started.
pub(super) enum Launched {
    /// A process of this host, under its shim.
    Shim(ShimState),
    /// A Slurm job, running since `started_at` (epoch milliseconds).
    Slurm { job: SlurmJob, started_at: i64 },
}

impl Launched {
    pub(super) fn started_at(&self) -> i64 {
        match self {
            Launched::Shim(shim) => shim.started_at,
            Launched::Slurm { started_at, .. } => *started_at,
        }
    }
}

/// How an attempt's job ended, from `exit.json` or from Slurm.
pub(super) struct Ending {
    pub(super) exit: ExitState,
    /// The engine (Slurm) stopped it at its time limit.
    pub(super) timed_out: bool,
    /// The engine lost it: why.
    pub(super) lost: Option<String>,
}

impl Attempt {
    pub(super) fn reporter(&self) -> &Reporter {
        &self.manager.reporter
    }

    pub(super) async fn run(mut self, start: Start) {
        let through_slurm = self.manager.slurm.is_some()
            || self.dispatch.spec.runner == Runner::Slurm
            || self.dir.join(slurm::HANDLE).exists();
        if through_slurm {
            return self.run_through_slurm(start).await;
        }
        let (stdout_lines, stderr_lines) = match start {
            Start::New => {
                let docker = self.manager.docker;
                if let Err(detail) =
                    runner::check(&self.dispatch, &self.dir, &self.manager.host, docker).await
                {
                    tracing::warn!(job_id = self.dispatch.job_id, detail, "dispatch failed");
                    self.end(ReportItem::DispatchFailed {
                        job_id: self.dispatch.job_id.clone(),
                        attempt: self.dispatch.attempt,
                        detail,
                    })
                    .await;
                    return;
                }
                if let Err(error) = self.start_shim() {
                    let detail = format!(
                        "the agent on {} cannot start its shim: {error:#}",
                        self.manager.host
                    );
                    self.end(self.dispatch_failed(detail)).await;
                    return;
                }
                (0, 0)
            }
            Start::Adopted {
                stdout_lines,
                stderr_lines,
            } => (stdout_lines, stderr_lines),
        };
        let Some(shim) = self.wait_for_start().await else {
            return;
        };
        self.process.store(shim.child_pid, Ordering::Relaxed);
        self.reporter().push(ReportItem::Started {
            job_id: self.dispatch.job_id.clone(),
            attempt: self.dispatch.attempt,
            pid: shim.child_pid,
            time: shim.started_at,
            git_commit: crate::git::head_commit(&runner::working_dir(&self.dispatch, &self.dir)),
            master_port: super::master_port(&self.dispatch),
        });
        self.follow(Launched::Shim(shim), stdout_lines, stderr_lines)
            .await;
    }

    /// Submits the attempt to Slurm (or adopts its Slurm job), reports
    /// Slurm's reason while it is queued, then follows it like a process.
    pub(super) async fn run_through_slurm(mut self, start: Start) {
        let host = self.manager.host.clone();
        let (job, stdout_lines, stderr_lines) = match start {
            Start::New => {
                let enabled = self.manager.slurm.is_some();
                if let Err(detail) = slurm::check(&self.dispatch, &self.dir, &host, enabled).await {
                    tracing::warn!(job_id = self.dispatch.job_id, detail, "dispatch failed");
                    self.end(self.dispatch_failed(detail)).await;
                    return;
                }
                let defaults = self.manager.slurm.clone().unwrap_or_default();
                match slurm::submit(&self.dispatch, &self.dir, &defaults).await {
                    Ok(job) => (job, 0, 0),
                    Err(detail) => {
                        tracing::warn!(job_id = self.dispatch.job_id, detail, "sbatch failed");
                        self.end(self.dispatch_failed(detail)).await;
                        return;
                    }
                }
            }
            Start::Adopted {
                stdout_lines,
                stderr_lines,
            } => match files::read_json::<SlurmJob>(&self.dir.join(slurm::HANDLE)) {
                Some(job) => (job, stdout_lines, stderr_lines),
                None => {
                    let detail = format!(
                        "the agent on {host} stopped before it recorded the attempt's Slurm job;                          look for a job named gpuplane-{}-{} in squeue",
                        self.dispatch.job_id.to_lowercase(),
                        self.dispatch.attempt
                    );
                    self.end(self.dispatch_failed(detail)).await;
                    return;
                }
            },
        };
        tracing::info!(
            job_id = self.dispatch.job_id,
            slurm_job = job.id,
            "submitted to Slurm"
        );
        self.in_slurm.store(true, Ordering::Relaxed);
        let Some(started_at) = self.wait_in_slurm(&job).await else {
            return;
        };
        self.reporter().push(ReportItem::Started {
            job_id: self.dispatch.job_id.clone(),
            attempt: self.dispatch.attempt,
            pid: 0,
            time: started_at,
            git_commit: crate::git::head_commit(&runner::working_dir(&self.dispatch, &self.dir)),
            master_port: None,
        });
        self.follow(Launched::Slurm { job, started_at }, stdout_lines, stderr_lines)
            .await;
    }

    /// While Slurm holds the job queued: its reason goes to the server
    /// each time it changes, and a stop cancels it. Returns when it starts
    /// (its start time), or None once it ended without starting (reported).
    pub(super) async fn wait_in_slurm(&mut self, job: &SlurmJob) -> Option<i64> {
        let mut last_reason = String::new();
        // Slurm often starts a job within moments of sbatch: look again
        // soon, then less often, up to every SLURM_POLL.
        let mut pause = Duration::from_millis(50);
        loop {
            match slurm::state(job).await {
                Ok(slurm::State::Pending { reason }) => {
                    if reason != last_reason {
                        self.reporter().push(ReportItem::Waiting {
                            job_id: self.dispatch.job_id.clone(),
                            attempt: self.dispatch.attempt,
                            reason: format!("Slurm job {} is pending: {reason}", job.id),
                        });
                        last_reason = reason;
                    }
                }
                Ok(slurm::State::Running { started_at }) => return Some(started_at),
                // Ended between two looks: it ran if Slurm gave it a start,
                // and `follow` reports its output and end.
                Ok(slurm::State::Ended(ended)) if !self.dir.join(CANCELLED).exists() => {
                    return Some(ended.ended_at.min(now_ms()));
                }
                Ok(slurm::State::Ended(ended)) => {
                    // Cancelled while queued: it never ran.
                    self.in_slurm.store(false, Ordering::Relaxed);
                    let item = self.exited_item(&Ending {
                        exit: ExitState {
                            exit_code: ended.exit_code,
                            signal: ended.signal,
                            oom_killed: false,
                            ended_at: ended.ended_at,
                            spawn_error: None,
                        },
                        timed_out: false,
                        lost: None,
                    });
                    self.end(item).await;
                    return None;
                }
                Err(error) => {
                    tracing::warn!(
                        job_id = self.dispatch.job_id,
                        slurm_job = job.id,
                        error,
                        "cannot read the Slurm job's state"
                    )
                }
            }
            tokio::select! {
                message = self.messages.recv() => {
                    if let Some(Message::Stop { .. }) = message {
                        let _ = files::touch(&self.dir.join(CANCELLED));
                        tracing::info!(job_id = self.dispatch.job_id, slurm_job = job.id, "cancelling the queued Slurm job");
                        if let Err(error) = slurm::stop(job, false, "TERM").await {
                            tracing::warn!(job_id = self.dispatch.job_id, error, "scancel failed");
                        }
                    }
                }
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(SLURM_POLL);
        }
    }

    pub(super) fn dispatch_failed(&self, detail: String) -> ReportItem {
        ReportItem::DispatchFailed {
            job_id: self.dispatch.job_id.clone(),
            attempt: self.dispatch.attempt,
            detail,
        }
    }

    pub(super) fn start_shim(&self) -> anyhow::Result<()> {
        // The running binary itself: after a package upgrade replaced the
        // file on disk, its path names the new one (or, readlink'd, a
        // "(deleted)" path that no longer opens), while /proc/self/exe still
        // opens the image this agent runs.
        let exe = match std::path::Path::new(SELF_EXE) {
            path if path.exists() => path.to_path_buf(),
            _ => std::env::current_exe()?,
        };
        let mut command = tokio::process::Command::new(exe);
        for (name, _) in std::env::vars_os() {
            if crate::private_variable(&name) && name != "GPUPLANE_LOG" {
                command.env_remove(name);
            }
        }
        command.arg("shim").arg(&self.dir);
        // A docker job's container gets its GPUs from Docker.
        if self.dispatch.spec.runner == Runner::Process {
            let cgroup = self
                .manager
                .isolation
                .job_cgroup(&self.dispatch.job_id, self.dispatch.attempt, &self.dispatch.gpus)
                .map_err(|error| anyhow::anyhow!("cannot make the job's device cgroup: {error}"))?;
            if let Some(cgroup) = cgroup {
                command.arg(cgroup);
            }
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        // The whole dispatch, secrets and token included, on the shim's
        // stdin: `dispatch.json` keeps it without them.
        let mut stdin = child.stdin.take().expect("the shim's stdin is piped");
        let dispatch = serde_json::to_vec(&self.dispatch)?;
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            if let Err(error) = stdin.write_all(&dispatch).await {
                tracing::warn!(%error, "cannot hand the dispatch to the shim");
            }
        });
        // Reap the shim when it exits; it outlives this agent if the agent dies first.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(())
    }

    /// Waits for `shim.json`; reports DISPATCH_FAILED if the program could not start.
    pub(super) async fn wait_for_start(&mut self) -> Option<ShimState> {
        let began = Instant::now();
        loop {
            // `exit.json` first: the shim writes `shim.json` before it, so a
            // job that started and ended between two looks still has its
            // `shim.json` read here, and is not taken for one that never started.
            let exit = files::read_json::<ExitState>(&self.dir.join(EXIT));
            if let Some(shim) = files::read_json::<ShimState>(&self.dir.join(SHIM)) {
                return Some(shim);
            }
            if let Some(exit) = exit {
                let detail = exit
                    .spawn_error
                    .unwrap_or_else(|| "the job ended before it started".into());
                self.end(self.dispatch_failed(detail)).await;
                return None;
            }
            if began.elapsed() > START_TIMEOUT {
                let detail = format!("the job did not start within {}s", START_TIMEOUT.as_secs());
                self.end(self.dispatch_failed(detail)).await;
                return None;
            }
            // Most jobs start within a few milliseconds: look often at first.
            let pause = if began.elapsed() < Duration::from_millis(200) {
                2
            } else {
                10
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// Ships output until the job ends, stopping it when asked.
    pub(super) async fn follow(&mut self, launched: Launched, stdout_lines: i64, stderr_lines: i64) {
        let mut readers = [
            (
                LogStream::Stdout,
                LineReader::resume(&self.dir.join("stdout.log"), stdout_lines)
                    .with_max_line(self.manager.max_line_bytes),
            ),
            (
                LogStream::Stderr,
                LineReader::resume(&self.dir.join("stderr.log"), stderr_lines)
                    .with_max_line(self.manager.max_line_bytes),
            ),
        ];
        let working_dir = runner::working_dir(&self.dispatch, &self.dir);
        let mut watched = self.dispatch.spec.watch_dirs.clone();
        watched.push(files::job_dir(&self.dir).display().to_string());
        if let Some(dir) = runner::wandb_dir(&self.dispatch, &self.dir) {
            watched.push(dir.display().to_string());
        }
        let mut watcher = Watcher::new(
            &self.dispatch.job_id,
            self.dispatch.attempt,
            &self.dir,
            &working_dir,
            &watched,
        );
        let mut spool = JobSpool::new(&self.dispatch, &self.dir, &self.manager.host);
        let mut kill_at: Option<Instant> = None;
        // Counted from the job's own start, so an adopting agent keeps it.
        let deadline_ms = self
            .dispatch
            .spec
            .time_limit_s
            .map(|limit| launched.started_at().saturating_add(limit.saturating_mul(1000)));
        let mut stopped_at_time_limit = false;
        let mut next_disk_check = Instant::now();
        let mut next_slurm_check = Instant::now();
        let mut idle = Duration::from_millis(20);
        loop {
            let shipped = if self.reporter().backlog() < MAX_BACKLOG_LINES {
                self.ship(&mut readers)
            } else {
                0
            };
            watcher.poll(self.reporter(), false);
            spool.look(self.reporter(), false);
            let ending = match &launched {
                Launched::Shim(shim) => {
                    let read_exit = || files::read_json::<ExitState>(&self.dir.join(EXIT));
                    let mut exit = read_exit();
                    let gone =
                        exit.is_none() && !files::alive(shim.shim_pid) && !files::alive(shim.child_pid);
                    if gone {
                        // The shim writes `exit.json`, then exits: it may have
                        // done both between the read above and the checks.
                        exit = read_exit();
                    }
                    (exit.is_some() || gone).then(|| Ending {
                        exit: exit.unwrap_or(ExitState {
                            exit_code: None,
                            signal: None,
                            oom_killed: false,
                            ended_at: now_ms(),
                            spawn_error: None,
                        }),
                        timed_out: false,
                        lost: None,
                    })
                }
                Launched::Slurm { job, .. } if Instant::now() >= next_slurm_check => {
                    next_slurm_check = Instant::now() + SLURM_POLL;
                    match slurm::state(job).await {
                        Ok(slurm::State::Ended(ended)) => {
                            tracing::info!(
                                job_id = self.dispatch.job_id,
                                slurm_job = job.id,
                                state = ended.state,
                                "Slurm job ended"
                            );
                            Some(Ending {
                                exit: ExitState {
                                    exit_code: ended.exit_code,
                                    signal: ended.signal,
                                    oom_killed: ended.oom_killed,
                                    ended_at: ended.ended_at,
                                    spawn_error: None,
                                },
                                timed_out: ended.timed_out,
                                lost: ended.lost,
                            })
                        }
                        Ok(_) => None,
                        Err(error) => {
                            tracing::warn!(
                                job_id = self.dispatch.job_id,
                                error,
                                "cannot read the Slurm job's state"
                            );
                            None
                        }
                    }
                }
                Launched::Slurm { .. } => None,
            };
            if let Some(ending) = ending {
                // Everything written before the exit, then the exit.
                loop {
                    self.ship(&mut readers);
                    if readers.iter().all(|(_, reader)| reader.at_end()) {
                        break;
                    }
                }
                self.drain(&mut watcher).await;
                // Before the exit: the job's token stops working with it.
                spool
                    .send_left(&self.dispatch, &self.manager.server_url, self.reporter())
                    .await;
                for (stream, reader) in &mut readers {
                    if let Some((n, line)) = reader.finish() {
                        self.push_lines(*stream, n, vec![line]);
                    }
                }
                self.process.store(0, Ordering::Relaxed);
                self.in_slurm.store(false, Ordering::Relaxed);
                // A job that filled its disk and died between two readings
                // still gets its DISK_LOW, before its exit is classified.
                self.report_disk();
                tracing::info!(job_id = self.dispatch.job_id, code = ?ending.exit.exit_code, signal = ?ending.exit.signal, "job ended");
                let item = self.exited_item(&ending);
                self.end(item).await;
                return;
            }
            if !stopped_at_time_limit
                && kill_at.is_none()
                && deadline_ms.is_some_and(|deadline| now_ms() >= deadline)
            {
                stopped_at_time_limit = true;
                let _ = files::touch(&self.dir.join(TIMED_OUT));
                let grace = match self.dispatch.stop_grace_ms {
                    0 => DEFAULT_STOP_GRACE,
                    ms => Duration::from_millis(ms),
                };
                tracing::info!(
                    job_id = self.dispatch.job_id,
                    ?grace,
                    "time limit reached; stopping job"
                );
                self.signal(&launched, libc::SIGTERM).await;
                kill_at = Some(Instant::now() + grace);
            }
            if let Some(at) = kill_at
                && Instant::now() >= at
            {
                self.signal(&launched, libc::SIGKILL).await;
                kill_at = None;
            }
            if Instant::now() >= next_disk_check {
                next_disk_check = Instant::now() + DISK_CHECK_EVERY;
                self.report_disk();
            }
            idle = if shipped > 0 {
                Duration::from_millis(20)
            } else {
                (idle * 2).min(Duration::from_millis(100))
            };
            tokio::select! {
                message = self.messages.recv() => match message {
                    Some(Message::Stop { grace }) if kill_at.is_none() => {
                        let _ = files::touch(&self.dir.join(CANCELLED));
                        tracing::info!(job_id = self.dispatch.job_id, ?grace, "stopping job");
                        self.signal(&launched, libc::SIGTERM).await;
                        kill_at = Some(Instant::now() + grace);
                    }
                    _ => {}
                },
                () = tokio::time::sleep(idle) => {}
            }
        }
    }

    /// Reads the watch dirs to their end and waits until the server has every
    /// batch, so metrics and checkpoints arrive before the exit.
    pub(super) async fn drain(&self, watcher: &mut Watcher) {
        if watcher.is_empty() {
            return;
        }
        let mut scans = 0;
        loop {
            watcher.poll(self.reporter(), true);
            scans += 1;
            // Two scans at least: a checkpoint counts once its size stops changing.
            if scans >= 2 && watcher.settled() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Reads new lines of both streams into the report queue; returns how many.
    pub(super) fn ship(&self, readers: &mut [(LogStream, LineReader); 2]) -> usize {
        let mut shipped = 0;
        for (stream, reader) in readers.iter_mut() {
            let (first, lines) = reader.read();
            shipped += lines.len();
            if !lines.is_empty() {
                self.push_lines(*stream, first, lines);
            }
        }
        shipped
    }

    pub(super) fn push_lines(&self, stream: LogStream, first_n: i64, mut lines: Vec<String>) {
        // A secret the job prints is masked before it leaves the host (the
        // log file on this host keeps what the job wrote).
        if !self.secrets.is_empty() {
            for line in lines.iter_mut() {
                *line = mask::line(line, &self.secrets);
            }
        }
        self.reporter().push(ReportItem::Lines {
            job_id: self.dispatch.job_id.clone(),
            attempt: self.dispatch.attempt,
            stream,
            first_n,
            time: now_ms(),
            lines,
        });
    }

    /// The end report of an attempt.
    pub(super) fn exited_item(&self, ending: &Ending) -> ReportItem {
        ReportItem::Exited {
            job_id: self.dispatch.job_id.clone(),
            attempt: self.dispatch.attempt,
            exit_code: ending.exit.exit_code,
            signal: ending.exit.signal,
            oom_killed: ending.exit.oom_killed,
            cancelled: self.dir.join(CANCELLED).exists(),
            timed_out: ending.timed_out || self.dir.join(TIMED_OUT).exists(),
            lost: ending.lost.clone(),
            time: ending.exit.ended_at,
            eval_result: (self.dispatch.spec.kind == JobKind::Evaluate)
                .then(|| runner::read_eval_result(&self.dir)),
        }
    }

    pub(super) async fn signal(&self, launched: &Launched, signal: i32) {
        let shim = match launched {
            Launched::Shim(shim) => shim,
            Launched::Slurm { job, .. } => {
                let name = if signal == libc::SIGKILL { "KILL" } else { "TERM" };
                if let Err(error) = slurm::stop(job, true, name).await {
                    tracing::warn!(
                        job_id = self.dispatch.job_id,
                        slurm_job = job.id,
                        error,
                        "scancel failed"
                    );
                }
                return;
            }
        };
        if self.dir.join(EXIT).exists() {
            return; // Ended already: its pid may belong to someone else by now.
        }
        // The job leads its own process group: signal the whole group.
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(-(shim.child_pid as libc::pid_t), signal);
        }
        if self.dispatch.spec.runner == Runner::Docker {
            let name = runner::container_name(&self.dispatch);
            let signal_name = if signal == libc::SIGKILL { "KILL" } else { "TERM" };
            let _ = tokio::process::Command::new("docker")
                .args(["kill", "--signal", signal_name, &name])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .await;
        }
    }

    pub(super) fn report_disk(&self) {
        let dir = runner::working_dir(&self.dispatch, &self.dir);
        let free = self.manager.disk_free_override.or_else(|| free_percent(&dir));
        if let Some(free_percent) = free {
            self.reporter().push(ReportItem::Disk {
                job_id: self.dispatch.job_id.clone(),
                attempt: self.dispatch.attempt,
                path: dir.display().to_string(),
                free_percent,
            });
        }
    }

    /// Sends the attempt's last item, waits for the server to have it, and forgets the attempt.
    pub(super) async fn end(&self, item: ReportItem) {
        let seq = self.reporter().push(item);
        self.reporter().delivered(seq).await;
        let _ = files::touch(&self.dir.join(REPORTED));
    }
}

/// Free space of the filesystem holding `path`, in percent of its size.
pub(super) fn free_percent(path: &Path) -> Option<f64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let stats = unsafe {
        let mut stats: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c_path.as_ptr(), &mut stats) != 0 {
            return None;
        }
        stats
    };
    if stats.f_blocks == 0 {
        return None;
    }
    Some(stats.f_bavail as f64 / stats.f_blocks as f64 * 100.0)
}
