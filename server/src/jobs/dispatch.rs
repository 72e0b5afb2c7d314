//! What the server tells agents: on hello, which of the attempts an agent
//! still has to resume (and which of the node's RUNNING attempts are lost);
//! on each poll, the dispatches, cancels and one-shot commands it carries.

use super::Handles;
use crate::identity::secrets::SecretKey;
use crate::jobs::{lifecycle, members, reports};
use crate::logs;
use crate::store::Error;
use crate::store::Tx;
use crate::store::sql;
use crate::store::time::now_ms;
use gpuplane_api::agent::{
    ARRAY_ID_VARIABLE, ARRAY_INDEX_VARIABLE, AgentCommand, AttemptRef, Dispatch, JOB_TOKEN_VARIABLE,
    MASTER_PORT_VARIABLES, RESUME_FROM_VARIABLE, RESUME_STEP_VARIABLE, Report, ReportItem, Resume,
};
use gpuplane_api::job::{JobSpec, JobStatus};
use gpuplane_api::log::LogStream;
use gpuplane_api::mlflow;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// For each attempt an agent still has: where to resume its output, or to
/// drop it, and the secrets its `dispatch.json` does not keep (its job's
/// values to mask, its own token). RUNNING attempts on the node that the
/// agent no longer has are lost.
pub async fn reconcile(
    conn: &mut Tx,
    secret: &SecretKey,
    node_id: &str,
    node_name: &str,
    attempts: &[AttemptRef],
) -> Result<Vec<Resume>, Error> {
    let mut resume = Vec::new();
    for attempt in attempts {
        let on_node = members::on_node(conn, node_id, &attempt.job_id, attempt.attempt).await?;
        let rank = on_node.and_then(|on| on.member).map(|(rank, _)| rank);
        // A member stops once it or its attempt has ended.
        let status = on_node.map(|on| match on.member {
            Some((_, member)) if on.attempt.is_active() => member,
            _ => on.attempt,
        });
        let (mask, token) = match status {
            Some(_) => (
                secret_values(conn, secret, &attempt.job_id).await?,
                Some(secret.attempt_token(&attempt.job_id, attempt.attempt)),
            ),
            None => (Vec::new(), None),
        };
        resume.push(Resume {
            job_id: attempt.job_id.clone(),
            attempt: attempt.attempt,
            stdout_lines: logs::last_n(conn, &attempt.job_id, attempt.attempt, rank, LogStream::Stdout)
                .await?,
            stderr_lines: logs::last_n(conn, &attempt.job_id, attempt.attempt, rank, LogStream::Stderr)
                .await?,
            keep: status.is_some_and(JobStatus::is_active),
            known: status.is_some(),
            mask,
            token,
        });
    }
    let listed: HashSet<(&str, i64)> = attempts.iter().map(|a| (a.job_id.as_str(), a.attempt)).collect();
    let running: Vec<(String, i64, Option<i64>)> = sql!(conn, |conn| {
        sqlx::query_as(
            "SELECT job_id, n, CAST(NULL AS BIGINT) FROM attempts WHERE node_id = $1 AND status = 'RUNNING' AND nodes = 1
             UNION ALL
             SELECT job_id, attempt, node_rank FROM attempt_members WHERE node_id = $1 AND status = 'RUNNING'",
        )
        .bind(node_id)
        .fetch_all(conn)
        .await
    })?;
    let now = now_ms();
    for (job_id, n, rank) in running {
        if !listed.contains(&(job_id.as_str(), n)) {
            let detail = format!("the agent on {node_name} restarted without this job's state");
            if let Some(rank) = rank {
                members::lose(conn, &job_id, n, rank, node_id, &detail, now).await?;
            } else {
                lifecycle::lose_attempt(conn, &job_id, n, node_id, &detail, now).await?;
            }
        }
    }
    Ok(resume)
}

/// A job's secret values, opened with this server's key (a value it cannot
/// open was never dispatched, so there is nothing of it to mask).
async fn secret_values(conn: &mut Tx, secret: &SecretKey, job_id: &str) -> Result<Vec<String>, Error> {
    let field = conn.dialect().json_field("spec", "secret_env");
    let sealed: Option<String> = sql!(conn, |conn| {
        sqlx::query_scalar(&format!("SELECT {field} FROM jobs WHERE id = $1"))
            .bind(job_id)
            .fetch_optional(conn)
            .await
    })?
    .flatten();
    let sealed: BTreeMap<String, String> = sealed
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default();
    Ok(sealed
        .iter()
        .filter_map(|(name, value)| secret.open(job_id, name, value))
        .collect())
}

