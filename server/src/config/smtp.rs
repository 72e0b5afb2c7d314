//! The email settings read the way the sender uses them: `config.rs`
//! checks `smtp_url` and `smtp_from` with it at start-up, and the alert
//! sender (`alerts/send.rs`) makes its transport with it.

use lettre::{AsyncSmtpTransport, Tokio1Executor};
use std::time::Duration;

/// The SMTP transport `smtp_url` names (`smtp://`, `smtps://`), with a
/// timeout for each message.
pub fn transport(url: &str, timeout: Duration) -> anyhow::Result<AsyncSmtpTransport<Tokio1Executor>> {
    Ok(AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
        .map_err(|error| anyhow::anyhow!("smtp_url: {error}"))?
        .timeout(Some(timeout))
        .build())
}

/// Checks `smtp_url` and `smtp_from` as the sender will read them.
pub fn check(url: Option<&str>, from: &str) -> anyhow::Result<()> {
    if let Some(url) = url {
        transport(url, Duration::from_secs(1))?;
    }
    from.parse::<lettre::message::Mailbox>()
        .map_err(|error| anyhow::anyhow!("smtp_from `{from}`: {error}"))?;
    Ok(())
}
