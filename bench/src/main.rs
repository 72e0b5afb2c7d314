//! `cargo run --release -p gpuplane-bench -- [jobs|sweeps|metrics|console|compare|runs|telemetry|storage [FILE]|scale|cluster|slurm|all|tfevents FILE]`: measures and prints.
//! `gpuplane-bench report [--smoke] [--repeat N] [--peers PYTHON] [--out DIR]`
//! runs them all with the peers and writes the report (see `report.rs`;
//! `bench/report.sh` is the documented way).
//!
//! Uses the release binaries of the server and agent (`cargo build
//! --release -p gpuplane-server -p gpuplane-agent` first) where a figure is
//! about a process (latency, CPU, memory), and the server library in this
//! process for the scheduler's pass.

// Lowest first: a module uses only those above it (`cargo xtask layers`).
// The report and the shared process helpers, then the suites.
mod report;
mod process;
mod telemetry;
mod metrics;
mod jobs;
mod sweeps;
mod runs;
mod scale;
mod storage;
mod console;
mod cluster;
mod slurm;

/// Every suite of the report, in order.
async fn report_suites() -> anyhow::Result<()> {
    jobs::run().await?;
    sweeps::run().await?;
    metrics::run().await?;
    scale::run().await?;
    storage::run(None).await?;
    runs::run().await?;
    console::run().await?;
    cluster::run().await
}

/// Parses a whole event file with the agent's reader (CRC checked on every
/// record), best of five, and prints scalars per second.
fn tfevents(path: &std::path::Path) -> anyhow::Result<()> {
    let size = std::fs::metadata(path)?.len();
    let mut best = f64::MAX;
    let mut scalars = 0;
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let mut file = gpuplane_tfevents::EventFile::new(path, 0);
        let mut count = 0;
        loop {
            let found = file.read()?;
            if found.scalars.is_empty() && found.end >= size {
                break;
            }
            count += found.scalars.len();
            if file.corrupt.is_some() {
                anyhow::bail!("corrupt: {:?}", file.corrupt);
            }
        }
        best = best.min(started.elapsed().as_secs_f64());
        scalars = count;
    }
    println!("{scalars} {best:.4}");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let runtime = tokio::runtime::Runtime::new()?;
    match which.as_str() {
        "jobs" => runtime.block_on(jobs::run()),
        "sweeps" => runtime.block_on(sweeps::run()),
        "metrics" => runtime.block_on(metrics::run()),
        "console" => runtime.block_on(console::run()),
        "compare" => runtime.block_on(console::compare()),
        "runs" => runtime.block_on(runs::run()),
        "telemetry" => runtime.block_on(telemetry::run()),
        "scale" => runtime.block_on(scale::run()),
        "cluster" => runtime.block_on(cluster::run()),
        "slurm" => runtime.block_on(slurm::run()),
        "report" => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            runtime.block_on(report::run(report::Options::parse(&args)?, report_suites))
        }
        "storage" => {
            let file = std::env::args().nth(2).map(std::path::PathBuf::from);
            runtime.block_on(storage::run(file.as_deref()))
        }
        "tfevents" => {
            let path = std::env::args()
                .nth(2)
                .ok_or_else(|| anyhow::anyhow!("usage: gpuplane-bench tfevents FILE"))?;
            tfevents(std::path::Path::new(&path))
        }
        "all" => runtime.block_on(async {
            jobs::run().await?;
            sweeps::run().await?;
            metrics::run().await?;
            console::run().await?;
            runs::run().await?;
            telemetry::run().await?;
            storage::run(None).await
        }),
        other => anyhow::bail!(
            "unknown benchmark `{other}`; expected jobs, sweeps, metrics, console, compare, runs, telemetry, storage, scale, cluster, report or all"
        ),
    }
}
