//! `/runs`: the runs table. Its columns (config values, latest metrics,
//! status, duration, tags, primary metric), sort, filters and selected runs
//! all live in the URL, so a copied link opens the same table. Selected runs
//! open the run page's compare view; two columns make a scatter plot drawn
//! by the server.

use crate::api::{api_get, fetch};
use crate::view::error_text;
use crate::view::format::{self, status_badge};
use crate::view::loaded;
use crate::view::logs::HiddenParams;
use crate::view::query::{api, link};
use gpuplane_api::Page;
use gpuplane_api::experiment::{RunColumn, parse_condition};
use gpuplane_api::metric::Run;
use gpuplane_api::paths;
use gpuplane_api::project::Project;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};
use std::collections::BTreeSet;

/// Shown when the URL chooses no columns.
const DEFAULT_COLUMNS: [&str; 4] = ["status", "duration", "primary", "tags"];
/// Columns every run has, offered before its config and metric keys.
const BUILT_IN: [&str; 5] = ["status", "created", "duration", "tags", "primary"];
/// The most runs one compare view overlays (the chart API's limit plus the run itself).
const MAX_SELECTED: usize = 9;

/// The selected run ids: `select=a,b` or repeated `select`.
fn selected_of(values: Vec<String>) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for id in values.iter().flat_map(|v| v.split(',')).map(str::trim) {
        if !id.is_empty() && !ids.iter().any(|known| known == id) {
            ids.push(id.to_string());
        }
    }
    ids
}

/// The API query of the list (and of the plot, less the paging): the
/// filters, with `where` conditions (`config.lr > 1e-3; config.opt = adam`)
/// as `config.KEY` parameters.
fn filter_pairs(get: impl Fn(&str) -> String) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = ["project", "tag", "q", "archived"]
        .into_iter()
        .map(|key| (key.to_string(), get(key)))
        .collect();
    for condition in get("where").split(';').map(str::trim).filter(|c| !c.is_empty()) {
        pairs.push(parse_condition(condition)?);
    }
    Ok(pairs)
}

fn api_with(path: &str, pairs: &[(String, String)]) -> String {
    let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    api(path, &borrowed)
}

/// A column's title in the table head.
fn title(column: &RunColumn) -> String {
    match column {
        RunColumn::Name => "Run".into(),
        RunColumn::Status => "Status".into(),
        RunColumn::Created => "Created".into(),
        RunColumn::Duration => "Duration".into(),
        RunColumn::Tags => "Tags".into(),
        RunColumn::Primary => "Primary metric (best)".into(),
        RunColumn::Config(key) => format!("config.{key}"),
        RunColumn::Metric(key) => key.clone(),
    }
}

/// A run's cell in a column.
fn cell(run: &Run, column: &RunColumn) -> AnyView {
    match column {
        RunColumn::Status => status_badge(run.status.clone()).into_any(),
        RunColumn::Created => format::time(&run.created_at).into_any(),
        RunColumn::Tags => run
            .tags
            .iter()
            .map(|tag| view! { <span class="badge">{tag.clone()}</span> " " })
            .collect_view()
            .into_any(),
        RunColumn::Metric(key) => match run.latest.get(key) {
            Some(latest) if latest.non_finite => view! {
                <span class="badge nonfinite">{latest.value.describe()}</span>
            }
            .into_any(),
            Some(latest) => format::value(latest.value.0).into_any(),
            None => "–".into_any(),
        },
        RunColumn::Primary => match &run.primary_metric {
            Some(primary) => {
                let shown = primary
                    .best
                    .as_ref()
                    .map_or_else(|| "–".to_string(), |best| format::value(best.value.0));
                view! { <span title=primary.key.clone()>{shown}</span> }.into_any()
            }
            None => "–".into_any(),
        },
        other => other.cell(run).into_any(),
    }
}

