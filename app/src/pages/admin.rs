//! `/admin` and `/admin/audit`: what server admins manage (users, quotas,
//! node policies, nodes, agent tokens; projects are on `/projects`) and the audit log of
//! who did what. Every change goes through the API as the signed-in admin, so it
//! is checked and recorded exactly as from `gpuctl admin`.

use crate::CurrentUser;
use crate::api::fetch;
use crate::view::actions::{Changes, Outcome, send};
use crate::view::format;
use crate::view::query::{api, link};
use crate::view::{ShowLoaded, loaded};
use gpuplane_api::Page;
use gpuplane_api::audit::{AuditAction, AuditEntry};
use gpuplane_api::node::Node;
use gpuplane_api::paths;
use gpuplane_api::project::ProjectNodePolicy;
use gpuplane_api::quota::Quota;
use gpuplane_api::user::{AgentToken, CreatedAgentToken, User};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use serde_json::json;

/// Shows its children to server admins; others are told the page is not theirs.
#[component]
fn AdminsOnly(children: ChildrenFn) -> impl IntoView {
    let user = expect_context::<CurrentUser>();
    let is_admin = move || user.is_admin();
    view! {
        <Suspense fallback=|| ()>
            <ShowLoaded when=is_admin fallback=|| view! {
                <p class="notice" data-testid="admins-only">"This page is for server admins."</p>
            }>
                {children()}
            </ShowLoaded>
        </Suspense>
    }
}

/// One section's data: what it shows, loaded again after each of its changes.
type Loaded<T> = Resource<Result<Page<T>, ServerFnError>>;

/// The sections' resources are made here, at the top of the page, not
/// inside `AdminsOnly`'s `Suspense` (see ARCHITECTURE.md: hydration matches
/// resources by the order they are made).
#[component]
pub fn Admin() -> impl IntoView {
    let users_changed = Changes::new();
    let users = Resource::new(
        move || users_changed.version().get(),
        |_| fetch::<Page<User>>(paths::users()),
    );
    let quotas_changed = Changes::new();
    let quotas = Resource::new(
        move || quotas_changed.version().get(),
        |_| fetch::<Page<Quota>>(paths::quotas()),
    );
    let policies_changed = Changes::new();
    let policies = Resource::new(
        move || policies_changed.version().get(),
        |_| fetch::<Page<ProjectNodePolicy>>(paths::node_policies()),
    );
    let nodes_changed = Changes::new();
    let nodes = Resource::new(
        move || nodes_changed.version().get(),
        |_| fetch::<Page<Node>>(paths::nodes()),
    );
    let tokens_changed = Changes::new();
    let token_created = Changes::new();
    let tokens = Resource::new(
        move || (tokens_changed.version().get(), token_created.version().get()),
        |_| fetch::<Page<AgentToken>>(paths::agent_tokens()),
    );
    view! {
        <Title text="Admin" />
        <h1>"Admin"</h1>
        <p class="muted">"Every change here is in the " <a href="/admin/audit">"audit log"</a>
            ". Maintenance mode is switched on the " <a href="/">"dashboard"</a> "."</p>
        <AdminsOnly>
            <Users users=users changes=users_changed />
            <p class="card">"Projects and their members (and a project's max priority) are on the "
                <a href="/projects">"Projects"</a> " page."</p>
            <Quotas quotas=quotas changes=quotas_changed />
            <NodePolicies policies=policies changes=policies_changed />
            <NodeControls nodes=nodes changes=nodes_changed />
            <AgentTokens tokens=tokens changes=tokens_changed created=token_created />
        </AdminsOnly>
    }
}

/// A checkbox's or input's value as the forms below read them.
fn text(signal: RwSignal<String>) -> String {
    signal.get_untracked().trim().to_string()
}

