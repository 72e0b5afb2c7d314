//! Real jobs that fail each way, and the exact explanation each gets: a
//! CUDA out-of-memory message on stderr, a SIGSEGV, a NaN loss written to
//! TensorBoard, a missing working_dir, a time limit reached. An unchanged retry of the OOM is
//! refused with the advice; one with a changed field is queued.

use gpuplane_api::job::{Job, JobStatus};
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::eventually;
use serde_json::{Value, json};
use std::time::Duration;

/// The explanation of a failed job's run.
async fn explain(cluster: &Cluster, job: &Job) -> Value {
    let (status, body) = cluster.get(&format!("/runs/{}/failure", job.run_id)).await;
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
    let (status, body) = cluster.post(&format!("/jobs/{}/retry", job.id), json!({})).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("batch size"),
        "{body}"
    );
    let (status, body) = cluster
        .post(
            &format!("/jobs/{}/retry", job.id),
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
        concat!(env!("CARGO_MANIFEST_DIR"), "/../tfevents")
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
    let (status, diagnosis) = cluster.get(&format!("/runs/{}/diagnosis", nan.run_id)).await;
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
    // Silence is worth a finding after 2 s here (15 minutes by default).
    let cluster = Cluster::start_with(|config| {
        config.silence_warning = Duration::from_secs(2);
        config.lost_grace = Duration::from_secs(60);
    })
    .await;
    let agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let job = cluster
        .submit(json!({"name": "long", "command": sh("echo starting; sleep 60")}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Running).await;
    let (status, diagnosis) = cluster.get(&format!("/runs/{}/diagnosis", job.run_id)).await;
    assert_eq!(status, 200, "{diagnosis}");
    assert_eq!(diagnosis["status"], "RUNNING");
    assert_eq!(diagnosis["failure"], Value::Null);
    assert_eq!(cluster.findings(&job.run_id).await, Vec::<String>::new());
    let (status, body) = cluster.get(&format!("/runs/{}/failure", job.run_id)).await;
    assert_eq!(status, 409, "{body}");

    // A loss that climbs, then nothing printed for a while, then a lost node.
    let points: Vec<Value> = (0..30)
        .map(|step| json!({"key": "train/loss", "step": step, "wall_time": 1.0e9 + step as f64, "value": 1.0 + step as f64 * 0.2}))
        .collect();
    let (status, body) = cluster
        .post(
            &format!("/runs/{}/metrics", job.run_id),
            json!({"batch_id": "rising", "points": points}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    eventually("a NO_OUTPUT finding", gpuplane_testkit::WAIT, || async {
        let kinds = cluster.findings(&job.run_id).await;
        (kinds == ["LOSS_DIVERGING", "NO_OUTPUT"]).then_some(())
    })
    .await;
    agent.signal("STOP");
    eventually("a NODE_OFFLINE finding", gpuplane_testkit::WAIT, || async {
        let kinds = cluster.findings(&job.run_id).await;
        kinds.contains(&"NODE_OFFLINE".to_string()).then_some(())
    })
    .await;
    agent.signal("CONT");
    let (status, _) = cluster.get("/runs/run_nope/failure").await;
    assert_eq!(status, 404);

    // A command that would wait for keyboard input is refused at submit.
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "repl", "command": ["python3", "-i", "train.py"]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "command");
}

#[tokio::test(flavor = "multi_thread")]
async fn loss_trends_are_read_from_the_metrics() {
    let cluster = Cluster::start().await;
    let mut runs = Vec::new();
    for (name, values) in [
        (
            "learning",
            (0..40).map(|s| json!(3.0 / (1.0 + s as f64))).collect::<Vec<_>>(),
        ),
        (
            "flat",
            (0..40).map(|s| json!(2.302 + (s % 2) as f64 * 0.001)).collect(),
        ),
        (
            "diverging",
            (0..40).map(|s| json!(0.5 * 1.1f64.powi(s))).collect(),
        ),
        (
            "nan",
            (0..40)
                .map(|s| {
                    if s == 25 {
                        json!("NaN")
                    } else {
                        json!(1.0 / (1.0 + s as f64))
                    }
                })
                .collect(),
        ),
    ] {
        let (status, run) = cluster.post("/runs", json!({"name": name})).await;
        assert_eq!(status, 201, "{run}");
        let run_id = run["id"].as_str().unwrap().to_string();
        let points: Vec<Value> = values
            .into_iter()
            .enumerate()
            .map(|(step, value)| json!({"key": "train/loss", "step": step, "wall_time": 1.0e9, "value": value}))
            .collect();
        let (status, body) = cluster
            .post(
                &format!("/runs/{run_id}/metrics"),
                json!({"batch_id": "b", "points": points}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        runs.push(run_id);
    }
    assert_eq!(cluster.findings(&runs[0]).await, Vec::<String>::new());
    assert_eq!(cluster.findings(&runs[1]).await, ["LOSS_FLAT"]);
    assert_eq!(cluster.findings(&runs[2]).await, ["LOSS_DIVERGING"]);
    let (_, diagnosis) = cluster.get(&format!("/runs/{}/diagnosis", runs[3])).await;
    assert_eq!(diagnosis["findings"][0]["kind"], "LOSS_NAN");
    assert_eq!(
        diagnosis["findings"][0]["summary"],
        "train/loss is NaN since step 25"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_past_its_time_limit_gets_sigterm_then_sigkill_and_fails_with_timeout() {
    let cluster = Cluster::start_with(|config| config.cancel_grace = Duration::from_millis(500)).await;
    let _agent = cluster.agent("box", 2, &[]);
    cluster.wait_for_nodes(1).await;
    // One checkpoints on SIGTERM and exits; the other ignores it. Neither
    // is retried automatically: the same limit would stop it again.
    let graceful = cluster
        .submit(json!({"name": "graceful", "time_limit_s": 1, "max_attempts": 3, "retry_cooldown_s": 0,
            "resources": {"gpu": 1},
            "command": sh("trap 'echo saving checkpoint; exit 143' TERM; echo started; while true; do sleep 0.05; done")}))
        .await;
    let stubborn = cluster
        .submit(
            json!({"name": "stubborn", "time_limit_s": 1, "resources": {"gpu": 1},
            "command": sh("trap 'echo ignoring TERM' TERM; echo started; while true; do sleep 0.05; done")}),
        )
        .await;

    let graceful = cluster.wait_for(&graceful.id, JobStatus::Failed).await;
    assert_eq!(graceful.failure_reason.map(|r| r.as_str()), Some("TIMEOUT"));
    assert_eq!(
        graceful.failure_detail.as_deref(),
        Some("reached its time limit of 1s: it was stopped with SIGTERM and exited with code 143")
    );
    assert_eq!(
        graceful.attempts.len(),
        1,
        "a timeout is not retried automatically"
    );
    assert_eq!(
        cluster.output(&graceful.id, "stdout").await,
        vec!["started", "saving checkpoint"]
    );
    let ran_ms = |job: &Job| {
        let attempt = &job.attempts[0];
        let ms = |time: &Option<String>| {
            humantime::parse_rfc3339(time.as_deref().unwrap())
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        };
        ms(&attempt.ended_at) - ms(&attempt.started_at)
    };
    assert!(
        ran_ms(&graceful) >= 1000,
        "stopped only at its limit: {}ms",
        ran_ms(&graceful)
    );

    let stubborn = cluster.wait_for(&stubborn.id, JobStatus::Failed).await;
    assert_eq!(stubborn.failure_reason.map(|r| r.as_str()), Some("TIMEOUT"));
    assert_eq!(
        stubborn.attempts[0].signal,
        Some(9),
        "SIGKILL after the grace period"
    );
    assert!(
        ran_ms(&stubborn) >= 1500,
        "SIGKILL only after the grace: {}ms",
        ran_ms(&stubborn)
    );
    assert!(
        cluster
            .output(&stubborn.id, "stdout")
            .await
            .contains(&"ignoring TERM".to_string()),
        "it saw SIGTERM first"
    );

    let explanation = explain(&cluster, &stubborn).await;
    assert_eq!(explanation["rule"], "time-limit", "{explanation}");
    assert_eq!(
        explanation["summary"],
        "The job ran until its time limit and was stopped: reached its time limit of 1s: \
         it did not stop within the grace period after SIGTERM and was killed with SIGKILL."
    );
}

/// Python that defines `log(step)`: one point of `train/loss` sent with the
/// job's own token, in a batch of its own.
pub(crate) const LOG_STEP_PY: &str = r#"
import json, os, time, urllib.request
def log(step):
    body = {"batch_id": f"a{os.environ['GPUCTL_ATTEMPT']}s{step}", "points": [{"key": "train/loss", "step": step, "wall_time": time.time(), "value": float(step)}]}
    request = urllib.request.Request(os.environ["GPUCTL_SERVER"] + "/api/v1/runs/" + os.environ["GPUCTL_RUN_ID"] + "/metrics",
        data=json.dumps(body).encode(), headers={"Authorization": "Bearer " + os.environ["GPUCTL_TOKEN"], "Content-Type": "application/json"})
    urllib.request.urlopen(request)
"#;

/// A job that logs a step every `every_s` seconds (one step after
/// `pause_at` waits `pause_s` more), then sleeps `then_s`.
fn stepping(every_s: f64, steps: u32, pause_at: u32, pause_s: f64, then_s: u32) -> Value {
    let code = format!(
        r#"{LOG_STEP_PY}
for step in range({steps}):
    log(step)
    time.sleep({every_s} + ({pause_s} if step == {pause_at} else 0))
print("waiting on all_reduce of rank 1", flush=True)
time.sleep({then_s})
"#
    );
    json!({"command": ["python3", "-c", code]})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_whose_steps_stop_is_reported_hung_once_with_its_last_lines_and_a_slow_one_never() {
    let cluster = Cluster::start_with(|config| {
        config.settings.hang_after_s = 2;
        config.settings.hang_factor = 5;
    })
    .await;
    let _agent = cluster.agent("box", 2, &["--telemetry-interval", "0.2"]);
    cluster.wait_for_nodes(1).await;
    // Hung: ten quick steps, then silence while its process lives (with a GPU).
    let mut hung = stepping(0.1, 10, 99, 0.0, 600);
    hung["name"] = json!("hung");
    hung["resources"] = json!({"gpu": 1});
    let hung = cluster.submit(hung).await;
    // Slow: a step every 0.8 s, one pause of 2.5 s (an evaluation), for ~13 s.
    let mut slow = stepping(0.8, 13, 6, 2.5, 0);
    slow["name"] = json!("slow");
    let slow = cluster.submit(slow).await;

    let events = eventually("JOB_HUNG for the hung job", Duration::from_secs(20), || async {
        let events = cluster.events(&format!("job_id={}&kind=JOB_HUNG", hung.id)).await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    let message = &events[0].message;
    assert!(
        message.starts_with("attempt 1 has logged no step for ")
            && message.contains("after step 9 (its usual wait"),
        "{message}"
    );
    let gpu = cluster.job(&hung.id).await.attempts[0].gpus[0];
    assert!(
        message.contains(&format!("while its processes still run (GPU {gpu} averaged ")),
        "what its GPU did since its last step: {message}"
    );
    assert!(
        message.ends_with("its last output:\nwaiting on all_reduce of rank 1"),
        "{message}"
    );
    assert_eq!(events[0].run_id.as_deref(), Some(hung.run_id.as_str()));

    cluster.wait_for(&slow.id, JobStatus::Succeeded).await;
    let slow_events = cluster.events(&format!("job_id={}&kind=JOB_HUNG", slow.id)).await;
    assert!(slow_events.is_empty(), "a slow job is not hung: {slow_events:?}");
    // Once per stall: still one for the hung job, which still runs.
    let events = cluster.events(&format!("job_id={}&kind=JOB_HUNG", hung.id)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(cluster.job(&hung.id).await.status, JobStatus::Running);
    let (status, _) = cluster
        .post(&format!("/jobs/{}/cancel", hung.id), json!({"confirm": true}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_job_with_on_hang_restart_is_stopped_and_resumes_from_its_checkpoint() {
    let cluster = Cluster::start_with(|config| {
        config.settings.hang_after_s = 2;
        config.settings.hang_factor = 5;
    })
    .await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    // Restarting spends an attempt: a job with one is refused.
    let (status, body) = cluster
        .post(
            "/jobs",
            json!({"name": "once", "command": ["true"], "on_hang": "restart"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "on_hang", "{body}");

    // Attempt 1 logs steps 0-9, checkpoints at 5 and hangs; attempt 2
    // resumes at 6 and finishes.
    let code = LOG_STEP_PY.to_string()
        + r#"
start = int(os.environ["GPUCTL_RESUME_STEP"] or -1) + 1 if "GPUCTL_RESUME_STEP" in os.environ else 0
for step in range(start, 10):
    log(step)
    if step == 5 and start == 0:
        open(os.path.join(os.environ["GPUCTL_JOB_DIR"], "step_5.pt"), "w").write("weights")
    time.sleep(0.1)
if start == 0:
    print("stuck in all_reduce", flush=True)
    time.sleep(600)
"#;
    let job = restarted_after_hanging(
        &cluster,
        json!({"name": "restarts", "command": ["python3", "-c", code]}),
    )
    .await;
    assert_eq!(job.attempts[1].resume_step, Some(5));
    let events = cluster.events(&format!("job_id={}&kind=JOB_HUNG", job.id)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0]
            .message
            .contains("stopping it to retry from its last checkpoint (on_hang = restart)"),
        "{}",
        events[0].message
    );
    let (status, curve) = cluster
        .get(&format!(
            "/runs/{}/metrics?key=train/loss&max_points=1000&format=columns",
            job.run_id
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(curve["steps"], json!((0..10).collect::<Vec<i64>>()), "one curve");
}

/// Submits `spec` with `on_hang = "restart"` and two attempts; returns the
/// job once it succeeded, its first attempt having failed HUNG.
pub(crate) async fn restarted_after_hanging(cluster: &Cluster, mut spec: Value) -> Job {
    spec["on_hang"] = json!("restart");
    spec["max_attempts"] = json!(2);
    spec["retry_cooldown_s"] = json!(0);
    let job = cluster.submit(spec).await;
    let job = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let first = &job.attempts[0];
    assert_eq!(
        (first.status, first.failure_reason.map(|r| r.as_str())),
        (JobStatus::Failed, Some("HUNG")),
        "{first:?}"
    );
    job
}
