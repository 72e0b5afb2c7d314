//! The run page's tabs but the logs: events, checkpoints, system
//! telemetry, texts, evaluations and the diagnosis.

use crate::api::{api_get_many, fetch};
use crate::view::chart::Charts;
use crate::view::format::{self, status_badge};
use crate::view::loaded;
use crate::view::query::{api, link};
use crate::view::tables::EventsTable;
use gpuplane_api::Page;
use gpuplane_api::diagnosis::{Diagnosis, Evidence};
use gpuplane_api::evaluation::Evaluation;
use gpuplane_api::event::Event;
use gpuplane_api::metric::{Checkpoint, TextPage};
use gpuplane_api::paths;
use gpuplane_api::telemetry::{AttemptSpan, GPU_FIELDS, PROCESS_FIELDS, SystemTelemetry};
use leptos::prelude::*;
use leptos_router::hooks::{use_location, use_query_map};

#[component]
pub(super) fn RunEvents(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
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
pub(super) fn Checkpoints(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
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
pub(super) fn System(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
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
                        let rank = if a.rank > 0 { format!(" rank {}", a.rank) } else { String::new() };
                        format!("attempt {}{rank} on {} ({gpus})", a.attempt, a.node)
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
pub(super) fn Texts(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
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
pub(super) fn Evaluations(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
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

pub(super) fn evidence_view(evidence: Evidence) -> impl IntoView {
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
pub(super) fn DiagnosisView(run_id: String, tick: RwSignal<u64>) -> impl IntoView {
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
