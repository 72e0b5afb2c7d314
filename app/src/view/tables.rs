//! Tables more than one page shows: nodes with their GPUs, events, jobs.

use crate::view::format::{self, status_badge};
use gpuplane_api::event::Event;
use gpuplane_api::job::Job;
use gpuplane_api::node::{GpuSource, Node};
use leptos::prelude::*;

fn reading<T: std::fmt::Display>(value: Option<T>, unit: &str) -> String {
    value.map(|v| format!("{v}{unit}")).unwrap_or_else(|| "–".into())
}

#[component]
pub fn NodesTable(nodes: Vec<Node>) -> impl IntoView {
    if nodes.is_empty() {
        return view! {
            <p class="empty">"No nodes yet. Start an agent on a GPU host: "
                <code>"gpuplane-agent --server URL --token AGENT_TOKEN"</code>
                " (add " <code>"--fake-gpus 2"</code> " to try it without GPUs)."</p>
        }
        .into_any();
    }
    view! {
        <div class="table-scroll">
        <table data-testid="nodes">
            <thead><tr><th>"Node"</th><th>"Status"</th><th>"GPU"</th><th>"Model"</th><th>"Memory"</th>
                <th>"Utilisation"</th><th>"Temperature"</th><th>"Last seen"</th></tr></thead>
            <tbody>
                {nodes.into_iter().map(|node| {
                    let rows = node.gpus.len().max(1);
                    let runners = match &node.runners {
                        Some(runners) => format!("runs {}", runners.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")),
                        None => "agent too old to say what it runs: no jobs".to_string(),
                    };
                    let first = view! {
                        <td rowspan=rows><strong>{node.name.clone()}</strong><br /><span class="muted">{node.hostname.clone()}</span>
                            <br /><span class="muted" data-testid="node-runners">{runners}</span>
                            <br /><span class="muted" data-testid="node-isolation">{format!("GPU isolation {}",
                                node.isolation.clone().unwrap_or_else(|| "advisory: its agent does not say".into()))}</span></td>
                        <td rowspan=rows>{status_badge(node.status.as_str())}</td>
                    };
                    let last_seen = format::time(&node.last_seen_at);
                    if node.gpus.is_empty() {
                        return view! {
                            <tr>{first}<td colspan="5" class="muted">"no GPUs (CPU jobs only)"</td><td>{last_seen}</td></tr>
                        }.into_any();
                    }
                    let mut first = Some(first);
                    node.gpus.into_iter().map(|gpu| {
                        let simulated = gpu.source == GpuSource::Simulated;
                        let memory = match (gpu.memory_used_mib, gpu.memory_total_mib) {
                            (Some(used), Some(total)) => format!("{} / {} GiB", used / 1024, total / 1024),
                            (None, Some(total)) => format!("? / {} GiB", total / 1024),
                            _ => "–".into(),
                        };
                        view! {
                            <tr>
                                {first.take()}
                                <td>{gpu.index}</td>
                                <td>{gpu.model}{simulated.then(|| view! { " " <span class="badge simulated">"simulated"</span> })}</td>
                                <td>{memory}</td>
                                <td>{reading(gpu.utilization_percent, " %")}</td>
                                <td>{reading(gpu.temperature_c, " °C")}</td>
                                <td>{last_seen.clone()}</td>
                            </tr>
                        }
                    }).collect_view().into_any()
                }).collect_view()}
            </tbody>
        </table>
        </div>
    }
    .into_any()
}

#[component]
pub fn EventsTable(events: Vec<Event>, #[prop(into)] empty: String) -> impl IntoView {
    let rows = events
        .into_iter()
        .map(|event| {
            let severity = event.severity.as_str();
            view! {
                <tr class=format!("severity-{severity}")>
                    <td>{format::time(&event.time)}</td>
                    <td><span class=format!("badge severity-{severity}")>{severity}</span></td>
                    <td><code>{event.kind.as_str()}</code></td>
                    <td>{event.message}</td>
                    <td>
                        {event.job_id.map(|id| view! { <a href=format!("/jobs/{id}")>{id.clone()}</a> " " })}
                        {event.run_id.map(|id| view! { <a href=format!("/runs/{id}")>"run"</a> })}
                    </td>
                </tr>
            }
            .into_any()
        })
        .collect();
    table_or(
        empty,
        "events",
        &["Time", "Severity", "Kind", "Message", "Job / run"],
        rows,
    )
}

#[component]
pub fn JobsTable(jobs: Vec<Job>, #[prop(into)] empty: String) -> impl IntoView {
    let rows = jobs
        .into_iter()
        .map(|job| {
                    let placement = job.attempts.last().map(|a| {
                        let gpus = a.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
                        if gpus.is_empty() { a.node.clone() } else { format!("{} [{gpus}]", a.node) }
                    }).unwrap_or_else(|| "–".into());
                    // A QUEUED job's, or a DISPATCHING one's that Slurm holds queued.
                    let reason = job.queued_reason.clone();
                    view! {
                        <tr>
                            <td><a href=format!("/jobs/{}", job.id)>{job.title()}</a><br /><span class="muted mono">{job.id}</span></td>
                            <td>{status_badge(job.status.as_str())}
                                {job.failure_reason.map(|r| view! { <br /><span class="muted">{r.as_str()}</span> })}
                                {reason.map(|r| view! { <br /><span class="muted">{r}</span> })}</td>
                            <td>{job.project}</td>
                            <td>{job.submitted_by.unwrap_or_else(|| "–".into())}</td>
                            <td>{placement}</td>
                            <td>{format::time(&job.created_at)}</td>
                            <td><a href=format!("/runs/{}", job.run_id)>"run"</a></td>
                        </tr>
                    }
            .into_any()
        })
        .collect();
    table_or(
        empty,
        "jobs",
        &[
            "Job",
            "Status",
            "Project",
            "User",
            "Node / GPUs",
            "Submitted",
            "Run",
        ],
        rows,
    )
}

/// A scrollable table with a header row, or `empty` when there are no rows.
fn table_or(
    empty: String,
    test_id: &'static str,
    headers: &'static [&'static str],
    rows: Vec<AnyView>,
) -> AnyView {
    if rows.is_empty() {
        return view! { <p class="empty">{empty}</p> }.into_any();
    }
    view! {
        <div class="table-scroll">
            <table data-testid=test_id>
                <thead><tr>{headers.iter().map(|header| view! { <th>{*header}</th> }).collect_view()}</tr></thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
    .into_any()
}
