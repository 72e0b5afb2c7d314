//! Nodes: registration and heartbeats from agents (`heartbeats`: written
//! in groups), labels, and the node list. Turning silent nodes OFFLINE and
//! their jobs LOST is the jobs' liveness monitor (`jobs::liveness`).

pub mod agent_link;
pub mod heartbeats;
pub mod log_relay;
pub mod telemetry;

use crate::events::{self, Links};
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Tx};
use gpuplane_api::agent::AgentHello;
use gpuplane_api::error::FieldError;
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::node::{Gpu, GpuSource, LabelChanges, Node, NodeStatus};
use std::collections::BTreeMap;

/// Registers a node (or refreshes the one with the same name) and marks it
/// ONLINE; returns its id and whether it was OFFLINE before.
pub async fn register(
    conn: &mut Tx,
    hello: &AgentHello,
    address: Option<&str>,
) -> Result<(String, bool), Error> {
    let now = now_ms();
    // A map of strings always serialises.
    let labels = serde_json::to_string(&hello.labels).unwrap_or_else(|_| "{}".to_string());
    let runners = hello
        .runners
        .as_ref()
        .map(|runners| serde_json::to_string(runners).unwrap_or_else(|_| "[]".to_string()));
    let was_offline: Option<String> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT status FROM nodes WHERE name = $1")
            .bind(&hello.name)
            .fetch_optional(conn)
            .await
    })?;
    // The admins' label changes stay on top of what the agent says.
    let merged_labels = conn
        .dialect()
        .json_merge("excluded.agent_labels", "nodes.admin_labels");
    let node_id: String = sql!(conn, |conn| {
        sqlx::query_scalar(&format!(
            "INSERT INTO nodes (id, name, hostname, labels, agent_labels, agent_version, status, registered_at, last_seen_at,
                                runners, isolation, address)
         VALUES ($1, $2, $3, $4, $4, $5, 'ONLINE', $6, $7, $8, $9, $10)
         ON CONFLICT (name) DO UPDATE SET
             hostname = excluded.hostname, agent_labels = excluded.agent_labels,
             labels = {merged_labels},
             agent_version = excluded.agent_version, runners = excluded.runners,
             isolation = excluded.isolation, status = 'ONLINE',
             last_seen_at = excluded.last_seen_at, address = excluded.address
         RETURNING id"
        ))
    .bind(new_id("node"))
    .bind(&hello.name)
    .bind(&hello.hostname)
    .bind(labels)
    .bind(&hello.agent_version)
    .bind(now)
    .bind(now)
    .bind(runners)
    .bind(&hello.isolation)
    .bind(address)
    .fetch_one(conn)
    .await
    })?;
    sql!(conn, |conn| {
        sqlx::query("DELETE FROM gpus WHERE node_id = $1")
            .bind(&node_id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    write_gpus(&mut *conn, &[(&node_id, &hello.gpus)]).await?;
    Ok((node_id, was_offline.as_deref() == Some("OFFLINE")))
}

/// The longest label key and value an admin may set.
pub const MAX_LABEL_KEY: usize = 128;
pub const MAX_LABEL_VALUE: usize = 256;

/// What is wrong with a label name an admin gives, if anything.
pub fn label_key_problem(key: &str) -> Option<String> {
    let fine = (1..=MAX_LABEL_KEY).contains(&key.len())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c));
    (!fine).then(|| {
        format!("label names are 1-{MAX_LABEL_KEY} characters of letters, digits, '.', '_', '/' or '-'")
    })
}

/// What is wrong with a label value an admin gives, if anything.
pub fn label_value_problem(value: &str) -> Option<String> {
    (value.len() > MAX_LABEL_VALUE || value.chars().any(char::is_control))
        .then(|| format!("label values are at most {MAX_LABEL_VALUE} characters, without control characters"))
}

