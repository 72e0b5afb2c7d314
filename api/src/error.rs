//! The one error body every API route answers with.

use serde::{Deserialize, Serialize};

/// `{"error": {"code": ..., "message": ..., "details": [...]}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorInfo {
    /// Machine-readable code, one of the `codes` constants.
    pub code: String,
    /// One sentence for a human.
    pub message: String,
    /// Per-field problems of a `validation_error`; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<FieldError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldError {
    /// Dotted path of the field, e.g. `resources.gpu`.
    pub field: String,
    pub message: String,
}

/// The values of [`ErrorInfo::code`].
pub mod codes {
    /// 400: the body is not JSON at all.
    pub const BAD_REQUEST: &str = "bad_request";
    /// 422: the body or query is well-formed but a field is wrong.
    pub const VALIDATION_ERROR: &str = "validation_error";
    /// 401: no bearer token was sent.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 401: the token is unknown, expired or revoked (RFC 6750).
    pub const INVALID_TOKEN: &str = "invalid_token";
    /// 403: the token is valid but lacks the scope (RFC 6750).
    pub const INSUFFICIENT_SCOPE: &str = "insufficient_scope";
    /// 403: signed in, but the role in the project is too low.
    pub const FORBIDDEN: &str = "forbidden";
    /// 429: too many attempts (sign-ins, user codes).
    pub const RATE_LIMITED: &str = "rate_limited";
    pub const NOT_FOUND: &str = "not_found";
    pub const CONFLICT: &str = "conflict";
    /// 409: the experiment's lock names an older recipe than the catalog's
    /// newest (`gpuctl recipe status DIR` shows what changed).
    pub const RECIPE_DRIFT: &str = "recipe_drift";
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    pub const REQUEST_TIMEOUT: &str = "request_timeout";
    pub const INSUFFICIENT_STORAGE: &str = "insufficient_storage";
    /// 503: an agent the request needs is offline.
    pub const UNAVAILABLE: &str = "unavailable";
    pub const INTERNAL: &str = "internal_error";
}

impl ErrorBody {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorInfo {
                code: code.to_string(),
                message: message.into(),
                details: Vec::new(),
            },
        }
    }
}
