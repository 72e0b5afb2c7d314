//! Real jobs that fail each way, and the exact explanation each gets: a
//! CUDA out-of-memory message on stderr, a SIGSEGV, a NaN loss written to
//! TensorBoard, a missing working_dir. An unchanged retry of the OOM is
//! refused with the advice; one with a changed field is queued.

mod common;

use common::{Cluster, sh};
use gpuplane_api::job::{Job, JobStatus};
use serde_json::{Value, json};

/// The explanation of a failed job's run.
async fn explain(cluster: &Cluster, job: &Job) -> Value {
    let (status, body) = cluster.get(&format!("/api/v1/runs/{}/failure", job.run_id)).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn fails(cluster: &Cluster, spec: Value) -> Job {
    let job = cluster.submit(spec).await;
    cluster.wait_for(&job.id, JobStatus::Failed).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cuda_oom_is_explained_and_an_unchanged_retry_is_refused() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let traceback = [
        "echo 'epoch 0 step 120 loss 2.31'",
        "echo 'Traceback (most recent call last):' >&2",
        "echo '  File \"train.py\", line 88, in <module>' >&2",
        "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.' >&2",
        "exit 1",
    ]
    .join("; ");
    let job = fails(&cluster, json!({"name": "oom", "command": sh(&traceback)})).await;
    assert_eq!(job.failure_reason.map(|r| r.as_str()), Some("OOM"));

    let explanation = explain(&cluster, &job).await;
    assert_eq!(explanation["rule"], "cuda-oom");
    assert_eq!(explanation["category"], "CUDA out of memory");
    assert!(
        explanation["summary"]
            .as_str()
            .unwrap()
            .starts_with("The GPU ran out of memory: torch.OutOfMemoryError: CUDA out of memory."),
        "{explanation}"
    );
    // The evidence is the stderr line, with its number.
    let evidence = explanation["evidence"].as_array().unwrap();
    assert!(
        evidence.iter().any(|e| e["kind"] == "log"
            && e["stream"] == "stderr"
            && e["n"] == 3
            && e["text"].as_str().unwrap().contains("Tried to allocate 2.00 GiB")),
        "{explanation}"
    );
    assert!(
        explanation["retry_advice"]
            .as_str()
            .unwrap()
            .contains("batch size")
    );

    // Retrying unchanged is refused with that advice; a changed field is queued.
    let (status, body) = cluster
        .post(&format!("/api/v1/jobs/{}/retry", job.id), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("batch size"),
        "{body}"
    );
    let (status, body) = cluster
        .post(
            &format!("/api/v1/jobs/{}/retry", job.id),
            json!({"set": {"env.BATCH_SIZE": "16"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "QUEUED");
    let retried = cluster.job(&job.id).await;
    assert_eq!(retried.spec.env.get("BATCH_SIZE").map(String::as_str), Some("16"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_segfault_a_missing_working_dir_and_a_nan_loss_get_their_own_explanations() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;

    let segfault = fails(
        &cluster,
        json!({"name": "segv", "max_attempts": 1, "command": sh("echo loading; kill -SEGV $$")}),
    )
    .await;
    let explanation = explain(&cluster, &segfault).await;
    assert_eq!(explanation["rule"], "segfault");
    assert_eq!(
        explanation["summary"],
        "The process crashed with SIGSEGV (a segmentation fault)."
    );

    let nowhere = fails(
        &cluster,
        json!({"name": "nowhere", "working_dir": "/no/such/dir", "command": ["true"]}),
    )
    .await;
    let explanation = explain(&cluster, &nowhere).await;
    assert_eq!(explanation["rule"], "dispatch-working-dir");
    assert_eq!(explanation["category"], "dispatch failure: working_dir");
    assert!(
        explanation["summary"].as_str().unwrap().contains("/no/such/dir"),
        "{explanation}"
    );
    assert!(
        explanation["retry_advice"]
            .as_str()
            .unwrap()
            .contains("--set working_dir=")
    );

    // The fixture's train/loss is NaN at step 13; the job then gives up.
    let work = cluster.workdir("nan");
    let script = format!(
        "mkdir -p tb && cp {}/tests/fixtures/tb-simple/events.out.tfevents.simple tb/ && echo 'loss is nan, stopping' >&2 && exit 3",
        env!("CARGO_MANIFEST_DIR")
    );
    let nan = fails(
        &cluster,
        json!({"name": "nan", "max_attempts": 1, "working_dir": work, "watch_dirs": ["tb"], "command": sh(&script)}),
    )
    .await;
    let explanation = explain(&cluster, &nan).await;
    assert_eq!(explanation["rule"], "nan-loss");
    assert_eq!(
        explanation["summary"],
        "train/loss became NaN at step 13, and the job failed."
    );
    assert!(
        explanation["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "metric"
                && e["key"] == "train/loss"
                && e["step"] == 13
                && e["value"] == "NaN"),
        "{explanation}"
    );
    let (status, diagnosis) = cluster
        .get(&format!("/api/v1/runs/{}/diagnosis", nan.run_id))
        .await;
    assert_eq!(status, 200, "{diagnosis}");
    let kinds: Vec<&str> = diagnosis["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"LOSS_NAN"), "{diagnosis}");
    assert_eq!(diagnosis["failure"]["rule"], "nan-loss");
}

#[tokio::test(flavor = "multi_thread")]
async fn running_jobs_are_diagnosed_and_a_run_that_did_not_fail_has_no_failure_to_explain() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "long", "command": ["sleep", "30"]}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Running).await;
    let (status, diagnosis) = cluster
        .get(&format!("/api/v1/runs/{}/diagnosis", job.run_id))
        .await;
    assert_eq!(status, 200, "{diagnosis}");
    assert_eq!(diagnosis["status"], "RUNNING");
    assert_eq!(diagnosis["failure"], Value::Null);
    let (status, body) = cluster.get(&format!("/api/v1/runs/{}/failure", job.run_id)).await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = cluster.get("/api/v1/runs/run_nope/failure").await;
    assert_eq!(status, 404);

    // A command that would wait for keyboard input is refused at submit.
    let (status, body) = cluster
        .post(
            "/api/v1/jobs",
            json!({"name": "repl", "command": ["python3", "-i", "train.py"]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "command");
}
