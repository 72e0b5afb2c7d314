//! GPU and process telemetry over time: what an agent samples every few
//! seconds (`POST /api/v1/agent/telemetry`) and what a run's System tab
//! reads back (`GET /api/v1/runs/{run_id}/system`).

use crate::metric::Series;
use serde::{Deserialize, Serialize};

/// What is sampled, one definition for the agent, the server's series keys
/// and the console's chart titles: (field, title with unit).
pub const GPU_FIELDS: [(&str, &str); 5] = [
    ("utilization_percent", "GPU utilisation (%)"),
    ("memory_used_mib", "GPU memory used (MiB)"),
    ("power_w", "GPU power (W)"),
    ("temperature_c", "GPU temperature (°C)"),
    ("sm_clock_mhz", "SM clock (MHz)"),
];

/// The job's own process tree: CPU (100 = one core) and resident memory.
pub const PROCESS_FIELDS: [(&str, &str); 2] = [
    ("cpu_percent", "CPU of the job's processes (% of a core)"),
    ("memory_rss_mib", "Memory of the job's processes (MiB RSS)"),
];

/// One reading of one GPU. A reading the driver cannot give is `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    pub index: u32,
    pub utilization_percent: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
}

impl GpuSample {
    /// The readings by field name, in [`GPU_FIELDS`] order.
    pub fn readings(&self) -> [(&'static str, Option<f64>); 5] {
        [
            (GPU_FIELDS[0].0, self.utilization_percent),
            (GPU_FIELDS[1].0, self.memory_used_mib),
            (GPU_FIELDS[2].0, self.power_w),
            (GPU_FIELDS[3].0, self.temperature_c),
            (GPU_FIELDS[4].0, self.sm_clock_mhz),
        ]
    }
}

/// The resources of one running attempt's process tree (its process group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProcessSample {
    pub job_id: String,
    pub attempt: i64,
    pub cpu_percent: f64,
    pub memory_rss_mib: f64,
}

impl ProcessSample {
    /// The readings by field name, in [`PROCESS_FIELDS`] order.
    pub fn readings(&self) -> [(&'static str, f64); 2] {
        [
            (PROCESS_FIELDS[0].0, self.cpu_percent),
            (PROCESS_FIELDS[1].0, self.memory_rss_mib),
        ]
    }
}

/// Everything read at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TelemetrySample {
    /// Seconds since the epoch.
    pub wall_time: f64,
    #[serde(default)]
    pub gpus: Vec<GpuSample>,
    #[serde(default)]
    pub processes: Vec<ProcessSample>,
}

/// `POST /api/v1/agent/telemetry`: samples and GPU faults since the last
/// batch. A batch id seen before for the node adds nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TelemetryBatch {
    pub node_id: String,
    pub batch_id: String,
    pub samples: Vec<TelemetrySample>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<GpuFault>,
}

/// A hardware error NVML reported for a GPU: each becomes a `GPU_ERROR` event
/// on the job holding the GPU, which the diagnosis explains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuFault {
    /// Seconds since the epoch.
    pub wall_time: f64,
    pub index: u32,
    pub kind: GpuFaultKind,
    /// The Xid number, for `xid`.
    #[serde(default)]
    pub xid: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GpuFaultKind {
    /// A critical Xid error of the driver.
    Xid,
    /// A corrected (single-bit) memory error: a warning.
    EccSingleBit,
    /// An uncorrected (double-bit) memory error.
    EccDoubleBit,
}

names!("GPU fault kind", GpuFaultKind {
    Xid => "xid",
    EccSingleBit => "ecc_single_bit",
    EccDoubleBit => "ecc_double_bit",
});

impl GpuFault {
    /// What the fault is, in words: `Xid 79 (the GPU has fallen off the bus: …)`.
    pub fn describe(&self) -> String {
        match (self.kind, self.xid) {
            (GpuFaultKind::Xid, Some(xid)) => format!("Xid {xid} ({})", xid_meaning(xid)),
            (GpuFaultKind::Xid, None) => "an Xid error of unknown number".into(),
            (GpuFaultKind::EccSingleBit, _) => "a corrected single-bit ECC memory error".into(),
            (GpuFaultKind::EccDoubleBit, _) => {
                "an uncorrected double-bit ECC memory error (the data in GPU memory is lost)".into()
            }
        }
    }
}

