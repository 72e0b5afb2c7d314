//! Events: recorded inside the transaction that caused them, listed with
//! filters, and announced to SSE subscribers after commit.

use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::rfc3339;
use crate::store::{Db, Tx};
use gpuplane_api::Page;
use gpuplane_api::event::{Event, EventKind, Severity};

/// What an event links to; any may be absent.
#[derive(Debug, Default, Clone, Copy)]
pub struct Links<'a> {
    pub job_id: Option<&'a str>,
    pub run_id: Option<&'a str>,
    pub node_id: Option<&'a str>,
}

/// Records an event; returns its sequence number (the SSE event id).
pub async fn record(
    conn: &mut Tx,
    time: i64,
    severity: Severity,
    kind: EventKind,
    links: Links<'_>,
    message: &str,
) -> Result<i64, Error> {
    let seq: i64 = sql!(conn, |conn| {
        sqlx::query_scalar(
            "INSERT INTO events (id, time, severity, kind, job_id, run_id, node_id, message, project)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                 coalesce((SELECT project FROM jobs WHERE id = $5), (SELECT project FROM runs WHERE id = $6)))
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
        .fetch_one(conn)
        .await
    })?;
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

/// The columns an [`EventRow`] reads, from `events` aliased `e` (prefixed,
/// so they can be joined with another table's).
pub const EVENT_COLUMNS: &str = "e.seq AS event_seq, e.id AS event_id, e.time AS event_time,
    e.severity AS event_severity, e.kind AS event_kind, e.job_id AS event_job_id,
    e.run_id AS event_run_id, e.node_id AS event_node_id, e.message AS event_message";

/// One event as read with [`EVENT_COLUMNS`].
#[derive(sqlx::FromRow)]
pub struct EventRow {
    #[sqlx(rename = "event_seq")]
    seq: i64,
    #[sqlx(rename = "event_id")]
    id: String,
    #[sqlx(rename = "event_time")]
    time: i64,
    #[sqlx(rename = "event_severity")]
    severity: String,
    #[sqlx(rename = "event_kind")]
    kind: String,
    #[sqlx(rename = "event_job_id")]
    job_id: Option<String>,
    #[sqlx(rename = "event_run_id")]
    run_id: Option<String>,
    #[sqlx(rename = "event_node_id")]
    node_id: Option<String>,
    #[sqlx(rename = "event_message")]
    message: String,
}

impl EventRow {
    /// Its sequence number and the event.
    pub fn into_event(self) -> Result<(i64, Event), Error> {
        match (Severity::parse(&self.severity), EventKind::parse(&self.kind)) {
            (Some(severity), Some(kind)) => Ok((
                self.seq,
                Event {
                    id: self.id,
                    time: rfc3339(self.time),
                    severity,
                    kind,
                    job_id: self.job_id,
                    run_id: self.run_id,
                    node_id: self.node_id,
                    message: self.message,
                },
            )),
            _ => Err(Error::Internal(anyhow::anyhow!(
                "bad event {} in database",
                self.id
            ))),
        }
    }
}

/// Newest first, `limit` per page, older than `before`.
pub async fn list(db: &Db, filter: &Filter, limit: i64, before: Option<i64>) -> Result<Page<Event>, Error> {
    let rows = query(db, filter, limit + 1, before, true).await?;
    let (rows, next_before) = crate::paging::split(rows, limit, |(seq, _)| *seq);
    Ok(Page {
        items: rows.into_iter().map(|(_, event)| event).collect(),
        next_before,
    })
}

/// A run's newest events of these kinds, newest first.
pub async fn of_run(db: &Db, run_id: &str, kinds: &[EventKind], limit: i64) -> Result<Vec<Event>, Error> {
    let kinds: Vec<&str> = kinds.iter().map(|kind| kind.as_str()).collect();
    let listed = db.dialect().json_values("$2");
    let rows: Vec<EventRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events e
         WHERE run_id = $1 AND kind IN (SELECT value FROM {listed}) ORDER BY seq DESC LIMIT $3"
        ))
        .bind(run_id)
        .bind(serde_json::to_string(&kinds).unwrap_or_else(|_| "[]".into()))
        .bind(limit)
        .fetch_all(pool)
        .await
    })?;
    rows.into_iter()
        .map(|row| row.into_event().map(|(_, event)| event))
        .collect()
}

/// Oldest first after `filter.after`: what an SSE stream sends next.
pub async fn since(db: &Db, filter: &Filter, limit: i64) -> Result<Vec<(i64, Event)>, Error> {
    query(db, filter, limit, None, false).await
}

async fn query(
    db: &Db,
    filter: &Filter,
    limit: i64,
    before: Option<i64>,
    newest_first: bool,
) -> Result<Vec<(i64, Event)>, Error> {
    let order = if newest_first { "DESC" } else { "ASC" };
    let visible_projects = db.dialect().json_values("$8");
    let rows: Vec<EventRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events e
         WHERE ($1 IS NULL OR run_id = $1) AND ($2 IS NULL OR job_id = $2) AND ($3 IS NULL OR severity = $3)
           AND ($4 IS NULL OR kind = $4) AND ($5 IS NULL OR seq < $5) AND ($6 IS NULL OR seq > $6)
           AND ($8 IS NULL OR project IS NULL OR project IN (SELECT value FROM {visible_projects}))
         ORDER BY seq {order} LIMIT $7"
        ))
        .bind(&filter.run_id)
        .bind(&filter.job_id)
        .bind(filter.severity.map(Severity::as_str))
        .bind(filter.kind.map(EventKind::as_str))
        .bind(before)
        .bind(filter.after)
        .bind(limit)
        .bind(&filter.projects)
        .fetch_all(pool)
        .await
    })?;
    rows.into_iter().map(EventRow::into_event).collect()
}

/// The sequence number of the newest event (0 when there is none).
pub async fn latest_seq(db: &Db) -> Result<i64, Error> {
    let seq: Option<i64> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT max(seq) FROM events")
            .fetch_one(pool)
            .await
    })?;
    Ok(seq.unwrap_or(0))
}
