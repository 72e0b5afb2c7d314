//! Notification channels, kept by server admins. A webhook's HMAC key is
//! stored sealed with the server's secret key (it must be read back to sign
//! with); it is answered once, when the server made it. Who may subscribe
//! to a channel is the channel's own setting (`subscribers`): server admins
//! unless it says otherwise, so no channel relays anyone's messages.

use crate::identity::secrets::SecretKey;
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::alert::{Channel, ChannelKind, ChannelSubscribers, NewChannel};
use gpuplane_api::error::FieldError;
use rand::RngCore;

/// What the AEAD binds a sealed webhook key to, beside the channel's name.
const SECRET_NAME: &str = "alert-webhook-secret";

/// A channel as the sender needs it, its secret opened.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub kind: ChannelKind,
    pub url: Option<String>,
    pub to: Vec<String>,
    pub secret: Option<String>,
}

#[derive(sqlx::FromRow)]
struct Row {
    name: String,
    kind: String,
    url: Option<String>,
    recipients: String,
    sealed_secret: Option<String>,
    created_at: i64,
    created_by: Option<String>,
    project: Option<String>,
    subscribers: String,
}

impl Row {
    fn kind(&self) -> Result<ChannelKind, Error> {
        ChannelKind::parse(&self.kind)
            .ok_or_else(|| Error::Internal(anyhow::anyhow!("bad channel kind {} in database", self.kind)))
    }

    fn recipients(&self) -> Vec<String> {
        serde_json::from_str(&self.recipients).unwrap_or_default()
    }

    /// As listed: where it sends only for server admins.
    fn channel(self, for_admin: bool) -> Result<Channel, Error> {
        Ok(Channel {
            kind: self.kind()?,
            url: self.url.clone().filter(|_| for_admin),
            to: if for_admin { self.recipients() } else { Vec::new() },
            secret: None,
            name: self.name,
            created_at: rfc3339(self.created_at),
            created_by: self.created_by,
            subscribers: ChannelSubscribers::parse(&self.subscribers).unwrap_or_default(),
            project: self.project,
        })
    }
}

const COLUMNS: &str =
    "name, kind, url, recipients, sealed_secret, created_at, created_by, project, subscribers";

/// Who may subscribe to a channel: its project, if any, and its setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub project: Option<String>,
    pub subscribers: ChannelSubscribers,
}

/// The policy of the channel named `name`, or None when there is none.
pub async fn policy(db: &Db, name: &str) -> Result<Option<Policy>, Error> {
    let row: Option<(Option<String>, String)> = sql!(db, |pool| {
        sqlx::query_as("SELECT project, subscribers FROM alert_channels WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await
    })?;
    Ok(row.map(|(project, subscribers)| Policy {
        project,
        subscribers: ChannelSubscribers::parse(&subscribers).unwrap_or_default(),
    }))
}

/// Every channel by name; `for_admin` shows where each sends.
pub async fn list(db: &Db, for_admin: bool) -> Result<Vec<Channel>, Error> {
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM alert_channels ORDER BY name"))
            .fetch_all(pool)
            .await
    })?;
    rows.into_iter().map(|row| row.channel(for_admin)).collect()
}

/// The channel named `name` as the sender needs it, or `None` once removed.
pub async fn target(db: &Db, secret_key: &SecretKey, name: &str) -> Result<Option<Target>, Error> {
    let row: Option<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM alert_channels WHERE name = $1"))
            .bind(name)
            .fetch_optional(pool)
            .await
    })?;
    let Some(row) = row else { return Ok(None) };
    let secret = match &row.sealed_secret {
        Some(sealed) => Some(secret_key.open(&row.name, SECRET_NAME, sealed).ok_or_else(|| {
            Error::Internal(anyhow::anyhow!(
                "the secret of channel {} does not open with this server's key",
                row.name
            ))
        })?),
        None => None,
    };
    Ok(Some(Target {
        kind: row.kind()?,
        to: row.recipients(),
        url: row.url,
        name: row.name,
        secret,
    }))
}

/// Who may subscribe to a new channel: as asked, else its project's admins
/// for a project's channel, else server admins.
fn subscribers(new: &NewChannel) -> ChannelSubscribers {
    new.subscribers.unwrap_or(match new.project {
        Some(_) => ChannelSubscribers::Project,
        None => ChannelSubscribers::Admins,
    })
}

/// Every field error of a new channel; `allow_private` is `alert_private_hosts`.
fn check(new: &NewChannel, allow_private: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut error = |field: &str, message: String| {
        errors.push(FieldError {
            field: field.into(),
            message,
        })
    };
    let name_ok = !new.name.is_empty()
        && new.name.len() <= 64
        && new
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !name_ok {
        error(
            "name",
            "a channel's name is 1 to 64 letters, digits, `-` or `_`".into(),
        );
    }
    match new.kind {
        ChannelKind::Webhook | ChannelKind::Slack => {
            match &new.url {
                None => error("url", format!("a {} channel needs a url", new.kind)),
                Some(url) => {
                    let parsed = url.parse::<reqwest::Url>();
                    let scheme_ok = parsed
                        .as_ref()
                        .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some());
                    if !scheme_ok {
                        error("url", format!("`{url}` is not an http:// or https:// URL"));
                    }
                    let ip = parsed.as_ref().ok().and_then(|url| {
                        let host = url.host_str()?;
                        host.trim_start_matches('[').trim_end_matches(']').parse().ok()
                    });
                    if let Some(ip) = ip.filter(|ip| !allow_private && !super::addresses::public(*ip)) {
                        error("url", super::addresses::refusal(ip));
                    }
                }
            }
            if !new.to.is_empty() {
                error(
                    "to",
                    format!("a {} channel sends to its url, not to addresses", new.kind),
                );
            }
        }
        ChannelKind::Email => {
            if new.url.is_some() {
                error("url", "an email channel sends to `to`, not to a url".into());
            }
            if new.to.is_empty() {
                error("to", "an email channel needs at least one address".into());
            }
            for address in &new.to {
                if address.parse::<lettre::Address>().is_err() {
                    error("to", format!("`{address}` is not an email address"));
                }
            }
        }
    }
    if subscribers(new) == ChannelSubscribers::Project && new.project.is_none() {
        error(
            "subscribers",
            "`project` subscribers need the channel's `project`".into(),
        );
    }
    match (&new.secret, new.kind) {
        (Some(_), ChannelKind::Slack | ChannelKind::Email) => {
            error("secret", format!("a {} channel has no secret", new.kind))
        }
        (Some(secret), ChannelKind::Webhook) if secret.len() < 16 => {
            error("secret", "a webhook secret has at least 16 characters".into())
        }
        _ => {}
    }
    errors
}

