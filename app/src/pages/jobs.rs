//! `/jobs` (filters, pages) and `/jobs/{job_id}` (spec, attempts, queued
//! reason, events, logs).

use crate::api::fetch;
use crate::pages::arrays::ArrayCard;
use crate::view::actions::{Changes, Outcome, key_values, send};
use crate::view::format::{self, status_badge};
use crate::view::logs::{LogViewer, LogsOf};
use crate::view::query::{api, link};
use crate::view::tables::{EventsTable, JobsTable};
use crate::view::{ShowLoaded, loaded};
use gpuplane_api::Page;
use gpuplane_api::event::Event;
use gpuplane_api::job::Job;
use gpuplane_api::job::JobStatus;
use gpuplane_api::paths;
use gpuplane_api::project::{Project, Role};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

const STATUSES: [&str; 7] = [
    "QUEUED",
    "DISPATCHING",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "LOST",
];

#[component]
pub fn Jobs() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    let jobs = Resource::new(
        move || ["status", "project", "user", "q", "before", "array"].map(param),
        |[status, project, user, q, before, array]| {
            fetch::<Page<Job>>(api(
                &paths::jobs(),
                &[
                    ("status", &status),
                    ("project", &project),
                    ("user", &user),
                    ("q", &q),
                    ("before", &before),
                    ("array", &array),
                ],
            ))
        },
    );
    view! {
        <Title text="Jobs" />
        <h1>"Jobs"</h1>
        <form method="get" class="inline-form card" role="search" data-testid="job-filters">
            <label>"Status"
                <select name="status">
                    <option value="" selected=move || param("status").is_empty()>"any"</option>
                    {STATUSES.map(|s| view! { <option value=s selected=move || param("status") == s>{s}</option> })}
                </select>
            </label>
            <label>"Project" <input name="project" prop:value=move || param("project") placeholder="any" /></label>
            <label>"User" <input name="user" prop:value=move || param("user") placeholder="anyone" /></label>
            <label>"Text" <input type="search" name="q" prop:value=move || param("q") placeholder="name or id" /></label>
            {move || Some(param("array")).filter(|a| !a.is_empty()).map(|array| view! { <input type="hidden" name="array" value=array /> })}
            <button type="submit">"Filter"</button>
            <a href="/jobs">"Clear"</a>
        </form>
        {move || Some(param("array")).filter(|a| !a.is_empty()).map(|array| view! { <ArrayCard array_id=array /> })}
        {loaded(jobs, move |page: Page<Job>| {
            let filtered = ["status", "project", "user", "q", "array"].iter().any(|k| !param(k).is_empty());
            let empty = if filtered {
                "No job matches these filters."
            } else {
                "No jobs yet. Submit one: gpuctl job submit --name first --gpus 1 -- python train.py"
            };
            let older = page.next_before.map(|before| {
                link("/jobs", &query.read_untracked(), &[("before", Some(&before.to_string()))])
            });
            view! {
                <section class="card">
                    <JobsTable jobs=page.items empty=empty />
                    <nav class="pager" aria-label="Pages">
                        {(!param("before").is_empty()).then(|| view! {
                            <a href=link("/jobs", &query.read_untracked(), &[("before", None)])>"← Newest"</a>
                        })}
                        {older.map(|href| view! { <a href=href data-testid="older">"Older →"</a> })}
                    </nav>
                </section>
            }
        })}
    }
}

