//! GPU usage on a real agent whose simulated GPUs read 50 % while a job
//! holds them (`--fake-gpu-util 50`): allocated GPU-hours equal what the
//! attempts' records say (a preempted job's two attempts and its
//! preemptor's), to the millisecond, by project, user, node and GPU model;
//! used GPU-hours are the telemetry's share of them; a restarted server
//! answers the same; `gpuctl usage` prints it as a table and CSV.

use gpuplane_api::auth::Scope;
use gpuplane_api::job::{Job, JobStatus};
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::gpuctl;
use reqwest::Method;
use serde_json::{Value, json};

/// GPU-seconds the job's attempts held, from their records.
fn held_seconds(job: &Job) -> f64 {
    job.attempts
        .iter()
        .map(|attempt| {
            let ms = |time: &Option<String>| {
                let time = time.as_deref().expect("a started and ended attempt");
                humantime::parse_rfc3339(time)
                    .unwrap()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as f64
            };
            attempt.gpus.len() as f64 * (ms(&attempt.ended_at) - ms(&attempt.started_at)) / 1000.0
        })
        .sum()
}

fn row<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["key"] == key)
        .unwrap_or_else(|| panic!("no row {key}: {report:#}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_agrees_with_the_attempts_records_across_preemption_and_restart() {
    let cluster = Cluster::start_with(|config| {
        config.settings.preempt_priority = Some(100);
        config.settings.preemption_grace_s = 1;
    })
    .await;
    let _agent = cluster.agent(
        "box",
        1,
        &["--telemetry-interval", "0.2", "--fake-gpu-util", "50"],
    );
    cluster.wait_for_nodes(1).await;
    // A job that is preempted once and then finishes, and the one that
    // preempts it.
    let low = cluster
        .submit(json!({"name": "low", "resources": {"gpu": 1}, "command": sh("sleep 3")}))
        .await;
    cluster.wait_for(&low.id, JobStatus::Running).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let urgent = cluster
        .submit(json!({"name": "urgent", "priority": 100, "resources": {"gpu": 1}, "command": sh("sleep 2")}))
        .await;
    let urgent = cluster.wait_for(&urgent.id, JobStatus::Succeeded).await;
    let low = cluster.wait_for(&low.id, JobStatus::Succeeded).await;
    assert_eq!(low.attempts.len(), 2, "preempted once: {low:?}");
    let recorded = held_seconds(&low) + held_seconds(&urgent);

    // The agent sends its samples in batches: the figures are final once
    // the batch holding the last job's end has come (the same two reads in a row).
    let mut report = Value::Null;
    for _ in 0..30 {
        let (status, now) = cluster.get("/usage?by=project&since=1h").await;
        assert_eq!(status, 200, "{now}");
        let settled = now["rows"] == report["rows"];
        report = now;
        if settled {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    }
    let project = row(&report, "default");
    let allocated = project["allocated_gpu_hours"].as_f64().unwrap() * 3600.0;
    assert!(
        (allocated - recorded).abs() < 0.001,
        "{allocated} s against {recorded} s recorded"
    );
    assert_eq!(project["attempts"], 3);
    // The GPU read 50 % while held; a sample taken as a job started or
    // ended may read 0 %.
    let used = project["used_gpu_hours"].as_f64().unwrap() * 3600.0;
    assert!(
        used > 0.3 * allocated && used <= 0.5 * allocated + 0.001,
        "{used} of {allocated}"
    );
    assert_eq!(project["unmeasured_gpu_hours"], 0.0);
    for (by, key) in [
        ("user", "tester"),
        ("node", "box"),
        ("gpu_model", "Simulated GPU"),
    ] {
        let (status, grouped) = cluster.get(&format!("/usage?by={by}&since=1h")).await;
        assert_eq!(status, 200, "{grouped}");
        let other = row(&grouped, key);
        assert_eq!(
            other["allocated_gpu_hours"], project["allocated_gpu_hours"],
            "{by}"
        );
        assert_eq!(other["used_gpu_hours"], project["used_gpu_hours"], "{by}");
    }
    for bad in ["by=team", "since=forever", "since=400d"] {
        let (status, body) = cluster.get(&format!("/usage?{bad}")).await;
        assert_eq!(status, 422, "{bad}: {body}");
    }

    // Each caller sees the projects they can see: nothing of `default` for
    // someone outside it or a token limited to another project; a viewer
    // sees it; a job's sdk token is refused.
    let db = &cluster.server.state.db;
    let outsider = gpuplane_testkit::user_token(db, "otto", Scope::Write, false).await;
    // New users are viewers of `default`: this one is taken out of it.
    let (status, body) = cluster
        .call(
            Method::DELETE,
            "/projects/default/members/otto",
            None,
            &cluster.token,
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = cluster.post("/projects", json!({"name": "vision"})).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = cluster
        .post(
            "/projects/vision/members",
            json!({"user": "otto", "role": "admin"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, limited) = cluster
        .call(
            Method::POST,
            "/tokens",
            Some(json!({"name": "v", "scope": "read", "project": "vision"})),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 201, "{limited}");
    let sdk = gpuplane_testkit::user_token(db, "job", Scope::Sdk, true).await;
    for token in [outsider.as_str(), limited["secret"].as_str().unwrap()] {
        let (status, seen) = cluster.call(Method::GET, "/usage?since=1h", None, token).await;
        assert_eq!(status, 200, "{seen}");
        assert_eq!(seen["rows"], json!([]), "{seen}");
        assert_eq!(seen["total"]["allocated_gpu_hours"], 0.0, "{seen}");
    }
    let (status, body) = cluster.call(Method::GET, "/usage?since=1h", None, &sdk).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = cluster
        .post(
            "/projects/default/members",
            json!({"user": "otto", "role": "viewer"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, seen) = cluster
        .call(Method::GET, "/usage?since=1h", None, &outsider)
        .await;
    assert_eq!(
        row(&seen, "default")["allocated_gpu_hours"],
        project["allocated_gpu_hours"]
    );

    // The terminal: a table, and CSV with the same figures.
    let home = tempfile::tempdir().unwrap();
    let login = (cluster.server.url.as_str(), cluster.token.as_str());
    let run = |args: &[&str]| gpuctl::stdout(&gpuctl::succeeds(home.path(), login, args));
    let table = run(&["usage", "--by", "project", "--since", "1h"]);
    assert!(
        table.contains("default") && table.contains("ALLOCATED_H"),
        "{table}"
    );
    let csv = run(&["usage", "--by", "node", "--since", "1h", "--csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "node,allocated_gpu_hours,used_gpu_hours,idle_gpu_hours,unmeasured_gpu_hours,attempts"
    );
    assert!(lines[1].starts_with("box,"), "{csv}");
    assert!(lines[1].ends_with(",3"), "{csv}");

    // A restarted server answers the same from the database.
    let token = cluster.token.clone();
    let dir = cluster.stop_server().await;
    let server = gpuplane_testkit::start_server_with(&dir.path().join("server"), |_| {}).await;
    let again: Value = reqwest::Client::new()
        .get(format!("{}/api/v1/usage?by=project&since=1h", server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let restarted = row(&again, "default");
    assert_eq!(restarted["allocated_gpu_hours"], project["allocated_gpu_hours"]);
    assert_eq!(restarted["used_gpu_hours"], project["used_gpu_hours"]);
}
