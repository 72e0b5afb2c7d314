//! Maintenance mode: one row that, while it exists, keeps the scheduler from
//! starting anything (running jobs continue) and gives every queued job its
//! reason. Turning it off wakes the scheduler, which dispatches at once.

use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::error::FieldError;
use gpuplane_api::node::Maintenance;

/// The longest message maintenance mode takes.
pub const MAX_MESSAGE_CHARS: usize = 500;

/// Maintenance mode as it is now.
pub async fn current(db: &Db) -> Result<Maintenance, Error> {
    let row: Option<(String, i64, Option<String>)> = sql!(db, |pool| {
        sqlx::query_as("SELECT message, started_at, started_by FROM maintenance WHERE id = 1")
            .fetch_optional(pool)
            .await
    })?;
    Ok(match row {
        Some((message, started_at, by)) => Maintenance {
            on: true,
            message: Some(message),
            since: Some(rfc3339(started_at)),
            by,
        },
        None => Maintenance {
            on: false,
            message: None,
            since: None,
            by: None,
        },
    })
}

/// Turns maintenance mode on (or changes its message); the caller wakes the
/// scheduler after, so queued jobs say why they wait.
pub async fn start(db: &Db, by: Option<&str>, message: &str) -> Result<Maintenance, Error> {
    let message = message.trim();
    if message.is_empty() || message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(Error::Invalid(vec![FieldError {
            field: "message".into(),
            message: format!("say what is happening, in 1 to {MAX_MESSAGE_CHARS} characters"),
        }]));
    }
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO maintenance (id, message, started_at, started_by) VALUES (1, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET message = excluded.message",
        )
        .bind(message)
        .bind(now_ms())
        .bind(by)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    current(db).await
}

/// Turns maintenance mode off; the caller wakes the scheduler after.
pub async fn end(db: &Db) -> Result<Maintenance, Error> {
    sql!(db, |pool| {
        sqlx::query("DELETE FROM maintenance WHERE id = 1")
            .execute(pool)
            .await
            .map(|_| ())
    })?;
    current(db).await
}

/// The reason every queued job carries while maintenance mode is on.
pub fn queued_reason(maintenance: &Maintenance) -> String {
    format!(
        "maintenance: dispatch paused since {}{}: {}",
        maintenance.since.as_deref().unwrap_or("now"),
        maintenance
            .by
            .as_deref()
            .map(|by| format!(" by {by}"))
            .unwrap_or_default(),
        maintenance.message.as_deref().unwrap_or_default()
    )
}
