//! Metrics: ingest (idempotent by batch id, durable when acknowledged),
//! chart queries that downsample without hiding spikes or non-finite
//! values, and per-run summaries. NaN, +∞ and −∞ are stored with their
//! exact bits and never become null or zero.

pub mod arrow;
pub mod chart;
pub mod chunk;
pub mod codec;
pub mod compact;
pub mod group;
pub mod texts;
pub mod wire;

use crate::events::{self, Links};
use crate::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error, Tx};
use chunk::{
    CHUNK_POINTS, LEVELS, Level, RawPoint, Sub, decode_points, decode_steps, decode_summary, encode_points,
    encode_summary,
};
use gpuplane_api::error::FieldError;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::metric::{Batch, Bucket, IngestResult, Latest, Point, Series, SeriesPoint, Text, Value};
use std::collections::{BTreeMap, HashMap};

/// The most points one batch may carry.
pub const MAX_BATCH_POINTS: usize = 100_000;
pub const MAX_KEY_LEN: usize = 256;

/// The most errors reported for a batch's points (and then for its texts).
const MAX_POINT_ERRORS: usize = 20;

/// Checks a batch; one error per bad field.
pub fn validate(batch: &Batch) -> Result<(), Error> {
    let mut point_errors = Vec::new();
    for (at, point) in batch.points.iter().enumerate() {
        if point_errors.len() >= MAX_POINT_ERRORS {
            break;
        }
        check_key_and_time("points", at, &point.key, point.wall_time, &mut point_errors);
    }
    let errors = batch_errors(&batch.batch_id, batch.points.len(), point_errors, &batch.texts);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(errors))
    }
}

/// A batch's errors: its id, its size, then its points' (found by the
/// caller, at most [`MAX_POINT_ERRORS`]), then its texts'.
fn batch_errors(
    batch_id: &str,
    points: usize,
    point_errors: Vec<FieldError>,
    texts: &[Text],
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if batch_id.trim().is_empty() || batch_id.len() > 200 {
        errors.push(FieldError {
            field: "batch_id".into(),
            message: "must be 1-200 characters".into(),
        });
    }
    if points > MAX_BATCH_POINTS {
        errors.push(FieldError {
            field: "points".into(),
            message: format!("at most {MAX_BATCH_POINTS} points per batch; send several batches"),
        });
    }
    errors.extend(point_errors);
    texts::validate(texts, &mut errors);
    errors
}

/// A point's or text's key (1-[`MAX_KEY_LEN`] characters, no control
/// characters) and wall time (finite); `list[at]` names it (`points[3]`).
/// The name is only formatted for an error: this runs for every point.
fn check_key_and_time(list: &str, at: usize, key: &str, wall_time: f64, errors: &mut Vec<FieldError>) {
    if !key_is_valid(key) {
        errors.push(key_error(list, at));
    }
    check_time(list, at, wall_time, errors);
}

fn key_is_valid(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && !key.chars().any(char::is_control)
}

fn key_error(list: &str, at: usize) -> FieldError {
    FieldError {
        field: format!("{list}[{at}].key"),
        message: format!("must be 1-{MAX_KEY_LEN} characters without control characters"),
    }
}

fn check_time(list: &str, at: usize, wall_time: f64, errors: &mut Vec<FieldError>) {
    if !wall_time.is_finite() {
        errors.push(FieldError {
            field: format!("{list}[{at}].wall_time"),
            message: "must be a finite number of seconds since the epoch".into(),
        });
    }
}

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
    batch_id: String,
    points: usize,
    texts: Vec<Text>,
    series: Vec<(String, Vec<EncodedChunk>, SeriesUpdate)>,
}

impl PreparedBatch {
    /// The points it holds.
    pub fn points(&self) -> usize {
        self.points
    }
}

/// What a batch changes in a key's summary row.
struct SeriesUpdate {
    points: i64,
    non_finite: i64,
    /// The batch's latest point: the last by step, then wall time.
    newest: RawPoint,
    /// The first non-finite point, by step.
    first_bad: Option<RawPoint>,
    /// The extremes of the finite values, at their first step.
    min: Option<RawPoint>,
    max: Option<RawPoint>,
}

