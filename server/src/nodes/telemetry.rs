//! GPU and process telemetry over time, stored per node in the metric chunk
//! storage: a node's series sit in `metric_chunks` under the node's id (run
//! ids and node ids never collide), with the sample time in milliseconds as
//! the step. So ingest, range queries with buckets, compaction and charts
//! are the metrics' own. `telemetry_series` lists a node's series and how far
//! each was downsampled; [`maintain`] keeps full resolution for a while,
//! then one mean a minute, and deletes what is older than the retention.

use crate::events::{self, Links};
use crate::metrics::chunk::{CHUNK_POINTS, RawPoint, decode_points};
use crate::metrics::codec::to_millis;
use crate::metrics::{self, Axis, Query};
use crate::store::Db;
use crate::store::group::{GroupCommit, GroupStore, Limits};
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Error, Tx};
use gpuplane_api::error::FieldError;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::metric::Series;
use gpuplane_api::telemetry::{GpuFault, GpuFaultKind, TelemetryBatch, gpu_key, process_key};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The most samples one batch may carry (over an hour at one every 2 s).
pub const MAX_BATCH_SAMPLES: usize = 2_000;
/// Downsampled telemetry keeps one mean per this many milliseconds.
pub const DOWNSAMPLED_MS: i64 = 60_000;

