//! The manual at `/docs/`: the mdBook under `docs/`, built by `cargo xtask
//! site` into the site's `docs/` folder. A release binary carries it inside
//! (`console::EMBEDDED`); other builds serve the `docs` folder of their site
//! root. Its pages are static files from the repository, with no user data
//! and no session: their Content-Security-Policy lets mdBook's inline
//! scripts run, under `/docs/` only.

use crate::console::{EMBEDDED, content_type};
use axum::Router;
use axum::body::Body;
use axum::extract::Path as UrlPath;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tower_http::set_header::SetResponseHeaderLayer;

/// `/docs/…` from the binary, or from the site root's `docs` folder.
pub fn router<S>(site_root: &Path) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let folder = Arc::new(site_root.join("docs"));
    let index = folder.clone();
    Router::new()
        // Its pages link relatively: `/docs` must read as the folder.
        .route("/docs", get(|| async { Redirect::permanent("/docs/") }))
        .route("/docs/", get(move || async move { file(&index, "").await }))
        .route(
            "/docs/{*path}",
            get(move |UrlPath(path): UrlPath<String>| async move { file(&folder, &path).await }),
        )
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; \
                 img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; \
                 form-action 'none'; frame-ancestors 'none'",
            ),
        ))
}

/// One page or file of the manual (a folder's is its `index.html`): from
/// the binary when it carries the manual, else from `folder`.
async fn file(folder: &Path, path: &str) -> Response {
    let path = if path.is_empty() || path.ends_with('/') {
        format!("{path}index.html")
    } else {
        path.to_string()
    };
    let body = if compiled_in().next().is_some() {
        compiled_in()
            .find(|(name, _)| *name == path)
            .map(|(_, body)| Body::from(body))
    } else {
        match inside(folder, &path) {
            Some(file) => tokio::fs::read(file).await.ok().map(Body::from),
            None => None,
        }
    };
    match body {
        Some(body) => ([(header::CONTENT_TYPE, content_type(&path))], body).into_response(),
        None => (StatusCode::NOT_FOUND, "no such page in the manual").into_response(),
    }
}

/// The manual's files compiled into this binary, as (path under `docs/`,
/// contents): none outside a release build.
fn compiled_in() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    EMBEDDED.iter().filter_map(strip_folder)
}

fn strip_folder(&(name, body): &(&'static str, &'static [u8])) -> Option<(&'static str, &'static [u8])> {
    Some((name.strip_prefix("docs/")?, body))
}

/// `path` under `folder`, if it names only plain parts (no `..`, no root).
fn inside(folder: &Path, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    relative
        .components()
        .all(|part| matches!(part, Component::Normal(_)))
        .then(|| folder.join(relative))
}
