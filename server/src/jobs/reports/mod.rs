//! Applying an agent's report: one transaction for the whole report, one
//! function per kind of item. Items about attempts that are not the
//! reporting node's are ignored, and replays change nothing (line numbers
//! and attempt states make them harmless).

use super::Handles;
use super::evaluations;
use crate::events;
use crate::jobs::failure::{self, Exit, Outcome};
use crate::jobs::lifecycle::{self, AttemptEnd, JobLinks};
use crate::jobs::members::OnNode;
use crate::logs;
use crate::runs::{checkpoints, details};
use crate::store::Error;
use crate::store::Tx;
use crate::store::sql;
use crate::store::time::now_ms;
use gpuplane_api::agent::{Report, ReportItem};
use gpuplane_api::evaluation::ResultFile;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::job::{FailureReason, JobKind, JobStatus};
use gpuplane_api::metric::Point;
use std::collections::{BTreeMap, BTreeSet};

/// Below this share of free space on a job's filesystem, DISK_LOW is raised.
pub const DISK_LOW_PERCENT: f64 = 5.0;

/// What applying a report changed, for the notifications sent after commit.
#[derive(Debug, Default)]
pub struct Applied {
    /// Jobs with new output lines.
    pub logs_for: BTreeSet<String>,
    /// An attempt started or ended, or an event was recorded.
    pub jobs_changed: bool,
    /// Nodes whose agents have news of a multi-node attempt: its other
    /// members may start (rank 0 chose the port) or must stop.
    pub wake_agents: BTreeSet<String>,
}

/// The node a report comes from, and the server's settings items need.
struct Reporter<'a> {
    server: &'a Handles,
    node_id: &'a str,
    node_name: String,
}

mod members;

/// Applies an agent's report in one transaction.
pub async fn apply_report(server: &Handles, report: &Report) -> Result<Applied, Error> {
    let node_id = report.node_id.as_str();
    let mut tx = crate::store::write(&server.db).await?;
    let node_name: Option<String> = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT name FROM nodes WHERE id = $1")
            .bind(node_id)
            .fetch_optional(conn)
            .await
    })?;
    let node_name = node_name
        .ok_or_else(|| Error::NotFound(format!("node {node_id} is not registered; send hello first")))?;
    let node = Reporter {
        server,
        node_id,
        node_name,
    };
    let mut applied = Applied::default();
    // Each attempt's status, read once and forgotten when an item changes it.
    let mut statuses: BTreeMap<(String, i64), Option<OnNode>> = BTreeMap::new();
    for item in &report.items {
        let (job_id, attempt) = item.attempt();
        let key = (job_id.to_string(), attempt);
        let on_node = match statuses.get(&key) {
            Some(on_node) => *on_node,
            None => {
                let on_node = crate::jobs::members::on_node(&mut tx, node_id, job_id, attempt).await?;
                statuses.insert(key.clone(), on_node);
                on_node
            }
        };
        let Some(on_node) = on_node else {
            tracing::warn!(
                node_id,
                job_id,
                attempt,
                "report about an attempt this node does not have; ignored"
            );
            continue;
        };
        let changed = match on_node.member {
            Some(member) => {
                let changed = members::apply_item(&mut tx, &node, item, on_node.attempt, member).await?;
                if changed {
                    let nodes = crate::jobs::members::node_ids(&mut tx, job_id, attempt).await?;
                    applied.wake_agents.extend(nodes);
                }
                changed
            }
            None => apply_item(&mut tx, &node, item, on_node.attempt, 0).await?,
        };
        if let ReportItem::Lines { .. } = item {
            applied.logs_for.insert(job_id.to_string());
        }
        if changed {
            applied.jobs_changed = true;
            statuses.remove(&key);
        }
    }
    tx.commit().await?;
    Ok(applied)
}

