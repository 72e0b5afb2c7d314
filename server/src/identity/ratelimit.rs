//! Counting failures per key (an account, an IP address) in fixed windows:
//! after `max` failures in `window`, the key is refused until the window ends.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Limiter {
    max: u32,
    window: Duration,
    failures: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Limiter {
    pub fn new(max: u32, window: Duration) -> Limiter {
        Limiter {
            max,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(wait)` while the key has used up its failures.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match failures.get(key) {
            Some((count, start)) if *count >= self.max && start.elapsed() < self.window => {
                Err(self.window - start.elapsed())
            }
            _ => Ok(()),
        }
    }

    pub fn fail(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() > 100_000 {
            // Keep memory bounded under a flood: drop expired windows.
            failures.retain(|_, (_, start)| start.elapsed() < self.window);
        }
        let entry = failures.entry(key.to_string()).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= self.window {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }

    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_refused_after_max_failures_and_others_are_not() {
        let limiter = Limiter::new(3, Duration::from_secs(60));
        for _ in 0..3 {
            assert!(limiter.check("alice").is_ok());
            limiter.fail("alice");
        }
        assert!(limiter.check("alice").is_err());
        assert!(limiter.check("bob").is_ok());
        limiter.reset("alice");
        assert!(limiter.check("alice").is_ok());
    }
}
