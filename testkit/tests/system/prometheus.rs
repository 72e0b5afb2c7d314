//! Debian's Prometheus scraping a real server (with a `metrics` token on
//! its address, and without one on `metrics_bind`) and a real agent's
//! `--metrics-addr`, then answering PromQL about jobs that ran: the GPU a
//! computing job held, under dcgm-exporter's name and labels; the jobs
//! started and ended; the scheduling passes, dispatch latency and requests;
//! and every query of the shipped Grafana dashboard.

use gpuplane_api::job::JobStatus;
use gpuplane_testkit::cluster::{Cluster, sh};
use gpuplane_testkit::free_port;
use gpuplane_testkit::prometheus::{Prometheus, Target};
use serde_json::json;
use std::time::Duration;

const SCRAPED: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_the_server_and_the_agent_and_answers_promql_about_jobs_that_ran() {
    let cluster = Cluster::start_with(|config| {
        config.settings.metrics_bind = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let (status, created) = cluster
        .post("/tokens", json!({"name": "prometheus", "scope": "metrics"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let agent_port = free_port();
    let agent_address = format!("127.0.0.1:{agent_port}");
    let _agent = cluster.agent(
        "box",
        1,
        &["--telemetry-interval", "0.25", "--metrics-addr", &agent_address],
    );
    cluster.wait_for_nodes(1).await;
    let server_address = cluster.server.url.trim_start_matches("http://").to_string();
    let open_address = cluster
        .server
        .state
        .config
        .settings
        .metrics_bind
        .unwrap()
        .to_string();
    let prometheus = Prometheus::start(&[
        Target {
            job: "gpuplane-server".into(),
            address: server_address,
            token: Some(created["secret"].as_str().unwrap().to_string()),
        },
        Target {
            job: "gpuplane-server-open".into(),
            address: open_address,
            token: None,
        },
        Target {
            job: "gpuplane-agent".into(),
            address: agent_address,
            token: None,
        },
    ])
    .await;
    for job in ["gpuplane-server", "gpuplane-server-open", "gpuplane-agent"] {
        prometheus
            .wait_for(&format!("up{{job=\"{job}\"}}"), SCRAPED, |up| up == 1.0)
            .await;
    }

    // A job that computes: its simulated GPU follows its CPU and reads busy.
    let compute = "import time\nend = time.time() + 8\nwhile time.time() < end: pass";
    let busy = cluster
        .submit(json!({"name": "busy", "resources": {"gpu": 1}, "command": ["python3", "-c", compute]}))
        .await;
    let busy_util = format!(
        "DCGM_FI_DEV_GPU_UTIL{{job=\"gpuplane-agent\",hpc_job=\"{}\",project=\"default\"}}",
        busy.id
    );
    prometheus.wait_for(&busy_util, SCRAPED, |util| util > 50.0).await;
    let labels = prometheus.query(&busy_util).await;
    let metric = &labels[0]["metric"];
    assert_eq!(metric["gpu"], "0", "{metric}");
    assert_eq!(metric["UUID"], "GPU-SIMULATED-box-0", "{metric}");
    assert_eq!(metric["modelName"], "Simulated GPU", "{metric}");
    prometheus
        .wait_for(
            "gpuplane_jobs{job=\"gpuplane-server\",project=\"default\",state=\"RUNNING\"}",
            SCRAPED,
            |n| n == 1.0,
        )
        .await;
    prometheus
        .wait_for(
            "gpuplane_agent_jobs_running{job=\"gpuplane-agent\"}",
            SCRAPED,
            |n| n == 1.0,
        )
        .await;
    cluster.wait_for(&busy.id, JobStatus::Succeeded).await;
    let failing = cluster
        .submit(json!({"name": "failing", "command": sh("exit 3")}))
        .await;
    cluster.wait_for(&failing.id, JobStatus::Failed).await;

    // What the database holds, through both of the server's addresses.
    for job in ["gpuplane-server", "gpuplane-server-open"] {
        prometheus
            .wait_for(
                &format!("gpuplane_jobs_ended{{job=\"{job}\",state=\"SUCCEEDED\"}}"),
                SCRAPED,
                |n| n == 1.0,
            )
            .await;
        prometheus
            .wait_for(
                &format!("gpuplane_jobs_ended{{job=\"{job}\",state=\"FAILED\",reason=\"EXIT_CODE\"}}"),
                SCRAPED,
                |n| n == 1.0,
            )
            .await;
        prometheus
            .wait_for(
                &format!("gpuplane_nodes{{job=\"{job}\",state=\"ONLINE\"}}"),
                SCRAPED,
                |n| n == 1.0,
            )
            .await;
        prometheus
            .wait_for(
                &format!("gpuplane_store_size_bytes{{job=\"{job}\"}}"),
                SCRAPED,
                |bytes| bytes > 0.0,
            )
            .await;
    }
    // What the server counted and timed as it worked.
    let server = "job=\"gpuplane-server\"";
    prometheus
        .wait_for(
            &format!("gpuplane_jobs_started_total{{{server}}}"),
            SCRAPED,
            |n| n == 2.0,
        )
        .await;
    prometheus
        .wait_for(
            &format!("gpuplane_dispatch_latency_seconds_count{{{server}}}"),
            SCRAPED,
            |n| n == 2.0,
        )
        .await;
    prometheus
        .wait_for(
            &format!("gpuplane_scheduling_pass_duration_seconds_count{{{server}}}"),
            SCRAPED,
            |n| n >= 2.0,
        )
        .await;
    prometheus
        .wait_for(
            &format!("gpuplane_http_request_duration_seconds_count{{{server},route=\"/api/v1/jobs\",method=\"POST\",status=\"2xx\"}}"),
            SCRAPED,
            |n| n == 2.0,
        )
        .await;
    prometheus
        .wait_for(&format!("gpuplane_leader{{{server}}}"), SCRAPED, |leading| {
            leading == 1.0
        })
        .await;
    // PromQL over the series: the dispatch latency's median is a time.
    let median = prometheus
        .wait_for(
            &format!(
                "histogram_quantile(0.5, rate(gpuplane_dispatch_latency_seconds_bucket{{{server}}}[1m]))"
            ),
            SCRAPED,
            |seconds| seconds.is_finite(),
        )
        .await;
    assert!(median > 0.0 && median < 30.0, "{median}");
    // The GPU is free again: no job holds it.
    prometheus
        .wait_for(
            "DCGM_FI_DEV_GPU_UTIL{job=\"gpuplane-agent\",hpc_job=\"\"}",
            SCRAPED,
            |_| true,
        )
        .await;

    // Every query of the Grafana dashboard the package ships is PromQL
    // this Prometheus takes, and each finds series.
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../../dist/monitoring/grafana-dashboard.json")).unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let answer = prometheus.query(expr).await;
            assert!(!answer.is_empty(), "{}: {expr} found nothing", panel["title"]);
        }
    }
}
