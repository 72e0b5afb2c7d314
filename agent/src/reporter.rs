//! The ordered queue of what the agent observed, sent to the server in
//! batches and retried until acknowledged, so nothing is lost or reordered
//! while the server is away. Attempts can wait until an item is delivered.

use crate::client::{Client, ClientError};
use gpuplane_api::agent::{Report, ReportItem};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// Roughly how many bytes of lines go into one report.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_ITEMS: usize = 500;

pub struct Reporter {
    queue: Mutex<VecDeque<(u64, ReportItem, usize)>>,
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
            queue: Mutex::new(VecDeque::new()),
            next_seq: Mutex::new(1),
            queued_lines: Mutex::new(0),
            delivered: watch::channel(0).0,
            wake: Notify::new(),
            node_id: watch::channel(None).0,
            forgotten: Notify::new(),
        }
    }

    pub fn set_node(&self, node_id: &str) {
        self.node_id.send_replace(Some(node_id.to_string()));
        self.wake.notify_one();
    }

    /// Queues an item; returns its sequence number.
    pub fn push(&self, item: ReportItem) -> u64 {
        let (lines, bytes) = match &item {
            ReportItem::Lines { lines, .. } => (lines.len(), lines.iter().map(|l| l.len() + 8).sum()),
            _ => (0, 128),
        };
        let seq = {
            let mut next = self.next_seq.lock().unwrap_or_else(|e| e.into_inner());
            let seq = *next;
            *next += 1;
            seq
        };
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back((seq, item, bytes));
        *self.queued_lines.lock().unwrap_or_else(|e| e.into_inner()) += lines;
        self.wake.notify_one();
        seq
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
        for (seq, item, size) in queue.iter() {
            if !items.is_empty() && (bytes + size > BATCH_BYTES || items.len() >= BATCH_ITEMS) {
                break;
            }
            bytes += size;
            last_seq = *seq;
            items.push(item.clone());
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

    fn acknowledge(&self, count: usize) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = 0;
        for _ in 0..count {
            if let Some((_, ReportItem::Lines { lines: sent, .. }, _)) = queue.pop_front() {
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
