//! Telemetry: every `--telemetry-interval` (default 2 s) the agent reads its
//! GPUs (NVML, or the simulated ones) and the process group of each running
//! job (CPU and resident memory from `/proc`), and every
//! [`SAMPLES_PER_SEND`] samples sends what it read (`POST /api/v1/agent/telemetry`). Samples the server has not
//! taken yet wait in memory, at most [`MAX_WAITING`] (the oldest go first).

use crate::client::{Client, ClientError};
use crate::exporter::{Exporter, Reading};
use crate::gpus::{FaultQueue, GpuProbe, SimulatedLoad};
use crate::jobs::{Manager, RunningProcess};
use crate::reporter::Reporter;
use gpuplane_api::telemetry::{GpuFault, ProcessSample, TelemetryBatch, TelemetrySample};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What was sampled is sent every this many samples (10 s at one every 2 s).
const SAMPLES_PER_SEND: u32 = 5;
/// Samples kept while the server is away (an hour at one every 2 s).
const MAX_WAITING: usize = 1_800;
/// Samples per request.
const PER_BATCH: usize = 300;

/// Where simulated GPUs read the faults they are to report (see
/// [`crate::gpus::simulated_faults`]).
pub const SIMULATED_FAULTS_FILE: &str = "simulated-gpu-faults";

