//! The GPUPlane console: the HTML shell, the routes and their pages. Rendered
//! on the server (feature `ssr`) and hydrated in the browser (feature `hydrate`).

pub mod api;
#[cfg(feature = "ssr")]
pub mod backend;
mod pages;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::StaticSegment;
use leptos_router::components::{A, Route, Router, Routes};

/// The document around every page; the server renders it, the browser hydrates `<body>`.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Effects run only in the browser: this marks the page as hydrated, for
    // people reading the DOM and for tests that must not click too early.
    Effect::new(move |_| {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });
    view! {
        <Stylesheet id="gpuplane" href="/pkg/gpuplane.css" />
        <Title formatter=|page: String| format!("{page} · GPUPlane") />
        <Router>
            <header class="topbar">
                <A href="/" attr:class="brand">"GPUPlane"</A>
                <nav aria-label="Main">
                    <A href="/">"Dashboard"</A>
                    <a href="/api/v1/openapi.json">"API"</a>
                </nav>
            </header>
            <main>
                <Routes fallback=pages::NotFound>
                    <Route path=StaticSegment("") view=pages::Dashboard />
                </Routes>
            </main>
            <footer class="footer">"GPUPlane " {gpuplane_api::VERSION}</footer>
        </Router>
    }
}
