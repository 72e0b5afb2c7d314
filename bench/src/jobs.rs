//! Jobs: one scheduling pass over 10,000 queued jobs and 1,000 nodes (and
//! with one job in ten a multi-node gang),
//! submit → RUNNING latency with an idle agent, log ingest through the
//! server, agent idle CPU, server memory with 10,000 queued jobs.

use crate::process::{
    Binaries, cpu_seconds, parse_time, percentile, release_binaries, rss_mib, say_hello, start_agent,
    start_server_process, store_name, submit_until_running, wait_for_node,
};
use crate::report::{count, record, size};
use anyhow::Context;
use gpuplane_api::agent::{AgentHello, Report, ReportItem};
use gpuplane_api::job::{Dependency, JobStatus};
use gpuplane_api::job::{JobSpec, Runner};
use gpuplane_api::log::LogStream;
use gpuplane_api::project::NodePolicy;
use gpuplane_server::identity::access::Principal;
use gpuplane_server::jobs::dependencies::{Verdict, verdict};
use gpuplane_server::jobs::fair_share::{self, Usage};
use gpuplane_server::jobs::node_access::NodeAccess;
use gpuplane_server::jobs::plan::{NodeCapacity, QueuedJob, Quota, Quotas, Rules, RunningAttempt, plan};
use gpuplane_server::store::Db;
use gpuplane_testkit::{simulated_gpu, start_server_with};
use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

pub async fn run() -> anyhow::Result<()> {
    println!(
        "== jobs benchmarks ({} cores, {})",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        store_name()
    );
    scheduling_pass().await?;
    let binaries = release_binaries()?;
    submit_to_running(&binaries).await?;
    log_ingest(&binaries).await?;
    live_log_latency(&binaries).await?;
    agent_idle_cpu(&binaries).await?;
    server_rss(&binaries).await?;
    Ok(())
}

/// Quotas for the 20 projects and 100 users of the benchmark queue, none in use.
fn bench_quotas(project_gpus: u32, user_gpus: u32, user_jobs: u32) -> Quotas {
    let quota = |label: String, max_gpus: u32, max_jobs: Option<u32>| Quota {
        label,
        max_gpus: Some(max_gpus),
        max_running_jobs: max_jobs,
        gpus_in_use: 0,
        running_jobs: 0,
    };
    Quotas {
        projects: (0..20)
            .map(|p| {
                (
                    format!("p{p}"),
                    quota(format!("project p{p}"), project_gpus, None),
                )
            })
            .collect(),
        users: (0..100)
            .map(|u| {
                (
                    format!("usr_{u}"),
                    quota(format!("user u{u}"), user_gpus, Some(user_jobs)),
                )
            })
            .collect(),
        arrays: Default::default(),
    }
}

/// Everything a pass decides, pure: a tenth of the jobs wait for another job
/// (dependencies), fair share orders the rest by the GPU-hours of 20
/// projects and 100 users, then `plan` with quotas (each project 1,000 GPUs,
/// each user 200 GPUs in 50 jobs) and preemption (jobs of priority 4 may
/// stop the running jobs of priority 0-2).
/// The full pure pass over the queue, then over the same queue with one
/// job in ten a gang (2-4 nodes of 1-8 GPUs each, a third of them
/// colocated in one zone).
fn full_pure_passes(queue: &[QueuedJob], nodes: &[NodeCapacity]) {
    full_pure_pass(queue, nodes, "", "scheduling.pass");
    let mut with_gangs = queue.to_vec();
    for (i, job) in with_gangs.iter_mut().enumerate().filter(|(i, _)| i % 10 == 5) {
        job.nodes = 2 + (i / 10 % 3) as u32;
        job.gpus = [1, 2, 4, 8][i / 10 % 4];
        job.colocate = (i % 3 == 0).then(|| "zone".to_string());
    }
    full_pure_pass(
        &with_gangs,
        nodes,
        ", 10 % of them multi-node",
        "scheduling.pass.gangs",
    );
}

