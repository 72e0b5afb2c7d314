//! What a share link opens, for anyone who holds it (no account, no
//! token): the run's read-only page at `/s/{secret}`, its charts
//! (`chart.svg`, `chart.png`: image URLs that work in chat previews) and its
//! job's kept output (`logs.txt`). Nothing else: no other run, no compared
//! runs, no change. Every request goes through `runs::shares::open`, which
//! refuses expired, revoked and forbidden links as if they never existed
//! and records the view.

use crate::api::error::{ApiError, ApiQuery};
use crate::jobs;
use crate::logs;
use crate::runs::charts::{self, ChartQuery, ChartRequest};
use crate::runs::{self, shares};
use crate::state::AppState;
use crate::store::time::rfc3339;
use axum::Router;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gpuplane_api::auth::ClientAddress;
use gpuplane_api::metric::Run;
use std::fmt::Write;

/// Charts drawn on the page, at most.
const MAX_CHARTS: usize = 24;
/// Output lines shown on the page (`logs.txt` has every kept line).
const PAGE_LOG_LINES: i64 = 200;

/// The page's own policy: its stylesheet and this server's images only.
const PAGE_POLICY: &str = "default-src 'none'; img-src 'self'; style-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/s/{secret}", get(page))
        .route("/s/{secret}/chart.svg", get(chart_svg))
        .route("/s/{secret}/chart.png", get(chart_png))
        .route("/s/{secret}/logs.txt", get(logs_text))
}

/// Opens the link for one request, recording it.
async fn open(
    state: &AppState,
    secret: &str,
    what: &str,
    address: ClientAddress,
    headers: &HeaderMap,
) -> Result<shares::Opened, ApiError> {
    // Links are open to anyone who has them: requests per address are counted.
    let key = address.0.to_string();
    if let Err(wait) = state.share_view_limiter.check(&key).await {
        return Err(ApiError::RateLimited(format!(
            "too many requests through share links from this address; try again in {} s",
            wait.as_secs().max(1)
        )));
    }
    state.share_view_limiter.fail(&key).await;
    let visit = shares::Visit {
        what,
        address: Some(address.0.to_string()),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|agent| agent.to_str().ok()),
    };
    Ok(shares::open(&state.db, secret, visit).await?)
}

fn private(content_type: &'static str) -> [(header::HeaderName, HeaderValue); 3] {
    [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-store"),
        ),
        (
            header::HeaderName::from_static("x-robots-tag"),
            HeaderValue::from_static("noindex"),
        ),
    ]
}

async fn page(
    State(state): State<AppState>,
    Path(secret): Path<String>,
    Extension(address): Extension<ClientAddress>,
    headers: HeaderMap,
) -> Response {
    let opened = match open(&state, &secret, "page", address, &headers).await {
        Ok(opened) => opened,
        Err(ApiError::NotFound(message)) => {
            let body = html_page(
                "Link not found",
                &format!("<h1>Link not found</h1><p>{}</p>", escape(&message)),
            );
            return (StatusCode::NOT_FOUND, private("text/html; charset=utf-8"), body).into_response();
        }
        Err(error) => return error.into_response(),
    };
    match render_page(&state, &secret, &opened).await {
        Ok(body) => {
            let mut response = (private("text/html; charset=utf-8"), body).into_response();
            response.headers_mut().insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(PAGE_POLICY),
            );
            response
        }
        Err(error) => error.into_response(),
    }
}

async fn render_page(state: &AppState, secret: &str, opened: &shares::Opened) -> Result<String, ApiError> {
    let run = runs::get(&state.db, &opened.run_id).await?;
    let job = match &run.job_id {
        Some(job_id) => Some(jobs::store::get(&state.db, job_id).await?),
        None => None,
    };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p class=\"muted\">{project} · read-only link{by}, open until {expires}</p><h1>{name}</h1>",
        project = escape(&run.project),
        name = escape(&run.name),
        by = opened
            .created_by
            .as_deref()
            .map(|by| format!(" shared by {}", escape(by)))
            .unwrap_or_default(),
        expires = escape(&when(&rfc3339(opened.expires_at))),
    );
    summary(&mut body, &run, job.as_ref());
    latest_and_charts(&mut body, secret, &run);
    config(&mut body, &run);
    if let Some(job) = &job {
        let attempt = logs::resolve_attempt(&state.db, &job.id, None).await?;
        let (_, kept) =
            logs::tail(&state.db, &job.id, attempt, logs::Only::default(), PAGE_LOG_LINES).await?;
        let _ = write!(
            body,
            "<section class=\"card\"><h2>Output</h2><p class=\"muted\">The last {} lines of attempt {attempt}; \
             <a href=\"/s/{secret}/logs.txt\">every kept line</a>.</p><pre class=\"log\" data-testid=\"shared-log\">",
            kept.lines.len()
        );
        for line in &kept.lines {
            let _ = writeln!(body, "{}", escape(&line.text));
        }
        body.push_str("</pre></section>");
    }
    Ok(html_page(&run.name, &body))
}

