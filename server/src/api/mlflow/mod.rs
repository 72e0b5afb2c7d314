//! MLflow's tracking REST API, under `/api/2.0/mlflow/` and
//! `/ajax-api/2.0/mlflow/`, for the unmodified `mlflow` client
//! (`MLFLOW_TRACKING_URI` = this server, `MLFLOW_TRACKING_TOKEN` = any
//! GPUPlane token: `read` tokens read, `sdk` and `write` tokens log). The
//! mapping onto projects and runs is `crate::mlflow`'s. Answers and
//! refusals are MLflow's: `{"error_code": …, "message": …}` with its HTTP
//! statuses. Not in the OpenAPI document: it is MLflow's API, not ours.

use crate::api::error::ApiError;
use crate::api::extract::{Authed, Tracking};

use crate::state::AppState;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

mod experiments;
mod history;
mod logging;
mod runs;

/// The routes, under both of MLflow's prefixes.
pub fn router() -> Router<AppState> {
    let routes = Router::new()
        .route("/experiments/get", get(experiments::get_experiment))
        .route(
            "/experiments/get-by-name",
            get(experiments::get_experiment_by_name),
        )
        .route("/experiments/create", post(experiments::create_experiment))
        .route("/experiments/update", post(experiments::rename_experiment))
        .route("/experiments/delete", post(experiments::delete_experiment))
        .route("/experiments/restore", post(experiments::restore_experiment))
        .route(
            "/experiments/set-experiment-tag",
            post(experiments::set_experiment_tag),
        )
        .route(
            "/experiments/delete-experiment-tag",
            post(experiments::delete_experiment_tag),
        )
        .route(
            "/experiments/search",
            post(experiments::search_experiments).get(experiments::search_experiments),
        )
        .route("/runs/create", post(runs::create_run))
        .route("/runs/get", get(runs::get_run))
        .route("/runs/update", post(runs::update_run))
        .route("/runs/log-metric", post(logging::log_metric))
        .route("/runs/log-parameter", post(logging::log_param))
        .route("/runs/set-tag", post(logging::set_tag))
        .route("/runs/delete-tag", post(logging::delete_tag))
        .route("/runs/log-batch", post(logging::log_batch))
        .route("/runs/search", post(runs::search_runs))
        .route("/runs/delete", post(runs::delete_run))
        .route("/runs/restore", post(runs::restore_run))
        .route("/metrics/get-history", get(history::get_history))
        .route(
            "/metrics/get-history-bulk-interval",
            get(history::get_history_bulk_interval),
        )
        .route("/metrics/get-history-bulk", get(history::get_history_bulk))
        .route("/artifacts/list", get(runs::list_run_artifacts))
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
    pub(super) fn invalid(message: impl Into<String>) -> MlflowError {
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

pub(super) type Answer = Result<Json<Value>, MlflowError>;

/// The caller, or MLflow's 401/403.
pub(super) fn caller<A: crate::api::extract::Access>(
    auth: Result<Authed<A>, ApiError>,
) -> Result<Authed<A>, MlflowError> {
    auth.map_err(MlflowError::from)
}

/// A POST body (JSON; an empty body is `{}`).
pub(super) fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, MlflowError> {
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
pub(super) fn query<T: DeserializeOwned>(uri: &Uri) -> Result<T, MlflowError> {
    let mut fields = serde_json::Map::new();
    for (key, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        fields.insert(key.into_owned(), Value::String(value.into_owned()));
    }
    from_fields(Value::Object(fields))
}

/// A request's fields, read into `T`; a field of the wrong kind is refused
/// in MLflow's words, naming it and the value given.
pub(super) fn from_fields<T: DeserializeOwned>(fields: Value) -> Result<T, MlflowError> {
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
pub(super) fn int64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
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

pub(super) fn required<'a>(field: &str, value: &'a Option<String>) -> Result<&'a str, MlflowError> {
    value
        .as_deref()
        .filter(|value| !value.is_empty())
        .ok_or_else(|| MlflowError::invalid(format!("Missing value for required parameter '{field}'.")))
}

#[derive(Debug, Deserialize)]
pub(super) struct KeyValue {
    key: String,
    #[serde(default)]
    value: String,
}

pub(super) fn pairs(items: Vec<KeyValue>) -> Vec<(String, String)> {
    items.into_iter().map(|item| (item.key, item.value)).collect()
}

/// A field a GET may repeat (`order_by=a&order_by=b` arrives as one string
/// from [`query`]; a POST body has a list).
pub(super) fn one_or_many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(one)) => vec![one],
        Some(other) => serde_json::from_value(other).map_err(serde::de::Error::custom)?,
    })
}

/// One page of `all` under `field`, with the next page's token when there is more.
pub(super) fn paged<T>(
    field: &str,
    all: &[T],
    start: usize,
    size: usize,
    to_json: impl Fn(&T) -> Value,
) -> Value {
    let listed: Vec<Value> = all.iter().skip(start).take(size).map(to_json).collect();
    let mut answer = json!({ field: listed });
    if start.saturating_add(size) < all.len() {
        answer["next_page_token"] = Value::from((start + size).to_string());
    }
    answer
}

/// Where a page starts and how long it is; tokens are offsets.
pub(super) fn page(
    token: Option<&str>,
    max_results: Option<i64>,
    default: i64,
) -> Result<(usize, usize), MlflowError> {
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
