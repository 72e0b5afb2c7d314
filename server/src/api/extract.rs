//! Who is calling, for each HTTP request: a bearer token (RFC 6750), or a
//! signed-in console session. Handlers declare the scope they need in their
//! signature with [`Authed`]. Without a bearer token, a signed-in console
//! session may GET what a `read` token of its user could; the console's
//! server functions act with the user's own rights through [`ConsoleAction`].

use crate::api::error::ApiError;
use crate::identity::access::Caller;
use crate::identity::auth::{authenticate, session_caller};
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method, header};
use gpuplane_api::auth::{Scope, SessionUser};
use std::marker::PhantomData;

/// A console session reads the API like a `read` token of its user: only
/// GET and HEAD, so a cookie never changes anything (the console changes
/// things through its CSRF-checked server functions).
fn session_reader(parts: &Parts) -> Option<Caller> {
    if !(parts.method == Method::GET || parts.method == Method::HEAD) {
        return None;
    }
    let user = parts.extensions.get::<SessionUser>()?;
    Some(session_caller(user, "console session", Scope::Read))
}

/// A console server function acting for its signed-in user. Only the
/// console backend puts this in a request's extensions, in process, after
/// the server function passed the session cookie and the Origin check; a
/// request from the network can never carry it.
#[derive(Debug, Clone)]
pub struct ConsoleAction(pub SessionUser);

/// The console changes things with the rights of its user: what a `write`
/// token of theirs could do, and no more (projects' roles and admin checks
/// still apply in each handler).
fn console_actor(parts: &Parts) -> Option<Caller> {
    let ConsoleAction(user) = parts.extensions.get::<ConsoleAction>()?;
    Some(session_caller(user, "console", Scope::Write))
}

/// The bearer token of a request, if it has one.
fn bearer_token(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The scopes a route accepts, named in the handler's signature.
pub trait Access: Send + Sync + 'static {
    /// The scope a refusal names in its `WWW-Authenticate` challenge.
    const NEEDED: Scope;
    fn allows(scope: Scope) -> bool {
        scope.grants(Self::NEEDED)
    }
}

/// Reading: `read` or `write` tokens.
pub struct Read;
impl Access for Read {
    const NEEDED: Scope = Scope::Read;
}

/// Changing things: `write` tokens.
pub struct Write;
impl Access for Write {
    const NEEDED: Scope = Scope::Write;
}

/// Metric ingest: `sdk` or `write` tokens.
pub struct Ingest;
impl Access for Ingest {
    const NEEDED: Scope = Scope::Sdk;
    fn allows(scope: Scope) -> bool {
        matches!(scope, Scope::Sdk | Scope::Write)
    }
}

/// MLflow's tracking API reads: `read` and `write` tokens, and `sdk` ones,
/// since the mlflow client reads the run it logs into (a job's token sees
/// only its run).
pub struct Tracking;
impl Access for Tracking {
    const NEEDED: Scope = Scope::Read;
    fn allows(scope: Scope) -> bool {
        matches!(scope, Scope::Read | Scope::Write | Scope::Sdk)
    }
}

/// Agent protocol: `agent` tokens.
pub struct Agent;
impl Access for Agent {
    const NEEDED: Scope = Scope::Agent;
}

/// Any valid token (whoami).
pub struct AnyScope;
impl Access for AnyScope {
    const NEEDED: Scope = Scope::Read;
    fn allows(_: Scope) -> bool {
        true
    }
}

/// A request with a valid bearer token whose scope `A` allows; anything else
/// is refused with 401 or 403 before the handler runs.
pub struct Authed<A: Access> {
    pub caller: Caller,
    access: PhantomData<A>,
}

impl<A: Access> FromRequestParts<AppState> for Authed<A> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let mut caller = match bearer_token(parts) {
            Some(token) => authenticate(&state.db, token).await?,
            None => console_actor(parts)
                .or_else(|| session_reader(parts))
                .ok_or(ApiError::Unauthorized)?,
        };
        caller.address = parts
            .extensions
            .get::<gpuplane_api::auth::ClientAddress>()
            .map(|address| address.0);
        if !A::allows(caller.scope) {
            return Err(ApiError::InsufficientScope(A::NEEDED));
        }
        Ok(Authed {
            caller,
            access: PhantomData,
        })
    }
}
