//! Deliveries: one message for one event on one channel. [`fan_out`]
//! makes them from the events past a stored cursor, in the transaction that
//! moves the cursor on, so no event is skipped or delivered twice over a
//! restart; [`record_try`] keeps how each try went and when the next is due.

use super::subscriptions::{self, EventFacts};
use crate::events::{EVENT_COLUMNS, EventRow};
use crate::store::Db;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::Page;
use gpuplane_api::alert::{Delivery, DeliveryStatus};
use gpuplane_api::event::{Event, EventKind, Severity};
use std::time::Duration;

/// Events read per fan-out transaction.
const BATCH: i64 = 500;

/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

#[derive(sqlx::FromRow)]
struct Pending {
    seq: i64,
    kind: String,
    severity: String,
    project: Option<String>,
    owner: Option<String>,
}

/// Makes the deliveries of the events recorded since the last call and
/// moves the cursor past them. Returns how many events it read: [`BATCH`]
/// means more may wait.
pub async fn fan_out(db: &Db) -> Result<usize, Error> {
    let (cursor, newest): (i64, Option<i64>) = sql!(db, |pool| {
        sqlx::query_as("SELECT (SELECT seq FROM alert_cursor), (SELECT max(seq) FROM events)")
            .fetch_one(pool)
            .await
    })?;
    if newest.is_none_or(|newest| newest <= cursor) {
        return Ok(0);
    }
    let rules = subscriptions::rules(db).await?;
    let mut tx = crate::store::write(db).await?;
    let cursor: i64 = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT seq FROM alert_cursor")
            .fetch_one(conn)
            .await
    })?;
    let events: Vec<Pending> = sql!(tx, |conn| {
        sqlx::query_as(
            "SELECT e.seq, e.kind, e.severity, e.project,
                coalesce((SELECT submitted_by FROM jobs WHERE id = e.job_id),
                         (SELECT created_by FROM runs WHERE id = e.run_id)) AS owner
         FROM events e WHERE e.seq > $1 ORDER BY e.seq LIMIT $2",
        )
        .bind(cursor)
        .bind(BATCH)
        .fetch_all(conn)
        .await
    })?;
    let Some(last) = events.last().map(|event| event.seq) else {
        return Ok(0);
    };
    let now = now_ms();
    for event in &events {
        let (Some(kind), Some(severity)) = (EventKind::parse(&event.kind), Severity::parse(&event.severity))
        else {
            continue;
        };
        let facts = EventFacts {
            kind,
            severity,
            project: event.project.as_deref(),
            owner: event.owner.as_deref(),
        };
        for rule in rules.iter().filter(|rule| rule.receives(&facts)) {
            // One message per channel for an event, whichever subscriptions match.
            sql!(tx, |conn| {
                sqlx::query(
                    "INSERT INTO alert_deliveries (id, subscription_id, channel, project, user_id, event_seq,
                     status, attempts, next_attempt_at, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $8)
                 ON CONFLICT (channel, event_seq) DO NOTHING",
                )
                .bind(new_id("dlv"))
                .bind(&rule.id)
                .bind(&rule.channel)
                .bind(&rule.project)
                .bind(&rule.user_id)
                .bind(event.seq)
                .bind(now)
                .bind(now)
                .execute(conn)
                .await
                .map(|_| ())
            })?;
        }
    }
    sql!(tx, |conn| {
        sqlx::query("UPDATE alert_cursor SET seq = $1")
            .bind(last)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(events.len())
}

/// A delivery whose try is due, with its event.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: String,
    pub channel: String,
    pub attempts: i64,
    pub project: Option<String>,
    /// The name of its job, run or node.
    pub subject: Option<String>,
    pub event: Event,
}

#[derive(sqlx::FromRow)]
struct DueRow {
    id: String,
    channel: String,
    attempts: i64,
    event_project: Option<String>,
    subject: Option<String>,
    #[sqlx(flatten)]
    event: EventRow,
}

/// Pending deliveries due at `now`, oldest due first, at most `limit`.
pub async fn due(db: &Db, now: i64, limit: i64) -> Result<Vec<Due>, Error> {
    let rows: Vec<DueRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
        "SELECT d.id, d.channel, d.attempts, e.project AS event_project,
                coalesce((SELECT name FROM jobs WHERE id = e.job_id), (SELECT name FROM runs WHERE id = e.run_id),
                         (SELECT name FROM nodes WHERE id = e.node_id)) AS subject,
                {EVENT_COLUMNS}
         FROM alert_deliveries d JOIN events e ON e.seq = d.event_seq
         WHERE d.status = 'pending' AND d.next_attempt_at <= $1
         ORDER BY d.next_attempt_at LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(pool)
    .await
    })?;
    rows.into_iter()
        .map(|row| {
            Ok(Due {
                id: row.id,
                channel: row.channel,
                attempts: row.attempts,
                project: row.event_project,
                subject: row.subject,
                event: row.event.into_event()?.1,
            })
        })
        .collect()
}

/// When the next pending delivery is due, if any is.
pub async fn next_due(db: &Db) -> Result<Option<i64>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_scalar("SELECT min(next_attempt_at) FROM alert_deliveries WHERE status = 'pending'")
            .fetch_one(pool)
            .await
    })?)
}

