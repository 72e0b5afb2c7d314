//! Network cuts and agent crashes while jobs run: seeded rounds that
//! alternate cutting the agent's link to the server (every open connection
//! reset, new ones refused, for 0.3–2.5 s: shorter than the LOST grace
//! period, often longer than the node timeout) and `kill -9` of the agent
//! (restarted over its jobs dir), while jobs print lines and grow
//! TensorBoard files. Every job must end SUCCEEDED in its one attempt,
//! launched once, with every line and every point once.
//!
//! `GPUPLANE_PARTITION_JOBS` (default 4) and `GPUPLANE_PARTITION_SEED`
//! (default fixed; empty: a new one, printed) make the long version; see
//! RELIABILITY.md.

use gpuplane_api::job::{Job, JobStatus};
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::netcut::Link;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Points each job writes, and the bytes it appends to its file at a time.
const POINTS: i64 = 2000;
const CHUNK: usize = 1024;

#[tokio::test(flavor = "multi_thread")]
async fn cuts_and_agent_crashes_while_jobs_write_lose_and_repeat_nothing() {
    let jobs = gpuplane_testkit::size_from_env("GPUPLANE_PARTITION_JOBS", 4);
    let seed = gpuplane_testkit::seed_from_env("GPUPLANE_PARTITION_SEED", 20261202);
    println!("partition: {jobs} jobs, seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // Node timeout 1 s: most cuts take the node OFFLINE; none outlasts the grace.
    let cluster = Cluster::start_with(|config| config.lost_grace = Duration::from_secs(30)).await;
    let link = Link::start(&cluster.server.url).await;
    let jobs_dir = cluster.dir.path().join("agents").join("box");
    let mut agent = cluster.agent_at(&link.url, "box", 2, &jobs_dir, &[]);
    cluster.wait_for_nodes(1).await;

    let mut submitted = Vec::new();
    for n in 0..jobs {
        let work = cluster.workdir(&format!("job-{n}"));
        let events = work.join("source.tfevents");
        std::fs::write(&events, scalar_events("train/loss", n)).unwrap();
        let chunks = std::fs::metadata(&events).unwrap().len().div_ceil(CHUNK as u64);
        let script = format!(
            "echo x >> starts; mkdir -p tb; i=0; while [ $i -lt {chunks} ]; do \
             dd if=source.tfevents bs={CHUNK} skip=$i count=1 2>/dev/null >> tb/events.out.tfevents.grow; \
             echo $i; i=$((i+1)); sleep 0.1; done"
        );
        let job = cluster
            .submit(
                json!({"name": format!("writer-{n}"), "working_dir": work, "watch_dirs": ["tb"],
                "command": sh(&script)}),
            )
            .await;
        submitted.push((job.id, work, chunks));
    }

    let started = Instant::now();
    let (mut cuts, mut kills, mut offline_cuts) = (0, 0, 0);
    while !all_ended(&cluster, &submitted).await {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1200))).await;
        let down = Duration::from_millis(rng.random_range(300..2500));
        if (cuts + kills) % 2 == 0 {
            link.cut();
            tokio::time::sleep(down).await;
            link.heal();
            cuts += 1;
            offline_cuts += usize::from(down > Duration::from_secs(1));
        } else {
            agent.kill();
            tokio::time::sleep(down).await;
            agent = cluster.agent_at(&link.url, "box", 2, &jobs_dir, &[]);
            kills += 1;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60 + 30 * jobs as u64),
            "the jobs never ended; agent log:\n{}",
            cluster.agent_log("box")
        );
    }
    let seconds = started.elapsed().as_secs_f64();

    let (mut points, mut lines) = (0, 0);
    for (n, (id, work, chunks)) in submitted.iter().enumerate() {
        let job = cluster.job(id).await;
        let context = format!("job {n} ({id}); agent log:\n{}", cluster.agent_log("box"));
        assert_eq!(job.status, JobStatus::Succeeded, "{context}");
        assert_eq!(job.attempts.len(), 1, "one attempt: {context}");
        assert_eq!(launches(work), 1, "launched once: {context}");
        let output = cluster.output(id, "stdout").await;
        let expected: Vec<String> = (0..*chunks).map(|i| i.to_string()).collect();
        assert_eq!(output, expected, "every line once, in order: {context}");
        lines += output.len();
        let series = loss(&cluster, &job).await;
        let expected: Vec<(i64, f64)> = (0..POINTS).map(|step| (step, value(step, n))).collect();
        assert_eq!(series, expected, "every point once: {context}");
        points += series.len();
    }
    let lost = cluster.events("kind=JOB_LOST").await;
    assert!(lost.is_empty(), "no job LOST within the grace period: {lost:?}");
    let disconnects = cluster.events("kind=AGENT_DISCONNECTED").await.len();
    assert!(
        offline_cuts == 0 || disconnects > 0,
        "a cut longer than the node timeout took the node OFFLINE"
    );
    println!(
        "partition: {jobs} jobs over {seconds:.1} s (seed {seed}): {cuts} cuts ({offline_cuts} past the node \
         timeout, {disconnects} AGENT_DISCONNECTED), {kills} agent kill -9; {lines} lines and {points} points, \
         each once; every job one attempt, launched once"
    );
}

async fn all_ended(cluster: &Cluster, jobs: &[(String, std::path::PathBuf, u64)]) -> bool {
    for (id, _, _) in jobs {
        if !cluster.job(id).await.status.is_terminal() {
            return false;
        }
    }
    true
}

fn launches(work: &Path) -> usize {
    std::fs::read_to_string(work.join("starts"))
        .unwrap_or_default()
        .lines()
        .count()
}

async fn loss(cluster: &Cluster, job: &Job) -> Vec<(i64, f64)> {
    let series = cluster.series(&job.run_id, "train/loss").await;
    series
        .into_iter()
        .map(|(step, value)| (step, value.as_f64().unwrap()))
        .collect()
}

/// The value job `n` writes at `step` (exact in f32).
fn value(step: i64, n: usize) -> f64 {
    f64::from(step as f32 * 0.25 + n as f32)
}

/// A TensorBoard event file: `tag` at steps `0..POINTS`, as `simple_value`.
fn scalar_events(tag: &str, n: usize) -> Vec<u8> {
    let mut file = Vec::new();
    for step in 0..POINTS {
        let mut summary_value = field(1, tag.as_bytes());
        summary_value.push(0x15); // simple_value, fixed32
        summary_value.extend((value(step, n) as f32).to_le_bytes());
        let mut event = vec![0x09]; // wall_time, fixed64
        event.extend((1_764_460_800.0 + step as f64).to_le_bytes());
        event.push(0x10); // step, varint
        varint(step as u64, &mut event);
        event.extend(field(5, &field(1, &summary_value)));
        let length = (event.len() as u64).to_le_bytes();
        file.extend(length);
        file.extend(masked_crc(&length).to_le_bytes());
        file.extend(&event);
        file.extend(masked_crc(&event).to_le_bytes());
    }
    file
}

fn masked_crc(bytes: &[u8]) -> u32 {
    gpuplane_tfevents::masked_crc(bytes)
}

/// A length-delimited protobuf field.
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![number << 3 | 2];
    varint(bytes.len() as u64, &mut out);
    out.extend(bytes);
    out
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}
