//! MLflow's runs: the run as MLflow answers it, create, get, update,
//! delete and restore, search, and the artifact listing the MLflow UI uses.

use super::{Answer, KeyValue, MlflowError, body, caller, int64, page, paged, pairs, query};
use crate::api::error::ApiError;
use crate::api::extract::{Authed, Ingest, Tracking};
use crate::metrics::{self, Axis, Query};
use crate::mlflow::search::Kind;
use crate::mlflow::{self, ExperimentId, MlflowRun};
use crate::runs;
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use gpuplane_api::project::Role;
use serde::Deserialize;
use serde_json::{Value, json};

/// A run as MLflow answers it: info, data (latest metrics, params, tags),
/// inputs. The latest points' times are read for one run (`get`); a
/// search's runs answer 0 for them.
async fn run_json(state: &AppState, found: &MlflowRun) -> Result<Value, MlflowError> {
    let mut json = run_entity(found);
    let mut metrics = Vec::new();
    let run = &found.run;
    for (key, latest) in &run.latest {
        let at = Query {
            key: key.clone(),
            max_points: usize::MAX,
            axis: Axis::Step,
            from: Some(latest.step as f64),
            to: Some(latest.step as f64),
        };
        let last = metrics::query(&state.db, &run.id, &at).await?;
        let timestamp = last
            .points
            .and_then(|points| {
                points
                    .last()
                    .map(|point| (point.wall_time * 1000.0).round() as i64)
            })
            .unwrap_or_default();
        metrics.push(json!({"key": key, "value": latest.value, "timestamp": timestamp, "step": latest.step}));
    }
    json["data"]["metrics"] = Value::Array(metrics);
    Ok(json)
}

fn run_entity(found: &MlflowRun) -> Value {
    let run = &found.run;
    let metrics: Vec<Value> = run
        .latest
        .iter()
        .map(|(key, latest)| json!({"key": key, "value": latest.value, "timestamp": 0, "step": latest.step}))
        .collect();
    let params: Vec<Value> = run
        .config
        .iter()
        .map(|(key, value)| {
            let value = value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            json!({"key": key, "value": value})
        })
        .collect();
    let tags: Vec<Value> = found
        .tags
        .iter()
        .map(|(key, value)| json!({"key": key, "value": value}))
        .collect();
    let experiment_id = found.experiment.to_string();
    let mut info = json!({
        "run_id": run.id,
        "run_uuid": run.id,
        "run_name": run.name,
        "experiment_id": experiment_id,
        "user_id": found.user.clone().unwrap_or_default(),
        "status": found.status,
        "start_time": found.start_time,
        "artifact_uri": found.artifact_uri(),
        "lifecycle_stage": found.lifecycle_stage(),
    });
    if let Some(end) = found.end_time {
        info["end_time"] = Value::from(end);
    }
    json!({
        "info": info,
        "data": {"metrics": metrics, "params": params, "tags": tags},
        "inputs": {},
    })
}

#[derive(Debug, Deserialize)]
struct SearchRuns {
    #[serde(default)]
    experiment_ids: Vec<String>,
    #[serde(default)]
    filter: String,
    run_view_type: Option<String>,
    #[serde(default, deserialize_with = "int64")]
    max_results: Option<i64>,
    #[serde(default)]
    order_by: Vec<String>,
    page_token: Option<String>,
}

/// The most runs one search answer holds, as MLflow's server.
const MAX_SEARCH_RESULTS: i64 = 50_000;

/// Runs of the experiments asked for, filtered and ordered with MLflow's
/// grammar, a page at a time.
pub(super) async fn search_runs(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: SearchRuns = body(&bytes)?;
    let filter = mlflow::search::parse_filter(&request.filter)
        .map_err(|problem| MlflowError::invalid(format!("Invalid filter '{}': {problem}", request.filter)))?;
    let orders = request
        .order_by
        .iter()
        .map(|order| mlflow::search::parse_order(Kind::Runs, order))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|problem| MlflowError::invalid(format!("Invalid order_by clause: {problem}")))?;
    let view = mlflow::View::parse(request.run_view_type.as_deref())?;
    if let Some(max) = request.max_results.filter(|max| *max > MAX_SEARCH_RESULTS) {
        return Err(MlflowError::invalid(format!(
            "Invalid value {max} for parameter 'max_results' supplied. It must be at most {MAX_SEARCH_RESULTS}"
        )));
    }
    let asked: Vec<ExperimentId> = request
        .experiment_ids
        .iter()
        .map(|id| ExperimentId::parse(id))
        .collect();
    let found = mlflow::search(&state.db, &auth.caller, &asked, view, &filter, &orders).await?;
    let (start, size) = page(request.page_token.as_deref(), request.max_results, 1000)?;
    Ok(Json(paged("runs", &found, start, size, run_entity)))
}

pub(super) async fn delete_run(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    set_deleted(auth, state, bytes, true).await
}

pub(super) async fn restore_run(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    set_deleted(auth, state, bytes, false).await
}

/// MLflow's deleted runs are archived runs (with their job), restorable.
async fn set_deleted(
    auth: Result<Authed<Ingest>, ApiError>,
    state: AppState,
    bytes: Bytes,
    deleted: bool,
) -> Answer {
    let auth = caller(auth)?;
    let request: RunQuery = body(&bytes)?;
    let run_id = &checked(&state, &auth.caller, &request, Role::Editor).await?;
    mlflow::set_deleted(&state.db, &auth.caller, run_id, deleted).await?;
    Ok(Json(json!({})))
}

