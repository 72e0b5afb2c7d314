//! How attempts and jobs end, inside the caller's transaction: one function
//! ends an attempt (its row, its sdk token), one ends a job, one decides
//! between ending a failed job and queueing its retry, one loses an attempt
//! with its node. Events are recorded in the same transaction; the caller
//! notifies followers after commit ([`Wakes::jobs_changed`]).
//!
//! [`Wakes::jobs_changed`]: crate::wake::Wakes::jobs_changed

use crate::events::{self, Links};
use crate::store::Error;
use crate::store::Tx;
use crate::store::sql;
use crate::store::time::rfc3339;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::job::{FailureReason, JobSpec, JobStatus};

/// How an attempt ended, as its row records it.
#[derive(Debug, Clone, Copy)]
pub struct AttemptEnd<'a> {
    pub status: JobStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<FailureReason>,
    pub detail: Option<&'a str>,
    pub at: i64,
}

impl<'a> AttemptEnd<'a> {
    /// An end the server decides (no exit seen): lost, cancelled, not started.
    pub fn without_exit(status: JobStatus, reason: Option<FailureReason>, detail: &'a str, at: i64) -> Self {
        AttemptEnd {
            status,
            exit_code: None,
            signal: None,
            reason,
            detail: Some(detail),
            at,
        }
    }
}

