//! `/runs/{run_id}`: the shareable run page. The view (metrics, x axis,
//! smoothing, range, compared runs, tab, log stream, search) lives in the
//! URL query, so a copied link opens the same view.

use crate::api::{api_get_many, fetch};
use crate::view::actions::{Changes, Outcome, send};
use crate::view::chart::ChartSurface;
use crate::view::error_text;
use crate::view::format::{self, status_badge};
use crate::view::live::{self, Next};
use crate::view::logs::{HiddenParams, LogViewer, LogsOf};
use crate::view::query::{api, link};
use crate::view::tables::EventsTable;
use crate::view::{ShowLoaded, loaded};
use gpuplane_api::Page;
use gpuplane_api::diagnosis::{Diagnosis, Evidence, FailureExplanation};
use gpuplane_api::evaluation::Evaluation;
use gpuplane_api::event::Event;
use gpuplane_api::job::Job;
use gpuplane_api::metric::{Checkpoint, Run, TextPage};
use gpuplane_api::paths;
use gpuplane_api::project::{Project, Role};
use gpuplane_api::telemetry::{AttemptSpan, GPU_FIELDS, PROCESS_FIELDS, SystemTelemetry};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_location, use_params_map, use_query_map};

const TABS: [(&str, &str); 8] = [
    ("logs", "Logs"),
    ("events", "Events"),
    ("system", "System"),
    ("texts", "Texts"),
    ("checkpoints", "Checkpoints"),
    ("evaluations", "Evaluations"),
    ("diagnosis", "Diagnosis"),
    ("share", "Share"),
];

/// The chart settings the URL carries.
#[derive(Debug, Clone, PartialEq)]
struct ChartView {
    metrics: Vec<String>,
    x: String,
    smooth: String,
    from: String,
    to: String,
    compare: String,
    y_scale: String,
    y_min: String,
    y_max: String,
}

/// The run's id, then the compared runs' (`compare`), each once.
fn with_compared(run_id: &str, compare: &str) -> Vec<String> {
    let mut ids = vec![run_id.to_string()];
    for other in compare.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        if !ids.iter().any(|known| known == other) {
            ids.push(other.to_string());
        }
    }
    ids
}

/// Charts are drawn at about the width the page shows them (two to a row
/// on a wide screen), so their 16 px text reads at about that size.
const CHART_WIDTH: &str = "640";
const CHART_HEIGHT: &str = "320";

/// The namespace a metric's chart is grouped under.
fn group_of(key: &str) -> &'static str {
    if key.starts_with("train/") {
        "train/"
    } else if key.starts_with("eval/") {
        "eval/"
    } else {
        "other"
    }
}

/// The URL of a chart as `svg` or `png`.
fn chart_path(run_id: &str, key: &str, view: &ChartView, format: &str) -> String {
    api(
        &paths::run_chart(run_id, format),
        &[
            ("key", key),
            ("x", &view.x),
            ("smooth", &view.smooth),
            ("from", &view.from),
            ("to", &view.to),
            ("compare", &view.compare),
            ("y_scale", &view.y_scale),
            ("y_min", &view.y_min),
            ("y_max", &view.y_max),
            ("width", CHART_WIDTH),
            ("height", CHART_HEIGHT),
        ],
    )
}

/// The API reads of a chart's lines (the run's, then the compared runs'),
/// for its hover read-out, and the label of each ("" for a lone run).
fn series_paths(run_id: &str, key: &str, view: &ChartView) -> (Vec<String>, Vec<String>) {
    let ids = with_compared(run_id, &view.compare);
    let labels = if ids.len() == 1 {
        vec![String::new()]
    } else {
        ids.iter().map(|id| format!("{id}: ")).collect()
    };
    let paths = ids
        .iter()
        .map(|id| {
            api(
                &paths::run_metrics(id),
                &[
                    ("key", key),
                    ("max_points", "320"),
                    ("x", &view.x),
                    ("from", &view.from),
                    ("to", &view.to),
                ],
            )
        })
        .collect();
    (paths, labels)
}

/// Charts by metric key or telemetry field: each an SVG, or why it could
/// not be drawn.
type Charts = Vec<(String, Result<String, String>)>;

/// The selected metrics' charts.
async fn load_charts(run_id: String, view: ChartView) -> Result<Charts, ServerFnError> {
    let run = fetch::<Run>(paths::run(&run_id)).await?;
    let keys: Vec<String> = run
        .latest
        .keys()
        .filter(|key| view.metrics.is_empty() || view.metrics.contains(key))
        .cloned()
        .collect();
    if keys.is_empty() {
        // An empty list would reach the server function as no `paths` at all.
        return Ok(Vec::new());
    }
    let paths = keys
        .iter()
        .map(|key| chart_path(&run_id, key, &view, "svg"))
        .collect();
    let svgs = api_get_many(paths).await?;
    Ok(keys.into_iter().zip(svgs).collect())
}

