//! `gpuctl alert …`: channels (server admins), subscriptions, and the
//! deliveries made for them.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::Page;
use gpuplane_api::alert::{
    Channel, ChannelKind, ChannelSubscribers, Delivery, NewChannel, NewSubscription, Subscription,
};
use gpuplane_api::event::{EventKind, Severity};
use std::fmt::Write;

#[derive(Debug, clap::Subcommand)]
pub enum AlertCommand {
    /// Notification channels: list, add, remove (adding and removing: server admins).
    #[command(subcommand)]
    Channel(ChannelCommand),
    /// Send a channel the events of a project (`--project`, its admins), of
    /// everything (`--all`, server admins), or of your own jobs and runs.
    Subscribe(SubscribeArgs),
    /// The subscriptions you may see.
    Subscriptions,
    /// Remove a subscription by id.
    Unsubscribe { subscription_id: String },
    /// Messages sent (or being retried) for the subscriptions you may see, newest first.
    Deliveries(DeliveriesArgs),
}

#[derive(Debug, clap::Subcommand)]
pub enum ChannelCommand {
    List,
    /// Add a channel: `--webhook URL` (signed with an HMAC secret, printed
    /// once unless `--secret`), `--slack URL`, or `--email ADDRESS` (repeat for more).
    Add(ChannelArgs),
    Remove {
        name: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct ChannelArgs {
    name: String,
    /// A URL that receives a signed JSON message for each alert.
    #[arg(long, value_name = "URL", group = "target", required_unless_present_any = ["slack", "email"])]
    webhook: Option<String>,
    /// A Slack-compatible incoming webhook URL.
    #[arg(long, value_name = "URL", group = "target")]
    slack: Option<String>,
    /// An address to email (needs the server's smtp_url; repeat for more).
    #[arg(long, value_name = "ADDRESS", group = "target")]
    email: Vec<String>,
    /// The webhook's HMAC key, at least 16 characters (default: the server makes one).
    #[arg(long, requires = "webhook")]
    secret: Option<String>,
    /// The project whose channel it is: it takes that project's events only.
    #[arg(long)]
    project: Option<String>,
    /// Who may subscribe: admins (server admins; the default), project (the
    /// project's admins; the default with --project) or anyone.
    #[arg(long)]
    subscribers: Option<ChannelSubscribers>,
}

#[derive(Debug, clap::Args)]
pub struct SubscribeArgs {
    /// The channel that receives the messages.
    #[arg(long)]
    channel: String,
    /// A project's events (project admins).
    #[arg(long, conflicts_with = "all")]
    project: Option<String>,
    /// Every event, nodes' included (server admins).
    #[arg(long)]
    all: bool,
    /// Only these kinds (repeat, or comma-separated): OOM, LOSS_NAN, JOB_FAILED, JOB_LOST, DISK_LOW, RUN_ALERT…
    #[arg(long, value_delimiter = ',')]
    kind: Vec<EventKind>,
    /// The lowest severity sent: info, warning (default) or critical.
    #[arg(long, default_value = "warning")]
    severity: Severity,
}

#[derive(Debug, clap::Args)]
pub struct DeliveriesArgs {
    #[arg(long)]
    channel: Option<String>,
    /// pending, sent or failed.
    #[arg(long)]
    status: Option<String>,
    #[arg(long)]
    run_id: Option<String>,
    #[arg(long)]
    job_id: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: i64,
}

pub async fn run(client: &Client, command: AlertCommand, out: &Output) -> Result<(), CliError> {
    match command {
        AlertCommand::Channel(ChannelCommand::List) => {
            let page: Page<Channel> = client.get("alerts/channels").await?;
            out.emit(&page, |page| {
                if page.items.is_empty() {
                    return "No alert channels. A server admin adds one with `gpuctl alert channel add`."
                        .into();
                }
                let mut text = String::new();
                for channel in &page.items {
                    let target = match channel.kind {
                        ChannelKind::Email => channel.to.join(", "),
                        _ => channel.url.clone().unwrap_or_default(),
                    };
                    let whose = match &channel.project {
                        Some(project) => format!("project {project}, "),
                        None => String::new(),
                    };
                    let line = format!(
                        "{:<20} {:<8} {whose}subscribed by {:<8} {target}",
                        channel.name,
                        channel.kind.as_str(),
                        channel.subscribers.as_str()
                    );
                    let _ = writeln!(text, "{}", line.trim_end());
                }
                text
            });
        }
        AlertCommand::Channel(ChannelCommand::Add(args)) => {
            let (kind, url) = match (args.webhook, args.slack) {
                (Some(url), _) => (ChannelKind::Webhook, Some(url)),
                (None, Some(url)) => (ChannelKind::Slack, Some(url)),
                (None, None) => (ChannelKind::Email, None),
            };
            let new = NewChannel {
                name: args.name,
                kind,
                url,
                to: args.email,
                secret: args.secret,
                project: args.project,
                subscribers: args.subscribers,
            };
            let channel: Channel = client.post("alerts/channels", &new).await?;
            out.emit(&channel, |channel| {
                let mut text = format!("Channel {} ({}) added.", channel.name, channel.kind);
                if let Some(secret) = &channel.secret {
                    let _ = write!(
                        text,
                        "\nIts signing secret (shown once; messages carry X-GPUPlane-Signature: \
                         sha256=HMAC(secret, timestamp + \".\" + body)):\n{secret}"
                    );
                }
                text
            });
        }
        AlertCommand::Channel(ChannelCommand::Remove { name }) => {
            let () = client.delete(&format!("alerts/channels/{name}")).await?;
            out.emit(&serde_json::json!({ "removed": name }), |_| {
                format!("Channel {name} removed, with its subscriptions.")
            });
        }
        AlertCommand::Subscribe(args) => {
            let new = NewSubscription {
                channel: args.channel,
                project: args.project,
                all: args.all,
                kinds: args.kind,
                min_severity: args.severity,
            };
            let subscription: Subscription = client.post("alerts/subscriptions", &new).await?;
            out.emit(&subscription, |subscription| {
                format!("Subscribed: {}", describe(subscription))
            });
        }
        AlertCommand::Subscriptions => {
            let page: Page<Subscription> = client.get("alerts/subscriptions").await?;
            out.emit(&page, |page| {
                if page.items.is_empty() {
                    return "No subscriptions.".into();
                }
                page.items.iter().map(describe).collect::<Vec<_>>().join("\n")
            });
        }
        AlertCommand::Unsubscribe { subscription_id } => {
            let () = client
                .delete(&format!("alerts/subscriptions/{subscription_id}"))
                .await?;
            out.emit(&serde_json::json!({ "removed": subscription_id }), |_| {
                format!("Subscription {subscription_id} removed.")
            });
        }
        AlertCommand::Deliveries(args) => {
            let mut query = form_urlencoded::Serializer::new(format!("limit={}", args.limit));
            for (name, value) in [
                ("channel", &args.channel),
                ("status", &args.status),
                ("run_id", &args.run_id),
                ("job_id", &args.job_id),
            ] {
                if let Some(value) = value {
                    query.append_pair(name, value);
                }
            }
            let page: Page<Delivery> = client
                .get(&format!("alerts/deliveries?{}", query.finish()))
                .await?;
            out.emit(&page, |page| {
                if page.items.is_empty() {
                    return "No deliveries.".into();
                }
                let mut text = String::new();
                for delivery in &page.items {
                    let _ = writeln!(
                        text,
                        "{}  {:<7} {:<12} {:<10} {}",
                        delivery.created_at,
                        delivery.status.as_str(),
                        delivery.channel,
                        delivery.event.kind.as_str(),
                        delivery.event.message
                    );
                    if let Some(error) = &delivery.last_error {
                        let next = delivery
                            .next_attempt_at
                            .as_deref()
                            .map(|at| format!("; next try {at}"))
                            .unwrap_or_default();
                        let _ = writeln!(text, "    try {}: {error}{next}", delivery.attempts);
                    }
                }
                text
            });
        }
    }
    Ok(())
}

/// One line: id, what it receives, and where it goes.
fn describe(subscription: &Subscription) -> String {
    format!(
        "{}  {}: {}, {} and above → {}",
        subscription.id,
        subscription.whose(),
        subscription.kinds_text(),
        subscription.min_severity,
        subscription.channel
    )
}
