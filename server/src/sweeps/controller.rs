//! The sweep controller, run by the leading server only: every second, for
//! each open sweep, it
//!
//! 1. reads each trial's newest value of the metric and, for an open
//!    trial (running, or queued again after a preemption: what its last
//!    attempt logged still counts) that passed its next rung, its points
//!    from that rung on, in step order, for the pruner to judge (a report
//!    before a rung is judged "go on" without being read; a stopped trial's
//!    job is cancelled with reason `SWEEP_PRUNED`, so its GPUs go to the
//!    next);
//! 2. ends the sweep when a trial reached the metric's `target`, when
//!    `max_failures` trials failed, or when every trial of its budget ended;
//! 3. while it runs, proposes new trials: up to `max_concurrent` open at
//!    once, or else one waiting in the queue at a time, so trials start as
//!    GPUs free up and TPE learns from each before proposing the next.
//!
//! What it decides is stored before it acts on it: a trial row before its
//! job exists (one transaction), a stop before its cancel. A server that
//! restarts goes on from the database, proposing and judging as this one
//! would have (`sampler` draws from the sweep's seed and trial number).

use super::pruner::{self, TrialRungs};
use super::sampler::{self, Observed, Outcome};
use super::store::{self, SweepRow, TrialRow};
use super::trials;
use crate::jobs::Handles;
use crate::jobs::cancel::{self, Cancelled};
use crate::metrics::{Axis, Query};
use crate::store::sql;
use crate::store::{Db, Error};
use crate::wake::Wake;
use gpuplane_api::job::FailureReason;
use gpuplane_api::metric::Goal;
use gpuplane_api::sweep::{Checked, MetricGoal, SweepSpec, SweepState};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;

/// How often the controller looks at the open sweeps.
pub const PERIOD: Duration = Duration::from_secs(1);
/// The most trials one sweep gets in one look.
const MAX_NEW_PER_LOOK: u32 = 64;
/// The most new points of one trial read in one look.
const MAX_POINTS_PER_LOOK: usize = 100_000;

/// What one look did, summed over the sweeps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Looked {
    /// Metric points the pruner judged (at or past a trial's next rung).
    pub judged: usize,
    /// Trials stopped early.
    pub pruned: usize,
    /// Trials made.
    pub proposed: usize,
}

