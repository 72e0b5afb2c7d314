//! The real `gpuctl` binary, run as a user would: a private home
//! (`GPUCTL_HOME`), stdin from /dev/null, and no credentials leaking in from
//! the test's own environment.

use crate::binary;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `gpuctl` with `home` as its home (and working directory, so it runs
/// outside any git checkout unless a test says otherwise); add `.args(…)`
/// and env, then run it.
pub fn command(home: &Path) -> Command {
    let mut command = Command::new(binary("gpuctl"));
    command
        .current_dir(home)
        .env("GPUCTL_HOME", home)
        .env_remove("GPUCTL_SERVER")
        .env_remove("GPUCTL_TOKEN")
        .stdin(Stdio::null());
    command
}

/// Runs `gpuctl ARGS` with `home` as its home and waits for it.
pub fn gpuctl(home: &Path, args: &[&str]) -> Output {
    command(home).args(args).output().expect("gpuctl runs")
}

/// Runs `gpuctl ARGS` against a server (its URL and a token) as a user
/// whose home is `home`; panics with both streams unless it succeeded.
pub fn succeeds(home: &Path, (server, token): (&str, &str), args: &[&str]) -> Output {
    let output = command(home)
        .args(args)
        .env("GPUCTL_SERVER", server)
        .env("GPUCTL_TOKEN", token)
        .output()
        .expect("gpuctl runs");
    assert!(
        output.status.success(),
        "{args:?}: {}{}",
        stdout(&output),
        stderr(&output)
    );
    output
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

/// The JSON `gpuctl --json` printed; panics with both streams when it is not JSON.
pub fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(output), stderr(output)))
}
