//! Reports about one member of a multi-node attempt. Its start, output and
//! end are its own (`jobs::members`, its lines kept under its rank); the
//! attempt starts with rank 0 (whose agent also reports the rendezvous
//! port it chose), and ends with the first member that fails, is
//! cancelled or is lost — that member's exit says why — or with the last
//! of them to succeed. Whatever changes, the caller wakes every member's
//! agent: the others start, or stop.

use super::{AttemptExit, Reporter, dispatch_failed, exited, started};
use crate::jobs::members::{self, MemberEnd};
use crate::store::Error;
use crate::store::Tx;
use crate::store::time::now_ms;
use gpuplane_api::agent::ReportItem;
use gpuplane_api::job::JobStatus;

/// Applies one item from the node of member `rank` (whose state is
/// `member`) of an attempt whose status is `attempt_status`.
pub(super) async fn apply_item(
    conn: &mut Tx,
    node: &Reporter<'_>,
    item: &ReportItem,
    attempt_status: JobStatus,
    (rank, member): (i64, JobStatus),
) -> Result<bool, Error> {
    let (job_id, attempt) = item.attempt();
    match item {
        ReportItem::Started {
            pid,
            time,
            git_commit,
            master_port,
            ..
        } => {
            let changed = members::started(conn, job_id, attempt, rank, *time).await?;
            if rank != 0 {
                return Ok(changed);
            }
            if let Some(port) = master_port {
                members::set_master_port(conn, job_id, attempt, *port).await?;
            }
            let attempt_started =
                started(conn, node, job_id, attempt, *pid, *time, git_commit.as_deref()).await?;
            Ok(changed || attempt_started)
        }
        // Multi-node jobs do not run through an engine that queues them.
        ReportItem::Waiting { .. } => Ok(false),
        ReportItem::DispatchFailed { detail, .. } => {
            let end = MemberEnd {
                status: JobStatus::Failed,
                exit_code: None,
                signal: None,
                at: now_ms(),
            };
            if !members::end(conn, job_id, attempt, rank, end).await? {
                return Ok(false);
            }
            if attempt_status.is_active() {
                dispatch_failed(conn, node, job_id, attempt, &format!("rank {rank}: {detail}")).await?;
            }
            Ok(true)
        }
        ReportItem::Exited {
            lost: Some(detail),
            time,
            ..
        } => {
            if !member.is_active() {
                return Ok(false);
            }
            let detail = format!("{detail} (on {})", node.node_name);
            members::lose(conn, job_id, attempt, rank, node.node_id, &detail, (*time).max(0)).await?;
            Ok(true)
        }
        ReportItem::Exited { .. } => {
            let Some(exit) = AttemptExit::of(item, Some(rank)) else {
                return Ok(false);
            };
            let status = if exit.cancelled {
                JobStatus::Cancelled
            } else if exit.exit_code == Some(0)
                && exit.signal.is_none()
                && !exit.oom_killed
                && !exit.timed_out
            {
                JobStatus::Succeeded
            } else {
                JobStatus::Failed
            };
            let end = MemberEnd {
                status,
                exit_code: exit.exit_code,
                signal: exit.signal,
                at: exit.time.max(0),
            };
            if !members::end(conn, job_id, attempt, rank, end).await? {
                return Ok(false);
            }
            let others_go_on =
                status == JobStatus::Succeeded && !members::all_succeeded(conn, job_id, attempt).await?;
            if !attempt_status.is_active() || others_go_on {
                return Ok(true);
            }
            exited(conn, node, job_id, attempt, attempt_status, exit).await
        }
        // Output (kept under its rank), points, checkpoints, notices.
        other => super::apply_item(conn, node, other, attempt_status, rank).await,
    }
}
