//! The GPU inventory of this host: NVML when the NVIDIA driver is present,
//! simulated GPUs when asked for, none otherwise (the cpu_only lane).
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`), so the agent builds and
//! runs on hosts without a driver. Every reading NVML cannot give becomes `None`.

use gpuplane_api::node::{Gpu, GpuSource};
use gpuplane_api::telemetry::{GpuFault, GpuFaultKind, GpuSample};
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Memory a simulated GPU claims to have (an 80 GB card).
const SIMULATED_MEMORY_MIB: u64 = 81_920;

pub enum GpuProbe {
    Nvml(Box<Nvml>),
    /// `utilization`: what a GPU a job holds reads (`--fake-gpu-util`),
    /// instead of its job's CPU.
    Simulated {
        count: u32,
        node: String,
        utilization: Option<f64>,
    },
    None,
}

impl GpuProbe {
    /// Simulated GPUs when `fake_gpus` is set (reading `fake_utilization`
    /// while a job holds them, when set), else NVML if it loads, else none.
    pub fn detect(fake_gpus: Option<u32>, fake_utilization: Option<f64>, node: &str) -> GpuProbe {
        if let Some(count) = fake_gpus {
            tracing::info!(count, "simulating GPUs (--fake-gpus); they run no CUDA code");
            return GpuProbe::Simulated {
                count,
                node: node.to_string(),
                utilization: fake_utilization,
            };
        }
        match Nvml::init() {
            Ok(nvml) => {
                let count = nvml.device_count().unwrap_or(0);
                let driver = nvml.sys_driver_version().unwrap_or_else(|_| "unknown".into());
                tracing::info!(count, driver, "NVML found the NVIDIA driver");
                GpuProbe::Nvml(Box::new(nvml))
            }
            Err(error) => {
                tracing::info!(
                    %error,
                    "NVML is not available: this node offers only the cpu_only lane \
                     (pass --fake-gpus N to simulate GPUs)"
                );
                GpuProbe::None
            }
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            GpuProbe::Nvml(_) => "nvml",
            GpuProbe::Simulated { .. } => "simulated",
            GpuProbe::None => "none",
        }
    }

    /// The GPUs with fresh readings.
    pub fn read(&self) -> Vec<Gpu> {
        match self {
            GpuProbe::Nvml(nvml) => read_nvml(nvml),
            GpuProbe::Simulated { count, node, .. } => (0..*count)
                .map(|index| Gpu {
                    index,
                    uuid: format!("GPU-SIMULATED-{node}-{index}"),
                    model: "Simulated GPU".to_string(),
                    source: GpuSource::Simulated,
                    memory_total_mib: Some(SIMULATED_MEMORY_MIB),
                    memory_used_mib: Some(0),
                    utilization_percent: Some(0),
                    temperature_c: None,
                })
                .collect(),
            GpuProbe::None => Vec::new(),
        }
    }
}

/// What a simulated GPU reads: it follows the CPU of the job that holds
/// it (a job that computes reads busy, one that sleeps reads idle), or
/// reads `--fake-gpu-util` while held, so telemetry and the idle-GPU rule
/// can be tried without a GPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimulatedLoad {
    pub cpu_percent: f64,
    pub memory_rss_mib: f64,
}

impl GpuProbe {
    /// A telemetry reading of every GPU. Simulated GPUs read the load of the
    /// job holding each (`load(index)`), with a slow drift so idle ones move too.
    pub fn sample(&self, wall_time: f64, load: impl Fn(u32) -> Option<SimulatedLoad>) -> Vec<GpuSample> {
        match self {
            GpuProbe::Nvml(nvml) => sample_nvml(nvml),
            GpuProbe::Simulated {
                count, utilization, ..
            } => (0..*count)
                .map(|index| {
                    let held = load(index).map(|load| SimulatedLoad {
                        cpu_percent: utilization.unwrap_or(load.cpu_percent),
                        ..load
                    });
                    simulated_sample(index, wall_time, held.unwrap_or_default())
                })
                .collect(),
            GpuProbe::None => Vec::new(),
        }
    }
}

/// GPU faults waiting for the next telemetry batch.
pub type FaultQueue = Arc<Mutex<Vec<GpuFault>>>;

impl GpuProbe {
    /// With NVML, waits for Xid and ECC events of every GPU on a thread of
    /// its own and queues them. Simulated GPUs report the faults written to
    /// a file instead ([`simulated_faults`]).
    pub fn watch_faults(self: &Arc<Self>, queue: FaultQueue) {
        if !matches!(**self, GpuProbe::Nvml(_)) {
            return;
        }
        let probe = self.clone();
        let spawned = std::thread::Builder::new().name("nvml-events".into()).spawn(move || {
            let GpuProbe::Nvml(nvml) = &*probe else { return };
            if let Err(error) = wait_for_faults(nvml, &queue) {
                tracing::warn!(%error, "stopped watching NVML events: Xid and ECC errors are not reported");
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start the NVML event thread: Xid and ECC errors are not reported");
        }
    }
}

fn wait_for_faults(nvml: &Nvml, queue: &Mutex<Vec<GpuFault>>) -> Result<(), NvmlError> {
    let wanted =
        EventTypes::CRITICAL_XID_ERROR | EventTypes::SINGLE_BIT_ECC_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
    let mut set = nvml.create_event_set()?;
    for index in 0..nvml.device_count()? {
        let device = nvml.device_by_index(index)?;
        let supported = device.supported_event_types().unwrap_or(EventTypes::empty()) & wanted;
        if !supported.is_empty() {
            set = device.register_events(supported, set).map_err(|e| e.error)?;
        }
    }
    loop {
        let event = match set.wait(5_000) {
            Ok(event) => event,
            Err(NvmlError::Timeout) => continue,
            Err(error) => return Err(error),
        };
        let kind = if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
            GpuFaultKind::Xid
        } else if event.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
            GpuFaultKind::EccDoubleBit
        } else {
            GpuFaultKind::EccSingleBit
        };
        let fault = GpuFault {
            wall_time: now_seconds(),
            index: event.device.index().unwrap_or(u32::MAX),
            kind,
            xid: match event.event_data {
                Some(XidError::Value(xid)) => Some(xid),
                _ => None,
            },
        };
        tracing::warn!(index = fault.index, fault = fault.describe(), "GPU fault");
        queue.lock().unwrap_or_else(|e| e.into_inner()).push(fault);
    }
}

/// Faults written for simulated GPUs to rehearse what a real one reports:
/// lines of `INDEX xid N`, `INDEX ecc_single_bit` or `INDEX ecc_double_bit`
/// in `file`, which is read once and removed. Bad lines are skipped with a
/// warning.
pub fn simulated_faults(file: &Path) -> Vec<GpuFault> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Vec::new();
    };
    let _ = std::fs::remove_file(file);
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let parsed = parse_fault(line);
            if parsed.is_none() {
                tracing::warn!(
                    line,
                    "not a simulated GPU fault (INDEX xid N | INDEX ecc_single_bit | INDEX ecc_double_bit)"
                );
            }
            parsed
        })
        .collect()
}

fn parse_fault(line: &str) -> Option<GpuFault> {
    let mut words = line.split_whitespace();
    let index = words.next()?.parse().ok()?;
    let kind = GpuFaultKind::parse(words.next()?)?;
    let xid = match kind {
        GpuFaultKind::Xid => Some(words.next()?.parse().ok()?),
        _ => None,
    };
    Some(GpuFault {
        wall_time: now_seconds(),
        index,
        kind,
        xid,
    })
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn simulated_sample(index: u32, wall_time: f64, load: SimulatedLoad) -> GpuSample {
    let utilization = load.cpu_percent.clamp(0.0, 100.0);
    let drift = (wall_time / 30.0 + f64::from(index)).sin();
    GpuSample {
        index,
        utilization_percent: Some(utilization),
        memory_used_mib: Some(load.memory_rss_mib.min(SIMULATED_MEMORY_MIB as f64)),
        power_w: Some(60.0 + 3.4 * utilization + 2.0 * drift),
        temperature_c: Some(32.0 + 0.45 * utilization + drift),
        sm_clock_mhz: Some(if utilization < 1.0 {
            345.0
        } else {
            1410.0 + 4.0 * utilization
        }),
    }
}

fn sample_nvml(nvml: &Nvml) -> Vec<GpuSample> {
    let count = nvml.device_count().unwrap_or(0);
    let mut samples = Vec::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let memory = device.memory_info().ok();
        samples.push(GpuSample {
            index,
            utilization_percent: device.utilization_rates().ok().map(|u| f64::from(u.gpu)),
            memory_used_mib: memory.map(|m| (m.used / (1024 * 1024)) as f64),
            power_w: device
                .power_usage()
                .ok()
                .map(|milliwatts| f64::from(milliwatts) / 1000.0),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
            sm_clock_mhz: device.clock_info(Clock::SM).ok().map(f64::from),
        });
    }
    samples
}

fn read_nvml(nvml: &Nvml) -> Vec<Gpu> {
    let count = match nvml.device_count() {
        Ok(count) => count,
        Err(error) => {
            tracing::warn!(%error, "NVML could not count devices");
            return Vec::new();
        }
    };
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(device) => device,
            Err(error) => {
                tracing::warn!(index, %error, "NVML could not open a device; skipping it");
                continue;
            }
        };
        let memory = device.memory_info().ok();
        gpus.push(Gpu {
            index,
            uuid: device.uuid().unwrap_or_else(|_| format!("GPU-UNKNOWN-{index}")),
            model: device.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
            source: GpuSource::Nvml,
            memory_total_mib: memory.as_ref().map(|m| m.total / (1024 * 1024)),
            memory_used_mib: memory.as_ref().map(|m| m.used / (1024 * 1024)),
            utilization_percent: device.utilization_rates().ok().map(|u| u.gpu),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
        });
    }
    gpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_fault_lines_parse_and_bad_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("faults");
        std::fs::write(
            &file,
            "0 xid 79\n\n1 ecc_double_bit\n2 xid\nnonsense\n3 ecc_single_bit extra\n",
        )
        .unwrap();
        let faults = simulated_faults(&file);
        let read: Vec<(u32, GpuFaultKind, Option<u64>)> =
            faults.iter().map(|f| (f.index, f.kind, f.xid)).collect();
        assert_eq!(
            read,
            [
                (0, GpuFaultKind::Xid, Some(79)),
                (1, GpuFaultKind::EccDoubleBit, None),
                (3, GpuFaultKind::EccSingleBit, None),
            ]
        );
        assert!(!file.exists(), "the file is read once");
        assert!(
            faults[0]
                .describe()
                .starts_with("Xid 79 (the GPU has fallen off the bus")
        );
        assert!(simulated_faults(&file).is_empty());
    }
}