#[component]
pub fn Runs() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    let columns = Memo::new(move |_| {
        let chosen: Vec<String> = query
            .read()
            .get_all("col")
            .unwrap_or_default()
            .into_iter()
            .flat_map(|value| {
                value
                    .split(',')
                    .map(str::trim)
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .filter(|column| !column.is_empty())
            .collect();
        let chosen = if chosen.is_empty() {
            DEFAULT_COLUMNS.map(String::from).to_vec()
        } else {
            chosen
        };
        let mut columns: Vec<RunColumn> = Vec::new();
        for column in chosen.iter().filter_map(|c| RunColumn::parse(c).ok()) {
            if column != RunColumn::Name && !columns.contains(&column) {
                columns.push(column);
            }
        }
        columns
    });
    let selected = Memo::new(move |_| selected_of(query.read().get_all("select").unwrap_or_default()));
    let list_query = Memo::new(move |_| {
        let mut pairs = filter_pairs(param)?;
        for key in ["sort", "before"] {
            pairs.push((key.to_string(), param(key)));
        }
        pairs.push(("limit".into(), "50".into()));
        Ok::<_, String>(pairs)
    });
    let runs = Resource::new(
        move || list_query.get(),
        |pairs| async move {
            let pairs = pairs.map_err(ServerFnError::new)?;
            fetch::<Page<Run>>(api_with(&paths::runs(), &pairs)).await
        },
    );
    let projects = Resource::new(|| (), |_| fetch::<Page<Project>>(paths::projects()));
    view! {
        <Title text="Runs" />
        <h1>"Runs"</h1>
        <form method="get" class="card" role="search" data-testid="run-filters">
            <HiddenParams except=&["project", "tag", "q", "where", "col", "before", "archived"] />
            <div class="inline-form">
                <label>"Project"
                    <select name="project">
                        <option value="" selected=move || param("project").is_empty()>"any"</option>
                        <Transition fallback=|| ()>
                            {move || projects.get().and_then(Result::ok).map(|page| {
                                page.items.into_iter().map(|p| {
                                    let name = p.name.clone();
                                    view! { <option value=p.name.clone() selected=move || param("project") == name>{p.name.clone()}</option> }
                                }).collect_view()
                            })}
                        </Transition>
                    </select>
                </label>
                <label>"Tag" <input name="tag" prop:value=move || param("tag") placeholder="any" /></label>
                <label>"Text" <input type="search" name="q" prop:value=move || param("q") placeholder="name, notes or tags" /></label>
                <label>"Config" <input name="where" size="32" prop:value=move || param("where")
                    placeholder="config.lr > 1e-3; config.optimizer = adam" /></label>
                <label class="check"><input type="checkbox" name="archived" value="true"
                    prop:checked=move || param("archived") == "true" />"Archived runs"</label>
            </div>
            <details class="column-picker">
                <summary>"Columns"</summary>
                <Transition fallback=|| ()>
                    {move || {
                        let page = runs.get().and_then(Result::ok);
                        let mut offered: Vec<String> = BUILT_IN.map(String::from).to_vec();
                        let mut keys = BTreeSet::new();
                        let mut metrics = BTreeSet::new();
                        for run in page.iter().flat_map(|page| page.items.iter()) {
                            keys.extend(run.config.keys().map(|k| RunColumn::Config(k.clone()).id()));
                            metrics.extend(run.latest.keys().map(|k| RunColumn::Metric(k.clone()).id()));
                        }
                        offered.extend(keys);
                        offered.extend(metrics);
                        let shown: Vec<String> = columns.get().iter().map(RunColumn::id).collect();
                        for column in &shown {
                            if !offered.contains(column) {
                                offered.push(column.clone());
                            }
                        }
                        offered.into_iter().map(|id| {
                            let checked = shown.contains(&id);
                            view! { <label class="check"><input type="checkbox" name="col" value=id.clone() checked=checked />{id.clone()}</label> }
                        }).collect_view()
                    }}
                </Transition>
            </details>
            <button type="submit">"Apply"</button>
            " " <a href="/runs">"Clear"</a>
        </form>
        <Selection selected=selected />
        // Columns and selection are read here, so changing them redraws the table without a reload.
        {loaded(runs, move |page: Page<Run>| view! { <RunsTable page=page columns=columns.get() selected=selected.get() /> })}
        <Scatter />
    }
}

/// The selected runs: open them together, or clear the choice.
#[component]
fn Selection(selected: Memo<Vec<String>>) -> impl IntoView {
    let query = use_query_map();
    move || {
        let ids = selected.get();
        if ids.is_empty() {
            return view! { <p class="muted">"Tick runs to compare their charts and configs."</p> }
                .into_any();
        }
        let kept: Vec<String> = ids.iter().take(MAX_SELECTED).cloned().collect();
        let compare = format!("/runs/{}?compare={}", kept[0], kept[1..].join(","));
        view! {
            <p class="selection" data-testid="selection">
                {format!("{} selected. ", ids.len())}
                <a href=compare class="button" data-testid="compare-selected">"Compare selected"</a>
                " " <a href=link("/runs", &query.read(), &[("select", None)])>"Clear selection"</a>
                {(ids.len() > MAX_SELECTED).then(|| format!(" (the first {MAX_SELECTED} are compared)"))}
            </p>
        }
        .into_any()
    }
}

/// The table: a tick box and the run's name, then the chosen columns, each
/// header a link that sorts by it (again: the other way).
#[component]
fn RunsTable(page: Page<Run>, columns: Vec<RunColumn>, selected: Vec<String>) -> impl IntoView {
    let query = use_query_map();
    let navigate = use_navigate();
    if page.items.is_empty() {
        let filtered = ["project", "tag", "q", "where"]
            .iter()
            .any(|k| query.read_untracked().get(k).is_some_and(|v| !v.is_empty()));
        let text = if filtered {
            "No run matches these filters."
        } else {
            "No runs yet: submit a job (gpuctl job submit …) or call gpuplane.init() in a script."
        };
        return view! { <section class="card"><p class="empty">{text}</p></section> }.into_any();
    }
    let sort = query.read_untracked().get("sort").unwrap_or_default();
    let header = move |column: RunColumn| {
        let id = column.id();
        let (next, arrow) = if sort == id {
            (format!("-{id}"), " ▲")
        } else if sort == format!("-{id}") {
            (id.clone(), " ▼")
        } else {
            (id.clone(), "")
        };
        let href = link(
            "/runs",
            &query.read_untracked(),
            &[("sort", Some(&next)), ("before", None)],
        );
        view! {
            <th><a href=href data-testid=format!("sort-{id}")>{title(&column)}{arrow}</a></th>
        }
        .into_any()
    };
    let older = page.next_before.map(|before| {
        link(
            "/runs",
            &query.read_untracked(),
            &[("before", Some(&before.to_string()))],
        )
    });
    let first_page = query
        .read_untracked()
        .get("before")
        .is_some_and(|b| !b.is_empty())
        .then(|| link("/runs", &query.read_untracked(), &[("before", None)]));
    view! {
        <section class="card">
            <form method="get" data-testid="runs-selection">
                <HiddenParams except=&["select"] />
                <div class="table-scroll"><table data-testid="runs">
                    <thead><tr>
                        <th><span class="visually-hidden">"Select"</span></th>
                        {header(RunColumn::Name)}
                        {columns.iter().cloned().map(header).collect_view()}
                    </tr></thead>
                    <tbody>{page.items.into_iter().map(|run| {
                        let id = run.id.clone();
                        let checked = selected.contains(&id);
                        let others: Vec<String> = selected.iter().filter(|s| **s != id).cloned().collect();
                        let toggled = if checked {
                            others.join(",")
                        } else {
                            others.into_iter().chain([id.clone()]).collect::<Vec<_>>().join(",")
                        };
                        let href = link("/runs", &query.read_untracked(), &[("select", Some(&toggled))]);
                        view! {
                            <tr data-run=id.clone()>
                                <td><input type="checkbox" name="select" value=id.clone() checked=checked
                                    aria-label=format!("select {}", run.name)
                                    on:change={
                                        let navigate = navigate.clone();
                                        move |_| navigate(&href, Default::default())
                                    } /></td>
                                <td><a href=format!("/runs/{id}")>{run.name.clone()}</a>
                                    <div class="muted">{run.project.clone()}</div></td>
                                {columns.iter().map(|column| view! {
                                    <td class="mono" data-column=column.id()>{cell(&run, column)}</td>
                                }).collect_view()}
                            </tr>
                        }
                        .into_any()
                    }).collect_view()}</tbody>
                </table></div>
                <noscript><button type="submit">"Keep selection"</button></noscript>
            </form>
            <nav class="pager" aria-label="Pages">
                {first_page.map(|href| view! { <a href=href>"← First"</a> })}
                {older.map(|href| view! { <a href=href data-testid="older">"Next →"</a> })}
            </nav>
        </section>
    }
    .into_any()
}

/// A config value or metric against another, one dot per matching run,
/// drawn by the server (`/api/v1/runs/scatter.svg`).
#[component]
fn Scatter() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    let plot = Resource::new(
        move || {
            let axes = ["plot_x", "plot_y", "x_scale", "y_scale"].map(param);
            (axes, filter_pairs(param))
        },
        |([x, y, x_scale, y_scale], filters)| async move {
            if x.is_empty() || y.is_empty() {
                return Ok(None);
            }
            let mut pairs = filters.map_err(ServerFnError::new)?;
            pairs.extend([
                ("x".to_string(), x),
                ("y".to_string(), y),
                ("x_scale".to_string(), x_scale),
                ("y_scale".to_string(), y_scale),
            ]);
            api_get(api_with(&paths::runs_scatter(), &pairs)).await.map(Some)
        },
    );
    let scale = move |name: &'static str| {
        view! {
            <select name=name>
                <option value="" selected=move || param(name) != "log">"linear"</option>
                <option value="log" selected=move || param(name) == "log">"log"</option>
            </select>
        }
    };
    view! {
        <section class="card">
            <h2>"Plot"</h2>
            <form method="get" class="inline-form" data-testid="plot-form">
                <HiddenParams except=&["plot_x", "plot_y", "x_scale", "y_scale"] />
                <label>"X" <input name="plot_x" prop:value=move || param("plot_x") placeholder="config.lr" /></label>
                {scale("x_scale")}
                <label>"Y" <input name="plot_y" prop:value=move || param("plot_y") placeholder="eval/accuracy" /></label>
                {scale("y_scale")}
                <button type="submit">"Plot"</button>
            </form>
            <Transition fallback=|| view! { <p class="muted">"Drawing…"</p> }>
                {move || plot.get().map(|result| match result {
                    Ok(Some(svg)) => view! { <div class="chart-svg" data-testid="scatter" inner_html=svg></div> }.into_any(),
                    Ok(None) => view! {
                        <p class="muted">"Plot one column against another for every run that passes the filters, e.g. config.lr (log) against eval/accuracy."</p>
                    }.into_any(),
                    Err(error) => view! { <p class="error" role="alert">{error_text(&error)}</p> }.into_any(),
                })}
            </Transition>
        </section>
    }
}
