//! Pieces shared by pages: formatting, ANSI text, the log viewer, tables,
//! live updates, links that keep the view in the URL, and `loaded`.

pub mod actions;
pub mod ansi;
pub mod chart;
pub mod format;
pub mod live;
pub mod logs;
pub mod query;
pub mod tables;

use leptos::prelude::*;

/// The message of a server function error, without the framework's prefix.
pub fn error_text(error: &ServerFnError) -> String {
    match error {
        ServerFnError::ServerError(message) => message.clone(),
        other => other.to_string(),
    }
}

/// `render(value)` once `resource` has loaded; its error in place if it failed.
pub fn loaded<T, V>(
    resource: Resource<Result<T, ServerFnError>>,
    render: impl Fn(T) -> V + Clone + Send + Sync + 'static,
) -> impl IntoView
where
    T: Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let render = render.clone();
                resource.get().map(move |result| match result {
                    Ok(value) => render(value).into_any(),
                    Err(error) => view! { <p class="error" role="alert">{error_text(&error)}</p> }.into_any(),
                })
            }}
        </Transition>
    }
}
