//! The page for unknown paths.

use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <Title text="Not found" />
        <h1>"Page not found"</h1>
        <p>"Nothing lives at this address. " <a href="/">"Go to the dashboard"</a> "."</p>
    }
}
