//! MLflow's proxied artifact API, `/api/2.0/mlflow-artifacts/artifacts`:
//! upload (`PUT …/PATH`), download (`GET …/PATH`) and list (`GET
//! …?path=PATH`) a run's artifacts, for the mlflow client's `log_artifact`,
//! `log_artifacts`, `list_artifacts` and `download_artifacts`. `sdk` and
//! `write` tokens of the run's project's editors upload; `read` tokens too
//! list and download. The store is `crate::mlflow::artifacts`.

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
use tokio::io::AsyncReadExt;

/// The size of the chunks a download is sent in.
const CHUNK: usize = 256 * 1024;

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
    let root = state.config.artifact_root();
    let target = artifacts::locate(&state.db, &root, &auth.caller, &path, Role::Editor).await?;
    let idle = state.config.http_limits.body_timeout;
    let bytes = artifacts::store(&target, body.into_data_stream(), idle).await?;
    tracing::info!(path, bytes, "artifact stored");
    Ok(Json(json!({})))
}

async fn download_artifact(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    Path(path): Path<String>,
) -> Result<Response, MlflowError> {
    let auth = auth?;
    let root = state.config.artifact_root();
    let file = artifacts::locate(&state.db, &root, &auth.caller, &path, Role::Viewer).await?;
    let (opened, size) = artifacts::open(&file).await?;
    // A chunk at a time, until the end of the file (or a read error, which
    // breaks the response off).
    let chunks = futures_util::stream::unfold(Some(opened), |opened| async move {
        let mut file = opened?;
        let mut buffer = vec![0u8; CHUNK];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(read) => {
                buffer.truncate(read);
                Some((Ok::<_, std::io::Error>(buffer), Some(file)))
            }
            Err(error) => Some((Err(error), None)),
        }
    });
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
/// answer: names, not paths; sizes as strings).
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
    let root = state.config.artifact_root();
    let at = artifacts::locate(&state.db, &root, &auth.caller, &path, Role::Viewer).await?;
    let files: Vec<Value> = artifacts::list(&at)
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
