//! One module per command family.

pub mod admin;
pub mod alerts;
pub mod arrays;
pub mod auth;
pub mod evals;
pub mod events;
pub mod experiments;
pub mod hub;
pub mod import;
pub mod jobs;
pub mod logs;
pub mod mcp;
pub mod projects;
pub mod recipes;
pub mod runs;
pub mod status;
pub mod sweeps;
pub mod sync;
pub mod usage;
pub mod validate;

/// `max` or `min`, for `--goal`.
pub fn parse_goal(text: &str) -> Result<gpuplane_api::metric::Goal, String> {
    gpuplane_api::metric::Goal::parse(&text.to_lowercase())
        .ok_or_else(|| format!("`{text}` is not a goal: use max or min"))
}

/// `newest` or `primary_metric` (also `primary`), for `--sort`.
pub fn parse_sort(text: &str) -> Result<String, String> {
    match text {
        "newest" => Ok("newest".into()),
        "primary" | "primary_metric" | "primary-metric" => Ok("primary_metric".into()),
        other => Err(format!("`{other}` is not a sort: use newest or primary_metric")),
    }
}

/// One RFC 4180 CSV field: quoted when it holds a comma, quote or line
/// break; a cell a spreadsheet would run as a formula (`=`, `+`, `-`, `@`
/// first) is made text, and control characters are shown, never sent to a
/// terminal.
pub fn csv_field(text: &str) -> String {
    let text = gpuplane_api::terminal::visible(text);
    let text = gpuplane_api::terminal::csv_text(&text);
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}
