//! The attempts this agent runs: starting them (through a shim), shipping
//! their output, stopping them on request, reporting how they ended, and
//! adopting those a previous agent process started.

mod attempt;

use crate::client::Client;
use crate::files::{self};
use crate::isolation::Isolation;
use crate::mask;
use crate::reporter::Reporter;
use crate::slurm::{self};
use attempt::Attempt;
use gpuplane_api::agent::{AgentCommand, AgentWelcome, AttemptRef, Dispatch, JOB_TOKEN_VARIABLE, ReportItem};
use gpuplane_api::job::Runner;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

pub struct Manager {
    pub jobs_dir: PathBuf,
    pub host: String,
    server_url: String,
    reporter: Arc<Reporter>,
    client: Arc<Client>,
    attempts: Mutex<HashMap<AttemptRef, Handle>>,
    /// Adopted at start-up, waiting for the first hello to say where to resume.
    adopted: Mutex<Vec<(PathBuf, Dispatch)>>,
    /// The server and node this agent works for, from its last hello.
    owner: Mutex<Option<files::Owner>>,
    /// Replaces the measured free space (tests of DISK_LOW).
    disk_free_override: Option<f64>,
    /// Output lines are cut at this many bytes.
    max_line_bytes: usize,
    /// `--runner slurm`: every job goes to Slurm, placed by these defaults.
    slurm: Option<slurm::Defaults>,
    /// `--docker`: docker jobs run here.
    docker: bool,
    /// Whether each process job gets a device cgroup of its own GPUs.
    isolation: Isolation,
    /// Jobs whose folders were removed after a `forget`, for the next poll.
    forgotten: Mutex<Vec<String>>,
}

/// How the agent runs attempts, from its command line.
pub struct Options {
    /// Replaces the measured free space (tests of DISK_LOW).
    pub disk_free_override: Option<f64>,
    /// Output lines are cut at this many bytes.
    pub max_line_bytes: usize,
    /// `--runner slurm`: every job goes to Slurm, placed by these defaults.
    pub slurm: Option<slurm::Defaults>,
    /// `--docker`: docker jobs run here.
    pub docker: bool,
    /// Whether each process job gets a device cgroup of its own GPUs.
    pub isolation: Isolation,
}

struct Handle {
    messages: mpsc::UnboundedSender<Message>,
    /// The job's process (and process group) id while it runs, else 0.
    process: Arc<AtomicU32>,
    /// Slurm holds the job (queued or running): the server must send a
    /// cancel for it, not take it for a dispatch never received.
    in_slurm: Arc<AtomicBool>,
    gpus: Vec<u32>,
    project: String,
}

/// A running job's process group and GPUs, for telemetry.
#[derive(Debug, Clone)]
pub struct RunningProcess {
    pub attempt: AttemptRef,
    pub process_group: u32,
    pub gpus: Vec<u32>,
    /// Its job's project (a label of its GPUs' series on `--metrics-addr`).
    pub project: String,
}

enum Message {
    /// Stop it: SIGTERM, then SIGKILL after the grace period.
    Stop { grace: Duration },
}

/// Where an attempt task starts.
enum Start {
    New,
    Adopted { stdout_lines: i64, stderr_lines: i64 },
}

impl Manager {
    pub fn new(
        jobs_dir: PathBuf,
        host: String,
        server_url: String,
        reporter: Arc<Reporter>,
        client: Arc<Client>,
        options: Options,
    ) -> Manager {
        let Options {
            disk_free_override,
            max_line_bytes,
            slurm,
            docker,
            isolation,
        } = options;
        let adopted = files::unfinished_attempts(&jobs_dir);
        if !adopted.is_empty() {
            tracing::info!(
                count = adopted.len(),
                "found attempts started by an earlier agent"
            );
        }
        Manager {
            jobs_dir,
            host,
            server_url,
            reporter,
            client,
            attempts: Mutex::new(HashMap::new()),
            adopted: Mutex::new(adopted),
            owner: Mutex::new(None),
            forgotten: Mutex::new(Vec::new()),
            disk_free_override,
            max_line_bytes,
            slurm,
            docker,
            isolation,
        }
    }

    /// The runners this agent runs jobs with, as its hello says.
    pub fn runners(&self) -> Vec<Runner> {
        if self.slurm.is_some() {
            vec![Runner::Slurm]
        } else if self.docker {
            vec![Runner::Process, Runner::Docker]
        } else {
            vec![Runner::Process]
        }
    }

    /// Every attempt this agent has whose end the server has not acknowledged.
    pub fn known(&self) -> Vec<AttemptRef> {
        let mut known: Vec<AttemptRef> = self.lock().keys().cloned().collect();
        let adopted = self.adopted.lock().unwrap_or_else(|e| e.into_inner());
        known.extend(adopted.iter().map(|(_, d)| attempt_ref(d)));
        known.sort();
        known
    }

