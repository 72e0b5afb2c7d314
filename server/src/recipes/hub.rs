//! The Hugging Face Hub precheck: before an experiment's job queues, every
//! config value a recipe marks as a Hub model or dataset must name a repo
//! the user can read. The Hub lists a gated repo without an error, so
//! access is proven by reading a file the way a download does (`HEAD
//! …/resolve/main/FILE`), with the user's linked token. Answers are cached
//! briefly; a Hub that does not answer in time is a warning, not a hang.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one question to the Hub may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer is reused; a missing answer, less long.
const KEEP: Duration = Duration::from_secs(300);
const KEEP_UNANSWERED: Duration = Duration::from_secs(30);
/// The most answers kept at once.
const MAX_KEPT: usize = 4096;

/// What the Hub said about one repo, for one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It exists and this token (or none) can download from it.
    Readable,
    /// No such repo, or a private one this token cannot see.
    Unknown,
    /// Gated, and this token (or none) has not been granted access.
    Gated,
    /// The Hub did not answer as it does: why.
    Unanswered(String),
}

/// The Hub at `hf_endpoint`, with a short memory.
pub struct Hub {
    endpoint: Option<String>,
    http: reqwest::Client,
    cache: Mutex<HashMap<Asked, (Instant, Verdict)>>,
}

/// One question: the kind, the repo id, and a digest of the token asking.
type Asked = (String, String, String);

impl Hub {
    /// The Hub at `endpoint`; empty: no precheck.
    pub fn new(endpoint: &str) -> Hub {
        let endpoint = endpoint.trim_end_matches('/');
        Hub {
            endpoint: (!endpoint.is_empty()).then(|| endpoint.to_string()),
            http: reqwest::Client::builder()
                .timeout(TIMEOUT)
                // A readable file redirects to a CDN: the redirect is the answer.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client builds"),
            cache: Mutex::default(),
        }
    }

    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The page of a repo, for messages.
    pub fn page(&self, kind: &str, id: &str) -> String {
        let base = self.endpoint.as_deref().unwrap_or("https://huggingface.co");
        match kind {
            "dataset" => format!("{base}/datasets/{id}"),
            _ => format!("{base}/{id}"),
        }
    }

    /// Can `token` (or no token) read `id`, a `model` or `dataset`? None
    /// when the precheck is off.
    pub async fn check(&self, kind: &str, id: &str, token: Option<&str>) -> Option<Verdict> {
        let endpoint = self.endpoint.as_deref()?;
        let fingerprint = token.map_or_else(String::new, |t| hex::encode(Sha256::digest(t.as_bytes())));
        let key = (kind.to_string(), id.to_string(), fingerprint);
        if let Some((at, verdict)) = self.cache.lock().unwrap().get(&key) {
            let keep = if matches!(verdict, Verdict::Unanswered(_)) {
                KEEP_UNANSWERED
            } else {
                KEEP
            };
            if at.elapsed() < keep {
                return Some(verdict.clone());
            }
        }
        let verdict = self.ask(endpoint, kind, id, token).await;
        let mut cache = self.cache.lock().unwrap();
        if cache.len() >= MAX_KEPT {
            // Many ids asked for at once: keep the fresh answers only.
            cache.retain(|_, (at, _)| at.elapsed() < KEEP_UNANSWERED);
            if cache.len() >= MAX_KEPT {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), verdict.clone()));
        Some(verdict)
    }

    async fn ask(&self, endpoint: &str, kind: &str, id: &str, token: Option<&str>) -> Verdict {
        let (api, files) = match kind {
            "dataset" => (
                format!("{endpoint}/api/datasets/{id}"),
                format!("{endpoint}/datasets/{id}/resolve/main"),
            ),
            _ => (
                format!("{endpoint}/api/models/{id}"),
                format!("{endpoint}/{id}/resolve/main"),
            ),
        };
        let authed = |request: reqwest::RequestBuilder| match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let answer = match authed(self.http.get(&api)).send().await {
            Ok(answer) => answer,
            Err(error) => return Verdict::Unanswered(format!("{endpoint} did not answer: {error}")),
        };
        match answer.status().as_u16() {
            200 => {}
            401 | 403 | 404 => return Verdict::Unknown,
            status => return Verdict::Unanswered(format!("{endpoint} answered {status} for {id}")),
        }
        let info: serde_json::Value = match answer.json().await {
            Ok(info) => info,
            Err(error) => {
                return Verdict::Unanswered(format!(
                    "{endpoint} sent an unreadable answer for {id}: {error}"
                ));
            }
        };
        let gated = !matches!(info.get("gated"), None | Some(serde_json::Value::Bool(false)));
        if !gated {
            return Verdict::Readable;
        }
        // Read a file as a download would: a gated repo's list is no proof.
        let names: Vec<&str> = info["siblings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|file| file["rfilename"].as_str())
            .collect();
        let file = ["config.json", "README.md"]
            .into_iter()
            .find(|wanted| names.contains(wanted))
            .or(names.first().copied())
            .unwrap_or("README.md");
        match authed(self.http.head(format!("{files}/{file}"))).send().await {
            Ok(answer) if answer.status().is_success() || answer.status().is_redirection() => {
                Verdict::Readable
            }
            Ok(answer) if matches!(answer.status().as_u16(), 401 | 403) => Verdict::Gated,
            Ok(answer) => Verdict::Unanswered(format!(
                "{endpoint} answered {} for a file of {id}",
                answer.status()
            )),
            Err(error) => Verdict::Unanswered(format!("{endpoint} did not answer: {error}")),
        }
    }

    /// Who the Hub says `token` belongs to: `Ok(None)` when it refuses the
    /// token, `Err` when it does not answer.
    pub async fn whoami(&self, token: &str) -> Result<Option<String>, String> {
        let Some(endpoint) = self.endpoint.as_deref() else {
            return Err("the Hub precheck is off (hf_endpoint is empty)".into());
        };
        let answer = self
            .http
            .get(format!("{endpoint}/api/whoami-v2"))
            .bearer_auth(token)
            .send()
            .await
            .map_err(|error| format!("{endpoint} did not answer: {error}"))?;
        match answer.status().as_u16() {
            200 => {
                let body: serde_json::Value = answer
                    .json()
                    .await
                    .map_err(|error| format!("{endpoint} sent an unreadable answer: {error}"))?;
                Ok(Some(body["name"].as_str().unwrap_or_default().to_string()))
            }
            401 | 403 => Ok(None),
            status => Err(format!("{endpoint} answered {status}")),
        }
    }
}