#[component]
fn Users(users: Loaded<User>, changes: Changes) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let admin = RwSignal::new(false);
    let create = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let body =
            json!({"name": text(name), "password": password.get_untracked(), "admin": admin.get_untracked()});
        password.set(String::new());
        send(changes, "POST", paths::users(), Some(body));
    };
    let change = move |name: String, body: serde_json::Value| {
        move |_| send(changes, "PATCH", paths::user(&name), Some(body.clone()))
    };
    // Nobody disables themselves or drops their own admin flag (the API refuses it too).
    let me = expect_context::<CurrentUser>();
    let is_me = move |name: &str| {
        me.0.get_untracked()
            .and_then(|user| user.ok().flatten())
            .is_some_and(|user| user.name == name)
    };
    view! {
        <section class="card" data-testid="users">
            <h2>"Users"</h2>
            {loaded(users, move |page: Page<User>| view! {
                <div class="table-scroll"><table>
                    <thead><tr><th>"Name"</th><th>"Role"</th><th>"Account"</th><th>"Created"</th><th></th></tr></thead>
                    <tbody>{page.items.into_iter().map(|user| {
                        let disabled = user.disabled_at.is_some();
                        view! {
                            <tr data-user=user.name.clone() class:revoked=disabled>
                                <td>{user.name.clone()}</td>
                                <td>{if user.is_admin { "server admin" } else { "user" }}</td>
                                <td>{match &user.disabled_at {
                                    Some(at) => format!("disabled {}", format::time(at)),
                                    None if user.local => "active (password)".to_string(),
                                    None => "active (SSO)".to_string(),
                                }}</td>
                                <td>{format::time(&user.created_at)}</td>
                                <td class="actions">{if is_me(&user.name) {
                                    view! { <span class="muted">"(you)"</span> }.into_any()
                                } else {
                                    view! {
                                        <button type="button" class="secondary" data-testid="toggle-admin"
                                            on:click=change(user.name.clone(), json!({"admin": !user.is_admin}))>
                                            {if user.is_admin { "Remove admin" } else { "Make admin" }}
                                        </button>
                                        " "
                                        <button type="button" class="secondary" data-testid="toggle-disabled"
                                            on:click=change(user.name.clone(), json!({"disabled": !disabled}))>
                                            {if disabled { "Enable" } else { "Disable" }}
                                        </button>
                                    }.into_any()
                                }}</td>
                            </tr>
                        }
                    }).collect_view()}</tbody>
                </table></div>
            })}
            <form class="inline-form" data-testid="new-user" on:submit=create>
                <label>"Name" <input name="name" required bind:value=name /></label>
                <label>"Password (8 or more characters)" <input type="password" name="password" required minlength="8" autocomplete="new-password" bind:value=password /></label>
                <label class="check"><input type="checkbox" name="admin" bind:checked=admin /> " server admin"</label>
                <button type="submit">"Create user"</button>
            </form>
            <Outcome changes=changes done="Saved." />
        </section>
    }
}

#[component]
fn Quotas(quotas: Loaded<Quota>, changes: Changes) -> impl IntoView {
    let kind = RwSignal::new("project".to_string());
    let name = RwSignal::new(String::new());
    let gpus = RwSignal::new(String::new());
    let jobs = RwSignal::new(String::new());
    let problem = RwSignal::new(None::<String>);
    let set = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let limit = |field: &str, value: String| -> Result<Option<i64>, String> {
            if value.is_empty() {
                return Ok(None);
            }
            value
                .parse()
                .map(Some)
                .map_err(|_| format!("{field}: give a whole number or leave it empty"))
        };
        match (limit("GPUs", text(gpus)), limit("jobs", text(jobs))) {
            (Ok(max_gpus), Ok(max_running_jobs)) => {
                problem.set(None);
                let body = json!({"max_gpus": max_gpus, "max_running_jobs": max_running_jobs});
                send(
                    changes,
                    "PUT",
                    paths::quota(&kind.get_untracked(), &text(name)),
                    Some(body),
                );
            }
            (Err(error), _) | (_, Err(error)) => problem.set(Some(error)),
        }
    };
    view! {
        <section class="card" data-testid="admin-quotas">
            <h2>"Quotas"</h2>
            <p class="muted">"Jobs over a quota are accepted and wait in the queue with the reason."</p>
            {loaded(quotas, move |page: Page<Quota>| (!page.items.is_empty()).then(|| view! {
                <div class="table-scroll"><table>
                    <thead><tr><th>"For"</th><th>"Use"</th><th>"Set"</th><th></th></tr></thead>
                    <tbody>{page.items.into_iter().map(|quota| {
                        let path = paths::quota(quota.kind.as_str(), &quota.name);
                        view! { <tr>
                            <td>{format!("{} {}", quota.kind, quota.name)}</td>
                            <td>{quota.usage_text()}</td>
                            <td>{format::time(&quota.updated_at)} " " {quota.updated_by.map(|by| format!("by {by}"))}</td>
                            <td><button type="button" class="secondary" on:click=move |_| send(changes, "DELETE", path.clone(), None)>"Remove"</button></td>
                        </tr> }
                    }).collect_view()}</tbody>
                </table></div>
            }))}
            <form class="inline-form" data-testid="set-quota" on:submit=set>
                <label>"For"
                    <select name="kind" on:change=move |event| kind.set(event_target_value(&event))>
                        <option value="project" selected>"project"</option>
                        <option value="user">"user"</option>
                    </select>
                </label>
                <label>"Name" <input name="name" required bind:value=name /></label>
                <label>"GPUs at once" <input name="gpus" inputmode="numeric" placeholder="no limit" bind:value=gpus /></label>
                <label>"Running jobs" <input name="jobs" inputmode="numeric" placeholder="no limit" bind:value=jobs /></label>
                <button type="submit">"Set quota"</button>
            </form>
            {move || problem.get().map(|text| view! { <p class="error" role="alert">{text}</p> })}
            <Outcome changes=changes done="Saved." />
        </section>
    }
}

