//! The run page's Share tab: the run's read-only links with their views;
//! editors make one (its URL is shown this once) and revoke them.

use crate::api::fetch;
use crate::view::actions::{Changes, Outcome, send};
use crate::view::{ShowLoaded, format, loaded};
use gpuplane_api::Page;
use gpuplane_api::paths;
use gpuplane_api::share::{CreatedShareLink, ShareLink};
use leptos::prelude::*;

#[component]
pub fn Shares(run_id: String, can_edit: Signal<bool>) -> impl IntoView {
    let changes = Changes::new();
    let links = Resource::new(
        {
            let run_id = run_id.clone();
            move || (run_id.clone(), changes.version().get())
        },
        |(id, _)| fetch::<Page<ShareLink>>(paths::run_shares(&id)),
    );
    let days = RwSignal::new("7".to_string());
    // The URL of the link just made: the answer to the last change, if it was one.
    let made = move || {
        changes
            .value()
            .get()
            .and_then(Result::ok)
            .and_then(|answer| serde_json::from_str::<CreatedShareLink>(&answer).ok())
    };
    let create = {
        let run_id = run_id.clone();
        move |event: leptos::ev::SubmitEvent| {
            event.prevent_default();
            let days: Option<u32> = days.get_untracked().trim().parse().ok();
            send(
                changes,
                "POST",
                paths::run_shares(&run_id),
                Some(serde_json::json!({"expires_in_days": days})),
            );
        }
    };
    let revoke_run_id = run_id.clone();
    view! {
        <section class="card">
            <p class="muted">"A share link shows this run's page, charts and output, read-only, to anyone who has it, without an account, until it expires or is revoked. Every view is recorded."</p>
            // In a Transition: `can_edit` reads the page's resources.
            <Transition fallback=|| ()>
                <ShowLoaded when=move || can_edit.get()>
                    <form class="inline-form" data-testid="share-form" on:submit=create.clone()>
                        <label>"Expires in (days, 1–90)" <input name="expires_in_days" inputmode="numeric" size="4" bind:value=days /></label>
                        <button type="submit">"Make a read-only link"</button>
                    </form>
                </ShowLoaded>
            </Transition>
            {move || made().map(|created| view! {
                <p class="info" role="status">"Copy it now: it is not shown again. "
                    <code data-testid="share-url">{created.url}</code></p>
            })}
            <Outcome changes=changes done="" />
            {move || {
                let run_id = revoke_run_id.clone();
                loaded(links, move |page: Page<ShareLink>| {
                    if page.items.is_empty() {
                        return view! { <p class="empty">"No share links."</p> }.into_any();
                    }
                    let run_id = run_id.clone();
                    view! {
                        <div class="table-scroll"><table data-testid="share-links">
                            <thead><tr><th>"Link"</th><th>"By"</th><th>"Made"</th><th>"Expires"</th><th>"State"</th><th>"Views"</th><th>"Last view"</th><th></th></tr></thead>
                            <tbody>{page.items.into_iter().map(|link| {
                                let state = link.state();
                                let path = paths::run_share(&run_id, &link.id);
                                let open = link.active;
                                view! { <tr data-share=link.id.clone()>
                                    <td class="mono">{link.id.clone()}</td>
                                    <td>{link.created_by.unwrap_or_default()}</td>
                                    <td>{format::time(&link.created_at)}</td>
                                    <td>{format::time(&link.expires_at)}</td>
                                    <td><span class=format!("badge share-{state}")>{state}</span></td>
                                    <td>{link.views}</td>
                                    <td>{link.last_viewed_at.as_deref().map(format::time).unwrap_or_default()}</td>
                                    <td>{move || (can_edit.get() && open).then(|| {
                                        let path = path.clone();
                                        view! { <button type="button" class="secondary" on:click=move |_| send(changes, "DELETE", path.clone(), None)>"Revoke"</button> }
                                    })}</td>
                                </tr> }
                            }).collect_view()}</tbody>
                        </table></div>
                    }.into_any()
                })
            }}
        </section>
    }
}
