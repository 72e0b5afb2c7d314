//! Job arrays with the real agent and the real `gpuctl`: a task per index,
//! each seeing its index, never more running than the `%` limit, the
//! waiting ones saying why, and an array cancelled from the terminal.

use gpuplane_api::job::{Job, JobStatus};
use gpuplane_testkit::cluster::Cluster;
use gpuplane_testkit::{WAIT, gpuctl};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn array_tasks_see_their_index_and_keep_to_the_limit() {
    let cluster = Cluster::start().await;
    let _agent = cluster.agent("box", 4, &[]);
    cluster.wait_for_nodes(1).await;
    let home = tempfile::tempdir().unwrap();
    let gpuctl = |args: &[&str]| gpuctl::succeeds(home.path(), (&cluster.server.url, &cluster.token), args);

    // Six tasks of one GPU each on a node of four, at most two at once.
    let submitted = gpuctl(&[
        "job",
        "submit",
        "--json",
        "--name",
        "shards",
        "--gpus",
        "1",
        "--array",
        "0-5%2",
        "--",
        "sh",
        "-c",
        "echo \"task $GPUCTL_ARRAY_INDEX of $GPUCTL_ARRAY_ID: $1\"; sleep 0.5",
        "sh",
        "--shard=${GPUCTL_ARRAY_INDEX}",
    ]);
    let first: Job = serde_json::from_value(gpuctl::json(&submitted)).unwrap();
    let array = first.array.clone().expect("the first task names its array");
    assert_eq!((array.index, array.tasks, array.limit), (0, 6, Some(2)));
    let mut most_at_once = 0;
    let mut waiting_reason = None;
    let started = std::time::Instant::now();
    let tasks = loop {
        let (_, page) = cluster.get(&format!("/jobs?array={}&limit=50", array.id)).await;
        let tasks: Vec<Job> = serde_json::from_value(page["items"].clone()).unwrap();
        let active = tasks.iter().filter(|t| t.status.is_active()).count();
        most_at_once = most_at_once.max(active);
        if waiting_reason.is_none() {
            waiting_reason = tasks.iter().find_map(|t| {
                t.queued_reason
                    .clone()
                    .filter(|reason| reason.starts_with(&format!("array {}", array.id)))
            });
        }
        if tasks.iter().all(|t| t.status == JobStatus::Succeeded) {
            break tasks;
        }
        assert!(
            started.elapsed() < WAIT * 2,
            "{tasks:#?}\n{}",
            cluster.agent_logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(most_at_once <= 2, "at most 2 at once, saw {most_at_once}");
    assert_eq!(
        waiting_reason.as_deref(),
        Some(format!("array {}: 2 of its tasks run, at most 2 at once (%2)", array.id).as_str())
    );
    for task in &tasks {
        let index = task.array.as_ref().unwrap().index;
        assert_eq!(
            cluster.output(&task.id, "stdout").await,
            [format!("task {index} of {}: --shard={index}", array.id)]
        );
    }
    let listed = gpuctl(&["job", "list", "--array", &array.id]);
    let text = gpuctl::stdout(&listed);
    for index in 0..6 {
        assert!(text.contains(&format!("shards[{index}]")), "{text}");
    }
    let shown = gpuctl::stdout(&gpuctl(&["job", "show", &array.id]));
    assert!(
        shown.contains("tasks      6 (0-5%2, at most 2 at once)") && shown.contains("6 SUCCEEDED"),
        "{shown}"
    );

    // A long array, cancelled from the terminal: the running task is
    // stopped and the queued ones never start.
    let submitted = gpuctl(&[
        "job", "submit", "--json", "--name", "long", "--array", "1,3,5%1", "--", "sleep", "300",
    ]);
    let long: Job = serde_json::from_value(gpuctl::json(&submitted)).unwrap();
    let long_array = long.array.clone().unwrap();
    cluster.wait_for(&long.id, JobStatus::Running).await;
    let cancelled = gpuctl(&["job", "cancel", &long_array.id, "--confirm", "--json"]);
    let cancelled: Value = gpuctl::json(&cancelled);
    assert_eq!(cancelled["cancelled"], 3, "{cancelled}");
    cluster.wait_for(&long.id, JobStatus::Cancelled).await;
    let (_, array) = cluster.get(&format!("/arrays/{}", long_array.id)).await;
    assert_eq!(array["states"], json!({"CANCELLED": 3}), "{array}");
}
