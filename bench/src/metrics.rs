//! Metrics: ingest over HTTP on loopback (batches of 10,000 points) by 1, 2
//! and 4 clients at once (1 and 2 in turns, each phase on a quiet server; 8
//! too on a host of 8 cores or more),
//! one metric of 1,000,000 points downsampled to 2,000 buckets, server RSS
//! during sustained ingest.

use crate::process::{
    Binaries, Server, cpu_seconds, percentile, release_binaries, rss_mib, start_server_process,
};
use crate::report::{count, record, size};
use anyhow::Context;
use gpuplane_server::store::Db;
use std::time::{Duration, Instant};

pub async fn run() -> anyhow::Result<()> {
    println!(
        "== metrics benchmarks ({} cores, {})",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        crate::process::store_name()
    );
    let binaries = release_binaries()?;
    ingest_and_query(&binaries).await
}

/// A batch body of `count` points of `keys` keys starting at `step`, as the SDK would send it.
fn batch(batch_id: &str, keys: &[String], step: i64, count: usize) -> String {
    let mut points = Vec::with_capacity(count);
    for i in 0..count {
        let step = step + (i / keys.len()) as i64;
        let key = &keys[i % keys.len()];
        let value = if step % 100_003 == 7 {
            serde_json::json!("NaN")
        } else {
            serde_json::json!(1.0 / (1.0 + step as f64 * 1e-4))
        };
        points.push(serde_json::json!({"key": key, "step": step, "wall_time": 1_764_460_800.0 + step as f64 * 0.01, "value": value}));
    }
    serde_json::json!({"batch_id": batch_id, "points": points}).to_string()
}

/// Posts a prepared JSON body to a metrics URL; an error unless it is taken.
pub(crate) async fn ingest(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: impl Into<reqwest::Body>,
) -> anyhow::Result<()> {
    let response = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "ingest refused: {}",
        response.status()
    );
    Ok(())
}

/// A run made the SDK's way; its id.
pub(crate) async fn create_run(
    http: &reqwest::Client,
    server: &Server,
    name: &str,
) -> anyhow::Result<String> {
    let run: serde_json::Value = http
        .post(format!("{}/api/v1/runs", server.url))
        .bearer_auth(&server.token)
        .json(&serde_json::json!({"name": name}))
        .send()
        .await?
        .json()
        .await?;
    Ok(run["id"].as_str().context("no run id")?.to_string())
}

