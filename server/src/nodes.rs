//! Nodes: registration and heartbeats from agents, the liveness monitor that
//! turns silent nodes OFFLINE, and the node list.

use crate::db::DbError;
use crate::ids::new_id;
use crate::state::AppState;
use crate::time::{now_ms, rfc3339};
use gpuplane_api::node::{AgentHello, Gpu, GpuSource, Node, NodeStatus};
use sqlx::{SqliteConnection, SqlitePool};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// Registers a node (or refreshes one with the same name) and marks it ONLINE.
pub async fn register(db: &SqlitePool, hello: &AgentHello) -> Result<String, DbError> {
    let now = now_ms();
    // A map of strings always serialises.
    let labels = serde_json::to_string(&hello.labels).unwrap_or_else(|_| "{}".to_string());
    let mut tx = db.begin().await?;
    let node_id: String = sqlx::query_scalar(
        "INSERT INTO nodes (id, name, hostname, labels, agent_version, status, registered_at, last_seen_at)
         VALUES (?, ?, ?, ?, ?, 'ONLINE', ?, ?)
         ON CONFLICT (name) DO UPDATE SET
             hostname = excluded.hostname, labels = excluded.labels,
             agent_version = excluded.agent_version, status = 'ONLINE',
             last_seen_at = excluded.last_seen_at
         RETURNING id",
    )
    .bind(new_id("node"))
    .bind(&hello.name)
    .bind(&hello.hostname)
    .bind(labels)
    .bind(&hello.agent_version)
    .bind(now)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM gpus WHERE node_id = ?")
        .bind(&node_id)
        .execute(&mut *tx)
        .await?;
    write_gpus(&mut tx, &node_id, &hello.gpus).await?;
    tx.commit().await?;
    Ok(node_id)
}

/// Records a heartbeat; `NotFound` when the node is unknown (the agent then says hello again).
pub async fn heartbeat(db: &SqlitePool, node_id: &str, gpus: &[Gpu]) -> Result<(), DbError> {
    let mut tx = db.begin().await?;
    let updated = sqlx::query("UPDATE nodes SET status = 'ONLINE', last_seen_at = ? WHERE id = ?")
        .bind(now_ms())
        .bind(node_id)
        .execute(&mut *tx)
        .await?;
    if updated.rows_affected() == 0 {
        return Err(DbError::NotFound);
    }
    write_gpus(&mut tx, node_id, gpus).await?;
    tx.commit().await?;
    Ok(())
}

async fn write_gpus(conn: &mut SqliteConnection, node_id: &str, gpus: &[Gpu]) -> Result<(), DbError> {
    for gpu in gpus {
        sqlx::query(
            "INSERT INTO gpus (node_id, idx, uuid, model, source, memory_total_mib, memory_used_mib,
                               utilization_percent, temperature_c)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (node_id, idx) DO UPDATE SET
                 uuid = excluded.uuid, model = excluded.model, source = excluded.source,
                 memory_total_mib = excluded.memory_total_mib, memory_used_mib = excluded.memory_used_mib,
                 utilization_percent = excluded.utilization_percent, temperature_c = excluded.temperature_c",
        )
        .bind(node_id)
        .bind(gpu.index as i64)
        .bind(&gpu.uuid)
        .bind(&gpu.model)
        .bind(source_name(gpu.source))
        .bind(gpu.memory_total_mib.map(|v| v as i64))
        .bind(gpu.memory_used_mib.map(|v| v as i64))
        .bind(gpu.utilization_percent.map(|v| v as i64))
        .bind(gpu.temperature_c.map(|v| v as i64))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

fn source_name(source: GpuSource) -> &'static str {
    match source {
        GpuSource::Nvml => "nvml",
        GpuSource::Simulated => "simulated",
    }
}

#[derive(sqlx::FromRow)]
struct NodeRow {
    id: String,
    name: String,
    hostname: String,
    labels: String,
    agent_version: String,
    status: String,
    last_seen_at: i64,
}

