//! MLflow's tracking REST API, under `/api/2.0/mlflow/` and
//! `/ajax-api/2.0/mlflow/`, for the unmodified `mlflow` client
//! (`MLFLOW_TRACKING_URI` = this server, `MLFLOW_TRACKING_TOKEN` = any
//! GPUPlane token: `read` tokens read, `sdk` and `write` tokens log). The
//! mapping onto projects and runs is `crate::mlflow`'s. Answers and
//! refusals are MLflow's: `{"error_code": …, "message": …}` with its HTTP
//! statuses. Not in the OpenAPI document: it is MLflow's API, not ours.

use crate::api::error::ApiError;
use crate::api::extract::{Authed, Ingest, Tracking};
use crate::metrics::{self, Axis, Query};
use crate::mlflow::experiments::{self, Experiment};
use crate::mlflow::search::Kind;
use crate::mlflow::{self, ExperimentId, MlflowRun};
use crate::runs;
use crate::state::AppState;
use crate::store::ids::new_id;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gpuplane_api::metric::{Point, Value as MetricValue};
use gpuplane_api::project::Role;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

/// The routes, under both of MLflow's prefixes.
pub fn router() -> Router<AppState> {
    let routes = Router::new()
        .route("/experiments/get", get(get_experiment))
        .route("/experiments/get-by-name", get(get_experiment_by_name))
        .route("/experiments/create", post(create_experiment))
        .route("/experiments/update", post(rename_experiment))
        .route("/experiments/delete", post(delete_experiment))
        .route("/experiments/restore", post(restore_experiment))
        .route("/experiments/set-experiment-tag", post(set_experiment_tag))
        .route("/experiments/delete-experiment-tag", post(delete_experiment_tag))
        .route(
            "/experiments/search",
            post(search_experiments).get(search_experiments),
        )
        .route("/runs/create", post(create_run))
        .route("/runs/get", get(get_run))
        .route("/runs/update", post(update_run))
        .route("/runs/log-metric", post(log_metric))
        .route("/runs/log-parameter", post(log_param))
        .route("/runs/set-tag", post(set_tag))
        .route("/runs/delete-tag", post(delete_tag))
        .route("/runs/log-batch", post(log_batch))
        .route("/runs/search", post(search_runs))
        .route("/runs/delete", post(delete_run))
        .route("/runs/restore", post(restore_run))
        .route("/metrics/get-history", get(get_history))
        .route(
            "/metrics/get-history-bulk-interval",
            get(get_history_bulk_interval),
        )
        .route("/metrics/get-history-bulk", get(get_history_bulk))
        .route("/artifacts/list", get(list_run_artifacts))
        .route("/logged-models/search", post(search_logged_models))
        .fallback(endpoint_not_found);
    // MLflow 3's API (traces, datasets, the gateway…) is not kept here: its
    // paths answer MLflow's JSON "endpoint not found", not the console's page.
    let newer = Router::new().fallback(endpoint_not_found);
    Router::new()
        .nest("/api/2.0/mlflow", routes.clone())
        .nest("/ajax-api/2.0/mlflow", routes)
        .nest("/api/3.0/mlflow", newer.clone())
        .nest("/ajax-api/3.0/mlflow", newer)
}

/// An MLflow error answer.
#[derive(Debug)]
pub struct MlflowError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl MlflowError {
    fn invalid(message: impl Into<String>) -> MlflowError {
        MlflowError {
            status: StatusCode::BAD_REQUEST,
            code: "INVALID_PARAMETER_VALUE",
            message: message.into(),
        }
    }
}

impl IntoResponse for MlflowError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error_code": self.code, "message": self.message})),
        )
            .into_response()
    }
}

