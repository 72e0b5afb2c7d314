//! `GET /metrics`: the Prometheus text this server answers a scrape with.
//! What the server counted as it worked (`observe.rs`), then what the
//! database holds at this moment: jobs by project and state, the oldest
//! queued job's age, jobs ended by state and reason, nodes, the store's size;
//! and this server's own state (leading, live streams).
//!
//! Series are bounded: projects × 3 active states, states × failure reasons,
//! 2 node states, and routes × methods × 5 status classes × 18 buckets for
//! requests. No label names a job, run, user or step. The database's
//! figures are the same on every replica (take `max` across instances);
//! the counters are each replica's own (take `sum`).

use crate::state::AppState;
use crate::store::time::now_ms;
use crate::store::{Db, Error, sql};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

/// Labels of one series, as (name, value) pairs.
type Labels = Vec<(&'static str, String)>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// What the database holds now, as `/metrics` shows it.
#[derive(Debug, Default)]
struct Snapshot {
    /// Every project's name: each has its active series, at 0 when idle.
    projects: Vec<String>,
    /// (project, status, jobs) for QUEUED, DISPATCHING and RUNNING.
    active: Vec<(String, String, i64)>,
    /// (project, the oldest queued job's `queued_at`, ms).
    oldest_queued: Vec<(String, i64)>,
    /// (status, failure reason or "", jobs) of ended jobs.
    ended: Vec<(String, String, i64)>,
    /// (status, nodes).
    nodes: Vec<(String, i64)>,
    store_bytes: i64,
}

/// The states whose jobs `gpuplane_jobs` counts.
const ACTIVE: [&str; 3] = ["QUEUED", "DISPATCHING", "RUNNING"];

async fn snapshot(db: &Db) -> Result<Snapshot, Error> {
    let projects = sql!(db, |pool| {
        sqlx::query_scalar("SELECT name FROM projects ORDER BY name")
            .fetch_all(pool)
            .await
    })?;
    let active = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT project, status, count(*) FROM jobs
             WHERE status IN ('QUEUED', 'DISPATCHING', 'RUNNING') GROUP BY project, status",
        )
        .fetch_all(pool)
        .await
    })?;
    let oldest_queued = sql!(db, |pool| {
        sqlx::query_as("SELECT project, min(queued_at) FROM jobs WHERE status = 'QUEUED' GROUP BY project")
            .fetch_all(pool)
            .await
    })?;
    let ended = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT status, coalesce(failure_reason, ''), count(*) FROM jobs
             WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST') GROUP BY status, failure_reason",
        )
        .fetch_all(pool)
        .await
    })?;
    let nodes = sql!(db, |pool| {
        sqlx::query_as("SELECT status, count(*) FROM nodes GROUP BY status")
            .fetch_all(pool)
            .await
    })?;
    let store_bytes = sql!(db, |pool| {
        sqlx::query_scalar(db.dialect().pick(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            "SELECT pg_database_size(current_database())",
        ))
        .fetch_one(pool)
        .await
    })?;
    Ok(Snapshot {
        projects,
        active,
        oldest_queued,
        ended,
        nodes,
        store_bytes,
    })
}

fn gauges(registry: &mut Registry, name: &str, help: &str, unit: Option<Unit>) -> Gauges {
    let family = Gauges::default();
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, family.clone()),
        None => registry.register(name, help, family.clone()),
    }
    family
}

fn set(family: &Gauges, labels: Labels, value: f64) {
    family.get_or_create(&labels).set(value);
}

/// The whole answer to a scrape, in the Prometheus text format (0.0.4).
pub async fn render(state: &AppState) -> Result<String, Error> {
    let snapshot = snapshot(&state.db).await?;
    let now = now_ms();
    let mut registry = Registry::with_prefix("gpuplane");
    let jobs = gauges(
        &mut registry,
        "jobs",
        "Jobs queued, dispatching or running, by project and state",
        None,
    );
    let oldest = gauges(
        &mut registry,
        "queue_oldest_age",
        "Time the oldest queued job of each project has waited (0: none waits)",
        Some(Unit::Seconds),
    );
    for project in &snapshot.projects {
        for state in ACTIVE {
            set(
                &jobs,
                vec![("project", project.clone()), ("state", state.to_string())],
                0.0,
            );
        }
        set(&oldest, vec![("project", project.clone())], 0.0);
    }
    for (project, status, count) in snapshot.active {
        set(&jobs, vec![("project", project), ("state", status)], count as f64);
    }
    for (project, queued_at) in snapshot.oldest_queued {
        set(
            &oldest,
            vec![("project", project)],
            (now - queued_at).max(0) as f64 / 1000.0,
        );
    }
    let ended = gauges(
        &mut registry,
        "jobs_ended",
        "Jobs kept in an ended state, by state and failure reason (deleting a run lowers it: use delta())",
        None,
    );
    for (status, reason, count) in snapshot.ended {
        set(&ended, vec![("state", status), ("reason", reason)], count as f64);
    }
    let nodes = gauges(&mut registry, "nodes", "Registered nodes by state", None);
    for (status, count) in snapshot.nodes {
        set(&nodes, vec![("state", status)], count as f64);
    }
    let store = gauges(
        &mut registry,
        "store_size",
        "Size of the database",
        Some(Unit::Bytes),
    );
    set(&store, Vec::new(), snapshot.store_bytes as f64);
    let leader = gauges(
        &mut registry,
        "leader",
        "1 when this server runs the scheduler (the leading replica), else 0",
        None,
    );
    set(&leader, Vec::new(), if state.is_leading() { 1.0 } else { 0.0 });
    let streams = gauges(
        &mut registry,
        "sse_clients",
        "Live streams (SSE) open on this server",
        None,
    );
    set(&streams, Vec::new(), state.streams.open() as f64);
    let build = gauges(&mut registry, "build_info", "The server's version", None);
    set(
        &build,
        vec![("version", env!("CARGO_PKG_VERSION").to_string())],
        1.0,
    );
    let mut text = String::new();
    let encoded = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        .and_then(|()| state.observed.encode(&mut text));
    encoded.map_err(|error| Error::Internal(anyhow::anyhow!("encoding /metrics: {error}")))?;
    Ok(text)
}
