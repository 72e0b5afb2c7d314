//! The ordered queue of what the agent observed, sent to the server in
//! batches and retried until acknowledged, so nothing is lost or reordered
//! while the server is away. Attempts can wait until an item is delivered.
//!
//! Items are kept well below the server's body limit: output lines and
//! metric points are split into several items as they are queued. If the
//! server still refuses a batch for good (413 too large, 422 invalid), its
//! items are sent one at a time, and an item refused on its own is replaced
//! by a `REPORT_DROPPED` notice naming the job and what was dropped, so one
//! bad item never blocks the items behind it. A job's start, failed start
//! and exit are never dropped: an exit loses only its evaluation result,
//! and otherwise they are retried like any undelivered report.

use crate::client::{Client, ClientError};
use gpuplane_api::agent::{Report, ReportItem};
use gpuplane_api::evaluation::ResultFile;
use gpuplane_api::event::EventKind;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// Roughly how many bytes of JSON go into one report.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_ITEMS: usize = 500;
/// Lines and points items are split to stay under this many bytes of JSON.
const ITEM_BYTES: usize = 256 << 10;

struct Queued {
    seq: u64,
    item: ReportItem,
    bytes: usize,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Queued>,
    /// Items up to this sequence number go one per report (a batch of them was refused).
    one_by_one_until: u64,
}

pub struct Reporter {
    queue: Mutex<Queue>,
    next_seq: Mutex<u64>,
    queued_lines: Mutex<usize>,
    delivered: watch::Sender<u64>,
    wake: Notify,
    node_id: watch::Sender<Option<String>>,
    /// Set when the server no longer knows the node: the agent must say hello again.
    pub forgotten: Notify,
}

impl Reporter {
    pub fn new() -> Reporter {
        Reporter {
            queue: Mutex::new(Queue::default()),
            next_seq: Mutex::new(1),
            queued_lines: Mutex::new(0),
            delivered: watch::channel(0).0,
            wake: Notify::new(),
            node_id: watch::channel(None).0,
            forgotten: Notify::new(),
        }
    }

    /// The node id of the current session, once the server said hello.
    pub fn node_id(&self) -> Option<String> {
        self.node_id.borrow().clone()
    }

    pub fn set_node(&self, node_id: &str) {
        self.node_id.send_replace(Some(node_id.to_string()));
        self.wake.notify_one();
    }

    /// Queues an item (split into several when it is large); returns the
    /// sequence number of its last part.
    pub fn push(&self, item: ReportItem) -> u64 {
        let parts = split(item);
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = self.next_seq.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = 0;
        for item in parts {
            if let ReportItem::Lines { lines: text, .. } = &item {
                lines += text.len();
            }
            let bytes = json_size(&item);
            queue.items.push_back(Queued {
                seq: *next,
                item,
                bytes,
            });
            *next += 1;
        }
        let last = *next - 1;
        drop(next);
        drop(queue);
        *self.queued_lines.lock().unwrap_or_else(|e| e.into_inner()) += lines;
        self.wake.notify_one();
        last
    }

