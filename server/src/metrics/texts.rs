//! Texts a run logs at a step (generated samples, prompts): checked and
//! stored with a metric batch, in its transaction, and listed newest step
//! first for the run page's table.

use crate::store::Error;
use crate::store::sql;
use crate::store::{Db, Tx};
use gpuplane_api::metric::Text;

/// The most texts one batch may carry, and the longest text.
pub const MAX_BATCH_TEXTS: usize = 1_000;
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// Stores a validated batch's texts in the caller's transaction.
pub async fn insert(conn: &mut Tx, run_id: &str, texts: &[Text]) -> Result<(), Error> {
    for text in texts {
        sql!(conn, |conn| {
            sqlx::query(
                "INSERT INTO run_texts (run_id, key, step, wall_time, text) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(run_id)
            .bind(&text.key)
            .bind(text.step)
            .bind(text.wall_time)
            .bind(&text.text)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
    }
    Ok(())
}

/// A page of a run's texts (one key, or all), highest step first; among
/// texts at one step the latest logged first. `before` is the cursor the
/// previous page returned.
pub async fn list(
    db: &Db,
    run_id: &str,
    key: Option<&str>,
    before: Option<i64>,
    limit: i64,
) -> Result<(Vec<Text>, Option<i64>), Error> {
    // The cursor is an offset into this order: texts arrive out of step
    // order, so no one column keys it.
    let offset = before.unwrap_or(0);
    let rows: Vec<(String, i64, f64, String)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT key, step, wall_time, text FROM run_texts
         WHERE run_id = $1 AND ($2 IS NULL OR key = $2)
         ORDER BY step DESC, id DESC LIMIT $3 OFFSET $4",
        )
        .bind(run_id)
        .bind(key)
        .bind(limit + 1)
        .bind(offset)
        .fetch_all(pool)
        .await
    })?;
    let more = rows.len() as i64 > limit;
    let texts = rows
        .into_iter()
        .take(limit as usize)
        .map(|(key, step, wall_time, text)| Text {
            key,
            step,
            wall_time,
            text,
        })
        .collect();
    Ok((texts, more.then_some(offset + limit)))
}

/// The keys a run logged texts under, sorted.
pub async fn keys(db: &Db, run_id: &str) -> Result<Vec<String>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_scalar("SELECT DISTINCT key FROM run_texts WHERE run_id = $1 ORDER BY key")
            .bind(run_id)
            .fetch_all(pool)
            .await
    })?)
}
