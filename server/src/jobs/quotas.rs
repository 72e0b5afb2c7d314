//! Quotas per project and per user (GPUs and running jobs at once), set by
//! server admins. They never refuse a job: the scheduling pass (`plan`)
//! leaves an over-quota job QUEUED with its reason, and it starts once
//! running jobs of its project or user finish or the quota is raised.

use crate::jobs::plan;
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::error::FieldError;
use gpuplane_api::quota::{MAX_QUOTA, Quota, QuotaKind, SetQuota};
use std::collections::HashMap;

/// What each project and each user has DISPATCHING or RUNNING now: (GPUs, jobs).
#[derive(Debug, Default)]
struct Usage {
    projects: HashMap<String, (i64, i64)>,
    users: HashMap<String, (i64, i64)>,
}

async fn usage(db: &Db) -> Result<Usage, Error> {
    let gpus = db.dialect().json_length("a.gpus");
    let rows: Vec<(String, Option<String>, i64, i64)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT j.project, j.submitted_by, CAST(coalesce(sum({gpus}), 0) AS BIGINT), count(*)
         FROM attempts a JOIN jobs j ON j.id = a.job_id
         WHERE a.status IN ('DISPATCHING', 'RUNNING')
         GROUP BY j.project, j.submitted_by"
        ))
        .fetch_all(pool)
        .await
    })?;
    let mut usage = Usage::default();
    for (project, user, gpus, jobs) in rows {
        let entry = usage.projects.entry(project).or_default();
        *entry = (entry.0 + gpus, entry.1 + jobs);
        if let Some(user) = user {
            let entry = usage.users.entry(user).or_default();
            *entry = (entry.0 + gpus, entry.1 + jobs);
        }
    }
    Ok(usage)
}

/// One row of `quotas`, with the user's name for user quotas.
#[derive(sqlx::FromRow)]
struct Row {
    kind: String,
    subject: String,
    name: String,
    max_gpus: Option<i64>,
    max_running_jobs: Option<i64>,
    updated_at: i64,
    updated_by: Option<String>,
}

async fn rows(db: &Db) -> Result<Vec<Row>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT q.kind, q.subject, coalesce(u.name, q.subject) AS name, q.max_gpus, q.max_running_jobs,
                q.updated_at, q.updated_by
         FROM quotas q LEFT JOIN users u ON q.kind = 'user' AND u.id = q.subject
         ORDER BY q.kind, name",
        )
        .fetch_all(pool)
        .await
    })?)
}

/// Every quota with what its project or user has running now.
pub async fn list(db: &Db) -> Result<Vec<Quota>, Error> {
    let rows = rows(db).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let usage = usage(db).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let kind = QuotaKind::parse(&row.kind).unwrap_or(QuotaKind::Project);
            let used = match kind {
                QuotaKind::Project => usage.projects.get(&row.subject),
                QuotaKind::User => usage.users.get(&row.subject),
            };
            let (gpus_in_use, running_jobs) = used.copied().unwrap_or_default();
            Quota {
                kind,
                name: row.name,
                max_gpus: row.max_gpus,
                max_running_jobs: row.max_running_jobs,
                gpus_in_use,
                running_jobs,
                updated_at: rfc3339(row.updated_at),
                updated_by: row.updated_by,
            }
        })
        .collect())
}

/// The quotas as the scheduling pass uses them (empty, and no usage query,
/// when none is set).
pub async fn for_plan(db: &Db) -> Result<plan::Quotas, Error> {
    let rows = rows(db).await?;
    let mut quotas = plan::Quotas::default();
    if rows.is_empty() {
        return Ok(quotas);
    }
    let usage = usage(db).await?;
    let count = |n: i64| n.clamp(0, u32::MAX as i64) as u32;
    for row in rows {
        let (in_use, running) = match row.kind.as_str() {
            "user" => usage.users.get(&row.subject),
            _ => usage.projects.get(&row.subject),
        }
        .copied()
        .unwrap_or_default();
        let quota = plan::Quota {
            label: format!("{} {}", row.kind, row.name),
            max_gpus: row.max_gpus.map(count),
            max_running_jobs: row.max_running_jobs.map(count),
            gpus_in_use: count(in_use),
            running_jobs: count(running),
        };
        match row.kind.as_str() {
            "user" => quotas.users.insert(row.subject, quota),
            _ => quotas.projects.insert(row.subject, quota),
        };
    }
    Ok(quotas)
}

/// The subject a quota is stored under: the project's name, the user's id.
async fn subject(db: &Db, kind: QuotaKind, name: &str) -> Result<String, Error> {
    let text = match kind {
        QuotaKind::Project => "SELECT name FROM projects WHERE name = $1",
        QuotaKind::User => "SELECT id FROM users WHERE name = $1",
    };
    let found: Option<String> = sql!(db, |pool| sqlx::query_scalar(text)
        .bind(name)
        .fetch_optional(pool)
        .await)?;
    found.ok_or_else(|| Error::NotFound(format!("no {kind} named {name}")))
}

/// Sets a quota (replacing its limits); the caller wakes the scheduler.
pub async fn set(
    db: &Db,
    kind: QuotaKind,
    name: &str,
    limits: &SetQuota,
    by: Option<&str>,
) -> Result<Quota, Error> {
    let mut errors = Vec::new();
    for (field, value) in [
        ("max_gpus", limits.max_gpus),
        ("max_running_jobs", limits.max_running_jobs),
    ] {
        if value.is_some_and(|v| !(0..=MAX_QUOTA).contains(&v)) {
            errors.push(FieldError {
                field: field.into(),
                message: format!("must be between 0 and {MAX_QUOTA}"),
            });
        }
    }
    if limits.max_gpus.is_none() && limits.max_running_jobs.is_none() {
        errors.push(FieldError {
            field: "max_gpus".into(),
            message: "give max_gpus, max_running_jobs or both (to remove the quota, DELETE it)".into(),
        });
    }
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let subject = subject(db, kind, name).await?;
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO quotas (kind, subject, max_gpus, max_running_jobs, updated_at, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (kind, subject) DO UPDATE SET max_gpus = excluded.max_gpus,
             max_running_jobs = excluded.max_running_jobs, updated_at = excluded.updated_at,
             updated_by = excluded.updated_by",
        )
        .bind(kind.as_str())
        .bind(&subject)
        .bind(limits.max_gpus)
        .bind(limits.max_running_jobs)
        .bind(now_ms())
        .bind(by)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    find(db, kind, name).await
}

/// Removes a quota; the caller wakes the scheduler.
pub async fn clear(db: &Db, kind: QuotaKind, name: &str) -> Result<(), Error> {
    let subject = subject(db, kind, name).await?;
    let removed = sql!(db, |pool| {
        sqlx::query("DELETE FROM quotas WHERE kind = $1 AND subject = $2")
            .bind(kind.as_str())
            .bind(&subject)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    if removed == 0 {
        return Err(Error::NotFound(format!("{kind} {name} has no quota")));
    }
    Ok(())
}

async fn find(db: &Db, kind: QuotaKind, name: &str) -> Result<Quota, Error> {
    list(db)
        .await?
        .into_iter()
        .find(|quota| quota.kind == kind && quota.name == name)
        .ok_or_else(|| Error::NotFound(format!("{kind} {name} has no quota")))
}
