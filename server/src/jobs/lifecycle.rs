//! How dispatched jobs move: what agents report (started, output, exited,
//! disk), reconciliation when an agent says hello, the commands each poll
//! carries, and jobs lost with their node. Every change to a job happens in
//! one `BEGIN IMMEDIATE` transaction with the events it causes.

use crate::api::error::ApiError;
use crate::events::{self, Links};
use crate::jobs::store::{end_active_attempt, finish_job};
use crate::logs;
use crate::runs::evaluations;
use crate::state::AppState;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::agent::{AgentCommand, AttemptRef, Dispatch, Report, ReportItem, Resume};
use gpuplane_api::evaluation::ResultFile;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::job::{FailureReason, JobKind, JobSpec, JobStatus, signal_name};
use gpuplane_api::log::LogStream;
use sqlx::SqliteConnection;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Below this share of free space on a job's filesystem, DISK_LOW is raised.
pub const DISK_LOW_PERCENT: f64 = 5.0;

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

/// How an attempt ended, decided from its exit and its last output lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: JobStatus,
    pub reason: Option<FailureReason>,
    pub detail: Option<String>,
}

pub fn classify(
    exit_code: Option<i32>,
    signal: Option<i32>,
    oom_killed: bool,
    cancelled: bool,
    output: &[String],
) -> Outcome {
    let failed = |reason, detail: String| Outcome {
        status: JobStatus::Failed,
        reason: Some(reason),
        detail: Some(detail),
    };
    if cancelled {
        return Outcome {
            status: JobStatus::Cancelled,
            reason: None,
            detail: Some("cancelled on request".into()),
        };
    }
    if oom_killed {
        return failed(
            FailureReason::Oom,
            "killed by the kernel's OOM killer (host memory ran out)".into(),
        );
    }
    if exit_code == Some(0) && signal.is_none() {
        return Outcome {
            status: JobStatus::Succeeded,
            reason: None,
            detail: None,
        };
    }
    if let Some(line) = output.iter().rev().find(|line| {
        let lower = line.to_lowercase();
        CUDA_OOM_PATTERNS.iter().any(|pattern| lower.contains(pattern))
    }) {
        return failed(FailureReason::Oom, format!("CUDA out of memory: {}", line.trim()));
    }
    match (signal, exit_code) {
        (Some(signal), _) => {
            let name = signal_name(signal).unwrap_or("unknown signal");
            failed(
                FailureReason::Signal,
                format!("killed by {name} (signal {signal})"),
            )
        }
        (None, Some(code)) => failed(FailureReason::ExitCode, format!("exited with code {code}")),
        (None, None) => failed(FailureReason::ExitCode, "ended without an exit code".into()),
    }
}

/// Whether an attempt row belongs to `node_id`, and its status.
async fn attempt_status(
    conn: &mut SqliteConnection,
    node_id: &str,
    job_id: &str,
    attempt: i64,
) -> Result<Option<JobStatus>, ApiError> {
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM attempts WHERE job_id = ? AND n = ? AND node_id = ?")
            .bind(job_id)
            .bind(attempt)
            .bind(node_id)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(status.and_then(|s| s.parse().ok()))
}

/// For each attempt an agent still has: where to resume its output, or to drop it.
/// RUNNING attempts on the node that the agent no longer has are lost.
pub async fn reconcile(
    conn: &mut SqliteConnection,
    state: &AppState,
    node_id: &str,
    node_name: &str,
    attempts: &[AttemptRef],
) -> Result<Vec<Resume>, ApiError> {
    let mut resume = Vec::new();
    for attempt in attempts {
        let status = attempt_status(conn, node_id, &attempt.job_id, attempt.attempt).await?;
        resume.push(Resume {
            job_id: attempt.job_id.clone(),
            attempt: attempt.attempt,
            stdout_lines: logs::last_n(conn, &attempt.job_id, attempt.attempt, LogStream::Stdout).await?,
            stderr_lines: logs::last_n(conn, &attempt.job_id, attempt.attempt, LogStream::Stderr).await?,
            keep: status.is_some_and(JobStatus::is_active),
            known: status.is_some(),
        });
    }
    let listed: HashSet<(&str, i64)> = attempts.iter().map(|a| (a.job_id.as_str(), a.attempt)).collect();
    let running: Vec<(String, i64)> =
        sqlx::query_as("SELECT job_id, n FROM attempts WHERE node_id = ? AND status = 'RUNNING'")
            .bind(node_id)
            .fetch_all(&mut *conn)
            .await?;
    let now = now_ms();
    for (job_id, n) in running {
        if !listed.contains(&(job_id.as_str(), n)) {
            let detail = format!("the agent on {node_name} restarted without this job's state");
            lose_attempt(conn, state, &job_id, n, node_id, &detail, now).await?;
        }
    }
    Ok(resume)
}

