//! Sweeps in the database (`sweeps`, `sweep_trials`): creating one, reading
//! it with its trials and best trial, listing them, and pausing, resuming
//! or stopping one. A sweep belongs to its project: viewers read it,
//! editors change it, anyone else is told it does not exist.

use crate::identity::access::{self, Principal, Visible};
use crate::jobs::cancel::{self, Cancelled};
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Error};
use gpuplane_api::Page;
use gpuplane_api::job::FailureReason;
use gpuplane_api::metric::Goal;
use gpuplane_api::project::Role;
use gpuplane_api::sweep::{Checked, Params, Sweep, SweepAction, SweepSpec, SweepState, Trial};
use std::collections::BTreeMap;

/// The trial state a pruned trial is counted under, apart from other cancels.
pub const PRUNED: &str = "PRUNED";

/// Stores a checked sweep, RUNNING, for the controller to make its trials.
pub async fn create(
    db: &Db,
    checked: &Checked,
    spec: &SweepSpec,
    principal: &Principal,
) -> Result<String, Error> {
    let id = new_id("swp");
    let now = now_ms();
    let text = serde_json::to_string(spec).map_err(anyhow::Error::from)?;
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO sweeps (id, project, name, spec, state, seed, created_by, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 'RUNNING', $5, $6, $7, $7)",
        )
        .bind(&id)
        .bind(&checked.project)
        .bind(&checked.name)
        .bind(&text)
        .bind(checked.seed as i64)
        .bind(principal.user_id.as_deref())
        .bind(now)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok(id)
}

/// One sweep row.
#[derive(sqlx::FromRow)]
pub(super) struct SweepRow {
    pub seq: i64,
    pub id: String,
    pub project: String,
    pub name: String,
    pub spec: String,
    pub state: String,
    pub reason: Option<String>,
    pub seed: i64,
    pub auto_min_step: Option<i64>,
    pub created_by: Option<String>,
    pub created_at: i64,
    pub ended_at: Option<i64>,
}

/// A sweep row's columns, with its creator's name.
const SWEEP_COLUMNS: &str =
    "s.seq, s.id, s.project, s.name, s.spec, s.state, s.reason, s.seed, s.auto_min_step,
     u.name AS created_by, s.created_at, s.ended_at";

/// One trial with its job's state.
#[derive(sqlx::FromRow, Clone)]
pub(super) struct TrialRow {
    pub number: i64,
    pub job_id: String,
    pub run_id: String,
    pub params: String,
    pub rungs: String,
    pub last_step: Option<i64>,
    pub value: Option<f64>,
    pub pruned_step: Option<i64>,
    pub status: String,
    pub failure_reason: Option<String>,
    pub cancel_requested_at: Option<i64>,
}

impl TrialRow {
    pub fn params(&self) -> Params {
        serde_json::from_str(&self.params).unwrap_or_default()
    }

    pub fn rungs(&self) -> Vec<f64> {
        serde_json::from_str(&self.rungs).unwrap_or_default()
    }

    pub fn pruned(&self) -> bool {
        self.failure_reason.as_deref() == Some(FailureReason::SweepPruned.as_str())
    }

    /// Its job has not ended.
    pub fn open(&self) -> bool {
        matches!(self.status.as_str(), "QUEUED" | "DISPATCHING" | "RUNNING")
    }

    /// The state it is counted under: its job's, or PRUNED.
    fn counted_as(&self) -> &str {
        if self.pruned() { PRUNED } else { &self.status }
    }

    fn trial(&self) -> Trial {
        Trial {
            number: self.number.max(0) as u64,
            job_id: self.job_id.clone(),
            run_id: self.run_id.clone(),
            params: self.params(),
            state: self.status.clone(),
            failure_reason: self.failure_reason.clone(),
            value: self.value,
            step: self.last_step.map(|s| s.max(0) as u64),
            rungs: self.rungs(),
        }
    }
}

