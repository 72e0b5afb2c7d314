//! Gathering a run's facts from the database, and the diagnosis of a run
//! that may still be running: loss trend, silence, idle GPUs, lost nodes.

use super::{Facts, explain};
use crate::config::ServerConfig;
use crate::events::{self, Filter};
use crate::jobs::store;
use crate::logs;
use crate::metrics::{self, Axis, Query};
use crate::nodes::telemetry;
use crate::runs;
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use crate::store::time::now_ms;
use gpuplane_api::diagnosis::{Diagnosis, Evidence, FailureExplanation, Finding};
use gpuplane_api::event::Severity;
use gpuplane_api::job::JobStatus;
use gpuplane_api::metric::Value;
use gpuplane_api::telemetry::gpu_key;
use std::time::Duration;

const LOW_UTILIZATION_PERCENT: u32 = 10;

/// The explanation of a failed (or lost) run; 409 for one that has not failed.
pub async fn failure(db: &Db, config: &ServerConfig, run_id: &str) -> Result<FailureExplanation, Error> {
    let run = runs::get(db, run_id).await?;
    let failed = run.status == JobStatus::Failed.as_str() || run.status == JobStatus::Lost.as_str();
    if !failed {
        return Err(Error::Conflict(format!(
            "run {run_id} has not failed ({}): see its diagnosis instead",
            run.status
        )));
    }
    let facts = gather(db, config, run_id, run.job_id.as_deref(), &run.status).await?;
    Ok(explain(run_id, run.job_id.as_deref(), &facts))
}

async fn gather(
    db: &Db,
    config: &ServerConfig,
    run_id: &str,
    job_id: Option<&str>,
    status: &str,
) -> Result<Facts, Error> {
    let mut facts = Facts {
        status: status.to_string(),
        ..Facts::default()
    };
    if let Some(job_id) = job_id {
        let job = store::get(db, job_id).await?;
        facts.failure_reason = job.failure_reason;
        facts.detail = job.failure_detail.clone();
        if let Some(attempt) = job.attempts.last() {
            facts.exit_code = attempt.exit_code;
            facts.signal = attempt.signal;
            facts.failure_reason = facts.failure_reason.or(attempt.failure_reason);
            facts.detail = facts.detail.or_else(|| attempt.failure_detail.clone());
            let (_, kept) = logs::tail(
                db,
                job_id,
                attempt.n,
                logs::Only::default(),
                2 * config.settings.log_tail_lines,
            )
            .await?;
            facts.lines = kept.lines;
        }
    }
    let filter = Filter {
        run_id: Some(run_id.to_string()),
        ..Filter::default()
    };
    facts.events = events::list(db, &filter, 50, None).await?.items;
    facts.first_bad = first_bad(db, config, run_id).await?;
    Ok(facts)
}

/// The earliest non-finite value among the run's loss-like keys.
async fn first_bad(
    db: &Db,
    config: &ServerConfig,
    run_id: &str,
) -> Result<Option<(String, i64, f64)>, Error> {
    let rows: Vec<(String, i64)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT key, first_non_finite_step FROM metric_series
         WHERE run_id = $1 AND first_non_finite_step IS NOT NULL ORDER BY first_non_finite_step",
        )
        .bind(run_id)
        .fetch_all(pool)
        .await
    })?;
    let Some((key, step)) = rows
        .into_iter()
        .find(|(key, _)| metrics::matches_pattern(&config.settings.loss_pattern, key))
    else {
        return Ok(None);
    };
    let query = Query {
        key: key.clone(),
        max_points: 1000,
        axis: Axis::Step,
        from: Some(step as f64),
        to: Some(step as f64),
    };
    let value = metrics::query(db, run_id, &query)
        .await?
        .points
        .and_then(|points| points.into_iter().map(|p| p.value.0).find(|v| !v.is_finite()))
        .unwrap_or(f64::NAN);
    Ok(Some((key, step, value)))
}