#[derive(Debug, Deserialize)]
struct CreateRun {
    experiment_id: Option<String>,
    #[serde(default, deserialize_with = "int64")]
    start_time: Option<i64>,
    #[serde(default)]
    tags: Vec<KeyValue>,
    run_name: Option<String>,
    /// Who the client says runs it (`mlflow.user`), shown as MLflow's `user_id`.
    user_id: Option<String>,
}

pub(super) async fn create_run(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: CreateRun = body(&bytes)?;
    let experiment = ExperimentId::parse(
        request
            .experiment_id
            .as_deref()
            .filter(|id| !id.is_empty())
            .unwrap_or(mlflow::DEFAULT_EXPERIMENT),
    );
    let run_id = mlflow::create_run(
        &state.db,
        &auth.caller,
        &experiment,
        request.run_name.as_deref(),
        request.start_time,
        request.user_id.as_deref(),
        &pairs(request.tags),
    )
    .await?;
    let found = mlflow::get(&state.db, &run_id).await?;
    Ok(Json(json!({"run": run_json(&state, &found).await?})))
}

#[derive(Debug, Deserialize)]
pub(super) struct RunQuery {
    pub(super) run_id: Option<String>,
    pub(super) run_uuid: Option<String>,
}

/// The run a request names, if the caller has `role` in its project
/// (else MLflow's "not found", for a run the caller may not see too).
pub(super) async fn checked(
    state: &AppState,
    caller: &crate::identity::access::Caller,
    run: &RunQuery,
    role: Role,
) -> Result<String, MlflowError> {
    let run_id = run.id()?;
    runs::check(&state.db, caller, run_id, role)
        .await
        .map_err(|error| match error {
            crate::store::Error::NotFound(_) => MlflowError {
                status: StatusCode::NOT_FOUND,
                code: "RESOURCE_DOES_NOT_EXIST",
                message: format!("Run with id={run_id} not found"),
            },
            other => MlflowError::from(other),
        })?;
    Ok(run_id.to_string())
}

/// [`checked`] for logging: an editor's, into a run that is not deleted.
pub(super) async fn writable(
    state: &AppState,
    caller: &crate::identity::access::Caller,
    run: &RunQuery,
) -> Result<String, MlflowError> {
    let run_id = checked(state, caller, run, Role::Editor).await?;
    if mlflow::is_deleted(&state.db, &run_id).await? {
        return Err(MlflowError::invalid(format!(
            "The run {run_id} must be in the 'active' state. Current state is deleted."
        )));
    }
    Ok(run_id)
}

impl RunQuery {
    fn id(&self) -> Result<&str, MlflowError> {
        match (&self.run_id, &self.run_uuid) {
            (Some(id), _) | (None, Some(id)) if !id.is_empty() => Ok(id),
            _ => Err(MlflowError::invalid(
                "Missing value for required parameter 'run_id'.",
            )),
        }
    }
}

pub(super) async fn get_run(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let request: RunQuery = query(&uri)?;
    let run_id = &checked(&state, &auth.caller, &request, Role::Viewer).await?;
    let found = mlflow::get(&state.db, run_id).await?;
    Ok(Json(json!({"run": run_json(&state, &found).await?})))
}

#[derive(Debug, Deserialize)]
struct UpdateRun {
    #[serde(flatten)]
    run: RunQuery,
    status: Option<String>,
    #[serde(default, deserialize_with = "int64")]
    end_time: Option<i64>,
    run_name: Option<String>,
}

pub(super) async fn update_run(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: UpdateRun = body(&bytes)?;
    let run_id = &writable(&state, &auth.caller, &request.run).await?;
    mlflow::update_run(
        &state.db,
        run_id,
        request.status.as_deref(),
        request.end_time,
        request.run_name.as_deref(),
    )
    .await?;
    let found = mlflow::get(&state.db, run_id).await?;
    Ok(Json(json!({"run_info": run_json(&state, &found).await?["info"]})))
}

#[derive(Debug, Deserialize)]
struct RunListQuery {
    run_id: Option<String>,
    run_uuid: Option<String>,
    path: Option<String>,
}

/// MLflow's own (not proxied) listing, `/api/2.0/mlflow/artifacts/list`,
/// which the MLflow UI uses: a run's artifacts at a path below its root,
/// each named by its path from the root.
pub(super) async fn list_run_artifacts(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Result<Json<Value>, MlflowError> {
    let auth = caller(auth)?;
    let query: RunListQuery = query(&uri)?;
    let run_id = query
        .run_id
        .or(query.run_uuid)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            MlflowError::from(ApiError::field(
                "run_id",
                "Missing value for required parameter 'run_id'.",
            ))
        })?;
    let inside = query.path.unwrap_or_default();
    let inside = inside.trim_matches('/');
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    let root = format!(
        "{}/{run_id}/artifacts",
        mlflow::experiment_of(&state.db, &run_id).await?
    );
    let path = if inside.is_empty() {
        root.clone()
    } else {
        format!("{root}/{inside}")
    };
    let at = mlflow::artifacts::locate(&state.db, &auth.caller, &path, Role::Viewer).await?;
    let listed = state.artifacts.list(&at.in_store).await?;
    let files: Vec<Value> = mlflow::artifacts::with_checkpoints(&state.db, &at, listed)
        .await?
        .into_iter()
        .map(|entry| {
            let path = if at.inside.is_empty() {
                entry.name
            } else {
                format!("{}/{}", at.inside.join("/"), entry.name)
            };
            let mut file = json!({"path": path, "is_dir": entry.is_dir});
            if let Some(size) = entry.size {
                file["file_size"] = Value::from(size);
            }
            file
        })
        .collect();
    Ok(Json(
        json!({"root_uri": format!("mlflow-artifacts:/{root}"), "files": files}),
    ))
}
