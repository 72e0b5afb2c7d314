//! Compaction: many small batches (the SDK sends what it has every moment,
//! agents send telemetry every 10 s) leave many small chunks, and a query
//! pays per chunk row. A background task merges series' small chunks, tiny
//! ones first, many series per transaction, so readers see either the old
//! chunks or the new ones, never a mix.

use super::chunk::{CHUNK_POINTS, RawPoint, decode_points};
use super::{insert_chunks, sort_points};
use crate::state::AppState;
use crate::store::Error;
use sqlx::{SqliteConnection, SqlitePool};
use std::time::Duration;

/// Chunks with fewer points than this count as small.
const SMALL: i64 = (CHUNK_POINTS / 2) as i64;
/// A series is compacted once it has this many small chunks.
const SMALL_CHUNKS_BEFORE_COMPACTING: i64 = 16;

/// Runs until shutdown: after ingest (events are recorded with it) and every
/// half minute, compacts the series that got small chunks.
pub async fn run(state: AppState) {
    let mut seen = 0;
    let mut recorded = state.event_recorded.subscribe();
    let mut shutdown = state.shutdown.clone();
    loop {
        if let Err(error) = pass(&state.db, &mut seen).await {
            tracing::warn!(%error, "metric compaction failed; will try again");
        }
        tokio::select! {
            _ = recorded.recv() => {}
            () = tokio::time::sleep(Duration::from_secs(30)) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        // Let a burst of batches land first.
        tokio::select! {
            () = tokio::time::sleep(state.config.compaction_delay) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Compacts every series with a small chunk newer than `seen` (a chunk id)
/// that now has enough small chunks; returns how many series it compacted.
pub async fn pass(db: &SqlitePool, seen: &mut i64) -> Result<usize, Error> {
    let newest: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM metric_chunks")
        .fetch_one(db)
        .await?;
    // One query finds the series that got small chunks and have enough of
    // a size class now (a pass over thousands of telemetry series must not
    // cost a query each).
    let due: Vec<(String, String)> = sqlx::query_as(
        "SELECT run_id, key FROM metric_chunks
         WHERE count < ?4 AND (run_id, key) IN
             (SELECT DISTINCT run_id, key FROM metric_chunks WHERE id > ?1 AND id <= ?2 AND count < ?4)
         GROUP BY run_id, key
         HAVING SUM(count < ?3) >= ?5 OR SUM(count >= ?3) >= ?5",
    )
    .bind(*seen)
    .bind(newest)
    .bind(TINY)
    .bind(SMALL)
    .bind(SMALL_CHUNKS_BEFORE_COMPACTING)
    .fetch_all(db)
    .await?;
    *seen = newest;
    let mut compacted = 0;
    // Many series per transaction: one commit, not one per series.
    for group in due.chunks(SERIES_PER_TRANSACTION) {
        let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
        for (run_id, key) in group {
            let mut merged = false;
            for (lower, upper) in [(0, TINY), (TINY, SMALL)] {
                merged |= merge(&mut tx, run_id, key, lower, upper).await?;
            }
            compacted += usize::from(merged);
        }
        tx.commit().await?;
    }
    Ok(compacted)
}

/// Chunks below this many points are merged among themselves first; the
/// chunks that makes are merged once there are enough of them. So a point of
/// a chatty series (telemetry, an SDK sending every second) is rewritten a
/// few times on its way to a full chunk, not once per merge.
const TINY: i64 = 64;

/// Series compacted in one transaction (a few milliseconds of writing).
const SERIES_PER_TRANSACTION: usize = 64;

/// Merges the series' chunks of `lower..upper` points into as few as fit,
/// when it has enough of them, in the caller's transaction.
async fn merge(
    conn: &mut SqliteConnection,
    run_id: &str,
    key: &str,
    lower: i64,
    upper: i64,
) -> Result<bool, Error> {
    let small: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT id, points FROM metric_chunks WHERE run_id = ? AND key = ? AND count >= ? AND count < ?
         ORDER BY step_min, id",
    )
    .bind(run_id)
    .bind(key)
    .bind(lower)
    .bind(upper)
    .fetch_all(&mut *conn)
    .await?;
    if (small.len() as i64) < SMALL_CHUNKS_BEFORE_COMPACTING {
        return Ok(false);
    }
    let mut points: Vec<RawPoint> = Vec::new();
    let mut ids = Vec::with_capacity(small.len());
    for (id, blob) in &small {
        decode_points(blob, &mut points).map_err(anyhow::Error::from)?;
        ids.push(*id);
    }
    sort_points(&mut points);
    sqlx::query("DELETE FROM metric_chunks WHERE id IN (SELECT value FROM json_each(?))")
        .bind(serde_json::to_string(&ids).map_err(anyhow::Error::from)?)
        .execute(&mut *conn)
        .await?;
    insert_chunks(conn, run_id, key, &points).await?;
    tracing::debug!(
        run_id,
        key,
        chunks = ids.len(),
        points = points.len(),
        "compacted a series"
    );
    Ok(true)
}
