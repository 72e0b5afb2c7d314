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
use axum::routing::get;
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