fn summary(body: &mut String, run: &Run, job: Option<&gpuplane_api::job::Job>) {
    let _ = write!(
        body,
        "<section class=\"card\"><dl class=\"facts\"><dt>Status</dt><dd data-testid=\"shared-status\">{}</dd>",
        escape(&run.status)
    );
    if let Some(seconds) = run.duration_s {
        let _ = write!(
            body,
            "<dt>Duration</dt><dd>{}</dd>",
            escape(&gpuplane_api::duration::format_seconds(seconds))
        );
    }
    let _ = write!(
        body,
        "<dt>Created</dt><dd>{}</dd>",
        escape(&when(&run.created_at))
    );
    if !run.tags.is_empty() {
        let _ = write!(body, "<dt>Tags</dt><dd>{}</dd>", escape(&run.tags.join(" ")));
    }
    if let Some(job) = job
        && let Some(reason) = &job.failure_reason
    {
        let detail = job.failure_detail.as_deref().unwrap_or_default();
        let _ = write!(
            body,
            "<dt>Failure</dt><dd>{}: {}</dd>",
            escape(reason.as_str()),
            escape(detail)
        );
    }
    body.push_str("</dl>");
    if !run.notes.is_empty() {
        let _ = write!(body, "<p>{}</p>", escape(&run.notes));
    }
    body.push_str("</section>");
}

fn latest_and_charts(body: &mut String, secret: &str, run: &Run) {
    body.push_str("<section class=\"card\"><h2>Metrics</h2>");
    if run.latest.is_empty() {
        body.push_str("<p class=\"empty\">No metrics yet.</p></section>");
        return;
    }
    body.push_str("<table data-testid=\"shared-latest\"><thead><tr><th>Metric</th><th>Step</th><th>Latest</th></tr></thead><tbody>");
    for (key, latest) in &run.latest {
        let _ = write!(
            body,
            "<tr><td class=\"mono\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(key),
            latest.step,
            escape(&latest.value.describe())
        );
    }
    body.push_str("</tbody></table>");
    for key in run.latest.keys().take(MAX_CHARTS) {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("key", key)
            .finish();
        let _ = write!(
            body,
            "<figure><img src=\"/s/{secret}/chart.svg?{query}\" alt=\"{alt}\" width=\"800\" height=\"320\"></figure>",
            alt = escape(key)
        );
    }
    if run.latest.len() > MAX_CHARTS {
        let _ = write!(
            body,
            "<p class=\"muted\">The first {MAX_CHARTS} metrics are charted.</p>"
        );
    }
    body.push_str("</section>");
}

fn config(body: &mut String, run: &Run) {
    if run.config.is_empty() {
        return;
    }
    body.push_str("<section class=\"card\"><h2>Config</h2><table><tbody>");
    for (key, value) in &run.config {
        let _ = write!(
            body,
            "<tr><td class=\"mono\">{}</td><td class=\"mono\">{}</td></tr>",
            escape(key),
            escape(&gpuplane_api::experiment::show_value(value))
        );
    }
    body.push_str("</tbody></table></section>");
}

async fn shared_chart(
    state: &AppState,
    secret: &str,
    what: &str,
    address: ClientAddress,
    headers: &HeaderMap,
    query: ChartQuery,
) -> Result<String, ApiError> {
    let opened = open(state, secret, what, address, headers).await?;
    if query.compares() {
        return Err(ApiError::field("compare", "a share link shows its own run only"));
    }
    Ok(charts::svg(&state.db, &ChartRequest::check(opened.run_id, query)?).await?)
}

async fn chart_svg(
    State(state): State<AppState>,
    Path(secret): Path<String>,
    Extension(address): Extension<ClientAddress>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ChartQuery>,
) -> Result<Response, ApiError> {
    let svg = shared_chart(&state, &secret, "chart.svg", address, &headers, query).await?;
    Ok((private("image/svg+xml"), svg).into_response())
}

async fn chart_png(
    State(state): State<AppState>,
    Path(secret): Path<String>,
    Extension(address): Extension<ClientAddress>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ChartQuery>,
) -> Result<Response, ApiError> {
    let svg = shared_chart(&state, &secret, "chart.png", address, &headers, query).await?;
    Ok((private("image/png"), charts::png(svg).await?).into_response())
}

/// Every output line the server keeps of the job's latest attempt, as text.
async fn logs_text(
    State(state): State<AppState>,
    Path(secret): Path<String>,
    Extension(address): Extension<ClientAddress>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let opened = open(&state, &secret, "logs", address, &headers).await?;
    let run = runs::get(&state.db, &opened.run_id).await?;
    let mut text = String::new();
    if let Some(job_id) = &run.job_id {
        let attempt = logs::resolve_attempt(&state.db, job_id, None).await?;
        let keep = state.config.settings.log_tail_lines * 2;
        let (_, kept) = logs::tail(&state.db, job_id, attempt, logs::Only::default(), keep).await?;
        for line in &kept.lines {
            let _ = writeln!(text, "{}", line.text);
        }
    }
    Ok((private("text/plain; charset=utf-8"), text).into_response())
}

/// A whole HTML page around `body`, with the console's stylesheet.
fn html_page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\"><title>{} · GPUPlane</title>\
         <link rel=\"stylesheet\" href=\"/pkg/gpuplane.css\"></head>\
         <body><header class=\"topbar\"><span class=\"brand\">GPUPlane</span></header>\
         <main class=\"shared\">{body}</main></body></html>",
        escape(title)
    )
}

/// An RFC 3339 time as people read it: `2026-12-04 18:11:36 UTC`.
fn when(rfc3339: &str) -> String {
    let seconds = rfc3339.split('.').next().unwrap_or(rfc3339).trim_end_matches('Z');
    format!("{} UTC", seconds.replacen('T', " ", 1))
}

/// Text made safe to put in HTML, between tags or in a quoted attribute.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    #[test]
    fn escape_leaves_no_markup() {
        assert_eq!(
            super::escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }
}