#[component]
pub fn JobDetail() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("job_id").unwrap_or_default();
    let changes = Changes::new();
    let job = Resource::new(
        move || (id(), changes.version().get()),
        |(id, _)| fetch::<Job>(paths::job(&id)),
    );
    let events = Resource::new(
        move || (id(), changes.version().get()),
        |(id, _)| fetch::<Page<Event>>(api(&paths::events(), &[("job_id", &id), ("limit", "50")])),
    );
    let projects = Resource::new(|| (), |_| fetch::<Page<Project>>(paths::projects()));
    view! {
        <Title text="Job" />
        {loaded(job, move |job: Job| {
            let project = job.project.clone();
            let may_change = move || {
                projects.get().and_then(Result::ok).is_some_and(|page| {
                    page.items.iter().any(|p| p.name == project && p.role >= Role::Editor)
                })
            };
            view! {
                <JobView job=job.clone() />
                <Transition fallback=|| ()>
                    <ShowLoaded when=may_change.clone()>
                        <JobActions job=job.clone() changes=changes />
                    </ShowLoaded>
                </Transition>
            }
        })}
        <h2>"Logs"</h2>
        <LogViewer of=LogsOf::Job(params.read_untracked().get("job_id").unwrap_or_default()) />
        <section class="card">
            <h2>"Events"</h2>
            {loaded(events, |page: Page<Event>| view! { <EventsTable events=page.items empty="No events for this job yet." /> })}
        </section>
    }
}