#[component]
pub fn RunPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let location = use_location();
    let id = Memo::new(move |_| params.read().get("run_id").unwrap_or_default());
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    // Bumped by the live stream while the run is going.
    let tick = RwSignal::new(0u64);
    let changes = Changes::new();
    let summary: SummaryResource = Resource::new(
        move || (id.get(), tick.get(), changes.version().get()),
        |(id, _, _)| load_summary(id),
    );
    let projects = Resource::new(|| (), |_| fetch::<Page<Project>>(paths::projects()));
    let view_state = Memo::new(move |_| ChartView {
        metrics: query.read().get_all("metric").unwrap_or_default(),
        x: param("x"),
        smooth: param("smooth"),
        from: param("from"),
        to: param("to"),
        compare: param("compare"),
        y_scale: param("y_scale"),
        y_min: param("y_min"),
        y_max: param("y_max"),
    });
    let charts = Resource::new(
        move || (id.get(), view_state.get(), tick.get()),
        |(id, view, _)| load_charts(id, view),
    );
    let live_url = Memo::new(move |_| {
        let status = summary
            .get()
            .and_then(Result::ok)
            .map(|summary| summary.run.status)?;
        matches!(status.as_str(), "QUEUED" | "DISPATCHING" | "RUNNING").then(|| paths::run_stream(&id.get()))
    });
    let live_state = RwSignal::new(None::<&'static str>);
    live::follow(
        move || live_url.get(),
        &["changed"],
        move |_, _| {
            tick.update(|t| *t += 1);
            Next::Continue
        },
        move |up| live_state.set(Some(if up { "live" } else { "reconnecting…" })),
    );
    // The viewer's role in the run's project: editors change the run, admins archive and delete it.
    let has_role = move |needed: Role| {
        let project = summary
            .get()
            .and_then(Result::ok)
            .map(|summary| summary.run.project);
        let projects = projects.get().and_then(Result::ok);
        matches!((project, projects), (Some(project), Some(page))
            if page.items.iter().any(|p| p.name == project && p.role >= needed))
    };
    let can_edit = Signal::derive(move || has_role(Role::Editor));
    let can_admin = Signal::derive(move || has_role(Role::Admin));
    let tab = move || {
        let chosen = param("tab");
        if TABS.iter().any(|(name, _)| *name == chosen) {
            chosen
        } else {
            "logs".to_string()
        }
    };
    view! {
        <Title text="Run" />
        // Top-down: what is wrong, the charts, then the details and the logs.
        {loaded(summary, move |summary: RunSummary| view! { <Heading run=summary.run job=summary.job /> })}
        <Transition fallback=|| ()>
            {move || summary.get().map(|found| match found.map(|summary| summary.failure) {
                Ok(Some(failure)) => view! {
                    <section class="card failure" data-testid="failure-banner" role="alert">
                        <h2>"Failed: " {failure.summary}</h2>
                        {failure.actions.first().cloned().map(|action| view! { <p>"First thing to try: " {action}</p> })}
                        <a href=move || link(&location.pathname.get(), &query.read(), &[("tab", Some("diagnosis"))])>
                            "The evidence, likely causes and what else to try"</a>
                    </section>
                }.into_any(),
                // `loaded` above shows an error.
                Ok(None) | Err(_) => ().into_any(),
            })}
        </Transition>
        <Transition fallback=|| ()>
            {move || summary.get().and_then(Result::ok).map(|summary| summary.run.metrics_events).filter(|events| !events.is_empty()).map(|events| view! {
                <section class="notice warn" data-testid="metrics-elsewhere" role="status">
                    <h2>"Metrics that did not reach this run"</h2>
                    <ul>
                        {events.into_iter().map(|event| view! {
                            <li><strong>{event.kind.as_str()}</strong> " " <span class="muted">{event.time}</span> " " {event.message}</li>
                        }).collect_view()}
                    </ul>
                </section>
            })}
        </Transition>
        <Transition fallback=|| ()>
            {move || summary.get().and_then(Result::ok).map(|summary| view! { <LatestValues run=summary.run /> })}
        </Transition>
        <span class="muted" data-testid="run-live" role="status">{move || live_state.get()}</span>
        <section class="card">
            <h2>"Charts"</h2>
            <form method="get" class="inline-form" data-testid="chart-view">
                <HiddenParams except=&["x", "smooth", "from", "to", "compare", "metric", "y_scale", "y_min", "y_max"] />
                <fieldset class="metric-picker">
                    <legend>"Metrics (none ticked: all)"</legend>
                    <Transition fallback=|| ()>
                        {move || summary.get().and_then(Result::ok).map(|summary| {
                            let chosen = view_state.read_untracked().metrics.clone();
                            summary.run.latest.into_keys().map(|key| {
                                let checked = chosen.contains(&key);
                                view! { <label class="check"><input type="checkbox" name="metric" value=key.clone() checked=checked />{key}</label> }
                            }).collect_view()
                        })}
                    </Transition>
                </fieldset>
                <label>"X axis"
                    <select name="x">
                        <option value="step" selected=move || param("x") != "time">"step"</option>
                        <option value="time" selected=move || param("x") == "time">"wall time"</option>
                    </select>
                </label>
                <label>"Y axis"
                    <select name="y_scale">
                        <option value="" selected=move || param("y_scale") != "log">"linear"</option>
                        <option value="log" selected=move || param("y_scale") == "log">"log"</option>
                    </select>
                </label>
                <label>"Y min" <input name="y_min" inputmode="decimal" size="6" prop:value=move || param("y_min") placeholder="auto" /></label>
                <label>"Y max" <input name="y_max" inputmode="decimal" size="6" prop:value=move || param("y_max") placeholder="auto" /></label>
                <label>"Smoothing (0–0.99)" <input name="smooth" type="number" min="0" max="0.99" step="0.05" prop:value=move || param("smooth") /></label>
                <label>"From" <input name="from" inputmode="decimal" prop:value=move || param("from") placeholder="start" /></label>
                <label>"To" <input name="to" inputmode="decimal" prop:value=move || param("to") placeholder="end" /></label>
                <label>"Compare with runs" <input name="compare" prop:value=move || param("compare") placeholder="run ids, comma-separated" /></label>
                <button type="submit">"Apply"</button>
                <a href=move || link(&location.pathname.get(), &query.read(), &[("from", None), ("to", None), ("y_min", None), ("y_max", None)])>"Whole range"</a>
            </form>
            <CopyLink />
            <Transition fallback=|| view! { <p class="muted">"Drawing charts…"</p> }>
                {move || charts.get().map(|result| match result {
                    Err(error) => view! { <p class="error" role="alert">{error_text(&error)}</p> }.into_any(),
                    Ok(list) if list.is_empty() && summary.get().and_then(Result::ok).is_some_and(|s| !s.run.metrics_events.is_empty()) => view! {
                        <p class="empty" data-testid="no-metrics">"No metrics on this run: the notice above says where what the job logged went."</p>
                    }.into_any(),
                    Ok(list) if list.is_empty() => view! {
                        <p class="empty" data-testid="no-metrics">"No metrics yet: write TensorBoard events into a watch dir of the job, or call "
                            <code>"run.log({\"train/loss\": loss}, step=step)"</code> " with the Python SDK."</p>
                    }.into_any(),
                    Ok(list) => ["train/", "eval/", "other"].into_iter().filter_map(|group| {
                        let charts: Vec<_> = list.iter().filter(|(key, _)| group_of(key) == group).cloned().collect();
                        (!charts.is_empty()).then(|| view! {
                            <h3>{group}</h3>
                            <div class="charts">
                                {charts.into_iter().map(|(key, svg)| {
                                    let (run_id, view) = (id.get_untracked(), view_state.get_untracked());
                                    let (svg_href, png_href) = (chart_path(&run_id, &key, &view, "svg"), chart_path(&run_id, &key, &view, "png"));
                                    let (series_paths, labels) = series_paths(&run_id, &key, &view);
                                    match svg {
                                        Ok(svg) => view! {
                                            <figure class="chart" data-key=key.clone()>
                                                <ChartSurface svg=svg series_paths=series_paths labels=labels by_time=view.x == "time" />
                                                <figcaption>
                                                    <a rel="external" href=svg_href target="_blank">"SVG"</a> " · "
                                                    <a rel="external" href=png_href target="_blank" data-testid="chart-png">"PNG"</a>
                                                </figcaption>
                                            </figure>
                                        }.into_any(),
                                        Err(error) => view! { <p class="error">{key} ": " {error}</p> }.into_any(),
                                    }
                                }).collect_view()}
                            </div>
                        })
                    }).collect_view().into_any(),
                })}
            </Transition>
        </section>
        <Show when=move || !view_state.read().compare.trim().is_empty()>
            <ConfigDiff run_id=id view=view_state />
        </Show>
        <Transition fallback=|| ()>
            {move || summary.get().and_then(Result::ok).map(|summary| view! { <Summary run=summary.run job=summary.job /> })}
        </Transition>
        // Outside the summary's view: the live stream reloads the summary,
        // and an open form must survive that.
        <Transition fallback=|| ()>
            <ShowLoaded when=move || can_edit.get()>
                <RunDetailsForm summary=summary changes=changes />
            </ShowLoaded>
            <ShowLoaded when=move || can_admin.get()>
                <RunLifecycle summary=summary changes=changes />
            </ShowLoaded>
        </Transition>
        <nav class="tabs" aria-label="Run sections">
            {TABS.map(|(name, label)| view! {
                <a href=move || link(&location.pathname.get(), &query.read(), &[("tab", Some(name))])
                    aria-current=move || (tab() == name).then_some("page")>{label}</a>
            })}
        </nav>
        {move || {
            let id = id.get();
            match tab().as_str() {
                "events" => view! { <RunEvents run_id=id tick=tick /> }.into_any(),
                "checkpoints" => view! { <Checkpoints run_id=id tick=tick /> }.into_any(),
                "texts" => view! { <Texts run_id=id tick=tick /> }.into_any(),
                "system" => view! { <System run_id=id tick=tick /> }.into_any(),
                "evaluations" => view! { <Evaluations run_id=id tick=tick /> }.into_any(),
                "diagnosis" => view! { <DiagnosisView run_id=id tick=tick /> }.into_any(),
                "share" => view! { <super::shares::Shares run_id=id can_edit=can_edit /> }.into_any(),
                _ => view! { <LogViewer of=LogsOf::Run(id) /> }.into_any(),
            }
        }}
    }
}

