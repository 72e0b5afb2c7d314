//! `/projects`: the projects the signed-in user can see, with their role in
//! each, and the members of the one chosen (`?project=`). A project's
//! admins add members, change roles and remove members there (removing
//! revokes their tokens limited to it and their share links of its runs)
//! and choose what happens to jobs whose GPUs sit idle;
//! server admins also create projects and set a project's priority
//! ceiling. Every change goes through the API as the signed-in user.

use crate::CurrentUser;
use crate::api::fetch;
use crate::view::actions::{Changes, Outcome, send};
use crate::view::query::link;
use crate::view::{ShowLoaded, loaded};
use gpuplane_api::Page;
use gpuplane_api::paths;
use gpuplane_api::project::{Membership, Project, Role};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use serde_json::json;

/// A form field's value, trimmed.
fn text(signal: RwSignal<String>) -> String {
    signal.get_untracked().trim().to_string()
}

#[component]
pub fn Projects() -> impl IntoView {
    let query = use_query_map();
    let user = expect_context::<CurrentUser>();
    let changes = Changes::new();
    let projects = Resource::new(
        move || changes.version().get(),
        |_| fetch::<Page<Project>>(paths::projects()),
    );
    let chosen = Signal::derive(move || query.read().get("project").unwrap_or_else(|| "default".into()));
    let members = Resource::new(
        move || (chosen.get(), changes.version().get()),
        |(project, _)| fetch::<Page<Membership>>(paths::project_members(&project)),
    );
    // The signed-in user's role in the chosen project decides the forms.
    let role = move || {
        projects
            .get()
            .and_then(Result::ok)
            .and_then(|page| page.items.into_iter().find(|p| p.name == chosen.get()))
            .map(|project| project.role)
    };
    let is_project_admin = move || role() == Some(Role::Admin);
    view! {
        <Title text="Projects" />
        <h1>"Projects"</h1>
        <section class="card" data-testid="projects">
            {loaded(projects, move |page: Page<Project>| view! {
                <table>
                    <thead><tr><th>"Project"</th><th>"Your role"</th><th>"Max priority"</th><th>"Share links"</th><th>"Idle GPUs"</th></tr></thead>
                    <tbody>{page.items.into_iter().map(|project| {
                        let href = link("/projects", &query.read_untracked(), &[("project", Some(&project.name))]);
                        let name = project.name.clone();
                        view! {
                            <tr data-project=name>
                                <td><a href=href>{project.name}</a></td>
                                <td>{project.role.as_str()}</td>
                                <td>{project.max_priority.map_or("none".to_string(), |max| max.to_string())}</td>
                                <td>{if project.share_links { "allowed" } else { "off" }}</td>
                                <td data-testid="idle-action">{project.idle_action.as_str()}</td>
                            </tr>
                        }
                    }).collect_view()}</tbody>
                </table>
            })}
        </section>
        <section class="card" data-testid="members-card">
            <h2>"Members of " {chosen}</h2>
            {loaded(members, move |page: Page<Membership>| view! {
                <ul data-testid="members">{page.items.into_iter().map(|member| view! {
                    <MemberRow member=member project=chosen.get_untracked() changes=changes can_remove=Signal::derive(is_project_admin) />
                }).collect_view()}</ul>
            })}
            <Transition fallback=|| ()>
                <ShowLoaded when=is_project_admin>
                    <SetMember project=chosen changes=changes />
                    <SetIdleAction project=chosen changes=changes />
                </ShowLoaded>
            </Transition>
            <Outcome changes=changes done="Saved." />
        </section>
        <Transition fallback=|| ()>
            <ShowLoaded when=move || user.is_admin()>
                <ServerAdminControls project=chosen changes=changes />
            </ShowLoaded>
        </Transition>
    }
}

