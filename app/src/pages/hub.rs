//! `/hf`: the signed-in user's Hugging Face Hub token: whether one is
//! linked (never the token), link or replace it, unlink it. The server
//! checks experiments' gated models and datasets with it, and gives it to
//! the jobs of recipes that ask (`HF_TOKEN`).

use crate::api::fetch;
use crate::view::actions::{Changes, Outcome, send};
use crate::view::{format, loaded};
use gpuplane_api::paths;
use gpuplane_api::recipe::HubStatus;
use leptos::prelude::*;
use leptos_meta::Title;
use serde_json::json;

#[component]
pub fn HuggingFace() -> impl IntoView {
    let changes = Changes::new();
    let status = Resource::new(
        move || changes.version().get(),
        |_| fetch::<HubStatus>(paths::hub()),
    );
    let token = RwSignal::new(String::new());
    let link = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let body = json!({"token": token.get_untracked().trim()});
        send(changes, "PUT", paths::hub_token(), Some(body));
        token.set(String::new());
    };
    // What the Hub said when the token was linked (it may not have answered).
    let warnings = move || {
        changes
            .value()
            .get()
            .and_then(Result::ok)
            .and_then(|text| serde_json::from_str::<HubStatus>(&text).ok())
            .map(|status| status.warnings)
            .unwrap_or_default()
    };
    view! {
        <Title text="Hugging Face" />
        <h1>"Hugging Face"</h1>
        <section class="card" data-testid="hub-status">
            {loaded(status, |status: HubStatus| view! {
                <p data-testid="hub-linked">{match (status.linked, status.hub_user) {
                    (true, Some(user)) => format!("Your Hub token is linked (account {user}), since {}.",
                        status.linked_at.as_deref().map(format::time).unwrap_or_default()),
                    (true, None) => "Your Hub token is linked (the Hub did not confirm it).".to_string(),
                    _ => "No Hub token linked.".to_string(),
                }}</p>
                <p class="muted">{match status.endpoint {
                    Some(hub) => format!("Experiments' models and datasets are checked against {hub} before their jobs queue."),
                    None => "This server checks no Hub (hf_endpoint is empty).".to_string(),
                }}</p>
            })}
        </section>
        <section class="card">
            <h2>"Link your token"</h2>
            <p>"A token of your Hub account (huggingface.co → Settings → Access Tokens). It is yours: stored \
                encrypted, never shown back, used to check gated repos you ask for and given to the jobs of \
                recipes that need it."</p>
            <form class="inline-form" data-testid="hub-link" on:submit=link>
                <label>"Token" <input type="password" name="token" autocomplete="off" required bind:value=token /></label>
                <button type="submit">"Link"</button>
                <button type="button" class="link" data-testid="hub-unlink"
                    on:click=move |_| send(changes, "DELETE", paths::hub_token(), None)>"Unlink"</button>
            </form>
            <Outcome changes=changes done="Saved." />
            {move || warnings().into_iter().map(|w| view! { <p class="notice warn">{w}</p> }).collect_view()}
        </section>
    }
}
