//! The Python SDK's spool on disk: what a training script could not send
//! because the server was unreachable, and, apart from it, what the server
//! refused. `gpuctl sync` and the agent (for what a finished job left) read
//! and replay these files here; the SDK (`sdk/python/gpuplane/_spool.py`)
//! writes and replays the same files by the same rules.
//!
//! A spool directory (`$GPUCTL_SPOOL_DIR`, else `~/.gpuctl/spool`; inside a
//! job, the attempt's own `spool/`) holds one `sdk-<id>.jsonl` file per run
//! and process, one JSON object a line, `type` saying which:
//!
//! - `run`: the run's id, or the `local_id`, `project` and `name` to create
//!   it with (a run started offline); `reason` says why the SDK spooled;
//! - `run_created`: the id a replay created it with (so it is created once);
//! - `batch`: metric points and texts, idempotent by `batch_id`;
//! - `config`, `details`, `alert`: the run's config, tags, notes and name, an alert;
//! - `finish`: the run is finished.
//!
//! What the server refuses (a 4xx other than 408 and 429) is never dropped
//! and never waits in the spool: it goes to `quarantine/` under the same
//! file name, after a `refused` record with the server's status and
//! message, and the replay goes on with the next record or file. Quarantined
//! files are replayed only when asked (`gpuctl sync --quarantined`, after
//! fixing what the server named). The one exception is a refusal of the
//! replaying token itself (401): with [`OnTokenRefused::Stop`] the replay
//! stops and keeps every file for a token the server takes.
//!
//! The directories may be written by a job (the agent replays a job's
//! spool): files are opened without following symbolic links and only when
//! they are regular files, and nothing is written through a link.

mod files;
mod replay;

pub use files::{
    Listing, SpoolFile, list, quarantined_files, real_dir, restore_quarantined, spool_files, summary,
};
pub use replay::{
    Method, OnTokenRefused, Quarantined, Report, SendError, Sender, Stop, replay_dir, replay_file,
};

use std::path::{Path, PathBuf};

/// The folder, inside a spool directory, of what the server refused.
pub const QUARANTINE: &str = "quarantine";

/// `$GPUCTL_SPOOL_DIR`, else `~/.gpuctl/spool` (the SDK's rule).
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUCTL_SPOOL_DIR").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".gpuctl").join("spool")
}

/// The quarantine folder of a spool directory.
pub fn quarantine_dir(dir: &Path) -> PathBuf {
    dir.join(QUARANTINE)
}

/// Whether a refusal is about one record (its content), so the records
/// after it still go; any other refusal (the token, the run) holds for the
/// rest of the file.
pub fn about_the_record(status: u16) -> bool {
    matches!(status, 400 | 409 | 413 | 422)
}

/// Whether an HTTP status means "try again later" rather than a refusal.
pub fn retry_later(status: u16) -> bool {
    status >= 500 || status == 408 || status == 429
}
