//! Compaction: many small batches (the SDK sends what it has every moment,
//! agents send telemetry every 10 s) leave many small chunks, and a query
//! pays per chunk row. A background task merges a series' chunks by size
//! class — tiny ones first, then small ones, then the full chunks of ingest
//! into chunks of up to [`MERGED_CHUNK_POINTS`] — many series per
//! transaction, so readers see either the old chunks or the new ones, never
//! a mix.

use super::chunk::{CHUNK_POINTS, MERGED_CHUNK_POINTS, RawPoint, decode_points};
use super::{insert_chunks, sort_points};
use crate::state::AppState;
use crate::store::Error;
use sqlx::{SqliteConnection, SqlitePool};
use std::time::Duration;

/// Chunks with fewer points than this count as small.
const SMALL: i64 = (CHUNK_POINTS / 2) as i64;
/// Chunks with fewer points than this are merged once there are enough of
/// them; merged chunks are bigger (a merge of them takes at least 16 × 2,048).
const UNMERGED: i64 = (MERGED_CHUNK_POINTS / 2) as i64;
/// A series is compacted once it has this many chunks of one size class.
const CHUNKS_BEFORE_COMPACTING: i64 = 16;

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
    // One query finds the series that got unmerged chunks and have enough of
    // a size class now (a pass over thousands of telemetry series must not
    // cost a query each).
    let due: Vec<(String, String)> = sqlx::query_as(
        "SELECT run_id, key FROM metric_chunks
         WHERE count < ?5 AND (run_id, key) IN
             (SELECT DISTINCT run_id, key FROM metric_chunks WHERE id > ?1 AND id <= ?2 AND count < ?5)
         GROUP BY run_id, key
         HAVING SUM(count < ?3) >= ?6 OR SUM(count >= ?3 AND count < ?4) >= ?6 OR SUM(count >= ?4) >= ?6",
    )
    .bind(*seen)
    .bind(newest)
    .bind(TINY)
    .bind(SMALL)
    .bind(UNMERGED)
    .bind(CHUNKS_BEFORE_COMPACTING)
    .fetch_all(db)
    .await?;
    *seen = newest;
    let mut compacted = 0;
    if due.is_empty() {
        return Ok(0);
    }
    // Many series per transaction (one commit, not one per series), but
    // short ones: ingest waits while a transaction writes.
    let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
    let mut rewritten = 0;
    for (run_id, key) in &due {
        let mut merged_any = false;
        for (lower, upper) in [(0, TINY), (TINY, SMALL), (SMALL, UNMERGED)] {
            loop {
                let merged = merge(&mut tx, run_id, key, lower, upper).await?;
                if merged == 0 {
                    break;
                }
                merged_any = true;
                rewritten += merged;
                if rewritten >= POINTS_PER_TRANSACTION {
                    tx.commit().await?;
                    tx = db.begin_with("BEGIN IMMEDIATE").await?;
                    rewritten = 0;
                }
            }
        }
        compacted += usize::from(merged_any);
    }
    tx.commit().await?;
    Ok(compacted)
}

/// Chunks below this many points are merged among themselves first; the
/// chunks that makes are merged once there are enough of them. So a point of
/// a chatty series (telemetry, an SDK sending every second) is rewritten a
/// few times on its way to a full chunk, not once per merge.
const TINY: i64 = 64;

/// Points rewritten in one transaction before it commits (tens of milliseconds).
const POINTS_PER_TRANSACTION: usize = 262_144;

/// Chunks merged at once, at most.
const MERGE_AT_MOST: i64 = 64;

/// Merges up to [`MERGE_AT_MOST`] of the series' chunks of `lower..upper`
/// points (the earliest by step) into as few as fit, when it has enough of
/// them, in the caller's transaction; how many points it rewrote.
async fn merge(
    conn: &mut SqliteConnection,
    run_id: &str,
    key: &str,
    lower: i64,
    upper: i64,
) -> Result<usize, Error> {
    let small: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT id, points FROM metric_chunks WHERE run_id = ? AND key = ? AND count >= ? AND count < ?
         ORDER BY step_min, id LIMIT ?",
    )
    .bind(run_id)
    .bind(key)
    .bind(lower)
    .bind(upper)
    .bind(MERGE_AT_MOST)
    .fetch_all(&mut *conn)
    .await?;
    if (small.len() as i64) < CHUNKS_BEFORE_COMPACTING {
        return Ok(0);
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
    insert_chunks(conn, run_id, key, &points, MERGED_CHUNK_POINTS).await?;
    tracing::debug!(
        run_id,
        key,
        chunks = ids.len(),
        points = points.len(),
        "compacted a series"
    );
    Ok(points.len())
}
