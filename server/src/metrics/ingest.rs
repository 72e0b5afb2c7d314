//! Storing a batch: prepared (grouped by key, sorted, encoded into chunks
//! with their summaries) outside the write transaction, then written with
//! each key's summary row in one; a batch id already stored is a replay and
//! stores nothing. The first non-finite value of a loss-like key raises a
//! `LOSS_NAN` event.

use super::chunk::{CHUNK_POINTS, LEVELS, RawPoint, encode_points, encode_summary};
use super::texts;
use crate::events::{self, Links};
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Error, Tx};
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::metric::{IngestResult, Text, Value};

/// Whether a key is "loss-like" for LOSS_NAN: a glob with `*`, case-insensitive.
pub fn matches_pattern(pattern: &str, key: &str) -> bool {
    let (pattern, key) = (pattern.to_lowercase(), key.to_lowercase());
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == key;
    }
    let mut rest = key.as_str();
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(after) => rest = after,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// A validated batch made ready to store: its points grouped by key,
/// sorted, encoded into chunks with their summaries, and each key's
/// figures for its summary row. All the work that needs no database, so it
/// is done before the write transaction, by as many requests at once as
/// there are cores.
pub struct PreparedBatch {
    pub(super) batch_id: String,
    pub(super) points: usize,
    pub(super) texts: Vec<Text>,
    pub(super) series: Vec<(String, Vec<EncodedChunk>, SeriesUpdate)>,
}

impl PreparedBatch {
    /// The points it holds.
    pub fn points(&self) -> usize {
        self.points
    }

    /// The bytes of its encoded chunks and their summaries: what storing it
    /// adds to the store, before the database's own overhead.
    pub fn encoded_bytes(&self) -> usize {
        self.series
            .iter()
            .flat_map(|(_, chunks, _)| chunks)
            .map(|chunk| chunk.points.len() + chunk.summaries.iter().map(Vec::len).sum::<usize>())
            .sum()
    }
}

/// What a batch changes in a key's summary row.
pub(super) struct SeriesUpdate {
    pub(super) points: i64,
    pub(super) non_finite: i64,
    /// The batch's latest point: the last by step, then wall time.
    pub(super) newest: RawPoint,
    /// The first non-finite point, by step.
    pub(super) first_bad: Option<RawPoint>,
    /// The extremes of the finite values, at their first step.
    pub(super) min: Option<RawPoint>,
    pub(super) max: Option<RawPoint>,
}

impl SeriesUpdate {
    /// Of a key's points, sorted by step.
    pub(super) fn of(points: &[RawPoint]) -> SeriesUpdate {
        let (mut min, mut max): (Option<RawPoint>, Option<RawPoint>) = (None, None);
        for point in points.iter().filter(|p| p.value.is_finite()) {
            if min.is_none_or(|m| point.value < m.value) {
                min = Some(*point);
            }
            if max.is_none_or(|m| point.value > m.value) {
                max = Some(*point);
            }
        }
        SeriesUpdate {
            points: points.len() as i64,
            non_finite: points.iter().filter(|p| !p.value.is_finite()).count() as i64,
            newest: points[points.len() - 1],
            first_bad: points.iter().find(|p| !p.value.is_finite()).copied(),
            min,
            max,
        }
    }

    /// The figures of two sets of a key's points together.
    pub(super) fn merge(self, other: SeriesUpdate) -> SeriesUpdate {
        let later = |a: RawPoint, b: RawPoint| {
            if (b.step, b.wall) > (a.step, a.wall) { b } else { a }
        };
        let earlier_step = |a: Option<RawPoint>, b: Option<RawPoint>| match (a, b) {
            (Some(a), Some(b)) => Some(if b.step < a.step { b } else { a }),
            (a, b) => a.or(b),
        };
        // The extreme value; between equal values, the one at the first step.
        let extreme = |a: Option<RawPoint>, b: Option<RawPoint>, beats: fn(f64, f64) -> bool| match (a, b) {
            (Some(a), Some(b)) if beats(b.value, a.value) || (b.value == a.value && b.step < a.step) => {
                Some(b)
            }
            (a, b) => a.or(b),
        };
        SeriesUpdate {
            points: self.points + other.points,
            non_finite: self.non_finite + other.non_finite,
            newest: later(self.newest, other.newest),
            first_bad: earlier_step(self.first_bad, other.first_bad),
            min: extreme(self.min, other.min, |b, a| b < a),
            max: extreme(self.max, other.max, |b, a| b > a),
        }
    }
}

