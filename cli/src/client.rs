//! The HTTP client: resolves server and token, and turns every failure into
//! a [`CliError`] carrying the API's error body and an exit class.

use crate::credentials;
use crate::exit::Failure;
use gpuplane_api::error::{ErrorBody, ErrorInfo};
use serde::de::DeserializeOwned;
use std::time::Duration;

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8600";

/// A failed command: the error body to show and the exit class.
#[derive(Debug)]
pub struct CliError {
    pub failure: Failure,
    pub error: ErrorInfo,
}

impl CliError {
    pub fn new(failure: Failure, code: &str, message: impl Into<String>) -> CliError {
        CliError {
            failure,
            error: ErrorInfo {
                code: code.to_string(),
                message: message.into(),
                details: Vec::new(),
            },
        }
    }
}

impl From<anyhow::Error> for CliError {
    fn from(error: anyhow::Error) -> Self {
        CliError::new(Failure::Other, "cli_error", format!("{error:#}"))
    }
}

pub struct Client {
    http: reqwest::Client,
    pub server: String,
    token: Option<String>,
}

impl Client {
    /// Flags and `GPUCTL_*` variables first, then `~/.gpuctl/credentials.json`, then the default server.
    pub fn new(server: Option<String>, token: Option<String>) -> Result<Client, CliError> {
        let stored = credentials::load();
        let server = server
            .or_else(|| stored.as_ref().map(|c| c.server.clone()))
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        let token = token.or_else(|| stored.map(|c| c.token));
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("gpuctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::from(anyhow::Error::from(e)))?;
        Ok(Client {
            http,
            server: server.trim_end_matches('/').to_string(),
            token,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1/{path}", self.server)
    }

    pub async fn get<R: DeserializeOwned>(&self, path: &str) -> Result<R, CliError> {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn delete<R: DeserializeOwned>(&self, path: &str) -> Result<R, CliError> {
        self.send(self.http.delete(self.url(path))).await
    }

    /// A GET of a path on the server outside the API (`/.well-known/...`).
    pub async fn get_absolute<R: DeserializeOwned>(&self, path: &str) -> Result<R, CliError> {
        self.send(self.http.get(format!("{}{path}", self.server))).await
    }

    pub async fn put<B: serde::Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, CliError> {
        self.send(self.http.put(self.url(path)).json(body)).await
    }

    pub async fn patch<B: serde::Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, CliError> {
        self.send(self.http.patch(self.url(path)).json(body)).await
    }

    pub async fn post<B: serde::Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, CliError> {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    /// A streaming GET (plain text or server-sent events) without the overall
    /// timeout; error statuses become a [`CliError`] like everywhere else.
    pub async fn open_stream(
        &self,
        path: &str,
        last_event_id: Option<&str>,
    ) -> Result<reqwest::Response, CliError> {
        let mut request = self
            .http
            .get(self.url(path))
            .timeout(std::time::Duration::from_secs(365 * 24 * 3600));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.map_err(|error| self.unreachable(&error))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let bytes = response.bytes().await.unwrap_or_default();
        Err(self.error_from(status, &bytes))
    }

    /// POSTs one MCP message to the server's `/mcp` with this client's token
    /// and `headers`; the answer is the caller's to read, whatever its status.
    pub async fn post_mcp(
        &self,
        message: String,
        headers: &[(&str, String)],
    ) -> Result<reqwest::Response, CliError> {
        let mut request = self
            .http
            .post(format!("{}/mcp", self.server))
            .timeout(std::time::Duration::from_secs(3600))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(message);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.send().await.map_err(|error| self.unreachable(&error))
    }

    /// The token requests carry, for a caller that talks to another of the
    /// server's APIs (`gpuctl import mlflow`: its MLflow API).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    fn unreachable(&self, error: &reqwest::Error) -> CliError {
        CliError::new(
            Failure::Unreachable,
            "unreachable",
            format!(
                "cannot reach the GPUPlane server at {}: {}",
                self.server,
                root_cause(error)
            ),
        )
    }

    fn error_from(&self, status: reqwest::StatusCode, bytes: &[u8]) -> CliError {
        let mut error = match serde_json::from_slice::<ErrorBody>(bytes) {
            Ok(body) => body.error,
            Err(_) => ErrorInfo {
                code: "http_error".into(),
                message: format!("the server answered {status}"),
                details: Vec::new(),
            },
        };
        if status.as_u16() == 401 && self.token.is_none() {
            error.message = "not signed in: run `gpuctl login`, or set GPUCTL_TOKEN".into();
        }
        let failure = match error.code.as_str() {
            gpuplane_api::error::codes::RECIPE_DRIFT => Failure::Drift,
            _ => Failure::from_status(status.as_u16()),
        };
        CliError { failure, error }
    }

    async fn send<R: DeserializeOwned>(&self, request: reqwest::RequestBuilder) -> Result<R, CliError> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().await.map_err(|error| self.unreachable(&error))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|error| {
            CliError::new(
                Failure::Unreachable,
                "unreachable",
                format!("the answer was cut off: {error}"),
            )
        })?;
        if status.is_success() {
            let text: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
            return serde_json::from_slice(text).map_err(|error| {
                CliError::new(
                    Failure::Other,
                    "bad_answer",
                    format!("cannot read the server's answer: {error}"),
                )
            });
        }
        Err(self.error_from(status, &bytes))
    }
}

/// The innermost cause, e.g. "Connection refused (os error 111)".
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
