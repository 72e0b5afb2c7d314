//! A stand-in for the Hugging Face Hub, started by a test on a free port:
//! it answers the requests GPUPlane makes as the Hub does, for the repos
//! the test declares. `GET /api/{models,datasets}/ORG/NAME`: 200 with
//! `gated` (`false` or `"manual"`) and `siblings`, even for a gated repo;
//! an unknown or private repo is 401 without a token and 404 with one
//! (`X-Error-Code: RepoNotFound`). `HEAD …/resolve/main/FILE`: a gated
//! repo's file is 401 without a token and 403 with one not granted
//! (`X-Error-Code: GatedRepo`). `GET /api/whoami-v2`: the token's account,
//! or 401.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A repo on the stand-in Hub.
#[derive(Debug, Clone)]
pub struct Repo {
    /// `model` or `dataset`.
    pub kind: &'static str,
    pub id: String,
    pub gated: bool,
    pub private: bool,
    /// Tokens whose accounts may download it (gated or private repos).
    pub granted: Vec<String>,
}

impl Repo {
    pub fn open(kind: &'static str, id: &str) -> Repo {
        Repo {
            kind,
            id: id.into(),
            gated: false,
            private: false,
            granted: Vec::new(),
        }
    }

    pub fn gated(kind: &'static str, id: &str, granted: &[&str]) -> Repo {
        Repo {
            gated: true,
            granted: granted.iter().map(|t| t.to_string()).collect(),
            ..Repo::open(kind, id)
        }
    }
}

struct Hub {
    repos: Vec<Repo>,
    /// Token → account name.
    accounts: Vec<(String, String)>,
    requests: AtomicUsize,
}

/// The running stand-in; stops when dropped.
pub struct HubStandIn {
    pub url: String,
    hub: Arc<Hub>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HubStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HubStandIn {
    /// Serves `repos`; `accounts` are (token, account name).
    pub async fn start(repos: Vec<Repo>, accounts: &[(&str, &str)]) -> HubStandIn {
        let hub = Arc::new(Hub {
            repos,
            accounts: accounts
                .iter()
                .map(|(t, n)| (t.to_string(), n.to_string()))
                .collect(),
            requests: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/api/whoami-v2", get(whoami))
            .route("/api/models/{org}/{name}", get(model_info))
            .route("/api/datasets/{org}/{name}", get(dataset_info))
            .route(
                "/{org}/{name}/resolve/main/{*file}",
                get(model_file).head(model_file),
            )
            .route(
                "/datasets/{org}/{name}/resolve/main/{*file}",
                get(dataset_file).head(dataset_file),
            )
            .with_state(hub.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        HubStandIn { url, hub, task }
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.hub.requests.load(Ordering::Relaxed)
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(String::from)
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, [("x-error-code", code)], Json(json!({"error": message}))).into_response()
}

async fn whoami(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Response {
    hub.requests.fetch_add(1, Ordering::Relaxed);
    let token = bearer(&headers);
    match hub.accounts.iter().find(|(t, _)| Some(t) == token.as_ref()) {
        Some((_, name)) => Json(json!({"type": "user", "name": name})).into_response(),
        None => error(
            StatusCode::UNAUTHORIZED,
            "InvalidCredentials",
            "Invalid credentials in Authorization header",
        ),
    }
}

/// The repo, if the token may see it (a private repo only for granted tokens).
fn visible<'a>(hub: &'a Hub, kind: &str, id: &str, token: Option<&String>) -> Option<&'a Repo> {
    hub.repos
        .iter()
        .find(|repo| repo.kind == kind && repo.id == id)
        .filter(|repo| !repo.private || token.is_some_and(|t| repo.granted.contains(t)))
}

fn not_found(token: Option<&String>) -> Response {
    let status = if token.is_some() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::UNAUTHORIZED
    };
    error(status, "RepoNotFound", "Repository Not Found")
}

fn info(hub: &Hub, kind: &str, id: String, headers: &HeaderMap) -> Response {
    hub.requests.fetch_add(1, Ordering::Relaxed);
    let token = bearer(headers);
    match visible(hub, kind, &id, token.as_ref()) {
        Some(repo) => Json(json!({
            "id": repo.id,
            "private": repo.private,
            "gated": if repo.gated { json!("manual") } else { json!(false) },
            "siblings": [{"rfilename": ".gitattributes"}, {"rfilename": "README.md"}, {"rfilename": "config.json"}],
        }))
        .into_response(),
        None => not_found(token.as_ref()),
    }
}

fn file(hub: &Hub, kind: &str, id: String, headers: &HeaderMap) -> Response {
    hub.requests.fetch_add(1, Ordering::Relaxed);
    let token = bearer(headers);
    let Some(repo) = visible(hub, kind, &id, token.as_ref()) else {
        return not_found(token.as_ref());
    };
    if repo.gated && !token.as_ref().is_some_and(|t| repo.granted.contains(t)) {
        let status = if token.is_some() {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::UNAUTHORIZED
        };
        return error(
            status,
            "GatedRepo",
            &format!(
                "Access to model {id} is restricted. You must have access to it and be authenticated to access it."
            ),
        );
    }
    (StatusCode::OK, "{}").into_response()
}

async fn model_info(
    State(hub): State<Arc<Hub>>,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    info(&hub, "model", format!("{org}/{name}"), &headers)
}

async fn dataset_info(
    State(hub): State<Arc<Hub>>,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    info(&hub, "dataset", format!("{org}/{name}"), &headers)
}

async fn model_file(
    State(hub): State<Arc<Hub>>,
    Path((org, name, _file)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    file(&hub, "model", format!("{org}/{name}"), &headers)
}

async fn dataset_file(
    State(hub): State<Arc<Hub>>,
    Path((org, name, _file)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    file(&hub, "dataset", format!("{org}/{name}"), &headers)
}