fn full_pure_pass(queue: &[QueuedJob], nodes: &[NodeCapacity], shape: &str, name: &str) {
    let quotas = bench_quotas(1000, 200, 50);
    let mut queue = queue.to_vec();
    for (i, job) in queue.iter_mut().enumerate().filter(|(i, _)| i % 10 == 0) {
        job.after = vec![Dependency {
            job_id: format!("job_done_{i}"),
            any_end: i % 20 == 0,
        }];
    }
    let statuses: HashMap<String, JobStatus> = (0..queue.len())
        .step_by(10)
        .map(|i| {
            (
                format!("job_done_{i}"),
                [JobStatus::Succeeded, JobStatus::Running][i / 10 % 2],
            )
        })
        .collect();
    let usage = Usage {
        projects: (0..20).map(|p| (format!("p{p}"), p * 3_600_000)).collect(),
        users: (0..100)
            .map(|u| (format!("usr_{u}"), (u % 7) * 3_600_000))
            .collect(),
    };
    let policy = fair_share::Policy {
        window_ms: 7 * 24 * 3_600_000,
        max_wait_ms: 24 * 3_600_000,
    };
    let rules = Rules {
        preempt_priority: Some(4),
        ..RULES
    };
    let mut times = Vec::new();
    let (mut placed, mut preempted, mut waiting) = (0, 0, 0);
    for _ in 0..20 {
        let started = Instant::now();
        let mut ready = Vec::with_capacity(queue.len());
        waiting = 0;
        for job in &queue {
            match verdict(&job.after, |id| statuses.get(id).copied()) {
                Verdict::Ready => ready.push(job.clone()),
                Verdict::Waiting(_) | Verdict::Never(_) => waiting += 1,
            }
        }
        fair_share::order(&mut ready, &usage, policy, 1_000_000);
        let result = plan(&ready, nodes, &quotas, &NodeAccess::default(), rules, 0);
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        placed = result.placements.len();
        preempted = result.preemptions.len();
    }
    times.sort_by(f64::total_cmp);
    let what = format!(
        "scheduling pass (dependencies, fair share, quotas, preemption), {} queued × {} nodes{shape}",
        count(queue.len()),
        count(nodes.len())
    );
    println!(
        "scheduling: {what}: p50 {:.2} ms, max {:.2} ms ({placed} placed, {preempted} preempted, {waiting} waiting for other jobs)",
        percentile(&times, 0.5),
        times[times.len() - 1]
    );
    record(name, what, "ms", percentile(&times, 0.5));
}

const RULES: Rules = Rules {
    cpu_slots_per_node: 4,
    preempt_priority: None,
};

