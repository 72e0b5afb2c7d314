//! Live streams (SSE) open at once, counted per user and per token, so one
//! caller cannot hold every connection the server has. A stream holds a
//! [`StreamPermit`] for its life; over the limit, a new one gets 429.

use crate::identity::access::Caller;
use crate::store::Error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct StreamCounts {
    open: Mutex<HashMap<String, u32>>,
    /// Streams open on this server, all callers together (`/metrics`).
    total: std::sync::atomic::AtomicU32,
}

/// One open stream; dropping it (the stream ended or the client left) frees its place.
pub struct StreamPermit {
    counts: Arc<StreamCounts>,
    keys: Vec<String>,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        self.counts
            .total
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let mut open = self.counts.open.lock().unwrap_or_else(|e| e.into_inner());
        for key in &self.keys {
            if let Some(count) = open.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    open.remove(key);
                }
            }
        }
    }
}

impl StreamCounts {
    /// Streams open now, all callers together.
    pub fn open(&self) -> u32 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A place for one more stream of `caller`, or 429 when its user or its
    /// token already holds `max`.
    pub fn acquire(self: &Arc<Self>, caller: &Caller, max: u32) -> Result<StreamPermit, Error> {
        let mut keys = vec![format!("token:{}", caller.token_id)];
        if let Some(user_id) = &caller.user_id {
            keys.push(format!("user:{user_id}"));
            if caller.token_id == crate::identity::access::SESSION_TOKEN_ID {
                // A console session is its user.
                keys.remove(0);
            }
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(full) = keys.iter().find(|key| open.get(*key).is_some_and(|n| *n >= max)) {
            let who = if full.starts_with("user:") {
                "your account"
            } else {
                "this token"
            };
            return Err(Error::Limited(format!(
                "{who} already has {max} live streams open (max_streams_per_user); close one and retry"
            )));
        }
        for key in &keys {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        self.total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(StreamPermit {
            counts: self.clone(),
            keys,
        })
    }
}
