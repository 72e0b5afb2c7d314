//! `gpuplane-agent`: runs on every GPU host. Registers the node with the
//! server, keeps it ONLINE with heartbeats carrying fresh GPU readings, and
//! reconnects whenever the server goes away.

pub mod client;
pub mod gpus;

use client::{Client, ClientError};
use gpuplane_api::node::{AgentHello, AgentWelcome, Heartbeat};
use gpus::GpuProbe;
use std::collections::BTreeMap;
use std::time::Duration;

/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Parser)]
#[command(
    name = "gpuplane-agent",
    version,
    about = "The GPUPlane agent: reports this host's GPUs and runs jobs."
)]
pub struct Args {
    /// URL of the GPUPlane server.
    #[arg(long, env = "GPUPLANE_SERVER", default_value = "http://127.0.0.1:8600")]
    pub server: String,

    /// Agent token (`gpuplane-server admin create-agent-token`).
    #[arg(long, env = "GPUPLANE_AGENT_TOKEN", hide_env_values = true)]
    pub token: String,

    /// Node name, unique in the cluster (default: the host name).
    #[arg(long, env = "GPUPLANE_NODE_NAME")]
    pub name: Option<String>,

    /// Labels for node_selector matching, e.g. `gpu=a100,zone=eu`.
    #[arg(long, env = "GPUPLANE_NODE_LABELS", value_parser = parse_labels, default_value = "")]
    pub labels: Labels,

    /// Simulate N GPUs instead of asking NVML (development and CI).
    #[arg(long, env = "GPUPLANE_FAKE_GPUS", value_name = "N")]
    pub fake_gpus: Option<u32>,
}

#[derive(Debug, Clone, Default)]
pub struct Labels(pub BTreeMap<String, String>);

fn parse_labels(text: &str) -> Result<Labels, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("label `{pair}` is not key=value"))?;
        if key.trim().is_empty() {
            return Err(format!("label `{pair}` has an empty key"));
        }
        labels.insert(key.trim().to_string(), value.trim().to_string());
    }
    Ok(Labels(labels))
}

/// The host's name as the kernel knows it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Runs until `shutdown` completes; fails only when the server refuses the token.
pub async fn run(args: Args, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let hostname = hostname();
    let name = args.name.clone().unwrap_or_else(|| hostname.clone());
    let probe = GpuProbe::detect(args.fake_gpus, &name);
    let client = Client::new(&args.server, &args.token)?;
    tracing::info!(
        server = args.server,
        name,
        gpus = probe.describe(),
        "agent starting"
    );
    let hello = |gpus| AgentHello {
        name: name.clone(),
        hostname: hostname.clone(),
        labels: args.labels.0.clone(),
        gpus,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    tokio::pin!(shutdown);
    let mut backoff = Duration::from_millis(200);
    loop {
        let session = async {
            let welcome: AgentWelcome = match client.post("agent/hello", &hello(probe.read())).await {
                Ok(welcome) => welcome,
                Err(error) => return error,
            };
            tracing::info!(node_id = welcome.node_id, "connected to the server");
            heartbeats(&client, &probe, &welcome).await
        };
        let error = tokio::select! {
            error = session => error,
            () = &mut shutdown => {
                tracing::info!("agent stopping");
                return Ok(());
            }
        };
        match error {
            ClientError::Refused { .. } => return Err(error.into()),
            ClientError::UnknownNode => {
                tracing::warn!("the server forgot this node; registering again");
                backoff = Duration::from_millis(200);
                continue;
            }
            other => tracing::warn!(error = %other, retry_in = ?backoff, "lost the server; will reconnect"),
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = &mut shutdown => return Ok(()),
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Sends heartbeats until one fails; returns why.
async fn heartbeats(client: &Client, probe: &GpuProbe, welcome: &AgentWelcome) -> ClientError {
    let mut ticker = tokio::time::interval(Duration::from_millis(welcome.heartbeat_interval_ms.max(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let beat = Heartbeat {
            node_id: welcome.node_id.clone(),
            gpus: probe.read(),
        };
        if let Err(error) = client.post::<_, ()>("agent/heartbeat", &beat).await {
            return error;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_and_refuse_garbage() {
        let labels = parse_labels("gpu=a100, zone=eu").unwrap();
        assert_eq!(labels.0.get("gpu").map(String::as_str), Some("a100"));
        assert_eq!(labels.0.get("zone").map(String::as_str), Some("eu"));
        assert!(parse_labels("").unwrap().0.is_empty());
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("=x").is_err());
    }
}
