//! What the console needs from the server, as a trait the server implements
//! and provides as context; the app never touches the database itself.

use gpuplane_api::auth::{CreateToken, CreatedToken, DeviceRequest, SessionUser, TokenInfo};
use leptos::prelude::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Errors are messages for the person at the console.
pub trait ConsoleBackend: Send + Sync + 'static {
    /// The name of the SSO provider, when single sign-on is configured.
    fn sso_name(&self) -> Option<String>;
    /// The URL users and assistants reach this server at.
    fn public_url(&self) -> String;
    /// The device sign-in a user code names; wrong codes count against `limiter_key`.
    /// The pending request a user code names, as `user_id` at `approver_ip` sees it.
    fn device_lookup(
        &self,
        user_code: String,
        user_id: String,
        approver_ip: String,
    ) -> BoxFuture<'_, Result<DeviceRequest, String>>;
    /// Approves or denies; rate limited per user and address like lookups.
    fn device_decide(
        &self,
        user_code: String,
        user_id: String,
        approver_ip: String,
        approve: bool,
    ) -> BoxFuture<'_, Result<(), String>>;
    fn tokens(&self, user: SessionUser) -> BoxFuture<'_, Result<Vec<TokenInfo>, String>>;
    fn create_token(
        &self,
        user: SessionUser,
        request: CreateToken,
    ) -> BoxFuture<'_, Result<CreatedToken, String>>;
    fn revoke_token(&self, user: SessionUser, token_id: String) -> BoxFuture<'_, Result<(), String>>;
    /// Sends `method path` with a JSON `body` to the public API as this
    /// user, with their own rights (what a `write` token of theirs could
    /// do), from the client at `address` (for the audit log): the console
    /// changes things exactly as the API does. Answers the response body.
    fn api_send(
        &self,
        user: SessionUser,
        method: String,
        path: String,
        body: String,
        address: String,
    ) -> BoxFuture<'_, Result<String, Refused>>;
    /// The body of `GET path` on the public API (`/api/v1/...`), read as
    /// this user with a read scope: pages show what the API shows. An answer
    /// longer than `max_bytes` is an error.
    fn api_get(
        &self,
        user: SessionUser,
        path: String,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<String, Refused>>;
}

/// Why a change was not made: the HTTP status the API (or the console)
/// answered, and its message with field details (also one by one, for
/// forms that show each beside its field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub message: String,
    pub details: Vec<gpuplane_api::error::FieldError>,
}

/// The most bytes one console read returns, one path or many together.
pub const MAX_READ_BYTES: usize = 32 * 1024 * 1024;
/// The most paths one batched console read may name.
pub const MAX_READ_PATHS: usize = 64;

/// The backend as the server provides it in every request's context.
#[derive(Clone)]
pub struct Backend(pub Arc<dyn ConsoleBackend>);

impl std::ops::Deref for Backend {
    type Target = dyn ConsoleBackend;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// The backend of the current request.
pub fn use_backend() -> Result<Backend, ServerFnError> {
    use_context::<Backend>().ok_or_else(|| ServerFnError::new("the console backend is not configured"))
}
