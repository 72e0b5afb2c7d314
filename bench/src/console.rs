//! The console: a run page rendered on the server for a run with 20
//! metrics of 1,000,000 points each (charts included), one of its charts
//! alone, and the hydrate bundle's size (gzip) when a release site exists.

use crate::jobs::{Binaries, percentile, release_binaries, start_server_process};
use crate::metrics::create_run;
use anyhow::Context;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

const KEYS: usize = 20;
const POINTS_PER_KEY: usize = 1_000_000;
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

async fn run_page(binaries: &Binaries) -> anyhow::Result<()> {
    let server = start_server_process(binaries, &[]).await?;
    let http = reqwest::Client::new();
    let run_id = create_run(&http, &server, "twenty-metrics").await?;
    let keys: Vec<String> = (0..KEYS)
        .map(|k| match k {
            0..=9 => format!("train/metric_{k}"),
            10..=14 => format!("eval/metric_{k}"),
            _ => format!("system/metric_{k}"),
        })
        .collect();
    let started = Instant::now();
    let url = format!("{}/api/v1/runs/{run_id}/metrics", server.url);
    for first_step in (0..POINTS_PER_KEY).step_by(STEPS_PER_BATCH) {
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
        let response = http
            .post(&url)
            .bearer_auth(&server.token)
            .json(&body)
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "ingest refused: {}",
            response.status()
        );
    }
    println!(
        "console: stored {KEYS} metrics × {POINTS_PER_KEY} points in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The server merges the batches' small chunks in the background, 2 s after ingest stops.
    let compacting = Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(15)).await;
    println!(
        "console: waited {:.0} s for chunk compaction",
        compacting.elapsed().as_secs_f64()
    );
    let cookie = sign_in(binaries, &server.data_dir(), &server.url).await?;
    let page_url = format!("{}/runs/{run_id}", server.url);
    let mut times = Vec::new();
    let mut size = 0;
    let mut charts = 0;
    for round in 0..22 {
        let started = Instant::now();
        let response = http.get(&page_url).header("cookie", &cookie).send().await?;
        anyhow::ensure!(response.status().is_success(), "run page: {}", response.status());
        let html = response.text().await?;
        if round >= 2 {
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        size = html.len();
        charts = html.matches("class=\"chart\"").count();
    }
    anyhow::ensure!(charts == KEYS, "the page drew {charts} charts, not {KEYS}");
    times.sort_by(f64::total_cmp);
    println!(
        "console: run page server render, {KEYS} metrics × 1,000,000 points, {charts} SVG charts inline ({} KiB of HTML): p50 {:.1} ms, p95 {:.1} ms (20 renders, 1 client)",
        size / 1024,
        percentile(&times, 0.5),
        percentile(&times, 0.95)
    );

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
            "console: one metric of 1,000,000 points, 400 buckets, as {name}: p50 {:.1} ms, p95 {:.1} ms",
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