/// The commands a node's poll carries: dispatches it has not started,
/// cancels, stops for attempts the server has ended, and queued one-shots.
pub async fn commands_for(
    state: &AppState,
    node_id: &str,
    running: &[AttemptRef],
) -> Result<Vec<AgentCommand>, ApiError> {
    #[derive(sqlx::FromRow)]
    struct ActiveRow {
        job_id: String,
        n: i64,
        status: String,
        gpus: String,
        spec: String,
        run_id: String,
        cancel_requested_at: Option<i64>,
    }
    let active: Vec<ActiveRow> = sqlx::query_as(
        "SELECT a.job_id, a.n, a.status, a.gpus, j.spec, j.run_id, j.cancel_requested_at
         FROM attempts a JOIN jobs j ON j.id = a.job_id
         WHERE a.node_id = ? AND a.status IN ('DISPATCHING', 'RUNNING')",
    )
    .bind(node_id)
    .fetch_all(&state.db)
    .await?;
    let running: BTreeSet<(&str, i64)> = running.iter().map(|a| (a.job_id.as_str(), a.attempt)).collect();
    let grace_ms = state.config.cancel_grace.as_millis() as u64;
    let mut commands = Vec::new();
    let mut unopenable = Vec::new();
    for row in &active {
        if row.cancel_requested_at.is_some() {
            commands.push(AgentCommand::Cancel {
                job_id: row.job_id.clone(),
                attempt: row.n,
                grace_ms,
            });
        } else if row.status == "DISPATCHING" && !running.contains(&(row.job_id.as_str(), row.n)) {
            let mut spec: JobSpec = serde_json::from_str(&row.spec).map_err(anyhow::Error::from)?;
            // The agent gets the secret values, and only in its dispatch. A
            // value this server's key cannot open fails the dispatch: a job
            // must not run without the credentials it was given.
            let mut opened = BTreeMap::new();
            let mut lost = Vec::new();
            for (name, sealed) in std::mem::take(&mut spec.secret_env) {
                match state.secret.open(&row.job_id, &name, &sealed) {
                    Some(value) => {
                        opened.insert(name, value);
                    }
                    None => lost.push(name),
                }
            }
            if !lost.is_empty() {
                unopenable.push(ReportItem::DispatchFailed {
                    job_id: row.job_id.clone(),
                    attempt: row.n,
                    detail: format!(
                        "the secret variables {} cannot be decrypted with this server's key \
                         (was DATA_DIR/secret.key replaced?); submit the job again with its secrets",
                        lost.join(", ")
                    ),
                });
                continue;
            }
            spec.secret_env = opened;
            let gpus: Vec<u32> = serde_json::from_str(&row.gpus).map_err(anyhow::Error::from)?;
            commands.push(AgentCommand::Dispatch(Box::new(dispatch(
                state,
                &row.job_id,
                row.n,
                &row.run_id,
                spec,
                gpus,
            ))));
        }
    }
    let active_set: HashSet<(&str, i64)> = active.iter().map(|row| (row.job_id.as_str(), row.n)).collect();
    for (job_id, attempt) in running {
        if !active_set.contains(&(job_id, attempt)) {
            commands.push(AgentCommand::Cancel {
                job_id: job_id.to_string(),
                attempt,
                grace_ms,
            });
        }
    }
    commands.extend(state.agents.take_pending(node_id));
    if !unopenable.is_empty() {
        let report = Report {
            node_id: node_id.to_string(),
            items: unopenable,
        };
        apply_report(state, &report).await?;
        state.scheduler_wake.notify_one();
        let _ = state.event_recorded.send(());
    }
    Ok(commands)
}

