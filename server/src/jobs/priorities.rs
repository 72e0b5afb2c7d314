//! Who may give a job which priority. With preemption on, a priority of
//! `preempt_priority` or more stops other people's running jobs: server
//! admins only. A project's `max_priority` (set by server admins) caps what
//! its members give, so one team cannot put itself ahead of every other
//! forever. A token limited to a project is no server admin here either.

use crate::identity::access::Principal;
use crate::store::sql;
use crate::store::{Db, Error};

/// Passes when `principal` may give a job of `project` this `priority`
/// (at submit, at a change of priority, at a retry that makes a new job).
pub async fn check(
    db: &Db,
    preempt_priority: Option<i64>,
    principal: &Principal,
    project: &str,
    priority: i64,
) -> Result<(), Error> {
    if principal.is_server_admin() {
        return Ok(());
    }
    if let Some(min) = preempt_priority
        && priority >= min
    {
        return Err(Error::Forbidden(format!(
            "priority {priority} may preempt running jobs (preempt_priority is {min}): only admins may set it; \
             use a priority below {min}"
        )));
    }
    match max_priority(db, project).await? {
        Some(max) if priority > max => Err(Error::Forbidden(format!(
            "project {project} allows priorities up to {max} (its max_priority, set by server admins); use {max} \
             or less"
        ))),
        _ => Ok(()),
    }
}

/// A project's priority ceiling, if it has one.
pub async fn max_priority(db: &Db, project: &str) -> Result<Option<i64>, Error> {
    let ceiling: Option<Option<i64>> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT max_priority FROM projects WHERE name = $1")
            .bind(project)
            .fetch_optional(pool)
            .await
    })?;
    Ok(ceiling.flatten())
}

/// Sets (or, with None, removes) a project's priority ceiling.
pub async fn set_max_priority(db: &Db, project: &str, max: Option<i64>) -> Result<(), Error> {
    if let Some(max) = max
        && !gpuplane_api::valid_priority(max)
    {
        return Err(Error::field(
            "max_priority",
            format!("must be within ±{}", gpuplane_api::MAX_I64_SAFE),
        ));
    }
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query("UPDATE projects SET max_priority = $1 WHERE name = $2")
            .bind(max)
            .bind(project)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}
