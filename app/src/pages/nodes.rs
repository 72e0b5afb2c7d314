//! `/nodes` and `/events`: the hosts with their GPUs, and what happened.

use crate::api::fetch;
use crate::view::loaded;
use crate::view::query::{api, link};
use crate::view::tables::{EventsTable, NodesTable};
use gpuplane_api::Page;
use gpuplane_api::event::Event;
use gpuplane_api::node::Node;
use gpuplane_api::paths;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn Nodes() -> impl IntoView {
    let nodes = Resource::new(|| (), |_| fetch::<Page<Node>>(paths::nodes()));
    view! {
        <Title text="Nodes" />
        <h1>"Nodes"</h1>
        <section class="card">{loaded(nodes, |page: Page<Node>| view! { <NodesTable nodes=page.items /> })}</section>
    }
}

#[component]
pub fn Events() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    let events = Resource::new(
        move || ["severity", "kind", "run_id", "job_id", "before"].map(param),
        |[severity, kind, run_id, job_id, before]| {
            fetch::<Page<Event>>(api(
                &paths::events(),
                &[
                    ("severity", &severity),
                    ("kind", &kind),
                    ("run_id", &run_id),
                    ("job_id", &job_id),
                    ("before", &before),
                ],
            ))
        },
    );
    view! {
        <Title text="Events" />
        <h1>"Events"</h1>
        <form method="get" class="inline-form card" role="search">
            <label>"Severity"
                <select name="severity">
                    <option value="" selected=move || param("severity").is_empty()>"any"</option>
                    {["info", "warning", "critical"].map(|s| view! { <option value=s selected=move || param("severity") == s>{s}</option> })}
                </select>
            </label>
            <label>"Kind" <input name="kind" prop:value=move || param("kind") placeholder="e.g. OOM" /></label>
            <label>"Run" <input name="run_id" prop:value=move || param("run_id") placeholder="run id" /></label>
            <button type="submit">"Filter"</button>
            <a href="/events">"Clear"</a>
        </form>
        <section class="card">
            {loaded(events, move |page: Page<Event>| {
                let older = page.next_before.map(|before| link("/events", &query.read_untracked(), &[("before", Some(&before.to_string()))]));
                view! {
                    <EventsTable events=page.items empty="No events match." />
                    {older.map(|href| view! { <nav class="pager"><a href=href>"Older →"</a></nav> })}
                }
            })}
        </section>
    }
}
