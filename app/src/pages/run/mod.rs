//! `/runs/{run_id}`: the shareable run page. The view (metrics, x axis,
//! smoothing, range, compared runs, tab, log stream, search) lives in the
//! URL query, so a copied link opens the same view.

mod edit;
mod summary;
mod tabs;

use crate::api::{api_get_many, fetch};
use crate::view::actions::Changes;
use crate::view::chart::{ChartSurface, Charts};
use crate::view::error_text;
use crate::view::live::{self, Next};
use crate::view::logs::{HiddenParams, LogViewer, LogsOf};
use crate::view::query::{api, link};
use crate::view::{ShowLoaded, loaded};
use edit::{RunDetailsForm, RunLifecycle};
use gpuplane_api::Page;
use gpuplane_api::metric::Run;
use gpuplane_api::paths;
use gpuplane_api::project::{Project, Role};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_location, use_params_map, use_query_map};
use summary::{Heading, LatestValues, RunSummary, Summary, SummaryResource, load_summary};
use tabs::{Checkpoints, DiagnosisView, Evaluations, RunEvents, System, Texts};

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
