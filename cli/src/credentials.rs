//! Stored credentials: `~/.gpuctl/credentials.json`, readable by the owner only.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub server: String,
    pub token: String,
}

/// `~/.gpuctl`, or `$GPUCTL_HOME` when set (tests and multiple identities).
pub fn home() -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUCTL_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".gpuctl")
}

fn path() -> PathBuf {
    home().join("credentials.json")
}

pub fn load() -> Option<Credentials> {
    let text = std::fs::read_to_string(path()).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes the credentials with mode 0600 (replacing the file atomically).
pub fn save(credentials: &Credentials) -> anyhow::Result<PathBuf> {
    let dir = home();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let target = path();
    let temporary = dir.join(".credentials.json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    file.write_all(serde_json::to_string_pretty(credentials)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, &target)?;
    Ok(target)
}

/// Removes stored credentials; `false` when there were none.
pub fn remove() -> anyhow::Result<bool> {
    match std::fs::remove_file(path()) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error.into()),
    }
}
