//! Changes made from pages. Each is one call of the public API as the
//! signed-in user ([`ApiSend`]), so a page can do exactly what the API lets
//! that user do: the API checks roles, records the audit log and answers
//! the same messages as to `gpuctl`.

use crate::api::ApiSend;
use crate::view::error_text;
use leptos::prelude::*;

/// The changes of one page; its `version()` moves after each one, so
/// resources that read it load again.
pub type Changes = ServerAction<ApiSend>;

/// Sends `method path` with a JSON body (or none).
pub fn send(changes: Changes, method: &str, path: String, body: Option<serde_json::Value>) {
    changes.dispatch(ApiSend {
        method: method.to_string(),
        path,
        body: body.map(|body| body.to_string()).unwrap_or_default(),
    });
}

/// The last change's outcome: its error, or `done` (if any) once it succeeded.
#[component]
pub fn Outcome(changes: Changes, #[prop(into)] done: String) -> impl IntoView {
    move || {
        changes.value().get().map(|result| match result {
            Ok(_) if done.is_empty() => ().into_any(),
            Ok(_) => view! { <p class="info" role="status" data-testid="change-done">{done.clone()}</p> }
                .into_any(),
            Err(error) => {
                view! { <p class="error" role="alert" data-testid="change-error">{error_text(&error)}</p> }
                    .into_any()
            }
        })
    }
}

/// `KEY=VALUE` lines (blank lines skipped) as a map, or the first bad line.
pub fn key_values(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| match line.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok((key.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(format!("`{line}` is not KEY=VALUE")),
        })
        .collect()
}