/// 10,000 queued jobs (1-8 GPUs, a quarter with a selector) over 1,000
/// nodes of 8 GPUs with some busy: the pure plan (alone, then with quotas,
/// then with everything a pass does: fair share, dependencies, quotas and
/// preemption), then the server's whole pass (load from SQLite, plan,
/// write reasons) on the real database.
async fn scheduling_pass() -> anyhow::Result<()> {
    let (queued, node_count) = (size(10_000, 500), size(1000, 50));
    let nodes: Vec<NodeCapacity> = (0..node_count)
        .map(|i| NodeCapacity {
            id: format!("node_{i}"),
            name: format!("n{i:04}"),
            labels: BTreeMap::from([("zone".to_string(), format!("z{}", i % 4))]),
            runners: Some(vec![Runner::Process]),
            gpus: (0..8).collect(),
            busy_gpus: (0..(i % 9) as u32).collect::<BTreeSet<u32>>(),
            cpu_jobs: 0,
            // Each busy GPU is a 1-GPU job of priority 0-2 (what preemption may stop).
            running: (0..(i % 9) as u32)
                .map(|gpu| RunningAttempt {
                    job_id: format!("running_{i}_{gpu}"),
                    attempt: 1,
                    priority: (gpu % 3) as i64,
                    gpus: 1,
                    started_at: gpu as i64,
                    preempted: false,
                    started: true,
                })
                .collect(),
            window: None,
        })
        .collect();
    let queue: Vec<QueuedJob> = (0..queued)
        .map(|i| QueuedJob {
            id: format!("job_{i}"),
            gpus: [1, 1, 2, 4, 8, 0][i % 6],
            priority: (i % 5) as i64,
            node_selector: if i % 4 == 0 {
                BTreeMap::from([("zone".to_string(), format!("z{}", i % 3))])
            } else {
                BTreeMap::new()
            },
            runner: Runner::Process,
            not_before: None,
            next_attempt: 1,
            max_attempts: 1,
            project: format!("p{}", i % 20),
            user: Some(format!("usr_{}", i % 100)),
            after: Vec::new(),
            queued_at: i as i64,
            fair_share_note: None,
            time_limit_ms: None,
            resume_node: None,
            nodes: 1,
            colocate: None,
            array: None,
        })
        .collect();
    // Every project may hold 300 GPUs, every user 40 GPUs in 8 jobs.
    let quotas = bench_quotas(300, 40, 8);
    // Projects p0-p3 bound to zone z3, which then serves only them.
    let policies = NodeAccess::new(
        (0..4)
            .map(|p| {
                let policy = NodePolicy {
                    labels: BTreeMap::from([("zone".to_string(), "z3".to_string())]),
                    runners: vec![Runner::Process],
                };
                (format!("p{p}"), policy)
            })
            .collect(),
    );
    for (what, quotas, access) in [
        ("", Quotas::default(), NodeAccess::default()),
        (
            " with quotas on 20 projects and 100 users",
            quotas.clone(),
            NodeAccess::default(),
        ),
        (
            " with quotas and node policies binding 4 of 20 projects to a quarter of the nodes",
            quotas.clone(),
            policies,
        ),
    ] {
        let mut times = Vec::new();
        let mut placed = 0;
        for _ in 0..20 {
            let started = Instant::now();
            let result = plan(&queue, &nodes, &quotas, &access, RULES, 0);
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            placed = result.placements.len();
        }
        times.sort_by(f64::total_cmp);
        println!(
            "scheduling: plan() over {queued} queued jobs x {node_count} nodes{what}: p50 {:.2} ms, max {:.2} ms ({placed} placed, the rest with reasons)",
            percentile(&times, 0.5),
            times[times.len() - 1]
        );
    }
    full_pure_passes(&queue, &nodes);
    // The same shape through the real server: SQLite load, plan, apply.
    let dir = tempfile::tempdir()?;
    let server = start_server_with(dir.path(), |config| config.settings.cpu_slots_per_node = 4).await;
    let state = server.state.clone();
    let jobs = state.jobs();
    let user = bench_admin(&state.db).await?;
    register_nodes(&state.db, node_count).await?;
    // Fill every GPU and cpu slot first, so the 10,000 jobs all stay queued.
    let fillers = node_count * 8 / 8 + node_count * 4;
    for i in 0..fillers {
        let mut spec = JobSpec::new(format!("filler-{i}"), vec!["true".into()]);
        spec.resources.gpu = if i < node_count { 8 } else { 0 };
        gpuplane_server::jobs::store::submit(&state.db, &state.secret, &spec, &user).await?;
    }
    gpuplane_server::jobs::scheduler::pass(&jobs).await?;
    for i in 0..queued {
        let mut spec = JobSpec::new(format!("queued-{i}"), vec!["true".into()]);
        spec.resources.gpu = [1, 1, 2, 4, 8, 0][i % 6];
        spec.priority = (i % 5) as i64;
        gpuplane_server::jobs::store::submit(&state.db, &state.secret, &spec, &user).await?;
    }
    let started = Instant::now();
    gpuplane_server::jobs::scheduler::pass(&jobs).await?;
    let first = started.elapsed().as_secs_f64() * 1000.0;
    let mut steady = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        gpuplane_server::jobs::scheduler::pass(&jobs).await?;
        steady.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    steady.sort_by(f64::total_cmp);
    // Each part on its own, the median of 10 (one read is too noisy to compare).
    let mut load_queue = Vec::new();
    let mut queue = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        queue = gpuplane_server::jobs::scheduler::load_queue(&jobs).await?.0;
        load_queue.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    load_queue.sort_by(f64::total_cmp);
    let load_queue = percentile(&load_queue, 0.5);
    let mut load_nodes = Vec::new();
    let mut nodes = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        nodes = gpuplane_server::jobs::scheduler::load_nodes(&jobs).await?;
        load_nodes.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    load_nodes.sort_by(f64::total_cmp);
    let load_nodes = percentile(&load_nodes, 0.5);
    let started = Instant::now();
    plan(
        &queue,
        &nodes,
        &Quotas::default(),
        &NodeAccess::default(),
        RULES,
        0,
    );
    let planned = started.elapsed().as_secs_f64() * 1000.0;
    println!(
        "scheduling: server pass ({} load + plan + apply), {queued} queued x {node_count} nodes: first {first:.1} ms (writes {queued} reasons), then p50 {:.1} ms (load queue {load_queue:.1} ms, load nodes {load_nodes:.1} ms, plan {planned:.1} ms)",
        store_name(),
        percentile(&steady, 0.5)
    );
    record(
        "scheduling.server_pass",
        format!(
            "the server's pass (SQLite load, plan, apply), {} queued × {} nodes",
            count(queued),
            count(node_count)
        ),
        "ms",
        percentile(&steady, 0.5),
    );
    server.stop().await?;
    Ok(())
}