/// Every trial of a sweep, by number.
pub(super) async fn trials(db: &Db, sweep_id: &str) -> Result<Vec<TrialRow>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT t.number, t.job_id, j.run_id, t.params, t.rungs, t.last_step, t.value, t.pruned_step, j.status,
                    j.failure_reason, j.cancel_requested_at
             FROM sweep_trials t JOIN jobs j ON j.id = t.job_id WHERE t.sweep_id = $1 ORDER BY t.number",
        )
        .bind(sweep_id)
        .fetch_all(pool)
        .await
    })?)
}

/// The best trial by `goal`: among the finished ones, else among any
/// that has a value.
pub(super) fn best(trials: &[TrialRow], goal: Goal) -> Option<&TrialRow> {
    let better = |a: &&TrialRow, b: &&TrialRow| {
        let (a, b) = (a.value.unwrap_or(f64::NAN), b.value.unwrap_or(f64::NAN));
        match goal {
            Goal::Min => b.total_cmp(&a),
            Goal::Max => a.total_cmp(&b),
        }
    };
    let valued = |t: &&TrialRow| t.value.is_some_and(f64::is_finite);
    let finished = trials
        .iter()
        .filter(|t| t.status == "SUCCEEDED")
        .filter(valued)
        .max_by(better);
    finished.or_else(|| trials.iter().filter(valued).max_by(better))
}

fn sweep_of(row: SweepRow, trials: &[TrialRow], with_trials: bool) -> Result<Sweep, Error> {
    let spec: SweepSpec = serde_json::from_str(&row.spec).map_err(anyhow::Error::from)?;
    let checked = spec
        .check(row.seed as u64)
        .map_err(|_| anyhow::anyhow!("sweep {} has a spec that no longer passes its checks", row.id))?;
    let mut trial_states: BTreeMap<String, u32> = BTreeMap::new();
    for trial in trials {
        *trial_states.entry(trial.counted_as().to_string()).or_default() += 1;
    }
    let goal = checked.metric.as_ref().map_or(Goal::Min, |m| m.goal);
    Ok(Sweep {
        id: row.id,
        name: row.name,
        project: row.project,
        state: row.state.parse().map_err(anyhow::Error::msg)?,
        reason: row.reason,
        method: checked.method,
        metric: checked.metric.clone(),
        early_terminate: checked.early_stop,
        max_trials: checked.max_trials,
        max_concurrent: checked.max_concurrent,
        max_failures: checked.max_failures,
        seed: row.seed as u64,
        trial_states,
        best: checked
            .metric
            .as_ref()
            .and(best(trials, goal))
            .map(TrialRow::trial),
        spec,
        created_by: row.created_by,
        created_at: rfc3339(row.created_at),
        ended_at: row.ended_at.map(rfc3339),
        trials: if with_trials {
            trials.iter().map(TrialRow::trial).collect()
        } else {
            Vec::new()
        },
    })
}

/// The sweep row, if any (no access check: the controller's).
pub(super) async fn row(db: &Db, id: &str) -> Result<Option<SweepRow>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {SWEEP_COLUMNS} FROM sweeps s LEFT JOIN users u ON u.id = s.created_by WHERE s.id = $1"
        ))
        .bind(id)
        .fetch_optional(pool)
        .await
    })?)
}

/// A sweep the principal may see with at least `needed`, with its trials;
/// another project's is "not found", like one that does not exist.
pub async fn get_for(db: &Db, principal: &Principal, id: &str, needed: Role) -> Result<Sweep, Error> {
    let not_found = || Error::NotFound(format!("no sweep {id}"));
    let row = row(db, id).await?.ok_or_else(not_found)?;
    access::require(db, principal, &row.project, needed, not_found).await?;
    let trials = trials(db, id).await?;
    sweep_of(row, &trials, true)
}

