//! Submit → RUNNING through a real one-node Slurm (testkit's cluster:
//! Debian's slurmctld, slurmd and munged; needs root): the release server,
//! and the release agent with `--runner slurm`, jobs one after another.
//! Slurm's own scheduling is in the figure: sbatch, slurmctld's placement,
//! slurmd's launch, and the agent reading the state through `scontrol`.

use crate::process::{
    Proc, agent_command, percentile, release_binaries, start_server_process, submit_until_running,
    wait_for_node,
};

pub async fn run() -> anyhow::Result<()> {
    let binaries = release_binaries()?;
    let slurm = gpuplane_testkit::slurm::Slurm::start();
    let server = start_server_process(&binaries, &[]).await?;
    let jobs_dir = tempfile::tempdir()?;
    let (name, value) = slurm.env();
    let mut command = agent_command(&binaries, &server, jobs_dir.path());
    let _agent = Proc(command.args(["--runner", "slurm"]).env(name, value).spawn()?);
    let http = reqwest::Client::new();
    wait_for_node(&http, &server).await?;
    let jobs = crate::report::size(20, 3);
    let mut client_ms = Vec::new();
    for i in 0..jobs {
        let (_, ms) = submit_until_running(&http, &server, &format!("slurm-{i}"), &["sleep", "0.2"]).await?;
        client_ms.push(ms);
    }
    client_ms.sort_by(f64::total_cmp);
    println!(
        "slurm: submit -> RUNNING through a one-node Slurm, {jobs} jobs one after another: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&client_ms, 0.5),
        percentile(&client_ms, 0.99),
        client_ms.last().copied().unwrap_or_default()
    );
    Ok(())
}