/// Checks a batch; one error per bad field (at most 20).
pub fn validate(batch: &TelemetryBatch) -> Result<(), Error> {
    let mut errors = Vec::new();
    if batch.batch_id.trim().is_empty() || batch.batch_id.len() > 200 {
        errors.push(FieldError {
            field: "batch_id".into(),
            message: "must be 1-200 characters".into(),
        });
    }
    if batch.samples.len() > MAX_BATCH_SAMPLES {
        errors.push(FieldError {
            field: "samples".into(),
            message: format!("at most {MAX_BATCH_SAMPLES} samples per batch"),
        });
    }
    for (at, sample) in batch.samples.iter().enumerate() {
        if errors.len() >= 20 {
            break;
        }
        if !sample.wall_time.is_finite() || sample.wall_time < 0.0 {
            errors.push(FieldError {
                field: format!("samples[{at}].wall_time"),
                message: "must be a finite number of seconds since the epoch".into(),
            });
        }
        if sample.gpus.iter().any(|gpu| gpu.index > 1024) {
            errors.push(FieldError {
                field: format!("samples[{at}].gpus"),
                message: "a GPU index is at most 1024".into(),
            });
        }
        if let Some(process) = sample
            .processes
            .iter()
            .find(|p| p.job_id.is_empty() || p.job_id.len() > 100)
        {
            errors.push(FieldError {
                field: format!("samples[{at}].processes"),
                message: format!("`{}` is not a job id", process.job_id),
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(errors))
    }
}

/// What one batch stored.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ingested {
    pub samples: usize,
    /// GPU faults recorded as `GPU_ERROR` events.
    pub faults: usize,
}

/// A node's checked batch, as the telemetry writer takes it.
pub type NodeBatch = (String, TelemetryBatch);

/// The handle the telemetry route stores batches through.
pub type TelemetryWriter = GroupCommit<Telemetry>;

/// Stores nodes' telemetry batches, a group in a few statements.
pub struct Telemetry;

/// How long a batch waits for others before they are written together.
/// Agents send every few seconds each, so batches come steadily but apart:
/// with 1,000 agents, a group of a tenth of a second is a dozen batches in
/// one commit instead of a dozen commits.
const GATHER: Duration = Duration::from_millis(100);

/// Starts the telemetry writer over `db`.
pub fn start_writer(db: Db) -> TelemetryWriter {
    let limits = Limits {
        most: 4 * MAX_BATCH_SAMPLES,
        gather: GATHER,
    };
    GroupCommit::start(db, Telemetry, limits)
}

impl GroupStore for Telemetry {
    type Item = NodeBatch;
    type Answer = Ingested;

    fn weight((_, batch): &NodeBatch) -> usize {
        batch.samples.len().max(1)
    }

    async fn store(&self, tx: &mut Tx, items: &[NodeBatch]) -> Result<Vec<Ingested>, Error> {
        ingest(tx, items).await
    }
}

/// Stores validated batches of nodes in the caller's transaction, all in a
/// few statements; a batch id seen before for its node adds nothing. Each
/// GPU fault becomes a `GPU_ERROR` event on the node and on the job that
/// held the GPU then.
pub async fn ingest(conn: &mut Tx, batches: &[NodeBatch]) -> Result<Vec<Ingested>, Error> {
    let ids: Vec<(&str, &str, usize)> = batches
        .iter()
        .map(|(node_id, batch)| (node_id.as_str(), batch.batch_id.as_str(), batch.samples.len()))
        .collect();
    // A batch sent twice in one group is claimed by its first copy only.
    let batch_rows = conn.dialect().json_elements("$2", "batch");
    let mut claimed: HashSet<(String, String)> = sql!(conn, |conn| {
        sqlx::query_as(&format!(
            "INSERT INTO metric_batches (run_id, batch_id, points, received_at)
         SELECT batch.value ->> 0, batch.value ->> 1, CAST(batch.value ->> 2 AS BIGINT), $1 FROM {batch_rows} WHERE true
         ON CONFLICT (run_id, batch_id) DO NOTHING
         RETURNING run_id, batch_id"
        ))
        .bind(now_ms())
        .bind(serde_json::to_string(&ids).map_err(anyhow::Error::from)?)
        .fetch_all(conn)
        .await
    })?
    .into_iter()
    .collect();
    let mut ingested = Vec::with_capacity(batches.len());
    let mut series: Vec<(&str, String, Vec<RawPoint>)> = Vec::new();
    for (node_id, batch) in batches {
        if !claimed.remove(&(node_id.clone(), batch.batch_id.clone())) {
            ingested.push(Ingested::default());
            continue;
        }
        for fault in &batch.faults {
            record_fault(conn, node_id, fault).await?;
        }
        series.extend(
            series_of(batch)
                .into_iter()
                .map(|(key, points)| (node_id.as_str(), key, points)),
        );
        ingested.push(Ingested {
            samples: batch.samples.len(),
            faults: batch.faults.len(),
        });
    }
    let chunks: Vec<(&str, &str, &[RawPoint])> = series
        .iter()
        .map(|(node_id, key, points)| (*node_id, key.as_str(), &points[..]))
        .collect();
    metrics::insert_series_chunks(conn, &chunks, CHUNK_POINTS).await?;
    // Every key in one statement: most are known already.
    let keys: Vec<(&str, &str)> = chunks.iter().map(|&(node_id, key, _)| (node_id, key)).collect();
    let key_rows = conn.dialect().json_elements("$1", "series");
    sql!(conn, |conn| {
        sqlx::query(&format!(
            "INSERT INTO telemetry_series (node_id, key) SELECT series.value ->> 0, series.value ->> 1 FROM {key_rows}
             WHERE true ON CONFLICT DO NOTHING"
        ))
    .bind(serde_json::to_string(&keys).map_err(anyhow::Error::from)?)
    .execute(conn)
    .await.map(|_| ())
    })?;
    Ok(ingested)
}

/// A batch's readings as series: each key's points, sorted.
fn series_of(batch: &TelemetryBatch) -> BTreeMap<String, Vec<RawPoint>> {
    let mut by_key: BTreeMap<String, Vec<RawPoint>> = BTreeMap::new();
    for sample in &batch.samples {
        let point = |value: f64| RawPoint {
            step: (sample.wall_time * 1000.0).round() as i64,
            wall: to_millis(sample.wall_time),
            value,
        };
        for gpu in &sample.gpus {
            for (field, value) in gpu.readings() {
                if let Some(value) = value.filter(|v| v.is_finite()) {
                    by_key
                        .entry(gpu_key(gpu.index, field))
                        .or_default()
                        .push(point(value));
                }
            }
        }
        for process in &sample.processes {
            for (field, value) in process.readings() {
                if value.is_finite() {
                    let key = process_key(&process.job_id, process.attempt, field);
                    by_key.entry(key).or_default().push(point(value));
                }
            }
        }
    }
    for points in by_key.values_mut() {
        metrics::sort_points(points);
    }
    by_key
}

/// A `GPU_ERROR` event for a fault, linked to the job whose attempt held the
/// GPU when it happened (critical, but for a corrected ECC error).
async fn record_fault(conn: &mut Tx, node_id: &str, fault: &GpuFault) -> Result<(), Error> {
    let at = (fault.wall_time * 1000.0) as i64;
    let held = conn.dialect().json_values("a.gpus");
    let holder: Option<(String, Option<String>)> = sql!(conn, |conn| {
        sqlx::query_as(&format!(
            "SELECT a.job_id, r.id FROM attempts a LEFT JOIN runs r ON r.job_id = a.job_id
         WHERE a.node_id = $1 AND a.started_at <= $2 AND (a.ended_at IS NULL OR a.ended_at >= $2)
           AND EXISTS (SELECT 1 FROM {held} WHERE CAST(value AS BIGINT) = $3)
         ORDER BY a.started_at DESC LIMIT 1"
        ))
        .bind(node_id)
        .bind(at)
        .bind(i64::from(fault.index))
        .fetch_optional(conn)
        .await
    })?;
    let node: String = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT name FROM nodes WHERE id = $1")
            .bind(node_id)
            .fetch_one(conn)
            .await
    })?;
    let (job_id, run_id) = holder.map_or((None, None), |(job, run)| (Some(job), run));
    let severity = match fault.kind {
        GpuFaultKind::EccSingleBit => Severity::Warning,
        GpuFaultKind::Xid | GpuFaultKind::EccDoubleBit => Severity::Critical,
    };
    let whose = job_id
        .as_deref()
        .map(|job| format!(" while job {job} used it"))
        .unwrap_or_default();
    let message = format!(
        "GPU {} on {node} reported {}{whose}",
        fault.index,
        fault.describe()
    );
    let links = Links {
        job_id: job_id.as_deref(),
        run_id: run_id.as_deref(),
        node_id: Some(node_id),
    };
    events::record(conn, at, severity, EventKind::GpuError, links, &message).await?;
    Ok(())
}

