//! [`TestServer`]: a real server over its own temporary data directory, and
//! an HTTP client that speaks the API. Every `path` given to [`TestServer::call`],
//! [`TestServer::get`] and [`TestServer::post`] is under `/api/v1`
//! (`/jobs`, not `/api/v1/jobs`); [`TestServer::url`] is for the server's
//! other routes (`/login`, `/oauth/…`, console pages).

use crate::{start_server_with, user_token};
use gpuplane_api::auth::Scope;
use gpuplane_api::paths::PREFIX;
use gpuplane_server::RunningServer;
use gpuplane_server::config::ServerConfig;
use gpuplane_server::store::Db;
use reqwest::StatusCode;
use serde_json::Value;

pub struct TestServer {
    pub server: RunningServer,
    /// Follows no redirects, so tests see them.
    pub http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl TestServer {
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    /// Like [`TestServer::start`], with the test's changes to the configuration.
    pub async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let server = start_server_with(dir.path(), configure).await;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        TestServer {
            server,
            http,
            _dir: dir,
        }
    }

    /// Stops the server and closes its database. The data directory stays
    /// until the returned guard drops, for tests that read its files.
    pub async fn stop(self) -> tempfile::TempDir {
        let db = self.server.state.db.clone();
        self.server.stop().await.expect("the server stops");
        db.close().await;
        self._dir
    }

    pub fn db(&self) -> &Db {
        &self.server.state.db
    }

    /// Where the server keeps its database and key.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.server.state.config.data_dir
    }

    /// A new user (admin when asked) and a token of `scope` for it.
    pub async fn user(&self, name: &str, scope: Scope, is_admin: bool) -> String {
        user_token(self.db(), name, scope, is_admin).await
    }

    /// The URL of one of the server's own routes (not under `/api/v1`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url)
    }

    /// The URL of an API path.
    pub fn api_url(&self, path: &str) -> String {
        format!("{}{PREFIX}{path}", self.server.url)
    }

    /// `method` on an API path with a bearer token and an optional JSON
    /// body: the status and the JSON answer (`null` when there is none).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method.parse().expect("an HTTP method"), self.api_url(path))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        answer(request.send().await.expect("the server answers")).await
    }

    pub async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        self.call("GET", path, token, None).await
    }

    /// A GET that must answer 200: its body as text (an SVG, a CSV).
    pub async fn get_text(&self, path: &str, token: &str) -> String {
        let response = self
            .http
            .get(self.api_url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("the server answers");
        let status = response.status();
        let text = response.text().await.expect("a text body");
        assert_eq!(status, StatusCode::OK, "GET {path}: {text}");
        text
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", path, token, Some(body)).await
    }

    /// Sets `project`'s node policy (`{"labels": …, "runners": […]}`) as
    /// the server admin `token`; panics unless it is accepted.
    pub async fn set_node_policy(&self, token: &str, project: &str, policy: Value) {
        let path = format!("/projects/{project}/node-policy");
        let (status, body) = self.call("PUT", &path, token, Some(policy)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    /// A new run in the caller's default project: its id.
    pub async fn create_run(&self, token: &str, name: &str) -> String {
        let (status, run) = self.post("/runs", token, serde_json::json!({"name": name})).await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        run["id"].as_str().expect("a run id").to_string()
    }

    /// Posts a batch of metric points to a run: the status and answer.
    pub async fn ingest(&self, token: &str, run: &str, batch: Value) -> (StatusCode, Value) {
        self.post(&format!("/runs/{run}/metrics"), token, batch).await
    }
}

/// The fields a 422 body names, in order.
pub fn error_fields(body: &Value) -> Vec<String> {
    body["error"]["details"]
        .as_array()
        .map(|details| {
            details
                .iter()
                .filter_map(|detail| detail["field"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The status and JSON body of a response (`null` when it is not JSON).
pub async fn answer(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}
