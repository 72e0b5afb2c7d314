//! `gpuplane-agent`: parses the command line and hands over to the library.

use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // `gpuplane-agent shim DIR [CGROUP]`: the parent of one job (started by
    // the agent itself), which runs in CGROUP when given.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if (3..=4).contains(&argv.len()) && argv[1] == "shim" {
        let cgroup = argv.get(3).map(std::path::Path::new);
        return match gpuplane_agent::shim::run(std::path::Path::new(&argv[2]), cgroup) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
    let args = gpuplane_agent::Args::parse();
    // Nothing of the agent's own settings, its token first, may reach the
    // shims and jobs it starts. Still one thread here, so changing the
    // environment is sound.
    for (name, _) in std::env::vars_os() {
        if gpuplane_agent::private_variable(&name) && name != "GPUPLANE_LOG" {
            // SAFETY: no other thread exists yet to read the environment.
            unsafe { std::env::remove_var(&name) };
        }
    }
    // Jobs run as this user: refuse them ptrace and /proc/<agent>/environ
    // or /mem, where the token would still be readable. Children are
    // dumpable again after their exec.
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes this process's flag.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let filter = EnvFilter::try_from_env("GPUPLANE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let shutdown = shutdown_signal()?;
        gpuplane_agent::run(args, shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM; the handlers are installed at once, so no early signal is lost.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}
