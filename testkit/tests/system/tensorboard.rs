//! TensorBoard files written into a job's watch dir reach the run as
//! metrics (both scalar forms, NaN and ±Inf kept) and hyperparameters (the
//! `hparams` plugin) as its config, checkpoints are recorded
//! (a path two runs wrote is shared), and an agent killed while a file
//! grows resends without storing a point twice.

use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::{Cluster, sh};
use serde_json::json;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/{name}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../tfevents")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn event_files_in_watch_dirs_become_metrics_with_non_finite_values_kept() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("tb");
    let script = format!(
        "mkdir -p tb/simple tb/nested/tensor && cp {} tb/simple/ && sleep 0.3 && cp {} tb/nested/tensor/",
        fixture("tb-simple/events.out.tfevents.simple"),
        fixture("tb-tensor/events.out.tfevents.tensor")
    );
    let simple = cluster
        .submit(
            json!({"name": "tb", "working_dir": work, "watch_dirs": ["tb/simple"], "command": sh(&script)}),
        )
        .await;
    let done = cluster.wait_for(&simple.id, JobStatus::Succeeded).await;
    let loss = cluster.series(&done.run_id, "train/loss").await;
    assert_eq!(loss.len(), 50, "only the watched dir");
    assert_eq!(loss[13].1, "NaN");
    assert_eq!(loss[14].1, "Infinity");
    assert_eq!(loss[15].1, "-Infinity");
    assert_eq!(cluster.series(&done.run_id, "eval/accuracy").await.len(), 50);

    // The tensor form, found in a subdirectory of the watch dir.
    let work = cluster.workdir("tb2");
    let tensor = cluster
        .submit(json!({"name": "tb2", "working_dir": work, "watch_dirs": ["tb"], "command": sh(&script)}))
        .await;
    let done = cluster.wait_for(&tensor.id, JobStatus::Succeeded).await;
    let loss = cluster.series(&done.run_id, "train/loss").await;
    assert_eq!(loss.len(), 100, "both files: 50 simple + 50 tensor");
    let (_, run) = cluster.get(&format!("/runs/{}", done.run_id)).await;
    assert_eq!(run["latest"]["eval/accuracy"]["step"], 49);
    let events = cluster
        .events(&format!("run_id={}&kind=LOSS_NAN", done.run_id))
        .await;
    assert_eq!(events.len(), 1, "LOSS_NAN once per run and key");
    assert!(
        events[0].message.starts_with("train/loss became NaN at step 13"),
        "{}",
        events[0].message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tensorboard_hyperparameters_become_the_runs_config_beside_the_sdks() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("hparams");
    let script = format!(
        "mkdir -p tb && cp {} tb/",
        fixture("tb-hparams/events.out.tfevents.hparams")
    );
    let job = cluster
        .submit(json!({
            "name": "hparams", "working_dir": work, "watch_dirs": ["tb"], "command": sh(&script),
            "tags": ["tb"],
        }))
        .await;
    let done = cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let (_, run) = cluster.get(&format!("/runs/{}", done.run_id)).await;
    assert_eq!(
        run["config"],
        json!({"amp": true, "depth": 12, "lr": 0.001, "optimizer": "adam"}),
        "{run}"
    );
    assert_eq!(run["tags"], json!(["tb"]));
    assert_eq!(cluster.series(&done.run_id, "eval/accuracy").await.len(), 1);
    let (_, found) = cluster
        .get("/runs?config.optimizer=adam&config.depth=%3E%3D12&tag=tb")
        .await;
    assert_eq!(found["items"][0]["id"], done.run_id.as_str(), "{found}");
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_are_recorded_with_their_step_and_shared_paths_are_marked() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let shared = cluster.workdir("shared-ckpt");
    let own = cluster.workdir("own-ckpt");
    let write = |dir: &std::path::Path, name: &str| {
        json!({
            "name": name, "working_dir": dir, "watch_dirs": ["."],
            "command": sh("mkdir -p run && head -c 2048 /dev/zero > run/step_1200.pt && echo done"),
        })
    };
    let first = cluster.submit(write(&shared, "first")).await;
    let first = cluster.wait_for(&first.id, JobStatus::Succeeded).await;
    let second = cluster.submit(write(&shared, "second")).await;
    let second = cluster.wait_for(&second.id, JobStatus::Succeeded).await;
    let alone = cluster.submit(write(&own, "alone")).await;
    let alone = cluster.wait_for(&alone.id, JobStatus::Succeeded).await;

    let (_, listed) = cluster.get(&format!("/runs/{}/checkpoints", first.run_id)).await;
    let checkpoint = &listed["items"][0];
    assert_eq!(
        checkpoint["path"],
        shared.join("run/step_1200.pt").display().to_string()
    );
    assert_eq!(checkpoint["step"], 1200);
    assert_eq!(checkpoint["size"], 2048);
    assert_eq!(checkpoint["shared_with"], json!([second.run_id]));
    let (_, listed) = cluster.get(&format!("/runs/{}/checkpoints", alone.run_id)).await;
    assert_eq!(listed["items"][0]["shared_with"], json!([]));
    let no_metrics = cluster
        .events(&format!("job_id={}&kind=NO_METRICS", alone.id))
        .await;
    assert_eq!(no_metrics.len(), 1);
    assert!(
        no_metrics[0]
            .message
            .contains("no TensorBoard event file appeared"),
        "{}",
        no_metrics[0].message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_while_a_file_grows_sends_every_point_once() {
    let cluster = Cluster::start_with(|config| config.lost_grace = std::time::Duration::from_secs(30)).await;
    let mut agent = cluster.agent("box", 1, &[]);
    cluster.wait_for_nodes(1).await;
    let work = cluster.workdir("grow");
    let file = fixture("tb-simple/events.out.tfevents.simple");
    let script = format!(
        "mkdir -p tb; head -c 2600 {file} > tb/events.out.tfevents.grow; while [ ! -e go ]; do sleep 0.05; done; tail -c +2601 {file} >> tb/events.out.tfevents.grow"
    );
    let job = cluster
        .submit(json!({"name": "grow", "working_dir": work, "watch_dirs": ["tb"], "command": sh(&script)}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Running).await;
    gpuplane_testkit::eventually("the first half's points", gpuplane_testkit::WAIT, || async {
        let points = cluster.series(&job.run_id, "train/loss").await.len();
        (points > 0).then_some(())
    })
    .await;
    agent.kill();
    std::fs::write(work.join("go"), "").unwrap();
    let _again = cluster.agent_in("box", 1, &agent.jobs_dir.clone(), &[]);
    cluster.wait_for(&job.id, JobStatus::Succeeded).await;
    let loss = cluster.series(&job.run_id, "train/loss").await;
    let steps: Vec<i64> = loss.iter().map(|(step, _)| *step).collect();
    assert_eq!(
        steps,
        (0..50).collect::<Vec<_>>(),
        "every point once; agent log:\n{}",
        cluster.agent_log("box")
    );
}
