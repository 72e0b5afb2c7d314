//! The job's SDK spool. Each attempt spools into its own `spool/` folder
//! (the job's `GPUCTL_SPOOL_DIR`), never into one another job replays.
//! While the job runs, the agent reports what sits there: metrics the SDK
//! has kept spooling for a while (`METRICS_SPOOLED`) and what the server
//! refused (`METRICS_REFUSED`, from the spool's quarantine). When the job
//! ends, the agent sends what is left with the job's own token, which
//! writes only to the job's run, to the server it is connected to (which may
//! answer when the job's `GPUCTL_SERVER` did not).
//!
//! The folder is the job's to write: the agent opens nothing in it through a
//! link, reads only regular files, and leaves a `spool` that is not a folder
//! of its own alone (`gpuplane-spool`).

use crate::client::Client;
use crate::reporter::Reporter;
use gpuplane_api::agent::{Dispatch, JOB_TOKEN_VARIABLE, ReportItem};
use gpuplane_api::error::ErrorBody;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_spool::{Method, OnTokenRefused, Report, SendError, Sender, Stop};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The spool folder's name in an attempt directory.
pub const DIR: &str = "spool";
/// A spool file younger than this may be the SDK riding out a short outage
/// (it replays its spool itself once the server answers): not reported yet.
const REPORT_SPOOLED_AFTER: Duration = Duration::from_secs(30);
/// How often the folder is looked at while the job runs.
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// How long the agent keeps trying to send what a job left.
const SEND_FOR: Duration = Duration::from_secs(300);

/// The spool folder of an attempt.
pub fn dir(attempt_dir: &Path) -> PathBuf {
    attempt_dir.join(DIR)
}

/// Reports what an attempt's SDK spooled or had refused, and sends what is
/// left when it ends.
pub struct JobSpool {
    job_id: String,
    attempt: i64,
    host: String,
    dir: PathBuf,
    /// Spool files seen: when first, and whether reported.
    spooled: HashMap<PathBuf, (Instant, bool)>,
    /// Quarantine files reported.
    refused: HashSet<PathBuf>,
    next_look: Instant,
}

impl JobSpool {
    pub fn new(dispatch: &Dispatch, attempt_dir: &Path, host: &str) -> JobSpool {
        JobSpool {
            job_id: dispatch.job_id.clone(),
            attempt: dispatch.attempt,
            host: host.to_string(),
            dir: dir(attempt_dir),
            spooled: HashMap::new(),
            refused: HashSet::new(),
            next_look: Instant::now(),
        }
    }

    fn notice(&self, reporter: &Reporter, kind: EventKind, severity: Severity, message: String) {
        reporter.push(ReportItem::Notice {
            job_id: self.job_id.clone(),
            attempt: self.attempt,
            kind,
            message,
            severity: Some(severity),
        });
    }

    /// Whether the folder is one the agent reads (a real folder, not a link).
    fn readable(&self) -> bool {
        gpuplane_spool::real_dir(&self.dir).unwrap_or(false)
    }

    /// Looks at the folder (at most every [`LOOK_EVERY`] unless `ended`)
    /// and reports new quarantine files, and spool files that stayed
    /// [`REPORT_SPOOLED_AFTER`] (any, once the job `ended`).
    pub fn look(&mut self, reporter: &Reporter, ended: bool) {
        if !ended && Instant::now() < self.next_look {
            return;
        }
        self.next_look = Instant::now() + LOOK_EVERY;
        if !self.readable() {
            return;
        }
        let pending = gpuplane_spool::spool_files(&self.dir).unwrap_or_default();
        for path in &pending {
            let (seen, reported) = self
                .spooled
                .entry(path.clone())
                .or_insert((Instant::now(), false));
            if *reported || !(ended || seen.elapsed() >= REPORT_SPOOLED_AFTER) {
                continue;
            }
            *reported = true;
            let Ok(Some(file)) = gpuplane_spool::summary(path) else {
                continue;
            };
            let why = file
                .reason
                .as_deref()
                .unwrap_or("the server could not be reached");
            let message = format!(
                "the job's SDK spooled {} metric point(s) instead of sending them ({why}): {} on {}; the agent \
                 sends them with the job's token when the job ends",
                file.points, file.file, self.host
            );
            self.notice(reporter, EventKind::MetricsSpooled, Severity::Warning, message);
        }
        // Reported files the SDK replayed itself meanwhile.
        let gone: Vec<PathBuf> = self
            .spooled
            .iter()
            .filter(|(path, (_, reported))| *reported && !pending.contains(path))
            .map(|(path, _)| path.clone())
            .collect();
        for path in gone {
            self.spooled.remove(&path);
            if !ended {
                let message = format!(
                    "the job's SDK reached the server again and sent what it had spooled in {}",
                    path.display()
                );
                self.notice(reporter, EventKind::MetricsSpooled, Severity::Info, message);
            }
        }
        for path in gpuplane_spool::quarantined_files(&self.dir).unwrap_or_default() {
            if !self.refused.insert(path.clone()) {
                continue;
            }
            let Ok(Some(file)) = gpuplane_spool::summary(&path) else {
                continue;
            };
            let status = file.status.map(|s| format!("{s} ")).unwrap_or_default();
            let why = file.reason.as_deref().unwrap_or("no reason recorded");
            let message = format!(
                "the server refused {} record(s) ({} metric point(s)) of the job's SDK ({status}{why}); they are kept \
                 in {} on {}: fix what the server names, then run `GPUCTL_SPOOL_DIR={} gpuctl sync --quarantined` there",
                file.records,
                file.points,
                file.file,
                self.host,
                self.dir.display()
            );
            self.notice(reporter, EventKind::MetricsRefused, Severity::Warning, message);
        }
    }