impl SeriesUpdate {
    /// Of a key's points, sorted by step.
    fn of(points: &[RawPoint]) -> SeriesUpdate {
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
}

/// Prepares a validated batch (see [`PreparedBatch`]). The API reads its
/// bodies with [`wire::WireBatch`] instead, to the same result.
pub fn prepare(batch: Batch) -> PreparedBatch {
    let mut by_key: BTreeMap<&str, Vec<RawPoint>> = BTreeMap::new();
    for Point {
        key,
        step,
        wall_time,
        value,
    } in &batch.points
    {
        by_key.entry(key.as_str()).or_default().push(RawPoint {
            step: *step,
            wall: codec::to_millis(*wall_time),
            value: value.0,
        });
    }
    prepared(batch.batch_id, batch.points.len(), batch.texts, by_key)
}

/// A batch's points, grouped by key in key order, sorted and encoded.
fn prepared<K: AsRef<str>>(
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

/// Stores a validated batch for a run in the caller's transaction. A
/// batch id already acknowledged for the run adds nothing. Raises LOSS_NAN
/// once per run and loss-like key.
pub async fn ingest(
    conn: &mut Tx,
    run_id: &str,
    batch: Batch,
    loss_pattern: &str,
) -> Result<IngestResult, Error> {
    store(conn, run_id, &prepare(batch), loss_pattern).await
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
    step_min: i64,
    step_max: i64,
    time_min: f64,
    time_max: f64,
    count: i64,
    summaries: [Vec<u8>; 3],
    points: Vec<u8>,
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

/// The latest point of every key of each of these runs (one query for a page of runs).
pub async fn latest_of_runs(
    db: &Db,
    run_ids: &[&str],
) -> Result<HashMap<String, BTreeMap<String, Latest>>, Error> {
    let ids = serde_json::to_string(run_ids).unwrap_or_else(|_| "[]".into());
    let run_ids = db.dialect().json_values("$1");
    let rows: Vec<(String, String, i64, i64, i64, i64)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT run_id, key, points, non_finite, latest_step, latest_bits FROM metric_series
             WHERE run_id IN (SELECT value FROM {run_ids})"
        ))
        .bind(&ids)
        .fetch_all(pool)
        .await
    })?;
    let mut by_run: HashMap<String, BTreeMap<String, Latest>> = HashMap::new();
    for (run_id, key, count, non_finite, step, bits) in rows {
        let value = f64::from_bits(bits as u64);
        let latest = Latest {
            step,
            value: Value(value),
            non_finite: !value.is_finite(),
            count: count as u64,
            non_finite_count: non_finite as u64,
        };
        by_run.entry(run_id).or_default().insert(key, latest);
    }
    Ok(by_run)
}

/// The step of a series' first non-finite value, if it has one.
pub async fn first_non_finite_step(db: &Db, run_id: &str, key: &str) -> Result<Option<i64>, Error> {
    let step: Option<Option<i64>> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT first_non_finite_step FROM metric_series WHERE run_id = $1 AND key = $2")
            .bind(run_id)
            .bind(key)
            .fetch_optional(pool)
            .await
    })?;
    Ok(step.flatten())
}

/// The x axis of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    Step,
    Time,
}

#[derive(Debug, Clone)]
pub struct Query {
    pub key: String,
    pub max_points: usize,
    pub axis: Axis,
    pub from: Option<f64>,
    pub to: Option<f64>,
}

/// The chunks of one series over a range of steps or wall times.
struct Range<'a> {
    run_id: &'a str,
    key: &'a str,
    from: f64,
    to: f64,
    lo_col: &'static str,
    hi_col: &'static str,
}

