//! `gpuctl hf link | unlink | status`: your Hugging Face Hub token, which
//! the server uses to check experiments' gated models and datasets and
//! gives to the jobs of recipes with `hf_token = true` as `HF_TOKEN`. The
//! token is read from stdin (never an argument) and never shown back.

use crate::Output;
use crate::client::{CliError, Client};
use crate::exit::Failure;
use gpuplane_api::recipe::{HubLink, HubStatus};
use std::io::{BufRead, IsTerminal};

#[derive(Debug, clap::Subcommand)]
pub enum HubCommand {
    /// Link your Hub token, read from stdin (`gpuctl hf link < token.txt`,
    /// or paste it); the server checks it with the Hub.
    Link,
    /// Forget your Hub token.
    Unlink,
    /// Whether you have linked a token, and the Hub the server checks against.
    Status,
}

pub async fn run(client: &Client, command: HubCommand, out: &Output) -> Result<(), CliError> {
    let status: HubStatus = match command {
        HubCommand::Link => {
            if std::io::stdin().is_terminal() {
                eprint!(
                    "Paste your Hugging Face token (https://huggingface.co/settings/tokens), then Enter: "
                );
            }
            let mut token = String::new();
            std::io::stdin().lock().read_line(&mut token).map_err(|error| {
                CliError::new(
                    Failure::Invalid,
                    "invalid_token",
                    format!("cannot read the token from stdin: {error}"),
                )
            })?;
            let token = token.trim().to_string();
            if token.is_empty() {
                return Err(CliError::new(
                    Failure::Invalid,
                    "invalid_token",
                    "give the token on stdin: gpuctl hf link < token.txt",
                ));
            }
            client.put("hf/token", &HubLink { token }).await?
        }
        HubCommand::Unlink => client.delete("hf/token").await?,
        HubCommand::Status => client.get("hf").await?,
    };
    for warning in &status.warnings {
        eprintln!("warning: {warning}");
    }
    out.emit(&status, |status| {
        let hub = status
            .endpoint
            .as_deref()
            .unwrap_or("(no Hub: the server's precheck is off)");
        match (&status.linked, &status.hub_user) {
            (true, Some(user)) => format!(
                "Hub token linked (account {user}) at {}; Hub: {hub}",
                status.linked_at.as_deref().unwrap_or("?")
            ),
            (true, None) => format!(
                "Hub token linked (not verified) at {}; Hub: {hub}",
                status.linked_at.as_deref().unwrap_or("?")
            ),
            _ => format!("No Hub token linked; Hub: {hub}\nlink one: gpuctl hf link < token.txt"),
        }
    });
    Ok(())
}
