//! The dashboard: the cluster at a glance: nodes and GPUs, the queue by
//! state, running jobs, recent critical events.

use crate::CurrentUser;
use crate::api::fetch;
use crate::view::actions::{Changes, Outcome, send};
use crate::view::live::{self, Next};
use crate::view::query::api;
use crate::view::tables::{EventsTable, JobsTable, NodesTable};
use crate::view::{ShowLoaded, loaded};
use gpuplane_api::Page;
use gpuplane_api::event::Event;
use gpuplane_api::experiment::{ProjectUsage, format_bytes};
use gpuplane_api::job::Job;
use gpuplane_api::node::{ClusterSummary, Node};
use gpuplane_api::paths;
use gpuplane_api::quota::Quota;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn Dashboard() -> impl IntoView {
    // The links the mlflow client prints (`/#/experiments/0/runs/RUN`, the
    // MLflow UI's) open the run's page here (the fragment is the browser's alone).
    let location = leptos_router::hooks::use_location();
    let navigate = leptos_router::hooks::use_navigate();
    Effect::new(move |_| {
        if let Some(target) = gpuplane_api::mlflow::console_path(&location.hash.get()) {
            navigate(
                &target,
                leptos_router::NavigateOptions {
                    replace: true,
                    ..Default::default()
                },
            );
        }
    });
    // Bumped by every new event, so the page follows the cluster.
    let tick = RwSignal::new(0u64);
    live::follow(
        || Some(paths::events_stream()),
        &["event"],
        move |_, _| {
            tick.update(|t| *t += 1);
            Next::Continue
        },
        |_| {},
    );
    let maintenance = Changes::new();
    let cluster = Resource::new(
        move || (tick.get(), maintenance.version().get()),
        |_| fetch::<ClusterSummary>(paths::cluster()),
    );
    let nodes = Resource::new(move || tick.get(), |_| fetch::<Page<Node>>(paths::nodes()));
    let running = Resource::new(
        move || tick.get(),
        |_| fetch::<Page<Job>>(api(&paths::jobs(), &[("status", "RUNNING"), ("limit", "20")])),
    );
    let usage = Resource::new(|| (), |_| fetch::<Page<ProjectUsage>>(paths::project_usage()));
    let critical = Resource::new(
        move || tick.get(),
        |_| {
            fetch::<Page<Event>>(api(
                &paths::events(),
                &[("severity", "critical"), ("limit", "10")],
            ))
        },
    );
    view! {
        <Title text="Dashboard" />
        <h1>"Dashboard"</h1>
        {loaded(cluster, move |c: ClusterSummary| view! {
            {c.maintenance.map(|notice| {
                let paused = c.dispatch_paused.then_some("Maintenance: nothing new starts, running jobs continue. ");
                view! { <p class="notice warn" role="status" data-testid="maintenance">{paused}{notice}</p> }
            })}
            <MaintenanceSwitch paused=c.dispatch_paused changes=maintenance />
            <section class="cards" data-testid="cluster">
                <div class="metric-card"><div class="metric-key">"Nodes online"</div>
                    <div class="metric-value">{c.nodes_online}</div>
                    <div class="muted">{c.nodes_offline} " offline"</div></div>
                <div class="metric-card"><div class="metric-key">"GPUs in use"</div>
                    <div class="metric-value">{c.gpus_in_use} " / " {c.gpus_total}</div>
                    <div class="muted">{(c.gpus_simulated > 0).then(|| format!("{} simulated", c.gpus_simulated))}</div></div>
                {["QUEUED", "DISPATCHING", "RUNNING", "FAILED", "LOST"].into_iter()
                    .map(|status| (status, c.jobs.get(status).copied().unwrap_or(0)))
                    .map(|(status, count)| view! {
                        <a class="metric-card link-card" href=format!("/jobs?status={status}")>
                            <div class="metric-key">{status}</div>
                            <div class="metric-value" data-testid=format!("queue-{}", status.to_lowercase())>{count}</div>
                        </a>
                    }).collect_view()}
            </section>
            {(!c.quotas.is_empty()).then(|| view! { <QuotasTable quotas=c.quotas /> })}
        })}
        <section class="card">
            <h2>"Nodes and GPUs"</h2>
            {loaded(nodes, |page: Page<Node>| view! { <NodesTable nodes=page.items /> })}
        </section>
        <section class="card">
            <h2>"Running jobs"</h2>
            {loaded(running, |page: Page<Job>| view! { <JobsTable jobs=page.items empty="Nothing is running. Queued jobs start as soon as GPUs are free." /> })}
        </section>
        <section class="card">
            <h2>"Recent critical events"</h2>
            {loaded(critical, |page: Page<Event>| view! { <EventsTable events=page.items empty="No critical events. OOMs, lost nodes, NaN losses and full disks would show here." /> })}
        </section>
        <section class="card">
            <h2>"Storage by project"</h2>
            {loaded(usage, |page: Page<ProjectUsage>| view! { <UsageTable usage=page.items /> })}
        </section>
    }
}

