//! Events: recorded inside the transaction that caused them, listed with
//! filters, and announced to SSE subscribers after commit.

use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::time::rfc3339;
use gpuplane_api::Page;
use gpuplane_api::event::{Event, EventKind, Severity};
use sqlx::{SqliteConnection, SqlitePool};

/// What an event links to; any may be absent.
#[derive(Debug, Default, Clone, Copy)]
pub struct Links<'a> {
    pub job_id: Option<&'a str>,
    pub run_id: Option<&'a str>,
    pub node_id: Option<&'a str>,
}

/// Records an event; returns its sequence number (the SSE event id).
pub async fn record(
    conn: &mut SqliteConnection,
    time: i64,
    severity: Severity,
    kind: EventKind,
    links: Links<'_>,
    message: &str,
) -> Result<i64, Error> {
    let seq: i64 = sqlx::query_scalar(
        "INSERT INTO events (id, time, severity, kind, job_id, run_id, node_id, message, project)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,
                 coalesce((SELECT project FROM jobs WHERE id = ?5), (SELECT project FROM runs WHERE id = ?6)))
         RETURNING seq",
    )
    .bind(new_id("evt"))
    .bind(time)
    .bind(severity.as_str())
    .bind(kind.as_str())
    .bind(links.job_id)
    .bind(links.run_id)
    .bind(links.node_id)
    .bind(message)
    .fetch_one(&mut *conn)
    .await?;
    match severity {
        Severity::Critical => tracing::warn!(kind = kind.as_str(), ?links, message, "critical event"),
        _ => tracing::info!(kind = kind.as_str(), ?links, message, "event"),
    }
    Ok(seq)
}

#[derive(Debug, Default)]
pub struct Filter {
    pub run_id: Option<String>,
    pub job_id: Option<String>,
    pub severity: Option<Severity>,
    pub kind: Option<EventKind>,
    /// Only events after this sequence number (SSE resume).
    pub after: Option<i64>,
    /// Only events of these projects (JSON array) or of no project (nodes); `None`: all.
    pub projects: Option<String>,
}

#[derive(sqlx::FromRow)]
struct EventRow {
    seq: i64,
    id: String,
    time: i64,
    severity: String,
    kind: String,
    job_id: Option<String>,
    run_id: Option<String>,
    node_id: Option<String>,
    message: String,
}

/// Newest first, `limit` per page, older than `before`.
pub async fn list(
    db: &SqlitePool,
    filter: &Filter,
    limit: i64,
    before: Option<i64>,
) -> Result<Page<Event>, Error> {
    let rows = query(db, filter, limit + 1, before, true).await?;
    let (rows, next_before) = crate::paging::split(rows, limit, |(seq, _)| *seq);
    Ok(Page {
        items: rows.into_iter().map(|(_, event)| event).collect(),
        next_before,
    })
}

/// Oldest first after `filter.after`: what an SSE stream sends next.
pub async fn since(db: &SqlitePool, filter: &Filter, limit: i64) -> Result<Vec<(i64, Event)>, Error> {
    query(db, filter, limit, None, false).await
}

async fn query(
    db: &SqlitePool,
    filter: &Filter,
    limit: i64,
    before: Option<i64>,
    newest_first: bool,
) -> Result<Vec<(i64, Event)>, Error> {
    let order = if newest_first { "DESC" } else { "ASC" };
    let rows: Vec<EventRow> = sqlx::query_as(&format!(
        "SELECT seq, id, time, severity, kind, job_id, run_id, node_id, message FROM events
         WHERE (?1 IS NULL OR run_id = ?1) AND (?2 IS NULL OR job_id = ?2) AND (?3 IS NULL OR severity = ?3)
           AND (?4 IS NULL OR kind = ?4) AND (?5 IS NULL OR seq < ?5) AND (?6 IS NULL OR seq > ?6)
           AND (?8 IS NULL OR project IS NULL OR project IN (SELECT value FROM json_each(?8)))
         ORDER BY seq {order} LIMIT ?7"
    ))
    .bind(&filter.run_id)
    .bind(&filter.job_id)
    .bind(filter.severity.map(Severity::as_str))
    .bind(filter.kind.map(EventKind::as_str))
    .bind(before)
    .bind(filter.after)
    .bind(limit)
    .bind(&filter.projects)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|row| {
            let severity = Severity::parse(&row.severity);
            let kind = EventKind::parse(&row.kind);
            match (severity, kind) {
                (Some(severity), Some(kind)) => Ok((
                    row.seq,
                    Event {
                        id: row.id,
                        time: rfc3339(row.time),
                        severity,
                        kind,
                        job_id: row.job_id,
                        run_id: row.run_id,
                        node_id: row.node_id,
                        message: row.message,
                    },
                )),
                _ => Err(Error::Internal(anyhow::anyhow!(
                    "bad event {} in database",
                    row.id
                ))),
            }
        })
        .collect()
}
