//! `gpuctl status` and `gpuctl node status`.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::Page;
use gpuplane_api::duration::format_seconds;
use gpuplane_api::health::Health;
use gpuplane_api::job::JobStatus;
use gpuplane_api::node::{ClusterSummary, GpuSource, Node};
use serde::Serialize;
use std::fmt::Write;

#[derive(Serialize)]
struct ClusterStatus {
    server: String,
    health: Health,
    #[serde(flatten)]
    summary: ClusterSummary,
}

pub async fn status(client: &Client, out: &Output) -> Result<(), CliError> {
    let health: Health = client.get("health").await?;
    let summary: ClusterSummary = client.get("cluster").await?;
    let status = ClusterStatus {
        server: client.server.clone(),
        health,
        summary,
    };
    out.emit(&status, |s| {
        let c = &s.summary;
        let simulated = if c.gpus_simulated > 0 { format!(" ({} simulated)", c.gpus_simulated) } else { String::new() };
        let queue: Vec<String> = JobStatus::ALL
            .iter()
            .map(|status| format!("{} {}", c.jobs.get(status.as_str()).copied().unwrap_or(0), status.as_str()))
            .collect();
        let notice = match (&c.maintenance, c.dispatch_paused) {
            (Some(m), true) => format!("\nPaused  maintenance: nothing new starts, running jobs continue: {m}"),
            (Some(m), false) => format!("\nNotice  {m}"),
            (None, _) => String::new(),
        };
        let quotas: String = c
            .quotas
            .iter()
            .map(|quota| format!("\nQuota   {} {}: {}", quota.kind, quota.name, quota.usage_text()))
            .collect();
        let fair_share = match &c.fair_share {
            Some(share) if !share.usage.is_empty() => format!(
                "\nShare   GPU time in the last {}: {} (less goes first among equal priorities)",
                format_seconds(share.window_s),
                share.usage_text()
            ),
            _ => String::new(),
        };
        format!(
            "Server  {} (GPUPlane {}, {})\nNodes   {} online, {} offline\nGPUs    {} in use of {} on online nodes{simulated}\nJobs    {}{quotas}{fair_share}{notice}",
            s.server,
            s.health.version,
            s.health.status,
            c.nodes_online,
            c.nodes_offline,
            c.gpus_in_use,
            c.gpus_total,
            queue.join(", ")
        )
    });
    Ok(())
}

pub async fn node_status(client: &Client, out: &Output) -> Result<(), CliError> {
    let nodes: Page<Node> = client.get("nodes").await?;
    out.emit(&nodes, |nodes| render_nodes(&nodes.items));
    Ok(())
}

fn render_nodes(nodes: &[Node]) -> String {
    if nodes.is_empty() {
        return "No nodes yet: start `gpuplane-agent --server URL --token T` on a GPU host.".to_string();
    }
    let mut text = String::new();
    for node in nodes {
        let labels: Vec<String> = node.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let runners = match &node.runners {
            Some(runners) => runners.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(","),
            None => "? (its agent is too old to say: it gets no jobs)".to_string(),
        };
        let isolation = node
            .isolation
            .as_deref()
            .unwrap_or("advisory: its agent does not say");
        let _ = writeln!(
            text,
            "{}  {}  {} GPU{}  labels: {}  runners: {runners}  isolation: {isolation}  last seen {}",
            node.name,
            node.status.as_str(),
            node.gpus.len(),
            if node.gpus.len() == 1 { "" } else { "s" },
            if labels.is_empty() {
                "-".to_string()
            } else {
                labels.join(",")
            },
            node.last_seen_at
        );
        for gpu in &node.gpus {
            let memory = match (gpu.memory_used_mib, gpu.memory_total_mib) {
                (Some(used), Some(total)) => format!("{used}/{total} MiB"),
                _ => "memory ?".to_string(),
            };
            let utilization = gpu
                .utilization_percent
                .map_or("?".to_string(), |u| format!("{u}%"));
            let temperature = gpu.temperature_c.map_or("-".to_string(), |t| format!("{t}°C"));
            let simulated = if gpu.source == GpuSource::Simulated {
                "  [simulated]"
            } else {
                ""
            };
            let _ = writeln!(
                text,
                "  gpu {}  {}  {memory}  util {utilization}  temp {temperature}{simulated}",
                gpu.index, gpu.model
            );
        }
    }
    text
}
