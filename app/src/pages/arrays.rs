//! A job array above its tasks on `/jobs?array=ID`: its indices, `%`
//! limit and tasks by state (read again every 2 s while tasks are open),
//! and for editors of its project a cancel of every task that has not
//! ended (after a confirmation).

use crate::api::fetch;
use crate::view::actions::{Changes, Outcome, send};
use crate::view::live;
use crate::view::{ShowLoaded, loaded};
use gpuplane_api::Page;
use gpuplane_api::array::JobArray;
use gpuplane_api::paths;
use gpuplane_api::project::{Project, Role};
use leptos::prelude::*;

#[component]
pub fn ArrayCard(array_id: String) -> impl IntoView {
    let changes = Changes::new();
    // Kept outside the card's body, which is drawn again on each refresh:
    // an open confirmation must survive a refresh between its two clicks.
    let confirming = RwSignal::new(false);
    // While tasks have not ended, their states are read again every 2 s.
    let (tick, open) = live::refreshing(2_000);
    let array = Resource::new(
        move || (array_id.clone(), changes.version().get(), tick.get()),
        |(id, ..)| fetch::<JobArray>(paths::array(&id)),
    );
    let projects = Resource::new(|| (), |_| fetch::<Page<Project>>(paths::projects()));
    view! {
        {loaded(array, move |array: JobArray| {
            let project = array.project.clone();
            let may_change = move || {
                projects.get().and_then(Result::ok).is_some_and(|page| {
                    page.items.iter().any(|p| p.name == project && p.role >= Role::Editor)
                })
            };
            let still_open = ["QUEUED", "DISPATCHING", "RUNNING"]
                .iter()
                .any(|state| array.states.contains_key(*state));
            open.set(still_open);
            let limit = array.limit.map(|n| format!(", at most {n} at once")).unwrap_or_default();
            let states = array
                .states
                .iter()
                .map(|(state, n)| format!("{n} {state}"))
                .collect::<Vec<_>>()
                .join(", ");
            let id = array.id.clone();
            view! {
                <section class="card" data-testid="array">
                    <h2>"Array " {array.name.clone()}</h2>
                    <dl class="details">
                        <dt>"Id"</dt><dd class="mono">{array.id.clone()}</dd>
                        <dt>"Tasks"</dt><dd data-testid="array-tasks">{format!("{} ({}{limit})", array.tasks, array.array)}</dd>
                        <dt>"States"</dt><dd data-testid="array-states">{states}</dd>
                        <dt>"Project"</dt><dd>{array.project.clone()}</dd>
                    </dl>
                    <Transition fallback=|| ()>
                        <ShowLoaded when=may_change.clone()>
                            <ArrayActions array_id=id.clone() open=still_open confirming changes />
                        </ShowLoaded>
                    </Transition>
                </section>
            }
        })}
    }
}

/// An editor's cancel of every task that has not ended, after a confirmation.
#[component]
fn ArrayActions(array_id: String, open: bool, confirming: RwSignal<bool>, changes: Changes) -> impl IntoView {
    let cancel = move |_| {
        confirming.set(false);
        send(
            changes,
            "POST",
            paths::array_action(&array_id, "cancel"),
            Some(serde_json::json!({"confirm": true})),
        );
    };
    view! {
        {open.then(|| view! {
            <button type="button" class="danger" data-testid="cancel-array"
                on:click=move |_| confirming.set(true)>"Cancel every task…"</button>
        })}
        <Show when=move || confirming.get()>
            <div class="notice warn" data-testid="cancel-array-confirm">
                <p>"Cancel every task that has not ended? Running ones get SIGTERM, then SIGKILL after the grace period."</p>
                <button type="button" class="danger" data-testid="confirm-cancel-array" on:click=cancel.clone()>"Yes, cancel them"</button>
                " "
                <button type="button" class="secondary" on:click=move |_| confirming.set(false)>"Keep them"</button>
            </div>
        </Show>
        <Outcome changes=changes done="Cancelled." />
    }
}
