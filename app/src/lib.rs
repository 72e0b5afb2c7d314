//! The GPUPlane console: the HTML shell, the routes and their pages. Rendered
//! on the server (feature `ssr`) and hydrated in the browser (feature `hydrate`).

pub mod api;
#[cfg(feature = "ssr")]
pub mod backend;
mod pages;
pub mod view;

use gpuplane_api::auth::SessionUser;
use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::components::{A, Route, Router, Routes};
use leptos_router::hooks::use_location;
use leptos_router::{SsrMode, StaticSegment, path};

/// The document around every page; the server renders it, the browser hydrates `<body>`.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The signed-in user, loaded once per page (during SSR, then sent along for hydration).
#[derive(Clone, Copy)]
pub struct CurrentUser(pub Resource<Result<Option<SessionUser>, ServerFnError>>);

impl CurrentUser {
    /// Whether the user (once loaded) is a server admin; tracked.
    pub fn is_admin(&self) -> bool {
        self.0
            .get()
            .and_then(|user| user.ok().flatten())
            .is_some_and(|user| user.is_admin)
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let user = CurrentUser(Resource::new_blocking(|| (), |_| api::current_user()));
    provide_context(user);
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
                    <A href="/jobs">"Jobs"</A>
                    <A href="/runs">"Runs"</A>
                    <A href="/sweeps">"Sweeps"</A>
                    <A href="/recipes">"Recipes"</A>
                    <A href="/nodes">"Nodes"</A>
                    <A href="/events">"Events"</A>
                    <A href="/alerts">"Alerts"</A>
                    <A href="/projects">"Projects"</A>
                    <A href="/usage">"Usage"</A>
                    <A href="/tokens">"Tokens"</A>
                    <Suspense fallback=|| ()>
                        {move || {
                            user.is_admin().then(|| view! { <A href="/admin">"Admin"</A> })
                        }}
                    </Suspense>
                    <a href=gpuplane_api::paths::openapi()>"API"</a>
                    // The manual (`server/src/manual.rs`): a whole page, not a console route.
                    <a href="/docs/" rel="external">"Docs"</a>
                </nav>
                <Suspense fallback=|| ()>
                    {move || {
                        user.0.get().and_then(|r| r.ok()).flatten().map(|user| {
                            view! {
                                <form class="signout" method="post" action="/logout">
                                    <span data-testid="signed-in-as">{user.name}</span>
                                    <button type="submit" class="link">"Sign out"</button>
                                </form>
                            }
                        })
                    }}
                </Suspense>
            </header>
            <main>
                <Routes fallback=pages::NotFound>
                    // Async: a page that may redirect to /login renders fully before the first byte.
                    <Route path=StaticSegment("") ssr=SsrMode::Async view=|| view! { <Protected><pages::Dashboard /></Protected> } />
                    <Route path=path!("/login") view=pages::Login />
                    <Route path=path!("/jobs") ssr=SsrMode::Async view=|| view! { <Protected><pages::Jobs /></Protected> } />
                    <Route path=path!("/jobs/:job_id") ssr=SsrMode::Async view=|| view! { <Protected><pages::JobDetail /></Protected> } />
                    <Route path=path!("/runs") ssr=SsrMode::Async view=|| view! { <Protected><pages::Runs /></Protected> } />
                    <Route path=path!("/runs/:run_id") ssr=SsrMode::Async view=|| view! { <Protected><pages::RunPage /></Protected> } />
                    <Route path=path!("/nodes") ssr=SsrMode::Async view=|| view! { <Protected><pages::Nodes /></Protected> } />
                    <Route path=path!("/events") ssr=SsrMode::Async view=|| view! { <Protected><pages::Events /></Protected> } />
                    <Route path=path!("/alerts") ssr=SsrMode::Async view=|| view! { <Protected><pages::Alerts /></Protected> } />
                    <Route path=path!("/projects") ssr=SsrMode::Async view=|| view! { <Protected><pages::Projects /></Protected> } />
                    <Route path=path!("/usage") ssr=SsrMode::Async view=|| view! { <Protected><pages::Usage /></Protected> } />
                    <Route path=path!("/tokens") ssr=SsrMode::Async view=|| view! { <Protected><pages::Tokens /></Protected> } />
                    <Route path=path!("/sweeps") ssr=SsrMode::Async view=|| view! { <Protected><pages::Sweeps /></Protected> } />
                    <Route path=path!("/sweeps/:sweep_id") ssr=SsrMode::Async view=|| view! { <Protected><pages::SweepPage /></Protected> } />
                    <Route path=path!("/recipes") ssr=SsrMode::Async view=|| view! { <Protected><pages::Recipes /></Protected> } />
                    <Route path=path!("/hf") ssr=SsrMode::Async view=|| view! { <Protected><pages::HuggingFace /></Protected> } />
                    <Route path=path!("/device") ssr=SsrMode::Async view=|| view! { <Protected><pages::Device /></Protected> } />
                    <Route path=path!("/admin") ssr=SsrMode::Async view=|| view! { <Protected><pages::Admin /></Protected> } />
                    <Route path=path!("/admin/audit") ssr=SsrMode::Async view=|| view! { <Protected><pages::Audit /></Protected> } />
                </Routes>
            </main>
            <footer class="footer">"GPUPlane " {gpuplane_api::VERSION}</footer>
        </Router>
    }
}

/// Shows its children to signed-in users; sends everyone else to the
/// sign-in page, coming back here afterwards.
///
/// The children are made once, outside the `Suspense` that waits for the
/// user: the server renders a `Suspense`'s content more than once, and a
/// page made inside it would load its data each time. A signed-out visitor
/// gets a 302 before any of it is sent (and the page's own calls refuse).
#[component]
fn Protected(children: Children) -> impl IntoView {
    let user = expect_context::<CurrentUser>();
    let location = use_location();
    let query = leptos_router::hooks::use_query_map();
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let signed_in = user.0.get().map(|r| matches!(r, Ok(Some(_))));
                match signed_in {
                    Some(true) => None,
                    Some(false) => {
                        // Rebuilt from the parsed query, every value percent-encoded again:
                        // a value with a space or `&` comes back whole after sign-in.
                        let here = view::query::link(&location.pathname.get_untracked(), &query.get_untracked(), &[]);
                        let target = format!("/login?next={}", encode(&here));
                        redirect_to(&target);
                        Some(view! { <p>"Sign in to see this page: " <a href=target>"sign in"</a></p> }.into_any())
                    }
                    None => None,
                }
            }}
        </Suspense>
        {children()}
    }
}

/// Percent-encodes a query value.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A redirect: a 302 while rendering a page on the server (whatever the
/// request's `Accept`), a navigation in the browser.
fn redirect_to(target: &str) {
    #[cfg(feature = "ssr")]
    if let (Some(response), Ok(location)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        http::HeaderValue::from_str(target),
    ) {
        response.set_status(http::StatusCode::FOUND);
        response.insert_header(http::header::LOCATION, location);
    }
    #[cfg(not(feature = "ssr"))]
    {
        let navigate = leptos_router::hooks::use_navigate();
        navigate(target, Default::default());
    }
}