/// The sweeps of the projects the principal sees (of one project, when
/// asked), newest first, a page at a time; without their trials.
pub async fn list(
    db: &Db,
    principal: &Principal,
    project: Option<&str>,
    limit: i64,
    before: Option<i64>,
) -> Result<Page<Sweep>, Error> {
    let visible = access::visible_projects(db, principal).await?;
    let projects: Option<Vec<String>> = match visible {
        Visible::All => None,
        Visible::Only(projects) => Some(projects),
    };
    let projects = projects.map(|p| serde_json::to_string(&p).unwrap_or_else(|_| "[]".into()));
    let listed = db.dialect().json_values("$2");
    let rows: Vec<SweepRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {SWEEP_COLUMNS} FROM sweeps s LEFT JOIN users u ON u.id = s.created_by
             WHERE ($1 IS NULL OR s.project = $1)
               AND ($2 IS NULL OR s.project IN (SELECT value FROM {listed}))
               AND ($3 IS NULL OR s.seq < $3)
             ORDER BY s.seq DESC LIMIT $4"
        ))
        .bind(project)
        .bind(projects)
        .bind(before)
        .bind(limit + 1)
        .fetch_all(pool)
        .await
    })?;
    let more = rows.len() as i64 > limit;
    let rows: Vec<SweepRow> = rows.into_iter().take(limit.max(0) as usize).collect();
    let next_before = more.then(|| rows.last().map(|row| row.seq)).flatten();
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let trials = trials(db, &row.id).await?;
        items.push(sweep_of(row, &trials, false)?);
    }
    Ok(Page { items, next_before })
}

/// Pauses, resumes or stops a sweep (the caller checked the principal is
/// an editor of its project); stopping cancels its open trials. Returns
/// the nodes whose agents must stop a trial.
pub async fn act(db: &Db, id: &str, action: SweepAction, by: &str) -> Result<Vec<String>, Error> {
    let row = row(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no sweep {id}")))?;
    let state: SweepState = row.state.parse().map_err(anyhow::Error::msg)?;
    if state.is_terminal() {
        return Err(Error::Conflict(format!(
            "sweep {id} has already ended ({state}): create a new one"
        )));
    }
    let (to, reason) = match (action, state) {
        (SweepAction::Pause, SweepState::Paused) | (SweepAction::Resume, SweepState::Running) => {
            return Ok(Vec::new());
        }
        (SweepAction::Pause, _) => (SweepState::Paused, Some(format!("paused by {by}"))),
        (SweepAction::Resume, _) => (SweepState::Running, None),
        (SweepAction::Stop, _) => (SweepState::Stopped, Some(format!("stopped by {by}"))),
    };
    if !set_state(db, id, to, reason.as_deref()).await? {
        return Err(Error::Conflict(format!(
            "sweep {id} ended meanwhile: create a new one"
        )));
    }
    let mut stopping = Vec::new();
    if to == SweepState::Stopped {
        for trial in trials(db, id).await?.iter().filter(|t| t.open()) {
            match cancel::cancel(db, &trial.job_id).await {
                Ok(Cancelled::Now) => {}
                Ok(Cancelled::Stopping { node_ids }) => stopping.extend(node_ids),
                Err(Error::Conflict(_)) => {} // It ended meanwhile.
                Err(error) => return Err(error),
            }
        }
    }
    stopping.sort();
    stopping.dedup();
    Ok(stopping)
}

/// Moves an open sweep to `state` (with why); returns false, changing
/// nothing, when it has ended meanwhile: an ended sweep stays as it ended.
/// A writer's transaction, so it and a trial's insert (`trials::insert`,
/// which needs the sweep RUNNING) happen one after the other.
pub(super) async fn set_state(
    db: &Db,
    id: &str,
    state: SweepState,
    reason: Option<&str>,
) -> Result<bool, Error> {
    let now = now_ms();
    let ended = state.is_terminal().then_some(now);
    let mut tx = crate::store::write(db).await?;
    let changed = sql!(tx, |conn| {
        sqlx::query(
            "UPDATE sweeps SET state = $1, reason = $2, updated_at = $3, ended_at = $4
             WHERE id = $5 AND state IN ('RUNNING', 'PAUSED')",
        )
        .bind(state.as_str())
        .bind(reason)
        .bind(now)
        .bind(ended)
        .bind(id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    tx.commit().await?;
    Ok(changed > 0)
}
