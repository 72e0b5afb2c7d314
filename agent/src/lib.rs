//! `gpuplane-agent`: runs on every GPU host. Registers the node with the
//! server, long-polls it for work (each poll is a heartbeat with fresh GPU
//! readings), runs the jobs it is given and reports their output and end,
//! and reconnects whenever the server goes away.

pub mod client;
pub mod files;
pub mod git;
pub mod gpus;
pub mod isolation;
pub mod jobs;
pub mod mask;
pub mod reporter;
pub mod runner;
pub mod shim;
pub mod slurm;
pub mod spool;
pub mod tail;
pub mod telemetry;
pub mod exporter;
pub mod watch;

use anyhow::Context;
use client::{Client, ClientError};
use gpuplane_api::agent::{AgentHello, AgentWelcome, Poll, PollAnswer};
use gpus::GpuProbe;
use jobs::Manager;
use reporter::Reporter;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Parser)]
#[command(
    name = "gpuplane-agent",
    version,
    about = "The GPUPlane agent: reports this host's GPUs and runs jobs."
)]
pub struct Args {
    /// URL of the GPUPlane server.
    #[arg(long, env = "GPUPLANE_SERVER", default_value = "http://127.0.0.1:8600")]
    pub server: String,

    /// Agent token (`gpuplane-server admin create-agent-token`). Prefer
    /// `--token-file` or the variable: other users of this host can read a
    /// process's command line.
    #[arg(
        long,
        env = "GPUPLANE_AGENT_TOKEN",
        hide_env_values = true,
        required_unless_present = "token_file"
    )]
    pub token: Option<String>,

    /// Read the agent token from this file (mode 0600 or stricter; refused
    /// when group or others can read it).
    #[arg(
        long,
        env = "GPUPLANE_AGENT_TOKEN_FILE",
        value_name = "PATH",
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,

    /// Node name, unique in the cluster (default: the host name).
    #[arg(long, env = "GPUPLANE_NODE_NAME")]
    pub name: Option<String>,

    /// Labels for node_selector matching, e.g. `gpu=a100,zone=eu`.
    #[arg(long, env = "GPUPLANE_NODE_LABELS", value_parser = parse_labels, default_value = "")]
    pub labels: Labels,

    /// Where other nodes reach this host's jobs: the address a multi-node
    /// job's other members connect to (`MASTER_ADDR` when this node is rank
    /// 0, and in `GPUCTL_NODE_ADDRS`). Default: the address this agent
    /// connects to the server from, as the server sees it.
    #[arg(long, env = "GPUPLANE_ADVERTISE_ADDR", value_name = "ADDR")]
    pub advertise_addr: Option<String>,

    /// Simulate N GPUs instead of asking NVML (development and CI).
    #[arg(long, env = "GPUPLANE_FAKE_GPUS", value_name = "N")]
    pub fake_gpus: Option<u32>,

    /// Serve this host's GPUs for Prometheus at http://ADDR/metrics, under
    /// dcgm-exporter's names (no token: bind an address only the scraper
    /// reaches). Off by default.
    #[arg(long, env = "GPUPLANE_METRICS_ADDR", value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// With --fake-gpus: a GPU a job holds reads this utilisation (percent)
    /// instead of following the job's CPU (to try GPU_IDLE and dashboards).
    #[arg(
        long,
        env = "GPUPLANE_FAKE_GPU_UTIL",
        value_name = "PERCENT",
        requires = "fake_gpus"
    )]
    pub fake_gpu_util: Option<f64>,

    /// Where job output and state live (default: ~/.gpuctl/jobs).
    #[arg(long, env = "GPUPLANE_JOBS_DIR", value_name = "DIR")]
    pub jobs_dir: Option<PathBuf>,

    /// Report this free-space percentage for every job's filesystem instead
    /// of measuring it (to exercise DISK_LOW).
    #[arg(long, hide = true, value_name = "PERCENT")]
    pub disk_free_percent_override: Option<f64>,

    /// Seconds between telemetry samples of the GPUs and the jobs' processes
    /// (0: none).
    #[arg(
        long,
        env = "GPUPLANE_TELEMETRY_INTERVAL",
        value_name = "SECONDS",
        default_value_t = 2.0
    )]
    pub telemetry_interval: f64,

    /// How jobs run: `process` (children of this agent; docker jobs through
    /// `docker run`), or `slurm` (every job an `sbatch` job: run the agent
    /// on a Slurm login host, with the jobs directory on a filesystem the
    /// compute nodes share).
    #[arg(long, env = "GPUPLANE_RUNNER", value_name = "RUNNER", default_value = "process", value_parser = ["process", "slurm"])]
    pub runner: String,

    /// Run docker jobs (`docker run`) too. A docker job is root on this
    /// host, so the server sends docker jobs (and, to this node, any job)
    /// only from projects whose node policy grants docker.
    #[arg(long, env = "GPUPLANE_DOCKER")]
    pub docker: bool,

    /// Which cgroups keep each process job to its own GPUs when the agent
    /// runs as root: `v2` (an eBPF device program on the job's cgroup),
    /// `v1` (the devices controller), or `auto` (v2 where the kernel loads
    /// the program, else v1). Without either the node says its isolation
    /// is advisory, and why.
    #[arg(long, env = "GPUPLANE_DEVICE_CGROUP", value_name = "KIND", default_value = "auto", value_parser = ["auto", "v2", "v1"])]
    pub device_cgroup: String,

    /// With `--runner slurm`: the GPUs this agent offers the scheduler
    /// (default: the `gpu` GRES of the nodes `sinfo` lists, in the
    /// `slurm.partition` label's partition when set).
    #[arg(long, env = "GPUPLANE_SLURM_GPUS", value_name = "N")]
    pub slurm_gpus: Option<u32>,

    /// Cut output lines longer than this many bytes (to exercise the
    /// server's refusal of oversized reports).
    #[arg(long, hide = true, value_name = "BYTES", default_value_t = tail::MAX_LINE_BYTES)]
    pub max_line_bytes: usize,
}

