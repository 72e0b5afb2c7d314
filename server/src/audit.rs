//! The audit log: who did what, when and from where. Every admin action
//! (maintenance, drain, quotas, projects and members, users, agent tokens)
//! and every change to a job's place in the queue (cancel, retry, priority,
//! hold, release) is recorded once it has succeeded, whichever way it came:
//! the API (and so gpuctl and MCP), the console, or `gpuplane-server admin`
//! on the host. Server admins read it (`GET /api/v1/audit`).

use crate::identity::access::Caller;
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::Page;
use gpuplane_api::audit::{AuditAction, AuditEntry};
use std::net::IpAddr;

/// Who acted, and from where.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The user's name; `token NAME` for a token without a user.
    pub name: String,
    pub user_id: Option<String>,
    /// The token's name; `session` for the console; none on the host.
    pub token: Option<String>,
    pub address: Option<IpAddr>,
}

impl Actor {
    /// The caller of an API request.
    pub fn of(caller: &Caller) -> Actor {
        Actor {
            name: caller
                .user_name
                .clone()
                .unwrap_or_else(|| format!("token {}", caller.token_name)),
            user_id: caller.user_id.clone(),
            token: Some(caller.token_name.clone()),
            address: caller.address,
        }
    }

    /// `gpuplane-server admin …` on the server's host (whoever can read the data dir).
    pub fn server_cli() -> Actor {
        Actor {
            name: "server CLI".to_string(),
            user_id: None,
            token: None,
            address: None,
        }
    }
}

/// Records that `actor` did `action` to `target`.
pub async fn record(
    db: &Db,
    actor: &Actor,
    action: AuditAction,
    target: &str,
    detail: &str,
) -> Result<(), Error> {
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO audit_log (time, actor, user_id, token, address, action, target, detail)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(now_ms())
        .bind(&actor.name)
        .bind(&actor.user_id)
        .bind(&actor.token)
        .bind(actor.address.map(|address| address.to_string()))
        .bind(action.as_str())
        .bind(target)
        .bind(detail)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// Records that the caller of an API request did `action` to `target`.
pub async fn by_caller(
    db: &Db,
    caller: &Caller,
    action: AuditAction,
    target: &str,
    detail: &str,
) -> Result<(), Error> {
    record(db, &Actor::of(caller), action, target, detail).await
}

/// What to list: each `None` matches everything.
#[derive(Debug, Default)]
pub struct Filter {
    pub actor: Option<String>,
    pub action: Option<AuditAction>,
    pub target: Option<String>,
}

/// Entries, newest first.
pub async fn list(
    db: &Db,
    filter: &Filter,
    limit: i64,
    before: Option<i64>,
) -> Result<Page<AuditEntry>, Error> {
    type Row = (
        i64,
        i64,
        String,
        Option<String>,
        Option<String>,
        String,
        String,
        String,
    );
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT seq, time, actor, token, address, action, target, detail FROM audit_log
         WHERE ($1 IS NULL OR actor = $1) AND ($2 IS NULL OR action = $2) AND ($3 IS NULL OR target = $3)
           AND ($4 IS NULL OR seq < $4)
         ORDER BY seq DESC LIMIT $5",
        )
        .bind(&filter.actor)
        .bind(filter.action.map(AuditAction::as_str))
        .bind(&filter.target)
        .bind(before)
        .bind(limit + 1)
        .fetch_all(pool)
        .await
    })?;
    let (rows, next_before) = crate::paging::split(rows, limit, |row| row.0);
    let items = rows
        .into_iter()
        .filter_map(|(seq, time, actor, token, address, action, target, detail)| {
            Some(AuditEntry {
                seq,
                time: rfc3339(time),
                actor,
                token,
                address,
                action: AuditAction::parse(&action)?,
                target,
                detail,
            })
        })
        .collect();
    Ok(Page { items, next_before })
}
