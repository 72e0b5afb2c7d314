//! Heartbeats written in groups: a poll's reading reaches the database
//! within a moment, a node that was OFFLINE comes back with
//! AGENT_RECONNECTED, and the liveness check never judges a node on a
//! heartbeat still waiting to be written. Telemetry batches sent at once
//! are stored together, each once, and so are log lines sent again.

use gpuplane_api::auth::Scope;
use gpuplane_api::node::Gpu;
use gpuplane_server::store::Db;
use gpuplane_testkit::sql;
use gpuplane_testkit::{TestServer, WAIT, agent_token, eventually, user_token};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

fn gpu(utilization: u32) -> Gpu {
    Gpu {
        utilization_percent: Some(utilization),
        ..gpuplane_testkit::simulated_gpu(0)
    }
}

async fn last_seen(db: &Db, node: &str) -> (String, i64) {
    sql!(db, |pool| {
        sqlx::query_as("SELECT status, last_seen_at FROM nodes WHERE id = $1")
            .bind(node)
            .fetch_one(pool)
            .await
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn heartbeats_are_written_together_and_never_judged_stale() {
    // Heartbeats written every 250 ms at most; a node times out after 8 s.
    let f = TestServer::start_with(|config| {
        config.heartbeat_interval = Duration::from_secs(4);
        config.node_timeout = Duration::from_secs(8);
    })
    .await;
    let state = &f.server.state;
    let token = agent_token(&state.db).await;
    let hello = json!({"name": "box", "hostname": "box", "gpus": [gpu(0)], "agent_version": "test", "runners": ["process"]});
    let (status, welcome) = f.post("/agent/hello", &token, hello).await;
    assert_eq!(status, StatusCode::OK, "{welcome}");
    let node = welcome["node_id"].as_str().unwrap().to_string();

    // A reading reaches the database at once when the writer is idle.
    let before = last_seen(&state.db, &node).await.1;
    tokio::time::sleep(Duration::from_millis(5)).await;
    state.heartbeats.record(&node, vec![gpu(42)]);
    gpuplane_testkit::eventually("the reading written", Duration::from_secs(5), || async {
        (last_seen(&state.db, &node).await.1 > before).then_some(())
    })
    .await;
    let utilization: i64 = sql!(&state.db, |pool| {
        sqlx::query_scalar("SELECT utilization_percent FROM gpus WHERE node_id = $1")
            .bind(&node)
            .fetch_one(pool)
            .await
    })
    .unwrap();
    assert_eq!(utilization, 42);

    // The writer now waits 250 ms before its next write. Meanwhile the
    // database says the node is long silent, a fresh reading waits, and
    // the liveness check runs: it must write the reading first.
    sql!(&state.db, |pool| {
        sqlx::query("UPDATE nodes SET last_seen_at = 0 WHERE id = $1")
            .bind(&node)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    state.heartbeats.record(&node, vec![gpu(7)]);
    state.wakes.nodes().notify_one();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        last_seen(&state.db, &node).await.0,
        "ONLINE",
        "not judged on the old time"
    );

    // A node that was OFFLINE comes back when its reading is written.
    sql!(&state.db, |pool| {
        sqlx::query("UPDATE nodes SET status = 'OFFLINE' WHERE id = $1")
            .bind(&node)
            .execute(pool)
            .await
            .map(|_| ())
    })
    .unwrap();
    state.heartbeats.record(&node, vec![gpu(9)]);
    gpuplane_testkit::eventually("the node back", Duration::from_secs(5), || async {
        (last_seen(&state.db, &node).await.0 == "ONLINE").then_some(())
    })
    .await;
    let kinds: Vec<String> = sql!(&state.db, |pool| {
        sqlx::query_scalar("SELECT kind FROM events WHERE node_id = $1 ORDER BY seq")
            .bind(&node)
            .fetch_all(pool)
            .await
    })
    .unwrap();
    assert_eq!(
        kinds,
        ["AGENT_RECONNECTED"],
        "and no AGENT_DISCONNECTED: {kinds:?}"
    );
}

/// A telemetry batch of `node` with one sample of GPU 0 per second from
/// `first` (seconds since the epoch), reading `utilization`.
fn telemetry(node: &str, batch_id: &str, first: u64, samples: u64, utilization: f64) -> serde_json::Value {
    let samples: Vec<_> = (0..samples)
        .map(|i| json!({"wall_time": (first + i) as f64, "gpus": [{"index": 0, "utilization_percent": utilization}]}))
        .collect();
    json!({"node_id": node, "batch_id": batch_id, "samples": samples})
}

#[tokio::test(flavor = "multi_thread")]
async fn telemetry_sent_at_once_is_stored_together_and_each_batch_once() {
    let f = TestServer::start().await;
    let state = &f.server.state;
    let mut nodes = Vec::new();
    for name in ["box-a", "box-b"] {
        let token = agent_token(&state.db).await;
        let hello = json!({"name": name, "hostname": name, "gpus": [gpu(0)], "agent_version": "test", "runners": ["process"]});
        let (status, welcome) = f.post("/agent/hello", &token, hello).await;
        assert_eq!(status, StatusCode::OK, "{welcome}");
        nodes.push((welcome["node_id"].as_str().unwrap().to_string(), token));
    }
    let [(a, a_token), (b, b_token)] = &nodes[..] else {
        unreachable!()
    };
    let sends = [
        (a_token, telemetry(a, "a-1", 1_000, 5, 10.0)),
        (a_token, telemetry(a, "a-2", 1_005, 5, 20.0)),
        // The same batch again, in the same group (an agent retrying).
        (a_token, telemetry(a, "a-1", 1_000, 5, 10.0)),
        (b_token, telemetry(b, "b-1", 1_000, 3, 30.0)),
    ];
    // Holding the write turn makes the four one group.
    let turn = gpuplane_server::store::write(&state.db).await.unwrap();
    const TELEMETRY: &str = "/agent/telemetry";
    let [one, two, three, four] = sends.map(|(token, batch)| f.post(TELEMETRY, token, batch));
    let release = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(turn);
    };
    let (_, one, two, three, four) = tokio::join!(release, one, two, three, four);
    for (status, body) in [one, two, three, four] {
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }

    let stored = |node: &str| {
        let node = node.to_string();
        async move {
            sql!(&state.db, |pool| { sqlx::query_as::<_, (i64, f64)>(
                "SELECT count, time_min FROM metric_chunks WHERE run_id = $1 AND key = 'gpu0.utilization_percent'
                 ORDER BY step_min",
            )
            .bind(node)
            .fetch_all(pool)
            .await })
            .unwrap()
        }
    };
    assert_eq!(
        stored(a).await,
        vec![(5, 1_000.0), (5, 1_005.0)],
        "a-1 once, a-2 once"
    );
    assert_eq!(stored(b).await, vec![(3, 1_000.0)]);
    let batches: Vec<(String, String)> = sql!(&state.db, |pool| {
        sqlx::query_as(
            "SELECT run_id, batch_id FROM metric_batches WHERE batch_id LIKE '_-_' ORDER BY batch_id",
        )
        .fetch_all(pool)
        .await
    })
    .unwrap();
    let expected: Vec<(String, String)> = [(a, "a-1"), (a, "a-2"), (b, "b-1")]
        .iter()
        .map(|(node, id)| (node.to_string(), id.to_string()))
        .collect();
    assert_eq!(batches, expected);
}

/// Lines an agent sends again (a report retried after a lost answer, a
/// restarted agent resuming) are stored once, in order, with the new
/// ones among them kept.
#[tokio::test(flavor = "multi_thread")]
async fn log_lines_sent_again_are_stored_once() {
    let f = TestServer::start().await;
    let db = &f.server.state.db;
    let token = agent_token(db).await;
    let hello = json!({"name": "box", "hostname": "box", "gpus": [], "agent_version": "test", "runners": ["process"]});
    let (status, welcome) = f.post("/agent/hello", &token, hello).await;
    assert_eq!(status, StatusCode::OK, "{welcome}");
    let node = welcome["node_id"].as_str().unwrap().to_string();
    let user = user_token(db, "ada", Scope::Write, true).await;
    let spec = json!({"name": "j", "command": ["true"], "resources": {"gpu": 0}});
    let (status, job) = f.post("/jobs", &user, spec).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_str().unwrap().to_string();
    let heartbeat = json!({"node_id": node, "gpus": [], "running": []});
    eventually("the job to be dispatched", WAIT, || async {
        let (_, answer) = f.post("/agent/poll", &token, heartbeat.clone()).await;
        (answer["commands"][0]["type"] == "dispatch").then_some(())
    })
    .await;

    let lines = |stream: &str, first_n: i64, count: i64| {
        let texts: Vec<String> = (first_n..first_n + count)
            .map(|n| format!("{stream} {n}"))
            .collect();
        json!({"type": "lines", "job_id": job_id, "attempt": 1, "stream": stream,
               "first_n": first_n, "time": 1, "lines": texts})
    };
    let started = json!({"type": "started", "job_id": job_id, "attempt": 1, "pid": 1, "time": 1});
    let reports = [
        vec![started, lines("stdout", 1, 3)],
        vec![lines("stdout", 2, 4)], // overlaps the first
        vec![lines("stdout", 1, 5)], // all stored already
        vec![lines("stderr", 1, 2), lines("stdout", 6, 2)],
        vec![lines("stderr", 1, 2)], // again, alone
    ];
    for items in reports {
        let report = json!({"node_id": node, "items": items});
        let (status, body) = f.post("/agent/report", &token, report).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }

    let (status, logs) = f.get(&format!("/jobs/{job_id}/logs?tail=100"), &user).await;
    assert_eq!(status, StatusCode::OK, "{logs}");
    let mut stored: Vec<(String, i64)> = logs["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| {
            (
                line["text"].as_str().unwrap().to_string(),
                line["n"].as_i64().unwrap(),
            )
        })
        .collect();
    stored.sort_by_key(|(text, _)| text.starts_with("stdout"));
    let expected: Vec<(String, i64)> = [("stderr", 1..=2), ("stdout", 1..=7)]
        .into_iter()
        .flat_map(|(stream, ns)| ns.map(move |n| (format!("{stream} {n}"), n)))
        .collect();
    assert_eq!(stored, expected);
}