fn dispatch(
    state: &AppState,
    job_id: &str,
    attempt: i64,
    run_id: &str,
    spec: JobSpec,
    gpus: Vec<u32>,
) -> Dispatch {
    let visible: Vec<String> = gpus.iter().map(u32::to_string).collect();
    let env = BTreeMap::from([
        ("GPUCTL_SERVER".to_string(), state.config.public_url()),
        (
            "GPUCTL_TOKEN".to_string(),
            state.secret.attempt_token(job_id, attempt),
        ),
        ("GPUCTL_JOB_ID".to_string(), job_id.to_string()),
        ("GPUCTL_RUN_ID".to_string(), run_id.to_string()),
        ("GPUCTL_ATTEMPT".to_string(), attempt.to_string()),
        ("CUDA_VISIBLE_DEVICES".to_string(), visible.join(",")),
    ]);
    Dispatch {
        job_id: job_id.to_string(),
        attempt,
        run_id: run_id.to_string(),
        spec,
        gpus,
        env,
    }
}

/// What applying a report changed, for the notifications sent after commit.
#[derive(Debug, Default)]
pub struct Applied {
    /// Jobs with new output lines.
    pub logs_for: BTreeSet<String>,
    /// Some attempt ended or started: capacity or states changed.
    pub jobs_changed: bool,
}

