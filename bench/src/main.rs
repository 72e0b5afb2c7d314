//! `cargo run --release -p gpuplane-bench -- [jobs|metrics|all]`: measures and prints.
//!
//! Uses the release binaries of the server and agent (`cargo build
//! --release -p gpuplane-server -p gpuplane-agent` first) where a figure is
//! about a process (latency, CPU, memory), and the server library in this
//! process for the scheduler's pass.

mod jobs;
mod metrics;

fn main() -> anyhow::Result<()> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let runtime = tokio::runtime::Runtime::new()?;
    match which.as_str() {
        "jobs" => runtime.block_on(jobs::run()),
        "metrics" => runtime.block_on(metrics::run()),
        "all" => runtime.block_on(async {
            jobs::run().await?;
            metrics::run().await
        }),
        other => anyhow::bail!("unknown benchmark `{other}`; expected jobs, metrics or all"),
    }
}