/// A node's series over a time range (seconds since the epoch), as points
/// or at most `max_points` buckets.
pub async fn series(
    db: &Db,
    node_id: &str,
    key: &str,
    from: f64,
    to: Option<f64>,
    max_points: usize,
) -> Result<Series, Error> {
    let query = Query {
        key: key.to_string(),
        max_points,
        axis: Axis::Time,
        from: Some(from),
        to,
    };
    metrics::query(db, node_id, &query).await
}

/// A node's series over a time range, in brief.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub max: f64,
    pub mean: f64,
    /// The first and the last sample's time (seconds since the epoch).
    pub first: f64,
    pub last: f64,
}

/// The highest and the mean value of a node's series over a time range
/// (seconds since the epoch), and when its samples begin and end; `None`
/// without samples.
pub async fn spread(db: &Db, node_id: &str, key: &str, from: f64, to: f64) -> Result<Option<Spread>, Error> {
    let points = raw_points(db, node_id, key, from, to).await?;
    if points.is_empty() {
        return Ok(None);
    }
    let fold = |pick: fn(f64, f64) -> f64, value: fn(&RawPoint) -> f64| {
        points.iter().map(value).reduce(pick).unwrap_or_default()
    };
    Ok(Some(Spread {
        max: fold(f64::max, |p| p.value),
        mean: points.iter().map(|p| p.value).sum::<f64>() / points.len() as f64,
        first: fold(f64::min, |p| p.wall),
        last: fold(f64::max, |p| p.wall),
    }))
}