/// Our refusals in MLflow's words.
impl From<ApiError> for MlflowError {
    fn from(error: ApiError) -> MlflowError {
        let (status, code) = match &error {
            ApiError::BadRequest(_) | ApiError::Validation(_) => {
                (StatusCode::BAD_REQUEST, "INVALID_PARAMETER_VALUE")
            }
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "INVALID_PARAMETER_VALUE"),
            ApiError::Unauthorized | ApiError::InvalidToken(_) => {
                (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED")
            }
            ApiError::InsufficientScope(_) | ApiError::Forbidden(_) => {
                (StatusCode::FORBIDDEN, "PERMISSION_DENIED")
            }
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "RESOURCE_DOES_NOT_EXIST"),
            ApiError::Conflict(_) | ApiError::RecipeDrift(_) => (StatusCode::BAD_REQUEST, "INVALID_STATE"),
            ApiError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "REQUEST_LIMIT_EXCEEDED"),
            ApiError::RequestTimeout(_) | ApiError::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "TEMPORARILY_UNAVAILABLE")
            }
            ApiError::InsufficientStorage(_) => (StatusCode::INSUFFICIENT_STORAGE, "INTERNAL_ERROR"),
            ApiError::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "MLflow API request failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
            }
        };
        let message = match error {
            ApiError::Validation(details) => details
                .iter()
                .map(|detail| format!("{}: {}", detail.field, detail.message))
                .collect::<Vec<_>>()
                .join("; "),
            ApiError::Internal(_) => "internal error (logged on the server)".to_string(),
            other => other.to_string(),
        };
        MlflowError {
            status,
            code,
            message,
        }
    }
}

impl From<crate::store::Error> for MlflowError {
    fn from(error: crate::store::Error) -> MlflowError {
        MlflowError::from(ApiError::from(error))
    }
}

type Answer = Result<Json<Value>, MlflowError>;

/// The caller, or MLflow's 401/403.
fn caller<A: crate::api::extract::Access>(
    auth: Result<Authed<A>, ApiError>,
) -> Result<Authed<A>, MlflowError> {
    auth.map_err(MlflowError::from)
}

/// A POST body (JSON; an empty body is `{}`).
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, MlflowError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let fields: Value = serde_json::from_slice(bytes)
        .map_err(|error| MlflowError::invalid(format!("Malformed request body: {error}")))?;
    // The run, the key and a metric's time and step are checked first, as
    // MLflow does (they sit in flattened parts, where a wrong kind would
    // lose its name).
    for field in ["run_id", "run_uuid", "key"] {
        if let Some(given) = fields
            .get(field)
            .filter(|value| !value.is_string() && !value.is_null())
        {
            return Err(MlflowError::invalid(format!(
                "Invalid value {given} for parameter '{field}' supplied: it must be a string"
            )));
        }
    }
    for field in ["timestamp", "step"] {
        let whole = |value: &Value| match value {
            Value::Null => true,
            Value::Number(number) => number.is_i64(),
            Value::String(text) => text.parse::<i64>().is_ok(),
            _ => false,
        };
        if let Some(given) = fields.get(field).filter(|value| !whole(value)) {
            return Err(MlflowError::invalid(format!(
                "Invalid value {given} for parameter '{field}' supplied: it must be a whole number"
            )));
        }
    }
    from_fields(fields)
}

/// A GET's query string, read as its JSON body would be (the mlflow client
/// sends a GET's fields as query parameters; repeated ones are lists).
fn query<T: DeserializeOwned>(uri: &Uri) -> Result<T, MlflowError> {
    let mut fields = serde_json::Map::new();
    for (key, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        fields.insert(key.into_owned(), Value::String(value.into_owned()));
    }
    from_fields(Value::Object(fields))
}

/// A request's fields, read into `T`; a field of the wrong kind is refused
/// in MLflow's words, naming it and the value given.
fn from_fields<T: DeserializeOwned>(fields: Value) -> Result<T, MlflowError> {
    serde_path_to_error::deserialize(&fields).map_err(|error| {
        let field = match error.path().iter().next() {
            Some(serde_path_to_error::Segment::Map { key }) => Some(key.clone()),
            _ => None,
        };
        match field {
            Some(field) => {
                let given = fields.get(&field).map(Value::to_string).unwrap_or_default();
                MlflowError::invalid(format!(
                    "Invalid value {given} for parameter '{field}' supplied: {}",
                    error.inner()
                ))
            }
            None => MlflowError::invalid(format!("the request is not valid: {}", error.inner())),
        }
    })
}

