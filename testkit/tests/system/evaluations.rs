//! Evaluations run as real EVALUATE jobs on a real agent: the result file
//! becomes eval/ metrics of the evaluated run at the checkpoint's step; a
//! bad result fails the job with EVALUATION_RESULT_INVALID saying what was
//! wrong; a checkpoint path two runs wrote is refused with 409.

use gpuplane_api::job::{Job, JobStatus};
use gpuplane_testkit::cluster::{Cluster, sh};
use serde_json::{Value, json};

/// A finished training run that wrote `ckpt/step_100.pt` and `ckpt/step_200.pt`
/// into `dir` on node `node`.
async fn train(cluster: &Cluster, dir: &std::path::Path, node: &str) -> Job {
    let job = cluster
        .submit(json!({
            "name": "train", "working_dir": dir, "watch_dirs": ["ckpt"],
            "node_selector": {"gpuplane.node": node},
            "command": sh("mkdir -p ckpt && echo w1 > ckpt/step_100.pt && echo w2 > ckpt/step_200.pt"),
        }))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    assert_eq!(job.attempts[0].node, node);
    job
}

fn checkpoint(dir: &std::path::Path, name: &str) -> String {
    dir.join("ckpt").join(name).display().to_string()
}

/// Queues an evaluation; returns the answer's status and body.
async fn evaluate(cluster: &Cluster, run_id: &str, path: &str, script: &str) -> (u16, Value) {
    cluster
        .post(
            "/evaluations",
            json!({"run_id": run_id, "checkpoint": path, "command": sh(script)}),
        )
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_evaluation_records_its_metrics_on_the_run_at_the_checkpoint_step() {
    let cluster = Cluster::start().await;
    let _box = cluster.agent("box", 1, &[]);
    let _other = cluster.agent("other", 1, &[]);
    cluster.wait_for_nodes(2).await;
    // On "other", which the scheduler would not pick first by name.
    let dir = cluster.workdir("train");
    let trained = train(&cluster, &dir, "other").await;

    // The script reads the checkpoint it was given and writes its result.
    let path = checkpoint(&dir, "step_200.pt");
    let script = r#"test "$(cat "$GPUCTL_CHECKPOINT")" = w2 || exit 9
printf '{"metrics": {"accuracy": 0.91, "loss": "NaN"}}' > "$GPUCTL_EVAL_OUTPUT""#;
    let (status, created) = evaluate(&cluster, &trained.run_id, &path, script).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["step"], 200);
    assert_eq!(created["checkpoint"], path.as_str());
    let job_id = created["job_id"].as_str().unwrap();

    let job = cluster.wait_for(job_id, JobStatus::Succeeded).await;
    assert_eq!(job.kind.as_str(), "EVALUATE");
    assert_eq!(job.attempts[0].node, "other", "the checkpoint's node runs it");
    let (_, shown) = cluster.get(&format!("/evaluations/{job_id}")).await;
    assert_eq!(shown["status"], "SUCCEEDED");
    assert_eq!(shown["metrics"], json!({"accuracy": 0.91, "loss": "NaN"}));

    // The metrics are the evaluated run's, under eval/, at the checkpoint's step.
    let (_, accuracy) = cluster
        .get(&format!("/runs/{}/metrics?key=eval/accuracy", trained.run_id))
        .await;
    assert_eq!(accuracy["points"][0]["step"], 200);
    assert_eq!(accuracy["points"][0]["value"], 0.91);
    let (_, run) = cluster.get(&format!("/runs/{}", trained.run_id)).await;
    assert_eq!(run["latest"]["eval/loss"]["value"], "NaN");
    assert_eq!(run["latest"]["eval/loss"]["step"], 200);

    // The earlier checkpoint evaluates better: with eval/accuracy as the
    // primary metric it is the one marked best, though not the newest.
    let earlier = checkpoint(&dir, "step_100.pt");
    let script = r#"printf '{"metrics": {"accuracy": 0.95}}' > "$GPUCTL_EVAL_OUTPUT""#;
    let (_, second) = evaluate(&cluster, &trained.run_id, &earlier, script).await;
    cluster
        .wait_for(second["job_id"].as_str().unwrap(), JobStatus::Succeeded)
        .await;
    let (status, run) = cluster
        .post(
            &format!("/runs/{}/primary-metric", trained.run_id),
            json!({"key": "eval/accuracy", "goal": "max"}),
        )
        .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["primary_metric"]["best"], json!({"step": 100, "value": 0.95}));
    assert_eq!(run["primary_metric"]["best_checkpoint"], earlier.as_str());
    let (_, checkpoints) = cluster
        .get(&format!("/runs/{}/checkpoints", trained.run_id))
        .await;
    let marks: Vec<(i64, bool, Value)> = checkpoints["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["step"].as_i64().unwrap(),
                c["best"].as_bool().unwrap(),
                c["primary_value"].clone(),
            )
        })
        .collect();
    assert_eq!(marks, [(200, false, json!(0.91)), (100, true, json!(0.95))]);

    let (_, listed) = cluster
        .get(&format!("/evaluations?run_id={}", trained.run_id))
        .await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);
    assert_eq!(listed["items"][1]["job_id"], job_id, "newest first");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_results_fail_with_evaluation_result_invalid_saying_exactly_what_was_wrong() {
    let cluster = Cluster::start().await;
    let agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let dir = cluster.workdir("train");
    let trained = train(&cluster, &dir, "box").await;
    let path = checkpoint(&dir, "step_100.pt");

    let cases = [
        (
            "echo evaluated",
            "it wrote nothing to {file} (GPUCTL_EVAL_OUTPUT)",
        ),
        (
            "echo 'accuracy: 0.9' > \"$GPUCTL_EVAL_OUTPUT\"",
            "{file} is not JSON: expected value at line 1 column 1",
        ),
        (
            r#"echo '{"metrics": {"accuracy": "high", "f1": 0.5}}' > "$GPUCTL_EVAL_OUTPUT""#,
            "in {file}, \"accuracy\" is a string (\"high\"); metrics must map names to numbers",
        ),
        (
            r#"echo '{"accuracy": 0.9}' > "$GPUCTL_EVAL_OUTPUT""#,
            "{file} has no \"metrics\" key (its keys: accuracy)",
        ),
    ];
    for (script, expected) in cases {
        let (status, created) = evaluate(&cluster, &trained.run_id, &path, script).await;
        assert_eq!(status, 201, "{created}");
        let job_id = created["job_id"].as_str().unwrap();
        let job = cluster.wait_for(job_id, JobStatus::Failed).await;
        let file = agent
            .jobs_dir
            .join(job_id)
            .join("attempt-1/eval_result.json")
            .display()
            .to_string();
        let expected = expected.replace("{file}", &file);
        let detail = job.failure_detail.clone().unwrap();
        assert_eq!(
            job.failure_reason.map(|r| r.as_str()),
            Some("EVALUATION_RESULT_INVALID"),
            "{detail}"
        );
        assert!(detail.starts_with(&expected), "{detail}\nexpected: {expected}");
        assert_eq!(job.attempts.len(), 1, "an invalid result is not retried");

        let (_, explanation) = cluster.get(&format!("/runs/{}/failure", job.run_id)).await;
        assert_eq!(explanation["rule"], "evaluation-invalid");
        assert!(
            explanation["summary"].as_str().unwrap().contains(&expected),
            "{explanation}"
        );
    }
    // Nothing partial reached the run.
    let (_, run) = cluster.get(&format!("/runs/{}", trained.run_id)).await;
    assert!(
        run["latest"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("eval/")),
        "{run}"
    );

    // A script that fails is an ordinary failure, not an invalid result.
    let (_, created) = evaluate(&cluster, &trained.run_id, &path, "exit 4").await;
    let job = cluster
        .wait_for(created["job_id"].as_str().unwrap(), JobStatus::Failed)
        .await;
    assert_eq!(job.failure_reason.map(|r| r.as_str()), Some("EXIT_CODE"));
}

