//! Projects: creating them, what one looks like to a member, and its
//! members. Removing a member takes, in the same transaction, what they
//! could still reach the project through: their tokens limited to it
//! (revoked), their share links of its runs (revoked) and the alert
//! subscriptions they made for its events (deleted). Their tokens that are
//! not limited to it simply stop seeing it.

use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use gpuplane_api::error::FieldError;
use gpuplane_api::project::{IdleAction, Membership, Project, Role};

/// Every project's name, in order.
pub async fn all_names(db: &Db) -> Result<Vec<String>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_scalar("SELECT name FROM projects ORDER BY name")
            .fetch_all(pool)
            .await
    })?)
}

/// Whether a project of that name exists.
pub async fn exists(db: &Db, name: &str) -> Result<bool, Error> {
    let found: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT name FROM projects WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await
    })?;
    Ok(found.is_some())
}

/// Creates a project (409 if one has the name), with `admin` as its admin
/// when a user creates it.
pub async fn create(db: &Db, name: &str, admin: Option<&str>) -> Result<(), Error> {
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    let inserted = sql!(tx, |conn| {
        sqlx::query("INSERT INTO projects (name, created_at) VALUES ($1, $2)")
            .bind(name)
            .bind(now)
            .execute(conn)
            .await
            .map(|_| ())
    });
    match inserted.map_err(Error::from) {
        Err(Error::Conflict(_)) => return Err(Error::Conflict(format!("project {name} already exists"))),
        other => other?,
    }
    if let Some(user_id) = admin {
        sql!(tx, |conn| {
            sqlx::query(
                "INSERT INTO project_members (project, user_id, role, added_at) VALUES ($1, $2, 'admin', $3)",
            )
            .bind(name)
            .bind(user_id)
            .bind(now)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
    }
    tx.commit().await?;
    Ok(())
}

/// A project as a member with `role` sees it.
pub async fn project(db: &Db, name: String, role: Role) -> Result<Project, Error> {
    let settings: Option<(bool, String)> = sql!(db, |pool| {
        sqlx::query_as("SELECT share_links, idle_action FROM projects WHERE name = $1")
            .bind(&name)
            .fetch_optional(pool)
            .await
    })?;
    let (share_links, idle_action) = settings.unwrap_or((true, String::new()));
    Ok(Project {
        primary_metric: crate::runs::primary::of_project(db, &name).await?,
        max_priority: crate::jobs::priorities::max_priority(db, &name).await?,
        node_policy: crate::jobs::node_policies::of_project(db, &name).await?,
        name,
        role,
        share_links,
        idle_action: IdleAction::parse(&idle_action).unwrap_or_default(),
    })
}

/// Sets what happens to the project's jobs whose GPUs sit idle.
pub async fn set_idle_action(db: &Db, project: &str, action: IdleAction) -> Result<(), Error> {
    sql!(db, |pool| {
        sqlx::query("UPDATE projects SET idle_action = $1 WHERE name = $2")
            .bind(action.as_str())
            .bind(project)
            .execute(pool)
            .await
            .map(|_| ())
    })?;
    Ok(())
}

/// Adds the user named in `membership` to the project, or changes their
/// role; a name no user has is a 422 on `user`.
pub async fn set_member(db: &Db, project: &str, membership: &Membership) -> Result<(), Error> {
    let user_id: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT id FROM users WHERE name = $1")
            .bind(&membership.user)
            .fetch_optional(pool)
            .await
    })?;
    let user_id = user_id.ok_or_else(|| {
        Error::Invalid(vec![FieldError {
            field: "user".into(),
            message: format!("no user named `{}`", membership.user),
        }])
    })?;
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO project_members (project, user_id, role, added_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (project, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(project)
        .bind(&user_id)
        .bind(membership.role.as_str())
        .bind(now_ms())
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// The project's members and their roles, by user name.
pub async fn members(db: &Db, project: &str) -> Result<Vec<Membership>, Error> {
    let rows: Vec<(String, String)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT u.name, m.role FROM project_members m JOIN users u ON u.id = m.user_id
         WHERE m.project = $1 ORDER BY u.name",
        )
        .bind(project)
        .fetch_all(pool)
        .await
    })?;
    Ok(rows
        .into_iter()
        .filter_map(|(user, role)| {
            Some(Membership {
                user,
                role: Role::parse(&role)?,
            })
        })
        .collect())
}

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
