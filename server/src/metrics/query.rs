//! Reading metrics back: a key's points in a step or time range, raw when
//! few enough, else downsampled into buckets from the coarsest summaries
//! fine enough (min, max, last, count and non-finite count survive); the
//! latest values of many runs at once; values at given steps.

use super::chunk::{LEVELS, Level, RawPoint, Sub, decode_points, decode_steps, decode_summary};
use crate::store::sql;
use crate::store::{Db, Error, Tx};
use gpuplane_api::metric::{Bucket, Latest, Series, SeriesPoint, Value};
use std::collections::{BTreeMap, HashMap};

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