/// Which nodes each project's jobs run on, and through which runners
/// (`gpuctl admin project-nodes`).
#[component]
fn NodePolicies(policies: Loaded<ProjectNodePolicy>, changes: Changes) -> impl IntoView {
    let project = RwSignal::new(String::new());
    let labels = RwSignal::new(String::new());
    let runners = RwSignal::new("process".to_string());
    let problem = RwSignal::new(None::<String>);
    let set = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let mut pairs = serde_json::Map::new();
        for pair in text(labels).split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some((key, value)) => {
                    pairs.insert(key.trim().to_string(), json!(value.trim()));
                }
                None => {
                    problem.set(Some(format!("labels: `{pair}` is not KEY=VALUE")));
                    return;
                }
            }
        }
        problem.set(None);
        let granted: Vec<String> = text(runners)
            .split(',')
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        let body = json!({"labels": pairs, "runners": granted});
        send(changes, "PUT", paths::node_policy(&text(project)), Some(body));
    };
    view! {
        <section class="card" data-testid="admin-node-policies">
            <h2>"Node policies"</h2>
            <p class="muted">"A project with labels runs only on nodes carrying them, and such nodes serve only \
                projects naming them. Docker and Slurm nodes serve only projects granted those runners. A project \
                without a policy uses the nodes no policy reserves, with the process runner. A job's \
                node_selector only chooses among the nodes its policy allows."</p>
            {loaded(policies, move |page: Page<ProjectNodePolicy>| (!page.items.is_empty()).then(|| view! {
                <div class="table-scroll"><table>
                    <thead><tr><th>"Project"</th><th>"Nodes"</th><th>"Runners"</th><th>"Set"</th><th></th></tr></thead>
                    <tbody>{page.items.into_iter().map(|set| {
                        let path = paths::node_policy(&set.project);
                        let nodes = if set.policy.labels.is_empty() {
                            "nodes no policy reserves".to_string()
                        } else {
                            set.policy.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
                        };
                        let runners = set.policy.runners.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ");
                        view! { <tr data-project=set.project.clone()>
                            <td>{set.project.clone()}</td>
                            <td>{nodes}</td>
                            <td>{runners}</td>
                            <td>{format::time(&set.updated_at)} " " {set.updated_by.map(|by| format!("by {by}"))}</td>
                            <td><button type="button" class="secondary" on:click=move |_| send(changes, "DELETE", path.clone(), None)>"Remove"</button></td>
                        </tr> }
                    }).collect_view()}</tbody>
                </table></div>
            }))}
            <form class="inline-form" data-testid="set-node-policy" on:submit=set>
                <label>"Project" <input name="project" required bind:value=project /></label>
                <label>"Labels" <input name="labels" placeholder="team=vision,tier=a" bind:value=labels /></label>
                <label>"Runners" <input name="runners" placeholder="process,docker,slurm" bind:value=runners /></label>
                <button type="submit">"Set policy"</button>
            </form>
            {move || problem.get().map(|text| view! { <p class="error" role="alert">{text}</p> })}
            <Outcome changes=changes done="Saved." />
        </section>
    }
}

