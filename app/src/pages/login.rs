//! The sign-in page: a plain form (works without JavaScript) posting to `/login`.

use crate::view::query::raw_param;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_location, use_query_map};

#[component]
pub fn Login() -> impl IntoView {
    let query = use_query_map();
    let sso = Resource::new_blocking(|| (), |_| crate::api::sso_name());
    let location = use_location();
    let next = move || raw_param(&location.search.get(), "next").unwrap_or_else(|| "/".to_string());
    let message = move || {
        let query = query.read();
        match query.get("error").as_deref() {
            Some("invalid") => Some(("error", "Wrong user name or password.")),
            Some("locked") => Some((
                "error",
                "Too many failed sign-ins: wait 15 minutes and try again.",
            )),
            Some("server") => Some(("error", "The server could not start a session; try again.")),
            Some("sso") => Some(("error", "Single sign-on did not complete; try again.")),
            Some(_) => Some(("error", "Sign-in failed.")),
            None if query.get("signed_out").is_some() => Some(("info", "You are signed out.")),
            None => None,
        }
    };
    view! {
        <Title text="Sign in" />
        <section class="card narrow">
            <h1>"Sign in"</h1>
            {move || message().map(|(class, text)| view! { <p class=class role="alert" data-testid="login-message">{text}</p> })}
            <Suspense fallback=|| ()>
                {move || sso.get().and_then(|r| r.ok()).flatten().map(|name| {
                    let href = format!("/auth/oidc/start?next={}", crate::encode(&next()));
                    view! {
                        <a class="button" href=href rel="external" data-testid="sso">"Sign in with " {name}</a>
                        <p class="muted">"or with a local account:"</p>
                    }
                })}
            </Suspense>
            <form method="post" action="/login" class="stack">
                <input type="hidden" name="next" value=next />
                <label>"User name" <input name="username" autocomplete="username" required autofocus /></label>
                <label>"Password" <input name="password" type="password" autocomplete="current-password" required /></label>
                <button type="submit">"Sign in"</button>
            </form>
        </section>
    }
}
