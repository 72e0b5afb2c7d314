//! `/sweeps` (every sweep the user can see) and `/sweeps/{sweep_id}`: its
//! state and best trial, its charts (best so far, parallel coordinates,
//! each parameter against the metric), every trial with links to its run
//! and job, and for editors pause, resume and stop (after a confirmation).
//! An open sweep's page reads it again every 2 s.

use crate::api::fetch;
use crate::view::actions::{Changes, Outcome, send};
use crate::view::format::{self, status_badge};
use crate::view::live;
use crate::view::query::api;
use crate::view::sweep_charts;
use crate::view::{ShowLoaded, loaded};
use gpuplane_api::Page;
use gpuplane_api::metric::Goal;
use gpuplane_api::paths;
use gpuplane_api::project::{Project, Role};
use gpuplane_api::sweep::{Sweep, SweepState, Trial, render};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

fn best_text(sweep: &Sweep) -> String {
    match (&sweep.best, &sweep.metric) {
        (Some(best), Some(metric)) => format!(
            "trial {}: {} {}",
            best.number,
            metric.name,
            best.value.map_or("–".into(), format::value)
        ),
        _ => "–".into(),
    }
}

#[component]
pub fn Sweeps() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    let sweeps = Resource::new(
        move || (param("project"), param("before")),
        |(project, before)| {
            fetch::<Page<Sweep>>(api(
                &paths::sweeps(),
                &[("project", &project), ("before", &before)],
            ))
        },
    );
    view! {
        <Title text="Sweeps" />
        <h1>"Sweeps"</h1>
        {loaded(sweeps, move |page: Page<Sweep>| {
            if page.items.is_empty() {
                return view! {
                    <p class="muted" data-testid="no-sweeps">"No sweeps yet. Start one from a W&B sweep file: gpuctl sweep create -f sweep.yaml"</p>
                }.into_any();
            }
            view! {
                <table class="table" data-testid="sweeps">
                    <thead><tr><th>"Sweep"</th><th>"Project"</th><th>"State"</th><th>"Method"</th><th>"Trials"</th><th>"Best"</th><th>"Created"</th></tr></thead>
                    <tbody>
                        {page.items.into_iter().map(|sweep| {
                            let made: u32 = sweep.trial_states.values().sum();
                            view! {
                                <tr>
                                    <td><a href=format!("/sweeps/{}", sweep.id)>{sweep.name.clone()}</a></td>
                                    <td>{sweep.project.clone()}</td>
                                    <td>{status_badge(sweep.state.as_str())}</td>
                                    <td>{sweep.method.as_str()}</td>
                                    <td>{format!("{made} of {}", sweep.max_trials)}</td>
                                    <td>{best_text(&sweep)}</td>
                                    <td>{format::time(&sweep.created_at)}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        })}
    }
}

#[component]
pub fn SweepPage() -> impl IntoView {
    let params = use_params_map();
    let sweep_id = move || params.read().get("sweep_id").unwrap_or_default();
    let changes = Changes::new();
    // Kept outside the body, which is drawn again on each refresh.
    let confirming = RwSignal::new(false);
    let (tick, open) = live::refreshing(2_000);
    let sweep = Resource::new(
        move || (sweep_id(), changes.version().get(), tick.get()),
        |(id, ..)| fetch::<Sweep>(paths::sweep(&id)),
    );
    let projects = Resource::new(|| (), |_| fetch::<Page<Project>>(paths::projects()));
    view! {
        <Title text="Sweep" />
        {loaded(sweep, move |sweep: Sweep| {
            open.set(!sweep.state.is_terminal());
            let project = sweep.project.clone();
            let may_change = move || {
                projects.get().and_then(Result::ok).is_some_and(|page| {
                    page.items.iter().any(|p| p.name == project && p.role >= Role::Editor)
                })
            };
            let state = sweep.state;
            let id = sweep.id.clone();
            view! {
                <h1>"Sweep " {sweep.name.clone()}</h1>
                <SweepSummary sweep=sweep.clone() />
                <Transition fallback=|| ()>
                    <ShowLoaded when=may_change.clone()>
                        <SweepActions sweep_id=id.clone() state confirming changes />
                    </ShowLoaded>
                </Transition>
                <SweepCharts sweep=sweep.clone() />
                <TrialsTable sweep />
            }
        })}
    }
}

#[component]
fn SweepSummary(sweep: Sweep) -> impl IntoView {
    let states = sweep
        .trial_states
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect::<Vec<_>>()
        .join(", ");
    let made: u32 = sweep.trial_states.values().sum();
    let metric = sweep.metric.as_ref().map_or("none".to_string(), |m| {
        let goal = if m.goal == Goal::Max {
            "maximize"
        } else {
            "minimize"
        };
        format!("{} ({goal})", m.name)
    });
    let early = sweep.early_terminate.map_or("none".to_string(), |stop| {
        serde_json::to_value(stop)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .map(|o| {
                o.iter()
                    .map(|(k, v)| {
                        if k == "type" {
                            render(v)
                        } else {
                            format!("{k} {}", render(v))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    });
    let best = sweep.best.clone();
    view! {
        <section class="card" data-testid="sweep">
            <dl class="details">
                <dt>"Id"</dt><dd class="mono">{sweep.id.clone()}</dd>
                <dt>"State"</dt><dd data-testid="sweep-state">{status_badge(sweep.state.as_str())}
                    {sweep.reason.clone().map(|r| format!(" ({r})"))}</dd>
                <dt>"Project"</dt><dd>{sweep.project.clone()}</dd>
                <dt>"Method"</dt><dd>{format!("{}, seed {}", sweep.method, sweep.seed)}</dd>
                <dt>"Metric"</dt><dd>{metric}</dd>
                <dt>"Early stop"</dt><dd>{early}</dd>
                <dt>"Trials"</dt><dd data-testid="sweep-trials">{format!("{made} of {}", sweep.max_trials)}
                    {(!states.is_empty()).then(|| format!(": {states}"))}</dd>
                {best.map(|best| view! {
                    <dt>"Best"</dt>
                    <dd data-testid="sweep-best">{format!("trial {}: {} ", best.number, best.value.map_or("–".into(), format::value))}
                        <a href=format!("/runs/{}", best.run_id)>"its run"</a>
                        {format!(" · {}", params_text(&best))}</dd>
                })}
                <dt>"Created"</dt><dd>{format::time(&sweep.created_at)} " by " {sweep.created_by.clone().unwrap_or_else(|| "–".into())}</dd>
            </dl>
        </section>
    }
}

fn params_text(trial: &Trial) -> String {
    trial
        .params
        .iter()
        .map(|(k, v)| format!("{k}={}", render(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Pause or resume, and stop after a confirmation.
#[component]
fn SweepActions(
    sweep_id: String,
    state: SweepState,
    confirming: RwSignal<bool>,
    changes: Changes,
) -> impl IntoView {
    let act = {
        let sweep_id = sweep_id.clone();
        move |action: &'static str| {
            let body = (action == "stop").then(|| serde_json::json!({"confirm": true}));
            confirming.set(false);
            send(changes, "POST", paths::sweep_action(&sweep_id, action), body);
        }
    };
    let (pause, resume, stop) = (act.clone(), act.clone(), act);
    view! {
        {(!state.is_terminal()).then(|| view! {
            <div class="actions">
                {(state == SweepState::Running).then(|| view! {
                    <button type="button" class="secondary" data-testid="pause-sweep" on:click=move |_| pause("pause")>"Pause"</button>
                })}
                {(state == SweepState::Paused).then(|| view! {
                    <button type="button" class="secondary" data-testid="resume-sweep" on:click=move |_| resume("resume")>"Resume"</button>
                })}
                " "
                <button type="button" class="danger" data-testid="stop-sweep" on:click=move |_| confirming.set(true)>"Stop…"</button>
            </div>
        })}
        <Show when=move || confirming.get()>
            <div class="notice warn" data-testid="stop-sweep-confirm">
                <p>"Stop the sweep? Its queued and running trials are cancelled (SIGTERM, then SIGKILL after the grace period)."</p>
                <button type="button" class="danger" data-testid="confirm-stop-sweep" on:click={
                    let stop = stop.clone();
                    move |_| stop("stop")
                }>"Yes, stop it"</button>
                " "
                <button type="button" class="secondary" on:click=move |_| confirming.set(false)>"Keep it"</button>
            </div>
        </Show>
        <Outcome changes=changes done="Done." />
    }
}

#[component]
fn SweepCharts(sweep: Sweep) -> impl IntoView {
    let Ok(checked) = sweep.spec.check(sweep.seed) else {
        return ().into_any();
    };
    let goal = sweep.metric.as_ref().map_or(Goal::Min, |m| m.goal);
    let metric = sweep
        .metric
        .as_ref()
        .map_or("metric".to_string(), |m| m.name.clone());
    let best = sweep.best.as_ref().map(|b| b.number);
    let progress = sweep_charts::best_so_far(&sweep.trials, goal);
    let parallel = sweep_charts::parallel_coordinates(&sweep.trials, &checked.parameters, &metric, best);
    let scatters = sweep_charts::parameter_scatters(&sweep.trials, &checked.parameters);
    if progress.is_none() {
        return view! { <p class="muted" data-testid="sweep-no-values">{format!("No trial has logged {metric} yet.")}</p> }.into_any();
    }
    view! {
        <section class="card">
            <h2>"Best so far"</h2>
            <div class="chart-svg" data-testid="sweep-best-so-far" inner_html=progress.unwrap_or_default()></div>
            <h2>"Parameters and " {metric.clone()}</h2>
            <div class="chart-svg" data-testid="sweep-parallel" inner_html=parallel.unwrap_or_default()></div>
            <div class="chart-grid" data-testid="sweep-scatters">
                {scatters.into_iter().map(|(name, svg)| view! {
                    <figure class="chart-svg" data-parameter=name.clone()><div inner_html=svg></div><figcaption>{format!("{name} against {metric}")}</figcaption></figure>
                }).collect_view()}
            </div>
        </section>
    }
    .into_any()
}

#[component]
fn TrialsTable(sweep: Sweep) -> impl IntoView {
    let names: Vec<String> = sweep
        .trials
        .first()
        .map(|t| t.params.keys().cloned().collect())
        .unwrap_or_default();
    let heads = names.clone();
    view! {
        <section class="card">
            <h2>"Trials"</h2>
            <table class="table" data-testid="trials">
                <thead><tr><th>"#"</th><th>"State"</th><th>"Value"</th><th>"Step"</th><th>"Rungs"</th>
                    {heads.into_iter().map(|n| view! { <th>{n}</th> }).collect_view()}
                    <th>"Run"</th></tr></thead>
                <tbody>
                    {sweep.trials.into_iter().rev().map(|trial| {
                        let state = if trial.failure_reason.as_deref() == Some("SWEEP_PRUNED") { "PRUNED".to_string() } else { trial.state.clone() };
                        let cells: Vec<String> = names.iter().map(|n| trial.params.get(n).map(render).unwrap_or_default()).collect();
                        view! {
                            <tr data-trial=trial.number>
                                <td><a href=format!("/jobs/{}", trial.job_id)>{trial.number}</a></td>
                                <td>{status_badge(state)}</td>
                                <td>{trial.value.map_or("–".into(), format::value)}</td>
                                <td>{trial.step.map_or("–".into(), |s| s.to_string())}</td>
                                <td>{trial.rungs.len()}</td>
                                {cells.into_iter().map(|c| view! { <td class="mono">{c}</td> }).collect_view()}
                                <td><a href=format!("/runs/{}", trial.run_id)>"run"</a></td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}
