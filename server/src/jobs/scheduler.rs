//! The scheduler loop: wakes on submit, finish, heartbeat and cooldown ends
//! (never on a slow tick), plans a pass over the whole queue and applies it
//! in one transaction, then wakes the agents it dispatched to.

use super::Handles;
use crate::events::{self, Links};
use crate::identity::credentials::hash_token;
use crate::jobs::dependencies::{self, Verdict};
use crate::jobs::fair_share;
use crate::jobs::lifecycle;
use crate::jobs::node_access::NodeAccess;
use crate::jobs::plan::{NodeCapacity, Placement, Plan, Preemption, QueuedJob, Rules, RunningAttempt, plan};
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Dialect, Error, Tx};
use crate::wake::Wake;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::job::{FailureReason, JobStatus, Runner};
use gpuplane_api::node::NODE_NAME_LABEL;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;
use tokio::sync::watch;

pub async fn run(server: Handles, mut shutdown: watch::Receiver<bool>) {
    loop {
        let started = std::time::Instant::now();
        let outcome = pass(&server).await;
        server.observed.scheduling_pass(started.elapsed().as_secs_f64());
        let next = match outcome {
            Ok(Some(wake_at)) => Duration::from_millis((wake_at - now_ms()).max(1) as u64),
            Ok(None) => Duration::from_secs(3600),
            Err(error) => {
                tracing::warn!(%error, "scheduling pass failed; retrying");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            _ = server.wakes.scheduler().notified() => {}
            _ = tokio::time::sleep(next) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// One queued job as `load_queue` reads it (a JSON array, in this order).
#[derive(serde::Deserialize)]
struct QueueRow {
    id: String,
    gpus: i64,
    priority: i64,
    node_selector: String,
    runner: String,
    not_before: Option<i64>,
    attempt_count: i64,
    max_attempts: i64,
    queued_reason: Option<String>,
    project: String,
    submitted_by: Option<String>,
    /// JSON array of `JobSpec::after`, or null.
    after_jobs: Option<String>,
    queued_at: i64,
    /// Read only when scheduling windows are configured.
    time_limit_s: Option<i64>,
    resume_node: Option<String>,
    nodes: i64,
    colocate: Option<String>,
    array_id: Option<String>,
}

/// One pass; returns when to plan again at the latest (a cooldown's end).
pub async fn pass(server: &Handles) -> Result<Option<i64>, Error> {
    let (queue, current_reasons) = load_queue(server).await?;
    if queue.is_empty() {
        return Ok(None);
    }
    let now = now_ms();
    let maintenance = crate::jobs::maintenance::current(&server.db).await?;
    if maintenance.on {
        // Nothing starts; every queued job says why. Turning it off wakes us.
        let reason = crate::jobs::maintenance::queued_reason(&maintenance);
        let reasons: Vec<(String, String)> =
            queue.iter().map(|job| (job.id.clone(), reason.clone())).collect();
        apply(server, &[], &reasons, &current_reasons, now).await?;
        return Ok(None);
    }
    let (mut queue, waiting, never) = hold_back_dependents(server, queue).await?;
    let policy = fair_share_policy(server);
    if fair_share::applies(&queue, policy) {
        let usage = fair_share::usage(&server.db, policy.window_ms, now).await?;
        fair_share::order(&mut queue, &usage, policy, now);
    }
    let mut nodes = load_nodes(server).await?;
    judge_windows(server, &mut nodes, now);
    let mut quotas = crate::jobs::quotas::for_plan(&server.db).await?;
    crate::jobs::arrays::add_limits(&server.db, &queue, &mut quotas).await?;
    let access = node_access(server).await?;
    let mut plan = plan(&queue, &nodes, &quotas, &access, rules(server), now);
    if !plan.unmatched.is_empty() {
        explain_drained_nodes(server, &queue, &mut plan).await?;
    }
    plan.reasons.extend(waiting);
    apply(server, &plan.placements, &plan.reasons, &current_reasons, now).await?;
    if !plan.preemptions.is_empty() {
        preempt(server, &plan.preemptions, now).await?;
    }
    if !never.is_empty() {
        fail_dependents(server, &never, now).await?;
        // Their ends may settle other jobs' `after` (`:finished`, or a chain).
        server.wakes.jobs_changed();
    }
    Ok(plan.wake_at)
}

/// The projects' node policies as they are now.
pub async fn node_access(server: &Handles) -> Result<NodeAccess, Error> {
    let mut tx = crate::store::read(&server.db).await?;
    crate::jobs::node_policies::access(&mut tx).await
}

/// What the pass may do besides filling free GPUs, from the settings.
pub fn rules(server: &Handles) -> Rules {
    Rules {
        cpu_slots_per_node: server.config.settings.cpu_slots_per_node,
        preempt_priority: server.config.settings.preempt_priority,
    }
}

/// Gives each node of a pool with a scheduling window where that window
/// stands now (judged at the window clock, in real time for the plan).
pub fn judge_windows(server: &Handles, nodes: &mut [NodeCapacity], now: i64) {
    let windows = &server.config.scheduling_windows;
    if windows.is_empty() {
        return;
    }
    let offset = server
        .window_clock_offset_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    for node in nodes {
        node.window = windows
            .iter()
            .find(|window| window.covers(&node.labels))
            .map(|window| {
                let mut state = window.at(now + offset);
                state.open_until = state.open_until.map(|t| t - offset);
                state.next_open -= offset;
                state
            });
    }
}

/// Fair share's window and aging, from the settings.
pub fn fair_share_policy(server: &Handles) -> fair_share::Policy {
    let settings = &server.config.settings;
    fair_share::Policy {
        window_ms: settings.fair_share_window_s.saturating_mul(1000) as i64,
        max_wait_ms: settings.fair_share_max_wait_s.saturating_mul(1000) as i64,
    }
}

/// Marks the attempts the plan preempts (each with a JOB_PREEMPTED event)
/// and wakes their agents: their next poll carries the stop, with the
/// preemption grace. The job is queued again when the attempt ends.
async fn preempt(server: &Handles, preemptions: &[Preemption], now: i64) -> Result<(), Error> {
    let grace = gpuplane_api::duration::format_seconds(server.config.settings.preemption_grace_s as i64);
    let mut tx = crate::store::write(&server.db).await?;
    let mut nodes = Vec::new();
    for p in preemptions {
        // It may have ended, or been preempted already, since the nodes were read.
        let node_name: Option<String> = sql!(tx, |conn| {
            sqlx::query_scalar(
                "UPDATE attempts SET preempted_at = $1, preempted_by = $2
             WHERE job_id = $3 AND n = $4 AND status = 'RUNNING' AND preempted_at IS NULL
             RETURNING (SELECT name FROM nodes WHERE id = node_id)",
            )
            .bind(now)
            .bind(&p.for_job)
            .bind(&p.job_id)
            .bind(p.attempt)
            .fetch_optional(conn)
            .await
        })?;
        let Some(node_name) = node_name else {
            continue;
        };
        // A multi-node attempt stops on every member's node.
        nodes.extend(crate::jobs::members::node_ids(&mut tx, &p.job_id, p.attempt).await?);
        let run_id: Option<String> = sql!(tx, |conn| {
            sqlx::query_scalar("SELECT run_id FROM jobs WHERE id = $1")
                .bind(&p.job_id)
                .fetch_optional(conn)
                .await
        })?;
        let message = format!(
            "attempt {} preempted on {node_name} for {} (priority {}): SIGTERM now, SIGKILL after {grace}; \
             the job is queued again without spending an attempt",
            p.attempt, p.for_job, p.for_priority
        );
        let links = Links {
            job_id: Some(&p.job_id),
            run_id: run_id.as_deref(),
            node_id: Some(&p.node_id),
        };
        events::record(
            &mut tx,
            now,
            Severity::Warning,
            EventKind::JobPreempted,
            links,
            &message,
        )
        .await?;
        nodes.push(p.node_id.clone());
    }
    tx.commit().await?;
    nodes.sort();
    nodes.dedup();
    for node_id in &nodes {
        server.wakes.wake(Wake::Agent(node_id.clone()));
    }
    if !nodes.is_empty() {
        server.wakes.jobs_changed();
    }
    Ok(())
}

/// Splits the queue by `after`: the jobs to plan now, the reasons of those
/// still waiting for other jobs, and those that can never run.
async fn hold_back_dependents(server: &Handles, queue: Vec<QueuedJob>) -> Result<Split, Error> {
    if queue.iter().all(|job| job.after.is_empty()) {
        return Ok((queue, Vec::new(), Vec::new()));
    }
    let ids: BTreeSet<&str> = queue
        .iter()
        .flat_map(|job| job.after.iter().map(|d| d.job_id.as_str()))
        .collect();
    let ids = serde_json::to_string(&ids).map_err(anyhow::Error::from)?;
    let job_ids = server.db.dialect().json_values("$1");
    let rows: Vec<(String, String)> = sql!(&server.db, |pool| {
        sqlx::query_as(&format!(
            "SELECT id, status FROM jobs WHERE id IN (SELECT value FROM {job_ids})"
        ))
        .bind(ids)
        .fetch_all(pool)
        .await
    })?;
    let statuses: HashMap<String, JobStatus> = rows
        .into_iter()
        .filter_map(|(id, status)| Some((id, JobStatus::parse(&status)?)))
        .collect();
    let mut ready = Vec::with_capacity(queue.len());
    let mut waiting = Vec::new();
    let mut never = Vec::new();
    for job in queue {
        match dependencies::verdict(&job.after, |id| statuses.get(id).copied()) {
            Verdict::Ready => ready.push(job),
            Verdict::Waiting(reason) => waiting.push((job.id, reason)),
            Verdict::Never(detail) => never.push((job.id, detail)),
        }
    }
    Ok((ready, waiting, never))
}

/// What `hold_back_dependents` gives: (to plan, waiting with reasons, never with details).
type Split = (Vec<QueuedJob>, Vec<(String, String)>, Vec<(String, String)>);

/// Fails queued jobs whose `after` can no longer be met (DEPENDENCY_FAILED).
async fn fail_dependents(server: &Handles, never: &[(String, String)], now: i64) -> Result<(), Error> {
    let mut tx = crate::store::write(&server.db).await?;
    for (job_id, detail) in never {
        // It may have been cancelled or held since the queue was read.
        let still_queued: Option<String> = sql!(tx, |conn| {
            sqlx::query_scalar("SELECT id FROM jobs WHERE id = $1 AND status = 'QUEUED' AND held_at IS NULL")
                .bind(job_id)
                .fetch_optional(conn)
                .await
        })?;
        if still_queued.is_some() {
            lifecycle::finish_job(
                &mut tx,
                job_id,
                JobStatus::Failed,
                Some(FailureReason::DependencyFailed),
                Some(detail),
                now,
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// The QUEUED jobs in dispatch order, and the reason each carries now.
pub async fn load_queue(
    server: &Handles,
) -> Result<(Vec<QueuedJob>, HashMap<String, Option<String>>), Error> {
    // One row holding a JSON array: the driver's per-row cost dominates at
    // 10,000 rows, and a pass reads the whole queue. Time limits are in the
    // spec, read only when scheduling windows need them. SQLite sorts only
    // the columns read (sorting whole rows, specs included, took half again
    // as long).
    let dialect = server.db.dialect();
    let time_limit = if server.config.scheduling_windows.is_empty() {
        "NULL".to_string()
    } else {
        format!("CAST({} AS BIGINT)", dialect.json_field("spec", "time_limit_s"))
    };
    let columns = |time_limit: &str| {
        format!(
            "id, gpus, priority, node_selector, runner, not_before, attempt_count, max_attempts, queued_reason,
             project, submitted_by, after_jobs, queued_at, {time_limit}, resume_node, nodes, colocate, array_id"
        )
    };
    let query = match dialect {
        Dialect::Sqlite => format!(
            "SELECT coalesce(json_group_array(json_array({})), '[]')
             FROM (SELECT {}, seq FROM jobs WHERE status = 'QUEUED' AND held_at IS NULL
                   ORDER BY priority DESC, queued_at, seq)",
            columns("time_limit_s"),
            columns(&format!("{time_limit} AS time_limit_s")),
        ),
        Dialect::Postgres => format!(
            "SELECT CAST(coalesce(json_agg(json_build_array({}) ORDER BY priority DESC, queued_at, seq), '[]') AS TEXT)
             FROM jobs WHERE status = 'QUEUED' AND held_at IS NULL",
            columns(&time_limit),
        ),
    };
    let json: String = sql!(&server.db, |pool| sqlx::query_scalar(&query)
        .fetch_one(pool)
        .await)?;
    let rows: Vec<QueueRow> = serde_json::from_str(&json).map_err(anyhow::Error::from)?;
    let mut selectors: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    let mut reasons = HashMap::with_capacity(rows.len());
    let queue = rows
        .into_iter()
        .map(|row| {
            let selector = match selectors.get(&row.node_selector) {
                Some(parsed) => parsed.clone(),
                None => {
                    let parsed: BTreeMap<String, String> =
                        serde_json::from_str(&row.node_selector).unwrap_or_default();
                    selectors.insert(row.node_selector, parsed.clone());
                    parsed
                }
            };
            reasons.insert(row.id.clone(), row.queued_reason);
            let runner = Runner::parse(&row.runner).unwrap_or_default();
            let nodes = row.nodes.clamp(1, u32::MAX as i64) as u32;
            let (gpus, nodes) = crate::jobs::plan::shape(runner, row.gpus.max(0) as u32, nodes);
            QueuedJob {
                id: row.id,
                gpus,
                priority: row.priority,
                node_selector: selector,
                runner,
                not_before: row.not_before,
                next_attempt: row.attempt_count + 1,
                max_attempts: row.max_attempts,
                project: row.project,
                user: row.submitted_by,
                after: row
                    .after_jobs
                    .and_then(|json| serde_json::from_str::<Vec<String>>(&json).ok())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|text| text.parse().ok())
                    .collect(),
                queued_at: row.queued_at,
                fair_share_note: None,
                time_limit_ms: row.time_limit_s.map(|s| s.saturating_mul(1000)),
                resume_node: row.resume_node,
                nodes,
                colocate: row.colocate,
                array: row.array_id,
            }
        })
        .collect();
    Ok((queue, reasons))
}

/// A job that no node of the pass matches, while drained nodes would, says
/// so: the reason names them instead of "no online node".
async fn explain_drained_nodes(server: &Handles, queue: &[QueuedJob], plan: &mut Plan) -> Result<(), Error> {
    let drained: Vec<(String, String)> = sql!(&server.db, |pool| {
        sqlx::query_as(
            "SELECT name, labels FROM nodes WHERE status = 'ONLINE' AND drained_at IS NOT NULL ORDER BY name",
        )
        .fetch_all(pool)
        .await
    })?;
    if drained.is_empty() {
        return Ok(());
    }
    let drained: Vec<(String, BTreeMap<String, String>)> = drained
        .into_iter()
        .map(|(name, labels)| {
            let mut labels: BTreeMap<String, String> = serde_json::from_str(&labels).unwrap_or_default();
            labels.insert(NODE_NAME_LABEL.to_string(), name.clone());
            (name, labels)
        })
        .collect();
    let unmatched: HashSet<&str> = plan.unmatched.iter().map(String::as_str).collect();
    let selectors: HashMap<&str, &BTreeMap<String, String>> = queue
        .iter()
        .filter(|job| unmatched.contains(job.id.as_str()))
        .map(|job| (job.id.as_str(), &job.node_selector))
        .collect();
    for (job_id, reason) in &mut plan.reasons {
        let Some(selector) = selectors.get(job_id.as_str()) else {
            continue;
        };
        let names: Vec<&str> = drained
            .iter()
            .filter(|(_, labels)| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(name, _)| name.as_str())
            .collect();
        if !names.is_empty() {
            *reason = format!(
                "only drained nodes match ({}): they take no new jobs until an admin undrains them",
                names.join(", ")
            );
        }
    }
    Ok(())
}

/// One active attempt as `load_nodes` reads it: its GPUs ([] for cpu jobs)
/// and, when preemption is on, what preemption needs to know.
#[derive(serde::Deserialize)]
struct ActiveRow(
    Vec<u32>,
    /// Job, attempt number, the job's priority, when it started (else was
    /// dispatched), whether it is preempted, whether it is RUNNING.
    #[serde(default)]
    String,
    #[serde(default)] i64,
    #[serde(default)] i64,
    #[serde(default)] i64,
    #[serde(default)] u8,
    #[serde(default)] u8,
);

/// ONLINE nodes with their GPUs and what active attempts hold, in one query;
/// with preemption on, the GPU attempts themselves too.
pub async fn load_nodes(server: &Handles) -> Result<Vec<NodeCapacity>, Error> {
    let preemption = server.config.settings.preempt_priority.is_some();
    let dialect = server.db.dialect();
    let held = dialect.json_of("a.gpus");
    // One-node attempts hold GPUs on their row's node; a multi-node
    // attempt's members each on their own (`members`).
    let member_held = dialect.json_of("m.gpus");
    let (attempt, from_attempts, member, from_members) = if preemption {
        let stopping = "a.job_id, a.n, j.priority";
        (
            format!(
                "{held}, {stopping}, coalesce(a.started_at, a.dispatched_at),
                 CAST(a.preempted_at IS NOT NULL AS INTEGER), CAST(a.status = 'RUNNING' AS INTEGER)"
            ),
            "FROM attempts a JOIN jobs j ON j.id = a.job_id",
            format!(
                "{member_held}, {stopping}, coalesce(m.started_at, a.dispatched_at),
                 CAST(a.preempted_at IS NOT NULL AS INTEGER), CAST(m.status = 'RUNNING' AS INTEGER)"
            ),
            "FROM attempt_members m JOIN attempts a ON a.job_id = m.job_id AND a.n = m.attempt
             JOIN jobs j ON j.id = m.job_id",
        )
    } else {
        (held, "FROM attempts a", member_held, "FROM attempt_members m")
    };
    let labels = dialect.json_of("labels");
    let runners = dialect.json_of("runners");
    let active = "a.node_id = n.id AND a.status IN ('DISPATCHING', 'RUNNING') AND a.nodes = 1";
    let member_active = "m.node_id = n.id AND m.status IN ('DISPATCHING', 'RUNNING')";
    // Without multi-node jobs running (the usual case) the members are not
    // looked up node by node: one probe of their partial index says so.
    let members_running: bool = sql!(&server.db, |pool| sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM attempt_members WHERE status IN ('DISPATCHING', 'RUNNING'))"
    )
    .fetch_one(pool)
    .await)?;
    let query = match dialect {
        Dialect::Sqlite => {
            let members = match members_running {
                true => format!(
                    "(SELECT json_group_array(json_array({member})) {from_members} WHERE {member_active})"
                ),
                false => "json_array()".to_string(),
            };
            format!(
                "SELECT coalesce(json_group_array(json_array(id, name, {labels}, {runners},
                    (SELECT json_group_array(idx) FROM gpus g WHERE g.node_id = n.id),
                    (SELECT json_group_array(json_array({attempt})) {from_attempts} WHERE {active}),
                    {members})), '[]')
             FROM (SELECT * FROM nodes WHERE status = 'ONLINE' AND drained_at IS NULL ORDER BY name) n"
            )
        }
        Dialect::Postgres => {
            let members = match members_running {
                true => format!(
                    "(SELECT coalesce(json_agg(json_build_array({member})), '[]') {from_members} WHERE {member_active})"
                ),
                false => "CAST('[]' AS JSON)".to_string(),
            };
            format!(
                "SELECT CAST(coalesce(json_agg(json_build_array(id, name, {labels}, {runners},
                    (SELECT coalesce(json_agg(idx), '[]') FROM gpus g WHERE g.node_id = n.id),
                    (SELECT coalesce(json_agg(json_build_array({attempt})), '[]') {from_attempts} WHERE {active}),
                    {members})
                    ORDER BY name), '[]') AS TEXT)
             FROM nodes n WHERE status = 'ONLINE' AND drained_at IS NULL"
            )
        }
    };
    // id, name, labels, runners, GPU indices, active attempts, active members.
    type NodeRow = (
        String,
        String,
        BTreeMap<String, String>,
        Option<Vec<Runner>>,
        Vec<u32>,
        Vec<ActiveRow>,
        Vec<ActiveRow>,
    );
    let json: String = sql!(&server.db, |pool| sqlx::query_scalar(&query)
        .fetch_one(pool)
        .await)?;
    let rows: Vec<NodeRow> = serde_json::from_str(&json).map_err(anyhow::Error::from)?;
    Ok(rows
        .into_iter()
        .map(|(id, name, mut labels, runners, mut gpus, mut active, members)| {
            active.extend(members);
            gpus.sort_unstable();
            labels.insert(NODE_NAME_LABEL.to_string(), name.clone());
            let mut node = NodeCapacity {
                id,
                name,
                labels,
                runners,
                gpus,
                cpu_jobs: 0,
                busy_gpus: BTreeSet::new(),
                running: Vec::new(),
                window: None,
            };
            for ActiveRow(held, job_id, attempt, priority, started_at, preempted, started) in active {
                if held.is_empty() {
                    node.cpu_jobs += 1;
                    continue;
                }
                if preemption {
                    node.running.push(RunningAttempt {
                        job_id,
                        attempt,
                        priority,
                        gpus: held.len() as u32,
                        started_at,
                        preempted: preempted != 0,
                        started: started != 0,
                    });
                }
                node.busy_gpus.extend(held);
            }
            node
        })
        .collect())
}

