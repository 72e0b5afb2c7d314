//! The log viewer: the server's newest lines on first paint, then a live
//! tail over SSE (resuming after a disconnect without losing or repeating a
//! line); stdout / stderr / merged, search with highlight, follow, jump to
//! the first error-looking line, ANSI colours, attempts, the full files,
//! and a multi-node job's members (every rank's lines, or one rank's).

use crate::api::{api_get, fetch};
use crate::view::ansi;
use crate::view::error_text;
use crate::view::live::{self, Next};
use crate::view::query::{api, link};
use gpuplane_api::job::Job;
use gpuplane_api::log::{LogLine, LogStream, Logs, looks_like_error};
use gpuplane_api::metric::Run;
use gpuplane_api::paths;
use leptos::prelude::*;
use leptos_router::hooks::{use_location, use_query_map};
use std::collections::HashMap;

/// Lines the viewer loads from the server at first.
const TAIL: &str = "2000";

fn line_id(line: &LogLine) -> String {
    match line.rank {
        0 => format!("L{}-{}-{}", line.attempt, line.stream.as_str(), line.n),
        rank => format!("L{}-r{rank}-{}-{}", line.attempt, line.stream.as_str(), line.n),
    }
}

/// `text` with ANSI styles as classes and `search` (ASCII case-insensitive) marked.
fn styled(text: &str, search: &str) -> impl IntoView + use<> {
    let needle = search.to_ascii_lowercase();
    ansi::pieces(text)
        .into_iter()
        .map(|piece| {
            let mut parts = Vec::new();
            let lower = piece.text.to_ascii_lowercase();
            let mut at = 0;
            if !needle.is_empty() {
                while let Some(found) = lower[at..].find(&needle) {
                    let start = at + found;
                    parts.push((false, piece.text[at..start].to_string()));
                    parts.push((true, piece.text[start..start + needle.len()].to_string()));
                    at = start + needle.len();
                }
            }
            parts.push((false, piece.text[at..].to_string()));
            let pieces = parts
                .into_iter()
                .filter(|(_, text)| !text.is_empty())
                .map(|(marked, text)| {
                    if marked {
                        view! { <mark>{text}</mark> }.into_any()
                    } else {
                        text.into_any()
                    }
                })
                .collect_view();
            view! { <span class=piece.classes>{pieces}</span> }
        })
        .collect_view()
}

/// Whose output a log viewer shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogsOf {
    Job(String),
    /// The run's job, if the run has one (SDK runs outside jobs have none).
    Run(String),
}

/// A job and the newest lines of one of its attempts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobLog {
    pub job: Job,
    pub logs: Logs,
}

async fn load(of: LogsOf, attempt: Option<i64>, rank: Option<i64>) -> Result<Option<JobLog>, ServerFnError> {
    let job_id = match of {
        LogsOf::Job(id) => id,
        LogsOf::Run(id) => match fetch::<Run>(paths::run(&id)).await?.job_id {
            Some(job_id) => job_id,
            None => return Ok(None),
        },
    };
    let job = fetch::<Job>(paths::job(&job_id)).await?;
    let attempt = attempt.map(|n| n.to_string()).unwrap_or_default();
    let rank = rank.map(|n| n.to_string()).unwrap_or_default();
    let path = paths::job_logs(&job_id);
    let logs = fetch::<Logs>(api(
        &path,
        &[("tail", TAIL), ("attempt", &attempt), ("rank", &rank)],
    ))
    .await?;
    Ok(Some(JobLog { job, logs }))
}

