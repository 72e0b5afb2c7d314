//! Faults with real processes: an agent killed and restarted mid-job, a
//! connection cut shorter and longer than the LOST grace period.

use gpuplane_api::event::EventKind;
use gpuplane_api::job::{FailureReason, JobStatus};
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::{eventually, simulated_gpu};
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

/// A job that counts its starts in `starts` and prints 1..=n slowly.
fn counting_job(work: &std::path::Path, n: u32, max_attempts: i64) -> serde_json::Value {
    json!({
        "name": "counter", "working_dir": work, "max_attempts": max_attempts, "retry_cooldown_s": 0,
        "command": sh(&format!("echo x >> starts; i=1; while [ $i -le {n} ]; do echo $i; i=$((i+1)); sleep 0.05; done")),
    })
}

fn expected_lines(n: u32) -> Vec<String> {
    (1..=n).map(|i| i.to_string()).collect()
}

fn starts(work: &std::path::Path) -> usize {
    std::fs::read_to_string(work.join("starts"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_agent_restarts_and_adopts_its_running_job() {
    let cluster = Cluster::start_with(|config| config.lost_grace = Duration::from_secs(20)).await;
    let mut agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("adopt");
    let job = cluster.submit(counting_job(&work, 60, 1)).await;
    eventually("some output", gpuplane_testkit::WAIT, || async {
        (cluster.output(&job.id, "stdout").await.len() >= 5).then_some(())
    })
    .await;

    agent.kill(); // SIGKILL: no goodbye; the job lives on under its shim.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cluster.job(&job.id).await.status, JobStatus::Running);
    let _restarted = cluster.agent_in("box", 1, &agent.jobs_dir.clone(), &[]);

    let done = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert_eq!(done.attempts.len(), 1, "the same attempt, adopted");
    assert_eq!(starts(&work), 1, "never started twice");
    assert_eq!(
        cluster.output(&job.id, "stdout").await,
        expected_lines(60),
        "no line lost or repeated"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_ends_while_its_agent_is_down_reports_its_real_outcome() {
    let cluster = Cluster::start_with(|config| config.lost_grace = Duration::from_secs(20)).await;
    let mut agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("ended");
    let job = cluster
        .submit(json!({"name": "ends", "working_dir": work, "command": sh("echo before; sleep 1; echo after; exit 5")}))
        .await;
    cluster.wait_for(&job.id, JobStatus::Running).await;
    agent.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await; // it ends meanwhile
    let _restarted = cluster.agent_in("box", 1, &agent.jobs_dir.clone(), &[]);
    let failed = cluster.wait_for(&job.id, JobStatus::Failed).await;
    assert_eq!(failed.failure_reason, Some(FailureReason::ExitCode));
    assert_eq!(failed.attempts[0].exit_code, Some(5));
    assert_eq!(cluster.output(&job.id, "stdout").await, vec!["before", "after"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_shorter_than_the_grace_period_loses_nothing() {
    let cluster = Cluster::start_with(|config| config.lost_grace = Duration::from_secs(30)).await;
    let agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("short-cut");
    let job = cluster.submit(counting_job(&work, 60, 1)).await;
    cluster.wait_for(&job.id, JobStatus::Running).await;

    agent.signal("STOP"); // the agent goes silent; its job keeps running
    eventually("the node to go OFFLINE", gpuplane_testkit::WAIT, || async {
        let (_, nodes) = cluster.get("/nodes").await;
        (nodes["items"][0]["status"] == "OFFLINE").then_some(())
    })
    .await;
    assert_eq!(
        cluster.job(&job.id).await.status,
        JobStatus::Running,
        "not LOST within the grace period"
    );
    agent.signal("CONT");

    let done = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert_eq!(done.attempts.len(), 1);
    assert_eq!(starts(&work), 1);
    assert_eq!(cluster.output(&job.id, "stdout").await, expected_lines(60));
    let kinds: Vec<EventKind> = cluster.events("").await.iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::AgentDisconnected), "{kinds:?}");
    assert!(kinds.contains(&EventKind::AgentReconnected), "{kinds:?}");
    assert!(!kinds.contains(&EventKind::JobLost), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_longer_than_the_grace_period_loses_the_attempt_and_requeues_the_job() {
    let cluster = Cluster::start().await; // node timeout 1 s, grace 1 s
    let agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("long-cut");
    // Each attempt also appends its number to `copies` as it counts, so an
    // orphan still running beside its successor shows.
    let job = cluster
        .submit(json!({
            "name": "counter", "working_dir": work, "max_attempts": 2, "retry_cooldown_s": 0,
            "command": sh("echo x >> starts; i=1; while [ $i -le 120 ]; do echo $i; echo $GPUCTL_ATTEMPT >> copies; i=$((i+1)); sleep 0.05; done"),
        }))
        .await;
    cluster.wait_for(&job.id, JobStatus::Running).await;

    agent.signal("STOP");
    let requeued = cluster
        .wait_until(&job.id, "attempt 1 to be LOST and the job requeued", |job| {
            job.attempts.first().is_some_and(|a| a.status == JobStatus::Lost)
                && job.status == JobStatus::Queued
        })
        .await;
    assert_eq!(requeued.attempts[0].failure_reason, Some(FailureReason::JobLost));
    let lost = cluster.events(&format!("job_id={}&kind=JOB_LOST", job.id)).await;
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].severity, gpuplane_api::event::Severity::Critical);
    agent.signal("CONT");

    // The agent stops the stale attempt and runs the new one.
    let done = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert_eq!(done.attempts.len(), 2);
    assert_eq!(done.attempts[0].status, JobStatus::Lost);
    assert_eq!(done.attempts[1].status, JobStatus::Succeeded);
    assert_eq!(starts(&work), 2);
    let logs = cluster.logs(&job.id, "stream=stdout&tail=10000&attempt=2").await;
    let lines: Vec<String> = logs.lines.into_iter().map(|l| l.text).collect();
    assert_eq!(lines, expected_lines(120));
    let copies = std::fs::read_to_string(work.join("copies")).unwrap();
    let copies: Vec<&str> = copies.lines().collect();
    let second = copies.iter().position(|c| *c == "2").unwrap();
    assert!(
        copies[second..].iter().all(|c| *c == "2"),
        "attempt 1 stopped before attempt 2 started: {copies:?}"
    );
    assert!(
        copies[..second].len() < 120,
        "the orphan was stopped, not left to finish"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_job_without_attempts_left_is_lost() {
    let cluster = Cluster::start().await;
    let mut agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "doomed", "command": sh("sleep 60")}))
        .await;
    cluster.wait_for(&job.id, JobStatus::Running).await;
    agent.kill();
    let lost = cluster.wait_for(&job.id, JobStatus::Lost).await;
    assert_eq!(lost.failure_reason, Some(FailureReason::JobLost));
    assert!(
        lost.failure_detail
            .unwrap()
            .starts_with("node box has not answered since")
    );
    // The orphaned process still runs; a restarted agent learns the attempt
    // is lost and stops it (SIGTERM), reporting its real end.
    let _restarted = cluster.agent_in("box", 1, &agent.jobs_dir.clone(), &[]);
    let dir = agent.jobs_dir.join(&job.id).join("attempt-1");
    eventually(
        "the stale attempt to be stopped and reported",
        gpuplane_testkit::WAIT,
        || async { dir.join("reported").exists().then_some(()) },
    )
    .await;
    let exit: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("exit.json")).unwrap()).unwrap();
    assert_eq!(exit["signal"], 15, "{exit}");
    let job = cluster.job(&job.id).await;
    assert_eq!(job.status, JobStatus::Lost, "a stale end does not change the job");
    assert_eq!(job.attempts[0].signal, Some(15), "but its real end is on record");
}

/// A dispatch lost with its poll answer (the server crashed while sending
/// it), then a cancel: the agent's next poll does not list the attempt, so
/// it never started, and the job ends CANCELLED at once. (It stayed
/// DISPATCHING for good: the server sent a cancel the agent could not
/// match to anything, found by `crash.rs`.)
#[tokio::test(flavor = "multi_thread")]
async fn a_job_cancelled_before_its_agent_got_the_dispatch_ends_cancelled() {
    let cluster = Cluster::start().await;
    let token = cluster.agent_token("by-hand");
    let gpu = simulated_gpu(0);
    let hello = json!({"name": "by-hand", "hostname": "by-hand", "gpus": [gpu], "agent_version": "test", "runners": ["process"]});
    let (status, welcome) = cluster
        .call(Method::POST, "/agent/hello", Some(hello), &token)
        .await;
    assert_eq!(status, 200, "{welcome}");
    let poll = json!({"node_id": welcome["node_id"], "gpus": [gpu], "running": []});
    let job = cluster
        .submit(json!({"name": "never-received", "command": ["true"], "resources": {"gpu": 1}}))
        .await;
    cluster.wait_for(&job.id, JobStatus::Dispatching).await;
    // The answer carrying the dispatch is lost: the test does not poll.

    let (status, body) = cluster
        .post(&format!("/jobs/{}/cancel", job.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, answer) = cluster
        .call(Method::POST, "/agent/poll", Some(poll), &token)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["commands"], json!([]), "nothing to start, nothing to stop");
    let job = cluster.job(&job.id).await;
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(job.attempts[0].status, JobStatus::Cancelled);
    assert_eq!(
        job.failure_detail.as_deref(),
        Some("cancelled before its agent started it")
    );
}
