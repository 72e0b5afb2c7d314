//! Idle GPUs (GPU_IDLE): a running job whose every GPU stayed under
//! `gpu_idle_threshold_percent` for `gpu_idle_after_s` holds GPUs it does
//! not use. The leader looks at every running attempt's GPUs in the agents'
//! telemetry (each member's, on its own node) over that span; one whose
//! peak stayed under the threshold is reported once per attempt, with the
//! figures. A job whose processes are gone or wait on input reads idle too:
//! its GPUs read 0 %, and unlike an exporter the server knows they are held.
//! With its project's `idle_action = "stop"` the job is also cancelled with
//! reason IDLE, which frees its GPUs for the queue.
//!
//! A span is judged only when telemetry covers it: samples from its first
//! and its last half, so an agent that stopped sending is never read as idle.

use crate::events::{self, Links};
use crate::jobs::cancel::{self, Cancelled};
use crate::jobs::members::{self, Placed};
use crate::nodes::telemetry;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use crate::wake::{Wake, Wakes};
use gpuplane_api::duration::format_seconds;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::job::FailureReason;
use gpuplane_api::project::IdleAction;
use gpuplane_api::telemetry::gpu_key;
use std::time::Duration;
use tokio::sync::watch;

/// When a job's GPUs count as idle.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Every GPU's peak under this, percent.
    pub threshold_percent: f64,
    /// Over this long, ms.
    pub after_ms: i64,
}

/// Watches running attempts until shutdown; `gpu_idle_after_s = 0` turns it off.
pub async fn monitor(db: Db, rule: Rule, wakes: Wakes, mut shutdown: watch::Receiver<bool>) {
    if rule.after_ms <= 0 {
        return;
    }
    // A tenth of the span, within 0.5 s and a minute.
    let period = Duration::from_millis((rule.after_ms / 10).clamp(500, 60_000) as u64);
    loop {
        if let Err(error) = check(&db, rule, &wakes).await {
            tracing::warn!(%error, "idle GPU check failed; will try again");
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// A running attempt old enough to judge.
#[derive(sqlx::FromRow)]
struct Running {
    job_id: String,
    n: i64,
    node_id: String,
    run_id: String,
    gpus: String,
    started_at: Option<i64>,
    idle_action: String,
}

/// One look at every running attempt that has run for the whole span.
pub async fn check(db: &Db, rule: Rule, wakes: &Wakes) -> Result<(), Error> {
    let now = now_ms();
    let running: Vec<Running> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT a.job_id, a.n, a.node_id, j.run_id, a.gpus, a.started_at, p.idle_action
             FROM attempts a JOIN jobs j ON j.id = a.job_id JOIN projects p ON p.name = j.project
             WHERE a.status = 'RUNNING' AND a.idle_at IS NULL AND a.started_at <= $1",
        )
        .bind(now - rule.after_ms)
        .fetch_all(pool)
        .await
    })?;
    for attempt in running {
        let mut tx = crate::store::read(db).await?;
        let mut placed = members::placed(&mut tx, &attempt.job_id, attempt.n).await?;
        drop(tx);
        if placed.is_empty() {
            placed.push(Placed {
                rank: 0,
                node_id: attempt.node_id.clone(),
                node: node_name(db, &attempt.node_id).await?,
                gpus: attempt.gpus.clone(),
                started_at: attempt.started_at,
            });
        }
        if let Some(figures) = idle_figures(db, &placed, rule, now).await? {
            report(db, &attempt, &placed, &figures, rule, now, wakes).await?;
        }
    }
    Ok(())
}

async fn node_name(db: &Db, node_id: &str) -> Result<String, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_scalar("SELECT name FROM nodes WHERE id = $1")
            .bind(node_id)
            .fetch_one(pool)
            .await
    })?)
}

/// `GPU 0 on box peaked at 2 % (mean 0.4 %)` for each GPU of every member
/// when all stayed under the threshold over the span; `None` when one was
/// busy, when the attempt holds no GPU, or when telemetry does not cover
/// the span.
async fn idle_figures(
    db: &Db,
    placed: &[Placed],
    rule: Rule,
    now: i64,
) -> Result<Option<Vec<String>>, Error> {
    let from = (now - rule.after_ms) as f64 / 1000.0;
    let to = now as f64 / 1000.0;
    let half = (to - from) / 2.0;
    let mut figures = Vec::new();
    for member in placed {
        let gpus: Vec<u32> = serde_json::from_str(&member.gpus).unwrap_or_default();
        for gpu in gpus {
            let key = gpu_key(gpu, "utilization_percent");
            let Some(spread) = telemetry::spread(db, &member.node_id, &key, from, to).await? else {
                return Ok(None);
            };
            let covered = spread.first <= from + half && spread.last >= to - half;
            if !covered || spread.max >= rule.threshold_percent {
                return Ok(None);
            }
            figures.push(format!(
                "GPU {gpu} on {} peaked at {:.0} % (mean {:.1} %)",
                member.node, spread.max, spread.mean
            ));
        }
    }
    Ok((!figures.is_empty()).then_some(figures))
}

/// Marks the attempt reported and raises GPU_IDLE; with `idle_action =
/// "stop"`, cancels the job with reason IDLE.
async fn report(
    db: &Db,
    attempt: &Running,
    placed: &[Placed],
    figures: &[String],
    rule: Rule,
    now: i64,
    wakes: &Wakes,
) -> Result<(), Error> {
    let stop = attempt.idle_action == IdleAction::Stop.as_str();
    let span = format_seconds(rule.after_ms / 1000);
    let idle = format!(
        "{} over the last {span}, under gpu_idle_threshold_percent ({} %)",
        figures.join(", "),
        rule.threshold_percent
    );
    let then = match stop {
        true => "its project's idle_action is stop: stopping it to free its GPUs (reason IDLE)",
        false => "its project's idle_action is warn: it keeps running",
    };
    let message = format!("attempt {} holds idle GPUs: {idle}; {then}", attempt.n);
    let mut tx = crate::store::write(db).await?;
    let marked = sql!(tx, |conn| {
        sqlx::query(
            "UPDATE attempts SET idle_at = $1 WHERE job_id = $2 AND n = $3 AND status = 'RUNNING' AND idle_at IS NULL",
        )
        .bind(now)
        .bind(&attempt.job_id)
        .bind(attempt.n)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    if marked == 0 {
        return Ok(());
    }
    let links = Links {
        job_id: Some(&attempt.job_id),
        run_id: Some(&attempt.run_id),
        node_id: placed.first().map(|member| member.node_id.as_str()),
    };
    events::record(
        &mut tx,
        now,
        Severity::Warning,
        EventKind::GpuIdle,
        links,
        &message,
    )
    .await?;
    tx.commit().await?;
    tracing::warn!(job_id = attempt.job_id, attempt = attempt.n, "{message}");
    wakes.wake(Wake::Events);
    if stop {
        let detail = format!("its GPUs sat idle: {idle}");
        match cancel::cancel_for(db, &attempt.job_id, Some((FailureReason::Idle, &detail))).await {
            Ok(Cancelled::Stopping { node_ids }) => {
                for node_id in node_ids {
                    wakes.wake(Wake::Agent(node_id));
                }
            }
            Ok(Cancelled::Now) => wakes.jobs_changed(),
            // It ended meanwhile.
            Err(Error::Conflict(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
