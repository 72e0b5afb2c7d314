//! `/device`: where a user approves (or denies) a `gpuctl login --device-flow`
//! request, after checking which machine is asking.

use crate::api::{DecideDevice, device_request};
use crate::view::error_text;
use leptos::form::ActionForm;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn Device() -> impl IntoView {
    let query = use_query_map();
    let code = move || query.read().get("user_code").filter(|c| !c.trim().is_empty());
    let request = Resource::new(code, |code| async move {
        match code {
            Some(code) => Some(device_request(code).await),
            None => None,
        }
    });
    let decide = ServerAction::<DecideDevice>::new();
    view! {
        <Title text="Approve a device" />
        <section class="card narrow">
            <h1>"Sign in a terminal"</h1>
            <Suspense fallback=|| view! { <p>"Looking up the code…"</p> }>
                {move || match request.get().flatten() {
                    None => view! { <CodeForm error=None /> }.into_any(),
                    Some(Err(error)) => view! { <CodeForm error=Some(error_text(&error)) /> }.into_any(),
                    Some(Ok(request)) if request.status != "pending" => view! {
                        <p data-testid="device-result">"This request is already " {request.status} "."</p>
                    }.into_any(),
                    Some(Ok(request)) => {
                        let code = request.user_code.clone();
                        let elsewhere = request.approver_ip != request.client_ip;
                        view! {
                            <p>"A terminal asks to sign in as you. Check that it is yours:"</p>
                            <dl class="details" data-testid="device-request">
                                <dt>"Code"</dt><dd data-testid="device-code">{request.user_code}</dd>
                                <dt>"Program (reported by the terminal)"</dt><dd>{request.client_name}</dd>
                                <dt>"Host (reported by the terminal)"</dt><dd data-testid="device-host">{request.client_host}</dd>
                                <dt>"Address (seen by the server)"</dt><dd data-testid="device-address">{request.client_ip.clone()}</dd>
                                <dt>"Asked at"</dt><dd>{request.requested_at}</dd>
                            </dl>
                            {elsewhere.then(|| view! {
                                <p class="warning" role="alert" data-testid="device-elsewhere">
                                    "This request came from " {request.client_ip} ", not from this browser's address ("
                                    {request.approver_ip} "). Approve only if you started "
                                    <code>"gpuctl login"</code> " on that machine yourself: someone may have sent you this code."
                                </p>
                            })}
                            {move || match decide.value().get() {
                                Some(Ok(true)) => view! { <p class="info" data-testid="device-result">"Approved: the terminal is signed in."</p> }.into_any(),
                                Some(Ok(false)) => view! { <p class="info" data-testid="device-result">"Denied: the terminal was refused."</p> }.into_any(),
                                Some(Err(error)) => view! { <p class="error" data-testid="device-result">{error_text(&error)}</p> }.into_any(),
                                None => {
                                    let code = code.clone();
                                    view! {
                                        <ActionForm action=decide attr:class="buttons">
                                            <input type="hidden" name="user_code" value=code />
                                            <button type="submit" name="approve" value="true" data-testid="approve">"Approve"</button>
                                            <button type="submit" name="approve" value="false" class="secondary" data-testid="deny">"Deny"</button>
                                        </ActionForm>
                                    }.into_any()
                                }
                            }}
                        }.into_any()
                    }
                }}
            </Suspense>
        </section>
    }
}

/// The form asking for the code the terminal shows.
#[component]
fn CodeForm(error: Option<String>) -> impl IntoView {
    view! {
        {error.map(|e| view! { <p class="error" role="alert" data-testid="device-error">{e}</p> })}
        <form method="get" action="/device" class="stack">
            <label>"Code shown in your terminal"
                <input name="user_code" placeholder="XXXX-XXXX" autocomplete="off" autocapitalize="characters" required autofocus />
            </label>
            <button type="submit">"Continue"</button>
        </form>
    }
}
