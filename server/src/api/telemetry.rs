//! A run's system telemetry: its job's GPUs and processes over each
//! attempt's time span, as JSON (`/runs/{run_id}/system`) and as a chart per
//! field (`/runs/{run_id}/system.svg`). Readers need Viewer on the run's
//! project, like its metrics.

use crate::api::error::{ApiError, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Read};
use crate::metrics::chart::image_size;
use crate::metrics::{Axis, chart};
use crate::nodes::telemetry;
use crate::runs;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::project::Role;
use gpuplane_api::telemetry::{
    AttemptSpan, GPU_FIELDS, PROCESS_FIELDS, SystemSeries, SystemTelemetry, gpu_key, process_key,
};
use serde::Deserialize;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SystemQuery {
    /// One field (`utilization_percent`, `memory_used_mib`, `power_w`,
    /// `temperature_c`, `sm_clock_mhz`, `cpu_percent`, `memory_rss_mib`);
    /// all of them when absent.
    field: Option<String>,
    /// At most this many points per series, else buckets (1–5000, default 300).
    max_points: Option<usize>,
}

/// The telemetry of the run's job: each attempt's GPUs (utilisation, memory,
/// power, temperature, SM clock) and its processes' CPU and memory, over the
/// attempt's own time span. A run without a job has none.
#[utoipa::path(get, path = "/runs/{run_id}/system", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), SystemQuery),
    responses((status = 200, body = SystemTelemetry), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn run_system(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiQuery(query): ApiQuery<SystemQuery>,
) -> Result<Json<SystemTelemetry>, ApiError> {
    let mut errors = Vec::new();
    let fields = chosen_fields(query.field.as_deref(), &mut errors);
    let max_points = query.max_points.unwrap_or(300);
    if !(1..=5000).contains(&max_points) {
        errors.push(FieldError {
            field: "max_points".into(),
            message: "must be between 1 and 5000".into(),
        });
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    Ok(Json(system(&state, &run_id, &fields, max_points).await?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SystemChartQuery {
    /// The field to draw, as for `/runs/{run_id}/system`.
    field: String,
    /// Image size in pixels (default 640×240).
    width: Option<u32>,
    height: Option<u32>,
}

/// One field of the run's telemetry as an SVG chart over time: a line per GPU
/// (per attempt, when it ran more than once), or the job's processes.
#[utoipa::path(get, path = "/runs/{run_id}/system.svg", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), SystemChartQuery),
    responses((status = 200, description = "The chart", content_type = "image/svg+xml"),
        AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn system_chart_svg(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiQuery(query): ApiQuery<SystemChartQuery>,
) -> Result<([(header::HeaderName, &'static str); 2], String), ApiError> {
    let mut errors = Vec::new();
    let fields = chosen_fields(Some(&query.field), &mut errors);
    let (width, height) = image_size(query.width, query.height, (640, 240), &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    let (field, title) = fields[0];
    let telemetry = system(&state, &run_id, &fields, (width / 2) as usize).await?;
    let several_attempts = telemetry.attempts.iter().any(|span| span.attempt > 1);
    let marks = telemetry
        .attempts
        .iter()
        .filter(|span| span.attempt > 1 && span.rank == 0)
        .map(|span| chart::Mark {
            x: span.from,
            label: format!("attempt {}", span.attempt),
        })
        .collect();
    let lines: Vec<chart::Line> = telemetry
        .series
        .into_iter()
        .map(|series| {
            let mut label = series.whose();
            if several_attempts {
                label.push_str(&format!(" (attempt {})", series.attempt));
            }
            chart::Line {
                label,
                series: series.series,
                first_non_finite_step: None,
            }
        })
        .collect();
    let percent = field.ends_with("_percent");
    // A legend comes with two lines or more; one GPU's line is named in the title.
    let title = match lines.as_slice() {
        [only] if GPU_FIELDS.iter().any(|(name, _)| *name == field) => format!("{title}: {}", only.label),
        _ => title.to_string(),
    };
    let options = chart::ChartOptions {
        title,
        axis: Axis::Time,
        smoothing: 0.0,
        y_log: false,
        y_min: percent.then_some(0.0),
        y_max: (field == "utilization_percent").then_some(100.0),
        width,
        height,
        marks,
    };
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "private, no-store"),
        ],
        chart::svg(&lines, &options),
    ))
}

/// The fields asked for (all when `None`), each with its title.
fn chosen_fields(field: Option<&str>, errors: &mut Vec<FieldError>) -> Vec<(&'static str, &'static str)> {
    let all = GPU_FIELDS.iter().chain(PROCESS_FIELDS.iter()).copied();
    match field {
        None => all.collect(),
        Some(name) => match all.clone().find(|(known, _)| *known == name) {
            Some(found) => vec![found],
            None => {
                let names: Vec<&str> = all.map(|(known, _)| known).collect();
                errors.push(FieldError {
                    field: "field".into(),
                    message: format!(
                        "`{name}` is not a telemetry field: use one of {}",
                        names.join(", ")
                    ),
                });
                Vec::new()
            }
        },
    }
}

/// The run's attempts that started, with their nodes, GPUs and spans, and
/// the series of `fields` over each.
async fn system(
    state: &AppState,
    run_id: &str,
    fields: &[(&str, &str)],
    max_points: usize,
) -> Result<SystemTelemetry, ApiError> {
    let rows = telemetry::started_attempts(&state.db, run_id).await?;
    let mut telemetry = SystemTelemetry {
        attempts: Vec::new(),
        series: Vec::new(),
    };
    for telemetry::StartedAttempt {
        job_id,
        n,
        rank,
        node_id,
        node,
        gpus,
        started_at,
        ended_at,
    } in rows
    {
        let gpus: Vec<u32> = serde_json::from_str(&gpus).unwrap_or_default();
        let (from, to) = (started_at as f64 / 1000.0, ended_at.map(|t| t as f64 / 1000.0));
        for &(field, _) in fields {
            let keys: Vec<(Option<u32>, String)> = if GPU_FIELDS.iter().any(|(name, _)| *name == field) {
                gpus.iter().map(|&gpu| (Some(gpu), gpu_key(gpu, field))).collect()
            } else {
                vec![(None, process_key(&job_id, n, field))]
            };
            for (gpu, key) in keys {
                let series = telemetry::series(&state.db, &node_id, &key, from, to, max_points).await?;
                telemetry.series.push(SystemSeries {
                    attempt: n,
                    rank,
                    gpu,
                    field: field.to_string(),
                    series,
                });
            }
        }
        telemetry.attempts.push(AttemptSpan {
            attempt: n,
            rank,
            node,
            gpus,
            from,
            to,
        });
    }
    Ok(telemetry)
}