/// Findings about a run, running or not.
pub async fn diagnose(db: &Db, config: &ServerConfig, run_id: &str) -> Result<Diagnosis, Error> {
    let run = runs::get(db, run_id).await?;
    let mut findings = Vec::new();
    if let Some((key, step, value)) = first_bad(db, config, run_id).await? {
        findings.push(Finding {
            severity: Severity::Critical,
            kind: "LOSS_NAN".into(),
            summary: format!("{key} is {} since step {step}", Value(value).describe()),
            evidence: vec![Evidence::Metric {
                key,
                step,
                value: Value(value),
            }],
        });
    }
    findings.extend(loss_trend(db, config, run_id, &run.latest).await?);
    let running = run.status == JobStatus::Running.as_str();
    if let (Some(job_id), true) = (&run.job_id, running) {
        let job = store::get(db, job_id).await?;
        if let Some(attempt) = job.attempts.last() {
            findings.extend(silence(db, config, job_id, attempt.n).await?);
            findings.extend(node_health(db, config, &attempt.node_id, &attempt.node, &attempt.gpus).await?);
        }
    }
    let failed = run.status == JobStatus::Failed.as_str() || run.status == JobStatus::Lost.as_str();
    let failure = if failed {
        Some(failure(db, config, run_id).await?)
    } else {
        None
    };
    if let Some(failure) = &failure {
        findings.insert(
            0,
            Finding {
                severity: Severity::Critical,
                kind: "FAILED".into(),
                summary: format!("{}: {}", failure.category, failure.summary),
                evidence: failure.evidence.clone(),
            },
        );
    }
    Ok(Diagnosis {
        run_id: run_id.to_string(),
        status: run.status,
        findings,
        failure,
    })
}

/// Diverging or flat loss, from a coarse view of each loss-like key.
async fn loss_trend(
    db: &Db,
    config: &ServerConfig,
    run_id: &str,
    latest: &std::collections::BTreeMap<String, gpuplane_api::metric::Latest>,
) -> Result<Vec<Finding>, Error> {
    let mut findings = Vec::new();
    for key in latest
        .keys()
        .filter(|k| metrics::matches_pattern(&config.settings.loss_pattern, k))
    {
        let query = Query {
            key: key.clone(),
            max_points: 30,
            axis: Axis::Step,
            from: None,
            to: None,
        };
        let series = metrics::query(db, run_id, &query).await?;
        let values: Vec<(i64, f64)> = match (series.points, series.buckets) {
            (Some(points), _) => points.into_iter().map(|p| (p.step, p.value.0)).collect(),
            (_, Some(buckets)) => buckets.into_iter().map(|b| (b.step_to, b.last.0)).collect(),
            _ => Vec::new(),
        };
        let finite: Vec<(i64, f64)> = values.into_iter().filter(|(_, v)| v.is_finite()).collect();
        if finite.len() < 6 {
            continue;
        }
        let third = finite.len() / 3;
        let mean = |part: &[(i64, f64)]| part.iter().map(|(_, v)| v).sum::<f64>() / part.len() as f64;
        let (early, late) = (mean(&finite[..third]), mean(&finite[finite.len() - third..]));
        let scale = early.abs().max(late.abs()).max(1e-12);
        let evidence = vec![
            Evidence::Metric {
                key: key.clone(),
                step: finite[0].0,
                value: Value(finite[0].1),
            },
            Evidence::Metric {
                key: key.clone(),
                step: finite[finite.len() - 1].0,
                value: Value(finite[finite.len() - 1].1),
            },
        ];
        if late > early * 1.5 && late - early > 1e-9 {
            findings.push(Finding {
                severity: Severity::Warning,
                kind: "LOSS_DIVERGING".into(),
                summary: format!(
                    "{key} is rising: {early:.4} early, {late:.4} lately (lower the learning rate?)"
                ),
                evidence,
            });
        } else if (late - early).abs() / scale < 0.01 {
            findings.push(Finding {
                severity: Severity::Warning,
                kind: "LOSS_FLAT".into(),
                summary: format!("{key} is flat at about {late:.4}: the model may not be learning (learning rate, frozen weights, data)"),
                evidence,
            });
        }
    }
    Ok(findings)
}

