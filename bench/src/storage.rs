//! Metric storage: bytes on disk per point after compaction, for a run
//! logged like a real one (a noisy float32 loss and an f64 learning-rate
//! schedule every step, an accuracy every 1,000 steps, wall times from the
//! clock as the SDK sends them), or for the scalars of a TensorBoard file.
//! Each point goes through the real server over HTTP.

use crate::metrics::{create_run, ingest};
use crate::process::{Binaries, Server, release_binaries, start_server_process};
use std::path::Path;
use std::time::{Duration, Instant};

/// One point as the API takes it.
struct Point {
    key: &'static str,
    step: i64,
    wall: f64,
    value: f64,
}

pub async fn run(tfevents: Option<&Path>) -> anyhow::Result<()> {
    println!(
        "== storage benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let binaries = release_binaries()?;
    let (what, points) = match tfevents {
        Some(path) => (
            format!("the scalars of {}", path.display()),
            tfevents_points(path)?,
        ),
        None => (
            "a training run (loss + lr every step, accuracy every 1,000)".to_string(),
            training_run(crate::report::size(400_000, 5_000)),
        ),
    };
    let bytes = measure(&binaries, &what, &points).await?;
    if tfevents.is_none() {
        let what = format!("{what}, {} points", crate::report::count(points.len()));
        crate::report::record("storage.training_run", what, "B", bytes);
    }
    Ok(())
}

/// A run of `steps` steps at about 10 steps a second.
fn training_run(steps: i64) -> Vec<Point> {
    let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
    let started = 1_764_460_800.0;
    let mut points = Vec::new();
    for step in 0..steps {
        // time.time() as the SDK reads it: full f64 precision, some jitter.
        let wall = started + step as f64 * 0.1 + random.uniform() * 0.004;
        let noise = (random.uniform() + random.uniform() + random.uniform() - 1.5) * 0.05;
        let loss = (2.3 * (-(step as f64) / 80_000.0).exp() + 0.2 + noise) as f32;
        points.push(Point {
            key: "train/loss",
            step,
            wall,
            value: f64::from(loss),
        });
        let peak = 3e-4;
        let warmup = 2_000.0;
        let lr = if (step as f64) < warmup {
            peak * step as f64 / warmup
        } else {
            let progress = (step as f64 - warmup) / (steps as f64 - warmup);
            peak * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
        };
        points.push(Point {
            key: "train/lr",
            step,
            wall,
            value: lr,
        });
        if step % 1000 == 0 {
            let accuracy = 0.9 * (1.0 - (-(step as f64) / 50_000.0).exp()) + random.uniform() * 0.005;
            points.push(Point {
                key: "eval/accuracy",
                step,
                wall: wall + 5.0,
                value: f64::from(accuracy as f32),
            });
        }
    }
    points
}

/// Every scalar of an event file, read with the agent's reader.
fn tfevents_points(path: &Path) -> anyhow::Result<Vec<Point>> {
    let size = std::fs::metadata(path)?.len();
    let mut file = gpuplane_tfevents::EventFile::new(path, 0);
    let mut points = Vec::new();
    loop {
        let found = file.read()?;
        if found.scalars.is_empty() && found.end >= size {
            break;
        }
        let keys: Vec<&'static str> = found
            .tags
            .into_iter()
            .map(|tag| &*Box::leak(tag.into_boxed_str()))
            .collect();
        for scalar in found.scalars {
            let key = keys[scalar.tag as usize];
            points.push(Point {
                key,
                step: scalar.step,
                wall: scalar.wall_time,
                value: scalar.value,
            });
        }
    }
    Ok(points)
}

/// Sends `points` through a server and gives the bytes a point its database
/// file holds in use after compaction.
async fn measure(binaries: &Binaries, what: &str, points: &[Point]) -> anyhow::Result<f64> {
    let empty = empty_database_bytes().await?;
    let server = start_server_process(binaries, &[]).await?;
    let http = reqwest::Client::new();
    let run_id = create_run(&http, &server, "storage").await?;
    let url = format!("{}/api/v1/runs/{run_id}/metrics", server.url);
    let bodies: Vec<String> = points
        .chunks(10_000)
        .enumerate()
        .map(|(i, batch)| batch_body(i, batch))
        .collect();
    let started = Instant::now();
    for body in bodies {
        ingest(&http, &url, &server.token, body).await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "storage: {what}: {} points ingested at {:.0} points/s",
        points.len(),
        points.len() as f64 / seconds
    );
    wait_for_compaction(&server).await?;
    let mut server = server;
    server.process.kill();
    report(&server, &run_id, points.len(), empty).await
}

fn batch_body(index: usize, points: &[Point]) -> String {
    let points: Vec<serde_json::Value> = points
        .iter()
        .map(|p| {
            let value = if p.value.is_finite() {
                serde_json::json!(p.value)
            } else {
                serde_json::json!(gpuplane_api::metric::Value(p.value))
            };
            serde_json::json!({"key": p.key, "step": p.step, "wall_time": p.wall, "value": value})
        })
        .collect();
    serde_json::json!({"batch_id": format!("b{index}"), "points": points}).to_string()
}

/// Waits until background compaction has merged what it will (its count of
/// small chunks stops falling).
async fn wait_for_compaction(server: &Server) -> anyhow::Result<()> {
    let pool = read_only(&server.data_dir()).await?;
    let mut last = i64::MAX;
    let mut steady = 0;
    for _ in 0..120 {
        let small: i64 = sqlx::query_scalar("SELECT count(*) FROM metric_chunks WHERE count < 2048")
            .fetch_one(&pool)
            .await?;
        steady = if small < last { 0 } else { steady + 1 };
        last = small;
        if steady >= 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    pool.close().await;
    Ok(())
}

async fn read_only(data_dir: &Path) -> anyhow::Result<sqlx::SqlitePool> {
    Ok(sqlx::SqlitePool::connect(&format!(
        "sqlite://{}?mode=ro",
        data_dir.join("gpuplane.db").display()
    ))
    .await?)
}

/// The size of a database with every migration applied and nothing in it.
async fn empty_database_bytes() -> anyhow::Result<u64> {
    let dir = tempfile::tempdir()?;
    let db = gpuplane_server::store::open(dir.path()).await?;
    checkpoint(db.as_sqlite().expect("store::open opens SQLite")).await?;
    db.close().await;
    Ok(std::fs::metadata(dir.path().join("gpuplane.db"))?.len())
}

async fn checkpoint(db: &sqlx::SqlitePool) -> anyhow::Result<()> {
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(db).await?;
    Ok(())
}

/// Bytes per point: of the whole database file (its WAL checkpointed, less
/// an empty database), and of each series' chunk blobs; gives the first.
async fn report(server: &Server, run_id: &str, points: usize, empty: u64) -> anyhow::Result<f64> {
    let path = server.data_dir().join("gpuplane.db");
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await?;
    checkpoint(&db).await?;
    let file = std::fs::metadata(&path)?.len();
    let free: i64 =
        sqlx::query_scalar("SELECT freelist_count * page_size FROM pragma_freelist_count, pragma_page_size")
            .fetch_one(&db)
            .await?;
    let used = file.saturating_sub(empty).saturating_sub(free as u64);
    println!(
        "storage: database file {:.1} MiB for {points} points, {:.1} MiB of it free pages left by compaction (reused by later writes): {:.2} bytes a point in use, {:.2} with the free pages (less the empty database's {} KiB)",
        file as f64 / (1 << 20) as f64,
        free as f64 / (1 << 20) as f64,
        used as f64 / points as f64,
        file.saturating_sub(empty) as f64 / points as f64,
        empty / 1024
    );
    let series: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT key, sum(count), sum(length(points)), sum(length(summary)), count(*) FROM metric_chunks
         WHERE run_id = $1 GROUP BY key ORDER BY key",
    )
    .bind(run_id)
    .fetch_all(&db)
    .await?;
    for (key, count, points, summary, chunks) in series {
        println!(
            "storage:   {key}: {count} points in {chunks} chunks: points {:.2} + summaries {:.2} bytes a point",
            points as f64 / count as f64,
            summary as f64 / count as f64
        );
    }
    db.close().await;
    Ok(used as f64 / points as f64)
}

/// A small deterministic generator (xorshift64*), so every run measures the same data.
struct XorShift(u64);

impl XorShift {
    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}
