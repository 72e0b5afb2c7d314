//! Share links of runs (see `gpuplane_api::share`): made by editors, kept
//! as the SHA-256 of their secret, expiring, revocable, and closed while
//! their project forbids them. [`open`] is the one way in through a link,
//! and it records the view.

use crate::identity::credentials::{generate_secret, hash_token};
use crate::store::Db;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::Page;
use gpuplane_api::share::{DEFAULT_SHARE_DAYS, MAX_SHARE_DAYS, ShareLink, ShareView};

/// Every link's secret starts with this, so a leaked one is recognised.
pub const SECRET_PREFIX: &str = "gps_";

const DAY_MS: i64 = 24 * 3600 * 1000;

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    run_id: String,
    created_by: Option<String>,
    created_at: i64,
    expires_at: i64,
    revoked_at: Option<i64>,
    allowed: bool,
    views: i64,
    last_viewed_at: Option<i64>,
}

impl Row {
    fn link(self, now: i64) -> ShareLink {
        ShareLink {
            active: self.allowed && self.revoked_at.is_none() && self.expires_at > now,
            id: self.id,
            run_id: self.run_id,
            created_by: self.created_by,
            created_at: rfc3339(self.created_at),
            expires_at: rfc3339(self.expires_at),
            revoked_at: self.revoked_at.map(rfc3339),
            views: self.views,
            last_viewed_at: self.last_viewed_at.map(rfc3339),
        }
    }
}

const SELECT: &str = "SELECT s.id, s.run_id, s.created_by, s.created_at, s.expires_at, s.revoked_at,
        p.share_links AS allowed,
        (SELECT count(*) FROM share_views v WHERE v.share_id = s.id) AS views,
        (SELECT max(time) FROM share_views v WHERE v.share_id = s.id) AS last_viewed_at
    FROM share_links s JOIN runs r ON r.id = s.run_id JOIN projects p ON p.name = r.project";

/// Makes a link to `run_id` lasting `days` (default 7, at most 90); answers
/// the link and its secret, which is not kept.
pub async fn create(
    db: &Db,
    run_id: &str,
    days: Option<u32>,
    by: Option<&str>,
) -> Result<(ShareLink, String), Error> {
    let days = days.unwrap_or(DEFAULT_SHARE_DAYS);
    if !(1..=MAX_SHARE_DAYS).contains(&days) {
        return Err(Error::field(
            "expires_in_days",
            format!("a link lasts 1 to {MAX_SHARE_DAYS} days"),
        ));
    }
    let (project, allowed): (String, bool) = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT p.name, p.share_links FROM runs r JOIN projects p ON p.name = r.project WHERE r.id = $1",
        )
        .bind(run_id)
        .fetch_optional(pool)
        .await
    })?
    .ok_or_else(|| Error::NotFound(format!("no run {run_id}")))?;
    if !allowed {
        return Err(Error::Forbidden(format!(
            "project {project} does not allow share links (its admins can allow them)"
        )));
    }
    let secret = generate_secret(SECRET_PREFIX);
    let id = new_id("shr");
    let now = now_ms();
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO share_links (id, secret_hash, run_id, created_by, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(hash_token(&secret))
        .bind(run_id)
        .bind(by)
        .bind(now)
        .bind(now + i64::from(days) * DAY_MS)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok((get(db, run_id, &id).await?, secret))
}

/// One link of `run_id`, or 404.
pub async fn get(db: &Db, run_id: &str, id: &str) -> Result<ShareLink, Error> {
    let row: Option<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!("{SELECT} WHERE s.id = $1 AND s.run_id = $2"))
            .bind(id)
            .bind(run_id)
            .fetch_optional(pool)
            .await
    })?;
    Ok(row
        .ok_or_else(|| Error::NotFound(format!("no share link {id} of run {run_id}")))?
        .link(now_ms()))
}