#[derive(sqlx::FromRow)]
struct GpuRow {
    node_id: String,
    idx: i64,
    uuid: String,
    model: String,
    source: String,
    memory_total_mib: Option<i64>,
    memory_used_mib: Option<i64>,
    utilization_percent: Option<i64>,
    temperature_c: Option<i64>,
}

/// Every node, by name, with its GPUs by index.
pub async fn list(db: &SqlitePool) -> Result<Vec<Node>, DbError> {
    let nodes: Vec<NodeRow> = sqlx::query_as(
        "SELECT id, name, hostname, labels, agent_version, status, last_seen_at FROM nodes ORDER BY name",
    )
    .fetch_all(db)
    .await?;
    let gpus: Vec<GpuRow> = sqlx::query_as("SELECT * FROM gpus ORDER BY node_id, idx")
        .fetch_all(db)
        .await?;
    let mut by_node: BTreeMap<String, Vec<Gpu>> = BTreeMap::new();
    for row in gpus {
        by_node.entry(row.node_id.clone()).or_default().push(Gpu {
            index: row.idx as u32,
            uuid: row.uuid,
            model: row.model,
            source: if row.source == "nvml" {
                GpuSource::Nvml
            } else {
                GpuSource::Simulated
            },
            memory_total_mib: row.memory_total_mib.map(|v| v as u64),
            memory_used_mib: row.memory_used_mib.map(|v| v as u64),
            utilization_percent: row.utilization_percent.map(|v| v as u32),
            temperature_c: row.temperature_c.map(|v| v as u32),
        });
    }
    Ok(nodes
        .into_iter()
        .map(|row| Node {
            gpus: by_node.remove(&row.id).unwrap_or_default(),
            labels: serde_json::from_str(&row.labels).unwrap_or_default(),
            status: if row.status == "ONLINE" {
                NodeStatus::Online
            } else {
                NodeStatus::Offline
            },
            last_seen_at: rfc3339(row.last_seen_at),
            id: row.id,
            name: row.name,
            hostname: row.hostname,
            agent_version: row.agent_version,
        })
        .collect())
}

/// Turns nodes OFFLINE once their last heartbeat is older than the timeout.
/// Sleeps until the earliest node could expire, and wakes early on heartbeats.
pub async fn liveness_monitor(state: AppState, mut shutdown: watch::Receiver<bool>) {
    let timeout_ms = state.config.node_timeout.as_millis() as i64;
    loop {
        let next_check = match expire_silent_nodes(&state.db, timeout_ms).await {
            Ok(Some(oldest_seen)) => {
                Duration::from_millis((oldest_seen + timeout_ms - now_ms()).max(1) as u64)
            }
            Ok(None) => Duration::from_secs(3600),
            Err(error) => {
                tracing::warn!(%error, "liveness check failed; retrying");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(next_check) => {}
            _ = state.nodes_changed.notified() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Marks silent nodes OFFLINE; returns the oldest `last_seen_at` among those still ONLINE.
async fn expire_silent_nodes(db: &SqlitePool, timeout_ms: i64) -> Result<Option<i64>, DbError> {
    let deadline = now_ms() - timeout_ms;
    let expired: Vec<(String, String)> = sqlx::query_as(
        "UPDATE nodes SET status = 'OFFLINE' WHERE status = 'ONLINE' AND last_seen_at <= ? RETURNING id, name",
    )
    .bind(deadline)
    .fetch_all(db)
    .await?;
    for (node_id, name) in expired {
        tracing::warn!(node_id, name, "node missed its heartbeats and is now OFFLINE");
    }
    let oldest: Option<i64> =
        sqlx::query_scalar("SELECT min(last_seen_at) FROM nodes WHERE status = 'ONLINE'")
            .fetch_one(db)
            .await?;
    Ok(oldest)
}