#[component]
fn Summary(run: Run, job: Option<Job>) -> impl IntoView {
    let attempt = job.as_ref().and_then(|job| job.attempts.last().cloned());
    let duration = job.as_ref().and_then(|job| {
        let start = job
            .attempts
            .first()?
            .started_at
            .as_deref()
            .and_then(format::epoch_seconds)?;
        let end = job
            .attempts
            .last()?
            .ended_at
            .as_deref()
            .and_then(format::epoch_seconds);
        Some(match end {
            Some(end) => format::duration(end - start),
            None => format!("{} so far", format::duration(now_seconds() - start)),
        })
    });
    // What the agent read from the working directory, else what the job's environment says.
    let git = attempt.as_ref().and_then(|a| a.git_commit.clone()).or_else(|| {
        let env = &job.as_ref()?.spec.env;
        ["GIT_COMMIT", "GIT_SHA"]
            .iter()
            .find_map(|name| env.get(*name).cloned())
    });
    let primary = run.primary_metric.clone();
    let source = job
        .as_ref()
        .and_then(|job| Some(job.spec.git.as_ref()?.describe()));
    view! {
        <section class="card">
            <dl class="details" data-testid="run-summary">
                <dt>"Project"</dt><dd>{run.project.clone()}</dd>
                {job.as_ref().map(|job| view! { <dt>"Job"</dt><dd><a href=format!("/jobs/{}", job.id)>{job.id.clone()}</a></dd> })}
                <dt>"Duration"</dt><dd>{duration.unwrap_or_else(|| "not started".into())}</dd>
                <dt>"Node"</dt><dd>{attempt.as_ref().map(|a| a.node.clone()).unwrap_or_else(|| "–".into())}</dd>
                <dt>"GPUs"</dt><dd data-testid="run-gpus">{attempt.as_ref().map_or_else(|| "none".to_string(), |a| gpus_text(&a.gpus))}</dd>
                <dt>"Primary metric"</dt>
                <dd data-testid="primary-metric">{match primary {
                    None => "not set (gpuctl run set-primary RUN KEY --goal max|min)".to_string(),
                    Some(p) => match p.best {
                        Some(best) => format!("{} ({}): best {} at step {}{}", p.key, p.goal.as_str(), format::value(best.value.0), best.step,
                            p.best_checkpoint.map(|c| format!(", checkpoint {c}")).unwrap_or_default()),
                        None => format!("{} ({}): no finite value yet", p.key, p.goal.as_str()),
                    },
                }}</dd>
                {git.map(|git| view! { <dt>"Git commit"</dt><dd data-testid="git-commit">{git}</dd> })}
                {source.map(|source| view! { <dt>"Submitted from"</dt><dd data-testid="git-source">{source}</dd> })}
                <dt>"Created"</dt><dd>{format::time(&run.created_at)}</dd>
                <dt>"Run id"</dt><dd>{run.id.clone()}</dd>
                {(!run.tags.is_empty()).then(|| view! {
                    <dt>"Tags"</dt>
                    <dd data-testid="run-tags">{run.tags.iter().map(|tag| view! {
                        <span class="badge">{tag.clone()}</span> " "
                    }).collect_view()}</dd>
                })}
            </dl>
            {(!run.notes.is_empty()).then(|| view! { <p class="notes" data-testid="run-notes">{run.notes.clone()}</p> })}
        </section>
        {(!run.config.is_empty()).then(|| view! {
            // A long config opens on request: it never pushes what follows away.
            <details class="card" open=run.config.len() <= OPEN_CONFIG_KEYS>
                <summary><h2 class="inline">"Config"</h2> " " <span class="muted">{format!("{} keys", run.config.len())}</span></summary>
                <div class="table-scroll"><table data-testid="run-config">
                    <thead><tr><th>"Key"</th><th>"Value"</th></tr></thead>
                    <tbody>{run.config.iter().map(|(key, value)| view! {
                        <tr><td class="mono">{key.clone()}</td><td class="mono">{gpuplane_api::experiment::show_value(value)}</td></tr>
                    }).collect_view()}</tbody>
                </table></div>
            </details>
        })}
    }
}

