//! Idle GPUs (GPU_IDLE) on real agents whose simulated GPUs read a fixed
//! utilisation while a job holds them (`--fake-gpu-util`): a job on GPUs
//! that read 0 % is reported once with the figures and, once its project's
//! `idle_action` is `stop`, stopped with reason IDLE, which frees its GPU
//! for the next job; a job on busy GPUs never is.

use gpuplane_api::job::{FailureReason, JobStatus};
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::{WAIT, eventually};
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn idle_gpus_are_reported_once_and_stopped_when_the_project_says_so_and_busy_ones_never() {
    let cluster = Cluster::start_with(|config| {
        config.settings.gpu_idle_after_s = 2;
        config.settings.gpu_idle_threshold_percent = 5.0;
    })
    .await;
    let fast = ["--telemetry-interval", "0.2"];
    let _idle_box = cluster.agent(
        "idle-box",
        1,
        &[&fast[..], &["--labels", "box=idle", "--fake-gpu-util", "0"]].concat(),
    );
    let _busy_box = cluster.agent(
        "busy-box",
        1,
        &[&fast[..], &["--labels", "box=busy", "--fake-gpu-util", "80"]].concat(),
    );
    cluster.wait_for_nodes(2).await;
    let job_on = |name: &str, machine: &str| json!({"name": name, "command": sh("sleep 120"), "resources": {"gpu": 1}, "node_selector": {"box": machine}});

    // warn (the default): reported once, with the figures, and it runs on.
    let waiting = cluster.submit(job_on("waits-on-input", "idle")).await;
    let busy = cluster.submit(job_on("computes", "busy")).await;
    let events = eventually("GPU_IDLE for the job on idle GPUs", WAIT, || async {
        let events = cluster
            .events(&format!("job_id={}&kind=GPU_IDLE", waiting.id))
            .await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    let message = &events[0].message;
    assert!(
        message.starts_with(
            "attempt 1 holds idle GPUs: GPU 0 on idle-box peaked at 0 % (mean 0.0 %) over the last 2s"
        ) && message.contains("under gpu_idle_threshold_percent (5 %)")
            && message.ends_with("its project's idle_action is warn: it keeps running"),
        "{message}"
    );
    // Three more spans: still one event, still running; none for the busy job.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let events = cluster
        .events(&format!("job_id={}&kind=GPU_IDLE", waiting.id))
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(cluster.job(&waiting.id).await.status, JobStatus::Running);
    assert_eq!(cluster.job(&busy.id).await.status, JobStatus::Running);
    let busy_events = cluster.events(&format!("job_id={}&kind=GPU_IDLE", busy.id)).await;
    assert!(busy_events.is_empty(), "a busy job is not idle: {busy_events:?}");
    for job in [&waiting, &busy] {
        let (status, body) = cluster
            .post(&format!("/jobs/{}/cancel", job.id), json!({"confirm": true}))
            .await;
        assert_eq!(status, 200, "{body}");
        cluster.wait_for(&job.id, JobStatus::Cancelled).await;
    }

    // stop: the idle job ends CANCELLED with reason IDLE and the figures,
    // and the next job gets its GPU.
    let (status, body) = cluster
        .call(
            Method::PATCH,
            "/projects/default",
            Some(json!({"idle_action": "stop"})),
            &cluster.token,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["idle_action"], "stop");
    let idle = cluster.submit(job_on("forgotten", "idle")).await;
    let next = cluster.submit(job_on("next", "idle")).await;
    let idle = cluster.wait_for(&idle.id, JobStatus::Cancelled).await;
    assert_eq!(idle.failure_reason, Some(FailureReason::Idle));
    let detail = idle.failure_detail.unwrap_or_default();
    assert!(
        detail.starts_with("its GPUs sat idle: GPU 0 on idle-box peaked at 0 %"),
        "{detail}"
    );
    let events = cluster.events(&format!("job_id={}&kind=GPU_IDLE", idle.id)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0]
            .message
            .ends_with("stopping it to free its GPUs (reason IDLE)"),
        "{}",
        events[0].message
    );
    cluster.wait_for(&next.id, JobStatus::Running).await;
    let (status, body) = cluster
        .post(&format!("/jobs/{}/cancel", next.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200, "{body}");
}
