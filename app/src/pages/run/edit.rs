//! What editors and admins change from the run page: tags and notes,
//! archiving and deleting.

use super::summary::SummaryResource;
use crate::view::actions::{Changes, Outcome, send};
use gpuplane_api::paths;
use leptos::prelude::*;

/// Tags and notes, for editors of the run's project; filled from the run
/// when opened.
#[component]
pub(super) fn RunDetailsForm(summary: SummaryResource, changes: Changes) -> impl IntoView {
    let tags = RwSignal::new(String::new());
    let notes = RwSignal::new(String::new());
    let open = RwSignal::new(false);
    let current = move || {
        summary
            .get_untracked()
            .and_then(Result::ok)
            .map(|summary| summary.run)
    };
    let toggle = move |_| {
        if let Some(run) = current() {
            tags.set(run.tags.join(" "));
            notes.set(run.notes);
        }
        open.update(|o| *o = !*o);
    };
    let save = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let Some(run) = current() else { return };
        let tags: Vec<String> = tags
            .get_untracked()
            .split([' ', ','])
            .filter(|tag| !tag.is_empty())
            .map(str::to_string)
            .collect();
        let body = serde_json::json!({"tags": tags, "notes": notes.get_untracked()});
        send(changes, "PATCH", paths::run(&run.id), Some(body));
    };
    view! {
        <button type="button" class="secondary" data-testid="edit-run-details" on:click=toggle>
            "Edit tags and notes…"
        </button>
        <Show when=move || open.get()>
            <form class="card" data-testid="run-details-form" on:submit=save>
                <label>"Tags (separated by spaces)" <input name="tags" bind:value=tags /></label>
                <label>"Notes" <textarea name="notes" rows="4" bind:value=notes></textarea></label>
                <button type="submit">"Save"</button>
                <Outcome changes=changes done="Saved." />
            </form>
        </Show>
    }
}

/// Archive or unarchive the run, or delete it after a confirmation: for
/// admins of its project.
#[component]
pub(super) fn RunLifecycle(summary: SummaryResource, changes: Changes) -> impl IntoView {
    let confirming = RwSignal::new(false);
    let run = move || summary.get().and_then(Result::ok).map(|summary| summary.run);
    let archive = move |_| {
        if let Some(run) = run() {
            let action = if run.archived_at.is_some() {
                "unarchive"
            } else {
                "archive"
            };
            send(changes, "POST", format!("{}/{action}", paths::run(&run.id)), None);
        }
    };
    let delete = move |_| {
        if let Some(run) = run() {
            send(changes, "DELETE", paths::run(&run.id), None);
        }
    };
    // Once deleted, the run's page has nothing left to show: back to the list.
    let navigate = leptos_router::hooks::use_navigate();
    Effect::new(move |_| {
        let deleted =
            changes.value().get().and_then(Result::ok).and_then(|answer| {
                serde_json::from_str::<gpuplane_api::experiment::DeletedRun>(&answer).ok()
            });
        if deleted.is_some() {
            navigate("/runs", Default::default());
        }
    });
    view! {
        <div class="inline-form" data-testid="run-lifecycle">
            <button type="button" class="secondary" on:click=archive>
                {move || if run().is_some_and(|run| run.archived_at.is_some()) { "Unarchive" } else { "Archive" }}
            </button>
            <button type="button" class="secondary" on:click=move |_| confirming.set(true)>"Delete…"</button>
            <Show when=move || confirming.get()>
                <span class="error">"The run, its job, metrics, output, events and checkpoint records go for good."</span>
                <button type="button" class="danger" on:click=delete>"Delete for good"</button>
                <button type="button" class="secondary" on:click=move |_| confirming.set(false)>"Keep it"</button>
            </Show>
        </div>
    }
}
