//! GPUPlane's test kit (test-only; no release binary links it): a real
//! server on a free port over a real SQLite file, bootstrapped users and
//! tokens, the workspace's real binaries, [`TestServer`] (a server and an
//! HTTP client that speaks `/api/v1`), and [`cluster::Cluster`] — the
//! server plus real agent processes running real jobs, and
//! [`process::ServerProcess`] — the server binary as a process to kill, and
//! [`postgres::Postgres`] — a real PostgreSQL server of its own, and
//! [`prometheus::Prometheus`] — Debian's Prometheus scraping them. No mocks.
//!
//! The cross-process system tests (scheduling, diagnosis, gpuctl against
//! real agents, faults) are this crate's own tests, in `tests/system/`.

/// The server store's `sql!` (private to the server) for tests that read
/// the database: runs `$body` with `$native` bound to the SQLite or
/// PostgreSQL pool or connection of `$on` (a `Db` or a `Tx`).
#[macro_export]
macro_rules! sql {
    ($on:expr, |$native:ident| $body:expr) => {
        match $on.native() {
            gpuplane_server::store::Native::Sqlite($native) => $body,
            gpuplane_server::store::Native::Postgres($native) => $body,
        }
    };
}

pub mod cluster;
pub mod gpuctl;
pub mod http;
pub mod hub;
pub mod netcut;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod slurm;

pub use http::TestServer;

use gpuplane_api::auth::Scope;
use gpuplane_api::node::{Gpu, GpuSource};
use gpuplane_server::config::ServerConfig;
use gpuplane_server::identity::credentials::{NewToken, create_token};
use gpuplane_server::store::Db;
use gpuplane_server::{RunningServer, admin, start};
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long tests wait for what another process brings about.
pub const WAIT: Duration = Duration::from_secs(30);

/// A binary of the workspace (`gpuplane-agent`, `gpuctl`, `gpuplane-server`)
/// beside the running test: `cargo nextest run --workspace` builds them all.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    // target/debug/deps/TEST → target/debug/NAME
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/*/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace`)",
        path.display()
    );
    path
}

/// A long-version knob of a fault test: the number in the environment
/// variable `name`, or `default` when it is unset.
pub fn size_from_env(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name} is a number, not {value:?}")),
        Err(_) => default,
    }
}

/// A fault test's seed: the number in the environment variable `name`, a
/// new random one when it is set but empty, or `default` when it is unset.
pub fn seed_from_env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(seed) if seed.is_empty() => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
        }
        Ok(seed) => seed
            .parse()
            .unwrap_or_else(|_| panic!("{name} is a number, not {seed:?}")),
        Err(_) => default,
    }
}

/// Starts a server on `127.0.0.1:0` with its database in `data_dir`, fast
/// heartbeats (100 ms), a short node timeout (1 s) and LOST grace (1 s).
pub async fn start_server(data_dir: &Path) -> RunningServer {
    start_server_with(data_dir, |_| {}).await
}

/// Like [`start_server`], with the test's changes to the configuration.
pub async fn start_server_with(data_dir: &Path, configure: impl FnOnce(&mut ServerConfig)) -> RunningServer {
    let mut config = ServerConfig::with_defaults(data_dir.to_path_buf());
    config.settings.bind = "127.0.0.1:0".parse().expect("a valid address");
    config.heartbeat_interval = Duration::from_millis(100);
    config.node_timeout = Duration::from_secs(1);
    config.lost_grace = Duration::from_secs(1);
    config.cancel_grace = Duration::from_secs(2);
    config.settings.database_url = postgres::database_for(data_dir).await;
    // No Hub precheck, unless a test starts the Hub's stand-in (`hub`).
    config.settings.hf_endpoint = String::new();
    configure(&mut config);
    start(config).await.expect("the test server starts")
}

/// Opens the store a test server over `data_dir` uses (see
/// [`postgres::database_for`]), for tests that work on it with no server.
pub async fn open_store(data_dir: &Path) -> Db {
    let url = postgres::database_for(data_dir).await;
    gpuplane_server::store::open_configured(data_dir, url.as_deref())
        .await
        .expect("the database opens")
}

/// Creates a user (admin when asked) and returns a token of `scope` for it.
pub async fn user_token(db: &Db, name: &str, scope: Scope, is_admin: bool) -> String {
    let user_id = admin::create_user(db, name, "test-password", is_admin)
        .await
        .expect("the user is created");
    let new = NewToken {
        user_id: Some(&user_id),
        name: "test",
        scope,
        expires_at: None,
        project: None,
        node: None,
    };
    create_token(db, new).await.expect("the token is created").1
}

/// Returns a new agent token.
pub async fn agent_token(db: &Db) -> String {
    let new = NewToken {
        user_id: None,
        name: "test-agent",
        scope: Scope::Agent,
        expires_at: None,
        project: None,
        node: None,
    };
    create_token(db, new).await.expect("the token is created").1
}

/// Polls `check` every 20 ms until it gives `Some`, panicking with `what`
/// after `timeout`. For conditions another process brings about.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if started.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A simulated 80 GiB GPU, idle, as an agent with `--fake-gpus` reports it
/// (for tests and benchmarks that speak the agent protocol themselves).
pub fn simulated_gpu(index: u32) -> Gpu {
    Gpu {
        index,
        uuid: format!("GPU-{index}"),
        model: "Simulated GPU".into(),
        source: GpuSource::Simulated,
        memory_total_mib: Some(81920),
        memory_used_mib: Some(0),
        utilization_percent: Some(0),
        temperature_c: None,
    }
}

/// Whether the tests run as root (the daemons they start then run as
/// their own users, through `runuser`).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A TCP port free on 127.0.0.1 at this moment.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
