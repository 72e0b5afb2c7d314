//! `--metrics-addr ADDR`: this host's GPUs for Prometheus, under the names
//! dcgm-exporter gives them (`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`,
//! …, with its `gpu`, `UUID`, `device`, `modelName` and `Hostname` labels),
//! so dashboards made for dcgm-exporter work unchanged; the job holding each
//! GPU is the `hpc_job` label (dcgm-exporter's own name for a batch job) and
//! its `project`. Then `gpuplane_agent_` series of the agent itself.
//!
//! The figures are the telemetry task's latest sample (`telemetry.rs`
//! publishes each one here), so a scrape reads no device. Series: 6 per GPU
//! and 2 per running job, plus 4; the job labels change only when a GPU
//! changes hands. No token: like dcgm-exporter, it answers whoever reaches
//! the address, so bind it where only the scraper can (SECURITY.md).

use crate::jobs::RunningProcess;
use bytes::Bytes;
use gpuplane_api::node::Gpu;
use gpuplane_api::telemetry::{GpuSample, ProcessSample};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::encoding::prometheus_text::{CONTENT_TYPE, encode};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

type Labels = Vec<(&'static str, String)>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// One telemetry sample: the GPUs' readings, and the jobs running then.
#[derive(Debug, Default, Clone)]
pub struct Reading {
    pub gpus: Vec<GpuSample>,
    pub running: Vec<RunningProcess>,
    pub processes: Vec<ProcessSample>,
}

/// What a scrape shows: the GPUs' fixed facts, the latest reading, and the
/// agent's own state.
pub struct Exporter {
    hostname: String,
    inventory: Vec<Gpu>,
    latest: Mutex<Reading>,
    /// Whether the agent is connected to the server now.
    pub connected: AtomicBool,
    /// Telemetry samples waiting for the server.
    pub samples_waiting: AtomicU64,
}

impl Exporter {
    pub fn new(hostname: String, inventory: Vec<Gpu>) -> Exporter {
        Exporter {
            hostname,
            inventory,
            latest: Mutex::default(),
            connected: AtomicBool::new(false),
            samples_waiting: AtomicU64::new(0),
        }
    }

    /// Keeps `reading` for the next scrapes.
    pub fn publish(&self, reading: Reading) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = reading;
    }

    /// The Prometheus text of the latest reading.
    pub fn render(&self) -> String {
        let reading = self.latest.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut registry = Registry::default();
        let field = |registry: &mut Registry, name: &str, help: &str| {
            let family = Gauges::default();
            registry.register(name, help, family.clone());
            family
        };
        let util = field(&mut registry, "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)");
        let fb_used = field(
            &mut registry,
            "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB)",
        );
        let fb_free = field(
            &mut registry,
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB)",
        );
        let power = field(&mut registry, "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)");
        let temp = field(&mut registry, "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)");
        let clock = field(
            &mut registry,
            "DCGM_FI_DEV_SM_CLOCK",
            "SM clock frequency (in MHz)",
        );
        for sample in &reading.gpus {
            let Some(gpu) = self.inventory.iter().find(|gpu| gpu.index == sample.index) else {
                continue;
            };
            let holder = reading
                .running
                .iter()
                .find(|job| job.gpus.contains(&sample.index));
            let labels: Labels = vec![
                ("gpu", gpu.index.to_string()),
                ("UUID", gpu.uuid.clone()),
                ("device", format!("nvidia{}", gpu.index)),
                ("modelName", gpu.model.clone()),
                ("Hostname", self.hostname.clone()),
                (
                    "hpc_job",
                    holder.map(|job| job.attempt.job_id.clone()).unwrap_or_default(),
                ),
                (
                    "project",
                    holder.map(|job| job.project.clone()).unwrap_or_default(),
                ),
            ];
            let set = |family: &Gauges, value: Option<f64>| {
                if let Some(value) = value {
                    family.get_or_create(&labels).set(value);
                }
            };
            set(&util, sample.utilization_percent);
            set(&fb_used, sample.memory_used_mib);
            let free = gpu.memory_total_mib.zip(sample.memory_used_mib);
            set(&fb_free, free.map(|(total, used)| (total as f64 - used).max(0.0)));
            set(&power, sample.power_w);
            set(&temp, sample.temperature_c);
            set(&clock, sample.sm_clock_mhz);
        }
        let mut own = Registry::with_prefix("gpuplane_agent");
        let gauge = |registry: &mut Registry, name: &str, help: &str, value: f64| {
            let gauge = Gauge::<f64, AtomicU64>::default();
            gauge.set(value);
            registry.register(name, help, gauge);
        };
        gauge(
            &mut own,
            "gpus",
            "GPUs this agent offers",
            self.inventory.len() as f64,
        );
        gauge(
            &mut own,
            "jobs_running",
            "Jobs whose processes run on this host",
            reading.running.len() as f64,
        );
        gauge(
            &mut own,
            "connected",
            "1 while the agent is connected to its server",
            if self.connected.load(Ordering::Relaxed) {
                1.0
            } else {
                0.0
            },
        );
        gauge(
            &mut own,
            "telemetry_samples_waiting",
            "Telemetry samples not yet taken by the server",
            self.samples_waiting.load(Ordering::Relaxed) as f64,
        );
        let cpu = field(
            &mut own,
            "job_cpu_percent",
            "CPU of each running job's processes (100 = one core)",
        );
        let rss = field(
            &mut own,
            "job_memory_rss_mib",
            "Resident memory of each running job's processes (MiB)",
        );
        for process in &reading.processes {
            let project = reading
                .running
                .iter()
                .find(|job| job.attempt.job_id == process.job_id)
                .map(|job| job.project.clone())
                .unwrap_or_default();
            let labels: Labels = vec![
                ("hpc_job", process.job_id.clone()),
                ("project", project),
                ("Hostname", self.hostname.clone()),
            ];
            cpu.get_or_create(&labels).set(process.cpu_percent);
            rss.get_or_create(&labels).set(process.memory_rss_mib);
        }
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &registry).and_then(|()| encode(&mut text, &own));
        text
    }

    fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, content_type, body) = match (request.method(), request.uri().path()) {
            (&Method::GET | &Method::HEAD, "/metrics") => (StatusCode::OK, CONTENT_TYPE, self.render()),
            (_, "/metrics") => (StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n".into()),
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "this address serves GET /metrics only\n".into(),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    }
}

