//! The console: a run page rendered on the server for a run with 20
//! metrics of 1,000,000 points each (charts included), one of its charts
//! alone, and the hydrate bundle's size (gzip) when a release site exists;
//! and (`compare`) the page comparing 8 such runs.

use crate::metrics::create_run;
use crate::process::{Binaries, Server, percentile, release_binaries, start_server_process};
use anyhow::Context;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

const KEYS: usize = 20;
/// Points each metric gets: 1,000,000 (a few thousand in smoke mode).
fn points_per_key() -> usize {
    crate::report::size(1_000_000, 5_000)
}
const STEPS_PER_BATCH: usize = 500;

pub async fn run() -> anyhow::Result<()> {
    println!(
        "== console benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let binaries = release_binaries()?;
    run_page(&binaries).await?;
    bundle_size()
}

/// A user with a password on the server's data dir, signed in like a browser: its session cookie.
async fn sign_in(binaries: &Binaries, data_dir: &std::path::Path, url: &str) -> anyhow::Result<String> {
    let password = "bench-password-1234";
    let mut admin = Command::new(&binaries.server)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["admin", "create-user", "viewer", "--admin", "--password-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    writeln!(admin.stdin.take().context("no stdin")?, "{password}")?;
    anyhow::ensure!(admin.wait()?.success(), "create-user failed");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let response = http
        .post(format!("{url}/login"))
        .header("origin", url)
        .form(&[("username", "viewer"), ("password", password), ("next", "/")])
        .send()
        .await?;
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("sign-in set no cookie")?;
    Ok(cookie.to_string())
}

/// The metric keys of a benchmark run: train/, eval/ and other groups.
fn metric_keys() -> Vec<String> {
    (0..KEYS)
        .map(|k| match k {
            0..=9 => format!("train/metric_{k}"),
            10..=14 => format!("eval/metric_{k}"),
            _ => format!("system/metric_{k}"),
        })
        .collect()
}

/// Sends [`KEYS`] metrics × [`points_per_key`] points (a NaN now and then)
/// to a run through the ingest API.
async fn fill_run(http: &reqwest::Client, server: &Server, run_id: &str) -> anyhow::Result<()> {
    let keys = metric_keys();
    let url = format!("{}/api/v1/runs/{run_id}/metrics", server.url);
    for first_step in (0..points_per_key()).step_by(STEPS_PER_BATCH) {
        let mut points = Vec::with_capacity(KEYS * STEPS_PER_BATCH);
        for step in first_step..first_step + STEPS_PER_BATCH {
            for (k, key) in keys.iter().enumerate() {
                let value = if step % 250_007 == k {
                    serde_json::json!("NaN")
                } else {
                    serde_json::json!((k + 1) as f64 / (1.0 + step as f64 * 1e-4))
                };
                points.push(serde_json::json!({"key": key, "step": step, "wall_time": 1_764_460_800.0 + step as f64 * 0.01, "value": value}));
            }
        }
        let body = serde_json::json!({"batch_id": format!("b{first_step}"), "points": points});
        crate::metrics::ingest(http, &url, &server.token, body.to_string()).await?;
    }
    Ok(())
}

/// Server render times of `page_url` for a signed-in browser (20 renders
/// after 2 warm-ups): sorted milliseconds, the HTML's size and its charts.
async fn render_times(
    http: &reqwest::Client,
    page_url: &str,
    cookie: &str,
) -> anyhow::Result<(Vec<f64>, usize, usize)> {
    let mut times = Vec::new();
    let mut size = 0;
    let mut charts = 0;
    for round in 0..22 {
        let started = Instant::now();
        let response = http.get(page_url).header("cookie", cookie).send().await?;
        anyhow::ensure!(response.status().is_success(), "page: {}", response.status());
        let html = response.text().await?;
        if round >= 2 {
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        size = html.len();
        charts = html.matches("class=\"chart\"").count();
    }
    times.sort_by(f64::total_cmp);
    Ok((times, size, charts))
}

/// The run page comparing 8 runs of 20 metrics × 1,000,000 points each:
/// 20 charts of 8 lines and the config diff (`gpuplane-bench compare`).
pub async fn compare() -> anyhow::Result<()> {
    const RUNS: usize = 8;
    let binaries = release_binaries()?;
    let server = start_server_process(&binaries, &[]).await?;
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut run_ids = Vec::new();
    for n in 0..RUNS {
        let run_id = create_run(&http, &server, &format!("compared-{n}")).await?;
        let config =
            serde_json::json!({"config": {"lr": 1e-3 * (n + 1) as f64, "optimizer": "adam", "seed": n}});
        http.post(format!("{}/api/v1/runs/{run_id}/config", server.url))
            .bearer_auth(&server.token)
            .json(&config)
            .send()
            .await?
            .error_for_status()?;
        run_ids.push(run_id);
    }
    // Two clients at a time, like two training jobs.
    for pair in run_ids.chunks(2) {
        let (first, second) = tokio::join!(
            fill_run(&http, &server, &pair[0]),
            fill_run(&http, &server, &pair[1])
        );
        first?;
        second?;
    }
    println!(
        "compare: stored {RUNS} runs × {KEYS} metrics × {} points in {:.0} s",
        points_per_key(),
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    let cookie = sign_in(&binaries, &server.data_dir(), &server.url).await?;
    let page_url = format!(
        "{}/runs/{}?compare={}",
        server.url,
        run_ids[0],
        run_ids[1..].join(",")
    );
    let (times, size, charts) = render_times(&http, &page_url, &cookie).await?;
    anyhow::ensure!(charts == KEYS, "the page drew {charts} charts, not {KEYS}");
    println!(
        "compare: run page of {RUNS} runs × {KEYS} metrics × 1,000,000 points ({charts} charts of {RUNS} lines, config diff; {} KiB of HTML): p50 {:.1} ms, p95 {:.1} ms (20 renders, 1 client)",
        size / 1024,
        percentile(&times, 0.5),
        percentile(&times, 0.95)
    );
    Ok(())
}

async fn run_page(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let http = reqwest::Client::new();
    let run_id = create_run(&http, &server, "twenty-metrics").await?;
    let started = Instant::now();
    fill_run(&http, &server, &run_id).await?;
    println!(
        "console: stored {KEYS} metrics × {} points in {:.1} s",
        points_per_key(),
        started.elapsed().as_secs_f64()
    );

    // The server merges the batches' small chunks in the background, 2 s after ingest stops.
    let compacting = Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(crate::report::size(15, 3))).await;
    println!(
        "console: waited {:.0} s for chunk compaction",
        compacting.elapsed().as_secs_f64()
    );
    let cookie = sign_in(binaries, &server.data_dir(), &server.url).await?;
    let page_url = format!("{}/runs/{run_id}", server.url);
    let (times, size, charts) = render_times(&http, &page_url, &cookie).await?;
    anyhow::ensure!(charts == KEYS, "the page drew {charts} charts, not {KEYS}");
    println!(
        "console: run page server render, {KEYS} metrics × {} points, {charts} SVG charts inline ({} KiB of HTML): p50 {:.1} ms, p95 {:.1} ms (20 renders, 1 client)",
        points_per_key(),
        size / 1024,
        percentile(&times, 0.5),
        percentile(&times, 0.95)
    );
    let what = format!(
        "a run page rendered by the server, {KEYS} metrics × {} points, {charts} charts, p50",
        crate::report::count(points_per_key())
    );
    crate::report::record("console.run_page", what, "ms", percentile(&times, 0.5));

    let query_url = format!(
        "{}/api/v1/runs/{run_id}/metrics?key=train/metric_0&max_points=400",
        server.url
    );
    let chart_url = format!("{}/api/v1/runs/{run_id}/chart.svg?key=train/metric_0", server.url);
    let png_url = format!("{}/api/v1/runs/{run_id}/chart.png?key=train/metric_0", server.url);
    for (name, url) in [
        ("JSON (the query alone)", query_url),
        ("SVG", chart_url),
        ("PNG", png_url),
    ] {
        let mut times = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let response = http.get(&url).bearer_auth(&server.token).send().await?;
            anyhow::ensure!(response.status().is_success(), "chart: {}", response.status());
            response.bytes().await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "console: one metric of {} points, 400 buckets, as {name}: p50 {:.1} ms, p95 {:.1} ms",
            points_per_key(),
            percentile(&times, 0.5),
            percentile(&times, 0.95)
        );
    }
    Ok(())
}

/// The hydrate bundle (wasm + JS), raw and gzip -9, when `cargo xtask site --release` has built it.
fn bundle_size() -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let target = exe.ancestors().nth(2).context("no target dir")?;
    let pkg = target.join("site").join("pkg");
    let files = ["gpuplane_bg.wasm", "gpuplane.js"];
    let mut raw = 0;
    let mut gzipped = 0;
    for file in files {
        let path = pkg.join(file);
        if !path.exists() {
            println!(
                "console: no {} (run `cargo xtask site --release` first)",
                path.display()
            );
            return Ok(());
        }
        raw += std::fs::metadata(&path)?.len();
        let output = Command::new("gzip").args(["-9", "-c"]).arg(&path).output()?;
        gzipped += output.stdout.len() as u64;
    }
    println!(
        "console: hydrate bundle in {} (wasm + JS): {} KiB raw, {} KiB gzip -9",
        pkg.display(),
        raw / 1024,
        gzipped / 1024
    );
    Ok(())
}