/// The mean of a node's series over a time range (seconds since the epoch)
/// and the seconds its samples span; `None` without samples.
pub async fn mean(
    db: &Db,
    node_id: &str,
    key: &str,
    from: f64,
    to: f64,
) -> Result<Option<(f64, f64)>, Error> {
    let points = raw_points(db, node_id, key, from, to).await?;
    let (Some(first), Some(last)) = (
        points.iter().map(|p| p.wall).reduce(f64::min),
        points.iter().map(|p| p.wall).reduce(f64::max),
    ) else {
        return Ok(None);
    };
    let sum: f64 = points.iter().map(|p| p.value).sum();
    Ok(Some((sum / points.len() as f64, last - first)))
}

/// The time (seconds since the epoch) of the last sample of a node's series
/// in a time range whose value was at least `threshold`; None without one.
pub async fn last_at_least(
    db: &Db,
    node_id: &str,
    key: &str,
    (from, to): (f64, f64),
    threshold: f64,
) -> Result<Option<f64>, Error> {
    let points = raw_points(db, node_id, key, from, to).await?;
    Ok(points
        .iter()
        .filter(|p| p.value >= threshold)
        .map(|p| p.wall)
        .reduce(f64::max))
}

/// Every stored point of a series in a time range.
async fn raw_points(db: &Db, node_id: &str, key: &str, from: f64, to: f64) -> Result<Vec<RawPoint>, Error> {
    let blobs: Vec<Vec<u8>> = sql!(db, |pool| {
        sqlx::query_scalar(
        "SELECT points FROM metric_chunks WHERE run_id = $1 AND key = $2 AND time_max >= $3 AND time_min <= $4",
    )
    .bind(node_id)
    .bind(key)
    .bind(from)
    .bind(to)
    .fetch_all(pool)
    .await
    })?;
    let mut points = Vec::new();
    for blob in &blobs {
        decode_points(blob, &mut points).map_err(anyhow::Error::from)?;
    }
    points.retain(|p| p.wall >= from && p.wall <= to);
    Ok(points)
}

/// How long telemetry is kept, at full resolution and in all.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub full_resolution: Duration,
    pub keep: Duration,
}

/// What one [`maintain`] pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Maintained {
    pub downsampled_points: usize,
    pub deleted_chunks: u64,
}

/// Deletes telemetry older than the retention, and replaces full-resolution
/// points older than `full_resolution` by one mean a minute. A series is
/// downsampled chunk by chunk, each in its own transaction, so readers see
/// the old chunk or its replacement, never both.
pub async fn maintain(db: &Db, now_ms: i64, retention: Retention) -> Result<Maintained, Error> {
    let mut done = Maintained::default();
    let keep_from = now_ms - retention.keep.as_millis() as i64;
    done.deleted_chunks = sql!(db, |pool| {
        sqlx::query(
            "DELETE FROM metric_chunks WHERE step_max < $1
         AND run_id IN (SELECT DISTINCT node_id FROM telemetry_series)",
        )
        .bind(keep_from)
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
    })?;
    let full_from = now_ms - retention.full_resolution.as_millis() as i64;
    // A node's batch ids guard against resends, which come within the hour
    // an agent keeps what it could not send: a day's worth is plenty.
    sql!(db, |pool| {
        sqlx::query(
            "DELETE FROM metric_batches WHERE received_at < $1
         AND run_id IN (SELECT DISTINCT node_id FROM telemetry_series)",
        )
        .bind(full_from)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    // Whole minutes only, so a minute is never averaged twice.
    let cutoff = full_from - full_from.rem_euclid(DOWNSAMPLED_MS);
    let series: Vec<(String, String, i64)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT node_id, key, downsampled_until FROM telemetry_series WHERE downsampled_until < $1",
        )
        .bind(cutoff)
        .fetch_all(pool)
        .await
    })?;
    for (node_id, key, since) in series {
        done.downsampled_points += downsample(db, &node_id, &key, since, cutoff).await?;
    }
    Ok(done)
}