/// Whether any of `gpus` of `node_id` is held by an attempt (or a member
/// of one) already. Asked in the transaction that claims them: write
/// transactions take turns (see `store::write`), so two claims of one GPU
/// cannot both pass this check.
async fn gpus_taken(tx: &mut Tx, node_id: &str, gpus: &[u32]) -> Result<bool, Error> {
    let held: Vec<String> = sql!(tx, |conn| {
        sqlx::query_scalar(
            "SELECT gpus FROM attempts WHERE node_id = $1 AND status IN ('DISPATCHING', 'RUNNING') AND nodes = 1
             UNION ALL
             SELECT gpus FROM attempt_members WHERE node_id = $1 AND status IN ('DISPATCHING', 'RUNNING')",
        )
        .bind(node_id)
        .fetch_all(conn)
        .await
    })?;
    Ok(held
        .iter()
        .flat_map(|json| serde_json::from_str::<Vec<u32>>(json).unwrap_or_default())
        .any(|gpu| gpus.contains(&gpu)))
}

/// Applies a plan in one transaction: each placement claims its job and
/// GPUs (unless they were taken meanwhile), each changed reason is stored.
pub async fn apply(
    server: &Handles,
    placements: &[Placement],
    reasons: &[(String, String)],
    current: &HashMap<String, Option<String>>,
    now: i64,
) -> Result<(), Error> {
    let changed: Vec<&(String, String)> = reasons
        .iter()
        .filter(|(job, reason)| current.get(job).and_then(|r| r.as_deref()) != Some(reason.as_str()))
        .collect();
    if placements.is_empty() && changed.is_empty() {
        return Ok(());
    }
    let mut tx = crate::store::write(&server.db).await?;
    let mut dispatched_to = Vec::new();
    'placements: for placement in placements {
        // Rank 0 first, then a gang's other members.
        let members: Vec<(&str, &[u32])> = std::iter::once((placement.node_id.as_str(), &placement.gpus[..]))
            .chain(
                placement
                    .others
                    .iter()
                    .map(|(node, gpus)| (node.as_str(), &gpus[..])),
            )
            .collect();
        // Another leader may have taken these GPUs since this plan was read
        // (two replicas that both believe they lead, for a moment): checked
        // in the transaction that claims them.
        for (node_id, gpus) in &members {
            if !gpus.is_empty() && gpus_taken(&mut tx, node_id, gpus).await? {
                tracing::warn!(
                    job_id = placement.job_id,
                    node_id,
                    "its GPUs were taken since the plan was made (by another leader?): it stays queued"
                );
                continue 'placements;
            }
        }
        // The job may have been cancelled since the queue was read.
        type Claimed = (i64, Option<String>, String, Option<String>, Option<i64>);
        let claimed: Option<Claimed> = sql!(tx, |conn| {
            sqlx::query_as(
            "UPDATE jobs SET status = 'DISPATCHING', attempt_count = attempt_count + 1, queued_reason = NULL,
                 not_before = NULL, updated_at = $1
             WHERE id = $2 AND status = 'QUEUED'
             RETURNING attempt_count, submitted_by, run_id, resume_path, resume_step",
        )
        .bind(now)
        .bind(&placement.job_id)
        .fetch_optional(conn)
        .await
        })?;
        let Some((attempt, submitted_by, run_id, resume_path, resume_step)) = claimed else {
            continue;
        };
        // Where it picks up (`resume`): nothing on a first attempt.
        let resume_path = (attempt > 1).then(|| resume_path.unwrap_or_default());
        let resume_step = resume_step.filter(|_| attempt > 1);
        let token_id = match &submitted_by {
            Some(user_id) => {
                let token_id = new_id("tok");
                let secret = server.secret.attempt_token(&placement.job_id, attempt);
                sql!(tx, |conn| {
                    sqlx::query(
                        "INSERT INTO api_tokens (id, user_id, name, scope, token_hash, created_at, run_id)
                     VALUES ($1, $2, $3, 'sdk', $4, $5, $6)",
                    )
                    .bind(&token_id)
                    .bind(user_id)
                    .bind(format!("job {} attempt {attempt}", placement.job_id))
                    .bind(hash_token(&secret))
                    .bind(now)
                    .bind(&run_id)
                    .execute(conn)
                    .await
                    .map(|_| ())
                })?;
                Some(token_id)
            }
            None => None,
        };
        sql!(tx, |conn| {
            sqlx::query(
                "INSERT INTO attempts (job_id, n, node_id, gpus, status, dispatched_at, sdk_token_id,
                                   resume_path, resume_step, nodes)
             VALUES ($1, $2, $3, $4, 'DISPATCHING', $5, $6, $7, $8, $9)",
            )
            .bind(&placement.job_id)
            .bind(attempt)
            .bind(&placement.node_id)
            .bind(serde_json::to_string(&placement.gpus).map_err(anyhow::Error::from)?)
            .bind(now)
            .bind(token_id)
            .bind(&resume_path)
            .bind(resume_step)
            .bind(members.len() as i64)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        if members.len() > 1 {
            // The others start once rank 0's agent has chosen the
            // rendezvous port (`dispatch`); rank 0's poll is woken now.
            crate::jobs::members::insert(&mut tx, &placement.job_id, attempt, &members).await?;
        }
        dispatched_to.push(placement.node_id.clone());
    }
    for (job_id, reason) in changed {
        sql!(tx, |conn| {
            sqlx::query("UPDATE jobs SET queued_reason = $1 WHERE id = $2 AND status = 'QUEUED'")
                .bind(reason)
                .bind(job_id)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
    }
    tx.commit().await?;
    // One entry per attempt placed (its rank 0's node).
    server.observed.dispatched(dispatched_to.len());
    dispatched_to.dedup();
    for node_id in dispatched_to {
        server.wakes.wake(Wake::Agent(node_id));
    }
    Ok(())
}
