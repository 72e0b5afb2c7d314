//! Counting failures per key (an account, an IP address) in fixed windows:
//! after `max` failures in `window`, the key is refused until the window
//! ends. The counts live in the database (`rate_limits`), so every replica
//! on one PostgreSQL refuses the same keys. A count the database cannot
//! give refuses (the limit fails closed).

use crate::store::Db;
use crate::store::sql;
use crate::store::time::now_ms;
use std::time::Duration;

/// How long a refusal lasts when the count could not be read.
const UNREADABLE_WAIT: Duration = Duration::from_secs(5);

pub struct Limiter {
    db: Db,
    /// The limit's name in `rate_limits.limiter`.
    name: &'static str,
    max: u32,
    window: Duration,
}

impl Limiter {
    pub fn new(db: &Db, name: &'static str, max: u32, window: Duration) -> Limiter {
        Limiter {
            db: db.clone(),
            name,
            max,
            window,
        }
    }

    /// `Err(wait)` while the key has used up its failures.
    pub async fn check(&self, key: &str) -> Result<(), Duration> {
        let counted: Result<Option<(i64, i64)>, sqlx::Error> = sql!(&self.db, |pool| {
            sqlx::query_as(
                "SELECT failures, window_started_at FROM rate_limits WHERE limiter = $1 AND key = $2",
            )
            .bind(self.name)
            .bind(key)
            .fetch_optional(pool)
            .await
        });
        let window_ms = self.window.as_millis() as i64;
        match counted {
            Ok(Some((failures, started))) if failures >= i64::from(self.max) => {
                let left = started + window_ms - now_ms();
                if left > 0 {
                    Err(Duration::from_millis(left as u64))
                } else {
                    Ok(())
                }
            }
            Ok(_) => Ok(()),
            Err(error) => {
                tracing::error!(%error, limiter = self.name, "cannot read a rate limit; refusing");
                Err(UNREADABLE_WAIT)
            }
        }
    }

    /// Counts one failure of `key`; its window starts with its first failure.
    pub async fn fail(&self, key: &str) {
        let now = now_ms();
        let window_ended = now - self.window.as_millis() as i64;
        let counted = async {
            let mut tx = crate::store::write(&self.db).await?;
            sql!(tx, |conn| {
                sqlx::query(
                    "INSERT INTO rate_limits (limiter, key, failures, window_started_at) VALUES ($1, $2, 1, $3)
                     ON CONFLICT (limiter, key) DO UPDATE SET
                         failures = CASE WHEN rate_limits.window_started_at <= $4 THEN 1
                                         ELSE rate_limits.failures + 1 END,
                         window_started_at = CASE WHEN rate_limits.window_started_at <= $4 THEN $3
                                                  ELSE rate_limits.window_started_at END",
                )
                .bind(self.name)
                .bind(key)
                .bind(now)
                .bind(window_ended)
                .execute(conn)
                .await
                .map(|_| ())
            })?;
            tx.commit().await
        };
        if let Err(error) = counted.await {
            tracing::error!(%error, limiter = self.name, "cannot count a failure");
        }
    }

    /// Forgets the key's failures (after a success).
    pub async fn reset(&self, key: &str) {
        let forgotten = sql!(&self.db, |pool| {
            sqlx::query("DELETE FROM rate_limits WHERE limiter = $1 AND key = $2")
                .bind(self.name)
                .bind(key)
                .execute(pool)
                .await
                .map(|_| ())
        });
        if let Err(error) = forgotten {
            tracing::error!(%error, limiter = self.name, "cannot reset a rate limit");
        }
    }
}

/// Deletes the counts whose windows ended before `before` (ms); run from
/// time to time. Returns how many.
pub async fn delete_ended(db: &Db, before: i64) -> Result<u64, sqlx::Error> {
    sql!(db, |pool| {
        sqlx::query("DELETE FROM rate_limits WHERE window_started_at < $1")
            .bind(before)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_refused_after_max_failures_by_every_limiter_of_that_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::open(dir.path()).await.unwrap();
        let limiter = Limiter::new(&db, "sign_in", 3, Duration::from_secs(60));
        // Another replica's limiter of the same name counts the same failures.
        let other_replica = Limiter::new(&db, "sign_in", 3, Duration::from_secs(60));
        let other_limit = Limiter::new(&db, "user_code", 3, Duration::from_secs(60));
        for _ in 0..3 {
            assert!(limiter.check("alice").await.is_ok());
            other_replica.fail("alice").await;
        }
        let wait = limiter.check("alice").await.unwrap_err();
        assert!(
            wait > Duration::from_secs(50) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        assert!(limiter.check("bob").await.is_ok());
        assert!(other_limit.check("alice").await.is_ok());
        limiter.reset("alice").await;
        assert!(other_replica.check("alice").await.is_ok());
    }

    #[tokio::test]
    async fn a_window_that_ended_starts_the_count_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::open(dir.path()).await.unwrap();
        let limiter = Limiter::new(&db, "sign_in", 2, Duration::from_millis(200));
        limiter.fail("alice").await;
        limiter.fail("alice").await;
        assert!(limiter.check("alice").await.is_err());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(limiter.check("alice").await.is_ok());
        limiter.fail("alice").await;
        assert!(
            limiter.check("alice").await.is_ok(),
            "one failure in the new window"
        );
        assert_eq!(delete_ended(&db, now_ms() + 1).await.unwrap(), 1);
    }
}