#[component]
fn JobView(job: Job) -> impl IntoView {
    let spec = job.spec.clone();
    let command = spec.command.join(" ");
    // A QUEUED job's reason, or Slurm's for a DISPATCHING job it holds queued.
    let queued = job.queued_reason.clone();
    view! {
        <h1>{job.title()} " " {status_badge(job.status.as_str())}</h1>
        <p class="muted mono">{job.id.clone()}</p>
        {queued.map(|reason| view! { <p class="notice" data-testid="queued-reason">"Waiting: " {reason}</p> })}
        {job.failure_reason.map(|reason| view! {
            <p class="notice danger">{reason.as_str()} ": " {job.failure_detail.clone().unwrap_or_default()}
                " " <a href=format!("/runs/{}?tab=diagnosis", job.run_id)>"Why, and what to do"</a></p>
        })}
        {job.source_mismatches().into_iter().map(|warning| view! {
            <p class="notice warn" data-testid="git-mismatch">{warning}</p>
        }).collect_view()}
        <section class="card">
            <h2>"Spec"</h2>
            <dl class="details">
                <dt>"Run"</dt><dd><a href=format!("/runs/{}", job.run_id) data-testid="run-link">{job.run_id.clone()}</a></dd>
                <dt>"Kind"</dt><dd>{job.kind.as_str()}</dd>
                <dt>"Project"</dt><dd>{job.project.clone()}</dd>
                {job.array.clone().map(|array| view! {
                    <dt>"Array"</dt>
                    <dd data-testid="job-array">"task " {array.index} " of " <a href=format!("/jobs?array={}", array.id)>{array.id.clone()}</a>
                        {format!(" ({} tasks)", array.tasks)}</dd>
                })}
                {job.sweep.clone().map(|sweep| view! {
                    <dt>"Sweep"</dt>
                    <dd data-testid="job-sweep">"trial " {sweep.trial} " of " <a href=format!("/sweeps/{}", sweep.id)>{sweep.id.clone()}</a></dd>
                })}
                <dt>"Submitted"</dt><dd>{format::time(&job.created_at)} " by " {job.submitted_by.clone().unwrap_or_else(|| "–".into())}</dd>
                {spec.git.clone().map(|git| view! {
                    <dt>"Source"</dt><dd data-testid="git-source">{git.describe()}</dd>
                })}
                <dt>"Command"</dt><dd>{command}</dd>
                <dt>"Working dir"</dt><dd>{spec.working_dir.clone().unwrap_or_else(|| "(the agent's home)".into())}</dd>
                <dt>"GPUs"</dt><dd>{spec.resources.gpu}</dd>
                {(spec.resources.nodes > 1).then(|| view! {
                    <dt>"Nodes"</dt>
                    <dd data-testid="nodes">{format!("{} at once, {} GPUs on each{}", spec.resources.nodes, spec.resources.gpu,
                        spec.resources.colocate.as_ref().map(|label| format!(", sharing one {label}")).unwrap_or_default())}</dd>
                })}
                <dt>"Runner"</dt><dd>{format!("{:?}", spec.runner).to_lowercase()} {spec.image.clone().map(|i| format!(" ({i})"))}</dd>
                <dt>"Priority"</dt><dd>{spec.priority}</dd>
                <dt>"Attempts"</dt><dd>{job.attempts_summary()}</dd>
                {(!spec.after.is_empty()).then(|| view! {
                    <dt>"After"</dt>
                    <dd data-testid="after">{spec.after.iter().map(|text| {
                        let id = text.split(':').next().unwrap_or_default().to_string();
                        view! { <a href=format!("/jobs/{id}")>{text.clone()}</a> " " }
                    }).collect_view()}</dd>
                })}
                <dt>"Time limit"</dt>
                <dd data-testid="time-limit">{spec.time_limit_s.map_or_else(
                    || "none".to_string(),
                    |limit| format!("{} per attempt", gpuplane_api::duration::format_seconds(limit)),
                )}</dd>
                {(!spec.env.is_empty()).then(|| view! {
                    <dt>"Environment"</dt>
                    <dd>{spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")}</dd>
                })}
                {(!job.secret_env.is_empty()).then(|| view! {
                    <dt>"Secret environment"</dt>
                    <dd data-testid="secret-env">{job.secret_env.iter().map(|name| format!("{name} (set)")).collect::<Vec<_>>().join(" ")}</dd>
                })}
                {spec.wandb.is_some().then(|| view! {
                    <dt>"W&B"</dt>
                    <dd data-testid="wandb">"offline: the agent reads its runs into this job's run"</dd>
                })}
                {(!spec.node_selector.is_empty()).then(|| view! {
                    <dt>"Node selector"</dt>
                    <dd>{spec.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")}</dd>
                })}
            </dl>
        </section>
        <section class="card">
            <h2>"Attempts"</h2>
            {if job.attempts.is_empty() {
                view! { <p class="empty">"Not dispatched yet."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll"><table data-testid="attempts">
                        <thead><tr><th>"#"</th><th>"Node"</th><th>"GPUs"</th><th>"Status"</th><th>"Started"</th><th>"Ended"</th><th>"Duration"</th><th>"Exit"</th><th>"Failure"</th><th>"Resumed"</th></tr></thead>
                        <tbody>{job.attempts.iter().cloned().map(|a| {
                            let duration = a.started_at.as_deref().and_then(format::epoch_seconds).map(|start| {
                                let end = a.ended_at.as_deref().and_then(format::epoch_seconds);
                                match end {
                                    Some(end) => format::duration(end - start),
                                    None => "running".into(),
                                }
                            });
                            let resumed = a.resumed();
                            view! { <tr>
                                <td>{a.n}</td><td>{a.node}</td>
                                <td>{a.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")}</td>
                                <td>{status_badge(a.status.as_str())}</td>
                                <td>{a.started_at.as_deref().map(format::time)}</td>
                                <td>{a.ended_at.as_deref().map(format::time)}</td>
                                <td>{duration}</td>
                                <td>{a.exit_code.map(|c| c.to_string()).or(a.signal_name.clone())}</td>
                                <td>{a.failure_reason.map(|r| r.as_str())} " " <span class="muted">{a.failure_detail.clone()}</span></td>
                                <td class="muted" data-testid="attempt-resumed">{resumed}</td>
                            </tr>
                            {(!a.members.is_empty()).then(|| view! { <AttemptMembers members=a.members.clone() /> }.into_any())} }
                        }).collect_view()}</tbody>
                    </table></div>
                }.into_any()
            }}
        </section>
    }
}

/// A multi-node attempt's members, one per node, under its row.
#[component]
fn AttemptMembers(members: Vec<gpuplane_api::job::Member>) -> impl IntoView {
    let items = members
        .into_iter()
        .map(|m| {
            let ending = m
                .exit_code
                .map(|c| format!("exit {c}"))
                .or(m.signal_name.clone())
                .unwrap_or_default();
            let gpus = m.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            let place = format!(
                "rank {} on {} ({})",
                m.rank,
                m.node,
                m.address.clone().unwrap_or_else(|| "no address".into())
            );
            view! {
                <li>{place} " " {status_badge(m.state.as_str())} " "
                    <span class="muted">{format!("GPUs {gpus} {ending}")}</span></li>
            }
            .into_any()
        })
        .collect_view();
    view! {
        <tr class="members"><td></td><td colspan="9">
            <ul class="members" data-testid="attempt-members">{items}</ul>
        </td></tr>
    }
}

/// What an editor of the job's project may do with it: cancel (after a
/// confirmation), change the priority, hold or release while it is queued,
/// retry with changes once it ended, and submit an edited copy.
#[component]
fn JobActions(job: Job, changes: Changes) -> impl IntoView {
    let id = job.id.clone();
    let status = job.status;
    let active = matches!(
        status,
        JobStatus::Queued | JobStatus::Dispatching | JobStatus::Running
    );
    let retryable = matches!(status, JobStatus::Failed | JobStatus::Cancelled | JobStatus::Lost);
    let confirming = RwSignal::new(false);
    let priority = RwSignal::new(job.priority.to_string());
    let set = RwSignal::new(String::new());
    let force = RwSignal::new(false);
    let problem = RwSignal::new(None::<String>);
    // A retry with changes of someone else's job answers a new job of the
    // caller's: go to it. (Only after this page's own retry: `changes`
    // outlives the page, and the next job's page must not follow it back.)
    let navigate = leptos_router::hooks::use_navigate();
    let this_job = job.id.clone();
    let retried = RwSignal::new(false);
    Effect::new(move |_| {
        if let Some(Ok(body)) = changes.value().get()
            && retried.get_untracked()
            && let Ok(answer) = serde_json::from_str::<Job>(&body)
            && answer.id != this_job
        {
            retried.set(false);
            navigate(&format!("/jobs/{}", answer.id), Default::default());
        }
    });
    let path = move |action: &str| paths::job_action(&id, action);
    let cancel = {
        let path = path.clone();
        move |_| {
            confirming.set(false);
            send(
                changes,
                "POST",
                path("cancel"),
                Some(serde_json::json!({"confirm": true})),
            );
        }
    };
    let set_priority = {
        let path = path.clone();
        move |event: leptos::ev::SubmitEvent| {
            event.prevent_default();
            match priority.get_untracked().trim().parse::<i64>() {
                Ok(value) => {
                    problem.set(None);
                    send(
                        changes,
                        "POST",
                        path("priority"),
                        Some(serde_json::json!({"priority": value})),
                    );
                }
                Err(_) => problem.set(Some("priority: give a whole number (higher runs first)".into())),
            }
        }
    };
    let hold = {
        let path = path.clone();
        let action = if job.held { "release" } else { "hold" };
        move |_| send(changes, "POST", path(action), None)
    };
    let retry = {
        let path = path.clone();
        move |event: leptos::ev::SubmitEvent| {
            event.prevent_default();
            match key_values(&set.get_untracked()) {
                Ok(set) => {
                    problem.set(None);
                    let body = serde_json::json!({"set": set, "force": force.get_untracked()});
                    retried.set(true);
                    send(changes, "POST", path("retry"), Some(body));
                }
                Err(error) => problem.set(Some(format!("changes: {error}"))),
            }
        }
    };
    let name = job.name.clone();
    view! {
        <section class="card" data-testid="job-actions">
            <h2>"Actions"</h2>
            <div class="inline-form">
                {active.then(|| view! {
                    <button type="button" class="danger" data-testid="cancel" on:click=move |_| confirming.set(true)>"Cancel job…"</button>
                })}
                {(status == JobStatus::Queued).then(|| view! {
                    <button type="button" class="secondary" data-testid="hold" on:click=hold>
                        {if job.held { "Release" } else { "Hold in queue" }}
                    </button>
                })}
            </div>
            <Show when=move || confirming.get()>
                <div class="notice warn" data-testid="cancel-confirm">
                    <p>"Cancel " <strong>{name.clone()}</strong> "? A running attempt gets SIGTERM, then SIGKILL after the grace period."</p>
                    <button type="button" class="danger" data-testid="confirm-cancel" on:click=cancel.clone()>"Yes, cancel it"</button>
                    " "
                    <button type="button" class="secondary" on:click=move |_| confirming.set(false)>"Keep it"</button>
                </div>
            </Show>
            {(status == JobStatus::Queued).then(|| view! {
                <form class="inline-form" data-testid="priority-form" on:submit=set_priority>
                    <label>"Priority (higher runs first)"
                        <input name="priority" inputmode="numeric" bind:value=priority />
                    </label>
                    <button type="submit">"Set priority"</button>
                </form>
            })}
            {retryable.then(|| view! {
                <form data-testid="retry-form" on:submit=retry>
                    <label>"Changes for the retry, one KEY=VALUE per line (as gpuctl job retry --set): "
                        "env.BATCH_SIZE=16, resources.gpu=2, priority=5, time_limit_s=2h, command=python train.py --resume"
                        <textarea name="set" rows="3" bind:value=set></textarea>
                    </label>
                    <label class="check">
                        <input type="checkbox" name="force" bind:checked=force />
                        " Retry even if it ran out of memory and nothing changed"
                    </label>
                    <p class="muted">"Changes to someone else's job make a new job of yours, without their secrets."</p>
                    <button type="submit" data-testid="retry">"Retry"</button>
                </form>
            })}
            {move || problem.get().map(|text| view! { <p class="error" role="alert">{text}</p> })}
            <Outcome changes=changes done="Done." />
            <ResubmitCopy job=job.clone() />
        </section>
    }
}

/// An edited copy of the job's spec, submitted as a new job; the page then
/// goes to it. Secret variables are not shown, so they are not copied.
#[component]
fn ResubmitCopy(job: Job) -> impl IntoView {
    let copy = Changes::new();
    let open = RwSignal::new(false);
    let mut spec = job.spec.clone();
    spec.secret_env.clear();
    let text = RwSignal::new(serde_json::to_string_pretty(&spec).unwrap_or_default());
    let problem = RwSignal::new(None::<String>);
    let submit = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        match serde_json::from_str::<serde_json::Value>(&text.get_untracked()) {
            Ok(spec) => {
                problem.set(None);
                send(copy, "POST", paths::jobs(), Some(spec));
            }
            Err(error) => problem.set(Some(format!("the spec is not JSON: {error}"))),
        }
    };
    let navigate = leptos_router::hooks::use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(body)) = copy.value().get()
            && let Ok(created) = serde_json::from_str::<Job>(&body)
        {
            navigate(&format!("/jobs/{}", created.id), Default::default());
        }
    });
    let secrets = (!job.secret_env.is_empty()).then(|| {
        format!(
            "Secret variables are not copied: add them to secret_env again ({}).",
            job.secret_env.join(", ")
        )
    });
    view! {
        <button type="button" class="secondary" data-testid="resubmit" on:click=move |_| open.update(|o| *o = !*o)>
            "Submit a copy with edits…"
        </button>
        <Show when=move || open.get()>
            <form data-testid="resubmit-form" on:submit=submit>
                <label>"Job spec (JSON, as the API takes it)"
                    <textarea name="spec" rows="16" class="mono" bind:value=text></textarea>
                </label>
                {secrets.clone().map(|text| view! { <p class="muted">{text}</p> })}
                <button type="submit">"Submit copy"</button>
            </form>
            {move || problem.get().map(|text| view! { <p class="error" role="alert">{text}</p> })}
            <Outcome changes=copy done="Submitted: opening the new job…" />
        </Show>
    }
}