#[tokio::test(flavor = "multi_thread")]
async fn shared_unknown_and_foreign_checkpoints_are_refused() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let shared = cluster.workdir("shared");
    let first = train(&cluster, &shared, "box").await;
    let second = train(&cluster, &shared, "box").await;
    let path = checkpoint(&shared, "step_100.pt");

    let (status, body) = evaluate(&cluster, &first.run_id, &path, "true").await;
    assert_eq!(status, 409, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&first.run_id) && message.contains(&second.run_id),
        "{message}"
    );
    assert!(message.contains("run-scoped directories"), "{message}");

    let (status, body) = evaluate(&cluster, &first.run_id, "/elsewhere/step_1.pt", "true").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "checkpoint");
    assert!(
        body["error"]["details"][0]["message"]
            .as_str()
            .unwrap()
            .contains("step_200.pt"),
        "it names the checkpoints the run has: {body}"
    );

    let (status, body) = evaluate(&cluster, "run_nope", &path, "true").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "run_id");

    let own = cluster.workdir("own");
    let alone = train(&cluster, &own, "box").await;
    let (status, body) = cluster
        .post(
            "/evaluations",
            json!({"run_id": alone.run_id, "checkpoint": checkpoint(&own, "step_100.pt"), "command": []}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"][0]["field"], "command");
    let (status, body) = cluster.get("/evaluations/job_nope").await;
    assert_eq!(status, 404, "{body}");
}