    /// Attempts whose process is alive, or that Slurm holds.
    pub fn running(&self) -> Vec<AttemptRef> {
        let mut running: Vec<AttemptRef> = self
            .lock()
            .iter()
            .filter(|(_, handle)| {
                handle.process.load(Ordering::Relaxed) != 0 || handle.in_slurm.load(Ordering::Relaxed)
            })
            .map(|(key, _)| key.clone())
            .collect();
        running.sort();
        running
    }

    /// The running jobs' process groups and GPUs.
    pub fn processes(&self) -> Vec<RunningProcess> {
        self.lock()
            .iter()
            .filter_map(|(key, handle)| {
                let process_group = handle.process.load(Ordering::Relaxed);
                (process_group != 0).then(|| RunningProcess {
                    attempt: key.clone(),
                    process_group,
                    gpus: handle.gpus.clone(),
                    project: handle.project.clone(),
                })
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AttemptRef, Handle>> {
        self.attempts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a hello: start following adopted attempts where the server
    /// left off, and stop those the server has given up on. Attempts this
    /// server never dispatched to this node (left by another installation)
    /// are left alone on disk and never reported.
    pub fn resume(self: &Arc<Self>, welcome: &AgentWelcome) {
        let resume = &welcome.resume;
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = Some(files::Owner {
            server_id: welcome.server_id.clone(),
            server_url: self.server_url.clone(),
            node_id: welcome.node_id.clone(),
            node_name: self.host.clone(),
        });
        let adopted: Vec<(PathBuf, Dispatch)> =
            std::mem::take(&mut *self.adopted.lock().unwrap_or_else(|e| e.into_inner()));
        for (dir, mut dispatch) in adopted {
            let key = attempt_ref(&dispatch);
            let point = resume
                .iter()
                .find(|r| r.job_id == key.job_id && r.attempt == key.attempt);
            let recorded = files::read_json::<files::Owner>(&dir.join(files::OWNER));
            let ours = point.is_some_and(|p| p.known)
                && recorded
                    .as_ref()
                    .is_none_or(|owner| owner.server_id == welcome.server_id);
            if !ours {
                tracing::warn!(
                    dir = %dir.display(),
                    recorded_server = recorded.as_ref().map(|o| format!("{} ({})", o.server_url, o.server_id)),
                    recorded_node = recorded.as_ref().map(|o| o.node_name.clone()),
                    "an attempt on disk that this server never dispatched here (an earlier install or another \
                     server): not adopted, nothing of it is reported, the directory is left as it is"
                );
                continue;
            }
            let (stdout_lines, stderr_lines, keep) =
                point.map_or((0, 0, false), |p| (p.stdout_lines, p.stderr_lines, p.keep));
            // An older agent kept the secrets in `dispatch.json`: no longer.
            let resting = dispatch.at_rest();
            if resting != dispatch
                && let Err(error) = files::write_json(&dir.join(files::DISPATCH), &resting)
            {
                tracing::warn!(%error, dir = %dir.display(), "cannot rewrite an old dispatch.json without its secrets");
            }
            // What `dispatch.json` does not keep comes with the welcome.
            let mask = point.map(|p| p.mask.clone()).unwrap_or_default();
            if let Some(token) = point.and_then(|p| p.token.clone()) {
                dispatch.env.insert(JOB_TOKEN_VARIABLE.to_string(), token);
            }
            let handle = self.spawn(
                dir,
                dispatch,
                &mask,
                Start::Adopted {
                    stdout_lines,
                    stderr_lines,
                },
            );
            if !keep {
                let _ = handle.send(Message::Stop {
                    grace: Duration::from_secs(2),
                });
            }
        }
        for point in resume.iter().filter(|p| !p.keep) {
            let key = AttemptRef {
                job_id: point.job_id.clone(),
                attempt: point.attempt,
            };
            if let Some(handle) = self.lock().get(&key) {
                let _ = handle.messages.send(Message::Stop {
                    grace: Duration::from_secs(2),
                });
            }
        }
    }

    pub fn handle(self: &Arc<Self>, command: AgentCommand) {
        match command {
            AgentCommand::Dispatch(mut dispatch) => {
                let key = attempt_ref(&dispatch);
                let dir = files::attempt_dir(&self.jobs_dir, &key);
                if self.lock().contains_key(&key) || dir.join(files::DISPATCH).exists() {
                    return; // Already started (a re-sent dispatch).
                }
                if dispatch.choose_master_port
                    && let Err(error) = choose_master_port(&mut dispatch)
                {
                    self.reporter.push(ReportItem::DispatchFailed {
                        job_id: key.job_id,
                        attempt: key.attempt,
                        detail: format!(
                            "the agent on {} found no free port for the job's rendezvous: {error}",
                            self.host
                        ),
                    });
                    return;
                }
                tracing::info!(job_id = key.job_id, attempt = key.attempt, gpus = ?dispatch.gpus, "dispatch");
                let owner = self.owner.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let written = files::create_private_dir(dir.parent().unwrap_or(&dir))
                    .and_then(|()| files::create_private_dir(&dir))
                    .and_then(|()| files::create_private_dir(&crate::spool::dir(&dir)))
                    .and_then(|()| files::create_private_dir(&files::job_dir(&dir)))
                    .and_then(|()| match &owner {
                        Some(owner) => files::write_json(&dir.join(files::OWNER), owner),
                        None => Ok(()),
                    })
                    // Less its secrets: they reach the shim on a pipe.
                    .and_then(|()| files::write_json(&dir.join(files::DISPATCH), &dispatch.at_rest()))
                    .and_then(|()| match dispatch.folder.is_empty() {
                        true => Ok(()),
                        false => files::write_experiment(&dir, &dispatch.folder),
                    });
                if let Err(error) = written {
                    self.reporter.push(ReportItem::DispatchFailed {
                        job_id: key.job_id,
                        attempt: key.attempt,
                        detail: format!(
                            "the agent on {} cannot write {}: {error:#}",
                            self.host,
                            dir.display()
                        ),
                    });
                    return;
                }
                let mask = dispatch.secret_values();
                self.spawn(dir, *dispatch, &mask, Start::New);
            }
            AgentCommand::Cancel {
                job_id,
                attempt,
                grace_ms,
            } => {
                let key = AttemptRef { job_id, attempt };
                if let Some(handle) = self.lock().get(&key) {
                    let _ = handle.messages.send(Message::Stop {
                        grace: Duration::from_millis(grace_ms),
                    });
                }
            }
            AgentCommand::Forget { job_id } => self.forget(job_id),
            AgentCommand::FetchLog {
                request_id,
                job_id,
                attempt,
                stream,
                mask,
            } => {
                let dir = files::attempt_dir(&self.jobs_dir, &AttemptRef { job_id, attempt });
                let path = dir.join(stream.file_name());
                let secrets = mask::needles(&mask);
                let client = self.client.clone();
                tokio::spawn(async move {
                    if let Err(error) = client
                        .upload_file(&format!("agent/log-fetch/{request_id}"), &path, secrets)
                        .await
                    {
                        tracing::warn!(%error, path = %path.display(), "log upload failed");
                    }
                });
            }
        }
    }

    /// Removes a deleted job's folder (its attempts' output, state and
    /// spool) unless one of its attempts is still followed here; then it
    /// is reported in the next poll, removed or already gone.
    fn forget(&self, job_id: String) {
        let safe = (1..=64).contains(&job_id.len())
            && job_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !safe {
            tracing::warn!(job_id, "a forget for an id that is no job id: ignored");
            return;
        }
        if self.known().iter().any(|attempt| attempt.job_id == job_id) {
            return; // Still followed: asked again after its end.
        }
        // Never follows a link: a link itself is what is removed.
        match std::fs::remove_dir_all(self.jobs_dir.join(&job_id)) {
            Ok(()) => tracing::info!(job_id, "removed a deleted job's folder"),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(job_id, %error, "cannot remove a deleted job's folder"),
        }
        self.forgotten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(job_id);
    }

    /// The jobs forgotten since the last call, for the poll that says so.
    pub fn take_forgotten(&self) -> Vec<String> {
        std::mem::take(&mut *self.forgotten.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Follows an attempt; `mask`: its job's secret values.
    fn spawn(
        self: &Arc<Self>,
        dir: PathBuf,
        dispatch: Dispatch,
        mask: &[String],
        start: Start,
    ) -> mpsc::UnboundedSender<Message> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let process = Arc::new(AtomicU32::new(0));
        let in_slurm = Arc::new(AtomicBool::new(false));
        let key = attempt_ref(&dispatch);
        self.lock().insert(
            key.clone(),
            Handle {
                messages: sender.clone(),
                process: process.clone(),
                in_slurm: in_slurm.clone(),
                gpus: dispatch.gpus.clone(),
                project: dispatch.spec.project.clone(),
            },
        );
        let manager = self.clone();
        let secrets = mask::needles(mask);
        tokio::spawn(async move {
            let task = Attempt {
                manager: manager.clone(),
                dir,
                secrets,
                dispatch,
                process,
                in_slurm,
                messages: receiver,
            };
            task.run(start).await;
            manager.lock().remove(&key);
        });
        sender
    }
}

/// Rank 0 of a multi-node job: a port free on this host now, for the
/// members' rendezvous (torchrun's store listens on it), set in the job's
/// variables and kept in `dispatch.json`, so `Started` reports it again
/// after an agent restart.
fn choose_master_port(dispatch: &mut Dispatch) -> std::io::Result<()> {
    let port = std::net::TcpListener::bind(("0.0.0.0", 0))?.local_addr()?.port();
    for name in gpuplane_api::agent::MASTER_PORT_VARIABLES {
        dispatch.env.insert(name.to_string(), port.to_string());
    }
    Ok(())
}

/// The port `choose_master_port` chose, for the `Started` report.
pub(crate) fn master_port(dispatch: &Dispatch) -> Option<u16> {
    if !dispatch.choose_master_port {
        return None;
    }
    dispatch
        .env
        .get(gpuplane_api::agent::MASTER_PORT_VARIABLES[0])?
        .parse()
        .ok()
}

fn attempt_ref(dispatch: &Dispatch) -> AttemptRef {
    AttemptRef {
        job_id: dispatch.job_id.clone(),
        attempt: dispatch.attempt,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