#[component]
fn NodeControls(nodes: Loaded<Node>, changes: Changes) -> impl IntoView {
    view! {
        <section class="card" data-testid="admin-nodes">
            <h2>"Nodes"</h2>
            <p class="muted">"A drained node takes no new jobs; its running jobs finish, then it is DRAINED. \
                Label changes apply at once and survive agent restarts: KEY=VALUE sets, KEY- removes."</p>
            {loaded(nodes, move |page: Page<Node>| view! {
                <div class="table-scroll"><table>
                    <thead><tr><th>"Node"</th><th>"Status"</th><th>"Labels"</th><th></th></tr></thead>
                    <tbody>{page.items.into_iter().map(|node| view! { <NodeRow node=node changes=changes /> }).collect_view()}</tbody>
                </table></div>
            })}
            <Outcome changes=changes done="Saved." />
        </section>
    }
}

#[component]
fn NodeRow(node: Node, changes: Changes) -> impl IntoView {
    let draining = node.drained_at.is_some();
    let name = node.name.clone();
    let labels = RwSignal::new(String::new());
    let problem = RwSignal::new(None::<String>);
    let drain = {
        let name = name.clone();
        move |_| {
            let action = if draining { "undrain" } else { "drain" };
            send(changes, "POST", paths::node_action(&name, action), None);
        }
    };
    let relabel = {
        let name = name.clone();
        move |event: leptos::ev::SubmitEvent| {
            event.prevent_default();
            let mut set = serde_json::Map::new();
            let mut remove = Vec::new();
            for word in labels.get_untracked().split_whitespace() {
                match (word.split_once('='), word.strip_suffix('-')) {
                    (Some((key, value)), _) => {
                        set.insert(key.to_string(), value.into());
                    }
                    (None, Some(key)) => remove.push(key.to_string()),
                    (None, None) => {
                        problem.set(Some(format!(
                            "`{word}` is neither KEY=VALUE (set) nor KEY- (remove)"
                        )));
                        return;
                    }
                }
            }
            problem.set(None);
            labels.set(String::new());
            let body = json!({"set": set, "remove": remove});
            send(changes, "POST", paths::node_action(&name, "labels"), Some(body));
        }
    };
    let shown: Vec<String> = node.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    view! {
        <tr data-node=name.clone()>
            <td>{name.clone()}</td>
            <td>{node.status.as_str()}</td>
            <td>{shown.join(", ")}</td>
            <td class="actions">
                <button type="button" class="secondary" data-testid="toggle-drain" on:click=drain>
                    {if draining { "Undrain" } else { "Drain" }}
                </button>
                <form class="inline-form" on:submit=relabel>
                    <input name="labels" placeholder="pool=night tier-" aria-label="Label changes" bind:value=labels />
                    <button type="submit" class="secondary">"Change labels"</button>
                </form>
                {move || problem.get().map(|text| view! { <p class="error" role="alert">{text}</p> })}
            </td>
        </tr>
    }
}