/// Ends an attempt: its status, exit and failure on its row, and its sdk
/// token revoked (a job's token stops working when its attempt ends).
pub async fn end_attempt(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    end: AttemptEnd<'_>,
) -> Result<(), Error> {
    sql!(conn, |conn| {
        sqlx::query(
        "UPDATE attempts SET status = $1, exit_code = $2, signal = $3, ended_at = $4, failure_reason = $5, failure_detail = $6
         WHERE job_id = $7 AND n = $8",
    )
    .bind(end.status.as_str())
    .bind(end.exit_code)
    .bind(end.signal)
    .bind(end.at)
    .bind(end.reason.map(FailureReason::as_str))
    .bind(end.detail)
    .bind(job_id)
    .bind(attempt)
    .execute(conn)
    .await.map(|_| ())
    })?;
    sql!(conn, |conn| {
        sqlx::query(
            "UPDATE api_tokens SET revoked_at = $1 WHERE revoked_at IS NULL
           AND id = (SELECT sdk_token_id FROM attempts WHERE job_id = $2 AND n = $3)",
        )
        .bind(end.at)
        .bind(job_id)
        .bind(attempt)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// Ends a job with its final status (and failure, if any).
pub async fn finish_job(
    conn: &mut Tx,
    job_id: &str,
    status: JobStatus,
    reason: Option<FailureReason>,
    detail: Option<&str>,
    now: i64,
) -> Result<(), Error> {
    // A job cancelled for a reason of its own (a sweep's early stop) ends
    // with that reason and detail rather than a plain cancel's.
    sql!(conn, |conn| {
        sqlx::query(
        "UPDATE jobs SET status = $1,
                failure_reason = coalesce($2, CASE WHEN $1 = 'CANCELLED' THEN cancel_reason END),
                failure_detail = CASE WHEN $1 = 'CANCELLED' AND cancel_reason IS NOT NULL THEN cancel_detail ELSE $3 END,
                queued_reason = NULL, updated_at = $4
         WHERE id = $5",
    )
    .bind(status.as_str())
    .bind(reason.map(FailureReason::as_str))
    .bind(detail)
    .bind(now)
    .bind(job_id)
    .execute(conn)
    .await.map(|_| ())
    })?;
    Ok(())
}

/// Ends a job with `reason`, or queues it again after its cooldown when the
/// reason is transient and attempts remain.
pub async fn fail_or_retry(
    conn: &mut Tx,
    job_id: &str,
    reason: FailureReason,
    detail: &str,
    now: i64,
) -> Result<(), Error> {
    let (attempt_count, max_attempts, spec, run_id): (i64, i64, String, String) = sql!(conn, |conn| {
        sqlx::query_as("SELECT attempt_count, max_attempts, spec, run_id FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_one(conn)
            .await
    })?;
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
    let resume = super::resume::prepare(conn, job_id).await?;
    let reason_text = format!(
        "retry cooldown: attempt {next} of {max_attempts} starts at {}{}",
        rfc3339(now + cooldown_ms),
        resume.describe()
    );
    sql!(conn, |conn| {
        sqlx::query(
        "UPDATE jobs SET status = 'QUEUED', failure_reason = NULL, failure_detail = NULL, queued_reason = $1,
             queued_at = $2, not_before = $3, updated_at = $4
         WHERE id = $5",
    )
    .bind(&reason_text)
    .bind(now)
    .bind(now + cooldown_ms)
    .bind(now)
    .bind(job_id)
    .execute(conn)
    .await.map(|_| ())
    })?;
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
    Ok(())
}

/// Queues a job again after its attempt was preempted for `for_job`: it
/// keeps its place in the queue (its submit time) and gets one more
/// attempt, so preemption never spends the job's `max_attempts`.
pub async fn requeue_preempted(
    conn: &mut Tx,
    job_id: &str,
    for_job: &str,
    node_name: &str,
    now: i64,
) -> Result<(), Error> {
    let resume = super::resume::prepare(conn, job_id).await?;
    let reason = format!(
        "PREEMPTED on {node_name} for {for_job}; queued again (no attempt spent){}",
        resume.describe()
    );
    sql!(conn, |conn| {
        sqlx::query(
            "UPDATE jobs SET status = 'QUEUED', max_attempts = max_attempts + 1, queued_reason = $1,
             not_before = NULL, updated_at = $2
         WHERE id = $3",
        )
        .bind(&reason)
        .bind(now)
        .bind(job_id)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// Marks an active attempt LOST (its node went away), with a JOB_LOST event,
/// and requeues the job when attempts remain.
pub async fn lose_attempt(
    conn: &mut Tx,
    job_id: &str,
    attempt: i64,
    node_id: &str,
    detail: &str,
    now: i64,
) -> Result<(), Error> {
    let end = AttemptEnd::without_exit(JobStatus::Lost, Some(FailureReason::JobLost), detail, now);
    end_attempt(conn, job_id, attempt, end).await?;
    let links = JobLinks::of(conn, job_id, node_id).await?;
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
    let (cancel_requested, preempted_by): (Option<i64>, Option<String>) = sql!(conn, |conn| {
        sqlx::query_as(
            "SELECT cancel_requested_at, (SELECT preempted_by FROM attempts WHERE job_id = $1 AND n = $2)
         FROM jobs WHERE id = $1",
        )
        .bind(job_id)
        .bind(attempt)
        .fetch_one(conn)
        .await
    })?;
    if let Some(for_job) = preempted_by.filter(|_| cancel_requested.is_none()) {
        // It was being stopped anyway: preempted, not a failure of the job.
        let node_name: String = sql!(conn, |conn| {
            sqlx::query_scalar("SELECT name FROM nodes WHERE id = $1")
                .bind(node_id)
                .fetch_one(conn)
                .await
        })?;
        requeue_preempted(conn, job_id, &for_job, &node_name, now).await?;
    } else if cancel_requested.is_some() {
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
        fail_or_retry(conn, job_id, FailureReason::JobLost, detail, now).await?;
    }
    Ok(())
}

/// Ends the active attempt of a job and the job itself (used by cancel while offline).
pub async fn cancel_offline(conn: &mut Tx, job_id: &str, now: i64) -> Result<(), Error> {
    end_cancelled(conn, job_id, "cancelled while its node was offline", now).await
}

/// Ends a job cancelled while DISPATCHING whose agent has not started it
/// (its poll does not list the attempt, so a dispatch was never received:
/// lost with a poll answer when the server crashed): there is nothing to
/// stop, and a cancel sent instead of the dispatch would wait forever. If
/// the agent did run it after all, its late report only puts the real exit
/// on record. Nothing happens if the attempt is no longer DISPATCHING.
pub async fn cancel_before_start(conn: &mut Tx, job_id: &str, attempt: i64, now: i64) -> Result<(), Error> {
    let dispatching: bool = sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM attempts WHERE job_id = $1 AND n = $2 AND status = 'DISPATCHING')",
        )
        .bind(job_id)
        .bind(attempt)
        .fetch_one(conn)
        .await
    })?;
    if dispatching {
        end_cancelled(conn, job_id, "cancelled before its agent started it", now).await?;
    }
    Ok(())
}

/// Ends the job's active attempt (if any) and the job as CANCELLED.
async fn end_cancelled(conn: &mut Tx, job_id: &str, detail: &str, now: i64) -> Result<(), Error> {
    let attempt: Option<i64> = sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT n FROM attempts WHERE job_id = $1 AND status IN ('DISPATCHING', 'RUNNING')",
        )
        .bind(job_id)
        .fetch_optional(conn)
        .await
    })?;
    if let Some(attempt) = attempt {
        let end = AttemptEnd::without_exit(JobStatus::Cancelled, None, detail, now);
        end_attempt(conn, job_id, attempt, end).await?;
    }
    finish_job(conn, job_id, JobStatus::Cancelled, None, Some(detail), now).await?;
    Ok(())
}

/// The job, run and node an event about an attempt links to.
pub struct JobLinks {
    job_id: String,
    run_id: Option<String>,
    node_id: String,
}

impl JobLinks {
    pub async fn of(conn: &mut Tx, job_id: &str, node_id: &str) -> Result<JobLinks, Error> {
        let run_id: Option<String> = sql!(conn, |conn| {
            sqlx::query_scalar("SELECT run_id FROM jobs WHERE id = $1")
                .bind(job_id)
                .fetch_optional(conn)
                .await
        })?;
        Ok(JobLinks {
            job_id: job_id.to_string(),
            run_id,
            node_id: node_id.to_string(),
        })
    }

    pub fn as_links(&self) -> Links<'_> {
        Links {
            job_id: Some(&self.job_id),
            run_id: self.run_id.as_deref(),
            node_id: Some(&self.node_id),
        }
    }
}