/// The run's links, newest first.
pub async fn list(db: &Db, run_id: &str) -> Result<Vec<ShareLink>, Error> {
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "{SELECT} WHERE s.run_id = $1 ORDER BY s.created_at DESC, s.id DESC"
        ))
        .bind(run_id)
        .fetch_all(pool)
        .await
    })?;
    let now = now_ms();
    Ok(rows.into_iter().map(|row| row.link(now)).collect())
}

/// Revokes a link: it never opens again. Revoking twice changes nothing.
pub async fn revoke(db: &Db, run_id: &str, id: &str) -> Result<ShareLink, Error> {
    sql!(db, |pool| {
        sqlx::query(
            "UPDATE share_links SET revoked_at = $1 WHERE id = $2 AND run_id = $3 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .bind(run_id)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    get(db, run_id, id).await
}

/// The requests made through a link, newest first.
pub async fn views(db: &Db, id: &str, limit: i64, before: Option<i64>) -> Result<Page<ShareView>, Error> {
    let rows: Vec<ViewRow> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT id, time, what, address, user_agent FROM share_views
         WHERE share_id = $1 AND ($2 IS NULL OR id < $3) ORDER BY id DESC LIMIT $4",
        )
        .bind(id)
        .bind(before)
        .bind(before)
        .bind(limit + 1)
        .fetch_all(pool)
        .await
    })?;
    let (rows, next_before) = crate::paging::split(rows, limit, |row| row.id);
    Ok(Page {
        items: rows
            .into_iter()
            .map(|row| ShareView {
                time: rfc3339(row.time),
                what: row.what,
                address: row.address,
                user_agent: row.user_agent,
            })
            .collect(),
        next_before,
    })
}

#[derive(sqlx::FromRow)]
struct ViewRow {
    id: i64,
    time: i64,
    what: String,
    address: Option<String>,
    user_agent: Option<String>,
}

/// What a link opens onto.
#[derive(Debug, Clone)]
pub struct Opened {
    pub run_id: String,
    pub created_by: Option<String>,
    pub expires_at: i64,
}

/// Who fetched what through a link, to record.
pub struct Visit<'a> {
    pub what: &'a str,
    pub address: Option<String>,
    pub user_agent: Option<&'a str>,
}

/// The run a link's secret opens, recording the visit. An unknown secret,
/// an expired or revoked link, one of a project that forbids links and one
/// a disabled user made all answer the same "not found".
pub async fn open(db: &Db, secret: &str, visit: Visit<'_>) -> Result<Opened, Error> {
    let not_found = || Error::NotFound("this link does not exist, has expired or was revoked".into());
    if !secret.starts_with(SECRET_PREFIX) || secret.len() > 100 {
        return Err(not_found());
    }
    let now = now_ms();
    let found: Option<(String, String, Option<String>, i64)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT s.id, s.run_id, s.created_by, s.expires_at
         FROM share_links s JOIN runs r ON r.id = s.run_id JOIN projects p ON p.name = r.project
         WHERE s.secret_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2 AND p.share_links = TRUE
           AND NOT EXISTS (SELECT 1 FROM users u WHERE u.name = s.created_by AND u.disabled_at IS NOT NULL)",
        )
        .bind(hash_token(secret))
        .bind(now)
        .fetch_optional(pool)
        .await
    })?;
    let (id, run_id, created_by, expires_at) = found.ok_or_else(not_found)?;
    let user_agent = visit
        .user_agent
        .map(|agent| agent.chars().take(200).collect::<String>());
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO share_views (share_id, time, what, address, user_agent) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&id)
        .bind(now)
        .bind(visit.what)
        .bind(visit.address)
        .bind(user_agent)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok(Opened {
        run_id,
        created_by,
        expires_at,
    })
}

/// Whether a project allows share links; `allow` sets it.
pub async fn set_allowed(db: &Db, project: &str, allow: bool) -> Result<(), Error> {
    sql!(db, |pool| {
        sqlx::query("UPDATE projects SET share_links = $1 WHERE name = $2")
            .bind(allow)
            .bind(project)
            .execute(pool)
            .await
            .map(|_| ())
    })?;
    Ok(())
}
