//! `gpuplane-server`: parses the command line and hands over to the library.

use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = gpuplane_server::config::Cli::parse();
    let filter = EnvFilter::try_from_env("GPUPLANE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,rmcp=warn"));
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
    match runtime.block_on(gpuplane_server::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// glibc gives each thread that contends for malloc an arena of its own and
/// keeps what was freed there. The pool's SQLite threads each build the
/// scheduler's whole-queue reads, so with 10,000 queued jobs the server held
/// 91 MiB of RSS for a 16 MiB heap (heaptrack); with two arenas, 53 MiB at
/// the same speed. `MALLOC_ARENA_MAX` in the environment still wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes the allocator's settings, and runs
        // before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}
