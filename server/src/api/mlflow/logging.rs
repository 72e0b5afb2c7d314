//! What a run logs through MLflow: metrics, params, tags, and
//! `log-batch` with MLflow's limits.

use super::runs::{RunQuery, writable};
use super::{Answer, KeyValue, MlflowError, body, caller, int64, pairs, required};
use crate::api::error::ApiError;
use crate::api::extract::{Authed, Ingest};
use crate::metrics::{self};
use crate::mlflow::{self};
use crate::state::AppState;
use crate::store::ids::new_id;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use gpuplane_api::metric::{Point, Value as MetricValue};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
struct Metric {
    /// Missing: empty, refused in MLflow's words ([`Metric::missing`]).
    #[serde(default)]
    key: String,
    value: MetricValue,
    #[serde(default, deserialize_with = "int64")]
    timestamp: Option<i64>,
    #[serde(default, deserialize_with = "int64")]
    step: Option<i64>,
}

impl Metric {
    /// The first required field it lacks (MLflow requires a key and a time).
    fn missing(&self) -> Option<&'static str> {
        if self.key.is_empty() {
            Some("key")
        } else if self.timestamp.is_none() {
            Some("timestamp")
        } else {
            None
        }
    }
}

#[derive(Debug, Deserialize)]
struct LogMetric {
    #[serde(flatten)]
    run: RunQuery,
    #[serde(flatten)]
    metric: Metric,
}

pub(super) async fn log_metric(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: LogMetric = body(&bytes)?;
    if let Some(field) = request.metric.missing() {
        return Err(MlflowError::invalid(format!(
            "Missing value for required parameter '{field}'."
        )));
    }
    let run_id = &writable(&state, &auth.caller, &request.run).await?;
    store_metrics(&state, run_id, prepare_metrics(&[request.metric])?).await?;
    Ok(Json(json!({})))
}

/// Stores points checked by [`prepare_metrics`] as any batch of ours.
async fn store_metrics(
    state: &AppState,
    run_id: &str,
    prepared: Option<metrics::PreparedBatch>,
) -> Result<(), MlflowError> {
    if let Some(prepared) = prepared {
        let bytes = prepared.encoded_bytes() as u64;
        let result = state.metric_writer.store((run_id.to_string(), prepared)).await?;
        if !result.duplicate {
            state.observed.ingested(result.accepted, bytes);
            state.wakes.wake(crate::wake::Wake::Events);
        }
    }
    Ok(())
}

/// Checks points as any batch of ours (an MLflow metric without a step
/// is at step 0, as MLflow keeps it); none for no points.
fn prepare_metrics(metrics: &[Metric]) -> Result<Option<metrics::PreparedBatch>, MlflowError> {
    if metrics.is_empty() {
        return Ok(None);
    }
    let now = crate::store::time::now_ms();
    let points: Vec<Point> = metrics
        .iter()
        .map(|metric| Point {
            key: metric.key.clone(),
            step: metric.step.unwrap_or(0),
            wall_time: metric.timestamp.unwrap_or(now) as f64 / 1000.0,
            value: metric.value,
        })
        .collect();
    Ok(Some(metrics::prepare(new_id("mlflow"), &points, Vec::new())?))
}

pub(super) async fn log_param(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: RunKeyValue = body(&bytes)?;
    let run_id = &writable(&state, &auth.caller, &request.run).await?;
    let key = required("key", &request.key)?.to_string();
    mlflow::log_params(&state.db, run_id, &[(key, request.value)]).await?;
    Ok(Json(json!({})))
}

pub(super) async fn set_tag(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: RunKeyValue = body(&bytes)?;
    let run_id = &writable(&state, &auth.caller, &request.run).await?;
    let key = required("key", &request.key)?.to_string();
    mlflow::set_tags(&state.db, run_id, &[(key, request.value)]).await?;
    Ok(Json(json!({})))
}

/// `log-parameter`, `set-tag`, `delete-tag` (no value).
#[derive(Debug, Deserialize)]
struct RunKeyValue {
    #[serde(flatten)]
    run: RunQuery,
    key: Option<String>,
    #[serde(default)]
    value: String,
}

pub(super) async fn delete_tag(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: RunKeyValue = body(&bytes)?;
    let run_id = &writable(&state, &auth.caller, &request.run).await?;
    mlflow::delete_tag(&state.db, run_id, required("key", &request.key)?).await?;
    Ok(Json(json!({})))
}

#[derive(Debug, Deserialize)]
struct LogBatch {
    #[serde(flatten)]
    run: RunQuery,
    #[serde(default)]
    metrics: Vec<Metric>,
    #[serde(default)]
    params: Vec<KeyValue>,
    #[serde(default)]
    tags: Vec<KeyValue>,
}

/// Metrics, params and tags at once, within MLflow's limits; a batch over
/// a limit, or with a changed param, writes nothing.
pub(super) async fn log_batch(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: LogBatch = body(&bytes)?;
    let run_id = &writable(&state, &auth.caller, &request.run).await?;
    for (what, count, limit) in [
        ("metrics", request.metrics.len(), mlflow::MAX_BATCH_METRICS),
        ("params", request.params.len(), mlflow::MAX_BATCH_PARAMS),
        ("tags", request.tags.len(), mlflow::MAX_BATCH_TAGS),
    ] {
        if count > limit {
            return Err(MlflowError::invalid(format!(
                "A batch logging request can contain at most {limit} {what}. Got {count} {what}. Please split up \
                 {what} across multiple requests and try again."
            )));
        }
    }
    for (at, metric) in request.metrics.iter().enumerate() {
        if let Some(field) = metric.missing() {
            return Err(MlflowError::invalid(format!(
                "Missing value for required parameter 'metrics[{at}].{field}'."
            )));
        }
    }
    let prepared = prepare_metrics(&request.metrics)?;
    mlflow::log_params(&state.db, run_id, &pairs(request.params)).await?;
    store_metrics(&state, run_id, prepared).await?;
    mlflow::set_tags(&state.db, run_id, &pairs(request.tags)).await?;
    Ok(Json(json!({})))
}