/// Applies an agent's report in one transaction. Items for attempts that are
/// not this node's are ignored; replays change nothing.
pub async fn apply_report(state: &AppState, report: &Report) -> Result<Applied, ApiError> {
    let node_id = report.node_id.as_str();
    let mut applied = Applied::default();
    let mut tx = state.db.begin_with("BEGIN IMMEDIATE").await?;
    let node_name: Option<String> = sqlx::query_scalar("SELECT name FROM nodes WHERE id = ?")
        .bind(node_id)
        .fetch_optional(&mut *tx)
        .await?;
    let node_name = node_name
        .ok_or_else(|| ApiError::NotFound(format!("node {node_id} is not registered; send hello first")))?;
    let mut owned: BTreeMap<(String, i64), Option<JobStatus>> = BTreeMap::new();
    for item in &report.items {
        let (job_id, attempt) = item.attempt();
        let key = (job_id.to_string(), attempt);
        let status = match owned.get(&key) {
            Some(status) => *status,
            None => {
                let status = attempt_status(&mut tx, node_id, job_id, attempt).await?;
                owned.insert(key.clone(), status);
                status
            }
        };
        if status.is_none() {
            tracing::warn!(
                node_id,
                job_id,
                attempt,
                "report about an attempt this node does not have; ignored"
            );
            continue;
        }
        match item {
            ReportItem::Started {
                pid,
                time,
                git_commit,
                ..
            } => {
                let started = sqlx::query(
                    "UPDATE attempts SET status = 'RUNNING', started_at = ?, pid = ?, git_commit = ?
                     WHERE job_id = ? AND n = ? AND status = 'DISPATCHING'",
                )
                .bind(time)
                .bind(*pid as i64)
                .bind(
                    git_commit
                        .as_deref()
                        .filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_hexdigit())),
                )
                .bind(job_id)
                .bind(attempt)
                .execute(&mut *tx)
                .await?;
                if started.rows_affected() == 1 {
                    sqlx::query(
                        "UPDATE jobs SET status = 'RUNNING', updated_at = ? WHERE id = ? AND status = 'DISPATCHING'",
                    )
                    .bind(now_ms())
                    .bind(job_id)
                    .execute(&mut *tx)
                    .await?;
                    owned.insert(key, Some(JobStatus::Running));
                    applied.jobs_changed = true;
                }
            }
            ReportItem::DispatchFailed { detail, .. } => {
                if status == Some(JobStatus::Dispatching) {
                    let now = now_ms();
                    end_attempt(
                        &mut tx,
                        job_id,
                        attempt,
                        JobStatus::Failed,
                        None,
                        None,
                        FailureReason::DispatchFailed,
                        detail,
                        now,
                    )
                    .await?;
                    let message = format!("could not start on {node_name}: {detail}");
                    let links = links(&mut tx, job_id, node_id).await?;
                    events::record(
                        &mut tx,
                        now,
                        Severity::Warning,
                        EventKind::DispatchFailed,
                        links.as_links(),
                        &message,
                    )
                    .await?;
                    fail_or_retry(&mut tx, state, job_id, FailureReason::DispatchFailed, detail, now).await?;
                    owned.insert(key, Some(JobStatus::Failed));
                    applied.jobs_changed = true;
                }
            }
            ReportItem::Lines {
                stream,
                first_n,
                time,
                lines,
                ..
            } => {
                let batch = logs::Batch {
                    job_id,
                    attempt,
                    stream: *stream,
                    first_n: *first_n,
                    time: *time,
                    lines,
                };
                logs::ingest(&mut tx, batch, state.config.log_tail_lines).await?;
                applied.logs_for.insert(job_id.to_string());
            }
            ReportItem::Exited {
                exit_code,
                signal,
                oom_killed,
                cancelled,
                time,
                eval_result,
                ..
            } => {
                let exit = AttemptExit {
                    exit_code: *exit_code,
                    signal: *signal,
                    oom_killed: *oom_killed,
                    cancelled: *cancelled,
                    time: *time,
                    eval_result: eval_result.as_ref(),
                };
                if finish(&mut tx, state, &node_name, node_id, job_id, attempt, exit).await? {
                    owned.insert(key, Some(JobStatus::Failed));
                    applied.jobs_changed = true;
                }
            }
            ReportItem::Points { batch_id, points, .. } => {
                let batch = gpuplane_api::metric::Batch {
                    batch_id: batch_id.clone(),
                    points: points.clone(),
                };
                match crate::metrics::validate(&batch) {
                    Ok(()) => {
                        let run_id = run_of(&mut tx, job_id).await?;
                        crate::metrics::ingest(&mut tx, &run_id, &batch, &state.config.loss_pattern).await?;
                        applied.jobs_changed = true;
                    }
                    Err(error) => tracing::warn!(job_id, %error, "TensorBoard points refused"),
                }
            }
            ReportItem::Checkpoint {
                path,
                size,
                modified,
                step,
                ..
            } => {
                let run_id = run_of(&mut tx, job_id).await?;
                crate::runs::checkpoints::record(&mut tx, &run_id, node_id, path, *size, *modified, *step)
                    .await?;
            }
            ReportItem::Notice { kind, message, .. } => {
                let links = links(&mut tx, job_id, node_id).await?;
                events::record(
                    &mut tx,
                    now_ms(),
                    Severity::Warning,
                    *kind,
                    links.as_links(),
                    message,
                )
                .await?;
                applied.jobs_changed = true;
            }
            ReportItem::Disk {
                path, free_percent, ..
            } => {
                if *free_percent < DISK_LOW_PERCENT {
                    let flagged = sqlx::query(
                        "UPDATE attempts SET disk_low_reported = 1 WHERE job_id = ? AND n = ? AND disk_low_reported = 0",
                    )
                    .bind(job_id)
                    .bind(attempt)
                    .execute(&mut *tx)
                    .await?;
                    if flagged.rows_affected() == 1 {
                        let message = format!(
                            "the filesystem of {path} on {node_name} has {free_percent:.1}% free (below {DISK_LOW_PERCENT}%): \
                             remove old checkpoints, move the output directory, or grow the disk"
                        );
                        let links = links(&mut tx, job_id, node_id).await?;
                        events::record(
                            &mut tx,
                            now_ms(),
                            Severity::Critical,
                            EventKind::DiskLow,
                            links.as_links(),
                            &message,
                        )
                        .await?;
                    }
                }
            }
        }
    }
    tx.commit().await?;
    Ok(applied)
}

async fn run_of(conn: &mut SqliteConnection, job_id: &str) -> Result<String, ApiError> {
    Ok(sqlx::query_scalar("SELECT run_id FROM jobs WHERE id = ?")
        .bind(job_id)
        .fetch_one(&mut *conn)
        .await?)
}

/// A job's run id, for event links.
struct OwnedLinks {
    job_id: String,
    run_id: Option<String>,
    node_id: String,
}

impl OwnedLinks {
    fn as_links(&self) -> Links<'_> {
        Links {
            job_id: Some(&self.job_id),
            run_id: self.run_id.as_deref(),
            node_id: Some(&self.node_id),
        }
    }
}