impl Range<'_> {
    /// Chunks with some of their points in the range (`$1`..`$4` are bound by [`Range::bind`]).
    fn overlapping(&self) -> String {
        format!(
            "run_id = $1 AND key = $2 AND {} >= $3 AND {} <= $4",
            self.hi_col, self.lo_col
        )
    }

    /// Of those, the chunks wholly inside it.
    fn inside(&self) -> String {
        format!(
            "run_id = $1 AND key = $2 AND {} >= $3 AND {} <= $4",
            self.lo_col, self.hi_col
        )
    }

    fn bind<'q, D: sqlx::Database, O>(
        &self,
        query: sqlx::query::QueryAs<'q, D, O, D::Arguments<'q>>,
    ) -> sqlx::query::QueryAs<'q, D, O, D::Arguments<'q>>
    where
        Self: 'q,
        String: sqlx::Encode<'q, D> + sqlx::Type<D>,
        f64: sqlx::Encode<'q, D> + sqlx::Type<D>,
    {
        query
            .bind(self.run_id.to_string())
            .bind(self.key.to_string())
            .bind(self.from)
            .bind(self.to)
    }

    /// One blob (or blob expression) of every chunk matching `condition`.
    async fn blobs(&self, db: &mut Tx, column: &str, condition: &str) -> Result<Vec<Vec<u8>>, Error> {
        let text = format!("SELECT {column} FROM metric_chunks WHERE {condition}");
        let blobs: Vec<(Vec<u8>,)> = sql!(db, |conn| self.bind(sqlx::query_as(&text)).fetch_all(conn).await)?;
        Ok(blobs.into_iter().map(|(blob,)| blob).collect())
    }
}

fn decode_all(blobs: &[Vec<u8>]) -> Result<Vec<RawPoint>, Error> {
    let mut points = Vec::new();
    for blob in blobs {
        decode_points(blob, &mut points).map_err(anyhow::Error::from)?;
    }
    Ok(points)
}

/// One series over a range: points when there are at most `max_points`,
/// else at most `max_points` buckets with min, max, last and non-finite counts.
pub async fn query(db: &Db, run_id: &str, query: &Query) -> Result<Series, Error> {
    // One read transaction: every statement below sees the same chunks,
    // even while compaction replaces some of them.
    let mut snapshot = crate::store::read(db).await?;
    let db = &mut snapshot;
    let (from, to) = (
        query.from.unwrap_or(f64::NEG_INFINITY),
        query.to.unwrap_or(f64::INFINITY),
    );
    let (lo_col, hi_col) = match query.axis {
        Axis::Step => ("step_min", "step_max"),
        Axis::Time => ("time_min", "time_max"),
    };
    let range = Range {
        run_id,
        key: &query.key,
        from,
        to,
        lo_col,
        hi_col,
    };
    // What the range holds, in one row (from the index alone): the points
    // of the chunks wholly inside it, and where its data starts and ends.
    let dialect = db.dialect();
    let bounds = format!(
        "SELECT CAST(coalesce(sum(CASE WHEN {inside} THEN count ELSE 0 END), 0) AS BIGINT), min({lo}), max({hi})
         FROM metric_chunks WHERE {overlapping}",
        inside = range.inside(),
        lo = dialect.greatest(&format!("CAST({lo_col} AS DOUBLE PRECISION)"), "$3"),
        hi = dialect.least(&format!("CAST({hi_col} AS DOUBLE PRECISION)"), "$4"),
        overlapping = range.overlapping(),
    );
    let (inside_points, lo, hi): (i64, Option<f64>, Option<f64>) = sql!(db, |conn| range
        .bind(sqlx::query_as(&bounds))
        .fetch_one(conn)
        .await)?;
    let in_range = |p: &RawPoint| {
        let x = match query.axis {
            Axis::Step => p.step as f64,
            Axis::Time => p.wall,
        };
        x >= from && x <= to
    };
    // Chunks cut by the range's edges are decoded, so counts are exact.
    let cut = format!("{} AND NOT ({})", range.overlapping(), range.inside());
    // Along steps only the blocks that hold the range are decoded.
    let (first, last) = match query.axis {
        Axis::Step => (from.ceil() as i64, to.floor() as i64),
        Axis::Time => (i64::MIN, i64::MAX),
    };
    let mut edge_points = Vec::new();
    for blob in range.blobs(db, "points", &cut).await? {
        decode_steps(&blob, first, last, &mut edge_points).map_err(anyhow::Error::from)?;
    }
    edge_points.retain(in_range);
    let total = inside_points as usize + edge_points.len();
    if total <= query.max_points {
        let mut points = decode_all(&range.blobs(db, "points", &range.inside()).await?)?;
        points.extend(edge_points);
        points.sort_by(|a, b| a.step.cmp(&b.step).then(a.wall.total_cmp(&b.wall)));
        return Ok(Series {
            key: query.key.clone(),
            points: Some(
                points
                    .into_iter()
                    .map(|p| SeriesPoint {
                        step: p.step,
                        wall_time: p.wall,
                        value: Value(p.value),
                    })
                    .collect(),
            ),
            buckets: None,
        });
    }
    // Bucket edges from the data actually in range (there is some: more
    // than max_points of it).
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return Err(Error::Internal(anyhow::anyhow!("chunks in range without bounds")));
    };
    let buckets = query.max_points.max(1);
    let width = match query.axis {
        Axis::Step => ((hi - lo + 1.0) / buckets as f64).ceil().max(1.0),
        Axis::Time => ((hi - lo) / buckets as f64).max(f64::MIN_POSITIVE),
    };
    let index = |x: f64| (((x - lo) / width).floor().max(0.0) as usize).min(buckets - 1);
    let mut sums: Vec<Option<Sub>> = vec![None; buckets];
    let mut add = |bucket: usize, sub: &Sub| match &mut sums[bucket] {
        Some(sum) => sum.merge(sub),
        slot => *slot = Some(*sub),
    };
    // Wide buckets aggregate the chunks' summaries at the coarsest level
    // whose sub-buckets are at most half a bucket wide, so a bucket sums a
    // few of them however long the series; narrow ones use the points
    // themselves, as do the chunks cut by the range's edges.
    let level = LEVELS
        .iter()
        .rev()
        .find(|level| total / buckets >= 2 * level.sub_points);
    let mut points = edge_points;
    if let Some(level) = level {
        for sub in load_summaries(&range, db, *level).await? {
            let x = match query.axis {
                Axis::Step => sub.step_from as f64,
                Axis::Time => sub.time_min,
            };
            add(index(x), &sub);
        }
    } else {
        points.extend(decode_all(&range.blobs(db, "points", &range.inside()).await?)?);
    }
    for point in points {
        let x = match query.axis {
            Axis::Step => point.step as f64,
            Axis::Time => point.wall,
        };
        add(index(x), &Sub::of(&[point]));
    }
    let finite = |v: f64| if v.is_nan() { None } else { Some(Value(v)) };
    Ok(Series {
        key: query.key.clone(),
        points: None,
        buckets: Some(
            sums.into_iter()
                .flatten()
                .map(|s| Bucket {
                    step_from: s.step_from,
                    step_to: s.step_to,
                    time_from: s.time_min,
                    time_to: s.time_max,
                    min: finite(s.min),
                    max: finite(s.max),
                    last: Value(s.last),
                    count: s.count as u64,
                    non_finite: s.non_finite as u64,
                })
                .collect(),
        ),
    })
}

