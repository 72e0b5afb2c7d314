//! The real `gpuplane-agent` process against a real server: it registers its
//! simulated GPUs, heartbeats, goes OFFLINE when killed, comes back when
//! restarted, and stops with a clear error when its token is refused.

use gpuplane_api::auth::Scope;
use gpuplane_api::node::{GpuSource, Node, NodeStatus};
use gpuplane_testkit::{agent_token, eventually, start_server, user_token};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_gpuplane-agent");
const WAIT: Duration = Duration::from_secs(20);

/// A child process killed when the test ends, pass or fail.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn agent(server: &str, token: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["--server", server, "--token", token])
        .args(extra)
        .env("GPUPLANE_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

async fn nodes(server: &str, token: &str) -> Vec<Node> {
    let page: gpuplane_api::Page<Node> = reqwest::Client::new()
        .get(format!("{server}/api/v1/nodes"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page.items
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_registers_heartbeats_and_goes_offline_when_killed() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let reader = user_token(&server.state.db, "ops", Scope::Read, false).await;
    let token = agent_token(&server.state.db).await;

    let mut child = Agent(
        agent(
            &server.url,
            &token,
            &[
                "--name",
                "gpu-box-1",
                "--fake-gpus",
                "2",
                "--labels",
                "gpu=sim,zone=test",
            ],
        )
        .spawn()
        .unwrap(),
    );
    let node = eventually("the node to come ONLINE", WAIT, || async {
        nodes(&server.url, &reader)
            .await
            .into_iter()
            .find(|n| n.status == NodeStatus::Online)
    })
    .await;
    assert_eq!(node.name, "gpu-box-1");
    assert_eq!(node.labels.get("gpu").map(String::as_str), Some("sim"));
    assert_eq!(node.labels.get("zone").map(String::as_str), Some("test"));
    assert_eq!(node.gpus.len(), 2);
    assert!(node.gpus.iter().all(|g| g.source == GpuSource::Simulated));
    assert_eq!(node.gpus[1].index, 1);

    // Heartbeats move last_seen_at forward.
    let first_seen = node.last_seen_at.clone();
    eventually("a heartbeat", WAIT, || async {
        let now = nodes(&server.url, &reader).await.remove(0);
        (now.last_seen_at > first_seen).then_some(())
    })
    .await;

    // Killed: the server notices the silence and marks the node OFFLINE.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    eventually("the node to go OFFLINE", WAIT, || async {
        let now = nodes(&server.url, &reader).await.remove(0);
        (now.status == NodeStatus::Offline).then_some(())
    })
    .await;

    // Restarted under the same name: the same node comes back ONLINE.
    let _again = Agent(
        agent(&server.url, &token, &["--name", "gpu-box-1", "--fake-gpus", "2"])
            .spawn()
            .unwrap(),
    );
    let back = eventually("the node to come back", WAIT, || async {
        nodes(&server.url, &reader)
            .await
            .into_iter()
            .find(|n| n.status == NodeStatus::Online)
    })
    .await;
    assert_eq!(back.id, node.id, "a restarted agent keeps its node");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_nvml_or_fake_gpus_the_node_has_no_gpus() {
    // This test machine has no NVIDIA driver; on one that has, NVML answers instead.
    if std::path::Path::new("/proc/driver/nvidia").exists() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let reader = user_token(&server.state.db, "ops", Scope::Read, false).await;
    let token = agent_token(&server.state.db).await;
    let _child = Agent(
        agent(&server.url, &token, &["--name", "cpu-box"])
            .spawn()
            .unwrap(),
    );
    let node = eventually("the node to register", WAIT, || async {
        nodes(&server.url, &reader).await.into_iter().next()
    })
    .await;
    assert_eq!(node.name, "cpu-box");
    assert!(node.gpus.is_empty(), "only the cpu_only lane: {:?}", node.gpus);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_token_stops_the_agent_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let user = user_token(&server.state.db, "someone", Scope::Write, false).await;
    for (token, expected) in [
        ("gpp_wrong", "the token is not known"),
        (user.as_str(), "`agent` scope"),
    ] {
        let output = agent(&server.url, token, &["--fake-gpus", "1"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        let error = stderr
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or_default();
        assert!(
            error.contains("refused the agent token") && error.contains(expected),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_waits_for_a_server_that_is_not_up_yet() {
    let dir = tempfile::tempdir().unwrap();
    // Reserve a port, start the agent against it, and only then start the server there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut config = gpuplane_server::config::ServerConfig::with_defaults(dir.path().to_path_buf());
    config.settings.bind = format!("127.0.0.1:{port}").parse().unwrap();
    // Tokens are created before the server runs, on its data dir, as an operator would.
    std::fs::create_dir_all(dir.path()).unwrap();
    let db = gpuplane_server::store::open(dir.path()).await.unwrap();
    let token = agent_token(&db).await;
    let reader = user_token(&db, "ops", Scope::Read, false).await;
    db.close().await;

    let _child = Agent(agent(&url, &token, &["--fake-gpus", "1"]).spawn().unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await; // let it fail to connect at least once
    let server = gpuplane_server::start(config).await.unwrap();
    let node = eventually("the agent to connect", WAIT, || async {
        nodes(&server.url, &reader).await.into_iter().next()
    })
    .await;
    assert_eq!(node.status, NodeStatus::Online);
}
