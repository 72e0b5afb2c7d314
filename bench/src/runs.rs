//! The runs table: 10,000 runs with 50 config keys and 50 metrics each,
//! listed a page at a time filtered and sorted the ways the console does,
//! timed as the server's own work (`runs::list`) and as a whole HTTP request.

use crate::process::percentile;
use gpuplane_api::auth::Scope;
use gpuplane_api::experiment::{ConfigFilter, RunSort};
use gpuplane_api::metric::{Goal, NewRun, Point, SetPrimaryMetric, Value};
use gpuplane_server::identity::access::{Principal, Visible};
use gpuplane_server::runs::{self, details::Filters};
use gpuplane_testkit::{start_server, user_token};
use std::collections::BTreeMap;
use std::time::Instant;

const CONFIG_KEYS: usize = 50;
/// Metrics a run logs: the three the cases sort by, and 47 more.
const METRICS: usize = 50;
const PAGE: i64 = 50;

pub async fn run() -> anyhow::Result<()> {
    println!(
        "== runs table benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let dir = tempfile::tempdir()?;
    let server = start_server(dir.path()).await;
    let db = server.state.db.clone();
    let token = user_token(&db, "bench", Scope::Write, true).await;
    let user = gpuplane_server::admin::create_user(&db, "seeder", "bench-password", true).await?;
    let principal = Principal {
        user_id: Some(user),
        user_name: Some("seeder".into()),
        is_admin: true,
        project: None,
    };
    let started = Instant::now();
    let runs_count = crate::report::size(10_000, 200);
    for i in 0..runs_count {
        let mut config = BTreeMap::new();
        for k in 0..CONFIG_KEYS {
            let value = match k % 3 {
                0 => serde_json::json!(((i * 7 + k) % 1000) as f64 * 1e-5),
                1 => serde_json::json!((i + k) % 64),
                _ => serde_json::json!(["adam", "sgd", "lion"][(i + k) % 3]),
            };
            config.insert(format!("group{}.key{k}", k % 5), value);
        }
        let new = NewRun {
            project: "default".into(),
            name: format!("sweep-{i:05}"),
            config,
            tags: vec![["sweep-a", "sweep-b"][i % 2].to_string()],
            notes: String::new(),
        };
        let run_id = runs::create(&db, &principal, &new).await?;
        let points: Vec<Point> = metric_keys()
            .enumerate()
            .map(|(k, key)| Point {
                key,
                step: 100,
                wall_time: 1_764_460_800.0,
                value: Value(((i * 13 + k * 7) % 997) as f64 / 997.0),
            })
            .collect();
        let batch = gpuplane_server::metrics::prepare("seed".into(), &points, Vec::new())?;
        // One transaction a batch.
        let mut tx = gpuplane_server::store::write(&db).await?;
        gpuplane_server::metrics::store(&mut tx, &run_id, &batch, "loss").await?;
        tx.commit().await?;
    }
    println!(
        "runs: seeded {runs_count} runs x {CONFIG_KEYS} config keys + {METRICS} metrics in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let primary = SetPrimaryMetric {
        key: "eval/accuracy".into(),
        goal: Goal::Max,
    };
    runs::primary::set_for_project(&db, "default", &primary).await?;
    let filter = |key: &str, text: &str| ConfigFilter::parse(key, text).expect("a valid filter");
    let cases = [
        ("newest first, no filter", "newest", None, vec![], "sort=newest"),
        (
            "sorted by a config value",
            "-config.group3.key13",
            None,
            vec![],
            "sort=-config.group3.key13",
        ),
        (
            "sorted by a metric's latest value",
            "-eval/accuracy",
            None,
            vec![],
            "sort=-eval/accuracy",
        ),
        (
            "sorted by the primary metric's best value",
            "-primary",
            None,
            vec![],
            "sort=-primary",
        ),
        (
            "filtered by tag and 2 config values, sorted by a metric",
            "eval/loss",
            Some("sweep-a"),
            vec![filter("group0.key0", ">0.002"), filter("group2.key2", "sgd")],
            "sort=eval/loss&tag=sweep-a&config.group0.key0=%3E0.002&config.group2.key2=sgd",
        ),
    ];
    let http = reqwest::Client::new();
    for (what, sort, tag, config, query) in cases {
        let sort = RunSort::parse(sort).map_err(anyhow::Error::msg)?;
        let filters = Filters {
            tag: tag.map(String::from),
            text: None,
            config,
            archived: false,
        };
        let mut server_ms = Vec::new();
        let mut shown = 0;
        for _ in 0..20 {
            let started = Instant::now();
            let page = runs::list(&db, &Visible::All, None, &filters, &sort, PAGE, None).await?;
            server_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            shown = page.items.len();
        }
        server_ms.sort_by(f64::total_cmp);
        let mut http_ms = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let response = http
                .get(format!("{}/api/v1/runs?limit={PAGE}&{query}", server.url))
                .bearer_auth(&token)
                .send()
                .await?;
            anyhow::ensure!(response.status().is_success(), "{query}: {}", response.status());
            response.bytes().await?;
            http_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        http_ms.sort_by(f64::total_cmp);
        println!(
            "runs: a page of {shown} of {runs_count} runs, {what}: server p50 {:.1} ms (max {:.1}), HTTP p50 {:.1} ms",
            percentile(&server_ms, 0.5),
            server_ms[server_ms.len() - 1],
            percentile(&http_ms, 0.5),
        );
        if query == "sort=-primary" {
            let what = format!(
                "a page of the runs table, {} runs × {METRICS} metrics, {what}, over HTTP, p50",
                crate::report::count(runs_count)
            );
            crate::report::record("runs.page", what, "ms", percentile(&http_ms, 0.5));
        }
    }
    server.stop().await
}

/// The keys every run logs: the three the cases sort by first.
fn metric_keys() -> impl Iterator<Item = String> {
    ["train/loss", "eval/accuracy", "eval/loss"]
        .into_iter()
        .map(String::from)
        .chain((3..METRICS).map(|k| format!("train/metric_{k}")))
}
