//! What the benchmarks share: the release binaries beside this one, a
//! release server process on a free port (SQLite, or PostgreSQL under
//! `scripts/with-postgres.sh`), the agent, and the process measurements
//! (CPU seconds, resident memory) and percentiles they report.

use anyhow::Context;
use gpuplane_api::agent::AgentHello;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::process::ServerProcess;
use gpuplane_testkit::{agent_token, user_token};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Binaries {
    pub server: PathBuf,
    pub agent: PathBuf,
}

pub fn release_binaries() -> anyhow::Result<Binaries> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("no parent directory")?;
    let binaries = Binaries {
        server: dir.join("gpuplane-server"),
        agent: dir.join("gpuplane-agent"),
    };
    for path in [&binaries.server, &binaries.agent] {
        anyhow::ensure!(
            path.exists(),
            "{} is missing: cargo build --release -p gpuplane-server -p gpuplane-agent",
            path.display()
        );
    }
    Ok(binaries)
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A release server process (testkit's [`ServerProcess`]) on a free port,
/// over a data dir of its own with a user's and an agent's token.
pub struct Server {
    dir: tempfile::TempDir,
    pub process: ServerProcess,
    pub url: String,
    pub token: String,
    pub agent_token: String,
}

impl Server {
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server process's id; it must be running.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("the server is running")
    }
}

/// Which store the benchmark servers use: PostgreSQL when
/// `GPUPLANE_TEST_POSTGRES` names one (scripts/with-postgres.sh), else SQLite.
pub fn store_name() -> &'static str {
    if std::env::var_os(gpuplane_testkit::postgres::TEST_POSTGRES).is_some_and(|dir| !dir.is_empty()) {
        "PostgreSQL"
    } else {
        "SQLite"
    }
}

pub async fn start_server_process(binaries: &Binaries, extra: &[&str]) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    // PostgreSQL instead of the SQLite file when GPUPLANE_TEST_POSTGRES is
    // set (scripts/with-postgres.sh), as in the tests.
    let db = gpuplane_testkit::open_store(&data).await;
    let token = user_token(&db, "bench", Scope::Write, true).await;
    let agent_token = agent_token(&db).await;
    db.close().await;
    let process = ServerProcess::start_program(binaries.server.clone(), &data, extra).await;
    Ok(Server {
        url: process.url.clone(),
        dir,
        process,
        token,
        agent_token,
    })
}

pub fn start_agent(
    binaries: &Binaries,
    server: &Server,
    gpus: u32,
    jobs_dir: &std::path::Path,
    extra: &[&str],
) -> anyhow::Result<Proc> {
    let mut command = agent_command(binaries, server, jobs_dir);
    command.args(["--fake-gpus", &gpus.to_string()]).args(extra);
    Ok(Proc(command.spawn()?))
}

/// The release agent named `bench-node` for `server`, quiet, over `jobs_dir`.
pub fn agent_command(binaries: &Binaries, server: &Server, jobs_dir: &std::path::Path) -> Command {
    let mut command = Command::new(&binaries.agent);
    command
        .args([
            "--server",
            &server.url,
            "--token",
            &server.agent_token,
            "--name",
            "bench-node",
        ])
        .arg("--jobs-dir")
        .arg(jobs_dir)
        .env("GPUPLANE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

pub async fn wait_for_node(http: &reqwest::Client, server: &Server) -> anyhow::Result<()> {
    for _ in 0..400 {
        let nodes: serde_json::Value = http
            .get(format!("{}/api/v1/nodes", server.url))
            .bearer_auth(&server.token)
            .send()
            .await?
            .json()
            .await?;
        if nodes["items"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["status"] == "ONLINE"))
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    anyhow::bail!("the agent did not connect")
}

/// Submits a 1-GPU job and polls it every millisecond until it runs (or
/// already ended); the job as then shown, and the milliseconds from the
/// POST to that GET by this process's clock.
pub async fn submit_until_running(
    http: &reqwest::Client,
    server: &Server,
    name: &str,
    command: &[&str],
) -> anyhow::Result<(serde_json::Value, f64)> {
    let started = Instant::now();
    let job: serde_json::Value = http
        .post(format!("{}/api/v1/jobs", server.url))
        .bearer_auth(&server.token)
        .json(&serde_json::json!({"name": name, "resources": {"gpu": 1}, "command": command}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = job["id"].as_str().context("no job id")?.to_string();
    loop {
        let job: serde_json::Value = http
            .get(format!("{}/api/v1/jobs/{id}", server.url))
            .bearer_auth(&server.token)
            .send()
            .await?
            .json()
            .await?;
        if job["status"] == "RUNNING" || job["status"] == "SUCCEEDED" {
            return Ok((job, started.elapsed().as_secs_f64() * 1000.0));
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "job {id} never ran: {job}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Milliseconds since the epoch of an RFC 3339 time with millisecond precision (UTC).
pub fn parse_time(text: &str) -> i64 {
    // 2026-11-30T02:30:51.501Z
    let parse =
        |range: std::ops::Range<usize>| text.get(range).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
    let (hour, minute, second, milli) = (parse(11..13), parse(14..16), parse(17..19), parse(20..23));
    let day = parse(8..10);
    ((day * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli
}

/// CPU seconds a process's threads have run, from /proc (nanosecond resolution).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let schedstat = std::fs::read_to_string(task?.path().join("schedstat"))?;
        let nanos: f64 = schedstat
            .split_whitespace()
            .next()
            .context("empty schedstat")?
            .parse()?;
        total += nanos / 1e9;
    }
    Ok(total)
}

/// Registers a node named `name` as an agent would; returns its id.
pub async fn say_hello(http: &reqwest::Client, url: &str, token: &str, name: &str) -> anyhow::Result<String> {
    let hello = AgentHello {
        name: name.into(),
        hostname: name.into(),
        labels: BTreeMap::new(),
        gpus: Vec::new(),
        agent_version: "bench".into(),
        attempts: Vec::new(),
        runners: Some(vec![gpuplane_api::job::Runner::Process]),
        isolation: None,
        advertise_addr: None,
    };
    let welcome: serde_json::Value = http
        .post(format!("{url}/api/v1/agent/hello"))
        .bearer_auth(token)
        .json(&hello)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(welcome["node_id"].as_str().context("no node id")?.to_string())
}

pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmRSS")?
        .parse()?;
    Ok(kib / 1024.0)
}