/// `changes` revokes; `created` makes a token, whose secret is shown once.
#[component]
fn AgentTokens(tokens: Loaded<AgentToken>, changes: Changes, created: Changes) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let node = RwSignal::new(String::new());
    let create = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let name = Some(text(name)).filter(|n| !n.is_empty());
        let node = Some(text(node)).filter(|n| !n.is_empty());
        send(
            created,
            "POST",
            paths::agent_tokens(),
            Some(json!({"name": name, "node": node})),
        );
    };
    view! {
        <section class="card" data-testid="agent-tokens">
            <h2>"Agent tokens"</h2>
            <p class="muted">"An agent speaks for one node with its token: give it to gpuplane-agent --token-file."</p>
            {loaded(tokens, move |page: Page<AgentToken>| view! {
                <div class="table-scroll"><table>
                    <thead><tr><th>"Name"</th><th>"Node"</th><th>"Created"</th><th>"Last used"</th><th></th></tr></thead>
                    <tbody>{page.items.into_iter().map(|token| {
                        let id = token.id.clone();
                        view! { <tr class:revoked=token.revoked_at.is_some()>
                            <td>{token.name}</td>
                            <td>{token.node.unwrap_or_else(|| "(bound at its first hello)".into())}</td>
                            <td>{format::time(&token.created_at)}</td>
                            <td>{token.last_used_at.as_deref().map(format::time).unwrap_or_else(|| "never".into())}</td>
                            <td>{match token.revoked_at {
                                Some(_) => view! { <span>"revoked"</span> }.into_any(),
                                None => view! {
                                    <button type="button" class="secondary" on:click=move |_| send(changes, "POST", paths::agent_token_revoke(&id), None)>"Revoke"</button>
                                }.into_any(),
                            }}</td>
                        </tr> }
                    }).collect_view()}</tbody>
                </table></div>
            })}
            <form class="inline-form" data-testid="new-agent-token" on:submit=create>
                <label>"Name" <input name="name" placeholder="agent" bind:value=name /></label>
                <label>"Node (optional)" <input name="node" placeholder="bound at its first hello" bind:value=node /></label>
                <button type="submit">"Create agent token"</button>
            </form>
            {move || created.value().get().map(|result| match result {
                Ok(body) => match serde_json::from_str::<CreatedAgentToken>(&body) {
                    Ok(created) => view! {
                        <p class="info">"Copy it now: it is shown only this once."</p>
                        <code class="secret" data-testid="new-agent-token-secret">{created.secret}</code>
                    }.into_any(),
                    Err(error) => view! { <p class="error">{error.to_string()}</p> }.into_any(),
                },
                Err(error) => view! { <p class="error" role="alert">{crate::view::error_text(&error)}</p> }.into_any(),
            })}
            <Outcome changes=changes done="Revoked: its agent is refused from its next request on." />
        </section>
    }
}

#[component]
pub fn Audit() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    let entries = Resource::new(
        move || ["actor", "action", "target", "before"].map(param),
        |[actor, action, target, before]| {
            fetch::<Page<AuditEntry>>(api(
                &paths::audit(),
                &[
                    ("actor", &actor),
                    ("action", &action),
                    ("target", &target),
                    ("before", &before),
                ],
            ))
        },
    );
    view! {
        <Title text="Audit log" />
        <h1>"Audit log"</h1>
        <AdminsOnly>
            <form method="get" class="inline-form card" role="search" data-testid="audit-filters">
                <label>"Who" <input name="actor" prop:value=move || param("actor") placeholder="anyone" /></label>
                <label>"Action"
                    <select name="action">
                        <option value="" selected=move || param("action").is_empty()>"any"</option>
                        {AuditAction::ALL.iter().map(|a| view! { <option value=a.as_str() selected=move || param("action") == a.as_str()>{a.as_str()}</option> }).collect_view()}
                    </select>
                </label>
                <label>"Target" <input name="target" prop:value=move || param("target") placeholder="job, node, project, user" /></label>
                <button type="submit">"Filter"</button>
                <a href="/admin/audit">"Clear"</a>
            </form>
            <section class="card">
                {loaded(entries, move |page: Page<AuditEntry>| {
                    let older = page.next_before.map(|before| link("/admin/audit", &query.read_untracked(), &[("before", Some(&before.to_string()))]));
                    view! {
                        <AuditTable entries=page.items />
                        {older.map(|href| view! { <nav class="pager"><a href=href>"Older →"</a></nav> })}
                    }
                })}
            </section>
        </AdminsOnly>
    }
}

#[component]
fn AuditTable(entries: Vec<AuditEntry>) -> impl IntoView {
    if entries.is_empty() {
        return view! { <p class="empty">"Nothing in the audit log matches."</p> }.into_any();
    }
    view! {
        <div class="table-scroll"><table data-testid="audit">
            <thead><tr><th>"When"</th><th>"Who"</th><th>"From"</th><th>"Action"</th><th>"Target"</th><th>"Detail"</th></tr></thead>
            <tbody>{entries.into_iter().map(|entry| view! { <tr>
                <td>{format::time(&entry.time)}</td>
                <td>{entry.actor}</td>
                <td>{entry.address.unwrap_or_default()}</td>
                <td class="mono">{entry.action.as_str()}</td>
                <td class="mono">{entry.target}</td>
                <td>{entry.detail}</td>
            </tr> }).collect_view()}</tbody>
        </table></div>
    }
    .into_any()
}
