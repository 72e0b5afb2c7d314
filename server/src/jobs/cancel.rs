//! Cancelling a job: at once while it waits, else by asking the agents of
//! its attempt to stop it (it turns CANCELLED when its processes end).
//! A cancel for a reason of its own (a sweep's early stop) ends the job
//! with that failure reason and detail instead of a plain cancel's.

use crate::jobs::lifecycle;
use crate::jobs::store::current_status;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use gpuplane_api::job::{FailureReason, JobStatus};

/// What a cancel request did.
pub enum Cancelled {
    /// It had not started (or its node is gone): CANCELLED now.
    Now,
    /// Its agents (one per member of a multi-node job) were asked to stop
    /// it; it turns CANCELLED when the process ends.
    Stopping { node_ids: Vec<String> },
}

/// Cancels a job that has not ended; 409 for one that has.
pub async fn cancel(db: &Db, job_id: &str) -> Result<Cancelled, Error> {
    cancel_for(db, job_id, None).await
}

/// Cancels a job as [`cancel`] does; with `reason`, it ends with that
/// failure reason and detail instead of a plain cancel's.
pub async fn cancel_for(
    db: &Db,
    job_id: &str,
    reason: Option<(FailureReason, &str)>,
) -> Result<Cancelled, Error> {
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    let status = current_status(&mut tx, job_id).await?;
    if let Some((reason, detail)) = reason
        && !status.is_terminal()
    {
        sql!(tx, |conn| {
            sqlx::query("UPDATE jobs SET cancel_reason = $1, cancel_detail = $2 WHERE id = $3")
                .bind(reason.as_str())
                .bind(detail)
                .bind(job_id)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
    }
    let outcome = match status {
        JobStatus::Queued => {
            lifecycle::finish_job(
                &mut tx,
                job_id,
                JobStatus::Cancelled,
                None,
                Some("cancelled before it started"),
                now,
            )
            .await?;
            Cancelled::Now
        }
        JobStatus::Dispatching | JobStatus::Running => {
            let (node_id, node_status, attempt): (String, String, i64) = sql!(tx, |conn| {
                sqlx::query_as(
                    "SELECT a.node_id, n.status, a.n FROM attempts a JOIN nodes n ON n.id = a.node_id
                 WHERE a.job_id = $1 AND a.status IN ('DISPATCHING', 'RUNNING')",
                )
                .bind(job_id)
                .fetch_one(conn)
                .await
            })?;
            sql!(tx, |conn| {
                sqlx::query("UPDATE jobs SET cancel_requested_at = $1, updated_at = $2 WHERE id = $3")
                    .bind(now)
                    .bind(now)
                    .bind(job_id)
                    .execute(conn)
                    .await
                    .map(|_| ())
            })?;
            if node_status == "ONLINE" {
                let mut node_ids = crate::jobs::members::node_ids(&mut tx, job_id, attempt).await?;
                if node_ids.is_empty() {
                    node_ids.push(node_id);
                }
                Cancelled::Stopping { node_ids }
            } else {
                // Nobody can stop it now; the agent stops it if it comes back.
                lifecycle::cancel_offline(&mut tx, job_id, now).await?;
                Cancelled::Now
            }
        }
        ended => {
            return Err(Error::Conflict(format!(
                "job {job_id} has already ended ({ended})"
            )));
        }
    };
    tx.commit().await?;
    Ok(outcome)
}
