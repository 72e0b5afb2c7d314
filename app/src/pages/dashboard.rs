//! The dashboard: the cluster at a glance: nodes and GPUs, the queue by
//! state, running jobs, recent critical events.

use crate::api::fetch;
use crate::view::live::{self, Next};
use crate::view::loaded;
use crate::view::query::api;
use crate::view::tables::{EventsTable, JobsTable, NodesTable};
use gpuplane_api::Page;
use gpuplane_api::event::Event;
use gpuplane_api::job::Job;
use gpuplane_api::node::{ClusterSummary, Node};
use gpuplane_api::paths;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn Dashboard() -> impl IntoView {
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
    let cluster = Resource::new(move || tick.get(), |_| fetch::<ClusterSummary>(paths::cluster()));
    let nodes = Resource::new(move || tick.get(), |_| fetch::<Page<Node>>(paths::nodes()));
    let running = Resource::new(
        move || tick.get(),
        |_| fetch::<Page<Job>>(api(&paths::jobs(), &[("status", "RUNNING"), ("limit", "20")])),
    );
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
        {loaded(cluster, |c: ClusterSummary| view! {
            {c.maintenance.map(|notice| view! { <p class="notice warn" role="status" data-testid="maintenance">{notice}</p> })}
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
    }
}