/// What each project keeps on the server (measured at most once a minute).
#[component]
fn UsageTable(usage: Vec<ProjectUsage>) -> impl IntoView {
    if usage.is_empty() {
        return view! { <p class="empty">"No projects."</p> }.into_any();
    }
    view! {
        <div class="table-scroll"><table data-testid="usage">
            <thead><tr><th>"Project"</th><th>"Runs"</th><th>"Archived"</th><th>"Metric points"</th><th>"Output lines"</th><th>"Stored"</th></tr></thead>
            <tbody>{usage.into_iter().map(|usage| view! {
                <tr data-project=usage.project.clone()>
                    <td>{usage.project.clone()}</td>
                    <td>{usage.runs}</td>
                    <td>{usage.archived_runs}</td>
                    <td>{usage.metric_points}</td>
                    <td>{usage.log_lines}</td>
                    <td title=format!("metrics {}, output {}, texts {}", format_bytes(usage.metric_bytes), format_bytes(usage.log_bytes), format_bytes(usage.text_bytes))>
                        {format_bytes(usage.total_bytes())}</td>
                </tr>
            }).collect_view()}</tbody>
        </table></div>
    }
    .into_any()
}

/// The quotas the user may see, with what is in use now.
#[component]
fn QuotasTable(quotas: Vec<Quota>) -> impl IntoView {
    let used = |used: i64, max: Option<i64>| match max {
        Some(max) => format!("{used} / {max}"),
        None => format!("{used} (no limit)"),
    };
    view! {
        <section class="card">
            <h2>"Quotas"</h2>
            <p class="muted">"Jobs over a quota wait in the queue and start as running jobs of their project or user finish."</p>
            <div class="table-scroll"><table data-testid="quotas">
                <thead><tr><th>"For"</th><th>"GPUs in use"</th><th>"Running jobs"</th></tr></thead>
                <tbody>
                    {quotas.into_iter().map(|quota| view! {
                        <tr>
                            <td>{format!("{} {}", quota.kind, quota.name)}</td>
                            <td>{used(quota.gpus_in_use, quota.max_gpus)}</td>
                            <td>{used(quota.running_jobs, quota.max_running_jobs)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table></div>
        </section>
    }
}

/// Maintenance mode on or off, for server admins only.
#[component]
fn MaintenanceSwitch(paused: bool, changes: Changes) -> impl IntoView {
    let user = expect_context::<CurrentUser>();
    let is_admin = move || user.is_admin();
    let message = RwSignal::new(String::new());
    let switch = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        if paused {
            send(changes, "DELETE", paths::maintenance(), None);
        } else {
            let body = serde_json::json!({"message": message.get_untracked().trim()});
            send(changes, "PUT", paths::maintenance(), Some(body));
        }
    };
    view! {
        <ShowLoaded when=is_admin>
            <form class="inline-form" data-testid="maintenance-switch" on:submit=switch>
                {if paused {
                    view! { <button type="submit">"End maintenance: dispatch again"</button> }.into_any()
                } else {
                    view! {
                        <label>"Maintenance message" <input name="message" required placeholder="Driver upgrade until 12:00 UTC" bind:value=message /></label>
                        <button type="submit" class="secondary">"Pause dispatch for maintenance"</button>
                    }.into_any()
                }}
            </form>
            <Outcome changes=changes done="" />
        </ShowLoaded>
    }
}