/// What the common Xid numbers mean (NVIDIA's Xid catalogue, short).
pub fn xid_meaning(xid: u64) -> &'static str {
    match xid {
        13 => "graphics engine exception: often an out-of-range access in a kernel of the job",
        31 => "GPU memory page fault: an illegal address in a kernel of the job, or a driver bug",
        43 => "the GPU stopped processing: a kernel of the job faulted",
        45 => "preemptive cleanup after an earlier error",
        48 => "double-bit ECC error: GPU memory is failing",
        61 | 62 => "internal micro-controller error: a driver or firmware fault",
        63 | 64 => "ECC page retirement or row remapping: GPU memory is wearing out",
        74 => "NVLink error: a link between GPUs failed",
        79 => "the GPU has fallen off the bus: hardware, power or a PCIe fault",
        92 => "high single-bit ECC error rate: GPU memory is degrading",
        94 => "contained ECC error: the affected job was stopped, the GPU keeps working",
        95 => "uncontained ECC error: the GPU needs a reset",
        119 | 120 => "GSP firmware error: the GPU needs a reset",
        _ => "see NVIDIA's Xid catalogue",
    }
}

/// The series key of a GPU field on its node: `gpu3.power_w`.
pub fn gpu_key(index: u32, field: &str) -> String {
    format!("gpu{index}.{field}")
}

/// The series key of a process field of an attempt on its node:
/// `job_01….2.cpu_percent`.
pub fn process_key(job_id: &str, attempt: i64, field: &str) -> String {
    format!("{job_id}.{attempt}.{field}")
}

/// `GET /api/v1/runs/{run_id}/system`: the telemetry of a run's job, each
/// attempt on its node over its own time span (each member of a multi-node
/// attempt on its own node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SystemTelemetry {
    pub attempts: Vec<AttemptSpan>,
    /// One series per attempt, GPU (for GPU fields) and field, in
    /// [`GPU_FIELDS`] then [`PROCESS_FIELDS`] order.
    pub series: Vec<SystemSeries>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptSpan {
    pub attempt: i64,
    /// The member of a multi-node attempt (one span each); absent (0) for a
    /// one-node attempt.
    #[serde(default, skip_serializing_if = "crate::log::is_zero")]
    pub rank: i64,
    pub node: String,
    pub gpus: Vec<u32>,
    /// Seconds since the epoch; `to` is null while it runs.
    pub from: f64,
    pub to: Option<f64>,
}

impl SystemSeries {
    /// Who the series is about: `GPU 3`, or `processes`; a member's
    /// above rank 0 says its rank, `rank 1 GPU 3`.
    pub fn whose(&self) -> String {
        let whose = self
            .gpu
            .map_or("processes".to_string(), |gpu| format!("GPU {gpu}"));
        match self.rank {
            0 => whose,
            rank => format!("rank {rank} {whose}"),
        }
    }

    /// The mean and peak of its readings (its points, or its buckets' last
    /// values); `None` without any.
    pub fn mean_and_peak(&self) -> Option<(f64, f64)> {
        let values: Vec<f64> = match (&self.series.points, &self.series.buckets) {
            (Some(points), _) => points.iter().map(|p| p.value.0).collect(),
            (None, Some(buckets)) => buckets.iter().map(|b| b.last.0).collect(),
            (None, None) => Vec::new(),
        };
        let peak = values.iter().copied().reduce(f64::max)?;
        Some((values.iter().sum::<f64>() / values.len() as f64, peak))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SystemSeries {
    pub attempt: i64,
    /// The member of a multi-node attempt, as in [`AttemptSpan`].
    #[serde(default, skip_serializing_if = "crate::log::is_zero")]
    pub rank: i64,
    /// The GPU for GPU fields; null for the process fields.
    pub gpu: Option<u32>,
    pub field: String,
    /// Points or buckets over wall time (`step` is milliseconds since the epoch).
    pub series: Series,
}
