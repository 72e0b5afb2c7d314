//! Alerts: notification channels that server admins configure (a webhook
//! signed with HMAC, a Slack-compatible incoming webhook, email over SMTP),
//! subscriptions to event kinds and severities (a project's events, one
//! user's own jobs and runs, or everything), and the deliveries made for them.

use crate::event::{Event, EventKind, Severity};
use serde::{Deserialize, Serialize};

/// How a channel sends its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// A JSON [`AlertMessage`] POSTed to `url`, signed with the channel's secret.
    Webhook,
    /// `{"text": ...}` POSTed to a Slack (or Mattermost, Rocket.Chat…) incoming webhook.
    Slack,
    /// An email to `to`, through the server's `smtp_url`.
    Email,
}

names!("channel kind", ChannelKind {
    Webhook => "webhook",
    Slack => "slack",
    Email => "email",
});

/// Who may subscribe to a channel, so that nobody turns another's channel
/// into a relay of their own messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ChannelSubscribers {
    /// Server admins only (the default).
    #[default]
    Admins,
    /// The admins of the channel's `project`, to that project's events only.
    Project,
    /// Anyone: their own jobs' and runs' events (project admins: their
    /// projects'; server admins: everything).
    Anyone,
}

names!("channel subscribers", ChannelSubscribers {
    Admins => "admins",
    Project => "project",
    Anyone => "anyone",
});

/// A notification channel as it is listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Channel {
    pub name: String,
    pub kind: ChannelKind,
    /// Webhook and Slack: where messages go. Shown to server admins only
    /// (a Slack URL is itself a credential); null for everyone else.
    pub url: Option<String>,
    /// Email: the recipients (server admins only; empty for everyone else).
    pub to: Vec<String>,
    /// Webhook: the HMAC-SHA256 key, answered once when the server made it
    /// at creation; null in every other answer.
    pub secret: Option<String>,
    pub created_at: String,
    pub created_by: Option<String>,
    /// The project whose channel it is, if any.
    #[serde(default)]
    pub project: Option<String>,
    /// Who may subscribe to it.
    #[serde(default)]
    pub subscribers: ChannelSubscribers,
}

/// `POST /api/v1/alerts/channels` (server admins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewChannel {
    /// Letters, digits, `-` and `_`, at most 64.
    pub name: String,
    pub kind: ChannelKind,
    /// Webhook and Slack: an http(s) URL.
    #[serde(default)]
    pub url: Option<String>,
    /// Email: one or more addresses.
    #[serde(default)]
    pub to: Vec<String>,
    /// Webhook: the HMAC key (at least 16 characters). Left out, the
    /// server makes one and answers it once.
    #[serde(default)]
    pub secret: Option<String>,
    /// The project whose channel it is: its admins may subscribe it to the
    /// project's events (and nothing else is sent to it).
    #[serde(default)]
    pub project: Option<String>,
    /// Who may subscribe: `admins` (server admins; the default without a
    /// project), `project` (the project's admins; the default with one) or
    /// `anyone`.
    #[serde(default)]
    pub subscribers: Option<ChannelSubscribers>,
}

/// Whose events a subscription receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionScope {
    /// The events of one project's jobs and runs (project admins).
    Project,
    /// The events of the jobs and runs one user started (that user).
    User,
    /// Every event, nodes' included (server admins).
    All,
}

names!("subscription scope", SubscriptionScope {
    Project => "project",
    User => "user",
    All => "all",
});

/// A subscription: which events go to which channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Subscription {
    pub id: String,
    pub channel: String,
    pub scope: SubscriptionScope,
    /// Scope `project`: the project.
    pub project: Option<String>,
    /// Scope `user`: the user.
    pub user: Option<String>,
    /// The event kinds it receives; empty: every kind.
    pub kinds: Vec<EventKind>,
    /// It receives events of this severity and above.
    pub min_severity: Severity,
    pub created_at: String,
    pub created_by: Option<String>,
}

impl Subscription {
    /// Whose events it receives, in words.
    pub fn whose(&self) -> String {
        match (&self.project, &self.user) {
            (Some(project), _) => format!("project {project}"),
            (None, Some(user)) => format!("{user}'s jobs and runs"),
            (None, None) => "every event".into(),
        }
    }

    /// Its kinds, comma-separated, or "every kind".
    pub fn kinds_text(&self) -> String {
        if self.kinds.is_empty() {
            return "every kind".into();
        }
        let kinds: Vec<&str> = self.kinds.iter().map(|kind| kind.as_str()).collect();
        kinds.join(", ")
    }
}

/// `POST /api/v1/alerts/subscriptions`. With `project`: that project's
/// events (its admins); with `all: true`: every event (server admins);
/// with neither: the caller's own jobs and runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewSubscription {
    pub channel: String,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub all: bool,
    /// Empty or left out: every kind.
    #[serde(default)]
    pub kinds: Vec<EventKind>,
    /// Default `warning`.
    #[serde(default = "warning")]
    pub min_severity: Severity,
}

fn warning() -> Severity {
    Severity::Warning
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not sent yet, or failed and waiting to be tried again.
    Pending,
    Sent,
    /// Every try failed (or its channel was removed); not tried again.
    Failed,
}

names!("delivery status", DeliveryStatus {
    Pending => "pending",
    Sent => "sent",
    Failed => "failed",
});

/// One message for one event on one channel, and how sending it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delivery {
    pub id: String,
    pub channel: String,
    pub event: Event,
    pub status: DeliveryStatus,
    /// Tries made so far.
    pub attempts: i64,
    /// Why the last try failed.
    pub last_error: Option<String>,
    /// While pending: when the next try is due.
    pub next_attempt_at: Option<String>,
    pub sent_at: Option<String>,
    pub created_at: String,
}

/// What a webhook channel POSTs (JSON), with the headers
/// `X-GPUPlane-Delivery` (the same id on every retry),
/// `X-GPUPlane-Timestamp` (Unix seconds) and `X-GPUPlane-Signature`:
/// `sha256=` and the hex HMAC-SHA256, keyed by the channel's secret, of
/// `{timestamp}.{body}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertMessage {
    pub delivery_id: String,
    /// One line: severity, kind and what it is about.
    pub title: String,
    /// The event's message.
    pub text: String,
    /// The console page of the run or job it is about (the nodes page for
    /// node events).
    pub url: String,
    pub project: Option<String>,
    pub event: Event,
}

/// `POST /api/v1/runs/{run_id}/alerts`: an alert raised by the run itself
/// (the SDK's `run.alert`). It is recorded as a `RUN_ALERT` event of that
/// severity and delivered like any other event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewRunAlert {
    /// At most 200 characters.
    pub title: String,
    /// At most 4,000 characters.
    #[serde(default)]
    pub text: String,
    /// Default `warning`.
    #[serde(default = "warning")]
    pub level: Severity,
    /// An alert with the same title raised by the run within this many
    /// seconds of the last one is not recorded again. Default 0.
    #[serde(default)]
    pub wait_s: u32,
}

/// The answer to a run's alert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunAlertAnswer {
    /// False when the same title was raised within `wait_s`.
    pub recorded: bool,
    /// The event recorded, when it was.
    pub event_id: Option<String>,
}

/// The limits a run's alert is checked against.
pub const MAX_ALERT_TITLE: usize = 200;
pub const MAX_ALERT_TEXT: usize = 4_000;