/// Answers scrapes on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, exporter: Arc<Exporter>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "--metrics-addr: accepting a connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let exporter = exporter.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = exporter.answer(&request);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "--metrics-addr: a connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuplane_api::agent::AttemptRef;
    use gpuplane_api::node::GpuSource;

    fn gpu(index: u32) -> Gpu {
        Gpu {
            index,
            uuid: format!("GPU-{index}"),
            model: "Simulated GPU".into(),
            source: GpuSource::Simulated,
            memory_total_mib: Some(1000),
            memory_used_mib: Some(0),
            utilization_percent: Some(0),
            temperature_c: None,
        }
    }

    fn sample(index: u32, util: f64) -> GpuSample {
        GpuSample {
            index,
            utilization_percent: Some(util),
            memory_used_mib: Some(250.0),
            power_w: None,
            temperature_c: Some(40.0),
            sm_clock_mhz: None,
        }
    }

    #[test]
    fn each_gpu_has_dcgm_exporters_names_and_labels_with_the_job_that_holds_it() {
        let exporter = Exporter::new("box".into(), vec![gpu(0), gpu(1)]);
        exporter.publish(Reading {
            gpus: vec![sample(0, 87.0), sample(1, 0.0)],
            running: vec![RunningProcess {
                attempt: AttemptRef {
                    job_id: "job_1".into(),
                    attempt: 1,
                },
                process_group: 1,
                gpus: vec![0],
                project: "vision".into(),
            }],
            processes: Vec::new(),
        });
        let text = exporter.render();
        let held = "gpu=\"0\",UUID=\"GPU-0\",device=\"nvidia0\",modelName=\"Simulated GPU\",Hostname=\"box\",hpc_job=\"job_1\",project=\"vision\"";
        assert!(
            text.contains(&format!("DCGM_FI_DEV_GPU_UTIL{{{held}}} 87.0\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("DCGM_FI_DEV_FB_FREE{{{held}}} 750.0\n")),
            "{text}"
        );
        let free = "gpu=\"1\",UUID=\"GPU-1\",device=\"nvidia1\",modelName=\"Simulated GPU\",Hostname=\"box\",hpc_job=\"\",project=\"\"";
        assert!(
            text.contains(&format!("DCGM_FI_DEV_GPU_UTIL{{{free}}} 0.0\n")),
            "{text}"
        );
        // A reading NVML cannot give is left out, not shown as 0.
        assert!(!text.contains("DCGM_FI_DEV_POWER_USAGE{"), "{text}");
        assert!(text.contains("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"), "{text}");
        assert!(text.contains("gpuplane_agent_jobs_running 1.0\n"), "{text}");
        assert!(text.contains("gpuplane_agent_gpus 2.0\n"), "{text}");
    }
}
