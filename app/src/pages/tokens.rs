//! `/tokens`: the signed-in user's API tokens: create (secret shown once),
//! a token for an AI assistant with the configuration to paste, list with
//! last use, revoke.

use crate::api::{CreateAssistantToken, CreateMyToken, RevokeMyToken, my_tokens};
use crate::view::error_text;
use leptos::form::ActionForm;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn Tokens() -> impl IntoView {
    let create = ServerAction::<CreateMyToken>::new();
    let revoke = ServerAction::<RevokeMyToken>::new();
    let assistant = ServerAction::<CreateAssistantToken>::new();
    let tokens = Resource::new(
        move || {
            (
                create.version().get(),
                revoke.version().get(),
                assistant.version().get(),
            )
        },
        |_| my_tokens(),
    );
    view! {
        <Title text="Tokens" />
        <h1>"API tokens"</h1>
        <section class="card">
            <h2>"New token"</h2>
            <ActionForm action=create attr:class="inline-form">
                <label>"Name" <input name="name" required placeholder="ci" /></label>
                <label>"Scope"
                    <select name="scope">
                        <option value="read">"read"</option>
                        <option value="write">"write"</option>
                        <option value="sdk">"sdk (logs a run's metrics only)"</option>
                        <option value="metrics">"metrics (Prometheus scrape; server admins)"</option>
                    </select>
                </label>
                <label>"Project (optional)" <input name="project" placeholder="all my projects" /></label>
                <label>"Expires in days (optional)" <input name="expires_in_days" inputmode="numeric" /></label>
                <button type="submit">"Create"</button>
            </ActionForm>
            {move || create.value().get().map(|result| match result {
                Ok(created) => view! {
                    <p class="info">"Copy it now: it is shown only this once."</p>
                    <code class="secret" data-testid="new-token">{created.secret}</code>
                }.into_any(),
                Err(error) => view! { <p class="error">{error_text(&error)}</p> }.into_any(),
            })}
        </section>
        <section class="card" data-testid="assistant">
            <h2>"For an AI assistant (MCP)"</h2>
            <p>"A token an assistant uses to list, submit and explain jobs through MCP, with exactly this \
                token's rights: read looks, write may also submit, cancel and retry."</p>
            <ActionForm action=assistant attr:class="inline-form">
                <label>"Assistant rights"
                    <select name="scope">
                        <option value="read">"read"</option>
                        <option value="write">"write"</option>
                    </select>
                </label>
                <label>"Only this project (optional)" <input name="project" placeholder="all my projects" /></label>
                <button type="submit">"Make assistant token"</button>
            </ActionForm>
            {move || assistant.value().get().map(|result| match result {
                Ok(created) => view! {
                    <p class="info">"Copy it now: the token is shown only this once. For assistants that start \
                        a local process (gpuctl must be installed):"</p>
                    <pre class="secret" data-testid="mcp-stdio-config">{created.stdio_config}</pre>
                    <p>"For assistants that connect over HTTP:"</p>
                    <pre class="secret" data-testid="mcp-http-config">{created.http_config}</pre>
                }.into_any(),
                Err(error) => view! { <p class="error">{error_text(&error)}</p> }.into_any(),
            })}
        </section>
        <section class="card">
            <h2>"Your tokens"</h2>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || tokens.get().map(|result| match result {
                    Err(error) => view! { <p class="error">{error_text(&error)}</p> }.into_any(),
                    Ok(list) if list.is_empty() => view! { <p>"No tokens yet."</p> }.into_any(),
                    Ok(list) => view! {
                        <div class="table-scroll">
                        <table data-testid="token-table">
                            <thead><tr><th>"Name"</th><th>"Scope"</th><th>"Project"</th><th>"Created"</th><th>"Last used"</th><th>"Expires"</th><th></th></tr></thead>
                            <tbody>
                                {list.into_iter().map(|token| {
                                    let revoked = token.revoked_at.is_some();
                                    let id = token.id.clone();
                                    view! {
                                        <tr class:revoked=revoked>
                                            <td>{token.name}</td>
                                            <td>{token.scope.as_str()}</td>
                                            <td>{token.project.or(token.run_id.map(|r| format!("run {r}"))).unwrap_or_else(|| "all".into())}</td>
                                            <td>{token.created_at}</td>
                                            <td>{token.last_used_at.unwrap_or_else(|| "never".into())}</td>
                                            <td>{token.expires_at.unwrap_or_else(|| "never".into())}</td>
                                            <td>{if revoked {
                                                view! { <span>"revoked"</span> }.into_any()
                                            } else {
                                                view! {
                                                    <ActionForm action=revoke>
                                                        <input type="hidden" name="token_id" value=id />
                                                        <button type="submit" class="secondary">"Revoke"</button>
                                                    </ActionForm>
                                                }.into_any()
                                            }}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    }.into_any(),
                })}
            </Suspense>
        </section>
    }
}