/// A batch's points, grouped by key in key order, sorted and encoded.
pub(super) fn prepared<K: AsRef<str>>(
    batch_id: String,
    points: usize,
    texts: Vec<Text>,
    by_key: impl IntoIterator<Item = (K, Vec<RawPoint>)>,
) -> PreparedBatch {
    let series = by_key
        .into_iter()
        .map(|(key, mut points)| {
            sort_points(&mut points);
            (
                key.as_ref().to_string(),
                encode_chunks(&points, CHUNK_POINTS),
                SeriesUpdate::of(&points),
            )
        })
        .collect();
    PreparedBatch {
        points,
        batch_id,
        texts,
        series,
    }
}

/// [`ingest`] of a batch prepared before the transaction.
pub async fn store(
    conn: &mut Tx,
    run_id: &str,
    prepared: &PreparedBatch,
    loss_pattern: &str,
) -> Result<IngestResult, Error> {
    let now = now_ms();
    let fresh = sql!(conn, |conn| {
        sqlx::query(
            "INSERT INTO metric_batches (run_id, batch_id, points, received_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, batch_id) DO NOTHING",
        )
        .bind(run_id)
        .bind(&prepared.batch_id)
        .bind(prepared.points as i64)
        .bind(now)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    if fresh == 0 {
        return Ok(IngestResult {
            accepted: 0,
            duplicate: true,
        });
    }
    // Every key's chunks in as few statements as fit, then each key's summary row.
    let chunks: Vec<(&str, &[EncodedChunk])> = prepared
        .series
        .iter()
        .map(|(key, chunks, _)| (key.as_str(), &chunks[..]))
        .collect();
    insert_encoded(conn, run_id, &chunks).await?;
    update_series(conn, run_id, &prepared.series, loss_pattern, now).await?;
    texts::insert(conn, run_id, &prepared.texts).await?;
    Ok(IngestResult {
        accepted: (prepared.points + prepared.texts.len()) as u64,
        duplicate: false,
    })
}

/// Step order; points at the same step keep their wall-time order.
pub(crate) fn sort_points(points: &mut [RawPoint]) {
    points.sort_by(|a, b| a.step.cmp(&b.step).then(a.wall.total_cmp(&b.wall)));
}

/// Stores points of one series (sorted) as chunks of at most `chunk_points`
/// ([`CHUNK_POINTS`] at ingest, [`chunk::MERGED_CHUNK_POINTS`] when compacting).
pub(crate) async fn insert_chunks(
    conn: &mut Tx,
    run_id: &str,
    key: &str,
    points: &[RawPoint],
    chunk_points: usize,
) -> Result<(), Error> {
    insert_series_chunks(conn, &[(run_id, key, points)], chunk_points).await
}

/// A chunk ready to insert: its bounds, its summaries at every level and
/// its encoded points.
pub(crate) struct EncodedChunk {
    pub(super) step_min: i64,
    pub(super) step_max: i64,
    pub(super) time_min: f64,
    pub(super) time_max: f64,
    pub(super) count: i64,
    pub(super) summaries: [Vec<u8>; 3],
    pub(super) points: Vec<u8>,
}

/// Points of one series (sorted) as chunks of at most `chunk_points`.
pub(crate) fn encode_chunks(points: &[RawPoint], chunk_points: usize) -> Vec<EncodedChunk> {
    points
        .chunks(chunk_points)
        .map(|part| {
            let (time_min, time_max) = part
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
                    (lo.min(p.wall), hi.max(p.wall))
                });
            EncodedChunk {
                step_min: part[0].step,
                step_max: part[part.len() - 1].step,
                time_min,
                time_max,
                count: part.len() as i64,
                summaries: LEVELS.map(|level| encode_summary(part, level.sub_points)),
                points: encode_points(part),
            }
        })
        .collect()
}