async fn links(conn: &mut SqliteConnection, job_id: &str, node_id: &str) -> Result<OwnedLinks, ApiError> {
    let run_id: Option<String> = sqlx::query_scalar("SELECT run_id FROM jobs WHERE id = ?")
        .bind(job_id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(OwnedLinks {
        job_id: job_id.to_string(),
        run_id,
        node_id: node_id.to_string(),
    })
}

/// How an attempt ended, as its agent reported it.
struct AttemptExit<'a> {
    exit_code: Option<i32>,
    signal: Option<i32>,
    oom_killed: bool,
    cancelled: bool,
    time: i64,
    eval_result: Option<&'a ResultFile>,
}

/// Records an attempt's end: classifies it (an evaluation that exited 0
/// must also have left a valid result), ends the job or queues a retry.
/// Returns whether the attempt was still active (a replay changes nothing).
async fn finish(
    conn: &mut SqliteConnection,
    state: &AppState,
    node_name: &str,
    node_id: &str,
    job_id: &str,
    attempt: i64,
    exit: AttemptExit<'_>,
) -> Result<bool, ApiError> {
    let AttemptExit {
        exit_code,
        signal,
        oom_killed,
        cancelled,
        time,
        eval_result,
    } = exit;
    let status = attempt_status(conn, node_id, job_id, attempt).await?;
    if !status.is_some_and(JobStatus::is_active) {
        // Ended by the server already (lost, or cancelled while offline): keep the real exit on record.
        sqlx::query(
            "UPDATE attempts SET exit_code = coalesce(exit_code, ?), signal = coalesce(signal, ?)
             WHERE job_id = ? AND n = ?",
        )
        .bind(exit_code)
        .bind(signal)
        .bind(job_id)
        .bind(attempt)
        .execute(&mut *conn)
        .await?;
        return Ok(false);
    }
    let (cancel_requested, kind): (Option<i64>, String) =
        sqlx::query_as("SELECT cancel_requested_at, kind FROM jobs WHERE id = ?")
            .bind(job_id)
            .fetch_one(&mut *conn)
            .await?;
    let output = logs::recent_text(conn, job_id, attempt, 300).await?;
    let mut outcome = classify(
        exit_code,
        signal,
        oom_killed,
        cancelled || cancel_requested.is_some(),
        &output,
    );
    if outcome.status == JobStatus::Succeeded
        && kind == JobKind::Evaluate.as_str()
        && let Err(reason) =
            evaluations::accept(conn, job_id, eval_result, &state.config.loss_pattern).await?
    {
        outcome = Outcome {
            status: JobStatus::Failed,
            reason: Some(FailureReason::EvaluationResultInvalid),
            detail: Some(reason),
        };
    }
    let now = time.max(0);
    sqlx::query(
        "UPDATE attempts SET status = ?, exit_code = ?, signal = ?, ended_at = ?, failure_reason = ?, failure_detail = ?
         WHERE job_id = ? AND n = ?",
    )
    .bind(outcome.status.as_str())
    .bind(exit_code)
    .bind(signal)
    .bind(now)
    .bind(outcome.reason.map(FailureReason::as_str))
    .bind(&outcome.detail)
    .bind(job_id)
    .bind(attempt)
    .execute(&mut *conn)
    .await?;
    revoke_attempt_token(conn, job_id, attempt, now).await?;
    let links = links(conn, job_id, node_id).await?;
    if outcome.status != JobStatus::Cancelled {
        report_missing_metrics(conn, job_id, &links, now).await?;
    }
    match (outcome.status, outcome.reason) {
        (JobStatus::Failed, Some(reason)) => {
            let detail = outcome.detail.unwrap_or_default();
            if reason == FailureReason::Oom {
                let message = format!("attempt {attempt} ran out of memory on {node_name}: {detail}");
                events::record(
                    conn,
                    now,
                    Severity::Critical,
                    EventKind::Oom,
                    links.as_links(),
                    &message,
                )
                .await?;
            }
            let message = format!("attempt {attempt} failed on {node_name}: {reason}: {detail}");
            events::record(
                conn,
                now,
                Severity::Warning,
                EventKind::JobFailed,
                links.as_links(),
                &message,
            )
            .await?;
            fail_or_retry(conn, state, job_id, reason, &detail, now).await?;
        }
        (status, _) => finish_job(conn, job_id, status, None, outcome.detail.as_deref(), now).await?,
    }
    Ok(true)
}

