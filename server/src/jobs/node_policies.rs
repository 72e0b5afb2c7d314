//! Projects' node policies, kept in `projects.node_policy` (server admins
//! set them). What they allow is `node_access`'s; this module reads them for
//! each scheduling pass and each submit, and stores admins' changes.

use crate::jobs::node_access::NodeAccess;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Error, Tx};
use gpuplane_api::error::FieldError;
use gpuplane_api::job::JobSpec;
use gpuplane_api::project::{NodePolicy, ProjectNodePolicy};
use std::collections::HashMap;

/// Every project's policy, by project (those that have one).
pub async fn access(conn: &mut Tx) -> Result<NodeAccess, Error> {
    let rows: Vec<(String, String)> = sql!(conn, |conn| {
        sqlx::query_as("SELECT name, node_policy FROM projects WHERE node_policy IS NOT NULL")
            .fetch_all(conn)
            .await
    })?;
    let policies: HashMap<String, NodePolicy> = rows
        .into_iter()
        .filter_map(|(project, json)| Some((project, serde_json::from_str(&json).ok()?)))
        .collect();
    Ok(NodeAccess::new(policies))
}

/// Passes when a job with `spec` could ever run under its project's policy;
/// else the 422 submit and retry answer (`node_access::NodeAccess::check`).
pub async fn check(conn: &mut Tx, spec: &JobSpec) -> Result<(), Error> {
    access(conn)
        .await?
        .check(&spec.project, spec.runner, &spec.node_selector)
        .map_err(|problem| Error::Invalid(vec![problem]))
}

/// `project`'s policy, if it has one.
pub async fn of_project(db: &Db, project: &str) -> Result<Option<NodePolicy>, Error> {
    let json: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT node_policy FROM projects WHERE name = $1")
            .bind(project)
            .fetch_optional(pool)
            .await
    })?
    .flatten();
    Ok(json.and_then(|json| serde_json::from_str(&json).ok()))
}

/// Every policy, by project name.
pub async fn list(db: &Db) -> Result<Vec<ProjectNodePolicy>, Error> {
    let rows: Vec<(String, String, Option<i64>, Option<String>)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT name, node_policy, node_policy_set_at, node_policy_set_by FROM projects
             WHERE node_policy IS NOT NULL ORDER BY name",
        )
        .fetch_all(pool)
        .await
    })?;
    Ok(rows
        .into_iter()
        .filter_map(|(project, json, at, by)| {
            Some(ProjectNodePolicy {
                project,
                policy: serde_json::from_str(&json).ok()?,
                updated_at: rfc3339(at.unwrap_or_default()),
                updated_by: by,
            })
        })
        .collect())
}

/// What is wrong with a policy an admin gives, field by field.
fn problems(policy: &NodePolicy) -> Vec<FieldError> {
    let mut problems = Vec::new();
    for (key, value) in &policy.labels {
        let problem =
            crate::nodes::label_key_problem(key).or_else(|| crate::nodes::label_value_problem(value));
        if let Some(message) = problem {
            problems.push(FieldError {
                field: format!("labels.{key}"),
                message,
            });
        }
    }
    if policy.runners.is_empty() {
        problems.push(FieldError {
            field: "runners".into(),
            message: "grant at least one runner (process, docker or slurm)".into(),
        });
    }
    problems
}

/// Sets `project`'s policy (replacing any); 404 without such a project.
/// Jobs already running are not stopped; queued ones are placed under it
/// from the next pass.
pub async fn set(
    db: &Db,
    project: &str,
    policy: &NodePolicy,
    by: Option<&str>,
) -> Result<ProjectNodePolicy, Error> {
    let problems = problems(policy);
    if !problems.is_empty() {
        return Err(Error::Invalid(problems));
    }
    let mut policy = policy.clone();
    policy.runners.sort_by_key(|runner| runner.as_str());
    policy.runners.dedup();
    let json = serde_json::to_string(&policy).map_err(anyhow::Error::from)?;
    let now = now_ms();
    if write(db, project, Some((&json, now, by))).await? == 0 {
        return Err(Error::NotFound(format!("no project {project}")));
    }
    Ok(ProjectNodePolicy {
        project: project.to_string(),
        policy,
        updated_at: rfc3339(now),
        updated_by: by.map(str::to_string),
    })
}

/// Removes `project`'s policy: it gets the default (nodes no policy
/// reserves, the process runner). 404 when it has none.
pub async fn clear(db: &Db, project: &str) -> Result<(), Error> {
    if write(db, project, None).await? == 0 {
        return Err(Error::NotFound(format!("project {project} has no node policy")));
    }
    Ok(())
}

/// Writes `project`'s policy (JSON, when, by whom), or removes the one it
/// has; how many projects changed (0: no such project, or none to remove).
async fn write(db: &Db, project: &str, policy: Option<(&str, i64, Option<&str>)>) -> Result<u64, Error> {
    let (json, at, by) = policy.map_or((None, None, None), |(json, at, by)| (Some(json), Some(at), by));
    let only_set = if policy.is_none() {
        " AND node_policy IS NOT NULL"
    } else {
        ""
    };
    let mut tx = crate::store::write(db).await?;
    let changed = sql!(tx, |conn| {
        sqlx::query(&format!(
            "UPDATE projects SET node_policy = $1, node_policy_set_at = $2, node_policy_set_by = $3
             WHERE name = $4{only_set}"
        ))
        .bind(json)
        .bind(at)
        .bind(by)
        .bind(project)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    tx.commit().await?;
    Ok(changed)
}