/// Chunks inserted by one statement: few enough for SQLite's bound
/// parameters (11 each), enough to save the round trips of many small series.
const CHUNKS_PER_STATEMENT: usize = 200;

/// Stores the points of several series (each sorted, each with its owner:
/// a run or a node) as chunks of at most `chunk_points`, many rows per
/// statement, each with its summaries at every level.
pub(crate) async fn insert_series_chunks(
    conn: &mut Tx,
    series: &[(&str, &str, &[RawPoint])],
    chunk_points: usize,
) -> Result<(), Error> {
    let encoded: Vec<(&str, &str, Vec<EncodedChunk>)> = series
        .iter()
        .map(|&(owner, key, points)| (owner, key, encode_chunks(points, chunk_points)))
        .collect();
    let rows: Vec<(&str, &str, &EncodedChunk)> = encoded
        .iter()
        .flat_map(|(owner, key, chunks)| chunks.iter().map(move |chunk| (*owner, *key, chunk)))
        .collect();
    insert_chunk_rows(conn, &rows).await
}

/// Inserts encoded chunks of several series of one owner, many rows per statement.
pub(crate) async fn insert_encoded(
    conn: &mut Tx,
    owner: &str,
    series: &[(&str, &[EncodedChunk])],
) -> Result<(), Error> {
    let rows: Vec<(&str, &str, &EncodedChunk)> = series
        .iter()
        .flat_map(|&(key, chunks)| chunks.iter().map(move |chunk| (owner, key, chunk)))
        .collect();
    insert_chunk_rows(conn, &rows).await
}

/// Inserts encoded chunks, each as (owner, key, chunk), many rows per statement.
async fn insert_chunk_rows(conn: &mut Tx, rows: &[(&str, &str, &EncodedChunk)]) -> Result<(), Error> {
    let [fine, mid, coarse] = LEVELS;
    let head = format!(
        "INSERT INTO metric_chunks (run_id, key, step_min, step_max, time_min, time_max, count, {}, {}, {}, points) ",
        coarse.column, mid.column, fine.column
    );
    for statement in rows.chunks(CHUNKS_PER_STATEMENT) {
        sql!(conn, |conn| {
            let mut insert = sqlx::QueryBuilder::new(&head);
            insert.push_values(statement, |mut row, &(owner, key, chunk)| {
                let [fine, mid, coarse] = &chunk.summaries;
                row.push_bind(owner)
                    .push_bind(key)
                    .push_bind(chunk.step_min)
                    .push_bind(chunk.step_max)
                    .push_bind(chunk.time_min)
                    .push_bind(chunk.time_max)
                    .push_bind(chunk.count)
                    .push_bind(&coarse[..])
                    .push_bind(&mid[..])
                    .push_bind(&fine[..])
                    .push_bind(&chunk.points[..]);
            });
            insert.build().execute(conn).await.map(|_| ())
        })?;
    }
    Ok(())
}

/// Keys whose summary rows one statement updates at most (12 bound
/// parameters each, well within SQLite's limit).
const SERIES_PER_STATEMENT: usize = 500;

