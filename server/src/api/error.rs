//! The API's one error type and its one conversion into a response.
//!
//! Client errors carry a code and field details; a 5xx says only
//! "internal error" and leaves its cause in the response extensions, where the
//! logging middleware ([`log_internal_errors`]) picks it up.

use crate::store;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gpuplane_api::auth::Scope;
use gpuplane_api::error::{ErrorBody, ErrorInfo, FieldError, codes};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// The `realm` of every `WWW-Authenticate` challenge.
pub const REALM: &str = "gpuplane";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("invalid fields")]
    Validation(Vec<FieldError>),
    #[error("missing bearer token")]
    Unauthorized,
    #[error("{0}")]
    InvalidToken(&'static str),
    #[error("this route needs a token with the `{0}` scope")]
    InsufficientScope(Scope),
    /// 403 for a role that is too low (scopes use `InsufficientScope`).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    RateLimited(String),
    #[error("{0}")]
    Conflict(String),
    /// 409 `recipe_drift`: an experiment's lock is behind the catalog.
    #[error("{0}")]
    RecipeDrift(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 408: the body did not arrive in time (`crate::http::limit_body_time`).
    #[error("{0}")]
    RequestTimeout(String),
    /// 507: the server's disk is full; nothing of the request was kept.
    #[error("{0}")]
    InsufficientStorage(String),
    /// 503: something the request needs (an agent) is not reachable now.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    /// A 422 for one field.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Validation(vec![FieldError {
            field: field.into(),
            message: message.into(),
        }])
    }
}

impl From<store::Error> for ApiError {
    fn from(error: store::Error) -> Self {
        match error {
            store::Error::NotFound(message) => ApiError::NotFound(message),
            store::Error::Conflict(message) => ApiError::Conflict(message),
            store::Error::Invalid(fields) => ApiError::Validation(fields),
            store::Error::Forbidden(message) => ApiError::Forbidden(message),
            store::Error::Limited(message) => ApiError::RateLimited(message),
            store::Error::Internal(error) if storage_full(&error) => ApiError::InsufficientStorage(
                "the server's disk is full: nothing of this request was kept; retry once space is freed \
                 (the SDK keeps what it could not send and sends it then)"
                    .into(),
            ),
            store::Error::Internal(error) => ApiError::Internal(error),
        }
    }
}

/// Whether a storage failure is a full disk: SQLite's SQLITE_FULL, or a
/// file write that got ENOSPC.
fn storage_full(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        if let Some(sqlx::Error::Database(database)) = cause.downcast_ref::<sqlx::Error>() {
            // The extended result code; SQLITE_FULL (13) has no extended forms.
            return database
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .is_some_and(|code| code & 0xff == 13);
        }
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull)
    })
}

impl From<crate::identity::auth::TokenError> for ApiError {
    fn from(error: crate::identity::auth::TokenError) -> Self {
        match error {
            crate::identity::auth::TokenError::Invalid(reason) => ApiError::InvalidToken(reason),
            crate::identity::auth::TokenError::Store(error) => error.into(),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        store::Error::from(error).into()
    }
}

/// The answers every route that needs a token can give, for its OpenAPI
/// entry: `responses((status = 200, body = …), AuthErrors, …)`.
#[derive(utoipa::IntoResponses)]
pub enum AuthErrors {
    /// No token, or one that is unknown, expired or revoked.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the route's scope, or its user the role.
    #[response(status = 403)]
    Forbidden(ErrorBody),
}

/// The cause of a 500, kept out of the body and logged by [`log_internal_errors`].
#[derive(Clone)]
struct InternalCause(Arc<anyhow::Error>);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, codes::BAD_REQUEST),
            ApiError::Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, codes::VALIDATION_ERROR),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED),
            ApiError::InvalidToken(_) => (StatusCode::UNAUTHORIZED, codes::INVALID_TOKEN),
            ApiError::InsufficientScope(_) => (StatusCode::FORBIDDEN, codes::INSUFFICIENT_SCOPE),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, codes::FORBIDDEN),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, codes::NOT_FOUND),
            ApiError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, codes::RATE_LIMITED),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, codes::CONFLICT),
            ApiError::RecipeDrift(_) => (StatusCode::CONFLICT, codes::RECIPE_DRIFT),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, codes::PAYLOAD_TOO_LARGE),
            ApiError::RequestTimeout(_) => (StatusCode::REQUEST_TIMEOUT, codes::REQUEST_TIMEOUT),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE),
            ApiError::InsufficientStorage(_) => {
                (StatusCode::INSUFFICIENT_STORAGE, codes::INSUFFICIENT_STORAGE)
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL),
        };
        let message = match &self {
            ApiError::Validation(details) => match details.as_slice() {
                [one] => format!("{}: {}", one.field, one.message),
                _ => format!("{} fields are invalid", details.len()),
            },
            ApiError::Internal(_) => "internal error; the server log has the cause".to_string(),
            other => other.to_string(),
        };
        let details = match &self {
            ApiError::Validation(details) => details.clone(),
            _ => Vec::new(),
        };
        let body = ErrorBody {
            error: ErrorInfo {
                code: code.to_string(),
                message,
                details,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        // RFC 6750 §3: tell the client how to authenticate.
        let challenge = match &self {
            ApiError::Unauthorized => Some(format!("Bearer realm=\"{REALM}\"")),
            ApiError::InvalidToken(why) => Some(format!(
                "Bearer realm=\"{REALM}\", error=\"invalid_token\", error_description=\"{why}\""
            )),
            ApiError::InsufficientScope(scope) => Some(format!(
                "Bearer realm=\"{REALM}\", error=\"insufficient_scope\", scope=\"{scope}\""
            )),
            _ => None,
        };
        if let Some(challenge) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
        }
        if let ApiError::Internal(cause) = self {
            response.extensions_mut().insert(InternalCause(Arc::new(cause)));
        }
        response
    }
}

