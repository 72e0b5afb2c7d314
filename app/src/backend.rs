//! What the console needs from the server, as a trait the server implements
//! and provides as context; the app never touches the database itself.

use gpuplane_api::health::Health;
use leptos::prelude::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub trait ConsoleBackend: Send + Sync + 'static {
    fn health(&self) -> BoxFuture<'_, Result<Health, String>>;
}

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