/// int64 fields: protobuf's JSON writes them as strings, some clients as numbers.
fn int64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => number
            .as_i64()
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("not a whole number")),
        Some(Value::String(text)) => text
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("`{text}` is not a whole number"))),
        Some(other) => Err(serde::de::Error::custom(format!("{other} is not a whole number"))),
    }
}

fn required<'a>(field: &str, value: &'a Option<String>) -> Result<&'a str, MlflowError> {
    value
        .as_deref()
        .filter(|value| !value.is_empty())
        .ok_or_else(|| MlflowError::invalid(format!("Missing value for required parameter '{field}'.")))
}

#[derive(Debug, Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: String,
}

fn pairs(items: Vec<KeyValue>) -> Vec<(String, String)> {
    items.into_iter().map(|item| (item.key, item.value)).collect()
}

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

async fn get_experiment(
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

async fn get_experiment_by_name(
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
async fn create_experiment(
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

async fn rename_experiment(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, request, id) = experiment_change(auth, &bytes)?;
    let new_name = required("new_name", &request.new_name)?;
    experiments::rename(&state.db, &auth.caller, &id, new_name).await?;
    Ok(Json(json!({})))
}

async fn delete_experiment(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, _, id) = experiment_change(auth, &bytes)?;
    experiments::set_deleted(&state.db, &auth.caller, &id, true).await?;
    Ok(Json(json!({})))
}

async fn restore_experiment(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, _, id) = experiment_change(auth, &bytes)?;
    experiments::set_deleted(&state.db, &auth.caller, &id, false).await?;
    Ok(Json(json!({})))
}

async fn set_experiment_tag(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    let (auth, request, id) = experiment_change(auth, &bytes)?;
    let key = required("key", &request.key)?;
    experiments::set_tag(&state.db, &auth.caller, &id, key, &request.value).await?;
    Ok(Json(json!({})))
}

async fn delete_experiment_tag(
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
async fn search_experiments(
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

/// A field a GET may repeat (`order_by=a&order_by=b` arrives as one string
/// from [`query`]; a POST body has a list).
fn one_or_many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(one)) => vec![one],
        Some(other) => serde_json::from_value(other).map_err(serde::de::Error::custom)?,
    })
}

/// One page of `all` under `field`, with the next page's token when there is more.
fn paged<T>(field: &str, all: &[T], start: usize, size: usize, to_json: impl Fn(&T) -> Value) -> Value {
    let listed: Vec<Value> = all.iter().skip(start).take(size).map(to_json).collect();
    let mut answer = json!({ field: listed });
    if start.saturating_add(size) < all.len() {
        answer["next_page_token"] = Value::from((start + size).to_string());
    }
    answer
}