/// Configs up to this many keys show open; longer ones open on a click.
const OPEN_CONFIG_KEYS: usize = 12;

/// The run's name, state and warnings about its source: the page's top line.
#[component]
fn Heading(run: Run, job: Option<Job>) -> impl IntoView {
    let mismatches = job.as_ref().map(Job::source_mismatches).unwrap_or_default();
    view! {
        <Title text=format!("Run {}", run.name) />
        <h1>{run.name.clone()} " " {status_badge(run.status.clone())}
            {run.archived_at.clone().map(|at| view! { " " <span class="badge" data-testid="run-archived" title=format!("archived {}", format::time(&at))>"archived"</span> })}</h1>
        {mismatches.into_iter().map(|warning| view! {
            <p class="notice warn" data-testid="git-mismatch">{warning}</p>
        }).collect_view()}
    }
}

/// Each metric's latest value, a card each; non-finite ones stand out.
#[component]
fn LatestValues(run: Run) -> impl IntoView {
    view! {
        {(!run.latest.is_empty()).then(|| view! {
            <section class="cards" data-testid="latest">
                {run.latest.iter().map(|(key, latest)| view! {
                    <div class="metric-card" class:bad=latest.non_finite data-key=key.clone()>
                        <div class="metric-key">{key.clone()}</div>
                        <div class="metric-value">{format::value(latest.value.0)}
                            {latest.non_finite.then(|| view! { " " <span class="badge nonfinite" data-testid="non-finite">"non-finite"</span> })}</div>
                        <div class="muted">"step " {latest.step} " · " {latest.count} " points"
                            {(latest.non_finite_count > 0).then(|| format!(" · {} non-finite", latest.non_finite_count))}</div>
                    </div>
                }).collect_view()}
            </section>
        })}
    }
}

