//! `gpuctl run show RUN`: a run's status, latest value per metric (with a
//! visible marker on NaN and infinities), checkpoints and recent events;
//! `gpuctl run explain-failure RUN` and `gpuctl run diagnose RUN`. Each takes
//! a run id or the id of the job that made the run.

use crate::Output;
use crate::client::{CliError, Client};
use crate::commands::parse_goal;
use crate::exit::Failure;
use gpuplane_api::Page;
use gpuplane_api::diagnosis::{Diagnosis, Evidence, FailureExplanation};
use gpuplane_api::event::Event;
use gpuplane_api::experiment::{self, DeletedRun, RunColumn, RunSort};
use gpuplane_api::job::Job;
use gpuplane_api::metric::{Checkpoint, Goal, PrimaryMetric, Run, SetPrimaryMetric, TextPage};
use gpuplane_api::share::{CreatedShareLink, NewShareLink, ShareLink};
use gpuplane_api::telemetry::SystemTelemetry;
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, clap::Subcommand)]
pub enum RunCommand {
    /// Status, latest metrics, checkpoints and recent events of a run.
    Show { run_id: String },
    /// Runs, newest first, best primary metric first (`--sort primary_metric`)
    /// or by any column, filtered by tag, text and config, with chosen
    /// columns or as CSV.
    List {
        #[arg(long)]
        project: Option<String>,
        /// newest (default), primary_metric (best first), or a column such as
        /// config.lr or eval/accuracy, with a leading - for descending: --sort=-config.lr
        #[arg(long, value_parser = parse_run_sort, allow_hyphen_values = true)]
        sort: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Only runs with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// Only runs whose name, notes or tags contain TEXT (any case).
        #[arg(long)]
        search: Option<String>,
        /// A config condition, e.g. 'config.lr > 1e-3' or 'config.optimizer = adam'
        /// (=, !=, <, <=, >, >=; repeatable, all must hold).
        #[arg(long = "where", value_parser = experiment::parse_condition)]
        conditions: Vec<(String, String)>,
        /// Columns after the run: config.KEY, a metric key (its latest
        /// value), primary, duration, tags, created; comma-separated:
        /// --columns config.lr,eval/accuracy
        #[arg(long, value_delimiter = ',', value_parser = RunColumn::parse)]
        columns: Vec<RunColumn>,
        /// Comma-separated values with a header line (for spreadsheets).
        #[arg(long)]
        csv: bool,
        /// Archived runs instead of the others.
        #[arg(long)]
        archived: bool,
    },
    /// Archive a run and its job (project admins): out of the lists, kept whole.
    Archive { run_id: String },
    /// Bring an archived run and its job back into the lists.
    Unarchive { run_id: String },
    /// Delete a run and its job with their metrics, output, events and
    /// checkpoint records (project admins). There is no undo.
    Delete {
        run_id: String,
        /// Required: deleting cannot be undone.
        #[arg(long)]
        yes: bool,
    },
    /// Set the metric that ranks the run (e.g. eval/accuracy --goal max).
    SetPrimary {
        run_id: String,
        key: String,
        /// max (larger is better) or min.
        #[arg(long, value_parser = parse_goal)]
        goal: Goal,
    },
    /// Why a failed run failed, the evidence, and what to change before retrying.
    ExplainFailure { run_id: String },
    /// What looks wrong with a run, running or ended: NaN or diverging loss,
    /// silence, idle GPUs, a lost host, and the failure if it failed.
    Diagnose { run_id: String },
    /// Texts the run logged per step (samples, prompts), highest step first.
    Texts {
        run_id: String,
        /// Only this key.
        #[arg(long)]
        key: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// The job's GPUs and processes over its run (agent telemetry): mean and
    /// peak of each field per GPU.
    System {
        run_id: String,
        /// One field: utilization_percent, memory_used_mib, power_w,
        /// temperature_c, sm_clock_mhz, cpu_percent or memory_rss_mib.
        #[arg(long)]
        field: Option<String>,
    },
    /// Make a read-only link to the run for people without an account
    /// (editors): its page, charts and output, until it expires or is revoked.
    Share {
        run_id: String,
        /// Days until it expires, 1 to 90.
        #[arg(long, default_value_t = 7)]
        days: u32,
    },
    /// The run's share links with their views (never their secrets).
    Shares { run_id: String },
    /// Revoke a share link: it never opens again.
    Unshare { run_id: String, share_id: String },
}

#[derive(Serialize)]
struct RunView {
    run: Run,
    checkpoints: Vec<Checkpoint>,
    events: Vec<Event>,
}

pub async fn run(client: &Client, command: RunCommand, out: &Output) -> Result<(), CliError> {
    match command {
        RunCommand::Show { run_id } => {
            let run_id = resolve(client, run_id).await?;
            let run: Run = client.get(&format!("runs/{run_id}")).await?;
            let checkpoints: Page<Checkpoint> = client.get(&format!("runs/{run_id}/checkpoints")).await?;
            let events: Page<Event> = client.get(&format!("events?run_id={run_id}&limit=10")).await?;
            let view = RunView {
                run,
                checkpoints: checkpoints.items,
                events: events.items,
            };
            out.emit(&view, render);
        }
        RunCommand::List {
            project,
            sort,
            limit,
            tag,
            search,
            conditions,
            columns,
            csv,
            archived,
        } => {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("limit", &limit.to_string());
            if archived {
                query.append_pair("archived", "true");
            }
            for (key, value) in [("project", project), ("sort", sort), ("tag", tag), ("q", search)] {
                if let Some(value) = value {
                    query.append_pair(key, &value);
                }
            }
            for (key, condition) in &conditions {
                query.append_pair(key, condition);
            }
            let page: Page<Run> = client.get(&format!("runs?{}", query.finish())).await?;
            if csv && !out.json {
                // Exactly the CSV, line endings included (no trimming).
                print!("{}", render_csv(&page.items, &columns));
            } else if columns.is_empty() {
                out.emit(&page, |page| render_list(&page.items));
            } else {
                out.emit(&page, |page| render_columns(&page.items, &columns));
            }
        }
        RunCommand::SetPrimary { run_id, key, goal } => {
            let run_id = resolve(client, run_id).await?;
            let run: Run = client
                .post(
                    &format!("runs/{run_id}/primary-metric"),
                    &SetPrimaryMetric { key, goal },
                )
                .await?;
            out.emit(&run, |run| {
                format!(
                    "{} ranks by {}",
                    run.id,
                    run.primary_metric
                        .as_ref()
                        .map(describe_primary)
                        .unwrap_or_default()
                )
            });
        }
        RunCommand::ExplainFailure { run_id } => {
            let run_id = resolve(client, run_id).await?;
            let explanation: FailureExplanation = client.get(&format!("runs/{run_id}/failure")).await?;
            out.emit(&explanation, render_failure);
        }
        RunCommand::Diagnose { run_id } => {
            let run_id = resolve(client, run_id).await?;
            let diagnosis: Diagnosis = client.get(&format!("runs/{run_id}/diagnosis")).await?;
            out.emit(&diagnosis, render_diagnosis);
        }
        RunCommand::Texts { run_id, key, limit } => {
            let run_id = resolve(client, run_id).await?;
            let mut query = form_urlencoded::Serializer::new(format!("limit={limit}"));
            if let Some(key) = &key {
                query.append_pair("key", key);
            }
            let page: TextPage = client
                .get(&format!("runs/{run_id}/texts?{}", query.finish()))
                .await?;
            out.emit(&page, |page| {
                if page.items.is_empty() {
                    return "no texts (log them with run.log_text(key, text))".into();
                }
                let mut text = String::new();
                for entry in &page.items {
                    let _ = writeln!(
                        text,
                        "step {} {}:\n  {}",
                        entry.step,
                        entry.key,
                        entry.text.replace('\n', "\n  ")
                    );
                }
                text
            });
        }
        RunCommand::Archive { run_id } => archive(client, run_id, "archive", out).await?,
        RunCommand::Unarchive { run_id } => archive(client, run_id, "unarchive", out).await?,
        RunCommand::Delete { run_id, yes } => {
            if !yes {
                return Err(CliError::new(
                    Failure::Invalid,
                    "confirmation_required",
                    format!(
                        "deleting a run cannot be undone: run `gpuctl run delete {run_id} --yes` \
                         (or `gpuctl run archive {run_id}` to keep it out of sight)"
                    ),
                ));
            }
            let run_id = resolve(client, run_id).await?;
            let deleted: DeletedRun = client.delete(&format!("runs/{run_id}")).await?;
            out.emit(&deleted, |deleted| {
                format!(
                    "Deleted run {}{}: {} metric points, {} output lines, {} events.",
                    deleted.run_id,
                    deleted
                        .job_id
                        .as_deref()
                        .map(|job| format!(" and job {job}"))
                        .unwrap_or_default(),
                    deleted.metric_points,
                    deleted.log_lines,
                    deleted.events
                )
            });
        }
        RunCommand::Share { run_id, days } => {
            let run_id = resolve(client, run_id).await?;
            let body = NewShareLink {
                expires_in_days: Some(days),
            };
            let created: CreatedShareLink = client.post(&format!("runs/{run_id}/shares"), &body).await?;
            out.emit(&created, |created| {
                format!(
                    "{}
Read-only, until {} (shown once: copy it now). Revoke with `gpuctl run unshare {run_id} {}`.",
                    created.url, created.link.expires_at, created.link.id
                )
            });
        }
        RunCommand::Shares { run_id } => {
            let run_id = resolve(client, run_id).await?;
            let page: Page<ShareLink> = client.get(&format!("runs/{run_id}/shares")).await?;
            out.emit(&page, |page| {
                if page.items.is_empty() {
                    return "No share links.".into();
                }
                let mut text = String::new();
                for link in &page.items {
                    let state = link.state();
                    let _ = writeln!(
                        text,
                        "{}  {state:<7}  by {}  until {}  {} view(s){}",
                        link.id,
                        link.created_by.as_deref().unwrap_or("-"),
                        link.expires_at,
                        link.views,
                        link.last_viewed_at
                            .as_deref()
                            .map(|at| format!(", last {at}"))
                            .unwrap_or_default()
                    );
                }
                text
            });
        }
        RunCommand::Unshare { run_id, share_id } => {
            let run_id = resolve(client, run_id).await?;
            let link: ShareLink = client.delete(&format!("runs/{run_id}/shares/{share_id}")).await?;
            out.emit(&link, |link| format!("Share link {} revoked.", link.id));
        }
        RunCommand::System { run_id, field } => {
            let run_id = resolve(client, run_id).await?;
            let mut query = form_urlencoded::Serializer::new("max_points=1000".to_string());
            if let Some(field) = &field {
                query.append_pair("field", field);
            }
            let system: SystemTelemetry = client
                .get(&format!("runs/{run_id}/system?{}", query.finish()))
                .await?;
            out.emit(&system, render_system);
        }
    }
    Ok(())
}

/// Each attempt, then each series as its mean and peak.
fn render_system(system: &SystemTelemetry) -> String {
    if system.attempts.is_empty() {
        return "no telemetry: the run has no job, or its job has not started".into();
    }
    let mut text = String::new();
    for attempt in &system.attempts {
        let _ = writeln!(
            text,
            "attempt {} on {}, GPUs {:?}",
            attempt.attempt, attempt.node, attempt.gpus
        );
    }
    for series in &system.series {
        let (attempt, whose, field) = (series.attempt, series.whose(), &series.field);
        let _ = match series.mean_and_peak() {
            Some((mean, peak)) => writeln!(
                text,
                "  attempt {attempt} {whose:<9} {field:<20} mean {mean:>8.1}  peak {peak:>8.1}"
            ),
            None => writeln!(text, "  attempt {attempt} {whose:<9} {field:<20} no samples"),
        };
    }
    text
}

/// `eval/accuracy (max, set on the run): best 0.91 at step 200, checkpoint …`.
pub fn describe_primary(primary: &PrimaryMetric) -> String {
    let mut text = format!(
        "{} ({}, set on the {})",
        primary.key,
        primary.goal.as_str(),
        primary.set_on
    );
    match &primary.best {
        Some(best) => {
            let _ = write!(text, ": best {} at step {}", best.value.describe(), best.step);
        }
        None => text.push_str(": no finite value yet"),
    }
    if let Some(path) = &primary.best_checkpoint {
        let _ = write!(text, ", best checkpoint {path}");
    }
    text
}

/// The best value of a primary metric, for list columns.
pub fn best_text(primary: Option<&PrimaryMetric>) -> String {
    match primary {
        Some(PrimaryMetric {
            key,
            best: Some(best),
            ..
        }) => format!("{key}={}", best.value.describe()),
        Some(primary) => format!("{}=-", primary.key),
        None => "-".into(),
    }
}

fn render_list(runs: &[Run]) -> String {
    if runs.is_empty() {
        return "No runs.\n".into();
    }
    let mut text = format!(
        "{:<30} {:<24} {:<10} {:<12} {}\n",
        "RUN", "NAME", "STATUS", "PROJECT", "PRIMARY (BEST)"
    );
    for run in runs {
        let name: String = run.name.chars().take(24).collect();
        let _ = writeln!(
            text,
            "{:<30} {name:<24} {:<10} {:<12} {}",
            run.id,
            run.status,
            run.project,
            best_text(run.primary_metric.as_ref())
        );
    }
    text
}

/// A run list's order as `?sort=` takes it; `primary` is best first, as before.
fn parse_run_sort(text: &str) -> Result<String, String> {
    match text {
        "primary" | "primary-metric" => Ok("primary_metric".into()),
        other => RunSort::parse(other).map(|sort| sort.param()),
    }
}

fn render_columns(runs: &[Run], columns: &[RunColumn]) -> String {
    if runs.is_empty() {
        return "No runs.\n".into();
    }
    let mut rows = vec![
        ["RUN", "NAME", "STATUS"]
            .into_iter()
            .map(str::to_string)
            .chain(columns.iter().map(|c| c.id().to_uppercase()))
            .collect::<Vec<_>>(),
    ];
    for run in runs {
        let mut row = vec![
            run.id.clone(),
            run.name.chars().take(24).collect(),
            run.status.clone(),
        ];
        row.extend(columns.iter().map(|column| column.cell(run)));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|row| row[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(text, "{}", cells.join("  ").trim_end());
    }
    text
}

/// RFC 4180: a header, then one line per run; fields with commas, quotes or
/// line breaks quoted, and formulas (`=`, `+`, `-`, `@` first) neutralised.
fn render_csv(runs: &[Run], columns: &[RunColumn]) -> String {
    let field = super::csv_field;
    let mut header: Vec<String> = ["run", "name", "project", "status", "tags"]
        .map(String::from)
        .into();
    header.extend(columns.iter().map(RunColumn::id));
    let mut text = header.iter().map(|h| field(h)).collect::<Vec<_>>().join(",") + "\r\n";
    for run in runs {
        let mut row = vec![
            run.id.clone(),
            run.name.clone(),
            run.project.clone(),
            run.status.clone(),
            run.tags.join(" "),
        ];
        row.extend(columns.iter().map(|column| column.cell(run)));
        text.push_str(&row.iter().map(|cell| field(cell)).collect::<Vec<_>>().join(","));
        text.push_str("\r\n");
    }
    text
}

/// Archives (`action` = `archive`) or unarchives a run and its job.
async fn archive(client: &Client, run_id: String, action: &str, out: &Output) -> Result<(), CliError> {
    let run_id = resolve(client, run_id).await?;
    let run: Run = client
        .post(&format!("runs/{run_id}/{action}"), &serde_json::json!(null))
        .await?;
    out.emit(&run, |run| match &run.archived_at {
        Some(at) => format!(
            "Run {} archived ({at}); `gpuctl run list --archived` lists it.",
            run.id
        ),
        None => format!("Run {} is back in the lists.", run.id),
    });
    Ok(())
}

/// A run id as given, or the run of a job id.
async fn resolve(client: &Client, id: String) -> Result<String, CliError> {
    if id.starts_with("job_") {
        let job: Job = client.get(&format!("jobs/{id}")).await?;
        return Ok(job.run_id);
    }
    Ok(id)
}

fn render_failure(explanation: &FailureExplanation) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{}  [{}]", explanation.summary, explanation.category);
    let _ = writeln!(
        text,
        "run {}{}  status {}{}",
        explanation.run_id,
        explanation
            .job_id
            .as_deref()
            .map(|j| format!("  job {j}"))
            .unwrap_or_default(),
        explanation.status,
        explanation
            .failure_reason
            .as_deref()
            .map(|r| format!("  ({r})"))
            .unwrap_or_default()
    );
    write_evidence(&mut text, &explanation.evidence);
    if !explanation.likely_causes.is_empty() {
        let _ = writeln!(text, "\nlikely causes");
        for cause in &explanation.likely_causes {
            let _ = writeln!(text, "  - {cause}");
        }
    }
    if !explanation.actions.is_empty() {
        let _ = writeln!(text, "\nwhat to do");
        for (i, action) in explanation.actions.iter().enumerate() {
            let _ = writeln!(text, "  {}. {action}", i + 1);
        }
    }
    let _ = writeln!(text, "\nretry: {}", explanation.retry_advice);
    text
}

fn render_diagnosis(diagnosis: &Diagnosis) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "run {}  status {}", diagnosis.run_id, diagnosis.status);
    if diagnosis.findings.is_empty() {
        let _ = writeln!(text, "nothing looks wrong");
    }
    for finding in &diagnosis.findings {
        let _ = writeln!(
            text,
            "\n{:<8} {}  {}",
            finding.severity.as_str(),
            finding.kind,
            finding.summary
        );
        write_evidence(&mut text, &finding.evidence);
    }
    if let Some(failure) = &diagnosis.failure {
        let _ = writeln!(text, "\n--- why it failed ---");
        text.push_str(&render_failure(failure));
    }
    text
}