/// Applies one item about an attempt of `node` whose status is `status`
/// (output lines are kept under `rank`, the node's member of a multi-node
/// attempt, else 0); returns whether followers have news (a state change
/// or an event).
async fn apply_item(
    conn: &mut Tx,
    node: &Reporter<'_>,
    item: &ReportItem,
    status: JobStatus,
    rank: i64,
) -> Result<bool, Error> {
    let (job_id, attempt) = item.attempt();
    match item {
        ReportItem::Started {
            pid,
            time,
            git_commit,
            ..
        } => started(conn, node, job_id, attempt, *pid, *time, git_commit.as_deref()).await,
        ReportItem::Waiting { reason, .. } => waiting(conn, job_id, attempt, status, reason).await,
        ReportItem::DispatchFailed { detail, .. } if status == JobStatus::Dispatching => {
            dispatch_failed(conn, node, job_id, attempt, detail).await
        }
        ReportItem::DispatchFailed { .. } => Ok(false),
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
                rank,
                stream: *stream,
                first_n: *first_n,
                time: *time,
                lines,
            };
            logs::ingest(conn, batch, node.server.config.settings.log_tail_lines).await?;
            Ok(false)
        }
        ReportItem::Exited {
            lost: Some(detail),
            time,
            ..
        } => {
            if !status.is_active() {
                return Ok(false);
            }
            let detail = format!("{detail} (on {})", node.node_name);
            lifecycle::lose_attempt(conn, job_id, attempt, node.node_id, &detail, (*time).max(0)).await?;
            Ok(true)
        }
        ReportItem::Exited { .. } => match AttemptExit::of(item, None) {
            Some(exit) => exited(conn, node, job_id, attempt, status, exit).await,
            None => Ok(false),
        },
        ReportItem::Points { batch_id, points, .. } => {
            points_read(conn, node, job_id, batch_id, points).await
        }
        ReportItem::Checkpoint {
            path,
            size,
            modified,
            step,
            ..
        } => {
            let run_id = crate::jobs::store::run_of(conn, job_id).await?;
            checkpoints::record(conn, &run_id, node.node_id, path, *size, *modified, *step).await?;
            Ok(false)
        }
        ReportItem::Config { config, .. } => {
            let run_id = crate::jobs::store::run_of(conn, job_id).await?;
            match details::update_config(conn, &run_id, config).await {
                Ok(()) => Ok(false),
                // A bad key from a training script's files must not block the
                // agent's reports: the rest of the report goes on, and the user is told.
                Err(Error::Invalid(errors)) => {
                    let links = JobLinks::of(conn, job_id, node.node_id).await?;
                    let refused: Vec<String> = errors
                        .iter()
                        .map(|e| format!("{}: {}", e.field, e.message))
                        .collect();
                    let message = format!(
                        "hyperparameters from TensorBoard not recorded: {}",
                        refused.join("; ")
                    );
                    events::record(
                        conn,
                        now_ms(),
                        Severity::Warning,
                        EventKind::TensorboardCorrupt,
                        links.as_links(),
                        &message,
                    )
                    .await?;
                    Ok(true)
                }
                Err(other) => Err(other),
            }
        }
        ReportItem::Notice {
            kind,
            message,
            severity,
            ..
        } => {
            let links = JobLinks::of(conn, job_id, node.node_id).await?;
            // An agent tells; it never raises a critical event.
            let severity = match severity {
                Some(Severity::Info) => Severity::Info,
                _ => Severity::Warning,
            };
            events::record(conn, now_ms(), severity, *kind, links.as_links(), message).await?;
            Ok(true)
        }
        ReportItem::Disk {
            path, free_percent, ..
        } => disk(conn, node, job_id, attempt, path, *free_percent).await,
    }
}