/// `1 (GPU 0)`, `2 (GPUs 0, 1)`, or `none`.
fn gpus_text(gpus: &[u32]) -> String {
    let indices: Vec<String> = gpus.iter().map(u32::to_string).collect();
    match gpus.len() {
        0 => "none".into(),
        1 => format!("1 (GPU {})", indices[0]),
        count => format!("{count} (GPUs {})", indices.join(", ")),
    }
}

/// Seconds since the epoch now (for "running for").
fn now_seconds() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        (js_sys_now() / 1000.0) as i64
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default()
    }
}

#[cfg(feature = "hydrate")]
fn js_sys_now() -> f64 {
    web_sys::js_sys::Date::now()
}

/// Copies the page's address (the current view) to the clipboard.
#[component]
fn CopyLink() -> impl IntoView {
    let copied = RwSignal::new(false);
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(window) = web_sys::window()
            && let Ok(href) = window.location().href()
        {
            let _ = window.navigator().clipboard().write_text(&href);
            copied.set(true);
        }
    };
    view! {
        <p class="share">
            "The address of this page is the view: share it. "
            <button type="button" class="secondary" on:click=copy data-testid="copy-link">"Copy link"</button>
            {move || copied.get().then(|| view! { <span class="info">" Copied."</span> })}
        </p>
    }
}

#[component]
fn RunEvents(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
    let events = Resource::new(
        move || (run_id.clone(), tick.get()),
        |(id, _)| fetch::<Page<Event>>(api(&paths::events(), &[("run_id", &id), ("limit", "100")])),
    );
    view! {
        <section class="card">
            {loaded(events, |page: Page<Event>| view! { <EventsTable events=page.items empty="No events for this run." /> })}
        </section>
    }
}