    /// After the job ended: reports what is there, then sends what it left
    /// in its spool with its own token to `server_url`, trying again for a
    /// while when the server does not answer. Returns once done or given up.
    pub async fn send_left(&mut self, dispatch: &Dispatch, server_url: &str, reporter: &Reporter) {
        self.look(reporter, true);
        if !self.readable()
            || gpuplane_spool::spool_files(&self.dir)
                .unwrap_or_default()
                .is_empty()
        {
            return;
        }
        let Some(sender) = dispatch
            .env
            .get(JOB_TOKEN_VARIABLE)
            .and_then(|token| Client::new(server_url, token).ok())
            .map(JobSender)
        else {
            return;
        };
        let began = Instant::now();
        let mut pause = Duration::from_secs(1);
        loop {
            let mut report = Report::default();
            // A token refused now belongs to an attempt the server ended: it will not come back.
            let stopped =
                gpuplane_spool::replay_dir(&sender, &self.dir, OnTokenRefused::Quarantine, &mut report).await;
            self.tell(reporter, &report);
            match stopped {
                Err(Stop::Unreachable(why)) if began.elapsed() < SEND_FOR => {
                    tracing::info!(job_id = self.job_id, why, "cannot send the job's spool yet");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
                Ok(()) => return,
                Err(stop) => {
                    let message = format!(
                        "the agent could not send what the job's SDK spooled ({stop}); it stays in {} on {}: run \
                         `GPUCTL_SPOOL_DIR={} gpuctl sync` there",
                        self.dir.display(),
                        self.host,
                        self.dir.display()
                    );
                    self.notice(reporter, EventKind::MetricsSpooled, Severity::Warning, message);
                    return;
                }
            }
        }
    }

    /// Events for what one replay sent and what the server refused.
    fn tell(&mut self, reporter: &Reporter, report: &Report) {
        if report.points > 0 || report.texts > 0 {
            let message = format!(
                "the agent sent the {} metric point(s) and {} text(s) the job's SDK had spooled",
                report.points, report.texts
            );
            self.notice(reporter, EventKind::MetricsSpooled, Severity::Info, message);
        }
        for held in &report.quarantined {
            self.refused.insert(PathBuf::from(&held.file));
            let message = format!(
                "the server refused {} record(s) ({} metric point(s)) the job's SDK had spooled ({} {}); they are \
                 kept in {} on {}: fix what the server names, then run `GPUCTL_SPOOL_DIR={} gpuctl sync \
                 --quarantined` there",
                held.records,
                held.points,
                held.status,
                held.reason,
                held.file,
                self.host,
                self.dir.display()
            );
            self.notice(reporter, EventKind::MetricsRefused, Severity::Warning, message);
        }
        for file in &report.unreadable {
            tracing::warn!(
                job_id = self.job_id,
                file,
                "a spool file that is not a regular file was left alone"
            );
        }
    }
}

/// The server's API with a job's token.
struct JobSender(Client);

impl Sender for JobSender {
    async fn send(&self, method: Method, path: &str, body: &Value) -> Result<Value, SendError> {
        let method = match method {
            Method::Post => reqwest::Method::POST,
            Method::Patch => reqwest::Method::PATCH,
        };
        let (status, bytes) = self
            .0
            .call(method, path, body)
            .await
            .map_err(|error| SendError::Unreachable(error.to_string()))?;
        let status = status.as_u16();
        if (200..300).contains(&status) {
            return Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null));
        }
        let message = serde_json::from_slice::<ErrorBody>(&bytes)
            .map(|body| body.error.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).chars().take(500).collect());
        if gpuplane_spool::retry_later(status) {
            Err(SendError::Unreachable(format!("{status}: {message}")))
        } else {
            Err(SendError::Refused { status, message })
        }
    }
}
