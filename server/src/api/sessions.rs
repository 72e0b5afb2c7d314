//! Console sessions: a cookie (HttpOnly, SameSite=Lax, Secure over HTTPS)
//! naming a session in SQLite, where only a hash of the id is stored. Sign-in
//! rotates the id; sign-out deletes the session; idle and absolute timeouts;
//! a disabled user's sessions stop working at once. The Origin check that
//! keeps other sites from posting forms sits in `api/origin.rs`.

use crate::identity::credentials::{hash_password, verify_password};
use crate::identity::session_store::HashedIdStore;
use crate::identity::users;
use crate::state::AppState;
use crate::store::time::now_ms;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use gpuplane_api::auth::{ClientAddress, SessionUser};
use serde::Deserialize;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, Session, SessionManagerLayer};

pub const COOKIE_NAME: &str = "gpuplane_session";
const USER_KEY: &str = "user_id";
const LOGIN_AT_KEY: &str = "login_at";

pub fn layer(state: &AppState) -> SessionManagerLayer<HashedIdStore> {
    let store = state.sessions.clone();
    let secure = state.config.public_url().starts_with("https://");
    let idle =
        tower_sessions::cookie::time::Duration::milliseconds(state.config.session_idle.as_millis() as i64);
    SessionManagerLayer::new(store)
        .with_name(COOKIE_NAME)
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(secure)
        .with_path("/")
        .with_expiry(Expiry::OnInactivity(idle))
}

/// Puts the signed-in [`SessionUser`] in the request's extensions, if the
/// session is valid: the user exists, is not disabled, and signed in less
/// than the absolute session lifetime ago. Invalid sessions are deleted.
pub async fn resolve_user(
    State(state): State<AppState>,
    session: Session,
    mut request: Request,
    next: Next,
) -> Response {
    if let Ok(Some(user_id)) = session.get::<String>(USER_KEY).await {
        let login_at: i64 = session.get(LOGIN_AT_KEY).await.ok().flatten().unwrap_or(0);
        let fresh = now_ms() - login_at < state.config.session_max.as_millis() as i64;
        let user = users::active(&state.db, &user_id).await.unwrap_or(None);
        match user {
            Some((id, name, is_admin)) if fresh => {
                request
                    .extensions_mut()
                    .insert(SessionUser { id, name, is_admin });
            }
            _ => {
                let _ = session.flush().await;
            }
        }
    }
    next.run(request).await
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    username: String,
    password: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /login`: a form with `username` and `password` (and `next`).
/// Success rotates the session id and redirects to `next`; failure
/// redirects back to the form saying why.
pub async fn login(
    State(state): State<AppState>,
    Extension(ClientAddress(client)): Extension<ClientAddress>,
    session: Session,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = safe_next(form.next.as_deref());
    let back = |error: &str| {
        Redirect::to(&format!("/login?error={error}&next={}", urlencode(&next))).into_response()
    };
    let account = format!("user:{}", form.username.to_lowercase());
    let ip = format!("ip:{client}");
    if state.sign_in_limiter.check(&account).await.is_err()
        || state.sign_in_limiter_ip.check(&ip).await.is_err()
    {
        tracing::warn!(user = form.username, ip = %client, "sign-in refused: too many failures");
        return back("locked");
    }
    let user = users::password_of(&state.db, &form.username)
        .await
        .unwrap_or(None);
    // Verify against a real hash even for unknown users and for accounts
    // without a password (SSO), so timing does not tell who exists; only a
    // stored hash of the account itself can ever match.
    let own_hash = user.as_ref().and_then(|(_, hash)| hash.clone());
    let matched = verify_password(&form.password, own_hash.as_deref().unwrap_or(&DUMMY_HASH));
    let valid = matched && own_hash.is_some();
    let Some((user_id, _)) = user.filter(|_| valid) else {
        state.sign_in_limiter.fail(&account).await;
        state.sign_in_limiter_ip.fail(&ip).await;
        tracing::info!(user = form.username, ip = %client, "sign-in failed");
        return back("invalid");
    };
    state.sign_in_limiter.reset(&account).await;
    if let Err(error) = start(&session, &user_id).await {
        tracing::error!(%error, "cannot start a session");
        return back("server");
    }
    tracing::info!(user = form.username, "signed in");
    Redirect::to(&next).into_response()
}

/// Starts a signed-in session for `user_id` under a new session id.
pub async fn start(session: &Session, user_id: &str) -> Result<(), tower_sessions::session::Error> {
    session.cycle_id().await?;
    session.insert(USER_KEY, user_id).await?;
    session.insert(LOGIN_AT_KEY, now_ms()).await?;
    Ok(())
}

static DUMMY_HASH: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| hash_password("not a real password").unwrap_or_default());

/// `POST /logout`: deletes the session on the server and the cookie.
pub async fn logout(session: Session) -> Response {
    let _ = session.flush().await;
    Redirect::to("/login?signed_out=1").into_response()
}

/// Only same-site absolute paths: `/jobs?status=QUEUED`, never
/// `//evil.example`, `https://…`, a backslash, whitespace or a control
/// character (browsers drop tabs and newlines, so `/\t/evil.example` would
/// become `//evil.example`). Anything else goes to `/`.
pub fn safe_next(next: Option<&str>) -> String {
    let same_site = |path: &str| {
        path.starts_with('/')
            && !path.starts_with("//")
            && path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
            && !path.split(['?', '#']).next().unwrap_or_default().contains(':')
    };
    match next {
        Some(path) if same_site(path) => path.to_string(),
        _ => "/".to_string(),
    }
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next(Some("/jobs?status=QUEUED")), "/jobs?status=QUEUED");
        assert_eq!(safe_next(Some("//evil.example/x")), "/");
        assert_eq!(safe_next(Some("https://evil.example")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
        assert_eq!(safe_next(Some("/runs/run_1#L20")), "/runs/run_1#L20");
        assert_eq!(safe_next(Some("/jobs?q=a:b")), "/jobs?q=a:b");
    }

    #[test]
    fn hostile_next_values_go_home() {
        let hostile = [
            "",
            "jobs",
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r/evil.example",
            "/ /evil.example",
            "/\u{0}/evil.example",
            "/\u{7f}/evil.example",
            "/\u{a0}/evil.example",
            "/\u{2028}/evil.example",
            "/\\evil.example",
            "\\\\evil.example",
            "/%5C/evil.example\\",
            "https://evil.example",
            "javascript:alert(1)",
            "/javascript:alert(1)",
            "data:text/html,x",
            " /jobs",
            "/jobs\t",
        ];
        for next in hostile {
            assert_eq!(safe_next(Some(next)), "/", "{next:?} must not be followed");
        }
    }
}
