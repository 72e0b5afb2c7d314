//! Two `gpuplane-server` processes on one real PostgreSQL (#17), the way a
//! load balancer would use them: the agent talks to replica B only, users
//! to either. A job submitted to A is dispatched to the agent on B; an
//! event raised through A reaches an SSE follower on B; when the leader is
//! killed, the other leads within 10 s and schedules; a job submitted to a
//! replica that does not lead still starts; nothing runs twice; a job's
//! whole log file, asked of the replica its agent does not talk to, comes
//! through the database; and an MCP session begun on one replica goes on
//! on the other.
//!
//! The heartbeat is 20 s, so an agent's long poll on B ends early only when
//! B hears of its dispatch from A: a job that waited for the poll to time
//! out would miss the 5 s the test gives it.

use futures_util::StreamExt;
use gpuplane_testkit::cluster::sh;
use gpuplane_testkit::postgres::{Postgres, use_database};
use gpuplane_testkit::process::{AgentProcess, Api, ServerProcess};
use gpuplane_testkit::{WAIT, eventually};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const FLAGS: [&str; 6] = [
    "--heartbeat-interval-ms",
    "20000",
    "--node-timeout-ms",
    "60000",
    "--lost-grace-ms",
    "60000",
];

/// Lines the second job prints: a file of several relay parts.
const LINES: u32 = 200_000;

/// A protocol version with sessions (later ones have none).
const MCP_VERSION: &str = "2025-11-25";

