//! The dashboard: the cluster at a glance.

use crate::api::ServerHealth;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn Dashboard() -> impl IntoView {
    let check = ServerAction::<ServerHealth>::new();
    let result = move || match check.value().get() {
        None if check.pending().get() => "Asking the server…".to_string(),
        None => "Not checked yet.".to_string(),
        Some(Ok(health)) => format!("Server {} answered: {}.", health.version, health.status),
        Some(Err(error)) => format!("The server did not answer: {error}"),
    };
    view! {
        <Title text="Dashboard" />
        <h1>"Dashboard"</h1>
        <section class="card">
            <h2>"Server"</h2>
            <p>"Check that the console can reach the server's API."</p>
            <button type="button" data-testid="check-server" on:click=move |_| {
                check.dispatch(ServerHealth {});
            }>"Check server"</button>
            <p data-testid="server-check-result" role="status" aria-live="polite">{result}</p>
        </section>
    }
}
