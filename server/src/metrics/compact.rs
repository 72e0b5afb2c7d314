//! Compaction: many small batches (the SDK sends what it has every moment,
//! agents send telemetry every 10 s) leave many small chunks, and a query
//! pays per chunk row. A background task merges a series' chunks by size
//! class — tiny ones first, then small ones, then the full chunks of ingest
//! into chunks of up to [`MERGED_CHUNK_POINTS`]. Merges are read, decoded
//! and re-encoded outside any write transaction, then applied many series
//! per transaction, so ingest waits for the write lock only while rows are
//! swapped, and readers see either the old chunks or the new ones, never a
//! mix.

use super::chunk::{CHUNK_POINTS, MERGED_CHUNK_POINTS, RawPoint, decode_points};
use super::{EncodedChunk, encode_chunks, insert_encoded, sort_points};
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use crate::wake::Wakes;
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
pub async fn run(db: Db, delay: Duration, wakes: Wakes, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut seen = 0;
    let mut recorded = wakes.subscribe_events();
    loop {
        if let Err(error) = pass(&db, &mut seen).await {
            tracing::warn!(%error, "metric compaction failed; will try again");
        }
        tokio::select! {
            _ = recorded.recv() => {}
            () = tokio::time::sleep(Duration::from_secs(30)) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        // Let a burst of batches land first.
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Compacts every series with a small chunk newer than `seen` (a chunk id)
/// that now has enough small chunks; returns how many series it compacted.
pub async fn pass(db: &Db, seen: &mut i64) -> Result<usize, Error> {
    let newest: i64 = sql!(db, |pool| {
        sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM metric_chunks")
            .fetch_one(pool)
            .await
    })?;
    // One query finds the series that got unmerged chunks and have enough of
    // a size class now (a pass over thousands of telemetry series must not
    // cost a query each).
    let due: Vec<(String, String)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT run_id, key FROM metric_chunks
         WHERE count < $5 AND (run_id, key) IN
             (SELECT DISTINCT run_id, key FROM metric_chunks WHERE id > $1 AND id <= $2 AND count < $5)
         GROUP BY run_id, key
         HAVING count(*) FILTER (WHERE count < $3) >= $6 OR count(*) FILTER (WHERE count >= $3 AND count < $4) >= $6
             OR count(*) FILTER (WHERE count >= $4) >= $6",
        )
        .bind(*seen)
        .bind(newest)
        .bind(TINY)
        .bind(SMALL)
        .bind(UNMERGED)
        .bind(CHUNKS_BEFORE_COMPACTING)
        .fetch_all(pool)
        .await
    })?;
    *seen = newest;
    // Rounds: each plans at most one merge per series and size class,
    // reading and re-encoding outside any write transaction, then applies
    // the plans in as few short write transactions as hold them. A series
    // that merged is looked at again in the next round.
    let mut compacted = std::collections::BTreeSet::new();
    let mut pending = due;
    while !pending.is_empty() {
        let mut again = Vec::new();
        let mut plans = Vec::new();
        let mut planned_points = 0;
        for (run_id, key) in pending {
            let mut merged_any = false;
            for (lower, upper) in [(0, TINY), (TINY, SMALL), (SMALL, UNMERGED)] {
                if let Some(plan) = plan(db, &run_id, &key, lower, upper).await? {
                    planned_points += plan.points;
                    plans.push(plan);
                    merged_any = true;
                }
            }
            if planned_points >= POINTS_PER_TRANSACTION {
                apply(db, &plans).await?;
                plans.clear();
                planned_points = 0;
            }
            if merged_any {
                compacted.insert((run_id.clone(), key.clone()));
                again.push((run_id, key));
            }
        }
        apply(db, &plans).await?;
        pending = again;
    }
    Ok(compacted.len())
}

/// Chunks below this many points are merged among themselves first; the
/// chunks that makes are merged once there are enough of them. So a point of
/// a chatty series (telemetry, an SDK sending every second) is rewritten a
/// few times on its way to a full chunk, not once per merge.
const TINY: i64 = 64;

/// Points of planned merges applied by one write transaction (a few milliseconds).
const POINTS_PER_TRANSACTION: usize = 262_144;

/// Chunks merged at once, at most.
const MERGE_AT_MOST: i64 = 64;

/// A merge worked out outside the write transaction: the chunks it
/// replaces and the chunks that replace them, encoded.
struct Plan {
    run_id: String,
    key: String,
    ids: Vec<i64>,
    points: usize,
    merged: Vec<EncodedChunk>,
}

/// Plans the merge of up to [`MERGE_AT_MOST`] of the series' chunks of
/// `lower..upper` points (the earliest by step) into as few as fit, when it
/// has enough of them.
async fn plan(db: &Db, run_id: &str, key: &str, lower: i64, upper: i64) -> Result<Option<Plan>, Error> {
    let small: Vec<(i64, Vec<u8>)> = sql!(db, |pool| {
        sqlx::query_as(
        "SELECT id, points FROM metric_chunks WHERE run_id = $1 AND key = $2 AND count >= $3 AND count < $4
         ORDER BY step_min, id LIMIT $5",
    )
    .bind(run_id)
    .bind(key)
    .bind(lower)
    .bind(upper)
    .bind(MERGE_AT_MOST)
    .fetch_all(pool)
    .await
    })?;
    if (small.len() as i64) < CHUNKS_BEFORE_COMPACTING {
        return Ok(None);
    }
    let mut points: Vec<RawPoint> = Vec::new();
    let mut ids = Vec::with_capacity(small.len());
    for (id, blob) in &small {
        decode_points(blob, &mut points).map_err(anyhow::Error::from)?;
        ids.push(*id);
    }
    sort_points(&mut points);
    Ok(Some(Plan {
        run_id: run_id.to_string(),
        key: key.to_string(),
        ids,
        points: points.len(),
        merged: encode_chunks(&points, MERGED_CHUNK_POINTS),
    }))
}

/// Applies plans in one write transaction: each replaces its chunks unless
/// one of them is gone since it was planned (the run was deleted).
async fn apply(db: &Db, plans: &[Plan]) -> Result<(), Error> {
    if plans.is_empty() {
        return Ok(());
    }
    let chunk_ids = db.dialect().json_values("$1");
    let mut tx = crate::store::write(db).await?;
    for plan in plans {
        let ids = serde_json::to_string(&plan.ids).map_err(anyhow::Error::from)?;
        let present: i64 = sql!(tx, |conn| {
            sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM metric_chunks WHERE id IN (SELECT CAST(value AS BIGINT) FROM {chunk_ids})"
            ))
            .bind(&ids)
            .fetch_one(conn)
            .await
        })?;
        if present != plan.ids.len() as i64 {
            continue;
        }
        sql!(tx, |conn| {
            sqlx::query(&format!(
                "DELETE FROM metric_chunks WHERE id IN (SELECT CAST(value AS BIGINT) FROM {chunk_ids})"
            ))
            .bind(&ids)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        insert_encoded(&mut tx, &plan.run_id, &[(&plan.key, &plan.merged[..])]).await?;
        tracing::debug!(
            run_id = plan.run_id,
            key = plan.key,
            chunks = plan.ids.len(),
            points = plan.points,
            "compacted a series"
        );
    }
    tx.commit().await?;
    Ok(())
}