/// Updates each key's summary row with a batch's figures, many keys per
/// statement; raises LOSS_NAN for a loss key's first non-finite value.
async fn update_series(
    conn: &mut Tx,
    run_id: &str,
    series: &[(String, Vec<EncodedChunk>, SeriesUpdate)],
    loss_pattern: &str,
    now: i64,
) -> Result<(), Error> {
    let dialect = conn.dialect();
    let latest_step = dialect.greatest("excluded.latest_step", "s.latest_step");
    let first_non_finite_step = dialect.least(
        "coalesce(s.first_non_finite_step, excluded.first_non_finite_step)",
        "coalesce(excluded.first_non_finite_step, s.first_non_finite_step)",
    );
    // `s`: the row already there; `excluded`: the one this batch proposes.
    let on_conflict = format!(
        " ON CONFLICT (run_id, key) DO UPDATE SET
             min_step = CASE WHEN s.min_value IS NULL OR excluded.min_value < s.min_value
                               OR (excluded.min_value = s.min_value AND excluded.min_step < s.min_step)
                             THEN coalesce(excluded.min_step, s.min_step) ELSE s.min_step END,
             min_value = CASE WHEN s.min_value IS NULL OR excluded.min_value < s.min_value
                              THEN coalesce(excluded.min_value, s.min_value) ELSE s.min_value END,
             max_step = CASE WHEN s.max_value IS NULL OR excluded.max_value > s.max_value
                               OR (excluded.max_value = s.max_value AND excluded.max_step < s.max_step)
                             THEN coalesce(excluded.max_step, s.max_step) ELSE s.max_step END,
             max_value = CASE WHEN s.max_value IS NULL OR excluded.max_value > s.max_value
                              THEN coalesce(excluded.max_value, s.max_value) ELSE s.max_value END,
             points = s.points + excluded.points,
             non_finite = s.non_finite + excluded.non_finite,
             latest_wall = CASE WHEN excluded.latest_step >= s.latest_step THEN excluded.latest_wall ELSE s.latest_wall END,
             latest_bits = CASE WHEN excluded.latest_step >= s.latest_step THEN excluded.latest_bits ELSE s.latest_bits END,
             latest_step = {latest_step},
             first_non_finite_step = {first_non_finite_step}"
    );
    for statement in series.chunks(SERIES_PER_STATEMENT) {
        sql!(conn, |conn| {
            let mut upsert = sqlx::QueryBuilder::new(
                "INSERT INTO metric_series AS s (run_id, key, points, non_finite, latest_step, latest_wall, latest_bits,
                                            first_non_finite_step, min_value, min_step, max_value, max_step) ",
            );
            upsert.push_values(statement, |mut row, (key, _, update)| {
                row.push_bind(run_id)
                    .push_bind(key)
                    .push_bind(update.points)
                    .push_bind(update.non_finite)
                    .push_bind(update.newest.step)
                    .push_bind(update.newest.wall)
                    .push_bind(update.newest.value.to_bits() as i64)
                    .push_bind(update.first_bad.map(|p| p.step))
                    .push_bind(update.min.map(|p| p.value))
                    .push_bind(update.min.map(|p| p.step))
                    .push_bind(update.max.map(|p| p.value))
                    .push_bind(update.max.map(|p| p.step));
            });
            // The latest point moves only forward (a batch of older steps
            // sent late leaves it).
            upsert.push(&on_conflict);
            upsert.build().execute(conn).await.map(|_| ())
        })?;
    }
    for (key, _, update) in series {
        if let Some(first_bad) = update.first_bad
            && matches_pattern(loss_pattern, key)
        {
            report_loss_nan(conn, run_id, key, first_bad, now).await?;
        }
    }
    Ok(())
}

/// A LOSS_NAN event for a loss key's first non-finite value, once per key.
async fn report_loss_nan(
    conn: &mut Tx,
    run_id: &str,
    key: &str,
    first_bad: RawPoint,
    now: i64,
) -> Result<(), Error> {
    let newly_reported = sql!(conn, |conn| {
        sqlx::query(
            "UPDATE metric_series SET loss_nan_reported = TRUE WHERE run_id = $1 AND key = $2 AND loss_nan_reported = FALSE",
        )
        .bind(run_id)
        .bind(key)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })? == 1;
    if !newly_reported {
        return Ok(());
    }
    let (step, bad) = (first_bad.step, Value(first_bad.value).describe());
    let job_id: Option<String> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT job_id FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_one(conn)
            .await
    })?;
    let links = Links {
        job_id: job_id.as_deref(),
        run_id: Some(run_id),
        node_id: None,
    };
    let message = format!(
        "{key} became {bad} at step {step}: check the learning rate, AMP / loss scaling and the input data"
    );
    events::record(conn, now, Severity::Critical, EventKind::LossNan, links, &message).await?;
    Ok(())
}
