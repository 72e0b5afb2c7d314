//! Alerts a run raises itself (`POST /runs/{id}/alerts`, the SDK's
//! `run.alert`): a RUN_ALERT event, unless the same title was raised within
//! the caller's wait. Alert rules then deliver it like any event.

use crate::events::{self, Links};
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use gpuplane_api::event::{EventKind, Severity};

/// Records the run's alert `message` titled `title` and returns its event's
/// id; `None` when an alert with that title was recorded within `wait_s`.
pub async fn raise(
    db: &Db,
    run_id: &str,
    level: Severity,
    title: &str,
    message: &str,
    wait_s: u32,
) -> Result<Option<String>, Error> {
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    if wait_s > 0 {
        let recent: Option<i32> = sql!(tx, |conn| {
            sqlx::query_scalar(
                "SELECT 1 FROM events WHERE run_id = $1 AND kind = $2 AND time > $3
               AND (message = $4 OR message LIKE $5 ESCAPE '\\') LIMIT 1",
            )
            .bind(run_id)
            .bind(EventKind::RunAlert.as_str())
            .bind(now - i64::from(wait_s) * 1000)
            .bind(title)
            .bind(format!("{}: %", like_escaped(title)))
            .fetch_optional(conn)
            .await
        })?;
        if recent.is_some() {
            return Ok(None);
        }
    }
    let job_id = super::lifecycle::job_of(&mut tx, run_id).await?;
    let links = Links {
        job_id: job_id.as_deref(),
        run_id: Some(run_id),
        node_id: None,
    };
    let seq = events::record(&mut tx, now, level, EventKind::RunAlert, links, message).await?;
    let event_id: String = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT id FROM events WHERE seq = $1")
            .bind(seq)
            .fetch_one(conn)
            .await
    })?;
    tx.commit().await?;
    Ok(Some(event_id))
}

/// `text` with LIKE's wildcards escaped by `\`.
fn like_escaped(text: &str) -> String {
    text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}