/// How long a dispatch may take to reach the agent: far less than a heartbeat.
const DISPATCH_WAIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_the_work_and_the_leader_fails_over() {
    let postgres = Postgres::start();
    let url = postgres.fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let (data_a, data_b) = (dir.path().join("a/data"), dir.path().join("b/data"));
    use_database(&data_a, &url);
    use_database(&data_b, &url);
    let (_, token, agent_tokens) = ServerProcess::bootstrap(&dir.path().join("a"), 1).await;

    let mut a = ServerProcess::start(&data_a, &FLAGS).await;
    let api_a = a.api(&token);
    wait_until_leading(&api_a, "A, the first replica").await;
    // Every replica signs with the same key (sessions, attempt tokens).
    std::fs::copy(data_a.join("secret.key"), data_b.join("secret.key")).unwrap();
    let b = ServerProcess::start(&data_b, &FLAGS).await;
    let api_b = b.api(&token);
    assert_eq!(leader(&api_b).await, Some(false), "B starts while A leads");

    mcp_session_moves(&a, &b, &token).await;

    let _agent = AgentProcess::start(dir.path(), &b.url, "replica-box", &agent_tokens[0]);
    eventually("the agent on B, seen through A", WAIT, || async {
        let (_, nodes) = api_a.get("/nodes").await.ok()?;
        (nodes["items"].as_array()?.len() == 1 && nodes["items"][0]["status"] == "ONLINE").then_some(())
    })
    .await;
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();

    // Submitted to A (the leader), dispatched to the agent polling B.
    let first = submit(&api_a, &work, "first", 0, 3).await;
    wait_for_status(&api_b, &first, "RUNNING", DISPATCH_WAIT).await;

    // An event raised through A reaches an SSE follower on B.
    let (status, run) = api_a.post("/runs", &json!({"name": "replicas"})).await.unwrap();
    assert_eq!(status, 201, "{run}");
    let run_id = run["id"].as_str().unwrap().to_string();
    let follower = tokio::spawn(first_event_of_kind(api_b.clone(), "RUN_ALERT"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let raised = Instant::now();
    let alert = json!({"title": "from A", "text": "raised through replica A", "level": "info"});
    let (status, body) = api_a
        .post(&format!("/runs/{run_id}/alerts"), &alert)
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let event = tokio::time::timeout(WAIT, follower)
        .await
        .expect("B's event stream delivers the alert raised through A")
        .unwrap();
    assert!(
        event["message"].as_str().unwrap_or_default().contains("from A"),
        "{event}"
    );
    println!(
        "replicas: an event raised through A reached B's SSE follower in {:?}",
        raised.elapsed()
    );

    // The leader dies while its job runs; B leads within 10 s.
    a.kill();
    let killed = Instant::now();
    wait_until_leading(&api_b, "B, after A was killed").await;
    let takeover = killed.elapsed();
    println!("replicas: B led {takeover:?} after the leader was killed");
    assert!(takeover < Duration::from_secs(10), "B took {takeover:?} to lead");
    wait_for_status(&api_b, &first, "SUCCEEDED", WAIT).await;
    let second = submit(&api_b, &work, "second", LINES, 0).await;
    wait_for_status(&api_b, &second, "SUCCEEDED", WAIT).await;

    // A comes back and follows; what it is given, B (leading) schedules.
    a.restart().await;
    assert_eq!(leader(&api_a).await, Some(false), "A follows now that B leads");
    let third = submit(&api_a, &work, "third", 0, 0).await;
    wait_for_status(&api_a, &third, "SUCCEEDED", DISPATCH_WAIT).await;

    // The whole log file from the agent, asked of A: the agent polls B and
    // uploads there, and the file comes to A in parts through the database.
    let asked = Instant::now();
    let through_a = full_log(&api_a, &second).await;
    let relayed = asked.elapsed();
    let asked = Instant::now();
    let through_b = full_log(&api_b, &second).await;
    println!(
        "replicas: a {} KiB log file through A (relayed) in {relayed:?}, through B (direct) in {:?}",
        through_a.len() / 1024,
        asked.elapsed()
    );
    let expected: String = (1..=LINES).map(|n| format!("{n}\n")).collect();
    assert!(
        through_a.len() > 4 * 256 * 1024,
        "several parts: {} bytes",
        through_a.len()
    );
    assert!(
        through_a == expected,
        "the file through A differs ({} bytes)",
        through_a.len()
    );
    assert!(
        through_b == expected,
        "the file through B differs ({} bytes)",
        through_b.len()
    );

    // Nothing ran twice: one attempt each, and each command ran once.
    for (name, id) in [("first", &first), ("second", &second), ("third", &third)] {
        let (_, job) = api_a.get(&format!("/jobs/{id}")).await.unwrap();
        assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{name}: {job}");
        let runs = std::fs::read_to_string(work.join(name)).unwrap();
        assert_eq!(
            runs.lines().count(),
            1,
            "{name} ran {} times",
            runs.lines().count()
        );
    }
    assert_eq!(leader(&api_b).await, Some(true));
}

/// Submits a one-GPU job that appends a line to `work/NAME`, prints the
/// numbers 1 to `lines` and then sleeps `seconds`; returns its id.
async fn submit(api: &Api, work: &Path, name: &str, lines: u32, seconds: u32) -> String {
    let marker = work.join(name);
    let script = format!(
        "echo ran >> '{}'; seq 1 {lines}; sleep {seconds}",
        marker.display()
    );
    let spec = json!({"name": name, "resources": {"gpu": 1}, "command": sh(&script)});
    let (status, job) = api.post("/jobs", &spec).await.unwrap();
    assert_eq!(status, 201, "{job}");
    job["id"].as_str().unwrap().to_string()
}

async fn wait_for_status(api: &Api, id: &str, status: &str, within: Duration) {
    let what = format!("job {id} {status}");
    eventually(&what, within, || async {
        let (_, job) = api.get(&format!("/jobs/{id}")).await.ok()?;
        (job["status"] == status).then_some(())
    })
    .await;
}

/// The job's whole stdout file, fetched from its agent.
async fn full_log(api: &Api, id: &str) -> String {
    let answer = reqwest::Client::new()
        .get(format!("{}/jobs/{id}/logs/full", api.url))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let body = answer.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

/// What the replica's health check says of leading; `None` when it does not answer.
async fn leader(api: &Api) -> Option<bool> {
    let (status, health) = api.get("/health").await.ok()?;
    (status == 200).then(|| health["leader"].as_bool()).flatten()
}

async fn wait_until_leading(api: &Api, who: &str) {
    eventually(&format!("{who} leads"), WAIT, || async {
        (leader(api).await == Some(true)).then_some(())
    })
    .await;
}

/// The first event of `kind` from the replica's event stream.
async fn first_event_of_kind(api: Api, kind: &str) -> Value {
    let answer = reqwest::Client::new()
        .get(format!("{}/events/stream", api.url))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let mut body = answer.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = text.find("\n\n") {
            let message: String = text.drain(..end + 2).collect();
            let Some(data) = message.lines().find_map(|line| line.strip_prefix("data:")) else {
                continue;
            };
            let event: Value = serde_json::from_str(data.trim()).unwrap();
            if event["kind"] == kind {
                return event;
            }
        }
    }
    panic!("the event stream ended before a {kind} event");
}

/// An MCP session begun on one replica is served by the other: rmcp keeps
/// sessions in memory, and the other replica restores it from the database.
async fn mcp_session_moves(from: &ServerProcess, to: &ServerProcess, token: &str) {
    let http = reqwest::Client::new();
    let post = |server: &ServerProcess, session: Option<&str>, body: Value| {
        let mut request = http
            .post(format!("{}/mcp", server.url))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MCP_VERSION)
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": MCP_VERSION, "capabilities": {},
        "clientInfo": {"name": "replicas-test", "version": "1"}}});
    let answer = post(from, None, initialize).await.unwrap();
    assert_eq!(answer.status(), 200);
    let session = answer.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = post(from, Some(&session), initialized).await.unwrap();
    assert_eq!(answer.status(), 202);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let answer = post(to, Some(&session), list).await.unwrap();
    let status = answer.status();
    let body = answer.text().await.unwrap();
    assert_eq!(status, 200, "the other replica serves the session: {body}");
    // JSON, or (a restored session primes a stream first) server-sent events.
    let message = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|data| !data.is_empty())
        .unwrap_or(&body);
    let tools: Value = serde_json::from_str(message).unwrap_or_else(|_| panic!("{body}"));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{tools}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(names.contains(&"get_job"), "{names:?}");
}
