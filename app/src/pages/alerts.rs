//! `/alerts`: the channels, the subscriptions the viewer may see, and every
//! delivery made for them with how sending it went (retries and errors
//! included), filtered by status and channel.

use crate::api::fetch;
use crate::view::query::{api, link};
use crate::view::{format, loaded};
use gpuplane_api::Page;
use gpuplane_api::alert::{Channel, ChannelSubscribers, Delivery, DeliveryStatus, Subscription};
use gpuplane_api::paths;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn Alerts() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.read().get(key).unwrap_or_default();
    let channels = Resource::new(|| (), |_| fetch::<Page<Channel>>(paths::alert_channels()));
    let subscriptions = Resource::new(
        || (),
        |_| fetch::<Page<Subscription>>(paths::alert_subscriptions()),
    );
    let deliveries = Resource::new(
        move || ["status", "channel", "run_id", "before"].map(param),
        |[status, channel, run_id, before]| {
            fetch::<Page<Delivery>>(api(
                &paths::alert_deliveries(),
                &[
                    ("status", &status),
                    ("channel", &channel),
                    ("run_id", &run_id),
                    ("before", &before),
                ],
            ))
        },
    );
    view! {
        <Title text="Alerts" />
        <h1>"Alerts"</h1>
        <section class="card">
            <h2>"Deliveries"</h2>
            <form method="get" class="inline-form" role="search" data-testid="delivery-filters">
                <label>"Status"
                    <select name="status">
                        <option value="" selected=move || param("status").is_empty()>"any"</option>
                        {DeliveryStatus::ALL.iter().map(|s| view! { <option value=s.as_str() selected=move || param("status") == s.as_str()>{s.as_str()}</option> }).collect_view()}
                    </select>
                </label>
                <label>"Channel" <input name="channel" prop:value=move || param("channel") placeholder="any" /></label>
                {move || (!param("run_id").is_empty()).then(|| view! { <input type="hidden" name="run_id" prop:value=param("run_id") /> })}
                <button type="submit">"Filter"</button>
                <a href="/alerts">"Clear"</a>
            </form>
            {loaded(deliveries, move |page: Page<Delivery>| {
                let older = page.next_before.map(|before| link("/alerts", &query.read_untracked(), &[("before", Some(&before.to_string()))]));
                view! {
                    <DeliveriesTable deliveries=page.items />
                    {older.map(|href| view! { <nav class="pager"><a href=href>"Older →"</a></nav> })}
                }
            })}
        </section>
        <section class="card">
            <h2>"Subscriptions"</h2>
            {loaded(subscriptions, |page: Page<Subscription>| view! { <SubscriptionsTable subscriptions=page.items /> })}
            <p class="muted">"Subscribe with " <code>"gpuctl alert subscribe --channel NAME [--project P | --all] [--kind OOM,LOSS_NAN] [--severity critical]"</code>
                "; without " <code>"--project"</code> " or " <code>"--all"</code> ", you receive the events of your own jobs and runs."</p>
        </section>
        <section class="card">
            <h2>"Channels"</h2>
            {loaded(channels, |page: Page<Channel>| view! { <ChannelsTable channels=page.items /> })}
        </section>
    }
}

#[component]
fn DeliveriesTable(deliveries: Vec<Delivery>) -> impl IntoView {
    if deliveries.is_empty() {
        return view! { <p class="empty">"No deliveries match."</p> }.into_any();
    }
    view! {
        <div class="table-scroll"><table data-testid="deliveries">
            <thead><tr><th>"Made"</th><th>"Status"</th><th>"Channel"</th><th>"Event"</th><th>"Tries"</th><th>"Last error"</th><th>"Job / run"</th></tr></thead>
            <tbody>{deliveries.into_iter().map(|delivery| {
                let status = delivery.status.as_str();
                let event = delivery.event;
                let when = match (status, &delivery.sent_at, &delivery.next_attempt_at) {
                    ("sent", Some(at), _) => format!("sent {}", format::time(at)),
                    ("pending", _, Some(at)) => format!("next try {}", format::time(at)),
                    _ => String::new(),
                };
                view! { <tr data-delivery=delivery.id.clone()>
                    <td>{format::time(&delivery.created_at)}</td>
                    <td><span class=format!("badge delivery-{status}")>{status}</span><br /><span class="muted">{when}</span></td>
                    <td>{delivery.channel}</td>
                    <td><span class=format!("badge severity-{}", event.severity.as_str())>{event.severity.as_str()}</span>" "<code>{event.kind.as_str()}</code><br />{event.message}</td>
                    <td>{delivery.attempts}</td>
                    <td class="mono">{delivery.last_error.unwrap_or_default()}</td>
                    <td>
                        {event.job_id.map(|id| view! { <a href=format!("/jobs/{id}")>{id.clone()}</a> " " })}
                        {event.run_id.map(|id| view! { <a href=format!("/runs/{id}")>"run"</a> })}
                    </td>
                </tr> }
            }).collect_view()}</tbody>
        </table></div>
    }
    .into_any()
}

#[component]
fn SubscriptionsTable(subscriptions: Vec<Subscription>) -> impl IntoView {
    if subscriptions.is_empty() {
        return view! { <p class="empty">"No subscriptions you can see."</p> }.into_any();
    }
    view! {
        <div class="table-scroll"><table data-testid="subscriptions">
            <thead><tr><th>"Id"</th><th>"Whose events"</th><th>"Kinds"</th><th>"From severity"</th><th>"Channel"</th><th>"By"</th></tr></thead>
            <tbody>{subscriptions.into_iter().map(|subscription| {
                let (whose, kinds) = (subscription.whose(), subscription.kinds_text());
                view! { <tr>
                    <td class="mono">{subscription.id}</td>
                    <td>{whose}</td>
                    <td>{kinds}</td>
                    <td>{subscription.min_severity.as_str()}</td>
                    <td>{subscription.channel}</td>
                    <td>{subscription.created_by.unwrap_or_default()}</td>
                </tr> }
            }).collect_view()}</tbody>
        </table></div>
    }
    .into_any()
}

#[component]
fn ChannelsTable(channels: Vec<Channel>) -> impl IntoView {
    if channels.is_empty() {
        return view! { <p class="empty">"No channels yet: a server admin adds one with " <code>"gpuctl alert channel add"</code> "."</p> }.into_any();
    }
    view! {
        <div class="table-scroll"><table data-testid="channels">
            <thead><tr><th>"Name"</th><th>"Kind"</th><th>"Project"</th><th>"Who may subscribe"</th><th>"Sends to"</th><th>"Added"</th></tr></thead>
            <tbody>{channels.into_iter().map(|channel| {
                let target = if channel.to.is_empty() { channel.url.unwrap_or_default() } else { channel.to.join(", ") };
                view! { <tr>
                    <td>{channel.name}</td>
                    <td>{channel.kind.as_str()}</td>
                    <td>{channel.project.unwrap_or_else(|| "-".into())}</td>
                    <td>{match channel.subscribers {
                        ChannelSubscribers::Admins => "server admins",
                        ChannelSubscribers::Project => "the project's admins",
                        ChannelSubscribers::Anyone => "anyone",
                    }}</td>
                    <td class="mono">{target}</td>
                    <td>{format::time(&channel.created_at)}{channel.created_by.map(|by| format!(" by {by}"))}</td>
                </tr> }
            }).collect_view()}</tbody>
        </table></div>
    }
    .into_any()
}