/// The value of a series at each of `steps`: the point at that step, else
/// the last one before it (None before the first point). Decodes only the
/// chunks that hold or precede the steps.
pub async fn values_at(db: &Db, run_id: &str, key: &str, steps: &[i64]) -> Result<Vec<Option<f64>>, Error> {
    let chunks: Vec<(i64, i64, i64)> = sql!(db, |pool| {
        sqlx::query_as("SELECT id, step_min, step_max FROM metric_chunks WHERE run_id = $1 AND key = $2")
            .bind(run_id)
            .bind(key)
            .fetch_all(pool)
            .await
    })?;
    let mut needed = std::collections::BTreeSet::new();
    for &step in steps {
        let holding: Vec<i64> = chunks
            .iter()
            .filter(|(_, lo, hi)| *lo <= step && step <= *hi)
            .map(|(id, _, _)| *id)
            .collect();
        if holding.is_empty() {
            let before = chunks
                .iter()
                .filter(|(_, _, hi)| *hi < step)
                .max_by_key(|(_, _, hi)| *hi);
            needed.extend(before.map(|(id, _, _)| *id));
        } else {
            needed.extend(holding);
        }
    }
    let mut points = load_points(db, needed.into_iter()).await?;
    points.sort_by(|a, b| a.step.cmp(&b.step).then(a.wall.total_cmp(&b.wall)));
    Ok(steps
        .iter()
        .map(|&step| {
            let after = points.partition_point(|p| p.step <= step);
            after.checked_sub(1).map(|at| points[at].value)
        })
        .collect())
}

