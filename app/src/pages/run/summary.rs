//! The top of the run page: one resource with the run, its job and why it
//! failed; the heading, the latest values, the details and the config.

use crate::api::fetch;
use crate::view::format::{self, status_badge};
use gpuplane_api::diagnosis::FailureExplanation;
use gpuplane_api::job::Job;
use gpuplane_api::metric::Run;
use gpuplane_api::paths;
use leptos::prelude::*;
use leptos_meta::Title;

/// What the top of the run page shows: the run, its job, and why a failed
/// run failed. One resource, so a live update reads the run once.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct RunSummary {
    pub(super) run: Run,
    pub(super) job: Option<Job>,
    pub(super) failure: Option<FailureExplanation>,
}

pub(super) type SummaryResource = Resource<Result<RunSummary, ServerFnError>>;

pub(super) async fn load_summary(id: String) -> Result<RunSummary, ServerFnError> {
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

#[component]
pub(super) fn Summary(run: Run, job: Option<Job>) -> impl IntoView {
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
    let recipe = job.as_ref().and_then(|job| job.spec.recipe.clone());
    // Checked to be http(s) at submit: never a script link.
    let observability = job.as_ref().and_then(|job| job.spec.observability_url.clone());
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
                {recipe.map(|recipe| {
                    let folder = match (&recipe.shipped, &recipe.exp_dir) {
                        (Some(shipped), _) => format!("; its folder shipped with the job ({} files, {} bytes)", shipped.files, shipped.bytes),
                        (None, Some(dir)) => format!("; its folder at {dir}"),
                        (None, None) => String::new(),
                    };
                    view! { <dt>"Recipe"</dt><dd data-testid="run-recipe">{format!("{} v{}{folder}", recipe.name, recipe.version)}</dd> }
                })}
                {observability.map(|url| view! {
                    <dt>"Observability"</dt>
                    <dd><a href=url.clone() rel="noopener noreferrer" target="_blank" data-testid="observability-link">{url.clone()}</a></dd>
                })}
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
pub(super) const OPEN_CONFIG_KEYS: usize = 12;

/// The run's name, state and warnings about its source: the page's top line.
#[component]
pub(super) fn Heading(run: Run, job: Option<Job>) -> impl IntoView {
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
pub(super) fn LatestValues(run: Run) -> impl IntoView {
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
pub(super) fn gpus_text(gpus: &[u32]) -> String {
    let indices: Vec<String> = gpus.iter().map(u32::to_string).collect();
    match gpus.len() {
        0 => "none".into(),
        1 => format!("1 (GPU {})", indices[0]),
        count => format!("{count} (GPUs {})", indices.join(", ")),
    }
}

/// Seconds since the epoch now (for "running for").
pub(super) fn now_seconds() -> i64 {
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
pub(super) fn js_sys_now() -> f64 {
    web_sys::js_sys::Date::now()
}
