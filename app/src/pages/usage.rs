//! `/usage`: GPU-hours allocated to jobs against GPU-hours their GPUs
//! worked (from telemetry), by project, user, node or GPU model over the
//! last day, week or month (`?by=`, `?since=`), as bars and a table, so
//! waste is visible per team. `gpuctl usage` prints the same report.

use crate::api::fetch;
use crate::view::loaded;
use crate::view::query::{api, link};
use gpuplane_api::paths;
use gpuplane_api::usage::{UsageBy, UsageReport, UsageRow};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

const SPANS: [(&str, &str); 3] = [("1d", "a day"), ("7d", "a week"), ("30d", "30 days")];
/// The bars' width for the largest allocation, in SVG units.
const BAR_WIDTH: f64 = 560.0;
const ROW_HEIGHT: f64 = 26.0;
const LABEL_WIDTH: f64 = 180.0;

#[component]
pub fn Usage() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str, default: &str| query.read().get(key).unwrap_or_else(|| default.to_string());
    let report = Resource::new(
        move || (param("by", "project"), param("since", "30d")),
        |(by, since)| fetch::<UsageReport>(api(&paths::usage(), &[("by", &by), ("since", &since)])),
    );
    let choices = move || {
        let current = query.read_untracked();
        let by = UsageBy::ALL.iter().map(|by| {
            let href = link("/usage", &current, &[("by", Some(by.as_str()))]);
            view! { <a href=href data-testid="usage-by">{by.as_str()}</a> " " }
        });
        let spans = SPANS.map(|(span, label)| {
            let href = link("/usage", &current, &[("since", Some(span))]);
            view! { <a href=href>{label}</a> " " }
        });
        view! { <p>"By " {by.collect_view()} " · over " {spans.into_iter().collect_view()}</p> }
    };
    view! {
        <Title text="GPU usage" />
        <h1>"GPU usage"</h1>
        {choices}
        {loaded(report, move |report: UsageReport| view! {
            <section class="card">
                <p class="muted">{format!("By {} from {} to {}: allocated (light) and used (dark) GPU-hours.", report.by, report.since, report.until)}</p>
                {chart(&report.rows)}
                <table class="table" data-testid="usage">
                    <thead><tr><th>{report.by.as_str()}</th><th>"Allocated GPU-h"</th><th>"Used GPU-h"</th><th>"Used"</th><th>"No telemetry GPU-h"</th><th>"Attempts"</th></tr></thead>
                    <tbody>{report.rows.iter().chain(std::iter::once(&report.total)).map(row).collect_view()}</tbody>
                </table>
            </section>
        })}
    }
}

fn used_percent(row: &UsageRow) -> String {
    let measured = row.allocated_gpu_hours - row.unmeasured_gpu_hours;
    match measured > 0.0 {
        true => format!("{:.0} %", 100.0 * row.used_gpu_hours / measured),
        false => "–".into(),
    }
}

fn row(usage: &UsageRow) -> impl IntoView + use<> {
    view! {
        <tr data-key=usage.key.clone()>
            <td>{usage.key.clone()}</td>
            <td>{format!("{:.2}", usage.allocated_gpu_hours)}</td>
            <td>{format!("{:.2}", usage.used_gpu_hours)}</td>
            <td>{used_percent(usage)}</td>
            <td>{format!("{:.2}", usage.unmeasured_gpu_hours)}</td>
            <td>{usage.attempts}</td>
        </tr>
    }
}

/// A bar per row: its allocation, with the used part drawn over it.
fn chart(rows: &[UsageRow]) -> impl IntoView + use<> {
    let largest = rows.iter().map(|row| row.allocated_gpu_hours).fold(0.0, f64::max);
    let scale = if largest > 0.0 { BAR_WIDTH / largest } else { 0.0 };
    let height = ROW_HEIGHT * rows.len().max(1) as f64;
    let bars = rows
        .iter()
        .enumerate()
        .map(|(n, usage)| {
            let y = n as f64 * ROW_HEIGHT;
            view! {
                <g>
                    <text x="0" y=y + 17.0 class="chart-label">{usage.key.clone()}</text>
                    <rect x=LABEL_WIDTH y=y + 4.0 width=usage.allocated_gpu_hours * scale height="18" class="bar-allocated">
                        <title>{format!("{}: {:.2} GPU-h allocated", usage.key, usage.allocated_gpu_hours)}</title>
                    </rect>
                    <rect x=LABEL_WIDTH y=y + 4.0 width=usage.used_gpu_hours * scale height="18" class="bar-used">
                        <title>{format!("{}: {:.2} GPU-h used ({})", usage.key, usage.used_gpu_hours, used_percent(usage))}</title>
                    </rect>
                </g>
            }
        })
        .collect_view();
    view! {
        <svg class="usage-chart" data-testid="usage-chart" role="img" aria-label="GPU-hours allocated and used"
            viewBox=format!("0 0 {} {height}", LABEL_WIDTH + BAR_WIDTH + 10.0) width="100%">
            {bars}
        </svg>
    }
}