    /// Output lines waiting to be sent (readers pause when this is large).
    pub fn backlog(&self) -> usize {
        *self.queued_lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the item with sequence number `seq` has been acknowledged.
    pub fn is_delivered(&self, seq: u64) -> bool {
        *self.delivered.borrow() >= seq
    }

    /// Waits until the item with sequence number `seq` has been acknowledged.
    pub async fn delivered(&self, seq: u64) {
        let mut receiver = self.delivered.subscribe();
        let _ = receiver.wait_for(|delivered| *delivered >= seq).await;
    }

    /// Sends queued items forever, in order, retrying with backoff.
    pub async fn run(&self, client: &Client) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let node_id = self.node_id.borrow().clone();
            let batch = match node_id {
                Some(node_id) => self.batch(&node_id),
                None => None,
            };
            let Some((report, last_seq, count)) = batch else {
                self.wake.notified().await;
                continue;
            };
            match client.post::<_, ()>("agent/report", &report).await {
                Ok(()) => {
                    self.acknowledge(count);
                    self.delivered.send_replace(last_seq);
                    backoff = Duration::from_millis(100);
                }
                Err(ClientError::UnknownNode) => {
                    self.forgotten.notify_one();
                    tokio::time::sleep(backoff).await;
                }
                Err(ClientError::Failed { status, message }) if refused_for_good(status) => {
                    tracing::warn!(%status, message, items = count, "the server refused a report");
                    if !self.refused(count, last_seq, &format!("{status}: {message}")) {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, retry_in = ?backoff, "report not delivered");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    fn batch(&self, node_id: &str) -> Option<(Report, u64, usize)> {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut items = Vec::new();
        let mut bytes = 0;
        let mut last_seq = 0;
        for queued in queue.items.iter() {
            let one_by_one = queued.seq <= queue.one_by_one_until;
            if !items.is_empty()
                && (one_by_one || bytes + queued.bytes > BATCH_BYTES || items.len() >= BATCH_ITEMS)
            {
                break;
            }
            bytes += queued.bytes;
            last_seq = queued.seq;
            items.push(queued.item.clone());
        }
        if items.is_empty() {
            return None;
        }
        let count = items.len();
        let report = Report {
            node_id: node_id.to_string(),
            items,
        };
        Some((report, last_seq, count))
    }

    /// The server refused the first `count` items for good: send them one at
    /// a time to find the culprit; a lone refused item is replaced by what
    /// can still be said about it. Returns false when the item must simply be
    /// tried again later (a job's start or exit is never given up).
    fn refused(&self, count: usize, last_seq: u64, why: &str) -> bool {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if count > 1 {
            queue.one_by_one_until = queue.one_by_one_until.max(last_seq);
            return true;
        }
        let Some(front) = queue.items.front_mut() else {
            return true;
        };
        let lines = match &front.item {
            ReportItem::Lines { lines, .. } => lines.len(),
            _ => 0,
        };
        match refusal(&front.item, why) {
            Refusal::Retry => {
                tracing::warn!(
                    why,
                    "the server refused {}; trying again later",
                    describe(&front.item)
                );
                return false;
            }
            Refusal::Replace(item) => {
                tracing::warn!(why, "replacing a refused report item: {}", describe(&front.item));
                front.bytes = json_size(&item);
                front.item = item;
            }
            Refusal::Drop => {
                tracing::warn!(why, "dropping a refused report item: {}", describe(&front.item));
                let seq = front.seq;
                queue.items.pop_front();
                drop(queue);
                self.delivered.send_replace(seq);
            }
        }
        let mut queued = self.queued_lines.lock().unwrap_or_else(|e| e.into_inner());
        *queued = queued.saturating_sub(lines);
        true
    }

    fn acknowledge(&self, count: usize) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = 0;
        for _ in 0..count {
            if let Some(Queued {
                item: ReportItem::Lines { lines: sent, .. },
                ..
            }) = queue.items.pop_front()
            {
                lines += sent.len();
            }
        }
        drop(queue);
        let mut queued = self.queued_lines.lock().unwrap_or_else(|e| e.into_inner());
        *queued = queued.saturating_sub(lines);
    }
}

impl Default for Reporter {
    fn default() -> Self {
        Reporter::new()
    }
}

/// A refusal that retrying the same body will not change: too large, or
/// invalid. (Anything else, a proxy's error page say, is retried.)
fn refused_for_good(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 413 | 422)
}

/// What becomes of an item the server refused on its own.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// Send this instead.
    Replace(ReportItem),
    /// Give it up.
    Drop,
    /// Keep it and try again later.
    Retry,
}

/// An exit loses its evaluation result (the job must still end); a job's
/// start, failed start or bare exit is kept; a notice that was itself
/// refused is dropped; anything else becomes a notice naming what was dropped.
fn refusal(item: &ReportItem, why: &str) -> Refusal {
    match item {
        ReportItem::Exited {
            eval_result: Some(ResultFile::Text { path, .. }),
            ..
        } => {
            let mut item = item.clone();
            if let ReportItem::Exited { eval_result, .. } = &mut item {
                *eval_result = Some(ResultFile::Unreadable {
                    path: path.clone(),
                    reason: format!("the server refused it ({why})"),
                });
            }
            Refusal::Replace(item)
        }
        ReportItem::Started { .. } | ReportItem::DispatchFailed { .. } | ReportItem::Exited { .. } => {
            Refusal::Retry
        }
        // A newer reason follows, or the start does.
        ReportItem::Waiting { .. } => Refusal::Drop,
        ReportItem::Notice { .. } => Refusal::Drop,
        other => {
            let (job_id, attempt) = other.attempt();
            Refusal::Replace(ReportItem::Notice {
                job_id: job_id.to_string(),
                attempt,
                kind: EventKind::ReportDropped,
                message: format!(
                    "the server refused {} of job {job_id} attempt {attempt} ({why}); the agent dropped it so the rest \
                     of the job's reports go on",
                    describe(other)
                ),
                severity: None,
            })
        }
    }
}

