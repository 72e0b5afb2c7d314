//! `gpuctl event list [--run-id R] [--job-id J] [--severity S] [--kind K]`.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::Page;
use gpuplane_api::event::Event;
use std::fmt::Write;

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    run_id: Option<String>,
    #[arg(long)]
    job_id: Option<String>,
    /// info, warning or critical.
    #[arg(long)]
    severity: Option<String>,
    /// OOM, JOB_LOST, DISK_LOW, AGENT_DISCONNECTED, ...
    #[arg(long)]
    kind: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: i64,
}

pub async fn list(client: &Client, args: ListArgs, out: &Output) -> Result<(), CliError> {
    let mut path = format!("events?limit={}", args.limit);
    for (name, value) in [
        ("run_id", &args.run_id),
        ("job_id", &args.job_id),
        ("severity", &args.severity),
        ("kind", &args.kind),
    ] {
        if let Some(value) = value {
            path.push_str(&format!("&{name}={value}"));
        }
    }
    let page: Page<Event> = client.get(&path).await?;
    out.emit(&page, |page| {
        if page.items.is_empty() {
            return "No events.".to_string();
        }
        let mut text = String::new();
        for event in &page.items {
            let _ = writeln!(
                text,
                "{}  {:<8} {:<18} {}{}",
                event.time,
                event.severity.as_str(),
                event.kind.as_str(),
                event
                    .job_id
                    .as_deref()
                    .map(|j| format!("{j}: "))
                    .unwrap_or_default(),
                event.message
            );
        }
        text
    });
    Ok(())
}
