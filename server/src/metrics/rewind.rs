//! Rewinding a run to the step its next attempt resumes from: the points
//! and texts its earlier attempts logged past that step move to
//! `metric_points_rewound` and `run_texts_rewound` (kept with the run,
//! deleted with it), a chunk that straddles the step is split, and each
//! key's summary row is worked out again from the points that stay. So a
//! resumed run is one curve with no step twice, and nothing acknowledged
//! is lost. Done in the caller's transaction, when the job goes back to the
//! queue: no attempt of it is running, so no point of the next one can be
//! caught.

use super::chunk::{MERGED_CHUNK_POINTS, RawPoint, decode_points, encode_points};
use super::ingest::SeriesUpdate;
use super::{encode_chunks, insert_encoded, sort_points};
use crate::store::sql;
use crate::store::{Error, Tx};

/// What a rewind set aside.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rewound {
    pub points: i64,
    pub texts: i64,
}

/// Sets aside the run's points and texts past `step`, recording `attempt`
/// (the attempt that just ended) as the one after which they were.
pub async fn rewind(conn: &mut Tx, run_id: &str, attempt: i64, step: i64) -> Result<Rewound, Error> {
    let keys: Vec<String> = sql!(conn, |conn| {
        sqlx::query_scalar(
            "SELECT key FROM metric_series WHERE run_id = $1 AND latest_step > $2 ORDER BY key",
        )
        .bind(run_id)
        .bind(step)
        .fetch_all(conn)
        .await
    })?;
    let mut rewound = Rewound::default();
    for key in &keys {
        rewound.points += rewind_series(conn, run_id, key, attempt, step).await?;
        recount_series(conn, run_id, key).await?;
    }
    rewound.texts = sql!(conn, |conn| {
        sqlx::query(
            "INSERT INTO run_texts_rewound (run_id, attempt, key, step, wall_time, text)
             SELECT run_id, $3, key, step, wall_time, text FROM run_texts WHERE run_id = $1 AND step > $2
             ORDER BY id",
        )
        .bind(run_id)
        .bind(step)
        .bind(attempt)
        .execute(conn)
        .await
        .map(|done| done.rows_affected() as i64)
    })?;
    sql!(conn, |conn| {
        sqlx::query("DELETE FROM run_texts WHERE run_id = $1 AND step > $2")
            .bind(run_id)
            .bind(step)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    Ok(rewound)
}

/// Moves one key's points past `step` aside; returns how many.
async fn rewind_series(
    conn: &mut Tx,
    run_id: &str,
    key: &str,
    attempt: i64,
    step: i64,
) -> Result<i64, Error> {
    // Chunks wholly past the step move as they are.
    let moved: i64 = sql!(conn, |conn| {
        sqlx::query_scalar(
            "INSERT INTO metric_points_rewound (run_id, key, attempt, step_min, step_max, count, points)
             SELECT run_id, key, $4, step_min, step_max, count, points FROM metric_chunks
             WHERE run_id = $1 AND key = $2 AND step_min > $3 ORDER BY step_min
             RETURNING count",
        )
        .bind(run_id)
        .bind(key)
        .bind(step)
        .bind(attempt)
        .fetch_all(conn)
        .await
        .map(|counts: Vec<i64>| counts.iter().sum())
    })?;
    sql!(conn, |conn| {
        sqlx::query("DELETE FROM metric_chunks WHERE run_id = $1 AND key = $2 AND step_min > $3")
            .bind(run_id)
            .bind(key)
            .bind(step)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    // Chunks that straddle it are split: what is past it moves, the rest
    // is written again as chunks of their own.
    let straddling: Vec<(i64, Vec<u8>)> = sql!(conn, |conn| {
        sqlx::query_as(
            "SELECT id, points FROM metric_chunks WHERE run_id = $1 AND key = $2 AND step_max > $3",
        )
        .bind(run_id)
        .bind(key)
        .bind(step)
        .fetch_all(conn)
        .await
    })?;
    let mut split = 0;
    for (id, blob) in straddling {
        let mut points: Vec<RawPoint> = Vec::new();
        decode_points(&blob, &mut points).map_err(anyhow::Error::from)?;
        sort_points(&mut points);
        let kept = points.partition_point(|point| point.step <= step);
        let (stays, past) = points.split_at(kept);
        if past.is_empty() || stays.is_empty() {
            continue; // its bounds said otherwise: leave it as it is
        }
        sql!(conn, |conn| {
            sqlx::query(
                "INSERT INTO metric_points_rewound (run_id, key, attempt, step_min, step_max, count, points)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(run_id)
            .bind(key)
            .bind(attempt)
            .bind(past[0].step)
            .bind(past[past.len() - 1].step)
            .bind(past.len() as i64)
            .bind(encode_points(past))
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        sql!(conn, |conn| {
            sqlx::query("DELETE FROM metric_chunks WHERE id = $1")
                .bind(id)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
        insert_encoded(
            conn,
            run_id,
            &[(key, &encode_chunks(stays, MERGED_CHUNK_POINTS)[..])],
        )
        .await?;
        split += past.len() as i64;
    }
    Ok(moved + split)
}

/// Works a key's summary row out again from its chunks, one at a time
/// (a long series is never held whole); a key left without points loses it.
async fn recount_series(conn: &mut Tx, run_id: &str, key: &str) -> Result<(), Error> {
    let blobs: Vec<Vec<u8>> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT points FROM metric_chunks WHERE run_id = $1 AND key = $2")
            .bind(run_id)
            .bind(key)
            .fetch_all(conn)
            .await
    })?;
    let mut summary: Option<SeriesUpdate> = None;
    let mut points = Vec::new();
    for blob in &blobs {
        points.clear();
        decode_points(blob, &mut points).map_err(anyhow::Error::from)?;
        if points.is_empty() {
            continue;
        }
        sort_points(&mut points);
        let chunk = SeriesUpdate::of(&points);
        summary = Some(match summary {
            Some(so_far) => so_far.merge(chunk),
            None => chunk,
        });
    }
    let Some(summary) = summary else {
        sql!(conn, |conn| {
            sqlx::query("DELETE FROM metric_series WHERE run_id = $1 AND key = $2")
                .bind(run_id)
                .bind(key)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
        return Ok(());
    };
    sql!(conn, |conn| {
        sqlx::query(
            "UPDATE metric_series SET points = $3, non_finite = $4, latest_step = $5, latest_wall = $6,
                 latest_bits = $7, first_non_finite_step = $8, min_value = $9, min_step = $10,
                 max_value = $11, max_step = $12
             WHERE run_id = $1 AND key = $2",
        )
        .bind(run_id)
        .bind(key)
        .bind(summary.points)
        .bind(summary.non_finite)
        .bind(summary.newest.step)
        .bind(summary.newest.wall)
        .bind(summary.newest.value.to_bits() as i64)
        .bind(summary.first_bad.map(|p| p.step))
        .bind(summary.min.map(|p| p.value))
        .bind(summary.min.map(|p| p.step))
        .bind(summary.max.map(|p| p.value))
        .bind(summary.max.map(|p| p.step))
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}