/// An admin user for the benchmark's submissions.
pub async fn bench_admin(db: &Db) -> anyhow::Result<Principal> {
    let user = gpuplane_server::admin::create_user(db, "bench", "bench-password", true).await?;
    Ok(Principal {
        user_id: Some(user),
        user_name: Some("bench".into()),
        is_admin: true,
        project: None,
    })
}

/// Registers `count` nodes of 8 simulated GPUs (`n0000`, …, in zones z0–z3).
pub async fn register_nodes(db: &Db, count: usize) -> anyhow::Result<()> {
    let mut tx = gpuplane_server::store::write(db).await?;
    for i in 0..count {
        let hello = AgentHello {
            name: format!("n{i:04}"),
            hostname: format!("n{i:04}"),
            labels: BTreeMap::from([("zone".to_string(), format!("z{}", i % 4))]),
            gpus: (0..8).map(simulated_gpu).collect(),
            agent_version: "bench".into(),
            attempts: Vec::new(),
            runners: Some(vec![gpuplane_api::job::Runner::Process]),
            isolation: None,
            advertise_addr: None,
        };
        gpuplane_server::nodes::register(&mut tx, &hello, None).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Submit a job, wait until it runs, one at a time; the interval is measured
/// by the clock of this process from the POST to the first GET that shows
/// RUNNING (polled every millisecond), and by the server's timestamps
/// (created_at → started_at, the moment the process was spawned).
async fn submit_to_running(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let jobs_dir = tempfile::tempdir()?;
    let _agent = start_agent(binaries, &server, 8, jobs_dir.path(), &[])?;
    let http = reqwest::Client::new();
    wait_for_node(&http, &server).await?;
    let mut client_ms = Vec::new();
    let mut server_ms = Vec::new();
    let jobs = size(200, 10);
    for i in 0..jobs {
        let (job, ms) =
            submit_until_running(&http, &server, &format!("latency-{i}"), &["sleep", "0.2"]).await?;
        client_ms.push(ms);
        let created = parse_time(job["created_at"].as_str().unwrap_or_default());
        let running = parse_time(job["attempts"][0]["started_at"].as_str().unwrap_or_default());
        server_ms.push((running - created) as f64);
    }
    client_ms.sort_by(f64::total_cmp);
    server_ms.sort_by(f64::total_cmp);
    println!(
        "dispatch: submit -> RUNNING, idle agent, {jobs} jobs: client-observed p50 {:.1} ms, p99 {:.1} ms; server timestamps p50 {:.0} ms, p99 {:.0} ms",
        percentile(&client_ms, 0.5),
        percentile(&client_ms, 0.99),
        percentile(&server_ms, 0.5),
        percentile(&server_ms, 0.99)
    );
    for (id, p) in [("dispatch.p50", 0.5), ("dispatch.p99", 0.99)] {
        let what = format!(
            "submit → RUNNING, one idle agent, {jobs} jobs one after another, p{}",
            p * 100.0
        );
        record(id, what, "ms", percentile(&client_ms, p));
    }
    Ok(())
}

/// Output lines through the server: batches posted straight to the report
/// route, and a real job printing a million lines through the agent.
async fn log_ingest(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let http = reqwest::Client::new();
    // This process plays an agent for the direct measurement.
    let node_id = say_hello(&http, &server.url, &server.agent_token, "ingest-node").await?;
    let job: serde_json::Value = http
        .post(format!("{}/api/v1/jobs", server.url))
        .bearer_auth(&server.token)
        .json(&serde_json::json!({"name": "ingest", "command": ["true"]}))
        .send()
        .await?
        .json()
        .await?;
    let job_id = job["id"].as_str().context("no job id")?.to_string();
    for _ in 0..400 {
        let job: serde_json::Value = http
            .get(format!("{}/api/v1/jobs/{job_id}", server.url))
            .bearer_auth(&server.token)
            .send()
            .await?
            .json()
            .await?;
        if job["status"] == "DISPATCHING" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let line = "step 1234 | loss 0.123456 | lr 3.0e-04 | tokens/s 152340 | grad_norm 1.02".to_string();
    let batch = 5_000;
    let batches = size(200, 4);
    let started = Instant::now();
    for b in 0..batches {
        let report = Report {
            node_id: node_id.clone(),
            items: vec![ReportItem::Lines {
                job_id: job_id.clone(),
                attempt: 1,
                stream: LogStream::Stdout,
                first_n: (b * batch + 1) as i64,
                time: 0,
                lines: vec![line.clone(); batch],
            }],
        };
        let response = http
            .post(format!("{}/api/v1/agent/report", server.url))
            .bearer_auth(&server.agent_token)
            .json(&report)
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "report refused: {}",
            response.status()
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let total = batch * batches;
    println!(
        "logs: ingest over HTTP, {total} lines of {} bytes in batches of {batch}: {:.0} lines/s",
        line.len(),
        total as f64 / seconds
    );
    record(
        "logs.ingest",
        format!(
            "log lines ingested over HTTP, batches of {batch} lines of {} bytes",
            line.len()
        ),
        "lines/s",
        total as f64 / seconds,
    );
    drop(server);

    // The whole path: a job prints a million lines; until the server has the last one.
    let lines = size(1_000_000, 20_000);
    let server = start_server_process(binaries, &[]).await?;
    let jobs_dir = tempfile::tempdir()?;
    let _agent = start_agent(binaries, &server, 1, jobs_dir.path(), &[])?;
    wait_for_node(&http, &server).await?;
    let started = Instant::now();
    let job: serde_json::Value = http
        .post(format!("{}/api/v1/jobs", server.url))
        .bearer_auth(&server.token)
        .json(&serde_json::json!({"name": "million", "command": ["seq", "1", lines.to_string()]}))
        .send()
        .await?
        .json()
        .await?;
    let job_id = job["id"].as_str().context("no job id")?.to_string();
    loop {
        let logs: serde_json::Value = http
            .get(format!(
                "{}/api/v1/jobs/{job_id}/logs?tail=1&stream=stdout",
                server.url
            ))
            .bearer_auth(&server.token)
            .send()
            .await?
            .json()
            .await?;
        if logs["lines"][0]["text"] == lines.to_string().as_str() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "the last line never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "logs: a job printing {lines} lines, submit -> last line on the server through the agent: {seconds:.2} s ({:.0} lines/s)",
        lines as f64 / seconds
    );
    record(
        "logs.job",
        format!(
            "a job printing {} lines: submit → its last line on the server, through the agent",
            count(lines)
        ),
        "lines/s",
        lines as f64 / seconds,
    );
    Ok(())
}

async fn agent_idle_cpu(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &["--heartbeat-interval-ms", "1000"]).await?;
    let jobs_dir = tempfile::tempdir()?;
    let agent = start_agent(binaries, &server, 8, jobs_dir.path(), &[])?;
    let http = reqwest::Client::new();
    wait_for_node(&http, &server).await?;
    tokio::time::sleep(Duration::from_secs(size(2, 1))).await;
    let pid = agent.0.id();
    let before = cpu_seconds(pid)?;
    let window = Duration::from_secs(size(20, 2));
    tokio::time::sleep(window).await;
    let used = cpu_seconds(pid)? - before;
    println!(
        "agent: idle with 8 simulated GPUs read every second (one poll per second): {:.4}% of a core over {}s",
        used / window.as_secs_f64() * 100.0,
        window.as_secs()
    );
    record(
        "agent.idle_cpu",
        "the agent, idle, reading 8 simulated GPUs every second",
        "% of a core",
        used / window.as_secs_f64() * 100.0,
    );
    Ok(())
}

async fn server_rss(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let pid = server.pid();
    let idle = rss_mib(pid)?;
    let http = reqwest::Client::new();
    let queued = size(10_000, 200);
    for i in 0..queued {
        let response = http
            .post(format!("{}/api/v1/jobs", server.url))
            .bearer_auth(&server.token)
            .json(&serde_json::json!({"name": format!("queued-{i}"), "resources": {"gpu": 1}, "command": ["python", "train.py", "--epochs", "10"]}))
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "submit refused: {}",
            response.status()
        );
    }
    // Let the scheduler write every queued reason once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed: serde_json::Value = http
        .get(format!("{}/api/v1/jobs?status=QUEUED&limit=500", server.url))
        .bearer_auth(&server.token)
        .send()
        .await?
        .json()
        .await?;
    println!(
        "server: RSS idle {idle:.1} MiB; with {queued} queued jobs (no node online) {:.1} MiB; reason shown: {}",
        rss_mib(pid)?,
        listed["items"][0]["queued_reason"]
    );
    record("server.rss_idle", "the server's memory (RSS), idle", "MiB", idle);
    record(
        "server.rss_queued",
        format!("the server's memory (RSS) with {} queued jobs", count(queued)),
        "MiB",
        rss_mib(pid)?,
    );
    Ok(())
}

/// Live logs: a job prints the time (in nanoseconds) ten times a second; a
/// client follows `GET /jobs/{id}/logs/stream` (server-sent events) and
/// takes each line's age when it arrives: through the agent, the server's
/// store and the stream.
async fn live_log_latency(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let jobs_dir = tempfile::tempdir()?;
    let _agent = start_agent(binaries, &server, 1, jobs_dir.path(), &[])?;
    let http = reqwest::Client::new();
    wait_for_node(&http, &server).await?;
    let lines = size(100, 10);
    let script = format!("for i in $(seq {lines}); do date +%s%N; sleep 0.1; done");
    let job: serde_json::Value = http
        .post(format!("{}/api/v1/jobs", server.url))
        .bearer_auth(&server.token)
        .json(&serde_json::json!({"name": "live", "command": ["sh", "-c", script]}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let job_id = job["id"].as_str().context("no job id")?.to_string();
    let mut response = http
        .get(format!(
            "{}/api/v1/jobs/{job_id}/logs/stream?stream=stdout",
            server.url
        ))
        .bearer_auth(&server.token)
        .send()
        .await?
        .error_for_status()?;
    let mut ages = Vec::new();
    let mut pending = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ages.len() < lines {
        let chunk = tokio::time::timeout_at(deadline.into(), response.chunk())
            .await
            .context("the lines stopped coming")??
            .context("the stream ended early")?;
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as f64;
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<serde_json::Value>(data.trim()) else {
                continue;
            };
            if let Some(printed) = event["text"].as_str().and_then(|t| t.trim().parse::<f64>().ok()) {
                ages.push((now_ns - printed) / 1e6);
            }
        }
    }
    ages.sort_by(f64::total_cmp);
    println!(
        "logs: live, printed -> arrived at a client following the stream, {lines} lines: p50 {:.1} ms, p99 {:.1} ms",
        percentile(&ages, 0.5),
        percentile(&ages, 0.99)
    );
    for (id, p) in [("logs.live.p50", 0.5), ("logs.live.p99", 0.99)] {
        let what = format!(
            "live log line, printed → shown to a client following the stream, p{}",
            p * 100.0
        );
        record(id, what, "ms", percentile(&ages, p));
    }
    Ok(())
}