/// Looks at the open sweeps every [`PERIOD`] until `shutdown`.
pub async fn run(server: Handles, mut shutdown: watch::Receiver<bool>) {
    loop {
        if let Err(error) = look(&server).await {
            tracing::warn!(%error, "sweep controller failed; will try again");
        }
        tokio::select! {
            () = tokio::time::sleep(PERIOD) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// How long after a sweep ended its trials' last points still count (an
/// agent may send a trial's final points after its exit).
const SETTLE_MS: i64 = 60_000;

/// One look at every open sweep, and at those that ended in the last minute.
pub async fn look(server: &Handles) -> Result<Looked, Error> {
    let since = crate::store::time::now_ms() - SETTLE_MS;
    let open: Vec<String> = sql!(&server.db, |pool| {
        sqlx::query_scalar(
            "SELECT id FROM sweeps WHERE state IN ('RUNNING', 'PAUSED') OR ended_at > $1 ORDER BY seq",
        )
        .bind(since)
        .fetch_all(pool)
        .await
    })?;
    let mut looked = Looked::default();
    for id in open {
        match look_at(server, &id).await {
            Ok(one) => {
                looked.judged += one.judged;
                looked.pruned += one.pruned;
                looked.proposed += one.proposed;
            }
            Err(error) => tracing::warn!(sweep = id, %error, "sweep look failed; will try again"),
        }
    }
    Ok(looked)
}

async fn look_at(server: &Handles, id: &str) -> Result<Looked, Error> {
    let mut looked = Looked::default();
    let Some(row) = store::row(&server.db, id).await? else {
        return Ok(looked);
    };
    let spec: SweepSpec = serde_json::from_str(&row.spec).map_err(anyhow::Error::from)?;
    let Ok(checked) = spec.check(row.seed as u64) else {
        let reason = "its file no longer passes the server's checks";
        store::set_state(&server.db, id, SweepState::Failed, Some(reason)).await?;
        return Ok(looked);
    };
    let state: SweepState = row.state.parse().map_err(anyhow::Error::msg)?;
    let mut trials = store::trials(&server.db, id).await?;
    if let Some(metric) = &checked.metric {
        // An ended sweep's trials' last points still count; none is stopped.
        let judge = !state.is_terminal();
        judge_new_points(server, &row, &checked, metric, judge, &mut trials, &mut looked).await?;
    }
    if state.is_terminal() {
        return Ok(looked);
    }
    stop_pruned(server, &trials).await?;
    if let Some((to, reason)) = ending(&checked, &trials) {
        store::set_state(&server.db, id, to, Some(&reason)).await?;
        tracing::info!(sweep = id, %reason, "sweep ended");
        return Ok(looked);
    }
    if state == SweepState::Running {
        looked.proposed = propose(server, &row, &checked, &trials).await?;
    }
    Ok(looked)
}

/// Reads each trial's new points of the metric and, when `judge`, lets
/// the pruner judge those of open trials.
async fn judge_new_points(
    server: &Handles,
    row: &SweepRow,
    checked: &Checked,
    metric: &MetricGoal,
    judge: bool,
    trials: &mut [TrialRow],
    looked: &mut Looked,
) -> Result<(), Error> {
    let latest = latest_steps(&server.db, &metric.name, trials).await?;
    let mut rungs: Vec<TrialRungs> = trials
        .iter()
        .map(|t| TrialRungs {
            number: t.number as u64,
            rungs: t.rungs(),
        })
        .collect();
    let longest_finished = trials
        .iter()
        .filter(|t| t.status == "SUCCEEDED")
        .filter_map(|t| t.last_step)
        .max()
        .map(|s| s.max(0) as u64);
    let mut auto_min_step = row.auto_min_step.map(|s| s.max(0) as u64);
    let mut fixed_min_step = None;
    let mut changed = Vec::new();
    for i in 0..trials.len() {
        let trial = &trials[i];
        let Some(&(newest, newest_value)) = latest.get(&trial.run_id) else {
            continue;
        };
        if trial.last_step.is_some_and(|s| s >= newest) {
            continue;
        }
        let judging = checked.early_stop.filter(|_| {
            judge && trial.open() && trial.cancel_requested_at.is_none() && trial.pruned_step.is_none()
        });
        // Reports before the trial's next rung are judged "go on" without
        // being read: only those from the rung on are.
        // The sweep as the pruner sees it, with the first rung known so far.
        let sweep = |auto_min_step| pruner::Sweep {
            key: &row.id,
            goal: metric.goal,
            trials: &rungs,
            auto_min_step,
            longest_finished,
        };
        let mut read_from = None;
        if let Some(stop) = judging.as_ref() {
            let next = pruner::next_rung(stop, &sweep(auto_min_step), &rungs[i]);
            if let Some(fixed) = next.fixed_min_step {
                auto_min_step = Some(fixed);
                fixed_min_step = Some(fixed);
            }
            let from = trial.last_step.map_or(i64::MIN, |s| s + 1);
            read_from = next
                .step
                .and_then(|step| i64::try_from(step).ok())
                .filter(|&step| step <= newest)
                .map(|step| step.max(from));
        }
        let points = match read_from {
            Some(from) => new_points(&server.db, &trial.run_id, &metric.name, from, newest).await?,
            None => Vec::new(),
        };
        let mut mine = rungs[i].clone();
        let mut judged_up_to = trial.last_step;
        let mut pruned = None;
        for (step, point) in points {
            if judged_up_to.is_some_and(|s| step <= s) {
                continue; // A repeated step keeps its first value, as Optuna's report does.
            }
            judged_up_to = Some(step);
            let Some(stop) = judging.as_ref() else {
                continue;
            };
            let verdict = pruner::judge(stop, &sweep(auto_min_step), &mut mine, step.max(0) as u64, point);
            looked.judged += 1;
            if let Some(fixed) = verdict.fixed_min_step {
                auto_min_step = Some(fixed);
                fixed_min_step = Some(fixed);
            }
            if verdict.prune {
                pruned = Some((step, point));
                break;
            }
        }
        // A stopped trial keeps the step and value it was stopped at; any
        // other, the metric's newest.
        let (last_step, value) = pruned.unwrap_or((newest, newest_value));
        rungs[i] = mine;
        let trial = &mut trials[i];
        trial.rungs = serde_json::to_string(&rungs[i].rungs).map_err(anyhow::Error::from)?;
        (trial.last_step, trial.value) = (Some(last_step), Some(value));
        trial.pruned_step = pruned.map(|(step, _)| step).or(trial.pruned_step);
        changed.push(i);
        if pruned.is_some() {
            looked.pruned += 1;
        }
    }
    save(&server.db, &row.id, trials, &changed, fixed_min_step).await
}

/// The newest step of the metric in each trial's run that has it, with
/// its value.
async fn latest_steps(db: &Db, key: &str, trials: &[TrialRow]) -> Result<HashMap<String, (i64, f64)>, Error> {
    if trials.is_empty() {
        return Ok(HashMap::new());
    }
    let run_ids: Vec<&str> = trials.iter().map(|t| t.run_id.as_str()).collect();
    let run_ids = serde_json::to_string(&run_ids).map_err(anyhow::Error::from)?;
    let listed = db.dialect().json_values("$2");
    let rows: Vec<(String, i64, i64)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT run_id, latest_step, latest_bits FROM metric_series
             WHERE key = $1 AND run_id IN (SELECT value FROM {listed})"
        ))
        .bind(key)
        .bind(run_ids)
        .fetch_all(pool)
        .await
    })?;
    Ok(rows
        .into_iter()
        .map(|(run_id, step, bits)| (run_id, (step, f64::from_bits(bits as u64))))
        .collect())
}

