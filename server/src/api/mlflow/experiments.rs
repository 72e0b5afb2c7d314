//! MLflow's experiments: get, create, rename, delete and restore, tags, search.

use super::{
    Answer, KeyValue, MlflowError, body, caller, int64, one_or_many, page, paged, pairs, query, required,
};
use crate::api::error::ApiError;
use crate::api::extract::{Authed, Ingest, Tracking};
use crate::mlflow::experiments::{self, Experiment};
use crate::mlflow::search::Kind;
use crate::mlflow::{self, ExperimentId};
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use serde::Deserialize;
use serde_json::{Value, json};

fn experiment_json(experiment: &Experiment) -> Value {
    let tags: Vec<Value> = experiment
        .tags
        .iter()
        .map(|(key, value)| json!({"key": key, "value": value}))
        .collect();
    json!({
        "experiment_id": experiment.id.to_string(),
        "name": experiment.name,
        "artifact_location": format!("mlflow-artifacts:/{}", experiment.id),
        "lifecycle_stage": experiment.lifecycle_stage(),
        "creation_time": experiment.created_at,
        "last_update_time": experiment.updated_at,
        "tags": tags,
    })
}

#[derive(Debug, Deserialize)]
struct ExperimentQuery {
    experiment_id: Option<String>,
    experiment_name: Option<String>,
}

pub(super) async fn get_experiment(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let request: ExperimentQuery = query(&uri)?;
    let id = ExperimentId::parse(required("experiment_id", &request.experiment_id)?);
    let experiment = experiments::get(&state.db, &auth.caller, &id).await?;
    Ok(Json(json!({"experiment": experiment_json(&experiment)})))
}

pub(super) async fn get_experiment_by_name(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let request: ExperimentQuery = query(&uri)?;
    let name = required("experiment_name", &request.experiment_name)?;
    let experiment = experiments::by_name(&state.db, &auth.caller, name).await?;
    Ok(Json(json!({"experiment": experiment_json(&experiment)})))
}

#[derive(Debug, Deserialize)]
struct CreateExperiment {
    name: Option<String>,
    #[serde(default)]
    tags: Vec<KeyValue>,
    /// Read to check it is text; artifacts are kept where the store says.
    #[allow(dead_code)]
    artifact_location: Option<String>,
}

/// A named experiment in the caller's home project
/// ([`experiments::home_project`]), for the project's editors.
pub(super) async fn create_experiment(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: CreateExperiment = body(&bytes)?;
    let name = required("name", &request.name)?;
    let tags = pairs(request.tags).into_iter().collect();
    let id = experiments::create(&state.db, &auth.caller, name, &tags)
        .await
        .map_err(|error| match error {
            crate::store::Error::Conflict(message) => MlflowError {
                status: StatusCode::BAD_REQUEST,
                code: "RESOURCE_ALREADY_EXISTS",
                message,
            },
            other => MlflowError::from(other),
        })?;
    Ok(Json(json!({"experiment_id": id.to_string()})))
}

#[derive(Debug, Deserialize)]
struct ExperimentChange {
    experiment_id: Option<String>,
    new_name: Option<String>,
    key: Option<String>,
    #[serde(default)]
    value: String,
}

/// The caller, what it asks to change, and of which experiment.
fn experiment_change(
    auth: Result<Authed<Ingest>, ApiError>,
    bytes: &Bytes,
) -> Result<(Authed<Ingest>, ExperimentChange, ExperimentId), MlflowError> {
    let auth = caller(auth)?;
    let request: ExperimentChange = body(bytes)?;
    let id = ExperimentId::parse(required("experiment_id", &request.experiment_id)?);
    Ok((auth, request, id))
}

pub(super) async fn rename_experiment(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, request, id) = experiment_change(auth, &bytes)?;
    let new_name = required("new_name", &request.new_name)?;
    experiments::rename(&state.db, &auth.caller, &id, new_name).await?;
    Ok(Json(json!({})))
}

pub(super) async fn delete_experiment(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, _, id) = experiment_change(auth, &bytes)?;
    experiments::set_deleted(&state.db, &auth.caller, &id, true).await?;
    Ok(Json(json!({})))
}

pub(super) async fn restore_experiment(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, _, id) = experiment_change(auth, &bytes)?;
    experiments::set_deleted(&state.db, &auth.caller, &id, false).await?;
    Ok(Json(json!({})))
}

pub(super) async fn set_experiment_tag(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, request, id) = experiment_change(auth, &bytes)?;
    let key = required("key", &request.key)?;
    experiments::set_tag(&state.db, &auth.caller, &id, key, &request.value).await?;
    Ok(Json(json!({})))
}

pub(super) async fn delete_experiment_tag(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, request, id) = experiment_change(auth, &bytes)?;
    let key = required("key", &request.key)?;
    experiments::delete_tag(&state.db, &auth.caller, &id, key).await?;
    Ok(Json(json!({})))
}

#[derive(Debug, Deserialize)]
struct SearchExperiments {
    #[serde(default, deserialize_with = "int64")]
    max_results: Option<i64>,
    page_token: Option<String>,
    #[serde(default)]
    filter: String,
    #[serde(default, deserialize_with = "one_or_many")]
    order_by: Vec<String>,
    view_type: Option<String>,
}

/// The experiments the caller sees, filtered and ordered with MLflow's
/// grammar, a page at a time.
pub(super) async fn search_experiments(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
    bytes: Bytes,
) -> Answer {
    let auth = caller(auth)?;
    let request: SearchExperiments = if bytes.is_empty() {
        query(&uri)?
    } else {
        body(&bytes)?
    };
    let filter = mlflow::search::parse_experiment_filter(&request.filter)
        .map_err(|problem| MlflowError::invalid(format!("Invalid filter '{}': {problem}", request.filter)))?;
    let orders = request
        .order_by
        .iter()
        .map(|order| mlflow::search::parse_order(Kind::Experiments, order))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|problem| MlflowError::invalid(format!("Invalid order_by clause: {problem}")))?;
    let view = mlflow::View::parse(request.view_type.as_deref())?;
    let mut found: Vec<Experiment> = experiments::visible(&state.db, &auth.caller)
        .await?
        .into_iter()
        .filter(|experiment| view.shows(experiment.deleted) && mlflow::search::matches(experiment, &filter))
        .collect();
    mlflow::search::sort(&mut found, &orders);
    let (start, size) = page(request.page_token.as_deref(), request.max_results, 1000)?;
    Ok(Json(paged("experiments", &found, start, size, experiment_json)))
}