/// An item in a few words, for notices and the agent's log.
fn describe(item: &ReportItem) -> String {
    match item {
        ReportItem::Lines {
            stream,
            first_n,
            lines,
            ..
        } => {
            let bytes: usize = lines.iter().map(String::len).sum();
            let last = first_n + lines.len() as i64 - 1;
            format!(
                "{} line(s) {first_n}-{last} ({bytes} bytes; the file on the agent host keeps them)",
                stream.as_str()
            )
        }
        ReportItem::Points { batch_id, points, .. } => {
            format!("{} TensorBoard metric points (batch {batch_id})", points.len())
        }
        ReportItem::Checkpoint { path, .. } => format!("the checkpoint record of {path}"),
        ReportItem::Config { config, .. } => format!("{} TensorBoard hyperparameters", config.len()),
        ReportItem::Started { .. } => "its start".into(),
        ReportItem::Waiting { .. } => "its queued reason".into(),
        ReportItem::DispatchFailed { .. } => "its dispatch failure".into(),
        ReportItem::Exited { .. } => "its exit".into(),
        ReportItem::Notice { .. } => "a notice".into(),
        ReportItem::Disk { .. } => "a disk reading".into(),
    }
}

/// Splits lines and points items so each part stays under [`ITEM_BYTES`]
/// of JSON. Parts of a points batch get ids derived from the batch's, the
/// same each time, so a resent batch is still recognised by the server.
fn split(item: ReportItem) -> Vec<ReportItem> {
    match item {
        ReportItem::Lines {
            job_id,
            attempt,
            stream,
            first_n,
            time,
            lines,
        } => {
            let mut parts: Vec<Vec<String>> = Vec::new();
            let mut part = Vec::new();
            let mut bytes = 0;
            for line in lines {
                let size = json_str_size(&line) + 1;
                if !part.is_empty() && bytes + size > ITEM_BYTES {
                    parts.push(std::mem::take(&mut part));
                    bytes = 0;
                }
                bytes += size;
                part.push(line);
            }
            parts.push(part);
            let mut first = first_n;
            parts
                .into_iter()
                .map(|lines| {
                    let first_n = first;
                    first += lines.len() as i64;
                    ReportItem::Lines {
                        job_id: job_id.clone(),
                        attempt,
                        stream,
                        first_n,
                        time,
                        lines,
                    }
                })
                .collect()
        }
        ReportItem::Points {
            job_id,
            attempt,
            batch_id,
            points,
        } => {
            let mut parts: Vec<Vec<gpuplane_api::metric::Point>> = Vec::new();
            let mut part = Vec::new();
            let mut bytes = 0;
            for point in points {
                let size = json_str_size(&point.key) + 64;
                if !part.is_empty() && bytes + size > ITEM_BYTES {
                    parts.push(std::mem::take(&mut part));
                    bytes = 0;
                }
                bytes += size;
                part.push(point);
            }
            parts.push(part);
            let whole = parts.len() == 1;
            parts
                .into_iter()
                .enumerate()
                .map(|(i, points)| ReportItem::Points {
                    job_id: job_id.clone(),
                    attempt,
                    batch_id: if whole {
                        batch_id.clone()
                    } else {
                        format!("{batch_id}#{}", i + 1)
                    },
                    points,
                })
                .collect()
        }
        other => vec![other],
    }
}

/// The size of an item as JSON: exact for lines (the bulk of reports),
/// a close estimate for the rest.
fn json_size(item: &ReportItem) -> usize {
    match item {
        ReportItem::Lines { lines, .. } => 128 + lines.iter().map(|l| json_str_size(l) + 1).sum::<usize>(),
        ReportItem::Points { points, .. } => {
            128 + points.iter().map(|p| json_str_size(&p.key) + 64).sum::<usize>()
        }
        ReportItem::Exited {
            eval_result: Some(ResultFile::Text { text, .. }),
            ..
        } => 256 + json_str_size(text),
        ReportItem::Notice { message, .. } => 128 + json_str_size(message),
        ReportItem::DispatchFailed { detail, .. } => 128 + json_str_size(detail),
        ReportItem::Waiting { reason, .. } => 128 + json_str_size(reason),
        ReportItem::Checkpoint { path, .. } => 192 + json_str_size(path),
        _ => 256,
    }
}