/// Gives each log fetch its job's secret values to mask, as it leaves for
/// the agent (a fetch waiting in `log_fetches` never holds them).
async fn add_masks(server: &Handles, commands: &mut [AgentCommand]) -> Result<(), Error> {
    if !commands
        .iter()
        .any(|c| matches!(c, AgentCommand::FetchLog { .. }))
    {
        return Ok(());
    }
    let mut tx = crate::store::read(&server.db).await?;
    for command in commands {
        if let AgentCommand::FetchLog { job_id, mask, .. } = command {
            *mask = secret_values(&mut tx, &server.secret, job_id).await?;
        }
    }
    Ok(())
}

/// The commands a node's poll carries: dispatches it has not started,
/// cancels, stops for attempts the server has ended, and queued one-shots.
pub async fn commands_for(
    server: &Handles,
    node_id: &str,
    running: &[AttemptRef],
) -> Result<Vec<AgentCommand>, Error> {
    #[derive(sqlx::FromRow)]
    struct ActiveRow {
        job_id: String,
        n: i64,
        /// The one-node attempt's status, or the member's.
        status: String,
        gpus: String,
        spec: String,
        run_id: String,
        cancel_requested_at: Option<i64>,
        preempted_at: Option<i64>,
        resume_path: Option<String>,
        resume_step: Option<i64>,
        hung_at: Option<i64>,
        /// A member of a multi-node attempt: its rank, the attempt's
        /// status and rank 0's rendezvous port once chosen.
        node_rank: Option<i64>,
        attempt_status: String,
        master_port: Option<i64>,
        /// A task of a job array: the array and its index.
        array_id: Option<String>,
        array_index: Option<i64>,
    }
    // One-node attempts on this node, and members of multi-node ones.
    let active: Vec<ActiveRow> = sql!(&server.db, |pool| {
        sqlx::query_as(
            "SELECT a.job_id, a.n, a.status, a.gpus, j.spec, j.run_id, j.cancel_requested_at, a.preempted_at,
             a.resume_path, a.resume_step, a.hung_at, CAST(NULL AS BIGINT) AS node_rank, a.status AS attempt_status,
             CAST(NULL AS BIGINT) AS master_port, j.array_id, j.array_index
         FROM attempts a JOIN jobs j ON j.id = a.job_id
         WHERE a.node_id = $1 AND a.status IN ('DISPATCHING', 'RUNNING') AND a.nodes = 1
         UNION ALL
         SELECT m.job_id, m.attempt, m.status, m.gpus, j.spec, j.run_id, j.cancel_requested_at, a.preempted_at,
             a.resume_path, a.resume_step, a.hung_at, m.node_rank, a.status, a.master_port, j.array_id,
             j.array_index
         FROM attempt_members m JOIN attempts a ON a.job_id = m.job_id AND a.n = m.attempt
             JOIN jobs j ON j.id = m.job_id
         WHERE m.node_id = $1 AND m.status IN ('DISPATCHING', 'RUNNING')",
        )
        .bind(node_id)
        .fetch_all(pool)
        .await
    })?;
    let running: BTreeSet<(&str, i64)> = running.iter().map(|a| (a.job_id.as_str(), a.attempt)).collect();
    let grace_ms = server.config.cancel_grace.as_millis() as u64;
    let preemption_grace_ms = server.config.settings.preemption_grace_s.saturating_mul(1000);
    let mut commands = Vec::new();
    let mut unopenable = Vec::new();
    let mut cancelled_before_start = Vec::new();
    let mut never_started = Vec::new();
    for row in &active {
        let started = row.status == "RUNNING" || running.contains(&(row.job_id.as_str(), row.n));
        let attempt_over = !matches!(row.attempt_status.as_str(), "DISPATCHING" | "RUNNING");
        if let Some(rank) = row.node_rank.filter(|_| attempt_over) {
            // Another member ended the attempt: this one stops too.
            if started {
                commands.push(AgentCommand::Cancel {
                    job_id: row.job_id.clone(),
                    attempt: row.n,
                    grace_ms,
                });
            } else {
                never_started.push((row.job_id.as_str(), row.n, rank));
            }
        } else if row.cancel_requested_at.is_some() && !started {
            cancelled_before_start.push((row.job_id.as_str(), row.n));
        } else if row.cancel_requested_at.is_some() {
            commands.push(AgentCommand::Cancel {
                job_id: row.job_id.clone(),
                attempt: row.n,
                grace_ms,
            });
        } else if row.hung_at.is_some() {
            // Hung, with `on_hang = "restart"` (`hangs`): stopped, then retried.
            commands.push(AgentCommand::Cancel {
                job_id: row.job_id.clone(),
                attempt: row.n,
                grace_ms,
            });
        } else if row.preempted_at.is_some() {
            commands.push(AgentCommand::Cancel {
                job_id: row.job_id.clone(),
                attempt: row.n,
                grace_ms: preemption_grace_ms,
            });
        } else if !started && row.node_rank.is_some_and(|rank| rank > 0) && row.master_port.is_none() {
            // Waits for rank 0's agent to choose the rendezvous port.
        } else if !started {
            let mut spec: JobSpec = serde_json::from_str(&row.spec).map_err(anyhow::Error::from)?;
            // The agent gets the secret values, and only in its dispatch. A
            // value this server's key cannot open fails the dispatch: a job
            // must not run without the credentials it was given.
            let mut opened = BTreeMap::new();
            let mut lost = Vec::new();
            for (name, sealed) in std::mem::take(&mut spec.secret_env) {
                match server.secret.open(&row.job_id, &name, &sealed) {
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
            let shipped = spec
                .recipe
                .as_ref()
                .is_some_and(|recipe| recipe.shipped.is_some());
            // Every attempt after the first: where to pick up, as recorded
            // when it was placed (`resume`; empty: no checkpoint).
            let resume = (row.n > 1).then(|| {
                (
                    row.resume_path.clone().unwrap_or_default(),
                    row.resume_step.map(|step| step.to_string()).unwrap_or_default(),
                )
            });
            let nproc = gpus.len();
            let mut sent = dispatch(server, &row.job_id, row.n, &row.run_id, spec, gpus, resume);
            if let (Some(array_id), Some(index)) = (&row.array_id, row.array_index) {
                sent.env.insert(ARRAY_ID_VARIABLE.to_string(), array_id.clone());
                sent.env
                    .insert(ARRAY_INDEX_VARIABLE.to_string(), index.to_string());
            }
            if let Some(rank) = row.node_rank {
                let mut tx = crate::store::read(&server.db).await?;
                let rendezvous = Rendezvous {
                    rank,
                    addresses: members::addresses(&mut tx, &row.job_id, row.n).await?,
                    master_port: row.master_port,
                    nproc,
                };
                rendezvous.add_to(&mut sent);
            }
            if shipped {
                sent.folder = crate::jobs::store::folder(&server.db, &row.job_id).await?;
            }
            commands.push(AgentCommand::Dispatch(Box::new(sent)));
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
    commands.extend(cleanups(server, node_id).await?);
    let mut one_shots = server.agents.take_pending(node_id);
    if server.wakes.take_fetch_waiting(node_id) {
        one_shots.extend(crate::nodes::log_relay::claim(&server.db, node_id).await?);
    }
    add_masks(server, &mut one_shots).await?;
    commands.extend(one_shots);
    if !cancelled_before_start.is_empty() || !never_started.is_empty() {
        let now = now_ms();
        let mut tx = crate::store::write(&server.db).await?;
        for (job_id, attempt) in cancelled_before_start {
            lifecycle::cancel_before_start(&mut tx, job_id, attempt, now).await?;
        }
        for (job_id, attempt, rank) in never_started {
            let end = members::MemberEnd {
                status: JobStatus::Cancelled,
                exit_code: None,
                signal: None,
                at: now,
            };
            members::end(&mut tx, job_id, attempt, rank, end).await?;
        }
        tx.commit().await?;
        server.wakes.jobs_changed();
    }
    if !unopenable.is_empty() {
        let report = Report {
            node_id: node_id.to_string(),
            items: unopenable,
        };
        let applied = reports::apply_report(server, &report).await?;
        server.wakes.jobs_changed();
        for node_id in applied.wake_agents {
            server.wakes.wake(crate::wake::Wake::Agent(node_id));
        }
    }
    Ok(commands)
}

fn dispatch(
    server: &Handles,
    job_id: &str,
    attempt: i64,
    run_id: &str,
    spec: JobSpec,
    gpus: Vec<u32>,
    resume: Option<(String, String)>,
) -> Dispatch {
    let visible: Vec<String> = gpus.iter().map(u32::to_string).collect();
    let mut env = BTreeMap::from([
        ("GPUCTL_SERVER".to_string(), server.config.public_url()),
        (
            JOB_TOKEN_VARIABLE.to_string(),
            server.secret.attempt_token(job_id, attempt),
        ),
        ("GPUCTL_JOB_ID".to_string(), job_id.to_string()),
        ("GPUCTL_RUN_ID".to_string(), run_id.to_string()),
        ("GPUCTL_PROJECT".to_string(), spec.project.clone()),
        ("GPUCTL_ATTEMPT".to_string(), attempt.to_string()),
        ("CUDA_VISIBLE_DEVICES".to_string(), visible.join(",")),
    ]);
    if let Some((path, step)) = resume {
        env.insert(RESUME_FROM_VARIABLE.to_string(), path);
        env.insert(RESUME_STEP_VARIABLE.to_string(), step);
    }
    if let Some(dir) = spec.recipe.as_ref().and_then(|recipe| recipe.exp_dir.clone()) {
        env.insert("GPUCTL_EXP_DIR".to_string(), dir);
    }
    // The mlflow client logs into the job's own run (its token is the
    // attempt's, `MLFLOW_TRACKING_TOKEN`, set by the agent), unless the job
    // names an MLflow server of its own.
    let own_mlflow =
        spec.env.contains_key(mlflow::TRACKING_URI) || spec.secret_env.contains_key(mlflow::TRACKING_URI);
    if !own_mlflow {
        env.insert(mlflow::TRACKING_URI.to_string(), server.config.public_url());
        env.insert(mlflow::RUN_ID.to_string(), run_id.to_string());
        env.insert(
            mlflow::EXPERIMENT_ID.to_string(),
            mlflow::experiment_id(&spec.project),
        );
    }
    Dispatch {
        job_id: job_id.to_string(),
        attempt,
        run_id: run_id.to_string(),
        spec,
        gpus,
        env,
        stop_grace_ms: server.config.cancel_grace.as_millis() as u64,
        folder: Vec::new(),
        choose_master_port: false,
    }
}

/// What a member of a multi-node attempt learns of the others: the
/// variables torchrun (`PET_*`), DeepSpeed and Accelerate read. Rank 0's
/// agent chooses `MASTER_PORT` (a free port on its host) before the others
/// are dispatched with it.
struct Rendezvous {
    rank: i64,
    /// Every member's address, in rank order.
    addresses: Vec<String>,
    master_port: Option<i64>,
    /// Processes per node: one per GPU.
    nproc: usize,
}

impl Rendezvous {
    fn add_to(&self, dispatch: &mut Dispatch) {
        let master = self.addresses.first().cloned().unwrap_or_default();
        let nnodes = self.addresses.len().to_string();
        let rank = self.rank.to_string();
        let variables = [
            ("GPUCTL_NODE_RANK", rank.clone()),
            ("GPUCTL_NNODES", nnodes.clone()),
            ("GPUCTL_NODE_ADDRS", self.addresses.join(",")),
            ("MASTER_ADDR", master.clone()),
            ("PET_NNODES", nnodes),
            ("PET_NODE_RANK", rank),
            ("PET_NPROC_PER_NODE", self.nproc.max(1).to_string()),
            ("PET_MASTER_ADDR", master),
        ];
        for (name, value) in variables {
            dispatch.env.insert(name.to_string(), value);
        }
        match self.master_port {
            Some(port) => {
                for name in MASTER_PORT_VARIABLES {
                    dispatch.env.insert(name.to_string(), port.to_string());
                }
            }
            None => dispatch.choose_master_port = true,
        }
    }
}

/// `forget` commands for the jobs whose runs were deleted after they ran
/// on this node; sent until its agent says they are gone.
async fn cleanups(server: &Handles, node_id: &str) -> Result<Vec<AgentCommand>, Error> {
    let jobs: Vec<String> = sql!(&server.db, |pool| {
        sqlx::query_scalar("SELECT job_id FROM attempt_cleanups WHERE node_id = $1 ORDER BY job_id LIMIT 100")
            .bind(node_id)
            .fetch_all(pool)
            .await
    })?;
    Ok(jobs
        .into_iter()
        .map(|job_id| AgentCommand::Forget { job_id })
        .collect())
}

/// The agent removed these jobs' folders: no more `forget` for them.
pub async fn forgotten(server: &Handles, node_id: &str, jobs: &[String]) -> Result<(), Error> {
    if jobs.is_empty() {
        return Ok(());
    }
    let listed = server.db.dialect().json_values("$2");
    let mut tx = crate::store::write(&server.db).await?;
    sql!(tx, |conn| {
        sqlx::query(&format!(
            "DELETE FROM attempt_cleanups WHERE node_id = $1 AND job_id IN (SELECT value FROM {listed})"
        ))
        .bind(node_id)
        .bind(serde_json::to_string(jobs).map_err(anyhow::Error::from)?)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}