/// Applies an admin's label changes to the node named `name`: kept in
/// `admin_labels`, so agent restarts keep them; `labels` is recomputed.
pub async fn change_labels(db: &Db, name: &str, changes: &LabelChanges) -> Result<(), Error> {
    let mut errors = Vec::new();
    let reserved = gpuplane_api::node::NODE_NAME_LABEL;
    let keys = changes
        .set
        .keys()
        .map(|k| ("set", k))
        .chain(changes.remove.iter().map(|k| ("remove", k)));
    for (field, key) in keys {
        let problem = label_key_problem(key).or_else(|| {
            (key == reserved).then(|| format!("{reserved} is the node's name, set by the server"))
        });
        if let Some(message) = problem {
            errors.push(FieldError {
                field: format!("{field}.{key}"),
                message,
            });
        }
    }
    for (key, value) in &changes.set {
        if let Some(message) = label_value_problem(value) {
            errors.push(FieldError {
                field: format!("set.{key}"),
                message,
            });
        }
    }
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let mut tx = crate::store::write(db).await?;
    let current: Option<String> = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT admin_labels FROM nodes WHERE name = $1")
            .bind(name)
            .fetch_optional(conn)
            .await
    })?;
    let current = current.ok_or_else(|| Error::NotFound(format!("no node {name}")))?;
    let mut admin: BTreeMap<String, Option<String>> = if changes.reset {
        BTreeMap::new()
    } else {
        serde_json::from_str(&current).unwrap_or_default()
    };
    for (key, value) in &changes.set {
        admin.insert(key.clone(), Some(value.clone()));
    }
    for key in &changes.remove {
        admin.insert(key.clone(), None);
    }
    let admin = serde_json::to_string(&admin).map_err(anyhow::Error::from)?;
    let merged_labels = tx.dialect().json_merge("agent_labels", "$2");
    sql!(tx, |conn| {
        sqlx::query(&format!(
            "UPDATE nodes SET admin_labels = $1, labels = {merged_labels} WHERE name = $3"
        ))
        .bind(&admin)
        .bind(&admin)
        .bind(name)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// AGENT_RECONNECTED for a node that was OFFLINE.
pub async fn record_reconnect(conn: &mut Tx, node_id: &str, name: &str, now: i64) -> Result<(), Error> {
    let links = Links {
        node_id: Some(node_id),
        ..Links::default()
    };
    let message = format!("node {name} is back; its running jobs continue");
    events::record(
        conn,
        now,
        Severity::Info,
        EventKind::AgentReconnected,
        links,
        &message,
    )
    .await?;
    Ok(())
}

/// Writes the GPUs of several nodes (index, model, latest readings), all in
/// one statement, over what was there for the same indices.
pub(crate) async fn write_gpus(conn: &mut Tx, nodes: &[(&str, &[Gpu])]) -> Result<(), Error> {
    let rows: Vec<serde_json::Value> = nodes
        .iter()
        .flat_map(|&(node_id, gpus)| {
            gpus.iter().map(move |gpu| {
                serde_json::json!([
                    node_id,
                    gpu.index,
                    gpu.uuid,
                    gpu.model,
                    source_name(gpu.source),
                    gpu.memory_total_mib,
                    gpu.memory_used_mib,
                    gpu.utilization_percent,
                    gpu.temperature_c,
                ])
            })
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    // `WHERE true` tells SQLite's parser the ON CONFLICT is the upsert's.
    let gpus = conn.dialect().json_elements("$1", "gpu");
    sql!(conn, |conn| {
        sqlx::query(&format!(
            "INSERT INTO gpus (node_id, idx, uuid, model, source, memory_total_mib, memory_used_mib,
                           utilization_percent, temperature_c)
         SELECT gpu.value ->> 0, CAST(gpu.value ->> 1 AS BIGINT), gpu.value ->> 2, gpu.value ->> 3, gpu.value ->> 4,
                CAST(gpu.value ->> 5 AS BIGINT), CAST(gpu.value ->> 6 AS BIGINT),
                CAST(gpu.value ->> 7 AS BIGINT), CAST(gpu.value ->> 8 AS BIGINT)
         FROM {gpus} WHERE true
         ON CONFLICT (node_id, idx) DO UPDATE SET
             uuid = excluded.uuid, model = excluded.model, source = excluded.source,
             memory_total_mib = excluded.memory_total_mib, memory_used_mib = excluded.memory_used_mib,
             utilization_percent = excluded.utilization_percent, temperature_c = excluded.temperature_c"
        ))
        .bind(serde_json::Value::Array(rows).to_string())
        .execute(conn)
        .await
        .map(|_| ())
    })?;
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
    admin_labels: String,
    agent_version: String,
    runners: Option<String>,
    isolation: Option<String>,
    status: String,
    last_seen_at: i64,
    drained_at: Option<i64>,
    drained_by: Option<String>,
    /// DISPATCHING or RUNNING attempts on the node.
    active: i64,
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
pub async fn list(db: &Db) -> Result<Vec<Node>, Error> {
    let nodes: Vec<NodeRow> = sql!(db, |pool| {
        sqlx::query_as(
        "SELECT id, name, hostname, labels, admin_labels, agent_version, runners, isolation, status, last_seen_at, drained_at,
                drained_by,
                (SELECT count(*) FROM attempts a
                 WHERE a.node_id = nodes.id AND a.status IN ('DISPATCHING', 'RUNNING')) AS active
         FROM nodes ORDER BY name",
    )
    .fetch_all(pool)
    .await
    })?;
    let gpus: Vec<GpuRow> = sql!(db, |pool| {
        sqlx::query_as("SELECT * FROM gpus ORDER BY node_id, idx")
            .fetch_all(pool)
            .await
    })?;
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
            admin_labels: serde_json::from_str(&row.admin_labels).unwrap_or_default(),
            runners: row.runners.and_then(|json| serde_json::from_str(&json).ok()),
            isolation: row.isolation,
            status: match (row.status.as_str(), row.drained_at, row.active) {
                ("ONLINE", None, _) => NodeStatus::Online,
                ("ONLINE", Some(_), 0) => NodeStatus::Drained,
                ("ONLINE", Some(_), _) => NodeStatus::Draining,
                _ => NodeStatus::Offline,
            },
            last_seen_at: rfc3339(row.last_seen_at),
            drained_at: row.drained_at.map(rfc3339),
            drained_by: row.drained_by,
            id: row.id,
            name: row.name,
            hostname: row.hostname,
            agent_version: row.agent_version,
        })
        .collect())
}

/// Drains the node named `name` (`by` says who): it takes no new jobs and
/// its running jobs finish. Draining a drained node changes nothing.
pub async fn drain(db: &Db, name: &str, by: Option<&str>) -> Result<(), Error> {
    let changed = sql!(db, |pool| {
        sqlx::query(
        "UPDATE nodes SET drained_at = coalesce(drained_at, $1), drained_by = coalesce(drained_by, $2) WHERE name = $3",
    )
    .bind(now_ms())
    .bind(by)
    .bind(name)
    .execute(pool)
    .await.map(|done| done.rows_affected())
    })?;
    one_node(changed, name)
}

/// Lets the node named `name` take jobs again.
pub async fn undrain(db: &Db, name: &str) -> Result<(), Error> {
    let changed = sql!(db, |pool| {
        sqlx::query("UPDATE nodes SET drained_at = NULL, drained_by = NULL WHERE name = $1")
            .bind(name)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    one_node(changed, name)
}

/// An update by node name changed one node, or there is no such node.
fn one_node(rows: u64, name: &str) -> Result<(), Error> {
    match rows {
        0 => Err(Error::NotFound(format!("no node {name}"))),
        _ => Ok(()),
    }
}

/// How many nodes are ONLINE and how many OFFLINE.
pub async fn status_counts(db: &Db) -> Result<(i64, i64), Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'ONLINE'), count(*) FILTER (WHERE status = 'OFFLINE') FROM nodes",
        )
        .fetch_one(pool)
        .await
    })?)
}

/// The GPUs of the ONLINE nodes: all, and how many of them are simulated.
pub async fn online_gpus(db: &Db) -> Result<(i64, i64), Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE g.source = 'simulated') FROM gpus g JOIN nodes n ON n.id = g.node_id
             WHERE n.status = 'ONLINE'",
        )
        .fetch_one(pool)
        .await
    })?)
}