#[component]
fn Checkpoints(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
    let checkpoints = Resource::new(
        move || (run_id.clone(), tick.get()),
        |(id, _)| fetch::<Page<Checkpoint>>(paths::run_checkpoints(&id)),
    );
    view! {
        <section class="card">
            {loaded(checkpoints, |page: Page<Checkpoint>| {
                if page.items.is_empty() {
                    return view! { <p class="empty">"No checkpoints yet: files named *.pt, *.pth, *.ckpt or *.safetensors in a watch dir appear here."</p> }.into_any();
                }
                view! {
                    <div class="table-scroll"><table data-testid="checkpoints">
                        <thead><tr><th>"Path"</th><th>"Step"</th><th>"Size"</th><th>"Written"</th><th>"Primary metric"</th><th></th></tr></thead>
                        <tbody>{page.items.into_iter().map(|c| view! {
                            <tr>
                                <td class="mono">{c.path}</td>
                                <td>{c.step.map(|s| s.to_string()).unwrap_or_else(|| "–".into())}</td>
                                <td>{format!("{:.1} MiB", c.size as f64 / 1_048_576.0)}</td>
                                <td>{format::time(&c.modified_at)}</td>
                                <td>{c.primary_value.map(|v| format::value(v.0))} {c.best.then(|| view! { " " <span class="badge best">"best"</span> })}</td>
                                <td>{(!c.shared_with.is_empty()).then(|| view! {
                                    <span class="error">"also written by " {c.shared_with.join(", ")} ": not safe to evaluate"</span>
                                })}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table></div>
                }.into_any()
            })}
        </section>
    }
}

/// The job's GPUs and processes over each attempt (the agent's telemetry):
/// one chart per field, a line per GPU.
#[component]
fn System(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
    let charts = Resource::new(
        move || (run_id.clone(), tick.get()),
        |(id, _)| async move {
            let spans =
                fetch::<SystemTelemetry>(api(&paths::run_system(&id), &[("max_points", "1")])).await?;
            if spans.attempts.is_empty() {
                return Ok::<_, ServerFnError>((spans.attempts, Vec::new()));
            }
            let fields: Vec<(&str, &str)> = GPU_FIELDS.iter().chain(PROCESS_FIELDS.iter()).copied().collect();
            let paths = fields
                .iter()
                .map(|(field, _)| api(&paths::run_system_chart(&id), &[("field", field)]))
                .collect();
            let svgs = api_get_many(paths).await?;
            let charts = fields
                .into_iter()
                .map(|(field, _)| field.to_string())
                .zip(svgs)
                .collect();
            Ok((spans.attempts, charts))
        },
    );
    view! {
        <section class="card">
            {loaded(charts, |(attempts, charts): (Vec<AttemptSpan>, Charts)| {
                if attempts.is_empty() {
                    return view! { <p class="empty">"No system telemetry: it is recorded for jobs, from the moment they start on a node."</p> }.into_any();
                }
                view! {
                    <p class="muted" data-testid="system-attempts">{attempts.iter().map(|a| {
                        let gpus: Vec<String> = a.gpus.iter().map(|gpu| format!("GPU {gpu}")).collect();
                        let gpus = if gpus.is_empty() { "no GPU".to_string() } else { gpus.join(", ") };
                        format!("attempt {} on {} ({gpus})", a.attempt, a.node)
                    }).collect::<Vec<_>>().join(" · ")}</p>
                    <div class="charts" data-testid="system-charts">
                        {charts.into_iter().map(|(field, svg)| match svg {
                            Ok(svg) => view! { <figure class="chart" data-field=field.clone()><div class="chart-svg" inner_html=svg></div></figure> }.into_any(),
                            Err(error) => view! { <p class="error">{field} ": " {error}</p> }.into_any(),
                        }).collect_view()}
                    </div>
                }.into_any()
            })}
        </section>
    }
}

/// The texts the run logged (`run.log_text`), highest step first; one key
/// (`text_key=`) or all, a page at a time (`text_before=`).
#[component]
fn Texts(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
    let query = use_query_map();
    let location = use_location();
    let texts = Resource::new(
        move || {
            let query = query.read();
            (
                run_id.clone(),
                query.get("text_key"),
                query.get("text_before"),
                tick.get(),
            )
        },
        |(id, key, before, _)| {
            let params = [
                ("key", key.unwrap_or_default()),
                ("before", before.unwrap_or_default()),
            ];
            let params: Vec<(&str, &str)> = params
                .iter()
                .map(|(name, value)| (*name, value.as_str()))
                .collect();
            fetch::<TextPage>(api(&paths::run_texts(&id), &params))
        },
    );
    let link_to = move |changes: &[(&'static str, Option<String>)]| {
        let changes: Vec<(&str, Option<&str>)> = changes
            .iter()
            .map(|(name, value)| (*name, value.as_deref()))
            .collect();
        link(&location.pathname.get(), &query.read(), &changes)
    };
    view! {
        <section class="card">
            {loaded(texts, move |page: TextPage| {
                if page.keys.is_empty() {
                    return view! { <p class="empty">"No texts yet: log samples with run.log_text(\"samples/generation\", text)."</p> }.into_any();
                }
                let chosen = query.read().get("text_key");
                view! {
                    <nav class="chips" aria-label="Text keys">
                        <a href=link_to(&[("text_key", None), ("text_before", None)])
                            aria-current=chosen.is_none().then_some("page")>"all"</a>
                        {page.keys.into_iter().map(|key| {
                            let current = (chosen.as_deref() == Some(key.as_str())).then_some("page");
                            view! { <a href=link_to(&[("text_key", Some(key.clone())), ("text_before", None)]) aria-current=current>{key.clone()}</a> }
                        }).collect_view()}
                    </nav>
                    <div class="table-scroll"><table data-testid="texts">
                        <thead><tr><th>"Step"</th><th>"Key"</th><th>"Text"</th><th>"Logged"</th></tr></thead>
                        <tbody>{page.items.into_iter().map(|t| view! {
                            <tr>
                                <td>{t.step}</td>
                                <td class="mono">{t.key}</td>
                                <td class="text-cell">{t.text}</td>
                                <td>{format::epoch_time(t.wall_time)}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table></div>
                    {page.next_before.map(|next| view! {
                        <a href=link_to(&[("text_before", Some(next.to_string()))])>"Older texts"</a>
                    })}
                }.into_any()
            })}
        </section>
    }
}

#[component]
fn Evaluations(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
    let evaluations = Resource::new(
        move || (run_id.clone(), tick.get()),
        |(id, _)| fetch::<Page<Evaluation>>(api(&paths::evaluations(), &[("run_id", &id)])),
    );
    view! {
        <section class="card">
            {loaded(evaluations, |page: Page<Evaluation>| {
                if page.items.is_empty() {
                    return view! { <p class="empty">"No evaluations yet: gpuctl eval create RUN --checkpoint PATH -- python eval.py"</p> }.into_any();
                }
                view! {
                    <div class="table-scroll"><table data-testid="evaluations">
                        <thead><tr><th>"Job"</th><th>"Checkpoint"</th><th>"Step"</th><th>"Status"</th><th>"Metrics"</th></tr></thead>
                        <tbody>{page.items.into_iter().map(|e| view! {
                            <tr>
                                <td><a href=format!("/jobs/{}", e.job_id)>{e.job_id.clone()}</a></td>
                                <td class="mono">{e.checkpoint}</td>
                                <td>{e.step}</td>
                                <td>{status_badge(e.status.as_str())}</td>
                                <td>{e.metrics.iter().map(|(k, v)| format!("{k} = {}", format::value(v.0))).collect::<Vec<_>>().join(", ")}
                                    {e.failure_detail.map(|d| view! { <span class="error">{d}</span> })}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table></div>
                }.into_any()
            })}
        </section>
    }
}

fn evidence_view(evidence: Evidence) -> impl IntoView {
    match evidence {
        Evidence::Log {
            attempt,
            stream,
            n,
            text,
        } => {
            format!("attempt {attempt} {} line {n}: {text}", stream.as_str())
        }
        Evidence::Event {
            time,
            event_kind,
            message,
        } => format!("{} {event_kind}: {message}", format::time(&time)),
        Evidence::Metric { key, step, value } => format!("{key} = {} at step {step}", format::value(value.0)),
        Evidence::Job { text } => text,
    }
}

#[component]
fn DiagnosisView(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
    let diagnosis = Resource::new(
        move || (run_id.clone(), tick.get()),
        |(id, _)| fetch::<Diagnosis>(paths::run_diagnosis(&id)),
    );
    view! {
        <section class="card" data-testid="diagnosis">
            {loaded(diagnosis, |d: Diagnosis| view! {
                {d.failure.map(|f| view! {
                    <h2>{f.summary}</h2>
                    <p class="muted">"Rule " <code>{f.rule}</code> " · " {f.category}</p>
                    <h3>"Evidence"</h3>
                    <ul class="evidence">{f.evidence.into_iter().map(|e| view! { <li><code>{evidence_view(e)}</code></li> }).collect_view()}</ul>
                    <h3>"Likely causes"</h3>
                    <ul>{f.likely_causes.into_iter().map(|c| view! { <li>{c}</li> }).collect_view()}</ul>
                    <h3>"What to do"</h3>
                    <ol>{f.actions.into_iter().map(|a| view! { <li>{a}</li> }).collect_view()}</ol>
                    <p><strong>"Retry? "</strong>{f.retry_advice}</p>
                })}
                <h3>"Findings"</h3>
                {if d.findings.is_empty() {
                    view! { <p class="empty">"Nothing looks wrong with this run."</p> }.into_any()
                } else {
                    view! {
                        <ul class="findings">{d.findings.into_iter().map(|f| view! {
                            <li><span class=format!("badge severity-{}", f.severity.as_str())>{f.severity.as_str()}</span>
                                " " <code>{f.kind}</code> " " {f.summary}</li>
                        }).collect_view()}</ul>
                    }.into_any()
                }}
            })}
        </section>
    }
}

/// What the top of the run page shows: the run, its job, and why a failed
/// run failed. One resource, so a live update reads the run once.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct RunSummary {
    run: Run,
    job: Option<Job>,
    failure: Option<FailureExplanation>,
}

type SummaryResource = Resource<Result<RunSummary, ServerFnError>>;

async fn load_summary(id: String) -> Result<RunSummary, ServerFnError> {
    let run = fetch::<Run>(paths::run(&id)).await?;
    let job = match &run.job_id {
        Some(job_id) => Some(fetch::<Job>(paths::job(job_id)).await?),
        None => None,
    };
    // The banner is a shortcut to the diagnosis tab, which shows any error;
    // a run reopened meanwhile (409) just has none.
    let failure = match run.status.as_str() {
        "FAILED" | "LOST" => fetch::<FailureExplanation>(paths::run_failure(&id)).await.ok(),
        _ => None,
    };
    Ok(RunSummary { run, job, failure })
}

/// Tags and notes, for editors of the run's project; filled from the run
/// when opened.
#[component]
fn RunDetailsForm(summary: SummaryResource, changes: Changes) -> impl IntoView {
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
fn RunLifecycle(summary: SummaryResource, changes: Changes) -> impl IntoView {
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

/// The config of this run beside the runs it is compared with: the keys
/// whose values differ (every key with `diff=all`), a column per run.
#[component]
fn ConfigDiff(run_id: Memo<String>, view: Memo<ChartView>) -> impl IntoView {
    let query = use_query_map();
    let location = use_location();
    let runs = Resource::new(
        move || (run_id.get(), view.read().compare.clone()),
        |(id, compare)| async move {
            let ids = with_compared(&id, &compare);
            let answers = api_get_many(ids.iter().map(|id| paths::run(id)).collect()).await?;
            let mut runs = Vec::new();
            for (id, answer) in ids.iter().zip(answers) {
                let body = answer.map_err(|error| ServerFnError::new(format!("{id}: {error}")))?;
                let run: Run = serde_json::from_str(&body)
                    .map_err(|error| ServerFnError::new(format!("{id}: unexpected answer: {error}")))?;
                runs.push(run);
            }
            Ok::<_, ServerFnError>(runs)
        },
    );
    view! {
        <section class="card" data-testid="config-diff">
            <h2>"Config diff"</h2>
            {loaded(runs, move |runs: Vec<Run>| {
                let all = query.read().get("diff").as_deref() == Some("all");
                let keys: std::collections::BTreeSet<String> =
                    runs.iter().flat_map(|run| run.config.keys().cloned()).collect();
                let rows: Vec<(String, Vec<Option<serde_json::Value>>, bool)> = keys
                    .into_iter()
                    .map(|key| {
                        let values: Vec<Option<serde_json::Value>> =
                            runs.iter().map(|run| run.config.get(&key).cloned()).collect();
                        let differs = values.iter().any(|value| *value != values[0]);
                        (key, values, differs)
                    })
                    .collect();
                let differing = rows.iter().filter(|(_, _, differs)| *differs).count();
                let total = rows.len();
                let toggle = if all {
                    link(&location.pathname.get_untracked(), &query.read_untracked(), &[("diff", None)])
                } else {
                    link(&location.pathname.get_untracked(), &query.read_untracked(), &[("diff", Some("all"))])
                };
                view! {
                    <p class="muted" data-testid="diff-count">
                        {format!("{differing} of {total} keys differ. ")}
                        <a href=toggle>{if all { "Show only differences" } else { "Show every key" }}</a>
                    </p>
                    <div class="table-scroll"><table data-testid="config-diff-table">
                        <thead><tr><th>"Key"</th>{runs.iter().map(|run| view! {
                            <th><a href=format!("/runs/{}", run.id)>{run.name.clone()}</a></th>
                        }).collect_view()}</tr></thead>
                        <tbody>{rows.into_iter().filter(|(_, _, differs)| all || *differs).map(|(key, values, differs)| view! {
                            <tr class:differs=differs data-key=key.clone()>
                                <td class="mono">{key.clone()}</td>
                                {values.into_iter().map(|value| view! {
                                    <td class="mono">{value.as_ref().map_or_else(|| "–".to_string(), gpuplane_api::experiment::show_value)}</td>
                                }).collect_view()}
                            </tr>
                        }).collect_view()}</tbody>
                    </table></div>
                }
            })}
        </section>
    }
}