/// No output for a long time while running.
async fn silence(
    db: &Db,
    config: &ServerConfig,
    job_id: &str,
    attempt: i64,
) -> Result<Option<Finding>, Error> {
    let last: Option<i64> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT max(time) FROM log_lines WHERE job_id = $1 AND attempt = $2")
            .bind(job_id)
            .bind(attempt)
            .fetch_one(pool)
            .await
    })?;
    let started: Option<i64> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT started_at FROM attempts WHERE job_id = $1 AND n = $2")
            .bind(job_id)
            .bind(attempt)
            .fetch_one(pool)
            .await
    })?;
    let since = last.or(started).unwrap_or_else(now_ms);
    let quiet = Duration::from_millis((now_ms() - since).max(0) as u64);
    if quiet < config.silence_warning {
        return Ok(None);
    }
    let what = if last.is_some() {
        "no output"
    } else {
        "no output at all"
    };
    Ok(Some(Finding {
        severity: Severity::Warning,
        kind: "NO_OUTPUT".into(),
        summary: format!(
            "{what} for {}: a hang, a deadlock between ranks, or a prompt waiting for input",
            humantime::format_duration(Duration::from_secs(quiet.as_secs()))
        ),
        evidence: Vec::new(),
    }))
}

/// The attempt's node offline, or its GPUs idle.
async fn node_health(
    db: &Db,
    config: &ServerConfig,
    node_id: &str,
    node: &str,
    gpus: &[u32],
) -> Result<Vec<Finding>, Error> {
    let mut findings = Vec::new();
    let status: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT status FROM nodes WHERE id = $1")
            .bind(node_id)
            .fetch_optional(pool)
            .await
    })?;
    if status.as_deref() == Some("OFFLINE") {
        findings.push(Finding {
            severity: Severity::Critical,
            kind: "NODE_OFFLINE".into(),
            summary: format!("node {node} stopped answering; the job turns LOST unless it comes back within the grace period"),
            evidence: Vec::new(),
        });
        return Ok(findings);
    }
    let window = Duration::from_secs(config.settings.gpu_idle_window_s);
    let now = now_ms() as f64 / 1000.0;
    let mut means = Vec::new();
    for &gpu in gpus {
        let key = gpu_key(gpu, "utilization_percent");
        if let Some((mean, span)) =
            telemetry::mean(db, node_id, &key, now - window.as_secs_f64(), now).await?
        {
            means.push(GpuMean { gpu, mean, span });
        }
    }
    let idle = idle_gpus(&means, window);
    if !idle.is_empty() {
        findings.push(Finding {
            severity: Severity::Warning,
            kind: "LOW_GPU_UTILIZATION".into(),
            summary: format!(
                "{} on {node}: the job may be waiting on data loading, the CPU, or not using the GPU at all",
                idle.join(", ")
            ),
            evidence: Vec::new(),
        });
    }
    Ok(findings)
}

/// A GPU's mean utilisation over the idle window, and the seconds its
/// samples span.
struct GpuMean {
    gpu: u32,
    mean: f64,
    span: f64,
}

/// The GPUs whose utilisation averaged below [`LOW_UTILIZATION_PERCENT`] over
/// samples spanning at least half the window (a job that just started, or a
/// GPU without telemetry, is not judged), as `GPU 1 averaged 3% over 5m`.
fn idle_gpus(means: &[GpuMean], window: Duration) -> Vec<String> {
    let over = humantime::format_duration(Duration::from_secs(window.as_secs()));
    means
        .iter()
        .filter(|m| m.span >= window.as_secs_f64() / 2.0 && m.mean < f64::from(LOW_UTILIZATION_PERCENT))
        .map(|m| format!("GPU {} averaged {:.0}% over {over}", m.gpu, m.mean))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_idle_when_their_average_over_most_of_the_window_is_low() {
        let window = Duration::from_secs(300);
        let mean = |gpu, mean, span| GpuMean { gpu, mean, span };
        let cases = [
            (mean(0, 3.2, 290.0), Some("GPU 0 averaged 3% over 5m")),
            // Busy on average, even with idle moments in between.
            (mean(1, 55.0, 300.0), None),
            // Just started: too little of the window to judge.
            (mean(2, 0.0, 100.0), None),
            (mean(3, 0.0, 150.0), Some("GPU 3 averaged 0% over 5m")),
            (mean(4, 10.0, 300.0), None),
        ];
        for (gpu, expected) in cases {
            let found = idle_gpus(std::slice::from_ref(&gpu), window);
            assert_eq!(found.first().map(String::as_str), expected, "GPU {}", gpu.gpu);
        }
    }
}
