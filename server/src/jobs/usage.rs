//! GPU usage (`GET /api/v1/usage`, `gpuctl usage`): for every attempt that
//! held GPUs in a span, the GPU time it was allocated (its GPUs × the time
//! from its start to its end, or now, as its record says: each member of a
//! multi-node attempt on its own node) and the part its GPUs worked (each
//! GPU's mean utilisation in the agent's telemetry over that time × the
//! time), grouped by project, user, node or GPU model. Preempted and
//! retried jobs count each attempt; everything comes from the database, so
//! a restarted server answers the same.

use crate::identity::access::Visible;
use crate::nodes::telemetry;
use crate::store::sql;
use crate::store::time::rfc3339;
use crate::store::{Db, Error};
use gpuplane_api::telemetry::gpu_key;
use gpuplane_api::usage::{UsageBy, UsageReport, UsageRow};
use std::collections::BTreeMap;

const MS_PER_HOUR: f64 = 3_600_000.0;

/// One attempt's hold on one node's GPUs.
#[derive(Debug, sqlx::FromRow)]
struct Held {
    project: String,
    user: Option<String>,
    node_id: String,
    node: String,
    /// A JSON array of GPU indices.
    gpus: String,
    started_at: i64,
    ended_at: Option<i64>,
}

/// Every hold inside `[since, now]`: one-node attempts, and each member of
/// multi-node ones (rank 0 included), by its own start and end.
async fn holds(db: &Db, since: i64) -> Result<Vec<Held>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT j.project, u.name AS user, a.node_id, n.name AS node, a.gpus, a.started_at, a.ended_at
             FROM attempts a JOIN jobs j ON j.id = a.job_id JOIN nodes n ON n.id = a.node_id
                 LEFT JOIN users u ON u.id = j.submitted_by
             WHERE a.nodes = 1 AND a.started_at IS NOT NULL AND a.gpus != '[]'
                 AND (a.ended_at IS NULL OR a.ended_at > $1)
             UNION ALL
             SELECT j.project, u.name AS user, m.node_id, n.name AS node, m.gpus, m.started_at, m.ended_at
             FROM attempt_members m JOIN jobs j ON j.id = m.job_id JOIN nodes n ON n.id = m.node_id
                 LEFT JOIN users u ON u.id = j.submitted_by
             WHERE m.started_at IS NOT NULL AND m.gpus != '[]' AND (m.ended_at IS NULL OR m.ended_at > $1)",
        )
        .bind(since)
        .fetch_all(pool)
        .await
    })?)
}

/// Each node's GPU models, by index.
async fn models(db: &Db) -> Result<BTreeMap<(String, i64), String>, Error> {
    let rows: Vec<(String, i64, String)> = sql!(db, |pool| {
        sqlx::query_as("SELECT node_id, idx, model FROM gpus")
            .fetch_all(pool)
            .await
    })?;
    Ok(rows
        .into_iter()
        .map(|(node, index, model)| ((node, index), model))
        .collect())
}

/// The usage of the projects `visible` inside `[since_ms, now_ms]`, grouped `by`.
pub async fn report(
    db: &Db,
    visible: &Visible,
    by: UsageBy,
    since_ms: i64,
    now_ms: i64,
) -> Result<UsageReport, Error> {
    let models = match by {
        UsageBy::GpuModel => models(db).await?,
        _ => BTreeMap::new(),
    };
    let mut rows: BTreeMap<String, UsageRow> = BTreeMap::new();
    for held in holds(db, since_ms).await? {
        if !visible.contains(&held.project) {
            continue;
        }
        let from = held.started_at.max(since_ms);
        let to = held.ended_at.unwrap_or(now_ms).min(now_ms);
        if to <= from {
            continue;
        }
        let gpus: Vec<u32> = serde_json::from_str(&held.gpus).unwrap_or_default();
        let mut counted = false;
        for gpu in gpus {
            let key = match by {
                UsageBy::Project => held.project.clone(),
                UsageBy::User => held.user.clone().unwrap_or_else(|| "(none)".into()),
                UsageBy::Node => held.node.clone(),
                UsageBy::GpuModel => models
                    .get(&(held.node_id.clone(), i64::from(gpu)))
                    .cloned()
                    .unwrap_or_else(|| "(unknown)".into()),
            };
            let row = rows.entry(key.clone()).or_insert_with(|| UsageRow {
                key,
                ..UsageRow::default()
            });
            let hours = (to - from) as f64 / MS_PER_HOUR;
            row.allocated_gpu_hours += hours;
            let series = gpu_key(gpu, "utilization_percent");
            let spread = telemetry::spread(
                db,
                &held.node_id,
                &series,
                from as f64 / 1000.0,
                to as f64 / 1000.0,
            )
            .await?;
            match spread {
                Some(spread) => row.used_gpu_hours += hours * spread.mean.clamp(0.0, 100.0) / 100.0,
                None => row.unmeasured_gpu_hours += hours,
            }
            if !counted {
                row.attempts += 1;
                counted = true;
            }
        }
    }
    let mut rows: Vec<UsageRow> = rows.into_values().collect();
    rows.sort_by(|a, b| {
        b.allocated_gpu_hours
            .total_cmp(&a.allocated_gpu_hours)
            .then(a.key.cmp(&b.key))
    });
    let mut total = UsageRow {
        key: "total".into(),
        ..UsageRow::default()
    };
    for row in &rows {
        total.allocated_gpu_hours += row.allocated_gpu_hours;
        total.used_gpu_hours += row.used_gpu_hours;
        total.unmeasured_gpu_hours += row.unmeasured_gpu_hours;
        total.attempts += row.attempts;
    }
    Ok(UsageReport {
        by,
        since: rfc3339(since_ms),
        until: rfc3339(now_ms),
        rows,
        total,
    })
}
