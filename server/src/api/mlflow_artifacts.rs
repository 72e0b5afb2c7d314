//! MLflow's proxied artifact API, `/api/2.0/mlflow-artifacts/artifacts`:
//! upload (`PUT …/PATH`), download (`GET …/PATH`) and list (`GET
//! …?path=PATH`) a run's artifacts, for the mlflow client's `log_artifact`,
//! `log_artifacts`, `list_artifacts` and `download_artifacts`. `sdk` and
//! `write` tokens of the run's project's editors upload; `read` tokens too
//! list and download. The store is `crate::mlflow::artifacts`; a run's
//! recorded checkpoints are listed under `checkpoints/`.

use crate::api::error::ApiError;
use crate::api::extract::{Authed, Ingest, Tracking};
use crate::api::mlflow::MlflowError;
use crate::mlflow::artifacts;
use crate::state::AppState;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gpuplane_api::project::Role;
use serde::Deserialize;
use serde_json::{Value, json};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/2.0/mlflow-artifacts/artifacts", get(list_artifacts))
        .route(
            "/api/2.0/mlflow-artifacts/artifacts/{*path}",
            get(download_artifact).put(upload_artifact),
        )
        // The MLflow UI's own download and upload, by run and path.
        .route("/get-artifact", get(download_run_artifact))
        .route("/ajax-api/2.0/mlflow/upload-artifact", post(upload_run_artifact))
}

#[derive(Debug, Deserialize)]
struct RunPath {
    run_id: Option<String>,
    run_uuid: Option<String>,
    path: Option<String>,
}

impl RunPath {
    /// The artifact path the proxied API names for this run and path.
    async fn artifact_path(&self, state: &AppState) -> Result<String, MlflowError> {
        let run_id = self
            .run_id
            .as_deref()
            .or(self.run_uuid.as_deref())
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                MlflowError::from(ApiError::BadRequest("Request must specify run_uuid.".into()))
            })?;
        let path = self.path.as_deref().unwrap_or_default().trim_matches('/');
        if path.is_empty() {
            return Err(ApiError::BadRequest("Request must specify path.".into()).into());
        }
        // A run that does not exist is refused below, as one the caller cannot see.
        let experiment = match crate::mlflow::experiment_of(&state.db, run_id).await {
            Ok(experiment) => experiment.to_string(),
            Err(crate::store::Error::NotFound(_)) => crate::mlflow::DEFAULT_EXPERIMENT.to_string(),
            Err(error) => return Err(ApiError::from(error).into()),
        };
        Ok(format!("{experiment}/{run_id}/artifacts/{path}"))
    }
}

async fn download_run_artifact(
    auth: Result<Authed<Tracking>, ApiError>,
    state: State<AppState>,
    Query(query): Query<RunPath>,
) -> Result<Response, MlflowError> {
    let path = query.artifact_path(&state).await?;
    download_artifact(auth, state, Path(path)).await
}

async fn upload_run_artifact(
    auth: Result<Authed<Ingest>, ApiError>,
    state: State<AppState>,
    Query(query): Query<RunPath>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Json<Value>, MlflowError> {
    let path = query.artifact_path(&state).await?;
    artifacts::split(&path)?;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok());
    if length.is_none_or(|length| length == "0") {
        return Err(ApiError::BadRequest("Request must specify data.".into()).into());
    }
    upload_artifact(auth, state, Path(path), body).await
}

/// Streams the body into the store; an upload that stalls for the
/// server's request body timeout is refused and leaves nothing.
async fn upload_artifact(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    Path(path): Path<String>,
    body: Body,
) -> Result<Json<Value>, MlflowError> {
    let auth = auth?;
    let at = artifacts::locate(&state.db, &auth.caller, &path, Role::Editor).await?;
    if at.in_checkpoints() {
        return Err(ApiError::field(
            "path",
            "checkpoints/ lists the run's recorded checkpoints: upload artifacts elsewhere",
        )
        .into());
    }
    let idle = state.config.http_limits.body_timeout;
    let bytes = state
        .artifacts
        .store(&at.in_store, body.into_data_stream(), idle)
        .await?;
    tracing::info!(path, bytes, "artifact stored");
    Ok(Json(json!({})))
}

async fn download_artifact(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    Path(path): Path<String>,
) -> Result<Response, MlflowError> {
    let auth = auth?;
    let at = artifacts::locate(&state.db, &auth.caller, &path, Role::Viewer).await?;
    if let Some(elsewhere) = artifacts::checkpoint_elsewhere(&state.db, &at).await? {
        return Err(ApiError::NotFound(elsewhere).into());
    }
    let (chunks, size) = state.artifacts.open_file(&at.in_store).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    path: Option<String>,
}

/// The entries of a folder of a run's artifacts, by name (MLflow's
/// answer: names, not paths; sizes as strings), the run's recorded
/// checkpoints under `checkpoints/`.
async fn list_artifacts(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, MlflowError> {
    let auth = auth?;
    let path = query.path.filter(|path| !path.is_empty()).ok_or_else(|| {
        MlflowError::from(ApiError::field(
            "path",
            "names no run's artifacts: EXPERIMENT/RUN/artifacts",
        ))
    })?;
    let at = artifacts::locate(&state.db, &auth.caller, &path, Role::Viewer).await?;
    let listed = state.artifacts.list(&at.in_store).await?;
    let files: Vec<Value> = artifacts::with_checkpoints(&state.db, &at, listed)
        .await?
        .into_iter()
        .map(|entry| {
            let mut file = json!({"path": entry.name, "is_dir": entry.is_dir});
            if let Some(size) = entry.size {
                file["file_size"] = Value::from(size.to_string());
            }
            file
        })
        .collect();
    Ok(Json(json!({"files": files})))
}