/// Samples and sends until the task is dropped. GPU faults are sent at the
/// next sample, without waiting for the batch to fill.
pub async fn run(
    probe: Arc<GpuProbe>,
    manager: Arc<Manager>,
    reporter: Arc<Reporter>,
    client: Arc<Client>,
    interval: Duration,
    jobs_dir: PathBuf,
    exporter: Option<Arc<Exporter>>,
) {
    let faults: FaultQueue = Arc::default();
    probe.watch_faults(faults.clone());
    let simulated_faults_file =
        matches!(*probe, GpuProbe::Simulated { .. }).then(|| jobs_dir.join(SIMULATED_FAULTS_FILE));
    let mut processes = ProcessReader::new();
    let mut waiting: VecDeque<TelemetrySample> = VecDeque::new();
    let mut waiting_faults: Vec<GpuFault> = Vec::new();
    let send_every = interval * SAMPLES_PER_SEND;
    let mut last_sent = Instant::now();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        waiting_faults.append(&mut faults.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(file) = &simulated_faults_file {
            waiting_faults.extend(crate::gpus::simulated_faults(file));
        }
        let wall_time = now_seconds();
        let running = manager.processes();
        let used = processes.read(&running);
        let load = |gpu: u32| {
            let (at, _) = running
                .iter()
                .enumerate()
                .find(|(_, process)| process.gpus.contains(&gpu))?;
            used.get(at).map(|sample| SimulatedLoad {
                cpu_percent: sample.cpu_percent,
                memory_rss_mib: sample.memory_rss_mib,
            })
        };
        let gpus = probe.sample(wall_time, load);
        if let Some(exporter) = &exporter {
            exporter.publish(Reading {
                gpus: gpus.clone(),
                running: running.clone(),
                processes: used.clone(),
            });
            exporter
                .samples_waiting
                .store(waiting.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        if !gpus.is_empty() || !used.is_empty() {
            waiting.push_back(TelemetrySample {
                wall_time,
                gpus,
                processes: used,
            });
            if waiting.len() > MAX_WAITING {
                waiting.pop_front();
            }
        }
        if waiting.is_empty() && waiting_faults.is_empty()
            || last_sent.elapsed() < send_every && waiting_faults.is_empty()
        {
            continue;
        }
        let Some(node_id) = reporter.node_id() else {
            continue;
        };
        last_sent = Instant::now();
        while !waiting.is_empty() || !waiting_faults.is_empty() {
            let take = waiting.len().min(PER_BATCH);
            // Named by what it holds, so a batch resent after a lost answer
            // is the same batch to the server.
            let first = waiting
                .front()
                .map(|sample| sample.wall_time)
                .or_else(|| waiting_faults.first().map(|fault| fault.wall_time))
                .unwrap_or_default();
            let batch = TelemetryBatch {
                node_id: node_id.clone(),
                batch_id: format!("{}-{take}-{}", (first * 1000.0) as i64, waiting_faults.len()),
                samples: waiting.iter().take(take).cloned().collect(),
                faults: waiting_faults.clone(),
            };
            match client.post::<_, ()>("agent/telemetry", &batch).await {
                Ok(()) => {
                    waiting.drain(..take);
                    waiting_faults.clear();
                }
                Err(ClientError::Failed { status, message }) if status.is_client_error() => {
                    tracing::warn!(%status, message, samples = take, "the server refused telemetry; dropping it");
                    waiting.drain(..take);
                    waiting_faults.clear();
                }
                // Unreachable, or the node must say hello again: keep it for later.
                Err(_) => break,
            }
        }
    }
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Reads the CPU and memory of process groups from `/proc`; CPU is the
/// change in CPU time since the previous read.
pub struct ProcessReader {
    previous: HashMap<u32, (u64, Instant)>,
    ticks_per_second: f64,
    page_mib: f64,
}

impl Default for ProcessReader {
    fn default() -> Self {
        ProcessReader::new()
    }
}

impl ProcessReader {
    pub fn new() -> ProcessReader {
        // SAFETY: sysconf only reads configuration values.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        ProcessReader {
            previous: HashMap::new(),
            ticks_per_second: if ticks > 0 { ticks as f64 } else { 100.0 },
            page_mib: if page > 0 { page as f64 } else { 4096.0 } / (1024.0 * 1024.0),
        }
    }

    /// One sample per running process, in the same order. A group's first
    /// read has no CPU figure yet and reads 0.
    pub fn read(&mut self, running: &[RunningProcess]) -> Vec<ProcessSample> {
        if running.is_empty() {
            self.previous.clear();
            return Vec::new();
        }
        let groups = read_groups(running.iter().map(|p| p.process_group).collect());
        let now = Instant::now();
        let mut samples = Vec::with_capacity(running.len());
        for process in running {
            let (cpu_ticks, rss_pages) = groups.get(&process.process_group).copied().unwrap_or((0, 0));
            let cpu_percent = match self.previous.get(&process.process_group) {
                Some(&(before, at)) if cpu_ticks >= before => {
                    let seconds = now.duration_since(at).as_secs_f64().max(1e-3);
                    (cpu_ticks - before) as f64 / self.ticks_per_second / seconds * 100.0
                }
                _ => 0.0,
            };
            self.previous.insert(process.process_group, (cpu_ticks, now));
            samples.push(ProcessSample {
                job_id: process.attempt.job_id.clone(),
                attempt: process.attempt.attempt,
                cpu_percent,
                memory_rss_mib: rss_pages as f64 * self.page_mib,
            });
        }
        let live: Vec<u32> = running.iter().map(|p| p.process_group).collect();
        self.previous.retain(|group, _| live.contains(group));
        samples
    }
}

/// CPU ticks (user + system) and resident pages summed per process group,
/// for the groups asked for.
fn read_groups(wanted: Vec<u32>) -> HashMap<u32, (u64, u64)> {
    let mut groups: HashMap<u32, (u64, u64)> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return groups;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((group, ticks, pages)) = parse_stat(&stat)
            && wanted.contains(&group)
        {
            let slot = groups.entry(group).or_default();
            slot.0 += ticks;
            slot.1 += pages;
        }
    }
    groups
}

/// The process group, CPU ticks and resident pages of a `/proc/PID/stat`
/// line. CPU is the process's own (utime + stime) and that of children it
/// has reaped (cutime + cstime), so short-lived helpers count too. The
/// command name may hold spaces and parentheses, so fields are counted after
/// its last `)`.
fn parse_stat(stat: &str) -> Option<(u32, u64, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state(3) ppid(4) pgrp(5) … utime(14) stime(15)
    // cutime(16) cstime(17) … rss(24).
    let field = |number: usize| fields.get(number - 3).and_then(|f| f.parse::<u64>().ok());
    let group = u32::try_from(field(5)?).ok()?;
    let ticks = field(14)? + field(15)? + field(16)? + field(17)?;
    Some((group, ticks, field(24)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (python3 (train) x) S 1 4242 4242 0 -1 4194304 500 0 0 0 \
                    150 50 7 3 20 0 3 0 100 1000000 2560 18446744073709551615";
        assert_eq!(parse_stat(line), Some((4242, 210, 2560)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_busy_process_group_reads_its_cpu_and_memory() {
        use std::os::unix::process::CommandExt;
        // In a process group of its own, as the agent starts jobs.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .process_group(0)
            .spawn()
            .unwrap();
        let running = [RunningProcess {
            attempt: gpuplane_api::agent::AttemptRef {
                job_id: "job_test".into(),
                attempt: 1,
            },
            process_group: child.id(),
            gpus: vec![0],
            project: "default".into(),
        }];
        let mut reader = ProcessReader::new();
        reader.read(&running);
        std::thread::sleep(Duration::from_millis(600));
        let sample = reader.read(&running).remove(0);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(sample.cpu_percent > 30.0, "{sample:?}");
        assert!(sample.memory_rss_mib > 0.0, "{sample:?}");
    }
}
