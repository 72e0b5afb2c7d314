//! The liveness monitor: nodes whose heartbeats stop turn OFFLINE, and
//! their jobs' attempts LOST after a grace period (requeued when attempts
//! remain). It reads the nodes' times and ends attempts through the
//! lifecycle, so it lives with the jobs.

use super::{lifecycle, members};
use crate::config::ServerConfig;
use crate::events::{self, Links};
use crate::nodes::heartbeats::Heartbeats;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Error};
use crate::wake::{Wake, Wakes};
use gpuplane_api::event::{EventKind, Severity};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Turns nodes OFFLINE once their last heartbeat is older than the timeout
/// (AGENT_DISCONNECTED), and their active attempts LOST once the node has
/// also missed the grace period (JOB_LOST; requeued when attempts remain).
/// Sleeps until the next such deadline; a node that says hello or comes
/// back wakes it early (an ordinary heartbeat only moves a deadline later).
pub async fn monitor(
    db: Db,
    config: Arc<ServerConfig>,
    heartbeats: Arc<Heartbeats>,
    wakes: Wakes,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let next_check = match check(&db, &config, &heartbeats, &wakes).await {
            Ok(Some(deadline)) => Duration::from_millis((deadline - now_ms()).max(1) as u64),
            Ok(None) => Duration::from_secs(3600),
            Err(error) => {
                tracing::warn!(%error, "liveness check failed; retrying");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(next_check) => {}
            _ = wakes.nodes().notified() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// One liveness check; returns the next deadline, if any.
async fn check(
    db: &Db,
    config: &ServerConfig,
    heartbeats: &Heartbeats,
    wakes: &Wakes,
) -> Result<Option<i64>, Error> {
    let timeout_ms = config.node_timeout.as_millis() as i64;
    let grace_ms = config.lost_grace.as_millis() as i64;
    // Heartbeats waiting to be written count: no node is judged on a stale time.
    heartbeats.flush().await?;
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    let expired: Vec<(String, String)> = sql!(tx, |conn| {
        sqlx::query_as(
        "UPDATE nodes SET status = 'OFFLINE' WHERE status = 'ONLINE' AND last_seen_at <= $1 RETURNING id, name",
    )
    .bind(now - timeout_ms)
    .fetch_all(conn)
    .await
    })?;
    for (node_id, name) in &expired {
        let active: i64 = sql!(tx, |conn| {
            sqlx::query_scalar(
                "SELECT (SELECT count(*) FROM attempts
                         WHERE node_id = $1 AND status IN ('DISPATCHING', 'RUNNING') AND nodes = 1)
                      + (SELECT count(*) FROM attempt_members WHERE node_id = $1 AND status IN ('DISPATCHING', 'RUNNING'))",
            )
            .bind(node_id)
            .fetch_one(conn)
            .await
        })?;
        let message = format!(
            "node {name} missed its heartbeats for {}s; {active} active job(s) turn LOST in {}s unless it reconnects",
            timeout_ms / 1000,
            grace_ms / 1000
        );
        let links = Links {
            node_id: Some(node_id),
            ..Links::default()
        };
        events::record(
            &mut tx,
            now,
            Severity::Warning,
            EventKind::AgentDisconnected,
            links,
            &message,
        )
        .await?;
    }
    let lost: Vec<(String, i64, Option<i64>, String, String, i64)> = sql!(tx, |conn| {
        sqlx::query_as(
        "SELECT a.job_id, a.n, CAST(NULL AS BIGINT), n.id, n.name, n.last_seen_at
         FROM attempts a JOIN nodes n ON n.id = a.node_id
         WHERE a.status IN ('DISPATCHING', 'RUNNING') AND a.nodes = 1 AND n.status = 'OFFLINE' AND n.last_seen_at <= $1
         UNION ALL
         SELECT m.job_id, m.attempt, m.node_rank, n.id, n.name, n.last_seen_at
         FROM attempt_members m JOIN nodes n ON n.id = m.node_id
         WHERE m.status IN ('DISPATCHING', 'RUNNING') AND n.status = 'OFFLINE' AND n.last_seen_at <= $1",
    )
    .bind(now - timeout_ms - grace_ms)
    .fetch_all(conn)
    .await
    })?;
    // The other members of a multi-node attempt lost with one of them stop:
    // their agents are woken to hear it.
    let mut wake_agents = Vec::new();
    for (job_id, attempt, rank, node_id, name, last_seen) in &lost {
        let detail = format!("node {name} has not answered since {}", rfc3339(*last_seen));
        match rank {
            // One member of a multi-node attempt: the attempt is lost with it.
            Some(rank) => {
                members::lose(&mut tx, job_id, *attempt, *rank, node_id, &detail, now).await?;
                wake_agents.extend(members::node_ids(&mut tx, job_id, *attempt).await?);
            }
            None => lifecycle::lose_attempt(&mut tx, job_id, *attempt, node_id, &detail, now).await?,
        }
    }
    let next_offline: Option<i64> = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT min(last_seen_at) FROM nodes WHERE status = 'ONLINE'")
            .fetch_one(conn)
            .await
    })?;
    let next_lost: Option<i64> = sql!(tx, |conn| {
        sqlx::query_scalar(
            "SELECT min(n.last_seen_at) FROM nodes n WHERE n.status = 'OFFLINE'
             AND (EXISTS (SELECT 1 FROM attempts a WHERE a.node_id = n.id AND a.status IN ('DISPATCHING', 'RUNNING'))
                  OR EXISTS (SELECT 1 FROM attempt_members m
                             WHERE m.node_id = n.id AND m.status IN ('DISPATCHING', 'RUNNING')))",
        )
        .fetch_one(conn)
        .await
    })?;
    tx.commit().await?;
    if !expired.is_empty() || !lost.is_empty() {
        // Events were recorded; lost jobs may be queued again.
        wakes.jobs_changed();
    }
    for node_id in wake_agents {
        wakes.wake(Wake::Agent(node_id));
    }
    for (node_id, name) in expired {
        tracing::warn!(node_id, name, "node missed its heartbeats and is now OFFLINE");
    }
    let deadlines = [
        next_offline.map(|t| t + timeout_ms),
        next_lost.map(|t| t + timeout_ms + grace_ms),
    ];
    Ok(deadlines.into_iter().flatten().min())
}