impl Args {
    /// The agent token, from `--token` / `GPUPLANE_AGENT_TOKEN` or `--token-file`.
    pub fn resolve_token(&self) -> anyhow::Result<String> {
        match (&self.token, &self.token_file) {
            (Some(token), _) => Ok(token.trim().to_string()),
            (None, Some(path)) => read_token_file(path),
            (None, None) => {
                anyhow::bail!("give the agent token with --token-file PATH or GPUPLANE_AGENT_TOKEN")
            }
        }
    }
}

/// Reads a token file that only its owner can read.
pub fn read_token_file(path: &std::path::Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata =
        std::fs::metadata(path).with_context(|| format!("cannot read the token file {}", path.display()))?;
    if !metadata.is_file() {
        anyhow::bail!("the token file {} is not a file", path.display());
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "refusing the token file {}: group or others can read it (mode {mode:04o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = token.trim();
    if token.is_empty() {
        anyhow::bail!("the token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

/// Whether a variable of the agent's own environment must not reach a job:
/// the agent's settings (`GPUPLANE_*`, its token among them) and any
/// `GPUCTL_*` the agent was started with (a user's CLI token, say). A job
/// gets `GPUCTL_*` only from the server, for its own run.
pub fn private_variable(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with("GPUPLANE_") || name.starts_with("GPUCTL_")
}

#[derive(Debug, Clone, Default)]
pub struct Labels(pub BTreeMap<String, String>);

fn parse_labels(text: &str) -> Result<Labels, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("label `{pair}` is not key=value"))?;
        if key.trim().is_empty() {
            return Err(format!("label `{pair}` has an empty key"));
        }
        labels.insert(key.trim().to_string(), value.trim().to_string());
    }
    Ok(Labels(labels))
}

/// The host's name as the kernel knows it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Runs until `shutdown` completes; fails only when the server refuses the token.
pub async fn run(args: Args, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let hostname = hostname();
    let name = args.name.clone().unwrap_or_else(|| hostname.clone());
    let slurm = (args.runner == "slurm").then(|| slurm::Defaults::from_labels(&args.labels.0));
    if slurm.is_some() {
        // By absolute path, from the agent's own PATH, before any job runs.
        slurm::find_tools();
    }
    let fake_gpus = match &slurm {
        // Slurm's GPUs, shown like simulated ones: Slurm, not NVML on this host, places them.
        Some(defaults) => Some(match args.slurm_gpus {
            Some(count) => count,
            None => slurm::cluster_gpus(defaults.partition.as_deref())
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "--runner slurm: cannot count the cluster's GPUs ({e}); give --slurm-gpus N"
                    )
                })?,
        }),
        None => args.fake_gpus,
    };
    let probe = Arc::new(GpuProbe::detect(fake_gpus, args.fake_gpu_util, &name));
    let isolation = if slurm.is_some() {
        isolation::Isolation::Advisory(
            "jobs run through Slurm, whose cgroup.conf (ConstrainDevices=yes) decides".into(),
        )
    } else {
        isolation::Isolation::detect(&args.device_cgroup)
    };
    let client = Arc::new(Client::new(&args.server, &args.resolve_token()?)?);
    let reporter = Arc::new(Reporter::new());
    let jobs_dir = args.jobs_dir.clone().unwrap_or_else(files::default_jobs_dir);
    files::create_private_dir(&jobs_dir)
        .with_context(|| format!("cannot create the jobs directory {}", jobs_dir.display()))?;
    let manager = Arc::new(Manager::new(
        jobs_dir.clone(),
        name.clone(),
        args.server.clone(),
        reporter.clone(),
        client.clone(),
        jobs::Options {
            disk_free_override: args.disk_free_percent_override,
            max_line_bytes: args.max_line_bytes,
            slurm,
            docker: args.docker,
            isolation: isolation.clone(),
        },
    ));
    let runners = manager.runners();
    if !args.docker && runner::docker_socket_reachable() {
        tracing::warn!(
            "a docker socket is reachable here but docker jobs are off: start the agent with --docker to run them \
             (the server sends them only from projects granted docker)"
        );
    }
    tracing::info!(server = args.server, name, gpus = probe.describe(), isolation = isolation.describe(), jobs_dir = %jobs_dir.display(), "agent starting");
    let sender = {
        let reporter = reporter.clone();
        let client = client.clone();
        tokio::spawn(async move { reporter.run(&client).await })
    };
    let exporter = match args.metrics_addr {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("--metrics-addr: cannot listen on {address}"))?;
            let exporter = Arc::new(exporter::Exporter::new(hostname.clone(), probe.read()));
            tracing::info!("serving GPU metrics at http://{}/metrics", listener.local_addr()?);
            if args.telemetry_interval <= 0.0 {
                tracing::warn!("--telemetry-interval 0: --metrics-addr shows no GPU readings");
            }
            Some((
                exporter.clone(),
                tokio::spawn(exporter::serve(listener, exporter)),
            ))
        }
        None => None,
    };
    let published = exporter.as_ref().map(|(exporter, _)| exporter.clone());
    let sampler = (args.telemetry_interval > 0.0).then(|| {
        let interval = Duration::from_secs_f64(args.telemetry_interval.max(0.1));
        tokio::spawn(telemetry::run(
            probe.clone(),
            manager.clone(),
            reporter.clone(),
            client.clone(),
            interval,
            jobs_dir.clone(),
            published.clone(),
        ))
    });
    let hello = |gpus| AgentHello {
        name: name.clone(),
        hostname: hostname.clone(),
        labels: args.labels.0.clone(),
        gpus,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        attempts: manager.known(),
        runners: Some(runners.clone()),
        isolation: Some(isolation.describe()),
        advertise_addr: args.advertise_addr.clone(),
    };
    tokio::pin!(shutdown);
    const FIRST_BACKOFF: Duration = Duration::from_millis(200);
    let mut backoff = FIRST_BACKOFF;
    let result = loop {
        let connected = AtomicBool::new(false);
        let session = async {
            let welcome: AgentWelcome = match client.post("agent/hello", &hello(probe.read())).await {
                Ok(welcome) => welcome,
                Err(error) => return error,
            };
            connected.store(true, Ordering::Relaxed);
            if let Some(exporter) = &published {
                exporter.connected.store(true, Ordering::Relaxed);
            }
            tracing::info!(
                node_id = welcome.node_id,
                server_id = welcome.server_id,
                "connected to the server"
            );
            reporter.set_node(&welcome.node_id);
            manager.resume(&welcome);
            tokio::select! {
                error = polls(&client, &probe, &manager, &welcome) => error,
                () = reporter.forgotten.notified() => ClientError::UnknownNode,
            }
        };
        let error = tokio::select! {
            error = session => error,
            () = &mut shutdown => {
                tracing::info!("agent stopping; running jobs continue and are adopted by the next agent");
                break Ok(());
            }
        };
        if let Some(exporter) = &published {
            exporter.connected.store(false, Ordering::Relaxed);
        }
        match error {
            ClientError::Refused { .. } => break Err(error.into()),
            ClientError::UnknownNode => {
                tracing::warn!("the server forgot this node; registering again");
                backoff = FIRST_BACKOFF;
                continue;
            }
            other => {
                // A server that answered this session and then went away
                // (restarted) is tried again soon; only failures in a row
                // wait longer and longer, up to MAX_BACKOFF.
                if connected.load(Ordering::Relaxed) {
                    backoff = FIRST_BACKOFF;
                }
                tracing::warn!(error = %other, retry_in = ?backoff, "lost the server; will reconnect")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = &mut shutdown => break Ok(()),
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    };
    sender.abort();
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    if let Some((_, scrapes)) = exporter {
        scrapes.abort();
    }
    result
}

/// Long-polls for commands until a poll fails; returns why. Each poll is
/// also the node's heartbeat, with fresh GPU readings.
async fn polls(
    client: &Client,
    probe: &GpuProbe,
    manager: &Arc<Manager>,
    welcome: &AgentWelcome,
) -> ClientError {
    loop {
        let poll = Poll {
            node_id: welcome.node_id.clone(),
            gpus: probe.read(),
            running: manager.running(),
            forgotten: manager.take_forgotten(),
        };
        match client.post::<_, PollAnswer>("agent/poll", &poll).await {
            Ok(answer) => {
                for command in answer.commands {
                    manager.handle(command);
                }
            }
            Err(error) => return error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_and_refuse_garbage() {
        let labels = parse_labels("gpu=a100, zone=eu").unwrap();
        assert_eq!(labels.0.get("gpu").map(String::as_str), Some("a100"));
        assert_eq!(labels.0.get("zone").map(String::as_str), Some("eu"));
        assert!(parse_labels("").unwrap().0.is_empty());
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("=x").is_err());
    }
}
