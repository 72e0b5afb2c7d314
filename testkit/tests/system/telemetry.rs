//! GPU and process telemetry from a real agent with simulated GPUs, which
//! follow the CPU of the job holding them: a job that computes reads busy,
//! one that sleeps reads idle. The run's System data and charts show the
//! job's own GPUs over its span; LOW_GPU_UTILIZATION judges the average over
//! a window; old telemetry is downsampled, then deleted.

use gpuplane_api::job::JobStatus;
use gpuplane_server::nodes::telemetry::{Retention, maintain};
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::sql;
use gpuplane_testkit::{WAIT, eventually};
use serde_json::{Value, json};
use std::time::Duration;

/// The values of one series of a run's System answer.
fn values(system: &Value, field: &str, gpu: Option<u32>) -> Vec<f64> {
    let series = system["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["field"] == field && s["gpu"] == json!(gpu))
        .unwrap_or_else(|| panic!("no {field} series for GPU {gpu:?}: {system}"));
    series["series"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_f64().unwrap())
        .collect()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_and_an_idle_job_are_sampled_charted_judged_by_their_average_and_aged_out() {
    let cluster = Cluster::start_with(|config| config.settings.gpu_idle_window_s = 3).await;
    let _agent = cluster.agent("box", 2, &["--telemetry-interval", "0.25"]);
    cluster.wait_for_nodes(1).await;
    let compute = "import time\nend = time.time() + 6\nwhile time.time() < end: pass";
    let busy = cluster
        .submit(json!({"name": "busy", "resources": {"gpu": 1}, "command": ["python3", "-c", compute]}))
        .await;
    let idle = cluster
        .submit(json!({"name": "idle", "resources": {"gpu": 1}, "command": sh("sleep 60")}))
        .await;
    let idle = cluster.wait_for(&idle.id, JobStatus::Running).await;

    // The sleeping job's GPU averages nothing over the 3 s window; the
    // computing one's does not get the finding while it runs.
    eventually("LOW_GPU_UTILIZATION for the sleeping job", WAIT, || async {
        cluster
            .findings(&idle.run_id)
            .await
            .contains(&"LOW_GPU_UTILIZATION".to_string())
            .then_some(())
    })
    .await;
    let running = cluster.job(&busy.id).await;
    if running.status == JobStatus::Running {
        assert!(
            !cluster
                .findings(&running.run_id)
                .await
                .contains(&"LOW_GPU_UTILIZATION".to_string())
        );
    }
    let (_, diagnosis) = cluster.get(&format!("/runs/{}/diagnosis", idle.run_id)).await;
    let summary = diagnosis["findings"][0]["summary"].as_str().unwrap();
    assert!(summary.contains("averaged 0% over 3s"), "{summary}");

    let busy = cluster.wait_for(&busy.id, JobStatus::Succeeded).await;
    let busy_gpu = busy.attempts[0].gpus[0];
    let (status, system) = cluster.get(&format!("/runs/{}/system", busy.run_id)).await;
    assert_eq!(status, 200, "{system}");
    assert_eq!(system["attempts"][0]["node"], "box");
    assert_eq!(system["attempts"][0]["gpus"], json!([busy_gpu]));
    // Only the job's own GPU, over its own span: mostly busy.
    let other_gpu = 1 - busy_gpu;
    assert!(
        !system["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["gpu"] == json!(other_gpu)),
        "{system}"
    );
    // A simulated GPU reads the CPU its job gets: a whole core on a quiet
    // machine, less when other work shares the cores (as under CI's load),
    // and never nothing while the job computes.
    let utilization = values(&system, "utilization_percent", Some(busy_gpu));
    assert!(utilization.len() >= 8, "{utilization:?}");
    let cpu = values(&system, "cpu_percent", None);
    assert!(
        utilization.iter().any(|&percent| percent > 50.0) && mean(&utilization) > 10.0,
        "{utilization:?}"
    );
    assert!(cpu.iter().any(|&percent| percent > 50.0), "{cpu:?}");
    assert!(mean(&values(&system, "memory_rss_mib", None)) > 1.0);
    // Simulated power and clocks rise with the load.
    assert!(
        values(&system, "power_w", Some(busy_gpu))
            .iter()
            .any(|&w| w > 200.0)
    );
    assert!(
        values(&system, "sm_clock_mhz", Some(busy_gpu))
            .iter()
            .any(|&mhz| mhz > 1500.0)
    );

    let svg = cluster
        .get_text(&format!(
            "/runs/{}/system.svg?field=utilization_percent",
            busy.run_id
        ))
        .await;
    assert!(
        svg.contains("<svg") && svg.contains("GPU utilisation") && svg.contains(&format!("GPU {busy_gpu}")),
        "{svg}"
    );
    let (status, body) = cluster
        .get(&format!("/runs/{}/system?field=fan", busy.run_id))
        .await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (422, Some("field"))
    );

    // Two days on, the samples are one mean a minute; sixty days on, gone.
    let db = &cluster.server.state.db;
    let now = gpuplane_server::store::time::now_ms();
    let day = 24 * 3600 * 1000;
    let retention = Retention {
        full_resolution: Duration::from_secs(24 * 3600),
        keep: Duration::from_secs(30 * 24 * 3600),
    };
    let done = maintain(db, now + 2 * day, retention).await.unwrap();
    assert!(done.downsampled_points >= utilization.len(), "{done:?}");
    let (_, aged) = cluster.get(&format!("/runs/{}/system", busy.run_id)).await;
    // A minute's mean is over all the GPU's samples in it, the idle ones
    // from before the job started and after it ended too: 6 busy seconds
    // share a minute with at most the seconds since the agent started
    // (more than the job's own on a loaded machine, as on CI under the
    // PostgreSQL run) and until now. Idle reads 0 %: a fifth is the load.
    let minutes = values(&aged, "utilization_percent", Some(busy_gpu));
    assert!(minutes.len() <= 2, "{minutes:?}");
    assert!(minutes.iter().any(|&minute| minute > 20.0), "{minutes:?}");
    maintain(db, now + 60 * day, retention).await.unwrap();
    let (_, gone) = cluster.get(&format!("/runs/{}/system", busy.run_id)).await;
    assert!(
        values(&gone, "utilization_percent", Some(busy_gpu)).is_empty(),
        "{gone}"
    );
    // The node's batch ids (kept against resends) went with them.
    let node_batches: i64 = sql!(db, |pool| {
        sqlx::query_scalar(
            "SELECT count(*) FROM metric_batches WHERE run_id IN (SELECT node_id FROM telemetry_series)",
        )
        .fetch_one(pool)
        .await
    })
    .unwrap();
    assert_eq!(node_batches, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_xid_on_a_jobs_gpu_is_a_critical_event_that_explains_its_failure() {
    let cluster = Cluster::start().await;
    let agent = cluster.agent("box", 1, &["--telemetry-interval", "0.25"]);
    cluster.wait_for_nodes(1).await;
    let script = "sleep 3; echo 'RuntimeError: CUDA error: unspecified launch failure' >&2; exit 1";
    let job = cluster
        .submit(json!({"name": "xid", "resources": {"gpu": 1}, "command": sh(script)}))
        .await;
    let job = cluster.wait_for(&job.id, JobStatus::Running).await;
    // What NVML would report: an Xid on the job's GPU, a corrected ECC error
    // on a GPU no job holds.
    std::fs::write(
        agent.jobs_dir.join("simulated-gpu-faults"),
        "0 xid 79\n7 ecc_single_bit\n",
    )
    .unwrap();
    let job = cluster.wait_for(&job.id, JobStatus::Failed).await;

    let on_job = cluster.events(&format!("job_id={}&kind=GPU_ERROR", job.id)).await;
    assert_eq!(on_job.len(), 1, "{on_job:?}");
    assert_eq!(on_job[0].severity.as_str(), "critical");
    assert_eq!(on_job[0].run_id.as_deref(), Some(job.run_id.as_str()));
    assert!(
        on_job[0]
            .message
            .contains("GPU 0 on box reported Xid 79 (the GPU has fallen off the bus"),
        "{on_job:?}"
    );
    let all = cluster.events("kind=GPU_ERROR").await;
    let ecc = all
        .iter()
        .find(|e| e.message.contains("GPU 7"))
        .expect("the ECC event");
    assert_eq!((ecc.severity.as_str(), ecc.job_id.as_deref()), ("warning", None));

    // The Xid explains the failure, before the CUDA error in the log does.
    let (status, failure) = cluster.get(&format!("/runs/{}/failure", job.run_id)).await;
    assert_eq!(status, 200, "{failure}");
    assert_eq!(failure["rule"], "gpu-hardware-error", "{failure}");
    assert!(
        failure["summary"].as_str().unwrap().contains("Xid 79"),
        "{failure}"
    );
    assert!(
        failure["actions"][1].as_str().unwrap().contains("drain"),
        "{failure}"
    );
}
