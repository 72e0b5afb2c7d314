//! Compaction: many small batches (the SDK sends what it has every moment)
//! leave many small chunks, and a query pays per chunk row. A background
//! task merges a series' small chunks into full ones, in one transaction,
//! so readers see either the old chunks or the new ones, never a mix.

use super::chunk::{CHUNK_POINTS, RawPoint, decode_points};
use super::{insert_chunks, sort_points};
use crate::state::AppState;
use crate::store::Error;
use sqlx::SqlitePool;
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
    let touched: Vec<(String, String)> = sqlx::query_as(
        "SELECT DISTINCT run_id, key FROM metric_chunks WHERE id > ? AND id <= ? AND count < ?",
    )
    .bind(*seen)
    .bind(newest)
    .bind(SMALL)
    .fetch_all(db)
    .await?;
    *seen = newest;
    let mut compacted = 0;
    for (run_id, key) in touched {
        if compact_series(db, &run_id, &key).await? {
            compacted += 1;
        }
    }
    Ok(compacted)
}

/// Merges the series' small chunks into full ones when it has enough of them.
pub async fn compact_series(db: &SqlitePool, run_id: &str, key: &str) -> Result<bool, Error> {
    // A plain read first: most looks find nothing to do and take no write lock.
    let small: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM metric_chunks WHERE run_id = ? AND key = ? AND count < ?")
            .bind(run_id)
            .bind(key)
            .bind(SMALL)
            .fetch_one(db)
            .await?;
    if small < SMALL_CHUNKS_BEFORE_COMPACTING {
        return Ok(false);
    }
    let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
    let small: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT id, points FROM metric_chunks WHERE run_id = ? AND key = ? AND count < ? ORDER BY step_min, id",
    )
    .bind(run_id)
    .bind(key)
    .bind(SMALL)
    .fetch_all(&mut *tx)
    .await?;
    if (small.len() as i64) < SMALL_CHUNKS_BEFORE_COMPACTING {
        return Ok(false);
    }
    let mut points: Vec<RawPoint> = Vec::new();
    let mut ids = Vec::with_capacity(small.len());
    for (id, blob) in &small {
        decode_points(blob, &mut points);
        ids.push(*id);
    }
    sort_points(&mut points);
    sqlx::query("DELETE FROM metric_chunks WHERE id IN (SELECT value FROM json_each(?))")
        .bind(serde_json::to_string(&ids).map_err(anyhow::Error::from)?)
        .execute(&mut *tx)
        .await?;
    insert_chunks(&mut tx, run_id, key, &points).await?;
    tx.commit().await?;
    tracing::debug!(
        run_id,
        key,
        chunks = ids.len(),
        points = points.len(),
        "compacted a series"
    );
    Ok(true)
}
