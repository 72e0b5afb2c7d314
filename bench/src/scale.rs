//! Flat queries at any size: one metric of 1,000,000 and one of 100,000,000
//! points, each downsampled to 2,000 buckets by the release server over
//! HTTP. The points are stored with the server's own ingest function in
//! this process (sending 100M points as JSON would measure the client),
//! then compacted the way the server does in the background.

use crate::metrics::{create_run, in_process_p50};
use crate::process::{percentile, release_binaries, start_server_process};
use crate::report::{count, record, size};
use gpuplane_api::metric::{Point, Value};
use gpuplane_server::store::Db;
use gpuplane_testkit::sql;
use std::time::Instant;

pub async fn run() -> anyhow::Result<()> {
    println!(
        "== scale benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let binaries = release_binaries()?;
    let mut server = start_server_process(&binaries, &[]).await?;
    let http = reqwest::Client::new();
    let small = create_run(&http, &server, "1M").await?;
    let large = create_run(&http, &server, "100M").await?;
    server.process.kill();

    let db = gpuplane_server::store::open(&server.data_dir()).await?;
    let (small_points, large_points) = (size(1_000_000, 10_000), size(100_000_000, 200_000));
    for (run_id, points) in [(&small, small_points), (&large, large_points)] {
        let started = Instant::now();
        store(&db, run_id, points).await?;
        let stored = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut seen = 0;
        while gpuplane_server::metrics::compact::pass(&db, &mut seen)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            > 0
        {
            seen = 0;
        }
        let chunks: i64 = sql!(&db, |pool| {
            sqlx::query_scalar("SELECT count(*) FROM metric_chunks WHERE run_id = $1")
                .bind(run_id)
                .fetch_one(pool)
                .await
        })?;
        println!(
            "scale: {points} points stored in {stored:.1} s ({:.0} points/s, in process), compacted in {:.1} s into {chunks} chunks",
            points as f64 / stored,
            started.elapsed().as_secs_f64()
        );
    }
    db.close().await;

    server.process.restart().await;
    // Alternately, so both see the same machine.
    for (round, (run_id, points)) in [
        (&small, small_points),
        (&large, large_points),
        (&small, small_points),
        (&large, large_points),
    ]
    .into_iter()
    .enumerate()
    {
        let url = format!(
            "{}/api/v1/runs/{run_id}/metrics?key=train/loss&max_points=2000",
            server.url
        );
        let mut times = Vec::new();
        let mut buckets = 0;
        for _ in 0..30 {
            let started = Instant::now();
            let series: serde_json::Value = http
                .get(&url)
                .bearer_auth(&server.token)
                .send()
                .await?
                .json()
                .await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            buckets = series["buckets"].as_array().map_or(0, Vec::len);
        }
        times.sort_by(f64::total_cmp);
        let inner = in_process_p50(&server.data_dir(), run_id).await?;
        println!(
            "scale: one metric of {points} points -> {buckets} buckets over HTTP: p50 {:.1} ms, p90 {:.1} ms (in process, no HTTP/JSON: p50 {inner:.1} ms)",
            percentile(&times, 0.5),
            percentile(&times, 0.9)
        );
        if round == 3 {
            let what = format!(
                "one metric of {} points → {buckets} buckets over HTTP (Rust client), p50",
                count(points as usize)
            );
            record("downsample.100m", what, "ms", percentile(&times, 0.5));
        }
    }
    Ok(())
}

/// Stores `count` points of `train/loss` in batches of 100,000.
async fn store(db: &Db, run_id: &str, count: i64) -> anyhow::Result<()> {
    let batch_points = 100_000;
    for first in (0..count).step_by(batch_points) {
        let points: Vec<Point> = (first..(first + batch_points as i64).min(count))
            .map(|step| Point {
                key: "train/loss".into(),
                step,
                wall_time: 1_764_460_800.0 + step as f64 * 0.1,
                value: Value((2.3 * (-(step as f64) / (count as f64 / 5.0)).exp() + 0.2) as f32 as f64),
            })
            .collect();
        let batch = gpuplane_server::metrics::prepare(format!("b{first}"), &points, Vec::new())?;
        let mut tx = gpuplane_server::store::write(db).await?;
        gpuplane_server::metrics::store(&mut tx, run_id, &batch, "*loss*")
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        tx.commit().await?;
    }
    Ok(())
}
