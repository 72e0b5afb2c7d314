//! `gpuctl validate FILE`: checks a job spec file here, with the server's own
//! code (`gpuplane_api::spec`: the same messages and field paths), naming an
//! unknown key with the closest known one. `--remote` also asks the server:
//! the project, the jobs it waits for, the image allowlist, and what would
//! keep it waiting now (no matching node, a quota, maintenance).

use crate::Output;
use crate::client::{CliError, Client};
use crate::commands::jobs::read_spec_file;
use crate::exit::Failure;
use gpuplane_api::error::FieldError;
use gpuplane_api::spec::{Policy, SpecCheck, validate};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// A job spec file (.toml, .yaml/.yml or .json), or an experiment
    /// folder (checked offline with its locked recipe).
    file: PathBuf,
    /// Also ask the server (the one `--server` or `gpuctl login` names).
    #[arg(long)]
    remote: bool,
}

#[derive(Serialize)]
struct Checked {
    file: String,
    valid: bool,
    /// From the server, with `--remote`.
    notes: Vec<String>,
}

pub async fn run(
    server: Option<String>,
    token: Option<String>,
    args: ValidateArgs,
    out: &Output,
) -> Result<(), CliError> {
    if args.file.is_dir() {
        return crate::commands::experiments::validate(server, token, &args.file, args.remote, out).await;
    }
    let file = args.file.display().to_string();
    let spec = read_spec_file(&args.file)?;
    validate(&spec, &Policy::default()).map_err(|errors| invalid(&file, errors))?;
    let mut notes = Vec::new();
    if args.remote {
        let client = Client::new(server, token)?;
        let check: SpecCheck = client.post("jobs/validate", &spec).await.map_err(|mut error| {
            if error.failure == Failure::Invalid && !error.error.details.is_empty() {
                error = invalid(&file, std::mem::take(&mut error.error.details));
            }
            error
        })?;
        notes = check.notes;
    }
    let checked = Checked {
        file,
        valid: true,
        notes,
    };
    out.emit(&checked, |checked| {
        let mut text = format!("{} is a valid job spec", checked.file);
        for note in &checked.notes {
            text.push_str(&format!("\nif submitted now it would wait: {note}"));
        }
        text
    });
    Ok(())
}

/// Exit 7 naming every bad field, as the server's 422 does.
fn invalid(file: &str, details: Vec<FieldError>) -> CliError {
    let message = match details.as_slice() {
        [one] => format!("{file}: {}: {}", one.field, one.message),
        many => format!("{file} has {} problems:", many.len()),
    };
    let mut error = CliError::new(Failure::Invalid, "validation_error", message);
    error.error.details = details;
    error
}
