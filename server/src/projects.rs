//! Projects' members leaving. Removing a member takes, in the same
//! transaction, what they could still reach the project through: their
//! tokens limited to it (revoked), their share links of its runs (revoked)
//! and the alert subscriptions they made for its events (deleted). Their
//! tokens that are not limited to it simply stop seeing it.

use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use gpuplane_api::project::Role;

/// What removing a member took with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// The role they had.
    pub role: Role,
    pub tokens: u64,
    pub share_links: u64,
    pub subscriptions: u64,
}

impl Removed {
    /// For the audit log: `ada (editor); revoked 1 token, 2 share links, 0 subscriptions`.
    pub fn describe(&self, user: &str) -> String {
        format!(
            "removed {user} (was {}); revoked {} token(s) limited to it, {} share link(s) of its runs, {} alert \
             subscription(s)",
            self.role.as_str(),
            self.tokens,
            self.share_links,
            self.subscriptions
        )
    }
}

/// Removes `user` from `project`; a project's last admin stays (409), and
/// someone who is no member answers 404.
pub async fn remove_member(db: &Db, project: &str, user: &str) -> Result<Removed, Error> {
    let not_member = || Error::NotFound(format!("{user} is not a member of project {project}"));
    let mut tx = crate::store::write(db).await?;
    let member: Option<(String, String)> = sql!(tx, |conn| {
        sqlx::query_as(
            "SELECT u.id, m.role FROM project_members m JOIN users u ON u.id = m.user_id
             WHERE m.project = $1 AND u.name = $2",
        )
        .bind(project)
        .bind(user)
        .fetch_optional(conn)
        .await
    })?;
    let (user_id, role) = member.ok_or_else(not_member)?;
    let role: Role = role
        .parse()
        .map_err(|e: String| Error::Internal(anyhow::anyhow!(e)))?;
    if role == Role::Admin {
        let admins: i64 = sql!(tx, |conn| {
            sqlx::query_scalar("SELECT count(*) FROM project_members WHERE project = $1 AND role = 'admin'")
                .bind(project)
                .fetch_one(conn)
                .await
        })?;
        if admins <= 1 {
            return Err(Error::Conflict(format!(
                "{user} is the last admin of project {project}: make another member its admin first"
            )));
        }
    }
    sql!(tx, |conn| {
        sqlx::query("DELETE FROM project_members WHERE project = $1 AND user_id = $2")
            .bind(project)
            .bind(&user_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    let now = now_ms();
    let revoked = [
        "UPDATE api_tokens SET revoked_at = $3 WHERE project = $1 AND user_id = $2 AND revoked_at IS NULL",
        "UPDATE share_links SET revoked_at = $3 WHERE revoked_at IS NULL
           AND created_by = (SELECT name FROM users WHERE id = $2)
           AND run_id IN (SELECT id FROM runs WHERE project = $1)",
    ];
    let mut counts = Vec::new();
    for statement in revoked {
        let done = sql!(tx, |conn| {
            sqlx::query(statement)
                .bind(project)
                .bind(&user_id)
                .bind(now)
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        counts.push(done);
    }
    let subscriptions = sql!(tx, |conn| {
        sqlx::query(
            "DELETE FROM alert_subscriptions WHERE project = $1
               AND created_by = (SELECT name FROM users WHERE id = $2)",
        )
        .bind(project)
        .bind(&user_id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    tx.commit().await?;
    Ok(Removed {
        role,
        tokens: counts[0],
        share_links: counts[1],
        subscriptions,
    })
}
