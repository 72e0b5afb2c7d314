//! `cargo run --release -p gpuplane-bench -- [jobs|all]`: measures and prints.
//!
//! Uses the release binaries of the server and agent (`cargo build
//! --release -p gpuplane-server -p gpuplane-agent` first) where a figure is
//! about a process (latency, CPU, memory), and the server library in this
//! process for the scheduler's pass.

mod jobs;

fn main() -> anyhow::Result<()> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let runtime = tokio::runtime::Runtime::new()?;
    match which.as_str() {
        "jobs" | "all" => runtime.block_on(jobs::run()),
        other => anyhow::bail!("unknown benchmark `{other}`; expected jobs or all"),
    }
}