/// The viewer. Its one resource is made here, at the top, so the server's
/// render and the browser's hydration number it alike.
#[component]
pub fn LogViewer(of: LogsOf) -> impl IntoView {
    let query = use_query_map();
    let location = use_location();
    let attempt = Memo::new(move |_| query.read().get("attempt").and_then(|a| a.parse::<i64>().ok()));
    let stream = Memo::new(move |_| query.read().get("log").unwrap_or_else(|| "merged".into()));
    let search = Memo::new(move |_| query.read().get("q").unwrap_or_default());
    let rank = Memo::new(move |_| query.read().get("rank").and_then(|r| r.parse::<i64>().ok()));
    let attempt_param = move || attempt.get().map(|n| n.to_string()).unwrap_or_default();
    let rank_param = move || rank.get().map(|n| n.to_string()).unwrap_or_default();
    let loaded = Resource::new(
        move || (of.clone(), attempt.get(), rank.get()),
        |(of, attempt, rank)| load(of, attempt, rank),
    );
    let job_id = move || loaded.get().and_then(Result::ok).flatten().map(|l| l.job.id);
    // Lines that arrived live, after the ones loaded first.
    let arrived = RwSignal::new(Vec::<LogLine>::new());
    // The newest line number of each stream of each attempt and rank.
    let newest: StoredValue<HashMap<(i64, i64, LogStream), i64>> = StoredValue::new(HashMap::new());
    let connection = RwSignal::new("");
    let follow = RwSignal::new(true);
    let all_lines = move || {
        let mut lines = loaded
            .get()
            .and_then(Result::ok)
            .flatten()
            .map(|l| l.logs.lines)
            .unwrap_or_default();
        lines.extend(arrived.get());
        lines
    };
    live::follow(
        move || {
            let loaded = loaded.get()?.ok()??;
            if loaded.job.status.is_terminal() {
                return None;
            }
            let path = paths::job_logs_stream(&loaded.job.id);
            Some(api(
                &path,
                &[
                    ("tail", TAIL),
                    ("attempt", &attempt_param()),
                    ("rank", &rank_param()),
                ],
            ))
        },
        &["line", "end"],
        move |event, data| {
            if event == "end" {
                connection.set("the job has ended");
                return Next::Close;
            }
            let Ok(line) = serde_json::from_str::<LogLine>(&data) else {
                return Next::Continue;
            };
            newest.update_value(|newest| {
                if newest.is_empty() {
                    let known = loaded.get_untracked().and_then(Result::ok).flatten();
                    for known in known.into_iter().flat_map(|l| l.logs.lines) {
                        newest.insert((known.attempt, known.rank, known.stream), known.n);
                    }
                }
            });
            let key = (line.attempt, line.rank, line.stream);
            let fresh = newest.with_value(|newest| newest.get(&key).is_none_or(|&n| line.n > n));
            if fresh {
                newest.update_value(|newest| {
                    newest.insert(key, line.n);
                });
                arrived.update(|lines| lines.push(line));
            }
            Next::Continue
        },
        move |up| connection.set(if up { "live" } else { "reconnecting…" }),
    );
    // Another attempt or rank: start over from its own lines.
    Effect::new(move |_| {
        attempt.track();
        rank.track();
        arrived.set(Vec::new());
        newest.update_value(HashMap::clear);
    });
    let container = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        arrived.track();
        if follow.get()
            && let Some(element) = container.get()
        {
            element.set_scroll_top(element.scroll_height());
        }
    });
    let first_error = move || all_lines().into_iter().find(|line| looks_like_error(&line.text));
    let stream_link = move |name: &'static str| {
        let href = move || {
            link(
                &location.pathname.get(),
                &query.read(),
                &[("log", Some(name).filter(|n| *n != "merged"))],
            )
        };
        view! {
            <a href=href class="seg" aria-current=move || (stream.get() == name).then_some("true")>{name}</a>
        }
    };
    let full = Action::new(move |(job_id, stream): &(String, LogStream)| {
        let path = paths::job_logs_full(job_id);
        let url = api(
            &path,
            &[
                ("stream", stream.as_str()),
                ("attempt", &attempt_param()),
                ("rank", &rank_param()),
            ],
        );
        let stream = *stream;
        async move { (stream, api_get(url).await) }
    });
    let download = move |stream: LogStream| {
        let path = paths::job_logs_full(&job_id().unwrap_or_default());
        api(
            &path,
            &[
                ("stream", stream.as_str()),
                ("attempt", &attempt_param()),
                ("rank", &rank_param()),
            ],
        )
    };
    let show_full = move |stream: LogStream| {
        if let Some(job_id) = job_id() {
            full.dispatch((job_id, stream));
        }
    };
    let viewer = move |log: JobLog| {
        let attempt_links = log
            .job
            .attempts
            .iter()
            .map(|a| {
                let n = a.n;
                let href = move || {
                    link(
                        &location.pathname.get(),
                        &query.read(),
                        &[("attempt", Some(&n.to_string()))],
                    )
                };
                view! { <a href=href class="seg">{format!("attempt {n}")}</a> }
            })
            .collect_view();
        // A multi-node job: every member's lines, or one rank's.
        let nodes = log.job.resources.nodes;
        let rank_link = move |value: Option<i64>| {
            let label = value.map_or_else(|| "all ranks".to_string(), |r| format!("rank {r}"));
            let href = move || {
                let value = value.map(|r| r.to_string());
                link(
                    &location.pathname.get(),
                    &query.read(),
                    &[("rank", value.as_deref())],
                )
            };
            view! {
                <a href=href class="seg" aria-current=move || (rank.get() == value).then_some("true")>{label}</a>
            }
        };
        let rank_links = (nodes > 1).then(|| {
            let links = std::iter::once(None)
                .chain((0..nodes).map(Some))
                .map(rank_link)
                .collect_view();
            view! { <nav class="segmented" aria-label="Rank" data-testid="log-ranks">{links}</nav> }
        });
        let ended = log.job.status.is_terminal();
        view! {
            <div class="log-toolbar">
                <nav class="segmented" aria-label="Stream">
                    {stream_link("merged")}{stream_link("stdout")}{stream_link("stderr")}
                </nav>
                <nav class="segmented" aria-label="Attempt">{attempt_links}</nav>
                {rank_links}
                <form method="get" class="log-search" role="search">
                    <HiddenParams except=&["q"] />
                    <input type="search" name="q" placeholder="Search the log" aria-label="Search the log"
                        prop:value=move || search.get() />
                </form>
                <label class="check"><input type="checkbox" prop:checked=move || follow.get()
                    on:change=move |ev| follow.set(event_target_checked(&ev)) />" Follow"</label>
                <span class="muted" data-testid="log-connection" role="status">
                    {move || match connection.get() {
                        "" if ended => "the job has ended",
                        "" => "connecting…",
                        state => state,
                    }}
                </span>
            </div>
            {move || first_error().map(|line| view! {
                <p><a rel="external" href=format!("#{}", line_id(&line)) data-testid="first-error">"Jump to first error"</a></p>
            })}
            {log.logs.truncated.then(|| view! {
                <p class="muted">"Showing the newest lines the server keeps; the agent has the whole files (below)."</p>
            })}
            <div class="log-view" class:only-stdout=move || stream.get() == "stdout"
                class:only-stderr=move || stream.get() == "stderr" node_ref=container
                data-testid="log-lines" tabindex="0" aria-label="Log lines">
                <For each=all_lines key=|line| (line.attempt, line.rank, line.stream, line.n) let:line>
                    {
                        let id = line_id(&line);
                        let text = line.text.clone();
                        let rank = (line.rank > 0).then(|| format!("[rank {}] ", line.rank));
                        view! {
                            <div id=id.clone() class=format!("line {}", line.stream.as_str())>
                                <a class="ln" rel="external" href=format!("#{id}")>{line.n}</a>
                                {rank.map(|rank| view! { <span class="muted rank">{rank}</span> })}
                                <span class="text">{move || styled(&text, &search.get())}</span>
                            </div>
                        }
                    }
                </For>
            </div>
            {move || all_lines().is_empty().then(|| view! {
                <p class="muted">"No output yet. Lines appear here as the job prints them."</p>
            })}
            <div class="log-full">
                <span class="muted">"Whole files from the agent: "</span>
                <button type="button" class="secondary" on:click=move |_| show_full(LogStream::Stdout)>"Show full stdout"</button>
                <button type="button" class="secondary" on:click=move |_| show_full(LogStream::Stderr)>"Show full stderr"</button>
                <a rel="external" download href=move || download(LogStream::Stdout)>"Download stdout"</a>
                <a rel="external" download href=move || download(LogStream::Stderr)>"Download stderr"</a>
            </div>
            {move || full.pending().get().then(|| view! { <p class="muted">"Fetching the file from the agent…"</p> })}
            {move || full.value().get().map(|(stream, result)| match result {
                Ok(text) => view! {
                    <h3>{format!("Full {}", stream.as_str())}</h3>
                    <div class="log-view" data-testid="full-log">
                        {text.lines().enumerate().map(|(i, line)| view! {
                            <div class="line"><span class="ln">{i + 1}</span><span class="text">{styled(line, "")}</span></div>
                        }).collect_view()}
                    </div>
                }.into_any(),
                Err(error) => view! { <p class="error" data-testid="full-log-error">{error_text(&error)}</p> }.into_any(),
            })}
        }
    };
    view! {
        <section class="card logs" data-testid="log-viewer">
            <Suspense fallback=|| view! { <p class="muted">"Loading the log…"</p> }>
                {move || loaded.get().map(|result| match result {
                    Err(error) => view! { <p class="error" role="alert">{error_text(&error)}</p> }.into_any(),
                    Ok(None) => view! {
                        <p class="empty">"This run was made by the SDK outside a job: its output stayed where it ran."</p>
                    }.into_any(),
                    Ok(Some(log)) => viewer(log).into_any(),
                })}
            </Suspense>
        </section>
    }
}

/// Hidden inputs carrying the current query, so a GET form changes only its own fields.
#[component]
pub fn HiddenParams(except: &'static [&'static str]) -> impl IntoView {
    let query = use_query_map();
    move || {
        query
            .get()
            .into_iter()
            .filter(|(key, _)| !except.contains(&key.as_ref()))
            .map(|(key, value)| view! { <input type="hidden" name=key.to_string() value=value /> })
            .collect_view()
    }
}
