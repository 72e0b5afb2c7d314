//! The agent's HTTP client for the server's `/api/v1/agent/*` routes.

use gpuplane_api::error::ErrorBody;
use reqwest::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached or did not answer.
    #[error("cannot reach the server: {0}")]
    Unreachable(reqwest::Error),
    /// The server refused the agent token: retrying will not help.
    #[error("the server refused the agent token ({status}): {message}")]
    Refused { status: StatusCode, message: String },
    /// The server does not know this node (restarted with a new database, say).
    #[error("the server does not know this node")]
    UnknownNode,
    #[error("the server answered {status}: {message}")]
    Failed { status: StatusCode, message: String },
}

pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    pub fn new(server: &str, token: &str) -> anyhow::Result<Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("gpuplane-agent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Client {
            http,
            base: format!("{}/api/v1", server.trim_end_matches('/')),
            token: token.to_string(),
        })
    }

    /// Streams a file to `/api/v1/{path}` (a full log the server asked
    /// for), with `secrets` masked as it goes.
    pub async fn upload_file(
        &self,
        path: &str,
        file: &std::path::Path,
        secrets: Vec<Vec<u8>>,
    ) -> anyhow::Result<()> {
        use futures_util::StreamExt;
        let body = match tokio::fs::File::open(file).await {
            Ok(file) => {
                let masker = std::sync::Arc::new(std::sync::Mutex::new(crate::mask::Masker::new(secrets)));
                let end = masker.clone();
                let chunks = tokio_util::io::ReaderStream::new(file).map(move |chunk| {
                    chunk.map(|bytes| {
                        let mut masker = masker.lock().unwrap_or_else(|e| e.into_inner());
                        bytes::Bytes::from(masker.push(&bytes))
                    })
                });
                let rest = futures_util::stream::once(async move {
                    let mut masker = end.lock().unwrap_or_else(|e| e.into_inner());
                    Ok::<_, std::io::Error>(bytes::Bytes::from(masker.finish()))
                });
                reqwest::Body::wrap_stream(chunks.chain(rest))
            }
            Err(error) => reqwest::Body::from(format!(
                "[gpuplane-agent: cannot read {}: {error}]\n",
                file.display()
            )),
        };
        let response = self
            .http
            .post(format!("{}/{path}", self.base))
            .bearer_auth(&self.token)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .timeout(Duration::from_secs(3600))
            .body(body)
            .send()
            .await?;
        if !response.status().is_success() {
            anyhow::bail!("the server answered {}", response.status());
        }
        Ok(())
    }

    /// Sends `body` to `/api/v1/{path}` with `method`: the answer's status
    /// and body, or why the server could not be reached.
    pub async fn call<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &B,
    ) -> Result<(StatusCode, bytes::Bytes), reqwest::Error> {
        let response = self
            .http
            .request(method, format!("{}/{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        let status = response.status();
        Ok((status, response.bytes().await?))
    }

    /// POSTs `body` to `/api/v1/{path}` and decodes the answer (`()` for 204).
    pub async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, ClientError> {
        let response = self
            .http
            .post(format!("{}/{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .map_err(ClientError::Unreachable)?;
        let status = response.status();
        if status == StatusCode::NO_CONTENT {
            return serde_json::from_str("null").map_err(|e| ClientError::Failed {
                status,
                message: e.to_string(),
            });
        }
        if status.is_success() {
            return response.json().await.map_err(ClientError::Unreachable);
        }
        let message = match response.json::<ErrorBody>().await {
            Ok(body) => body.error.message,
            Err(_) => status.canonical_reason().unwrap_or("error").to_string(),
        };
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ClientError::Refused { status, message },
            StatusCode::NOT_FOUND => ClientError::UnknownNode,
            _ => ClientError::Failed { status, message },
        })
    }
}