/// Replaces a series' points in `[since, until)` (milliseconds) by one mean
/// a minute; returns how many points were replaced.
async fn downsample(db: &Db, node_id: &str, key: &str, since: i64, until: i64) -> Result<usize, Error> {
    let mut tx = crate::store::write(db).await?;
    let chunks: Vec<(i64, Vec<u8>)> = sql!(tx, |conn| {
        sqlx::query_as(
        "SELECT id, points FROM metric_chunks WHERE run_id = $1 AND key = $2 AND step_max >= $3 AND step_min < $4",
    )
    .bind(node_id)
    .bind(key)
    .bind(since)
    .bind(until)
    .fetch_all(conn)
    .await
    })?;
    let mut points = Vec::new();
    for (_, blob) in &chunks {
        decode_points(blob, &mut points).map_err(anyhow::Error::from)?;
    }
    let (old, keep): (Vec<RawPoint>, Vec<RawPoint>) = points
        .into_iter()
        .partition(|p| p.step >= since && p.step < until);
    let mut minutes: BTreeMap<i64, (f64, f64, usize)> = BTreeMap::new();
    for point in &old {
        let minute = point.step - point.step.rem_euclid(DOWNSAMPLED_MS);
        let slot = minutes.entry(minute).or_insert((0.0, 0.0, 0));
        slot.0 += point.value;
        slot.1 += point.wall;
        slot.2 += 1;
    }
    let mut merged: Vec<RawPoint> = minutes
        .into_iter()
        .map(|(minute, (sum, walls, count))| RawPoint {
            step: minute,
            wall: to_millis(walls / count as f64),
            value: sum / count as f64,
        })
        .collect();
    merged.extend(keep);
    metrics::sort_points(&mut merged);
    for (id, _) in &chunks {
        sql!(tx, |conn| {
            sqlx::query("DELETE FROM metric_chunks WHERE id = $1")
                .bind(id)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
    }
    if !merged.is_empty() {
        metrics::insert_chunks(&mut tx, node_id, key, &merged, CHUNK_POINTS).await?;
    }
    sql!(tx, |conn| {
        sqlx::query("UPDATE telemetry_series SET downsampled_until = $1 WHERE node_id = $2 AND key = $3")
            .bind(until)
            .bind(node_id)
            .bind(key)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(old.len())
}

/// An attempt of the run's job that started, or one member of a multi-node
/// attempt that started.
#[derive(sqlx::FromRow)]
pub struct StartedAttempt {
    pub job_id: String,
    pub n: i64,
    /// The member's rank; 0 for a one-node attempt.
    pub rank: i64,
    pub node_id: String,
    pub node: String,
    /// A JSON array of GPU indices.
    pub gpus: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
}

/// The run's job's attempts that started, in order, with their nodes; a
/// multi-node attempt's members each on their own node, by rank.
pub async fn started_attempts(db: &Db, run_id: &str) -> Result<Vec<StartedAttempt>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT a.job_id, a.n, CAST(0 AS BIGINT) AS rank, a.node_id, n.name AS node, a.gpus,
                    a.started_at, a.ended_at
             FROM runs r JOIN attempts a ON a.job_id = r.job_id JOIN nodes n ON n.id = a.node_id
             WHERE r.id = $1 AND a.started_at IS NOT NULL AND a.nodes = 1
             UNION ALL
             SELECT m.job_id, m.attempt, m.node_rank, m.node_id, n.name, m.gpus, m.started_at, m.ended_at
             FROM runs r JOIN attempt_members m ON m.job_id = r.job_id JOIN nodes n ON n.id = m.node_id
             WHERE r.id = $1 AND m.started_at IS NOT NULL
             ORDER BY 2, 3",
        )
        .bind(run_id)
        .fetch_all(pool)
        .await
    })?)
}
