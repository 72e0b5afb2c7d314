//! Job arrays (`job_arrays`): one submission with `array = "0-99%8"`
//! stores a task per index, each an ordinary QUEUED job of the array's
//! project with its own run, carrying the array's id and its index
//! (`GPUCTL_ARRAY_INDEX` at dispatch). The scheduler keeps to the `%` limit
//! as to a quota ([`add_limits`]); the tasks are listed, shown and
//! cancelled together (`/api/v1/arrays/{id}`) or one by one as jobs.

use crate::identity::access::{self, Principal};
use crate::identity::secrets::SecretKey;
use crate::jobs::cancel::{self, Cancelled};
use crate::jobs::plan::{ArrayLimit, QueuedJob, Quotas};
use crate::jobs::store;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Error};
use gpuplane_api::array::{ArraySpec, INDEX_PLACEHOLDER, JobArray};
use gpuplane_api::job::JobSpec;
use gpuplane_api::project::Role;
use std::collections::{BTreeMap, HashSet};

/// Stores a validated spec with `array` as an array and a QUEUED task per
/// index, in one transaction; returns the first task's job id.
pub async fn submit(
    db: &Db,
    secret: &SecretKey,
    spec: &JobSpec,
    principal: &Principal,
) -> Result<String, Error> {
    let text = spec.array.clone().unwrap_or_default();
    let parsed: ArraySpec = text
        .parse()
        .map_err(|message: String| Error::field("array", message))?;
    store::check_references(db, spec, principal).await?;
    let array_id = new_id("arr");
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query(
            "INSERT INTO job_arrays (id, project, name, indices, tasks, max_running, submitted_by, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&array_id)
        .bind(&spec.project)
        .bind(&spec.name)
        .bind(&text)
        .bind(parsed.indices.len() as i64)
        .bind(parsed.limit.map(i64::from))
        .bind(principal.user_id.as_deref())
        .bind(now_ms())
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    let mut first = None;
    for &index in &parsed.indices {
        let task = task_spec(spec, index);
        let job_id = store::insert(&mut tx, secret, &task, principal.user_id.as_deref()).await?;
        sql!(tx, |conn| {
            sqlx::query("UPDATE jobs SET array_id = $1, array_index = $2 WHERE id = $3")
                .bind(&array_id)
                .bind(i64::from(index))
                .bind(&job_id)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
        first.get_or_insert(job_id);
    }
    tx.commit().await?;
    first.ok_or_else(|| Error::field("array", "names no task"))
}

/// One task's spec: the array's, without `array`, its index in the command.
fn task_spec(spec: &JobSpec, index: u32) -> JobSpec {
    let mut task = spec.clone();
    task.array = None;
    let index = index.to_string();
    for argument in &mut task.command {
        if argument.contains(INDEX_PLACEHOLDER) {
            *argument = argument.replace(INDEX_PLACEHOLDER, &index);
        }
    }
    task
}

#[derive(sqlx::FromRow)]
struct ArrayRow {
    id: String,
    project: String,
    name: String,
    indices: String,
    tasks: i64,
    max_running: Option<i64>,
    submitted_by: Option<String>,
    created_at: i64,
}

/// An array the principal may see with at least `needed`; another
/// project's is "not found", like one that does not exist.
pub async fn get_for(
    db: &Db,
    principal: &Principal,
    array_id: &str,
    needed: Role,
) -> Result<JobArray, Error> {
    let not_found = || Error::NotFound(format!("no job array {array_id}"));
    let row: Option<ArrayRow> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT a.id, a.project, a.name, a.indices, a.tasks, a.max_running, u.name AS submitted_by, a.created_at
             FROM job_arrays a LEFT JOIN users u ON u.id = a.submitted_by WHERE a.id = $1",
        )
        .bind(array_id)
        .fetch_optional(pool)
        .await
    })?;
    let row = row.ok_or_else(not_found)?;
    access::require(db, principal, &row.project, needed, not_found).await?;
    let states: Vec<(String, i64)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT status, count(*) FROM jobs WHERE array_id = $1 GROUP BY status ORDER BY status",
        )
        .bind(array_id)
        .fetch_all(pool)
        .await
    })?;
    let count = |n: i64| n.clamp(0, u32::MAX as i64) as u32;
    Ok(JobArray {
        id: row.id,
        name: row.name,
        project: row.project,
        array: row.indices,
        tasks: count(row.tasks),
        limit: row.max_running.map(count),
        states: states
            .into_iter()
            .map(|(state, n)| (state, count(n)))
            .collect::<BTreeMap<_, _>>(),
        submitted_by: row.submitted_by,
        created_at: rfc3339(row.created_at),
    })
}

/// Cancels every task of the array that has not ended (the caller checked
/// the principal is an editor of its project); returns how many, and the
/// nodes whose agents must stop one.
pub async fn cancel(db: &Db, array_id: &str) -> Result<(u32, Vec<String>), Error> {
    let open: Vec<String> = sql!(db, |pool| {
        sqlx::query_scalar(
            "SELECT id FROM jobs WHERE array_id = $1 AND status IN ('QUEUED', 'DISPATCHING', 'RUNNING')
             ORDER BY array_index",
        )
        .bind(array_id)
        .fetch_all(pool)
        .await
    })?;
    let mut cancelled = 0;
    let mut stopping = Vec::new();
    for job_id in open {
        match cancel::cancel(db, &job_id).await {
            Ok(Cancelled::Now) => cancelled += 1,
            Ok(Cancelled::Stopping { node_ids }) => {
                cancelled += 1;
                stopping.extend(node_ids);
            }
            // It ended meanwhile.
            Err(Error::Conflict(_)) => {}
            Err(error) => return Err(error),
        }
    }
    stopping.sort();
    stopping.dedup();
    Ok((cancelled, stopping))
}

/// Adds the `%` limits of the arrays that have tasks in `queue`, with how
/// many of their tasks hold a node now; no query when none has.
pub async fn add_limits(db: &Db, queue: &[QueuedJob], quotas: &mut Quotas) -> Result<(), Error> {
    let ids: HashSet<&str> = queue.iter().filter_map(|job| job.array.as_deref()).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let ids = serde_json::to_string(&ids).map_err(anyhow::Error::from)?;
    let listed = db.dialect().json_values("$1");
    let limits: Vec<(String, i64, i64)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT a.id, a.max_running,
                    (SELECT count(*) FROM jobs t WHERE t.array_id = a.id AND t.status IN ('DISPATCHING', 'RUNNING'))
             FROM job_arrays a WHERE a.id IN (SELECT value FROM {listed}) AND a.max_running IS NOT NULL"
        ))
        .bind(ids)
        .fetch_all(pool)
        .await
    })?;
    let count = |n: i64| n.clamp(0, u32::MAX as i64) as u32;
    for (id, max_running, running) in limits {
        quotas.arrays.insert(
            id,
            ArrayLimit {
                max_running: count(max_running),
                running: count(running),
            },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_gets_its_index_in_the_command_and_no_array() {
        let mut spec = JobSpec::new(
            "sweep",
            vec![
                "python".into(),
                "train.py".into(),
                "--shard=${GPUCTL_ARRAY_INDEX}".into(),
                "${HOME}".into(),
            ],
        );
        spec.array = Some("0-3".into());
        let task = task_spec(&spec, 2);
        assert_eq!(task.command, ["python", "train.py", "--shard=2", "${HOME}"]);
        assert_eq!(task.array, None);
    }
}
