//! Alerts: events sent to the channels that subscribed to them.
//!
//! Nothing is lost between an event and its message. [`run`] follows the
//! events table past a stored cursor and, in the transaction that moves the
//! cursor, makes one pending delivery per event and channel that a
//! subscription receives (`deliveries::fan_out`). It then tries each due
//! delivery; a failed try is kept with its reason and tried again after a
//! backoff that doubles from `alert_retry_initial_s` up to an hour, until
//! `alert_max_attempts`. A try cut short by a restart is made again, with
//! the same delivery id, so receivers can drop a duplicate.

pub mod addresses;
pub mod channels;
pub mod deliveries;
mod send;
pub mod subscriptions;

use crate::config::ServerConfig;
use crate::identity::secrets::SecretKey;
use crate::store::Db;
use crate::store::time::now_ms;
use crate::wake::Wakes;
use deliveries::{Due, Outcome};
use futures_util::StreamExt;
pub use send::{Senders, signature};
use std::sync::Arc;
use std::time::Duration;

/// Deliveries tried at once.
const PARALLEL: usize = 8;

/// The longest sleep between two looks at the events: a safety net for an
/// event whose notification was missed.
const POLL: Duration = Duration::from_secs(5);

/// Fans events out to deliveries and sends them, until shutdown.
pub async fn run(
    db: Db,
    config: Arc<ServerConfig>,
    secret: SecretKey,
    wakes: Wakes,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let server = Server { db, config, secret };
    let settings = &server.config.settings;
    let senders = match Senders::new(
        settings.smtp_url.as_deref(),
        &settings.smtp_from,
        server.config.public_url(),
        settings.alert_private_hosts,
    ) {
        Ok(senders) => senders,
        Err(error) => {
            tracing::error!(%error, "alerts are off: their settings do not work");
            return;
        }
    };
    let mut events = wakes.subscribe_events();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let wait = match pass(&server, &senders).await {
            Ok(next_due) => next_due.map_or(POLL, |at| {
                Duration::from_millis((at - now_ms()).max(0) as u64).min(POLL)
            }),
            Err(error) => {
                tracing::warn!(%error, "alert delivery failed; will try again");
                POLL
            }
        };
        tokio::select! {
            _ = events.recv() => {}
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// What delivery needs of the server.
struct Server {
    db: Db,
    config: Arc<ServerConfig>,
    secret: SecretKey,
}

/// Makes the deliveries of new events and tries every due one; returns
/// when the next pending one is due.
async fn pass(server: &Server, senders: &Senders) -> Result<Option<i64>, crate::store::Error> {
    while deliveries::fan_out(&server.db).await? > 0 {}
    loop {
        let due = deliveries::due(&server.db, now_ms(), 4 * PARALLEL as i64).await?;
        if due.is_empty() {
            return deliveries::next_due(&server.db).await;
        }
        let results: Vec<Result<(), crate::store::Error>> = futures_util::stream::iter(due)
            .map(|due| try_one(server, senders, due))
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        results.into_iter().collect::<Result<(), _>>()?;
    }
}

/// One try of one delivery, and its outcome kept.
async fn try_one(server: &Server, senders: &Senders, due: Due) -> Result<(), crate::store::Error> {
    let settings = &server.config.settings;
    let outcome = match channels::target(&server.db, &server.secret, &due.channel).await? {
        None => Outcome::Failed {
            error: format!("channel {} was removed", due.channel),
            final_try: true,
        },
        Some(target) => senders.send(&target, &senders.message(&due)).await,
    };
    match &outcome {
        Outcome::Sent => tracing::info!(delivery = due.id, channel = due.channel, "alert sent"),
        Outcome::Failed { error, .. } => {
            tracing::warn!(
                delivery = due.id,
                channel = due.channel,
                attempt = due.attempts + 1,
                error,
                "alert not sent"
            )
        }
    }
    deliveries::record_try(
        &server.db,
        &due.id,
        &outcome,
        Duration::from_secs(settings.alert_retry_initial_s),
        i64::from(settings.alert_max_attempts),
    )
    .await
}
