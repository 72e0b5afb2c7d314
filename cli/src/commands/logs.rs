//! `gpuctl logs [-f] JOB [--stream S] [-n N] [--attempt N] [--rank N]`.
//!
//! A multi-node job's members each have their own output: `--rank N` shows
//! one member's; without it every member's lines come in arrival order,
//! those of ranks above 0 marked `[rank N]`.
//! Output lines go to stdout or stderr like the job wrote them. `-f` follows
//! over server-sent events and, when the connection drops, reconnects with
//! `Last-Event-ID`, so no line is lost or printed twice. `-n 0` prints the
//! whole files, fetched from the agent. What reaches the terminal keeps its
//! colours and carriage returns but none of the sequences that act on the
//! terminal (`gpuplane_api::terminal::LogFilter`); `--raw` prints the bytes
//! as the job wrote them.

use crate::Output;
use crate::client::{CliError, Client};
use crate::exit::Failure;
use futures_util::StreamExt;
use gpuplane_api::log::{LogLine, LogStream, Logs};
use gpuplane_api::terminal::LogFilter;
use std::io::Write;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    job_id: String,
    /// Keep printing new lines until the job ends.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Only this stream: stdout or stderr.
    #[arg(long, value_parser = parse_stream)]
    stream: Option<LogStream>,
    /// The newest N lines (0: everything, from the agent's files).
    #[arg(short = 'n', long = "lines", default_value_t = 200)]
    lines: i64,
    /// Attempt number (default: the latest; with -f, every attempt).
    #[arg(long)]
    attempt: Option<i64>,
    /// A multi-node job's member (its GPUCTL_NODE_RANK): only its lines,
    /// and with -n 0 the whole files from its node.
    #[arg(long)]
    rank: Option<i64>,
    /// The bytes as the job wrote them, escape sequences that act on the
    /// terminal (titles, clipboard, hyperlinks, cursor reports) included.
    #[arg(long)]
    raw: bool,
}

fn parse_stream(text: &str) -> Result<LogStream, String> {
    match text {
        "stdout" => Ok(LogStream::Stdout),
        "stderr" => Ok(LogStream::Stderr),
        _ => Err(format!("unknown stream `{text}`; expected stdout or stderr")),
    }
}

/// The most lines the server keeps per stream by default; `-n 0 -f` starts there.
const SERVER_TAIL_MAX: i64 = 10_000;

pub async fn run(client: &Client, args: LogsArgs, out: &Output) -> Result<(), CliError> {
    if args.lines < 0 {
        return Err(CliError::new(
            Failure::Invalid,
            "validation_error",
            "-n must be 0 (everything) or more",
        ));
    }
    if args.follow {
        let tail = if args.lines == 0 {
            SERVER_TAIL_MAX
        } else {
            args.lines
        };
        return follow(client, &args, tail, out).await;
    }
    if args.lines == 0 {
        return full(client, &args, out).await;
    }
    let logs: Logs = client.get(&query(&args, "logs", Some(args.lines))).await?;
    if out.json {
        out.emit(&logs, |_| String::new());
    } else {
        if logs.truncated {
            eprintln!("(older lines are on the agent: gpuctl logs -n 0 {})", args.job_id);
        }
        for line in &logs.lines {
            print_line(line, args.raw);
        }
    }
    Ok(())
}

fn query(args: &LogsArgs, route: &str, tail: Option<i64>) -> String {
    let mut path = format!("jobs/{}/{route}?", args.job_id);
    if let Some(stream) = args.stream {
        path.push_str(&format!("stream={}&", stream.as_str()));
    }
    if let Some(attempt) = args.attempt {
        path.push_str(&format!("attempt={attempt}&"));
    }
    if let Some(rank) = args.rank {
        path.push_str(&format!("rank={rank}&"));
    }
    if let Some(tail) = tail {
        path.push_str(&format!("tail={tail}&"));
    }
    path.trim_end_matches(['&', '?']).to_string()
}

/// One line to its stream, made safe for the terminal unless `raw`.
fn print_line(line: &LogLine, raw: bool) {
    let mut text = if raw {
        line.text.clone()
    } else {
        LogFilter::line(&line.text)
    };
    if line.rank > 0 {
        text = format!("[rank {}] {text}", line.rank);
    }
    match line.stream {
        LogStream::Stdout => println!("{text}"),
        LogStream::Stderr => eprintln!("{text}"),
    }
}