/// Where a page starts and how long it is; tokens are offsets.
fn page(token: Option<&str>, max_results: Option<i64>, default: i64) -> Result<(usize, usize), MlflowError> {
    let start = match token.filter(|token| !token.is_empty()) {
        Some(token) => token
            .parse::<usize>()
            .map_err(|_| MlflowError::invalid(format!("`{token}` is not a page token of this server")))?,
        None => 0,
    };
    let size = max_results.unwrap_or(default);
    if size < 1 {
        return Err(MlflowError::invalid(format!(
            "Invalid value {size} for parameter 'max_results' supplied: it must be at least 1."
        )));
    }
    Ok((start, size as usize))
}

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
async fn search_runs(
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

async fn delete_run(
    auth: Result<Authed<Ingest>, ApiError>,
    State(state): State<AppState>,
    bytes: Bytes,
) -> Answer {
    set_deleted(auth, state, bytes, true).await
}

async fn restore_run(
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

async fn create_run(
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
struct RunQuery {
    run_id: Option<String>,
    run_uuid: Option<String>,
}

/// The run a request names, if the caller has `role` in its project
/// (else MLflow's "not found", for a run the caller may not see too).
async fn checked(
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
async fn writable(
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

async fn get_run(
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

async fn update_run(
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

async fn log_metric(
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
        let result = state.metric_writer.store((run_id.to_string(), prepared)).await?;
        if !result.duplicate {
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

async fn log_param(
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

async fn set_tag(
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

async fn delete_tag(
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
async fn log_batch(
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

/// The most runs and points a run one bulk-interval request reads, as MLflow's.
const MAX_BULK_RUNS: usize = 100;
const MAX_BULK_POINTS: i64 = 2500;

/// The MLflow UI's charts: one metric of up to 100 runs, each sampled to
/// `max_results` points over `start_step..=end_step` (our downsampling:
/// each bucket's last point; all points when they fit).
/// The most points `get-history-bulk` answers, and the most runs it takes, as MLflow.
const MAX_BULK_HISTORY: usize = 25_000;

/// The older MLflow UI's history of one metric of several runs: every
/// point (up to `max_results` in all), run by run, in time order.
async fn get_history_bulk(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let mut run_ids = Vec::new();
    let (mut key, mut max_results) = (None, MAX_BULK_HISTORY);
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "run_id" => run_ids.push(value.into_owned()),
            "metric_key" => key = Some(value.into_owned()),
            "max_results" => {
                max_results = value.parse::<usize>().map_err(|_| {
                    MlflowError::invalid(format!(
                        "Invalid value {value} for parameter 'max_results' supplied"
                    ))
                })?
            }
            _ => {}
        }
    }
    if run_ids.is_empty() {
        return Err(MlflowError::invalid(
            "GetMetricHistoryBulk request must specify at least one run_id.",
        ));
    }
    if run_ids.len() > MAX_BULK_RUNS {
        return Err(MlflowError::invalid(format!(
            "GetMetricHistoryBulk request cannot specify more than {MAX_BULK_RUNS} run_ids. Received {} run_ids.",
            run_ids.len()
        )));
    }
    let key =
        key.ok_or_else(|| MlflowError::invalid("GetMetricHistoryBulk request must specify a metric_key."))?;
    let max_results = max_results.min(MAX_BULK_HISTORY);
    run_ids.sort();
    run_ids.dedup();
    let mut listed = Vec::new();
    for run_id in &run_ids {
        let asked = RunQuery {
            run_id: Some(run_id.clone()),
            run_uuid: None,
        };
        checked(&state, &auth.caller, &asked, Role::Viewer).await?;
        let all = Query {
            key: key.clone(),
            max_points: usize::MAX,
            axis: Axis::Step,
            from: None,
            to: None,
        };
        let mut points = metrics::query(&state.db, run_id, &all)
            .await?
            .points
            .unwrap_or_default();
        points.truncate(max_results);
        points.sort_by(|a, b| {
            a.wall_time
                .total_cmp(&b.wall_time)
                .then(a.step.cmp(&b.step))
                .then(a.value.0.total_cmp(&b.value.0))
        });
        listed.extend(points.iter().map(|point| {
            json!({
                "key": key,
                "value": point.value,
                "timestamp": (point.wall_time * 1000.0).round() as i64,
                "step": point.step,
                "run_id": run_id,
            })
        }));
    }
    listed.truncate(max_results);
    Ok(Json(json!({ "metrics": listed })))
}

async fn get_history_bulk_interval(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let mut run_ids = Vec::new();
    let (mut key, mut start, mut end, mut max_results) = (None, None, None, None);
    let whole = |name: &str, text: &str| {
        text.parse::<i64>()
            .map_err(|_| MlflowError::invalid(format!("`{text}` for {name} is not a whole number")))
    };
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "run_ids" => run_ids.push(value.into_owned()),
            "metric_key" => key = Some(value.into_owned()),
            "start_step" => start = Some(whole("start_step", &value)?),
            "end_step" => end = Some(whole("end_step", &value)?),
            "max_results" => max_results = Some(whole("max_results", &value)?),
            _ => {}
        }
    }
    let key = required("metric_key", &key)?;
    if run_ids.is_empty() {
        return Err(MlflowError::invalid(
            "Missing value for required parameter 'run_ids'.",
        ));
    }
    if run_ids.len() > MAX_BULK_RUNS {
        return Err(MlflowError::invalid(format!(
            "GetMetricHistoryBulkInterval request must specify at most {MAX_BULK_RUNS} run_ids. Received {} run_ids.",
            run_ids.len()
        )));
    }
    let max_results = max_results.unwrap_or(MAX_BULK_POINTS);
    if !(1..=MAX_BULK_POINTS).contains(&max_results) {
        return Err(MlflowError::invalid(format!(
            "max_results must be between 1 and {MAX_BULK_POINTS}."
        )));
    }
    let (from, to) = match (start, end) {
        (Some(start), Some(end)) if start > end => {
            return Err(MlflowError::invalid(format!(
                "end_step must be greater than start_step. Found start_step={start} and end_step={end}."
            )));
        }
        (Some(start), Some(end)) => (Some(start as f64), Some(end as f64)),
        (None, None) => (None, None),
        _ => {
            return Err(MlflowError::invalid(
                "If either start step or end step are specified, both must be specified.",
            ));
        }
    };
    let mut listed = Vec::new();
    for run_id in &run_ids {
        runs::check(&state.db, &auth.caller, run_id, Role::Viewer).await?;
        let sampled = Query {
            key: key.to_string(),
            max_points: max_results as usize,
            axis: Axis::Step,
            from,
            to,
        };
        let series = metrics::query(&state.db, run_id, &sampled).await?;
        let point = |step: i64, wall_time: f64, value: &MetricValue| json!({"key": key, "value": value, "timestamp": (wall_time * 1000.0).round() as i64, "step": step, "run_id": run_id});
        if let Some(points) = &series.points {
            listed.extend(points.iter().map(|p| point(p.step, p.wall_time, &p.value)));
        }
        if let Some(buckets) = &series.buckets {
            listed.extend(buckets.iter().map(|b| point(b.step_to, b.time_to, &b.last)));
        }
    }
    Ok(Json(json!({"metrics": listed})))
}

/// MLflow 3's logged models: GPUPlane keeps none (the client asks before
/// it downloads a run's artifacts).
async fn search_logged_models(auth: Result<Authed<Tracking>, ApiError>) -> Answer {
    caller(auth)?;
    Ok(Json(json!({"models": []})))
}

/// A part of MLflow's API GPUPlane does not answer, said in MLflow's shape.
async fn endpoint_not_found(uri: Uri) -> MlflowError {
    MlflowError {
        status: StatusCode::NOT_FOUND,
        code: "ENDPOINT_NOT_FOUND",
        message: format!(
            "GPUPlane does not answer {} of MLflow's API (see the manual's \"From MLflow code\" page)",
            uri.path()
        ),
    }
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    #[serde(flatten)]
    run: RunQuery,
    metric_key: Option<String>,
    #[serde(default, deserialize_with = "int64")]
    max_results: Option<i64>,
    page_token: Option<String>,
}

/// Every point of one metric, in step order (a page at a time when the
/// client asks for pages).
async fn get_history(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let request: HistoryQuery = query(&uri)?;
    let key = required("metric_key", &request.metric_key)?;
    let run_id = &checked(&state, &auth.caller, &request.run, Role::Viewer).await?;
    let all = Query {
        key: key.to_string(),
        max_points: usize::MAX,
        axis: Axis::Step,
        from: None,
        to: None,
    };
    let points = metrics::query(&state.db, run_id, &all)
        .await?
        .points
        .unwrap_or_default();
    let (start, size) = page(request.page_token.as_deref(), request.max_results, i64::MAX)?;
    let metric = |point: &gpuplane_api::metric::SeriesPoint| {
        json!({
            "key": key,
            "value": point.value,
            "timestamp": (point.wall_time * 1000.0).round() as i64,
            "step": point.step,
        })
    };
    Ok(Json(paged("metrics", &points, start, size, metric)))
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
async fn list_run_artifacts(
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
