//! `gpuctl sync`: replays the Python SDK's spool from the command line, as
//! `gpuplane.sync()` does: the same files (`$GPUCTL_SPOOL_DIR`, else
//! `~/.gpuctl/spool/sdk-*.jsonl`), order, locks and records
//! (`gpuplane-spool`). What the server refuses goes to the spool's
//! `quarantine/` with its reason, and the sync goes on; `--list` shows both
//! without sending anything, and `--quarantined` replays the quarantine too
//! (after fixing what the server named). An unreachable server, or a token
//! the server refuses (401), stops the sync with the files kept.

use crate::Output;
use crate::client::{CliError, Client};
use crate::exit::Failure;
use gpuplane_spool::{Listing, Method, OnTokenRefused, Report, SendError, Sender, Stop};
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// Only list the spooled and quarantined files (with the server's
    /// reason for each quarantined one); send nothing.
    #[arg(long, conflicts_with = "quarantined")]
    pub list: bool,
    /// Also replay the quarantined files, once what the server refused is
    /// fixed (a token, a project, a run).
    #[arg(long)]
    pub quarantined: bool,
}

/// What one `gpuctl sync` did.
#[derive(Debug, Serialize)]
pub struct SyncReport {
    /// The spool directory read.
    pub spool_dir: String,
    #[serde(flatten)]
    pub replay: Report,
    /// Files that stay in the quarantine, not replayed (without `--quarantined`).
    pub still_quarantined: usize,
}

/// `gpuctl`'s client as the spool's sender: a refusal keeps its status.
struct CliSender<'a>(&'a Client);

impl Sender for CliSender<'_> {
    async fn send(&self, method: Method, path: &str, body: &Value) -> Result<Value, SendError> {
        let answer = match method {
            Method::Post => self.0.post(path, body).await,
            Method::Patch => self.0.patch(path, body).await,
        };
        answer.map_err(|error| {
            let status = match error.failure {
                Failure::Unauthenticated => 401,
                Failure::Forbidden => 403,
                Failure::NotFound => 404,
                Failure::Conflict | Failure::Drift => 409,
                Failure::Invalid => 422,
                // A server error, an unreadable answer, or no server.
                Failure::Other | Failure::Unreachable => return SendError::Unreachable(error.error.message),
            };
            SendError::Refused {
                status,
                message: error.error.message,
            }
        })
    }
}

fn io_error(dir: &std::path::Path, error: &std::io::Error) -> CliError {
    CliError::new(
        Failure::Other,
        "spool_error",
        format!("{}: {error}", dir.display()),
    )
}

pub async fn run(client: &Client, args: &SyncArgs, out: &Output) -> Result<(), CliError> {
    let dir = gpuplane_spool::default_dir();
    if args.list {
        let listing = gpuplane_spool::list(&dir).map_err(|error| io_error(&dir, &error))?;
        out.emit(&listing, show_listing);
        return Ok(());
    }
    if args.quarantined {
        gpuplane_spool::restore_quarantined(&dir).map_err(|error| io_error(&dir, &error))?;
    }
    let mut replay = Report::default();
    let stopped =
        gpuplane_spool::replay_dir(&CliSender(client), &dir, OnTokenRefused::Stop, &mut replay).await;
    for quarantined in &replay.quarantined {
        let warning = format!(
            "warning: the server refused {} record(s) ({} point(s)): {} {}; kept in {}",
            quarantined.records, quarantined.points, quarantined.status, quarantined.reason, quarantined.file
        );
        eprintln!("{}", gpuplane_api::terminal::visible(&warning));
    }
    for file in &replay.unreadable {
        eprintln!("warning: not replayed: {}", gpuplane_api::terminal::visible(file));
    }
    if let Err(stop) = stopped {
        let failure = match stop {
            Stop::Unreachable(_) => Failure::Unreachable,
            Stop::TokenRefused { .. } => Failure::Unauthenticated,
            Stop::Io { .. } => Failure::Other,
        };
        return Err(CliError::new(
            failure,
            "sync_stopped",
            format!(
                "{stop}; the files not yet sent stay in the spool ({}) for the next sync",
                dir.display()
            ),
        ));
    }
    let still_quarantined = gpuplane_spool::list(&dir)
        .map(|listing| listing.quarantined.len())
        .unwrap_or(0);
    let report = SyncReport {
        spool_dir: dir.display().to_string(),
        replay,
        still_quarantined,
    };
    out.emit(&report, |r| {
        let replay = &r.replay;
        let mut text = format!(
            "replayed {} spool file(s) from {}: {} point(s), {} text(s)",
            replay.files, r.spool_dir, replay.points, replay.texts
        );
        for run in &replay.runs_created {
            text.push_str(&format!("\ncreated run {run}"));
        }
        if replay.skipped_lines > 0 {
            text.push_str(&format!("\nskipped {} unreadable line(s)", replay.skipped_lines));
        }
        if replay.busy > 0 {
            text.push_str(&format!(
                "\n{} file(s) are being replayed by another process",
                replay.busy
            ));
        }
        if r.still_quarantined > 0 {
            text.push_str(&format!(
                "\n{} file(s) the server refused are in quarantine: `gpuctl sync --list` shows why",
                r.still_quarantined
            ));
        }
        text
    });
    Ok(())
}

fn show_listing(listing: &Listing) -> String {
    let mut text = format!("spool: {}", listing.spool_dir);
    let mut section = |title: &str, files: &[gpuplane_spool::SpoolFile], why: &str| {
        text.push_str(&format!("\n{title}: {}", files.len()));
        for file in files {
            text.push_str(&format!(
                "\n  {}\n    run {}: {} record(s), {} point(s), {} text(s)",
                file.file, file.run, file.records, file.points, file.texts
            ));
            if let Some(reason) = &file.reason {
                let status = file.status.map(|s| format!("{s} ")).unwrap_or_default();
                text.push_str(&format!("\n    {why}: {status}{reason}"));
            }
        }
    };
    section(
        "waiting for the server (gpuctl sync)",
        &listing.pending,
        "spooled because",
    );
    section(
        "refused by the server (gpuctl sync --quarantined, once fixed)",
        &listing.quarantined,
        "the server answered",
    );
    text
}
