//! `gpuctl usage`: GPU-hours allocated and used (from telemetry), by
//! project, user, node or GPU model, as a table, CSV or JSON.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::usage::{UsageBy, UsageReport, UsageRow};
use std::fmt::Write;

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// project, user, node or gpu_model.
    #[arg(long, default_value = "project")]
    by: UsageBy,
    /// How far back: 30d, 12h, 90m.
    #[arg(long, default_value = "30d")]
    since: String,
    /// Comma-separated values (with a header) instead of a table.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
}

pub async fn run(client: &Client, args: UsageArgs, out: &Output) -> Result<(), CliError> {
    let path = format!("usage?by={}&since={}", args.by, urlencode(&args.since));
    let report: UsageReport = client.get(&path).await?;
    if args.csv && !out.json {
        print!("{}", render_csv(&report));
        return Ok(());
    }
    out.emit(&report, render_table);
    Ok(())
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Waste: allocated but not used, measured time only.
fn idle_hours(row: &UsageRow) -> f64 {
    (row.allocated_gpu_hours - row.unmeasured_gpu_hours - row.used_gpu_hours).max(0.0)
}

fn render_table(report: &UsageReport) -> String {
    let mut text = format!(
        "GPU usage by {} from {} to {}\n",
        report.by, report.since, report.until
    );
    let _ = writeln!(
        text,
        "{:<28} {:>12} {:>10} {:>10} {:>6} {:>9}",
        report.by.as_str().to_uppercase(),
        "ALLOCATED_H",
        "USED_H",
        "IDLE_H",
        "USED%",
        "ATTEMPTS"
    );
    for row in report.rows.iter().chain(std::iter::once(&report.total)) {
        let measured = row.allocated_gpu_hours - row.unmeasured_gpu_hours;
        let percent = match measured > 0.0 {
            true => format!("{:.0}", 100.0 * row.used_gpu_hours / measured),
            false => "-".into(),
        };
        let _ = writeln!(
            text,
            "{:<28} {:>12.2} {:>10.2} {:>10.2} {:>6} {:>9}",
            gpuplane_api::terminal::visible(&row.key),
            row.allocated_gpu_hours,
            row.used_gpu_hours,
            idle_hours(row),
            percent,
            row.attempts
        );
    }
    if report.total.unmeasured_gpu_hours > 0.0 {
        let _ = writeln!(
            text,
            "{:.2} allocated GPU-hours had no telemetry (agents with --telemetry-interval 0).",
            report.total.unmeasured_gpu_hours
        );
    }
    text
}

fn render_csv(report: &UsageReport) -> String {
    let field = super::csv_field;
    let header = [
        report.by.as_str(),
        "allocated_gpu_hours",
        "used_gpu_hours",
        "idle_gpu_hours",
        "unmeasured_gpu_hours",
        "attempts",
    ];
    let mut text = header.map(field).join(",") + "\r\n";
    for row in &report.rows {
        let cells = [
            field(&row.key),
            format!("{:.6}", row.allocated_gpu_hours),
            format!("{:.6}", row.used_gpu_hours),
            format!("{:.6}", idle_hours(row)),
            format!("{:.6}", row.unmeasured_gpu_hours),
            row.attempts.to_string(),
        ];
        text.push_str(&cells.join(","));
        text.push_str("\r\n");
    }
    text
}