fn write_evidence(text: &mut String, evidence: &[Evidence]) {
    if evidence.is_empty() {
        return;
    }
    let _ = writeln!(text, "evidence");
    for item in evidence {
        let _ = match item {
            Evidence::Log {
                attempt,
                stream,
                n,
                text: line,
            } => writeln!(text, "  attempt {attempt} {} line {n}: {line}", stream.as_str()),
            Evidence::Event {
                time,
                event_kind,
                message,
            } => writeln!(text, "  event {time} {event_kind}: {message}"),
            Evidence::Metric { key, step, value } => {
                writeln!(text, "  metric {key} = {} at step {step}", value.describe())
            }
            Evidence::Job { text: fact } => writeln!(text, "  {fact}"),
        };
    }
}

fn render(view: &RunView) -> String {
    let run = &view.run;
    let mut text = String::new();
    let _ = writeln!(text, "{}  {}  (project {})", run.id, run.name, run.project);
    let _ = writeln!(
        text,
        "status  {}{}",
        run.status,
        run.job_id
            .as_deref()
            .map(|j| format!("   job {j}"))
            .unwrap_or_default()
    );
    let _ = match &run.primary_metric {
        Some(primary) => writeln!(text, "primary metric  {}", describe_primary(primary)),
        None => writeln!(
            text,
            "primary metric  none (set one: gpuctl run set-primary {} KEY --goal max|min)",
            run.id
        ),
    };
    if !run.tags.is_empty() {
        let _ = writeln!(text, "tags  {}", run.tags.join(", "));
    }
    if !run.notes.is_empty() {
        let _ = writeln!(text, "notes  {}", run.notes);
    }
    if !run.config.is_empty() {
        let width = run.config.keys().map(String::len).max().unwrap_or(0);
        let _ = writeln!(text, "config");
        for (key, value) in &run.config {
            let _ = writeln!(
                text,
                "  {key:<width$}  {}",
                gpuplane_api::experiment::show_value(value)
            );
        }
    }
    if !run.metrics_events.is_empty() {
        let _ = writeln!(
            text,
            "metrics elsewhere (where the job's SDK put what did not reach this run)"
        );
        for event in &run.metrics_events {
            let _ = writeln!(
                text,
                "  {}  {}  {}",
                event.time,
                event.kind.as_str(),
                event.message
            );
        }
    }
    if run.latest.is_empty() && run.metrics_events.is_empty() {
        let _ = writeln!(
            text,
            "metrics  none yet: write TensorBoard events into a watch dir (--watch) or call run.log() from the SDK"
        );
    } else if run.latest.is_empty() {
        let _ = writeln!(text, "metrics  none on the run: see \"metrics elsewhere\" above");
    } else {
        let width = run.latest.keys().map(String::len).max().unwrap_or(0);
        let _ = writeln!(text, "metrics (latest)");
        for (key, latest) in &run.latest {
            let marker = if latest.non_finite { "  [non-finite]" } else { "" };
            let bad = if latest.non_finite_count > 0 {
                format!(
                    "  ({} of {} points non-finite)",
                    latest.non_finite_count, latest.count
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                text,
                "  {key:<width$}  step {:<8} {}{marker}{bad}",
                latest.step,
                latest.value.describe()
            );
        }
    }
    if !view.checkpoints.is_empty() {
        let _ = writeln!(text, "checkpoints");
        for checkpoint in &view.checkpoints {
            let step = checkpoint.step.map_or("-".to_string(), |s| s.to_string());
            let shared = if checkpoint.shared_with.is_empty() {
                String::new()
            } else {
                format!("  [shared with {}]", checkpoint.shared_with.join(", "))
            };
            let value = checkpoint
                .primary_value
                .map(|v| format!("  {}", v.describe()))
                .unwrap_or_default();
            let best = if checkpoint.best { "  [best]" } else { "" };
            let _ = writeln!(
                text,
                "  step {step:<8} {}  {} bytes{value}{best}{shared}",
                checkpoint.path, checkpoint.size
            );
        }
    }
    if !view.events.is_empty() {
        let _ = writeln!(text, "recent events");
        for event in &view.events {
            let _ = writeln!(
                text,
                "  {}  {:<8} {:<18} {}",
                event.time,
                event.severity.as_str(),
                event.kind.as_str(),
                event.message
            );
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_sorts_keep_primary_as_best_first() {
        assert_eq!(parse_run_sort("primary").unwrap(), "primary_metric");
        assert_eq!(parse_run_sort("-config.lr").unwrap(), "-config.lr");
        assert_eq!(parse_run_sort("newest").unwrap(), "-created");
        assert!(parse_run_sort("config.").is_err());
    }
}