/// Both (or the chosen) whole files from the agent; falls back to the
/// server's kept lines, with a warning, when the agent is offline.
async fn full(client: &Client, args: &LogsArgs, out: &Output) -> Result<(), CliError> {
    let streams = match args.stream {
        Some(stream) => vec![stream],
        None => vec![LogStream::Stdout, LogStream::Stderr],
    };
    let mut fetched = Vec::new();
    for stream in streams {
        let mut path = format!("jobs/{}/logs/full?stream={}", args.job_id, stream.as_str());
        if let Some(attempt) = args.attempt {
            path.push_str(&format!("&attempt={attempt}"));
        }
        match client.open_stream(&path, None).await {
            Ok(response) => {
                if out.json {
                    let text = response.text().await.unwrap_or_default();
                    fetched.push((stream, text));
                } else {
                    let mut body = response.bytes_stream();
                    let mut filter = LogFilter::new();
                    while let Some(chunk) = body.next().await {
                        let chunk = chunk
                            .map_err(|e| CliError::new(Failure::Unreachable, "unreachable", e.to_string()))?;
                        let chunk = if args.raw {
                            chunk.to_vec()
                        } else {
                            filter.push(&chunk)
                        };
                        let _ = match stream {
                            LogStream::Stdout => std::io::stdout().write_all(&chunk),
                            LogStream::Stderr => std::io::stderr().write_all(&chunk),
                        };
                    }
                }
            }
            Err(error) if error.failure == Failure::Other && error.error.code == "unavailable" => {
                eprintln!(
                    "warning: {}",
                    gpuplane_api::terminal::visible(&error.error.message)
                );
                let logs: Logs = client.get(&query(args, "logs", Some(SERVER_TAIL_MAX))).await?;
                for line in logs.lines.iter().filter(|l| l.stream == stream) {
                    if out.json {
                        fetched.push((stream, format!("{}\n", line.text)));
                    } else {
                        print_line(line, args.raw);
                    }
                }
            }
            Err(error) => return Err(error),
        }
    }
    if out.json {
        let value: serde_json::Value = fetched
            .into_iter()
            .map(|(stream, text)| (stream.as_str().to_string(), serde_json::Value::String(text)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        out.emit(&value, |_| String::new());
    }
    Ok(())
}

/// Follows over SSE until the job ends, reconnecting with `Last-Event-ID`.
async fn follow(client: &Client, args: &LogsArgs, tail: i64, out: &Output) -> Result<(), CliError> {
    let path = query(args, "logs/stream", Some(tail.min(SERVER_TAIL_MAX)));
    let mut last_id: Option<String> = None;
    let mut failures = 0;
    loop {
        let response = match client.open_stream(&path, last_id.as_deref()).await {
            Ok(response) => response,
            Err(error) if error.failure == Failure::Unreachable && failures < 30 => {
                failures += 1;
                eprintln!(
                    "(connection lost: {}; reconnecting)",
                    gpuplane_api::terminal::visible(&error.error.message)
                );
                tokio::time::sleep(Duration::from_millis(500 * failures.min(10))).await;
                continue;
            }
            Err(error) => return Err(error),
        };
        failures = 0;
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        let mut event = SseEvent::default();
        let mut ended = false;
        let mut broken = false;
        'read: while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else {
                broken = true;
                break;
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(newline) = buffer.find('\n') {
                let line: String = buffer.drain(..=newline).collect();
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    let done = std::mem::take(&mut event);
                    match done.kind.as_str() {
                        "line" => {
                            if let Ok(log_line) = serde_json::from_str::<LogLine>(&done.data) {
                                if out.json {
                                    println!("{}", serde_json::to_string(&log_line).unwrap_or_default());
                                } else {
                                    print_line(&log_line, args.raw);
                                }
                            }
                            if done.id.is_some() {
                                last_id = done.id;
                            }
                        }
                        "end" => {
                            ended = true;
                            if !out.json {
                                eprintln!("(job ended: {})", done.data);
                            }
                            break 'read;
                        }
                        _ => {}
                    }
                } else if let Some(value) = line.strip_prefix("data:") {
                    event.data.push_str(value.strip_prefix(' ').unwrap_or(value));
                } else if let Some(value) = line.strip_prefix("event:") {
                    event.kind = value.trim().to_string();
                } else if let Some(value) = line.strip_prefix("id:") {
                    event.id = Some(value.trim().to_string());
                }
            }
        }
        if ended {
            return Ok(());
        }
        // The server also ends streams now and then (`stream_max_s`): resume quietly.
        if broken {
            eprintln!("(connection lost; reconnecting)");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[derive(Default)]
struct SseEvent {
    kind: String,
    data: String,
    id: Option<String>,
}