/// The process started: the attempt and its job turn RUNNING. The time
/// since it was placed is the dispatch latency `/metrics` shows.
async fn started(
    conn: &mut Tx,
    node: &Reporter<'_>,
    job_id: &str,
    attempt: i64,
    pid: u32,
    time: i64,
    git_commit: Option<&str>,
) -> Result<bool, Error> {
    let git_commit = git_commit.filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_hexdigit()));
    let dispatched_at: Option<i64> = sql!(conn, |conn| {
        sqlx::query_scalar(
            "UPDATE attempts SET status = 'RUNNING', started_at = $1, pid = $2, git_commit = $3
         WHERE job_id = $4 AND n = $5 AND status = 'DISPATCHING'
         RETURNING dispatched_at",
        )
        .bind(time)
        .bind(pid as i64)
        .bind(git_commit)
        .bind(job_id)
        .bind(attempt)
        .fetch_optional(conn)
        .await
    })?;
    let Some(dispatched_at) = dispatched_at else {
        return Ok(false);
    };
    // On the server's clock: the agent's may differ.
    node.server
        .observed
        .started_after((now_ms() - dispatched_at) as f64 / 1000.0);
    sql!(conn, |conn| {
        sqlx::query(
            "UPDATE jobs SET status = 'RUNNING', queued_reason = NULL, updated_at = $1
         WHERE id = $2 AND status = 'DISPATCHING'",
        )
        .bind(now_ms())
        .bind(job_id)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(true)
}

/// The engine the attempt was handed to (Slurm) holds it queued: its
/// reason becomes the job's queued reason until it starts.
async fn waiting(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    status: JobStatus,
    reason: &str,
) -> Result<bool, Error> {
    if status != JobStatus::Dispatching {
        return Ok(false);
    }
    let reason: String = reason.chars().take(MAX_WAITING_REASON_CHARS).collect();
    let changed = sql!(conn, |conn| {
        sqlx::query(
            "UPDATE jobs SET queued_reason = $1, updated_at = $2
         WHERE id = $3 AND status = 'DISPATCHING' AND attempt_count = $4
           AND queued_reason IS DISTINCT FROM $1",
        )
        .bind(&reason)
        .bind(now_ms())
        .bind(job_id)
        .bind(attempt)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(changed > 0)
}

/// A queued reason from an agent is cut to this many characters.
const MAX_WAITING_REASON_CHARS: usize = 500;

/// The agent could not start a dispatched attempt (working dir, program,
/// image): the attempt fails with DISPATCH_FAILED and the job may retry.
async fn dispatch_failed(
    conn: &mut Tx,
    node: &Reporter<'_>,
    job_id: &str,
    attempt: i64,
    detail: &str,
) -> Result<bool, Error> {
    let now = now_ms();
    let reason = FailureReason::DispatchFailed;
    let end = AttemptEnd::without_exit(JobStatus::Failed, Some(reason), detail, now);
    lifecycle::end_attempt(conn, job_id, attempt, end).await?;
    let message = format!("could not start on {}: {detail}", node.node_name);
    let links = JobLinks::of(conn, job_id, node.node_id).await?;
    events::record(
        conn,
        now,
        Severity::Warning,
        EventKind::DispatchFailed,
        links.as_links(),
        &message,
    )
    .await?;
    lifecycle::fail_or_retry(conn, job_id, reason, detail, now).await?;
    Ok(true)
}

/// How an attempt ended, as its agent reported it.
struct AttemptExit<'a> {
    exit_code: Option<i32>,
    signal: Option<i32>,
    oom_killed: bool,
    cancelled: bool,
    timed_out: bool,
    time: i64,
    eval_result: Option<&'a ResultFile>,
    /// The member of a multi-node attempt whose exit ends the attempt.
    rank: Option<i64>,
}

impl<'a> AttemptExit<'a> {
    /// The exit an `Exited` item reports (of member `rank`), if it is one.
    fn of(item: &'a ReportItem, rank: Option<i64>) -> Option<AttemptExit<'a>> {
        let ReportItem::Exited {
            exit_code,
            signal,
            oom_killed,
            cancelled,
            timed_out,
            time,
            eval_result,
            ..
        } = item
        else {
            return None;
        };
        Some(AttemptExit {
            exit_code: *exit_code,
            signal: *signal,
            oom_killed: *oom_killed,
            cancelled: *cancelled,
            timed_out: *timed_out,
            time: *time,
            eval_result: eval_result.as_ref(),
            rank,
        })
    }
}

/// Records an attempt's end: classifies it (an evaluation that exited 0
/// must also have left a valid result), ends the job or queues a retry.
/// An attempt the server ended already (lost, or cancelled while offline)
/// only gets its real exit on record.
async fn exited(
    conn: &mut Tx,
    node: &Reporter<'_>,
    job_id: &str,
    attempt: i64,
    status: JobStatus,
    exit: AttemptExit<'_>,
) -> Result<bool, Error> {
    if !status.is_active() {
        sql!(conn, |conn| {
            sqlx::query(
                "UPDATE attempts SET exit_code = coalesce(exit_code, $1), signal = coalesce(signal, $2)
             WHERE job_id = $3 AND n = $4",
            )
            .bind(exit.exit_code)
            .bind(exit.signal)
            .bind(job_id)
            .bind(attempt)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        return Ok(false);
    }
    let time_limit_s = conn.dialect().json_field("spec", "time_limit_s");
    type Stopping = (Option<i64>, String, Option<i64>, Option<String>, Option<i64>);
    let (cancel_requested, kind, time_limit_s, preempted_by, hung_at): Stopping = sql!(conn, |conn| {
        sqlx::query_as(&format!(
            "SELECT cancel_requested_at, kind, CAST({time_limit_s} AS BIGINT),
                    (SELECT preempted_by FROM attempts WHERE job_id = $1 AND n = $2),
                    (SELECT hung_at FROM attempts WHERE job_id = $1 AND n = $2)
             FROM jobs WHERE id = $1"
        ))
        .bind(job_id)
        .bind(attempt)
        .fetch_one(conn)
        .await
    })?;
    // Stopped by the agent for a preemption (not ended on its own first, and
    // not cancelled by a user): queued again, whatever its exit.
    if let Some(for_job) = preempted_by.filter(|_| exit.cancelled && cancel_requested.is_none()) {
        let end = AttemptEnd {
            status: JobStatus::Cancelled,
            exit_code: exit.exit_code,
            signal: exit.signal,
            reason: Some(FailureReason::Preempted),
            detail: Some(&format!("preempted for {for_job} on {}", node.node_name)),
            at: exit.time.max(0),
        };
        lifecycle::end_attempt(conn, job_id, attempt, end).await?;
        lifecycle::requeue_preempted(conn, job_id, &for_job, &node.node_name, end.at).await?;
        return Ok(true);
    }
    // Stopped by the agent because it hung (`hangs`, on_hang = restart):
    // a HUNG failure, retried from its last checkpoint while attempts remain.
    if hung_at.is_some() && exit.cancelled && cancel_requested.is_none() {
        let detail = "hung: its steps stopped advancing while its processes ran (on_hang = restart)";
        let end = AttemptEnd {
            status: JobStatus::Failed,
            exit_code: exit.exit_code,
            signal: exit.signal,
            reason: Some(FailureReason::Hung),
            detail: Some(detail),
            at: exit.time.max(0),
        };
        lifecycle::end_attempt(conn, job_id, attempt, end).await?;
        lifecycle::fail_or_retry(conn, job_id, FailureReason::Hung, detail, end.at).await?;
        return Ok(true);
    }
    let output = logs::recent_text(conn, job_id, attempt, exit.rank, 300).await?;
    let mut outcome = failure::classify(Exit {
        exit_code: exit.exit_code,
        signal: exit.signal,
        oom_killed: exit.oom_killed,
        cancelled: exit.cancelled || cancel_requested.is_some(),
        timed_out: time_limit_s.filter(|_| exit.timed_out),
        output: &output,
    });
    let loss_pattern = &node.server.config.settings.loss_pattern;
    if outcome.status == JobStatus::Succeeded
        && kind == JobKind::Evaluate.as_str()
        && let Err(reason) = evaluations::accept(conn, job_id, exit.eval_result, loss_pattern).await?
    {
        outcome = Outcome {
            status: JobStatus::Failed,
            reason: Some(FailureReason::EvaluationResultInvalid),
            detail: Some(reason),
        };
    }
    if let Some(rank) = exit.rank
        && outcome.status != JobStatus::Succeeded
    {
        // The first member to fail says why the attempt did.
        let detail = outcome.detail.as_deref().unwrap_or("ended");
        outcome.detail = Some(format!("rank {rank} on {}: {detail}", node.node_name));
    }
    let now = exit.time.max(0);
    let end = AttemptEnd {
        status: outcome.status,
        exit_code: exit.exit_code,
        signal: exit.signal,
        reason: outcome.reason,
        detail: outcome.detail.as_deref(),
        at: now,
    };
    lifecycle::end_attempt(conn, job_id, attempt, end).await?;
    let links = JobLinks::of(conn, job_id, node.node_id).await?;
    if outcome.status != JobStatus::Cancelled {
        report_missing_metrics(conn, job_id, &links, now).await?;
    }
    let detail = outcome.detail.as_deref().unwrap_or_default();
    match (outcome.status, outcome.reason) {
        (JobStatus::Failed, Some(reason)) => {
            let node_name = &node.node_name;
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
            lifecycle::fail_or_retry(conn, job_id, reason, detail, now).await?;
        }
        (status, _) => {
            lifecycle::finish_job(conn, job_id, status, None, outcome.detail.as_deref(), now).await?;
        }
    }
    Ok(true)
}

/// NO_METRICS when a job's run has no metric at all when an attempt ends.
async fn report_missing_metrics(
    conn: &mut Tx,
    job_id: &str,
    links: &JobLinks,
    now: i64,
) -> Result<(), Error> {
    let watch_dirs = conn.dialect().json_field("j.spec", "watch_dirs");
    let (series, watch_dirs, elsewhere): (i64, String, i64) = sql!(conn, |conn| {
        sqlx::query_as(&format!(
            "SELECT (SELECT count(*) FROM metric_series s WHERE s.run_id = j.run_id), {watch_dirs},
                (SELECT count(*) FROM events e WHERE e.job_id = j.id AND e.kind IN ($2, $3))
         FROM jobs j WHERE j.id = $1"
        ))
        .bind(job_id)
        .bind(EventKind::MetricsSpooled.as_str())
        .bind(EventKind::MetricsRefused.as_str())
        .fetch_one(conn)
        .await
    })?;
    if series > 0 {
        return Ok(());
    }
    let hint = if elsewhere > 0 {
        "what its SDK logged did not reach the run: the METRICS_SPOOLED and METRICS_REFUSED events say where it is"
    } else if watch_dirs == "[]" {
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

/// Points the agent read from the job's TensorBoard files, stored like the
/// SDK's (a batch id seen before adds nothing).
async fn points_read(
    conn: &mut Tx,
    node: &Reporter<'_>,
    job_id: &str,
    batch_id: &str,
    points: &[Point],
) -> Result<bool, Error> {
    let batch = match crate::metrics::prepare(batch_id.to_string(), points, Vec::new()) {
        Ok(batch) => batch,
        Err(error) => {
            tracing::warn!(job_id, %error, "TensorBoard points refused");
            return Ok(false);
        }
    };
    let run_id = crate::jobs::store::run_of(conn, job_id).await?;
    crate::metrics::store(conn, &run_id, &batch, &node.server.config.settings.loss_pattern).await?;
    Ok(true)
}

/// A disk reading: below [`DISK_LOW_PERCENT`] free, one critical DISK_LOW
/// event per attempt.
async fn disk(
    conn: &mut Tx,
    node: &Reporter<'_>,
    job_id: &str,
    attempt: i64,
    path: &str,
    free_percent: f64,
) -> Result<bool, Error> {
    if free_percent >= DISK_LOW_PERCENT {
        return Ok(false);
    }
    let flagged = sql!(conn, |conn| {
        sqlx::query(
        "UPDATE attempts SET disk_low_reported = TRUE WHERE job_id = $1 AND n = $2 AND disk_low_reported = FALSE",
    )
    .bind(job_id)
    .bind(attempt)
    .execute(conn)
    .await.map(|done| done.rows_affected())
    })?;
    if flagged == 0 {
        return Ok(false);
    }
    let message = format!(
        "the filesystem of {path} on {} has {free_percent:.1}% free (below {DISK_LOW_PERCENT}%): \
         remove old checkpoints, move the output directory, or grow the disk",
        node.node_name
    );
    let links = JobLinks::of(conn, job_id, node.node_id).await?;
    events::record(
        conn,
        now_ms(),
        Severity::Critical,
        EventKind::DiskLow,
        links.as_links(),
        &message,
    )
    .await?;
    Ok(false)
}
