//! Sending one delivery: the message (title, text, link to the console
//! page), then a signed webhook POST, a Slack-compatible POST or an email.
//! What a failed try records names the receiver by scheme, host and port
//! only (never a `user:password@`, never a path, which may hold a Slack
//! secret) and never what the receiver answered.

use super::addresses::{Resolver, public, refusal};
use super::channels::Target;
use super::deliveries::{Due, Outcome};
use gpuplane_api::alert::{AlertMessage, ChannelKind};
use hmac::{Hmac, Mac};
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use sha2::Sha256;
use std::time::Duration;

/// How long one try may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The clients every try shares.
pub struct Senders {
    http: reqwest::Client,
    /// `None` when the server has no `smtp_url`.
    smtp: Option<AsyncSmtpTransport<Tokio1Executor>>,
    from: String,
    public_url: String,
    /// `alert_private_hosts`: webhooks may reach the server's own network.
    allow_private: bool,
}

impl Senders {
    pub fn new(
        smtp_url: Option<&str>,
        from: &str,
        public_url: String,
        allow_private: bool,
    ) -> anyhow::Result<Senders> {
        crate::config::smtp::check(smtp_url, from)?;
        let smtp = smtp_url
            .map(|url| crate::config::smtp::transport(url, TIMEOUT))
            .transpose()?;
        Ok(Senders {
            http: reqwest::Client::builder()
                .timeout(TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .dns_resolver(std::sync::Arc::new(Resolver { allow_private }))
                .build()?,
            smtp,
            from: from.to_string(),
            public_url,
            allow_private,
        })
    }

    /// The message of a delivery.
    pub fn message(&self, due: &Due) -> AlertMessage {
        let event = &due.event;
        let page = match (&event.run_id, &event.job_id) {
            (Some(run_id), _) => format!("/runs/{run_id}"),
            (None, Some(job_id)) => format!("/jobs/{job_id}"),
            (None, None) => "/nodes".to_string(),
        };
        let about = match (&due.subject, &due.project) {
            (Some(subject), Some(project)) => format!(" · {project}/{subject}"),
            (Some(subject), None) => format!(" · {subject}"),
            (None, Some(project)) => format!(" · {project}"),
            (None, None) => String::new(),
        };
        AlertMessage {
            delivery_id: due.id.clone(),
            title: format!("[GPUPlane] {} {}{about}", event.severity, event.kind),
            text: event.message.clone(),
            url: format!("{}{page}", self.public_url),
            project: due.project.clone(),
            event: event.clone(),
        }
    }

    /// One try of `message` on `target`.
    pub async fn send(&self, target: &Target, message: &AlertMessage) -> Outcome {
        let result = match target.kind {
            ChannelKind::Webhook => self.webhook(target, message).await,
            ChannelKind::Slack => {
                let body = serde_json::json!({ "text": slack_text(message) }).to_string();
                self.post(target, body, Vec::new()).await
            }
            ChannelKind::Email => self.email(target, message).await,
        };
        match result {
            Ok(()) => Outcome::Sent,
            Err(failure) => Outcome::Failed {
                error: failure.error,
                final_try: failure.permanent,
            },
        }
    }

    async fn webhook(&self, target: &Target, message: &AlertMessage) -> Result<(), Failure> {
        let body = serde_json::to_string(message).map_err(|error| Failure::permanent(error.to_string()))?;
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            .to_string();
        let secret = target.secret.as_deref().unwrap_or_default();
        let headers = vec![
            ("X-GPUPlane-Delivery", message.delivery_id.clone()),
            ("X-GPUPlane-Event", message.event.kind.to_string()),
            ("X-GPUPlane-Signature", signature(secret, &timestamp, &body)),
            ("X-GPUPlane-Timestamp", timestamp),
        ];
        self.post(target, body, headers).await
    }

    async fn post(&self, target: &Target, body: String, headers: Vec<(&str, String)>) -> Result<(), Failure> {
        let url = target.url.as_deref().unwrap_or_default();
        // A name is checked by the resolver; an address written in the URL here.
        if let Ok(parsed) = url.parse::<reqwest::Url>()
            && let Some(ip) = literal_ip(&parsed)
            && !self.allow_private
            && !public(ip)
        {
            return Err(Failure::permanent(format!("POST {}: {}", host(url), refusal(ip))));
        }
        let mut request = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::USER_AGENT,
                concat!("GPUPlane/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.body(body).send().await.map_err(|error| {
            Failure::transient(format!(
                "POST {}: {}",
                host(url),
                error_chain(&error.without_url())
            ))
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        // Only the status: the receiver's answer is none of the reader's business.
        let error = format!("POST {} answered {status}", host(url));
        // A refusal of the request itself will not change on its own; a
        // server error, a timeout or a rate limit may.
        let permanent = status.is_client_error()
            && status != reqwest::StatusCode::REQUEST_TIMEOUT
            && status != reqwest::StatusCode::TOO_MANY_REQUESTS;
        Err(Failure { error, permanent })
    }

    async fn email(&self, target: &Target, message: &AlertMessage) -> Result<(), Failure> {
        let Some(smtp) = &self.smtp else {
            return Err(Failure::permanent(
                "the server has no smtp_url, so it cannot send email".into(),
            ));
        };
        let parse = |address: &str| {
            address
                .parse::<lettre::message::Mailbox>()
                .map_err(|error| Failure::permanent(format!("`{address}`: {error}")))
        };
        let mut email = lettre::Message::builder()
            .from(parse(&self.from)?)
            .subject(&message.title)
            .header(ContentType::TEXT_PLAIN)
            .message_id(Some(format!("<{}@gpuplane>", message.delivery_id)));
        for address in &target.to {
            email = email.to(parse(address)?);
        }
        let body = format!("{}\n\n{}\n", message.text, message.url);
        let email = email
            .body(body)
            .map_err(|error| Failure::permanent(format!("cannot build the email: {error}")))?;
        smtp.send(email).await.map(|_| ()).map_err(|error| Failure {
            permanent: error.is_permanent(),
            // The mail server's own words may quote the message: its code only.
            error: match error.status() {
                Some(code) => format!("SMTP: the mail server answered {code}"),
                None => format!("SMTP: {}", error_chain(&error)),
            },
        })
    }
}

/// Why a try failed, and whether trying again could help.
struct Failure {
    error: String,
    permanent: bool,
}

impl Failure {
    fn permanent(error: String) -> Failure {
        Failure {
            error,
            permanent: true,
        }
    }

    fn transient(error: String) -> Failure {
        Failure {
            error,
            permanent: false,
        }
    }
}

/// `sha256=` and the hex HMAC-SHA256 of `{timestamp}.{body}`.
pub fn signature(secret: &str, timestamp: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Scheme, host and port of a URL: a webhook's path may carry its secret
/// (Slack's do) and its authority a password, so errors show neither.
fn host(url: &str) -> String {
    match url.parse::<reqwest::Url>() {
        Ok(url) => {
            let host = url.host_str().unwrap_or_default();
            match url.port() {
                Some(port) => format!("{}://{host}:{port}", url.scheme()),
                None => format!("{}://{host}", url.scheme()),
            }
        }
        Err(_) => "the channel's url".into(),
    }
}

/// The address a URL names directly, if it names one.
fn literal_ip(url: &reqwest::Url) -> Option<std::net::IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// A Slack message: title, text and link. `&`, `<` and `>` in what events
/// say are escaped, so a job's text cannot make links or mentions.
fn slack_text(message: &AlertMessage) -> String {
    let escape = |text: &str| {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        "*{}*\n{}\n<{}|Open in GPUPlane>",
        escape(&message.title),
        escape(&message.text),
        message.url
    )
}

/// An error and its causes on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_of_the_timestamp_and_body() {
        // Checked against Python: hmac.new(b"s3cret-s3cret-16", b"1700000000.{}", "sha256").hexdigest()
        assert_eq!(
            signature("s3cret-s3cret-16", "1700000000", "{}"),
            "sha256=c9b5f480e87f56c16e0dd994c7f60398b2f79731089075c3ad172005a83b3bf2"
        );
    }

    #[test]
    fn slack_text_escapes_what_events_say() {
        let event = gpuplane_api::event::Event {
            id: "evt_1".into(),
            time: "2026-12-06T00:00:00Z".into(),
            severity: gpuplane_api::event::Severity::Warning,
            kind: gpuplane_api::event::EventKind::RunAlert,
            job_id: None,
            run_id: None,
            node_id: None,
            message: "x".into(),
        };
        let message = AlertMessage {
            delivery_id: "dlv_1".into(),
            title: "loss <!channel> & <https://evil.example|click>".into(),
            text: "1 < 2 > 0 & <@U123>".into(),
            url: "https://gpuplane.example.com/runs/run_1".into(),
            project: None,
            event,
        };
        assert_eq!(
            slack_text(&message),
            "*loss &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;*\n1 &lt; 2 &gt; 0 &amp; &lt;@U123&gt;\n\
             <https://gpuplane.example.com/runs/run_1|Open in GPUPlane>"
        );
    }

    #[test]
    fn errors_name_the_host_but_never_the_path() {
        assert_eq!(
            host("https://hooks.slack.com/services/T000/B000/SECRET"),
            "https://hooks.slack.com"
        );
        assert_eq!(host("http://127.0.0.1:9000/hook"), "http://127.0.0.1:9000");
        assert_eq!(
            host("https://user:hunter2@hooks.example.com/x"),
            "https://hooks.example.com"
        );
    }
}