/// Logs the hidden cause of every 500 the API answers.
pub async fn log_internal_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    if let Some(InternalCause(cause)) = response.extensions().get::<InternalCause>() {
        tracing::error!(%method, %path, error = format!("{cause:#}"), "request failed");
    }
    response
}

/// A JSON body whose problems answer in the API's error shape: 400 for a body
/// that is not JSON, 422 naming the field for one that does not fit.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = is_json(&request);
        let bytes = read_body(request, state).await?;
        if !json {
            return Err(not_json());
        }
        parse_json(&bytes).map(ApiJson)
    }
}

/// Like [`ApiJson`], but an empty body means `T::default()`.
pub struct OptionalJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = is_json(&request);
        let bytes = read_body(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        if !json {
            return Err(not_json());
        }
        parse_json(&bytes).map(OptionalJson)
    }
}

fn is_json(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"))
}

fn not_json() -> ApiError {
    ApiError::BadRequest("expected a JSON body with `Content-Type: application/json`".into())
}

async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<axum::body::Bytes, ApiError> {
    axum::body::Bytes::from_request(request, state)
        .await
        .map_err(|rejection| match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::PayloadTooLarge("the request body is too large".into())
            }
            _ => body_read_failed(&rejection),
        })
}

/// The answer to a body that could not be read: 408 when it came too
/// slowly, else 400.
pub fn body_read_failed(error: &(dyn std::error::Error + 'static)) -> ApiError {
    if crate::http::body_timed_out(error) {
        ApiError::RequestTimeout(format!(
            "{error}; send the body faster (the limit is request_body_timeout_s)"
        ))
    } else {
        ApiError::BadRequest(format!("cannot read the request body: {error}"))
    }
}

/// Parses a JSON document, naming the offending field on a shape error.
/// A good document is parsed once, without tracking the path (a fifth of
/// the cost of a big metric batch); only a bad one is parsed again to name
/// where it went wrong.
pub fn parse_json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(json_error)?;
    deserializer
        .end()
        .map_err(|error| ApiError::BadRequest(format!("the body is not valid JSON: {error}")))?;
    Ok(value)
}

fn json_error(error: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = error.path().to_string();
    let inner = error.into_inner();
    if inner.is_syntax() || inner.is_eof() {
        return ApiError::BadRequest(format!("the body is not valid JSON: {inner}"));
    }
    let message = strip_position(&inner.to_string());
    // The path names unknown fields too (`resources.colour`); `.` is the body itself.
    let field = if path == "." { "body".to_string() } else { path };
    ApiError::field(field, message)
}

/// serde_json appends " at line 1 column 42"; the field path says more.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// A query string whose problems answer as a 422 naming the parameter.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(ApiQuery)
            .map_err(|error| {
                let path = error.path().to_string();
                let message = error.into_inner().to_string();
                let field = if path == "." { "query".to_string() } else { path };
                ApiError::field(field, message)
            })
    }
}
