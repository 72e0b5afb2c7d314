//! The GPU inventory of this host: NVML when the NVIDIA driver is present,
//! simulated GPUs when asked for, none otherwise (the cpu_only lane).
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`), so the agent builds and
//! runs on hosts without a driver. Every reading NVML cannot give becomes `None`.

use gpuplane_api::node::{Gpu, GpuSource};
use gpuplane_api::telemetry::GpuSample;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};

/// Memory a simulated GPU claims to have (an 80 GB card).
const SIMULATED_MEMORY_MIB: u64 = 81_920;

pub enum GpuProbe {
    Nvml(Box<Nvml>),
    Simulated { count: u32, node: String },
    None,
}

impl GpuProbe {
    /// Simulated GPUs when `fake_gpus` is set, else NVML if it loads, else none.
    pub fn detect(fake_gpus: Option<u32>, node: &str) -> GpuProbe {
        if let Some(count) = fake_gpus {
            tracing::info!(count, "simulating GPUs (--fake-gpus); they run no CUDA code");
            return GpuProbe::Simulated {
                count,
                node: node.to_string(),
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
            GpuProbe::Simulated { count, node } => (0..*count)
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
/// it (a job that computes reads busy, one that sleeps reads idle), so
/// telemetry and the idle-GPU rule can be tried without a GPU.
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
            GpuProbe::Simulated { count, .. } => (0..*count)
                .map(|index| simulated_sample(index, wall_time, load(index).unwrap_or_default()))
                .collect(),
            GpuProbe::None => Vec::new(),
        }
    }
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
