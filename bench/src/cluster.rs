//! Cluster scale: 1,000 simulated agents with 8 GPUs each speak the real
//! HTTP protocol to a release server: hello, the long poll that is their
//! heartbeat (every 2 s, the default), telemetry every 10 s (5 samples of 8
//! GPUs, as agents send it), and reports of each attempt's start and exit.
//! Measured: the server's CPU and memory at rest (every agent connected,
//! no job), then submit → RUNNING of jobs one after another while all the
//! agents keep polling. The agents run in this process, on the same cores
//! as the server.

use crate::process::{cpu_seconds, release_binaries, rss_mib, start_server_process, submit_until_running};
use crate::report::{count, record, size};
use gpuplane_agent::client::Client;
use gpuplane_api::agent::{
    AgentCommand, AgentHello, AgentWelcome, AttemptRef, Poll, PollAnswer, Report, ReportItem,
};
use gpuplane_api::node::Gpu;
use gpuplane_server::store::time::now_ms;
use gpuplane_testkit::simulated_gpu;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const GPUS_PER_NODE: u32 = 8;
const TELEMETRY_EVERY: Duration = Duration::from_secs(10);
/// How long a simulated job runs before its agent reports it exited.
const JOB_SECONDS: Duration = Duration::from_secs(2);

pub async fn run() -> anyhow::Result<()> {
    let agents = size(1000, 20);
    println!("== cluster benchmarks: {agents} simulated agents × {GPUS_PER_NODE} GPUs");
    let binaries = release_binaries()?;
    let server = start_server_process(&binaries, &[]).await?;
    let pid = server.pid();
    let db = gpuplane_server::store::open(&server.data_dir()).await?;
    let mut tokens = Vec::with_capacity(agents);
    for _ in 0..agents {
        tokens.push(gpuplane_testkit::agent_token(&db).await);
    }
    db.close().await;

    let http = reqwest::Client::new();
    let gpus: Vec<Gpu> = (0..GPUS_PER_NODE).map(simulated_gpu).collect();
    let (stop, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for (index, token) in tokens.into_iter().enumerate() {
        let agent = Agent {
            client: Client::new(&server.url, &token)?,
            node_id: String::new(),
            gpus: gpus.clone(),
            index,
            agents,
        };
        tasks.spawn(agent.run(stopped.clone()));
    }
    let online = wait_for_online(&http, &server.url, &server.token, agents).await?;
    println!(
        "cluster: {online} agents connected in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // At rest: every agent polling and sending telemetry, no job.
    tokio::time::sleep(Duration::from_secs(size(20, 2))).await;
    let window = Duration::from_secs(size(60, 4));
    let before = cpu_seconds(pid)?;
    tokio::time::sleep(window).await;
    let cpu = (cpu_seconds(pid)? - before) / window.as_secs_f64() * 100.0;
    let rss = rss_mib(pid)?;
    println!(
        "cluster: server at rest with {agents} agents ({} GPUs): {cpu:.1}% of a core, RSS {rss:.1} MiB",
        agents * GPUS_PER_NODE as usize
    );
    let fleet = format!(
        "{} agents × {GPUS_PER_NODE} GPUs, heartbeats every 2 s, telemetry every 10 s",
        count(agents)
    );
    record(
        "cluster.cpu_at_rest",
        format!("the server's CPU at rest, {fleet}"),
        "% of a core",
        cpu,
    );
    record(
        "cluster.rss",
        format!("the server's memory (RSS), {fleet}"),
        "MiB",
        rss,
    );

    let jobs = size(200, 10);
    let mut latencies = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let (_, ms) = submit_until_running(&http, &server, &format!("cluster-{i}"), &["train"]).await?;
        latencies.push(ms);
    }
    latencies.sort_by(f64::total_cmp);
    let _ = stop.send(true);
    while let Some(result) = tasks.join_next().await {
        result??;
    }
    let p = |q| crate::process::percentile(&latencies, q);
    println!(
        "cluster: submit -> RUNNING with {agents} agents polling, {jobs} jobs one after another: p50 {:.1} ms, p99 {:.1} ms",
        p(0.5),
        p(0.99)
    );
    for (id, q) in [("cluster.dispatch.p50", 0.5), ("cluster.dispatch.p99", 0.99)] {
        let what = format!(
            "submit → RUNNING among {} agents, {jobs} jobs one after another, p{}",
            count(agents),
            q * 100.0
        );
        record(id, what, "ms", p(q));
    }
    Ok(())
}

async fn wait_for_online(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    agents: usize,
) -> anyhow::Result<usize> {
    for _ in 0..600 {
        let nodes: serde_json::Value = http
            .get(format!("{url}/api/v1/nodes"))
            .bearer_auth(token)
            .send()
            .await?
            .json()
            .await?;
        let online = nodes["items"]
            .as_array()
            .map_or(0, |n| n.iter().filter(|n| n["status"] == "ONLINE").count());
        if online == agents {
            return Ok(online);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("not every agent came online in 60 s")
}

/// One simulated agent: what `gpuplane-agent` says over HTTP, through its
/// own client, without processes.
struct Agent {
    client: Client,
    node_id: String,
    gpus: Vec<Gpu>,
    /// This agent's place among `agents`, which spreads their telemetry over the period.
    index: usize,
    agents: usize,
}

impl Agent {
    async fn run(mut self, mut stopped: watch::Receiver<bool>) -> anyhow::Result<()> {
        let name = format!("sim-{:04}", self.index);
        let hello = AgentHello {
            name: name.clone(),
            hostname: name,
            labels: BTreeMap::new(),
            gpus: self.gpus.clone(),
            agent_version: "bench".into(),
            attempts: Vec::new(),
            runners: Some(vec![gpuplane_api::job::Runner::Process]),
            isolation: None,
            advertise_addr: None,
        };
        let welcome: AgentWelcome = self.client.post("agent/hello", &hello).await?;
        self.node_id = welcome.node_id;
        let mut running: Vec<(AttemptRef, Instant)> = Vec::new();
        let mut telemetry_at =
            Instant::now() + TELEMETRY_EVERY.mul_f64(self.index as f64 / self.agents as f64);
        let mut round = 0;
        loop {
            if Instant::now() >= telemetry_at {
                let batch = crate::telemetry::batch(&self.node_id, round, self.index);
                self.client.post::<_, ()>("agent/telemetry", &batch).await?;
                telemetry_at += TELEMETRY_EVERY;
                round += 1;
            }
            let now = Instant::now();
            let (ended, still): (Vec<_>, Vec<_>) = running.into_iter().partition(|(_, ends)| *ends <= now);
            running = still;
            if !ended.is_empty() {
                let items = ended.into_iter().map(|(attempt, _)| exited(attempt)).collect();
                self.report(items).await?;
            }
            let poll = Poll {
                node_id: self.node_id.clone(),
                gpus: self.gpus.clone(),
                running: running.iter().map(|(attempt, _)| attempt.clone()).collect(),
                forgotten: Vec::new(),
            };
            let stop = *stopped.borrow_and_update();
            if stop {
                return Ok(());
            }
            let answer: PollAnswer = tokio::select! {
                _ = stopped.changed() => return Ok(()),
                answer = self.client.post("agent/poll", &poll) => answer?,
            };
            let mut started = Vec::new();
            for command in answer.commands {
                let AgentCommand::Dispatch(dispatch) = command else {
                    continue;
                };
                let attempt = AttemptRef {
                    job_id: dispatch.job_id,
                    attempt: dispatch.attempt,
                };
                if running.iter().any(|(known, _)| *known == attempt) {
                    continue;
                }
                started.push(ReportItem::Started {
                    job_id: attempt.job_id.clone(),
                    attempt: attempt.attempt,
                    pid: 4242,
                    time: now_ms(),
                    git_commit: None,
                    master_port: None,
                });
                running.push((attempt, Instant::now() + JOB_SECONDS));
            }
            if !started.is_empty() {
                self.report(started).await?;
            }
        }
    }

    async fn report(&self, items: Vec<ReportItem>) -> anyhow::Result<()> {
        let report = Report {
            node_id: self.node_id.clone(),
            items,
        };
        Ok(self.client.post::<_, ()>("agent/report", &report).await?)
    }
}

fn exited(attempt: AttemptRef) -> ReportItem {
    ReportItem::Exited {
        job_id: attempt.job_id,
        attempt: attempt.attempt,
        exit_code: Some(0),
        signal: None,
        oom_killed: false,
        cancelled: false,
        timed_out: false,
        lost: None,
        time: now_ms(),
        eval_result: None,
    }
}