/// How long to wait after the `attempts`-th failed try: `initial`,
/// doubling, at most an hour.
pub fn backoff(initial: Duration, attempts: i64) -> Duration {
    let doublings = attempts.clamp(1, 20) as u32 - 1;
    initial.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// How a try went.
pub enum Outcome {
    Sent,
    /// Failed with this reason; tried again later unless `final_try`.
    Failed {
        error: String,
        final_try: bool,
    },
}

/// Keeps how one try of a delivery went.
pub async fn record_try(
    db: &Db,
    id: &str,
    outcome: &Outcome,
    retry_initial: Duration,
    max_attempts: i64,
) -> Result<(), Error> {
    let now = now_ms();
    match outcome {
        Outcome::Sent => {
            sql!(db, |pool| {
                sqlx::query(
                    "UPDATE alert_deliveries SET status = 'sent', attempts = attempts + 1, sent_at = $1,
                     next_attempt_at = NULL WHERE id = $2",
                )
                .bind(now)
                .bind(id)
                .execute(pool)
                .await
                .map(|_| ())
            })?;
        }
        Outcome::Failed { error, final_try } => {
            let attempts: i64 = sql!(db, |pool| {
                sqlx::query_scalar("SELECT attempts + 1 FROM alert_deliveries WHERE id = $1")
                    .bind(id)
                    .fetch_one(pool)
                    .await
            })?;
            let give_up = *final_try || attempts >= max_attempts;
            let next = (!give_up).then(|| now + backoff(retry_initial, attempts).as_millis() as i64);
            sql!(db, |pool| {
                sqlx::query(
                "UPDATE alert_deliveries SET status = $1, attempts = $2, last_error = $3, next_attempt_at = $4
                 WHERE id = $5",
            )
            .bind(if give_up { "failed" } else { "pending" })
            .bind(attempts)
            .bind(error)
            .bind(next)
            .bind(id)
            .execute(pool)
            .await.map(|_| ())
            })?;
        }
    }
    Ok(())
}

/// Which deliveries a caller may list: all (admins), or those made for
/// subscriptions of these projects or of this user.
pub struct Visibility {
    pub all: bool,
    /// A JSON array of project names.
    pub projects: String,
    pub user_id: Option<String>,
}

/// Filters of the delivery list.
#[derive(Default)]
pub struct Filter {
    pub channel: Option<String>,
    pub status: Option<DeliveryStatus>,
    pub run_id: Option<String>,
    pub job_id: Option<String>,
}

#[derive(sqlx::FromRow)]
struct ListRow {
    delivery_seq: i64,
    id: String,
    channel: String,
    status: String,
    attempts: i64,
    last_error: Option<String>,
    next_attempt_at: Option<i64>,
    sent_at: Option<i64>,
    created_at: i64,
    #[sqlx(flatten)]
    event: EventRow,
}

/// Newest first, `limit` per page, older than the delivery `before`.
pub async fn list(
    db: &Db,
    visibility: &Visibility,
    filter: &Filter,
    limit: i64,
    before: Option<i64>,
) -> Result<Page<Delivery>, Error> {
    let visible_projects = db.dialect().json_values("$2");
    let rows: Vec<ListRow> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT d.seq AS delivery_seq, d.id, d.channel, d.status, d.attempts, d.last_error,
                d.next_attempt_at, d.sent_at, d.created_at, {EVENT_COLUMNS}
         FROM alert_deliveries d JOIN events e ON e.seq = d.event_seq
         WHERE ($1 OR d.project IN (SELECT value FROM {visible_projects}) OR ($3 IS NOT NULL AND d.user_id = $3))
           AND ($4 IS NULL OR d.channel = $4) AND ($5 IS NULL OR d.status = $5)
           AND ($6 IS NULL OR e.run_id = $6) AND ($7 IS NULL OR e.job_id = $7)
           AND ($8 IS NULL OR d.seq < $8)
         ORDER BY d.seq DESC LIMIT $9"
        ))
        .bind(visibility.all)
        .bind(&visibility.projects)
        .bind(&visibility.user_id)
        .bind(&filter.channel)
        .bind(filter.status.map(DeliveryStatus::as_str))
        .bind(&filter.run_id)
        .bind(&filter.job_id)
        .bind(before)
        .bind(limit + 1)
        .fetch_all(pool)
        .await
    })?;
    let (rows, next_before) = crate::paging::split(rows, limit, |row| row.delivery_seq);
    let items = rows
        .into_iter()
        .map(|row| {
            Ok(Delivery {
                id: row.id,
                channel: row.channel,
                status: DeliveryStatus::parse(&row.status).unwrap_or(DeliveryStatus::Pending),
                attempts: row.attempts,
                last_error: row.last_error,
                next_attempt_at: row.next_attempt_at.map(rfc3339),
                sent_at: row.sent_at.map(rfc3339),
                created_at: rfc3339(row.created_at),
                event: row.event.into_event()?.1,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Page { items, next_before })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_initial_wait_up_to_an_hour() {
        let initial = Duration::from_secs(10);
        let waits: Vec<u64> = (1..=12).map(|n| backoff(initial, n).as_secs()).collect();
        assert_eq!(
            waits,
            [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600]
        );
    }
}