/// The length of `text` as a JSON string, quotes and escapes included.
fn json_str_size(text: &str) -> usize {
    2 + text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuplane_api::log::LogStream;
    use gpuplane_api::metric::{Point, Value};

    fn lines(first_n: i64, lines: Vec<String>) -> ReportItem {
        ReportItem::Lines {
            job_id: "job_1".into(),
            attempt: 1,
            stream: LogStream::Stdout,
            first_n,
            time: 0,
            lines,
        }
    }

    #[test]
    fn json_sizes_count_escapes() {
        assert_eq!(json_str_size("ab"), 4);
        assert_eq!(json_str_size("a\"\n"), 7);
        assert_eq!(json_str_size("\u{1}"), 8);
        assert_eq!(
            json_str_size("\u{1}\u{1f}\"\\x"),
            serde_json::to_string("\u{1}\u{1f}\"\\x").unwrap().len()
        );
    }

    #[test]
    fn large_line_items_split_into_consecutive_parts_under_the_item_size() {
        let line = "\u{7}".repeat(16 * 1024);
        let item = lines(7, vec![line; 40]);
        let parts = split(item);
        assert!(parts.len() > 1);
        let mut next = 7;
        for part in &parts {
            let ReportItem::Lines { first_n, lines, .. } = part else {
                panic!("not lines")
            };
            assert_eq!(*first_n, next);
            next += lines.len() as i64;
            let encoded = serde_json::to_string(part).unwrap().len();
            assert!(encoded <= ITEM_BYTES + 1024, "{encoded}");
            assert!(
                json_size(part) >= encoded - 64,
                "the estimate is close: {} vs {encoded}",
                json_size(part)
            );
        }
        assert_eq!(next, 47);
    }

    #[test]
    fn large_point_batches_split_with_stable_ids() {
        let points: Vec<Point> = (0..20_000)
            .map(|step| Point {
                key: "train/loss".into(),
                step,
                wall_time: 0.0,
                value: Value(0.5),
            })
            .collect();
        let item = ReportItem::Points {
            job_id: "job_1".into(),
            attempt: 1,
            batch_id: "tb:x:0-99".into(),
            points,
        };
        let first = split(item.clone());
        let again = split(item);
        assert!(first.len() > 1);
        assert_eq!(first, again, "a resent batch splits the same way");
        let mut total = 0;
        for (i, part) in first.iter().enumerate() {
            let ReportItem::Points { batch_id, points, .. } = part else {
                panic!("not points")
            };
            assert_eq!(batch_id, &format!("tb:x:0-99#{}", i + 1));
            total += points.len();
        }
        assert_eq!(total, 20_000);
    }

    #[test]
    fn a_refused_item_becomes_a_notice_and_an_exit_keeps_its_code() {
        let refused = lines(3, vec!["x".into(); 2]);
        let Refusal::Replace(ReportItem::Notice { kind, message, .. }) = refusal(&refused, "413: too large")
        else {
            panic!("a notice")
        };
        assert_eq!(kind, EventKind::ReportDropped);
        assert!(
            message.contains("stdout line(s) 3-4") && message.contains("job_1"),
            "{message}"
        );
        let exit = ReportItem::Exited {
            job_id: "job_1".into(),
            attempt: 1,
            exit_code: Some(0),
            signal: None,
            oom_killed: false,
            cancelled: false,
            timed_out: false,
            lost: None,
            time: 0,
            eval_result: Some(ResultFile::Text {
                path: "/x/result.json".into(),
                text: "huge".into(),
            }),
        };
        let Refusal::Replace(stripped) = refusal(&exit, "413: too large") else {
            panic!("the exit stays")
        };
        let ReportItem::Exited {
            exit_code,
            eval_result: Some(ResultFile::Unreadable { reason, .. }),
            ..
        } = &stripped
        else {
            panic!("the exit keeps its code and loses its result")
        };
        assert_eq!(*exit_code, Some(0));
        assert_eq!(
            refusal(&stripped, "413"),
            Refusal::Retry,
            "an exit is never dropped"
        );
        assert!(reason.contains("refused"));
    }
}
