//! `gpuctl mcp`: MCP over stdio for assistants that start a local process.
//! It relays each message between stdin/stdout (one JSON-RPC message per
//! line) and the server's `/mcp` (streamable HTTP) with the CLI's token, so
//! the tools, their scopes and their answers are the server's own.

use crate::client::{CliError, Client};
use crate::exit::Failure;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// The metadata key a 2026-07-28 request names its protocol version in.
const PROTOCOL_META: &str = "io.modelcontextprotocol/protocolVersion";

/// What the relay learnt from the server: the session and protocol version.
#[derive(Default)]
struct Session {
    id: Option<String>,
    protocol_version: Option<String>,
}

pub async fn run(client: Client) -> Result<(), CliError> {
    if !client.has_token() {
        return Err(CliError::new(
            Failure::Unauthenticated,
            "unauthorized",
            "not signed in: run `gpuctl login`, or set GPUCTL_TOKEN",
        ));
    }
    // Refuse a token the server refuses now, rather than on the first tool call.
    let _: Value = client.get("auth/whoami").await?;
    eprintln!("gpuctl mcp: relaying MCP between stdio and {}/mcp", client.server);

    let client = Arc::new(client);
    let session = Arc::new(Mutex::new(Session::default()));
    // Standard input and output are read and written by their own threads:
    // one message per line, each written whole.
    let (lines_out, mut lines) = mpsc::unbounded_channel::<String>();
    let writer = std::thread::spawn(move || {
        let mut stdout = std::io::stdout().lock();
        while let Some(line) = lines.blocking_recv() {
            if writeln!(stdout, "{line}").is_err() || stdout.flush().is_err() {
                break;
            }
        }
    });
    let (lines_in, mut input) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_in.send(line).is_err() {
                break;
            }
        }
    });
    let mut in_flight = Vec::new();
    while let Some(line) = input.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        let (client, session, out) = (client.clone(), session.clone(), lines_out.clone());
        in_flight.push(tokio::spawn(async move {
            relay(&client, &session, &line, &out).await
        }));
        in_flight.retain(|task| !task.is_finished());
    }
    for task in in_flight {
        let _ = task.await;
    }
    drop(lines_out);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    Ok(())
}

/// Sends one message to the server and writes every message of its answer.
async fn relay(client: &Client, session: &Mutex<Session>, line: &str, out: &mpsc::UnboundedSender<String>) {
    let message: Value = match serde_json::from_str(line) {
        Ok(message) => message,
        Err(error) => {
            let _ = out.send(rpc_error(&Value::Null, -32700, &format!("not JSON: {error}")));
            return;
        }
    };
    let id = message.get("id").cloned();
    let mut headers = routing_headers(&message);
    {
        let session = session.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(session_id) = &session.id {
            headers.push(("Mcp-Session-Id", session_id.clone()));
        }
        let version = message["params"]["_meta"][PROTOCOL_META]
            .as_str()
            .map(str::to_string)
            .or_else(|| session.protocol_version.clone());
        if let Some(version) = version {
            headers.push(("MCP-Protocol-Version", version));
        }
    }
    let response = match client.post_mcp(line.to_string(), &headers).await {
        Ok(response) => response,
        Err(error) => return answer_error(out, id.as_ref(), &error.error.message),
    };
    if let Some(session_id) = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        session.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).id = Some(session_id.to_string());
    }
    let status = response.status();
    let is_stream = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if is_stream {
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            buffer.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if !data.is_empty() && !data.join("").trim().is_empty() {
                    forward(session, out, &data.join("\n"));
                }
            }
        }
        return;
    }
    let bytes = response.bytes().await.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    if text.trim().is_empty() {
        if !status.is_success() {
            answer_error(out, id.as_ref(), &format!("the server answered {status}"));
        }
        return;
    }
    match serde_json::from_str::<Value>(&text) {
        // A JSON-RPC answer, whatever the HTTP status.
        Ok(answer) if answer.get("jsonrpc").is_some() => forward(session, out, &text),
        // The API's error shape (401 for a revoked token, 403 for an sdk one).
        Ok(answer) => {
            let message = answer["error"]["message"].as_str().map(str::to_string);
            answer_error(
                out,
                id.as_ref(),
                &format!("{status}: {}", message.unwrap_or_else(|| text.to_string())),
            );
        }
        Err(_) => answer_error(out, id.as_ref(), &format!("{status}: {text}")),
    }
}

/// The headers that name a message's method and target outside its body
/// (`Mcp-Method`, `Mcp-Name`: SEP-2243, required from protocol 2026-07-28).
fn routing_headers(message: &Value) -> Vec<(&'static str, String)> {
    let Some(method) = message["method"].as_str() else {
        return Vec::new();
    };
    let mut headers = vec![("Mcp-Method", header_text(method))];
    let name_key = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(name) = name_key.and_then(|key| message["params"][key].as_str()) {
        headers.push(("Mcp-Name", header_text(name)));
    }
    headers
}

/// `value` as a header value: as it is when it is plain printable ASCII,
/// else Base64 in the `=?base64?…?=` form the protocol defines.
fn header_text(value: &str) -> String {
    use base64::Engine;
    // Tabs and control characters fall outside ' '..='~'.
    let needs_base64 = value.starts_with(' ')
        || value.ends_with(' ')
        || !value.chars().all(|c| (' '..='~').contains(&c))
        || (value.starts_with("=?base64?") && value.ends_with("?="));
    if needs_base64 {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    } else {
        value.to_string()
    }
}

/// Writes one message from the server, noting the protocol version an
/// `initialize` answer settles.
fn forward(session: &Mutex<Session>, out: &mpsc::UnboundedSender<String>, text: &str) {
    match serde_json::from_str::<Value>(text) {
        Ok(message) => {
            if let Some(version) = message["result"]["protocolVersion"].as_str() {
                session
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .protocol_version = Some(version.to_string());
            }
            let _ = out.send(message.to_string());
        }
        Err(error) => eprintln!("gpuctl mcp: the server sent something that is not JSON: {error}"),
    }
}

/// Answers a request the server did not answer; a notification only logs.
fn answer_error(out: &mpsc::UnboundedSender<String>, id: Option<&Value>, message: &str) {
    match id {
        Some(id) => {
            let _ = out.send(rpc_error(id, -32603, message));
        }
        None => eprintln!("gpuctl mcp: {message}"),
    }
}

fn rpc_error(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}