/// One member, with a Remove button (after a confirmation) for the project's admins.
#[component]
fn MemberRow(
    member: Membership,
    project: String,
    changes: Changes,
    can_remove: Signal<bool>,
) -> impl IntoView {
    let confirming = RwSignal::new(false);
    let name = member.user.clone();
    let remove = {
        let name = name.clone();
        move |_| {
            confirming.set(false);
            send(
                changes,
                "DELETE",
                format!("{}/{name}", paths::project_members(&project)),
                None,
            );
        }
    };
    let shown = name.clone();
    let attribute = name.clone();
    view! {
        <li data-member=attribute>
            {shown} " (" {member.role.as_str()} ")"
            <Show when=move || can_remove.get() && !confirming.get()>
                " " <button type="button" class="secondary" data-testid="remove-member" on:click=move |_| confirming.set(true)>"Remove…"</button>
            </Show>
            <Show when=move || confirming.get()>
                <span class="notice warn" data-testid="remove-confirm">
                    "Remove " <strong>{name.clone()}</strong>
                    "? Their tokens limited to this project and their share links of its runs stop working, and the alert subscriptions they made for it go. "
                    <button type="button" class="danger" data-testid="confirm-remove" on:click=remove.clone()>"Yes, remove"</button>
                    " "
                    <button type="button" class="secondary" on:click=move |_| confirming.set(false)>"Keep"</button>
                </span>
            </Show>
        </li>
    }
}

/// What happens to the project's jobs whose GPUs sit idle (the project's
/// admins): `warn` raises GPU_IDLE, `stop` also stops them (reason IDLE).
#[component]
fn SetIdleAction(project: Signal<String>, changes: Changes) -> impl IntoView {
    let action = RwSignal::new("warn".to_string());
    let save = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let path = format!("{}/{}", paths::projects(), project.get_untracked());
        send(
            changes,
            "PATCH",
            path,
            Some(json!({"idle_action": action.get_untracked()})),
        );
    };
    view! {
        <form class="inline-form" data-testid="set-idle-action" on:submit=save>
            <label>"Jobs whose GPUs sit idle"
                <select name="idle_action" bind:value=action>
                    <option value="warn">"warn (GPU_IDLE event)"</option>
                    <option value="stop">"stop them (reason IDLE)"</option>
                </select>
            </label>
            <button type="submit">"Save"</button>
        </form>
    }
}

/// Add a member or change a role (the project's admins).
#[component]
fn SetMember(project: Signal<String>, changes: Changes) -> impl IntoView {
    let member = RwSignal::new(String::new());
    let role = RwSignal::new("editor".to_string());
    let add = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let body = json!({"user": text(member), "role": role.get_untracked()});
        send(
            changes,
            "POST",
            paths::project_members(&project.get_untracked()),
            Some(body),
        );
    };
    view! {
        <form class="inline-form" data-testid="set-member" on:submit=add>
            <label>"User" <input name="user" required bind:value=member /></label>
            <label>"Role"
                <select name="role" on:change=move |event| role.set(event_target_value(&event))>
                    {Role::ALL.iter().map(|r| view! { <option value=r.as_str() selected=*r == Role::Editor>{r.as_str()}</option> }).collect_view()}
                </select>
            </label>
            <button type="submit">"Add or change member"</button>
        </form>
    }
}

/// Create a project; set the chosen one's priority ceiling (server admins).
#[component]
fn ServerAdminControls(project: Signal<String>, changes: Changes) -> impl IntoView {
    let new_project = RwSignal::new(String::new());
    let ceiling = RwSignal::new(String::new());
    let problem = RwSignal::new(None::<String>);
    let create = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        send(
            changes,
            "POST",
            paths::projects(),
            Some(json!({"name": text(new_project)})),
        );
    };
    let set_ceiling = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let value = text(ceiling);
        let max = if value.is_empty() || value.eq_ignore_ascii_case("none") {
            Ok(serde_json::Value::Null)
        } else {
            value
                .parse::<i64>()
                .map(|max| json!(max))
                .map_err(|_| "give a whole number, or leave it empty for none")
        };
        match max {
            Ok(max) => {
                problem.set(None);
                let path = format!("{}/{}", paths::projects(), project.get_untracked());
                send(changes, "PATCH", path, Some(json!({"max_priority": max})));
            }
            Err(message) => problem.set(Some(format!("max priority: {message}"))),
        }
    };
    view! {
        <section class="card" data-testid="server-admin-projects">
            <h2>"Server admins"</h2>
            <form class="inline-form" data-testid="new-project" on:submit=create>
                <label>"New project" <input name="project" required placeholder="vision" bind:value=new_project /></label>
                <button type="submit">"Create project"</button>
            </form>
            <form class="inline-form" data-testid="max-priority" on:submit=set_ceiling>
                <label>"Max priority of " {project} " (empty: none)" <input name="max_priority" inputmode="numeric" bind:value=ceiling /></label>
                <button type="submit">"Set"</button>
            </form>
            {move || problem.get().map(|text| view! { <p class="error" role="alert">{text}</p> })}
        </section>
    }
}