async fn load_points(db: &Db, ids: impl Iterator<Item = i64>) -> Result<Vec<RawPoint>, Error> {
    let ids: Vec<i64> = ids.collect();
    let mut points = Vec::new();
    if ids.is_empty() {
        return Ok(points);
    }
    let ids = serde_json::to_string(&ids).map_err(anyhow::Error::from)?;
    let chunk_ids = db.dialect().json_values("$1");
    let blobs: Vec<Vec<u8>> = sql!(db, |pool| {
        sqlx::query_scalar(&format!(
            "SELECT points FROM metric_chunks WHERE id IN (SELECT CAST(value AS BIGINT) FROM {chunk_ids})"
        ))
        .bind(&ids)
        .fetch_all(pool)
        .await
    })?;
    for blob in blobs {
        decode_points(&blob, &mut points).map_err(anyhow::Error::from)?;
    }
    Ok(points)
}

/// The summaries at `level` of the chunks wholly inside the range, or at
/// the next finer level a chunk has (chunks from before the coarser levels
/// have them empty).
async fn load_summaries(range: &Range<'_>, db: &mut Tx, level: Level) -> Result<Vec<Sub>, Error> {
    // This level, then each finer one, down to the finest.
    let columns: Vec<&str> = LEVELS
        .iter()
        .rev()
        .filter(|other| other.sub_points <= level.sub_points)
        .map(|other| other.column)
        .collect();
    let (finest, coarser) = columns.split_last().expect("at least the level itself");
    let column = if coarser.is_empty() {
        finest.to_string()
    } else {
        let tries: Vec<String> = coarser
            .iter()
            .map(|column| format!("WHEN length({column}) > 0 THEN {column}"))
            .collect();
        format!("CASE {} ELSE {finest} END", tries.join(" "))
    };
    let mut subs = Vec::new();
    for blob in range.blobs(db, &column, &range.inside()).await? {
        decode_summary(&blob, &mut subs);
    }
    Ok(subs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a body becomes: not a batch (the field the JSON error names),
    /// an invalid one (its errors), or a prepared one (everything it stores).
    type Outcome =
        Result<Result<(String, usize, Vec<String>, Vec<(String, Vec<Vec<u8>>)>), Vec<String>>, String>;

    fn outcome(parsed: Result<Result<PreparedBatch, Error>, crate::api::error::ApiError>) -> Outcome {
        use crate::api::error::ApiError;
        match parsed {
            Err(ApiError::Validation(fields)) => Err(fields
                .iter()
                .map(|f| f.field.clone())
                .collect::<Vec<_>>()
                .join(",")),
            Err(_) => Err("not JSON".into()),
            Ok(Err(Error::Invalid(fields))) => Ok(Err(fields
                .iter()
                .map(|f| format!("{}: {}", f.field, f.message))
                .collect())),
            Ok(Err(other)) => panic!("preparing a batch touches no database: {other}"),
            Ok(Ok(prepared)) => Ok(Ok((
                prepared.batch_id,
                prepared.points,
                prepared.texts.iter().map(|t| format!("{t:?}")).collect(),
                prepared
                    .series
                    .into_iter()
                    .map(|(key, chunks, update)| {
                        let mut bytes: Vec<Vec<u8>> = chunks.into_iter().map(|c| c.points).collect();
                        bytes.push(
                            format!("{} {} {:?}", update.points, update.non_finite, update.first_bad)
                                .into_bytes(),
                        );
                        (key, bytes)
                    })
                    .collect(),
            ))),
        }
    }

    /// Fuzz: any request body goes through the ingest decoder the API uses
    /// ([`wire::WireBatch`]) without a panic and to exactly what parsing a
    /// [`Batch`], [`validate`] and [`prepare`] make of it: the same JSON
    /// errors, the same field errors, the same chunks. What it accepts
    /// decodes back to its points, bit for bit (below).
    #[test]
    fn fuzz_metric_batch() {
        use crate::api::error::parse_json;
        bolero::check!().for_each(|bytes: &[u8]| {
            let by_batch = parse_json::<Batch>(bytes).map(|batch| validate(&batch).map(|()| prepare(batch)));
            let by_wire = parse_json::<wire::WireBatch>(bytes).map(wire::WireBatch::prepare);
            assert_eq!(outcome(by_wire), outcome(by_batch));
        });
        // Steps at the edges of i64 (delta-of-delta encoding's hard cases)
        // half of the time; any value bits, non-finite sent as "NaN".
        type Points = Vec<(u8, (u8, i64), u32, u64)>;
        let encoded = std::sync::atomic::AtomicUsize::new(0);
        bolero::check!().with_type::<Points>().for_each(|points| {
            let edges = [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX];
            let points: Vec<serde_json::Value> = points
                .iter()
                .map(|(key, (pick, raw), wall, bits)| {
                    let step = if pick % 2 == 0 { edges[(*pick as usize / 2) % edges.len()] } else { *raw };
                    let value = f64::from_bits(*bits);
                    let value = if value.is_finite() { serde_json::json!(value) } else { serde_json::json!("NaN") };
                    let wall = 1.7e9 + *wall as f64 / 1000.0;
                    serde_json::json!({"key": format!("k{}", key % 4), "step": step, "wall_time": wall, "value": value})
                })
                .collect();
            let body = serde_json::json!({"batch_id": "fuzz", "points": points}).to_string();
            let batch = crate::api::error::parse_json::<Batch>(body.as_bytes()).expect("a well-formed batch parses");
            validate(&batch).expect("a well-formed batch is valid");
            for (key, chunks, _) in prepare(batch.clone()).series {
                let mut decoded = Vec::new();
                for chunk in &chunks {
                    chunk::decode_points(&chunk.points, &mut decoded).expect("a chunk it wrote decodes");
                }
                let mut sent: Vec<(i64, u64)> = batch
                    .points
                    .iter()
                    .filter(|p| p.key == key)
                    .map(|p| (p.step, p.value.0.to_bits()))
                    .collect();
                let mut got: Vec<(i64, u64)> = decoded.iter().map(|p| (p.step, p.value.to_bits())).collect();
                sent.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, sent, "{key}: every point once, its value bit for bit");
            }
            encoded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(encoded.into_inner() > 0);
        // Bodies near the rules: keys empty, too long, with a control
        // character or an escape, points in any order, batch ids empty or not.
        let keys = [
            "k0",
            "k1",
            "",
            "\u{1}k",
            "k/\"q\"",
            "é",
            &"x".repeat(MAX_KEY_LEN + 1),
            &"y".repeat(MAX_KEY_LEN),
        ];
        bolero::check!().with_type::<(bool, Vec<(u8, i64, u16)>)>().for_each(|(named, points)| {
            let points: Vec<serde_json::Value> = points
                .iter()
                .map(|(key, step, wall)| {
                    serde_json::json!({"key": keys[*key as usize % keys.len()], "step": step, "wall_time": *wall as f64, "value": *step as f64})
                })
                .collect();
            let body = serde_json::json!({"batch_id": if *named { "b" } else { " " }, "points": points}).to_string();
            let by_batch = parse_json::<Batch>(body.as_bytes()).map(|batch| validate(&batch).map(|()| prepare(batch)));
            let by_wire = parse_json::<wire::WireBatch>(body.as_bytes()).map(wire::WireBatch::prepare);
            assert_eq!(outcome(by_wire), outcome(by_batch));
        });
    }

    /// Fuzz: stored chunk bytes that are not what the encoder wrote (a
    /// damaged database) are an error, never a panic or an endless loop.
    #[test]
    fn fuzz_chunk_decoder() {
        bolero::check!()
            .with_type::<(Vec<u8>, i64, i64)>()
            .for_each(|(bytes, from, to)| {
                let mut out = Vec::new();
                let _ = chunk::decode_points(bytes, &mut out);
                let _ = chunk::decode_steps(bytes, *from, *to, &mut out);
                let mut subs = Vec::new();
                chunk::decode_summary(bytes, &mut subs);
            });
    }

    #[test]
    fn loss_patterns_are_globs() {
        assert!(matches_pattern("*loss*", "train/loss"));
        assert!(matches_pattern("*loss*", "eval/Loss_total"));
        assert!(!matches_pattern("*loss*", "train/accuracy"));
        assert!(matches_pattern("train/*", "train/lr"));
        assert!(!matches_pattern("train/*", "eval/lr"));
        assert!(matches_pattern("exact", "EXACT"));
    }
}
