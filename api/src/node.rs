//! Nodes (agent hosts) and their GPUs.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum NodeStatus {
    Online,
    Offline,
    /// Drained by an admin: takes no new jobs while its running jobs finish.
    Draining,
    /// Drained and idle: safe to take down.
    Drained,
}

names!("node status", NodeStatus {
    Online => "ONLINE",
    Offline => "OFFLINE",
    Draining => "DRAINING",
    Drained => "DRAINED",
});

/// Where a GPU's inventory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum GpuSource {
    /// Read from the NVIDIA driver through NVML.
    Nvml,
    /// Simulated by `gpuplane-agent --fake-gpus N`; runs no CUDA code.
    Simulated,
}

names!("GPU source", GpuSource { Nvml => "nvml", Simulated => "simulated" });

/// Every node carries this label with its name, so that a `node_selector`
/// can pin a job to one node (evaluations default to the checkpoint's node).
pub const NODE_NAME_LABEL: &str = "gpuplane.node";

/// One GPU as the agent last reported it. Readings the driver could not give are `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub source: GpuSource,
    pub memory_total_mib: Option<u64>,
    pub memory_used_mib: Option<u64>,
    /// Percent, 0–100.
    pub utilization_percent: Option<u32>,
    pub temperature_c: Option<u32>,
}

/// A node as `GET /api/v1/nodes` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Node {
    pub id: String,
    pub name: String,
    pub hostname: String,
    pub status: NodeStatus,
    /// What jobs' node selectors match: the agent's `--labels` with the
    /// admins' changes on top.
    pub labels: BTreeMap<String, String>,
    /// The admins' changes: a value sets a label, null hides the agent's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub admin_labels: BTreeMap<String, Option<String>>,
    pub gpus: Vec<Gpu>,
    pub agent_version: String,
    /// The runners its agent runs jobs with; none: its agent is too old to
    /// say, and the node is given no jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runners: Option<Vec<crate::job::Runner>>,
    /// Whether its jobs can reach GPUs they were not given, as its agent
    /// says: `cgroup: …` (enforced) or `advisory: WHY` (`CUDA_VISIBLE_DEVICES`
    /// alone, which a job can unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// RFC 3339 time of the last heartbeat.
    pub last_seen_at: String,
    /// When an admin drained the node (RFC 3339), and who.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_by: Option<String>,
}

/// `POST /api/v1/nodes/{name}/labels`: admins change a node's labels,
/// kept across agent restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LabelChanges {
    /// Labels to set (over the agent's, if it has the same name).
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Labels to remove, the agent's included.
    #[serde(default)]
    pub remove: Vec<String>,
    /// Forget every earlier change first: back to the agent's labels.
    #[serde(default)]
    pub reset: bool,
}

/// `GET /api/v1/cluster`: the cluster at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterSummary {
    pub nodes_online: u64,
    pub nodes_offline: u64,
    /// GPUs on ONLINE nodes.
    pub gpus_total: u64,
    /// Of those, held by DISPATCHING or RUNNING attempts.
    pub gpus_in_use: u64,
    pub gpus_simulated: u64,
    /// Jobs per status (every status, zeros included).
    pub jobs: BTreeMap<String, u64>,
    /// The operators' notice (planned maintenance), when set: maintenance
    /// mode's message while it is on, else the `maintenance_message` setting.
    #[serde(default)]
    pub maintenance: Option<String>,
    /// Maintenance mode is on: nothing new starts, running jobs continue.
    #[serde(default)]
    pub dispatch_paused: bool,
    /// The quotas the caller may see (its projects' and its own), with what
    /// each has running now.
    #[serde(default)]
    pub quotas: Vec<crate::quota::Quota>,
    /// Fair share's window and use; null when it is off.
    #[serde(default)]
    pub fair_share: Option<crate::quota::FairShare>,
}

/// `GET/PUT /api/v1/maintenance`: maintenance mode. While it is on nothing
/// new is dispatched, running jobs continue and every queued job says why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Maintenance {
    pub on: bool,
    /// What users are told (on the dashboard, in `gpuctl status`, in each
    /// queued job's reason).
    pub message: Option<String>,
    /// When it was turned on (RFC 3339).
    pub since: Option<String>,
    /// Who turned it on.
    pub by: Option<String>,
}

/// `PUT /api/v1/maintenance`: turn maintenance mode on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartMaintenance {
    /// What users are told, e.g. "Driver upgrade until 12:00 UTC".
    pub message: String,
}

/// A node's `--advertise-addr`: a host name, an IPv4 address or an IPv6
/// one (without brackets), nothing a shell or a URL would read otherwise.
pub fn valid_address(address: &str) -> bool {
    (1..=253).contains(&address.len())
        && !address.starts_with('-')
        && address
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
}

/// Node names and label keys: what fits in a URL and a shell without quoting.
pub fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}