/// A run's points of `key` from step `from` to `to`, in step order.
async fn new_points(db: &Db, run_id: &str, key: &str, from: i64, to: i64) -> Result<Vec<(i64, f64)>, Error> {
    let query = Query {
        key: key.to_string(),
        max_points: MAX_POINTS_PER_LOOK,
        axis: Axis::Step,
        from: Some(from as f64),
        to: Some(to as f64),
    };
    let series = crate::metrics::query(db, run_id, &query).await?;
    let mut points: Vec<(i64, f64)> = series
        .points
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.step, p.value.0))
        .collect();
    // Stable: points logged at one step stay in the order they came.
    points.sort_by_key(|(step, _)| *step);
    Ok(points)
}

/// Stores what one look learnt of the `changed` trials, and ASHA's first
/// rung once fixed, in one short write (the points were read before it).
async fn save(
    db: &Db,
    sweep_id: &str,
    trials: &[TrialRow],
    changed: &[usize],
    fixed_min_step: Option<u64>,
) -> Result<(), Error> {
    if changed.is_empty() && fixed_min_step.is_none() {
        return Ok(());
    }
    let mut tx = crate::store::write(db).await?;
    for trial in changed.iter().map(|&i| &trials[i]) {
        sql!(tx, |conn| {
            sqlx::query(
                "UPDATE sweep_trials SET rungs = $1, last_step = $2, value = $3, pruned_step = $4
                 WHERE sweep_id = $5 AND number = $6",
            )
            .bind(&trial.rungs)
            .bind(trial.last_step)
            .bind(trial.value.filter(|v| !v.is_nan()))
            .bind(trial.pruned_step)
            .bind(sweep_id)
            .bind(trial.number)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
    }
    if let Some(min_step) = fixed_min_step {
        sql!(tx, |conn| {
            sqlx::query("UPDATE sweeps SET auto_min_step = $1 WHERE id = $2 AND auto_min_step IS NULL")
                .bind(min_step as i64)
                .bind(sweep_id)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
    }
    tx.commit().await?;
    Ok(())
}

/// Cancels the jobs of trials stopped early that have not ended yet (again
/// after a restart, if the first cancel was lost).
async fn stop_pruned(server: &Handles, trials: &[TrialRow]) -> Result<(), Error> {
    for trial in trials
        .iter()
        .filter(|t| t.open() && t.cancel_requested_at.is_none())
    {
        let Some(step) = trial.pruned_step else {
            continue;
        };
        let rung = trial.rungs().len().saturating_sub(1);
        let detail = format!(
            "stopped early at step {step}: its metric ({}) was not among the best at rung {rung}",
            trial.value.map_or("NaN".to_string(), |v| v.to_string()),
        );
        let reason = Some((FailureReason::SweepPruned, detail.as_str()));
        match cancel::cancel_for(&server.db, &trial.job_id, reason).await {
            Ok(Cancelled::Now) => {}
            Ok(Cancelled::Stopping { node_ids }) => {
                for node_id in node_ids {
                    server.wakes.wake(Wake::Agent(node_id));
                }
            }
            Err(Error::Conflict(_)) => {} // It ended meanwhile.
            Err(error) => return Err(error),
        }
        tracing::info!(job_id = trial.job_id, step, "sweep trial stopped early");
        server.wakes.wake(Wake::Scheduler);
    }
    Ok(())
}

/// Whether the sweep ends now, as what and why.
fn ending(checked: &Checked, trials: &[TrialRow]) -> Option<(SweepState, String)> {
    if let Some(metric) = &checked.metric
        && let Some(target) = metric.target
    {
        let reached = |v: f64| match metric.goal {
            Goal::Min => v <= target,
            Goal::Max => v >= target,
        };
        if let Some(trial) = trials.iter().find(|t| t.value.is_some_and(reached)) {
            return Some((
                SweepState::Finished,
                format!(
                    "trial {} reached the target {target} of {}",
                    trial.number, metric.name
                ),
            ));
        }
    }
    let failed = trials
        .iter()
        .filter(|t| matches!(t.status.as_str(), "FAILED" | "LOST"))
        .count();
    if let Some(max) = checked.max_failures
        && failed >= max as usize
    {
        return Some((
            SweepState::Failed,
            format!("{failed} trials failed (max_failures {max})"),
        ));
    }
    let open = trials.iter().filter(|t| t.open()).count();
    if trials.len() >= checked.max_trials as usize && open == 0 {
        return Some((SweepState::Finished, format!("all {} trials ended", trials.len())));
    }
    None
}

/// Makes the trials the sweep may have open now; returns how many.
async fn propose(
    server: &Handles,
    row: &SweepRow,
    checked: &Checked,
    trials: &[TrialRow],
) -> Result<usize, Error> {
    let open = trials.iter().filter(|t| t.open()).count() as u32;
    let queued = trials.iter().filter(|t| t.status == "QUEUED").count() as u32;
    let budget = checked.max_trials.saturating_sub(trials.len() as u32);
    let wanted = match checked.max_concurrent {
        Some(at_once) => at_once.saturating_sub(open),
        None => u32::from(queued == 0),
    }
    .min(budget)
    .min(MAX_NEW_PER_LOOK);
    if wanted == 0 {
        return Ok(0);
    }
    let Some(creator) = may_submit(&server.db, row).await? else {
        let reason = format!(
            "its creator is no longer an editor of project {}: no more trials",
            row.project
        );
        store::set_state(&server.db, &row.id, SweepState::Failed, Some(&reason)).await?;
        return Ok(0);
    };
    let goal = checked.metric.as_ref().map_or(Goal::Min, |m| m.goal);
    let mut observed: Vec<Observed> = trials
        .iter()
        .map(|trial| Observed {
            number: trial.number as u64,
            params: trial.params(),
            outcome: outcome(trial),
        })
        .collect();
    let policy = server.config.job_policy();
    let mut made = 0;
    for number in trials.len() as u64..trials.len() as u64 + u64::from(wanted) {
        let Some(params) = sampler::propose(
            checked.method,
            &checked.parameters,
            goal,
            checked.seed,
            number,
            &observed,
        ) else {
            break; // The grid is done.
        };
        let spec = match trials::spec_of(&row.id, checked, number, &params, &policy) {
            Ok(spec) => spec,
            Err(errors) => {
                let reason = format!(
                    "trial {number} cannot run: {}",
                    errors
                        .iter()
                        .map(|e| format!("{}: {}", e.field, e.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                );
                store::set_state(&server.db, &row.id, SweepState::Failed, Some(&reason)).await?;
                break;
            }
        };
        let inserted = trials::insert(
            &server.db,
            &server.secret,
            &row.id,
            number,
            &spec,
            &params,
            creator.as_deref(),
        )
        .await;
        match inserted {
            Ok(_) => {}
            // Paused or stopped since this look began: no more trials now.
            Err(Error::Conflict(_)) => break,
            Err(error) => return Err(error),
        }
        made += 1;
        observed.push(Observed {
            number,
            params,
            outcome: Outcome::Running,
        });
    }
    if made > 0 {
        server.wakes.wake(Wake::Scheduler);
    }
    Ok(made)
}

/// How a trial did, for the sampler.
fn outcome(trial: &TrialRow) -> Outcome {
    if trial.pruned() || trial.pruned_step.is_some() {
        return Outcome::Pruned {
            rungs: trial.rungs().len(),
            last: trial.value.unwrap_or(f64::NAN),
        };
    }
    match (trial.status.as_str(), trial.value) {
        ("SUCCEEDED", Some(value)) if value.is_finite() => Outcome::Finished(value),
        ("QUEUED" | "DISPATCHING" | "RUNNING", _) => Outcome::Running,
        _ => Outcome::Failed,
    }
}

/// The sweep's creator's user id when they may still submit to its project
/// (an editor, or an admin); `Some(None)` for a sweep made without a user.
async fn may_submit(db: &Db, row: &SweepRow) -> Result<Option<Option<String>>, Error> {
    let creator: Option<(String, bool)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT u.id, u.is_admin FROM sweeps s JOIN users u ON u.id = s.created_by WHERE s.id = $1",
        )
        .bind(&row.id)
        .fetch_optional(pool)
        .await
    })?;
    let Some((user_id, is_admin)) = creator else {
        return Ok(None);
    };
    let principal = crate::identity::access::Principal {
        user_id: Some(user_id.clone()),
        user_name: None,
        is_admin,
        project: None,
    };
    let role = crate::identity::access::role_in(db, &principal, &row.project).await?;
    Ok(role
        .filter(|role| *role >= gpuplane_api::project::Role::Editor)
        .map(|_| Some(user_id)))
}
