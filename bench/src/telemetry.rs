//! Telemetry: the agent's CPU while it samples 8 simulated GPUs every 2 s
//! (idle, and with a job whose process group it reads), and the server's CPU
//! while 1,000 GPUs (125 nodes × 8) send a sample every 2 s, in batches of 5
//! every 10 s as agents do, paced in real time, compaction included.

use crate::process::{
    Binaries, cpu_seconds, release_binaries, say_hello, start_agent, start_server_process, wait_for_node,
};
use gpuplane_api::telemetry::{GpuSample, TelemetryBatch, TelemetrySample};
use gpuplane_testkit::agent_token;
use std::time::{Duration, Instant};

const NODES: usize = 125;
const GPUS_PER_NODE: u32 = 8;
const SAMPLE_EVERY_S: f64 = 2.0;
const SAMPLES_PER_BATCH: usize = 5;
/// Small chunks a series has before compaction merges them (the server's rule).
const SMALL_CHUNKS_BEFORE_COMPACTING: u32 = 16;

pub async fn run() -> anyhow::Result<()> {
    let binaries = release_binaries()?;
    println!("== telemetry benchmarks ({} cores)", num_cores());
    agent_cpu(&binaries).await?;
    server_ingest(&binaries).await
}

fn num_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

async fn agent_cpu(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let jobs_dir = tempfile::tempdir()?;
    let agent = start_agent(
        binaries,
        &server,
        8,
        jobs_dir.path(),
        &["--telemetry-interval", "2"],
    )?;
    let http = reqwest::Client::new();
    wait_for_node(&http, &server).await?;
    let pid = agent.0.id();
    let window = Duration::from_secs(30);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = cpu_seconds(pid)?;
    tokio::time::sleep(window).await;
    let idle = (cpu_seconds(pid)? - before) / window.as_secs_f64() * 100.0;
    let job = serde_json::json!({"name": "held", "resources": {"gpu": 8}, "command": ["sleep", "120"]});
    let response = http
        .post(format!("{}/api/v1/jobs", server.url))
        .bearer_auth(&server.token)
        .json(&job)
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "submit refused: {}",
        response.status()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = cpu_seconds(pid)?;
    tokio::time::sleep(window).await;
    let busy = (cpu_seconds(pid)? - before) / window.as_secs_f64() * 100.0;
    println!(
        "telemetry: agent sampling 8 simulated GPUs every 2 s: {idle:.3}% of a core idle, \
         {busy:.3}% with a job on all 8 (its process group read from /proc) over {}s each \
         (includes the heartbeat polls)",
        window.as_secs()
    );
    Ok(())
}

async fn server_ingest(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let db = gpuplane_server::store::open(&server.data_dir()).await?;
    let http = reqwest::Client::new();
    let mut nodes = Vec::with_capacity(NODES);
    for n in 0..NODES {
        let token = agent_token(&db).await;
        let node_id = say_hello(&http, &server.url, &token, &format!("bench-{n:03}")).await?;
        nodes.push((node_id, token));
    }
    db.close().await;
    let pid = server.pid();
    // Each series gets a 5-point chunk every 10 s, and compaction merges 16
    // of them: a window of 160 s after a warm-up holds one merge per series,
    // the steady state.
    let batch_every = Duration::from_secs_f64(SAMPLE_EVERY_S * SAMPLES_PER_BATCH as f64);
    let warm_up = Duration::from_secs(100);
    let window = batch_every * SMALL_CHUNKS_BEFORE_COMPACTING;
    let rounds = ((warm_up + window).as_secs_f64() / batch_every.as_secs_f64()).ceil() as usize;
    let started = Instant::now();
    let mut before = None;
    let mut points = 0usize;
    for round in 0..rounds {
        for (at, (node_id, token)) in nodes.iter().enumerate() {
            // Nodes spread over the 10 s, as independent agents would be.
            let due = batch_every.mul_f64(round as f64 + at as f64 / NODES as f64);
            tokio::time::sleep_until((started + due).into()).await;
            if before.is_none() && started.elapsed() >= warm_up {
                before = Some(cpu_seconds(pid)?);
            }
            let batch = batch(node_id, round, at);
            if before.is_some() {
                points += batch.samples.len() * GPUS_PER_NODE as usize * 5;
            }
            let response = http
                .post(format!("{}/api/v1/agent/telemetry", server.url))
                .bearer_auth(token)
                .json(&batch)
                .send()
                .await?;
            anyhow::ensure!(
                response.status().is_success(),
                "telemetry refused: {}",
                response.status()
            );
        }
    }
    tokio::time::sleep_until((started + warm_up + window).into()).await;
    let used = cpu_seconds(pid)? - before.unwrap_or_default();
    println!(
        "telemetry: server ingest of {} GPUs sampled every {SAMPLE_EVERY_S} s ({NODES} nodes sending {SAMPLES_PER_BATCH} \
         samples every {} s; {points} points in a {}s window after {}s of warm-up, one compaction of each series \
         in it): {:.2}% of a core",
        NODES * GPUS_PER_NODE as usize,
        batch_every.as_secs(),
        window.as_secs(),
        warm_up.as_secs(),
        used / window.as_secs_f64() * 100.0
    );
    Ok(())
}

pub(crate) fn batch(node_id: &str, round: usize, node: usize) -> TelemetryBatch {
    let base = 1.8e9 + round as f64 * SAMPLE_EVERY_S * SAMPLES_PER_BATCH as f64;
    let samples = (0..SAMPLES_PER_BATCH)
        .map(|s| TelemetrySample {
            wall_time: base + s as f64 * SAMPLE_EVERY_S,
            gpus: (0..GPUS_PER_NODE)
                .map(|index| {
                    let load = ((round * 7 + s * 3 + node + index as usize) % 100) as f64;
                    GpuSample {
                        index,
                        utilization_percent: Some(load),
                        memory_used_mib: Some(1000.0 + load * 700.0),
                        power_w: Some(80.0 + load * 6.0),
                        temperature_c: Some(35.0 + load * 0.4),
                        sm_clock_mhz: Some(1410.0 + load * 5.0),
                    }
                })
                .collect(),
            processes: Vec::new(),
        })
        .collect();
    TelemetryBatch {
        node_id: node_id.to_string(),
        batch_id: format!("bench-{round}"),
        samples,
        faults: Vec::new(),
    }
}