async fn ingest_and_query(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let http = reqwest::Client::new();
    let run_id = create_run(&http, &server, "bench").await?;
    let url = format!("{}/api/v1/runs/{run_id}/metrics", server.url);
    let pid = server.pid();

    // One key, 1,000,000 points, batches of 10,000: bodies prepared first so
    // the figure is the server's, not the client's JSON encoding.
    let points = size(1_000_000, 40_000);
    let keys = vec!["train/loss".to_string()];
    let bodies: Vec<String> = (0..points / 10_000)
        .map(|b| batch(&format!("b{b}"), &keys, b as i64 * 10_000, 10_000))
        .collect();
    let mut peak_rss: f64 = 0.0;
    let started = Instant::now();
    for body in &bodies {
        ingest(&http, &url, &server.token, body.clone()).await?;
        peak_rss = peak_rss.max(rss_mib(pid)?);
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "metrics: ingest {} points of one key over HTTP, batches of 10,000 ({} KiB each), one client: {:.0} points/s ({seconds:.2} s); server RSS peak {peak_rss:.1} MiB",
        count(points),
        bodies[0].len() / 1024,
        points as f64 / seconds
    );

    // Clients at once, each to a run of its own, each phase on a quiet
    // server (see `settle`). The machine's other work still moves a single
    // phase by a tenth or more, so 1 and 2 clients take turns, three times
    // each, and each 2-client phase is set against the 1-client phase just
    // before it; the medians are recorded.
    let keys: Vec<String> = (0..8).map(|k| format!("train/metric_{k}")).collect();
    let bodies: Vec<bytes::Bytes> = (0..points / 10_000)
        .map(|b| batch(&format!("c{b}"), &keys, b as i64 * 1250, 10_000).into())
        .collect();
    let turns = size(3, 1);
    let (mut one, mut two, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for turn in 0..turns {
        let single = ingest_by_clients(&http, &server, &format!("t{turn}"), 1, &bodies).await?;
        let double = ingest_by_clients(&http, &server, &format!("t{turn}"), 2, &bodies).await?;
        println!(
            "metrics: turn {}: 1 client {single:.0} points/s, 2 clients {double:.0} points/s ({:.2}×); server RSS {:.1} MiB",
            turn + 1,
            double / single,
            rss_mib(pid)?
        );
        one.push(single);
        two.push(double);
        ratios.push(double / single);
    }
    let four = ingest_by_clients(&http, &server, "t", 4, &bodies).await?;
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let (one, two, ratio) = (median(&mut one), median(&mut two), median(&mut ratios));
    println!(
        "metrics: ingest of 8 keys, batches of 10,000, a run each, medians of {turns}: 1 client {one:.0} points/s, 2 clients {two:.0} points/s ({ratio:.2}×, turns {:.2}–{:.2}×); 4 clients {four:.0} points/s",
        ratios[0],
        ratios[ratios.len() - 1]
    );
    let what = |who: &str| format!("{who} (Rust, 10,000 points of 8 keys a request, a run each)");
    record("ingest.rust.1", what("1 client"), "points/s", one);
    record("ingest.rust.2", what("2 clients at once"), "points/s", two);
    record("ingest.rust.4", what("4 clients at once"), "points/s", four);
    // Issue #18's goal for a many-core host: 8 clients at once.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cores >= 8 {
        let eight = ingest_by_clients(&http, &server, "t", 8, &bodies).await?;
        println!("metrics: 8 clients at once on {cores} cores: {eight:.0} points/s");
        record("ingest.rust.8", what("8 clients at once"), "points/s", eight);
    }
    record(
        "ingest.rust.2_over_1",
        format!("2 clients' ingest over 1 client's (median of {turns} turns)"),
        "×",
        ratio,
    );

    // One metric of 1,000,000 points downsampled to 2,000 buckets.
    let mut times = Vec::new();
    let mut buckets = 0;
    for _ in 0..30 {
        let started = Instant::now();
        let series: serde_json::Value = http
            .get(format!(
                "{}/api/v1/runs/{run_id}/metrics?key=train/loss&max_points=2000",
                server.url
            ))
            .bearer_auth(&server.token)
            .send()
            .await?
            .json()
            .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        buckets = series["buckets"].as_array().map(Vec::len).unwrap_or(0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "metrics: {points} points -> {buckets} buckets over HTTP (query, aggregate, JSON): p50 {:.1} ms, p90 {:.1} ms",
        percentile(&times, 0.5),
        percentile(&times, 0.9)
    );
    let what = format!(
        "one metric of {} points → {buckets} buckets over HTTP (Rust client), p50",
        count(points)
    );
    record("downsample.1m", what, "ms", percentile(&times, 0.5));
    // The same query in this process over the same database: the store
    // and the aggregation without HTTP and JSON.
    let inner = in_process_p50(&server.data_dir(), &run_id).await?;
    println!(
        "metrics: the same query in-process ({} read + aggregation, no HTTP/JSON): p50 {inner:.1} ms",
        crate::process::store_name()
    );
    let mut zoom = Vec::new();
    let span = points as i64 / 20;
    for i in 0..30 {
        let from = i * (points as i64 - span) / 30;
        let started = Instant::now();
        let response = http
            .get(format!(
                "{}/api/v1/runs/{run_id}/metrics?key=train/loss&max_points=2000&from={from}&to={}",
                server.url,
                from + span
            ))
            .bearer_auth(&server.token)
            .send()
            .await?;
        let _ = response.bytes().await?;
        zoom.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    zoom.sort_by(f64::total_cmp);
    println!(
        "metrics: zoom to {span} of the {points} points -> 2,000 buckets: p50 {:.1} ms",
        percentile(&zoom, 0.5)
    );
    let what = format!(
        "zoom into {} of the {} points → 2,000 buckets over HTTP, p50",
        count(span as usize),
        count(points)
    );
    record("zoom.1m", what, "ms", percentile(&zoom, 0.5));
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}

/// The p50 of `train/loss` of a run downsampled to 2,000 buckets in this
/// process, over the server's database: the store and the aggregation
/// without HTTP and JSON.
pub(crate) async fn in_process_p50(data_dir: &std::path::Path, run_id: &str) -> anyhow::Result<f64> {
    let pool = match gpuplane_testkit::postgres::database_for(data_dir).await {
        Some(url) => Db::Postgres(sqlx::PgPool::connect(&url).await?),
        None => Db::Sqlite(
            sqlx::SqlitePool::connect(&format!(
                "sqlite://{}?mode=ro",
                data_dir.join("gpuplane.db").display()
            ))
            .await?,
        ),
    };
    let query = gpuplane_server::metrics::Query {
        key: "train/loss".into(),
        max_points: 2000,
        axis: gpuplane_server::metrics::Axis::Step,
        from: None,
        to: None,
    };
    let mut times = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        gpuplane_server::metrics::query(&pool, run_id, &query)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    pool.close().await;
    Ok(percentile(&times, 0.5))
}

/// Waits until the server is done with the work the last ingest left it:
/// metric compaction starts 2 s after ingest and merges what was stored.
/// A phase that met it would be measured against compaction, one that did
/// not against nothing. Quiet: under 5 % of a core over a quarter second
/// (a minute at most).
async fn settle(pid: u32) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let before = cpu_seconds(pid)?;
        tokio::time::sleep(Duration::from_millis(250)).await;
        if cpu_seconds(pid)? - before < 0.0125 || Instant::now() > deadline {
            return Ok(());
        }
    }
}

/// `clients` clients at once, each sending `bodies` (prepared JSON batches)
/// to a run of its own, on a quiet server; points a second over all of them.
async fn ingest_by_clients(
    http: &reqwest::Client,
    server: &Server,
    turn: &str,
    clients: usize,
    bodies: &[bytes::Bytes],
) -> anyhow::Result<f64> {
    let pid = server.pid();
    settle(pid).await?;
    let mut urls = Vec::new();
    for client in 0..clients {
        let run_id = create_run(http, server, &format!("clients-{turn}-{clients}-{client}")).await?;
        urls.push(format!("{}/api/v1/runs/{run_id}/metrics", server.url));
    }
    let (server_cpu, bench_cpu) = (cpu_seconds(pid)?, cpu_seconds(std::process::id())?);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for url in urls {
        let (http, token, bodies) = (http.clone(), server.token.clone(), bodies.to_vec());
        tasks.push(tokio::spawn(async move {
            for body in bodies {
                ingest(&http, &url, &token, body).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "metrics: {clients} client(s): the server kept {:.2} cores busy, this benchmark's client {:.2}",
        (cpu_seconds(pid)? - server_cpu) / seconds,
        (cpu_seconds(std::process::id())? - bench_cpu) / seconds
    );
    Ok((clients * bodies.len() * 10_000) as f64 / seconds)
}