/// Creates a channel. A webhook without a given secret gets a new one,
/// answered in `secret` this once.
pub async fn create(
    db: &Db,
    secret_key: &SecretKey,
    new: &NewChannel,
    by: Option<&str>,
    allow_private: bool,
) -> Result<Channel, Error> {
    let mut errors = check(new, allow_private);
    if let Some(project) = &new.project {
        let known: Option<i32> = sql!(db, |pool| {
            sqlx::query_scalar("SELECT 1 FROM projects WHERE name = $1")
                .bind(project)
                .fetch_optional(pool)
                .await
        })?;
        if known.is_none() {
            errors.push(FieldError {
                field: "project".into(),
                message: format!("no project named {project}"),
            });
        }
    }
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let made_secret = match (new.kind, &new.secret) {
        (ChannelKind::Webhook, None) => {
            let mut bytes = [0u8; 24];
            rand::rng().fill_bytes(&mut bytes);
            Some(format!("whsec_{}", hex::encode(bytes)))
        }
        _ => None,
    };
    let sealed = made_secret
        .as_ref()
        .or(new.secret.as_ref())
        .map(|secret| secret_key.seal(&new.name, SECRET_NAME, secret));
    let now = now_ms();
    let inserted = sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO alert_channels (name, kind, url, recipients, sealed_secret, created_at, created_by,
                                         project, subscribers)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&new.name)
        .bind(new.kind.as_str())
        .bind(&new.url)
        .bind(serde_json::to_string(&new.to).unwrap_or_else(|_| "[]".into()))
        .bind(sealed)
        .bind(now)
        .bind(by)
        .bind(&new.project)
        .bind(subscribers(new).as_str())
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
    })?;
    if inserted == 0 {
        return Err(Error::Conflict(format!("a channel named {} exists", new.name)));
    }
    Ok(Channel {
        name: new.name.clone(),
        kind: new.kind,
        url: new.url.clone(),
        to: new.to.clone(),
        secret: made_secret,
        created_at: rfc3339(now),
        created_by: by.map(str::to_string),
        project: new.project.clone(),
        subscribers: subscribers(new),
    })
}

/// Removes a channel and its subscriptions; its pending deliveries fail
/// with the reason when their turn comes.
pub async fn delete(db: &Db, name: &str) -> Result<(), Error> {
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query("DELETE FROM alert_subscriptions WHERE channel = $1")
            .bind(name)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    let deleted = sql!(tx, |conn| {
        sqlx::query("DELETE FROM alert_channels WHERE name = $1")
            .bind(name)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })?;
    if deleted == 0 {
        return Err(Error::NotFound(format!("no channel named {name}")));
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(kind: ChannelKind) -> NewChannel {
        NewChannel {
            name: "ops".into(),
            kind,
            url: None,
            to: Vec::new(),
            secret: None,
            project: None,
            subscribers: None,
        }
    }

    fn fields(new: &NewChannel) -> Vec<String> {
        check(new, false).into_iter().map(|error| error.field).collect()
    }

    #[test]
    fn each_kind_needs_its_own_target_and_nothing_else() {
        let webhook = NewChannel {
            url: Some("https://hooks.example.com/x".into()),
            ..new(ChannelKind::Webhook)
        };
        assert!(fields(&webhook).is_empty());
        assert_eq!(fields(&new(ChannelKind::Webhook)), ["url"]);
        let ftp = NewChannel {
            url: Some("ftp://example.com".into()),
            ..new(ChannelKind::Slack)
        };
        assert_eq!(fields(&ftp), ["url"]);
        let short = NewChannel {
            secret: Some("short".into()),
            ..webhook.clone()
        };
        assert_eq!(fields(&short), ["secret"]);
        let email = NewChannel {
            to: vec!["ml-team@example.com".into()],
            ..new(ChannelKind::Email)
        };
        assert!(fields(&email).is_empty());
        let bad = NewChannel {
            to: vec!["not an address".into()],
            url: Some("https://example.com".into()),
            ..new(ChannelKind::Email)
        };
        assert_eq!(fields(&bad), ["url", "to"]);
        let named = NewChannel {
            name: "has space".into(),
            ..email
        };
        assert_eq!(fields(&named), ["name"]);
        let inside = NewChannel {
            url: Some("http://169.254.169.254/latest/meta-data".into()),
            ..new(ChannelKind::Webhook)
        };
        assert_eq!(fields(&inside), ["url"], "the network inside, unless allowed");
        assert!(check(&inside, true).is_empty());
        let orphan = NewChannel {
            subscribers: Some(ChannelSubscribers::Project),
            url: Some("https://hooks.example.com/x".into()),
            ..new(ChannelKind::Slack)
        };
        assert_eq!(fields(&orphan), ["subscribers"]);
    }
}