/// NO_METRICS when a job's run has no metric at all when an attempt ends.
async fn report_missing_metrics(
    conn: &mut SqliteConnection,
    job_id: &str,
    links: &OwnedLinks,
    now: i64,
) -> Result<(), ApiError> {
    let (series, watch_dirs): (i64, String) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM metric_series s WHERE s.run_id = j.run_id), json_extract(j.spec, '$.watch_dirs')
         FROM jobs j WHERE j.id = ?",
    )
    .bind(job_id)
    .fetch_one(&mut *conn)
    .await?;
    if series > 0 {
        return Ok(());
    }
    let hint = if watch_dirs == "[]" {
        "no watch_dirs were set: write TensorBoard events into a directory given with --watch, or call run.log() from the gpuplane SDK"
    } else {
        "no TensorBoard event file appeared in its watch_dirs and the SDK logged nothing"
    };
    let message = format!("the job reported no metrics: {hint}");
    events::record(
        conn,
        now,
        Severity::Info,
        EventKind::NoMetrics,
        links.as_links(),
        &message,
    )
    .await?;
    Ok(())
}

/// Ends a job with `reason`, or queues it again after its cooldown when the
/// reason is transient and attempts remain.
async fn fail_or_retry(
    conn: &mut SqliteConnection,
    state: &AppState,
    job_id: &str,
    reason: FailureReason,
    detail: &str,
    now: i64,
) -> Result<(), ApiError> {
    let (attempt_count, max_attempts, spec, run_id): (i64, i64, String, String) =
        sqlx::query_as("SELECT attempt_count, max_attempts, spec, run_id FROM jobs WHERE id = ?")
            .bind(job_id)
            .fetch_one(&mut *conn)
            .await?;
    let end_status = if reason == FailureReason::JobLost {
        JobStatus::Lost
    } else {
        JobStatus::Failed
    };
    if !reason.is_transient() || attempt_count >= max_attempts {
        finish_job(conn, job_id, end_status, Some(reason), Some(detail), now).await?;
        return Ok(());
    }
    let spec: JobSpec = serde_json::from_str(&spec).map_err(anyhow::Error::from)?;
    let cooldown_ms = spec.retry_cooldown_s * 1000;
    let next = attempt_count + 1;
    let reason_text = format!(
        "retry cooldown: attempt {next} of {max_attempts} starts at {}",
        rfc3339(now + cooldown_ms)
    );
    sqlx::query(
        "UPDATE jobs SET status = 'QUEUED', failure_reason = NULL, failure_detail = NULL, queued_reason = ?,
             queued_at = ?, not_before = ?, updated_at = ?
         WHERE id = ?",
    )
    .bind(&reason_text)
    .bind(now)
    .bind(now + cooldown_ms)
    .bind(now)
    .bind(job_id)
    .execute(&mut *conn)
    .await?;
    let message = format!(
        "attempt {attempt_count} ended with {reason}; retrying in {}s (attempt {next} of {max_attempts})",
        spec.retry_cooldown_s
    );
    let links = Links {
        job_id: Some(job_id),
        run_id: Some(&run_id),
        node_id: None,
    };
    events::record(conn, now, Severity::Info, EventKind::JobRetrying, links, &message).await?;
    state.scheduler_wake.notify_one();
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn end_attempt(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
    status: JobStatus,
    exit_code: Option<i32>,
    signal: Option<i32>,
    reason: FailureReason,
    detail: &str,
    now: i64,
) -> Result<(), ApiError> {
    sqlx::query(
        "UPDATE attempts SET status = ?, exit_code = ?, signal = ?, ended_at = ?, failure_reason = ?, failure_detail = ?
         WHERE job_id = ? AND n = ?",
    )
    .bind(status.as_str())
    .bind(exit_code)
    .bind(signal)
    .bind(now)
    .bind(reason.as_str())
    .bind(detail)
    .bind(job_id)
    .bind(attempt)
    .execute(&mut *conn)
    .await?;
    revoke_attempt_token(conn, job_id, attempt, now).await?;
    Ok(())
}

/// The per-attempt sdk token stops working when the attempt ends.
pub async fn revoke_attempt_token(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
    now: i64,
) -> Result<(), ApiError> {
    sqlx::query(
        "UPDATE api_tokens SET revoked_at = ? WHERE revoked_at IS NULL
           AND id = (SELECT sdk_token_id FROM attempts WHERE job_id = ? AND n = ?)",
    )
    .bind(now)
    .bind(job_id)
    .bind(attempt)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Marks an active attempt LOST (its node went away), with a JOB_LOST event,
/// and requeues the job when attempts remain.
pub async fn lose_attempt(
    conn: &mut SqliteConnection,
    state: &AppState,
    job_id: &str,
    attempt: i64,
    node_id: &str,
    detail: &str,
    now: i64,
) -> Result<(), ApiError> {
    end_attempt(
        conn,
        job_id,
        attempt,
        JobStatus::Lost,
        None,
        None,
        FailureReason::JobLost,
        detail,
        now,
    )
    .await?;
    let links = links(conn, job_id, node_id).await?;
    let message = format!("attempt {attempt} lost: {detail}");
    events::record(
        conn,
        now,
        Severity::Critical,
        EventKind::JobLost,
        links.as_links(),
        &message,
    )
    .await?;
    let cancel_requested: Option<i64> =
        sqlx::query_scalar("SELECT cancel_requested_at FROM jobs WHERE id = ?")
            .bind(job_id)
            .fetch_one(&mut *conn)
            .await?;
    if cancel_requested.is_some() {
        finish_job(
            conn,
            job_id,
            JobStatus::Cancelled,
            None,
            Some("cancelled; its node went away"),
            now,
        )
        .await?;
    } else {
        fail_or_retry(conn, state, job_id, FailureReason::JobLost, detail, now).await?;
    }
    Ok(())
}

/// Ends the active attempt of a job and the job itself (used by cancel while offline).
pub async fn cancel_offline(conn: &mut SqliteConnection, job_id: &str, now: i64) -> Result<(), ApiError> {
    let attempt: Option<i64> = sqlx::query_scalar(
        "SELECT n FROM attempts WHERE job_id = ? AND status IN ('DISPATCHING', 'RUNNING')",
    )
    .bind(job_id)
    .fetch_optional(&mut *conn)
    .await?;
    let detail = "cancelled while its node was offline";
    end_active_attempt(conn, job_id, JobStatus::Cancelled, None, Some(detail), now).await?;
    if let Some(attempt) = attempt {
        revoke_attempt_token(conn, job_id, attempt, now).await?;
    }
    finish_job(conn, job_id, JobStatus::Cancelled, None, Some(detail), now).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exit_zero_succeeds_and_cancel_wins() {
        assert_eq!(
            classify(Some(0), None, false, false, &[]).status,
            JobStatus::Succeeded
        );
        assert_eq!(
            classify(None, Some(15), false, true, &[]).status,
            JobStatus::Cancelled
        );
    }

    #[test]
    fn cuda_oom_in_the_output_is_oom() {
        let output = lines(&[
            "Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)",
        ]);
        let outcome = classify(Some(1), None, false, false, &output);
        assert_eq!(outcome.reason, Some(FailureReason::Oom));
        assert!(outcome.detail.unwrap().contains("Tried to allocate 2.00 GiB"));
    }

    #[test]
    fn the_oom_killer_is_oom_and_other_signals_are_named() {
        assert_eq!(
            classify(None, Some(9), true, false, &[]).reason,
            Some(FailureReason::Oom)
        );
        let segv = classify(None, Some(11), false, false, &[]);
        assert_eq!(segv.reason, Some(FailureReason::Signal));
        assert_eq!(segv.detail.as_deref(), Some("killed by SIGSEGV (signal 11)"));
        let code = classify(Some(3), None, false, false, &lines(&["ValueError: bad"]));
        assert_eq!(code.reason, Some(FailureReason::ExitCode));
        assert_eq!(code.detail.as_deref(), Some("exited with code 3"));
    }
}
