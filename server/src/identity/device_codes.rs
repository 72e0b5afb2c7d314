//! Device authorizations (RFC 8628) as stored: device and user codes only
//! as hashes, the client that asked, and what the approving user decided.
//! The OAuth endpoints and the console's `/device` page (`api/device_login.rs`)
//! speak the protocol; this is its state.

use crate::identity::credentials::hash_token;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};

/// A device authorization to store, codes in clear (only hashes are kept).
pub struct NewAuthorization<'a> {
    pub device_code: &'a str,
    pub user_code: &'a str,
    pub client_id: &'a str,
    pub client_name: &'a str,
    pub client_host: &'a str,
    pub client_ip: &'a str,
    pub interval_s: i64,
    pub created_at: i64,
    pub expires_at: i64,
}

pub async fn insert(db: &Db, new: &NewAuthorization<'_>) -> Result<(), Error> {
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO device_authorizations (id, device_code_hash, user_code_hash, client_id, client_name,
                                                client_host, client_ip, status, interval_s, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10)",
        )
        .bind(new_id("dev"))
        .bind(hash_token(new.device_code))
        .bind(hash_token(new.user_code))
        .bind(new.client_id)
        .bind(new.client_name)
        .bind(new.client_host)
        .bind(new.client_ip)
        .bind(new.interval_s)
        .bind(new.created_at)
        .bind(new.expires_at)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// What a client's poll with its device code finds (RFC 8628 §3.5).
#[derive(Debug, PartialEq, Eq)]
pub enum Poll {
    Unknown,
    /// The code was issued to another client id.
    OtherClient,
    /// A token was handed out for it already.
    Consumed,
    Expired,
    /// Polled faster than the interval, which grows by 5 s.
    SlowDown,
    Denied,
    Pending,
    /// Approved by `user_id`, and now consumed: make the token (once).
    Approved {
        user_id: String,
        client_id: String,
        client_host: String,
    },
}

#[derive(sqlx::FromRow)]
struct Pending {
    id: String,
    client_id: String,
    client_host: String,
    status: String,
    user_id: Option<String>,
    interval_s: i64,
    last_poll_at: Option<i64>,
    expires_at: i64,
}

/// A poll by `client_id` (when it names one) with `device_code` at `now`,
/// in one transaction: the poll time is kept, and an approved request is
/// consumed.
pub async fn poll(db: &Db, device_code: &str, client_id: Option<&str>, now: i64) -> Result<Poll, Error> {
    let mut tx = crate::store::write(db).await?;
    let pending: Option<Pending> = sql!(tx, |conn| {
        sqlx::query_as(
            "SELECT id, client_id, client_host, status, user_id, interval_s, last_poll_at, expires_at
             FROM device_authorizations WHERE device_code_hash = $1",
        )
        .bind(hash_token(device_code))
        .fetch_optional(conn)
        .await
    })?;
    let Some(pending) = pending else {
        return Ok(Poll::Unknown);
    };
    if client_id.is_some_and(|id| id != pending.client_id) {
        return Ok(Poll::OtherClient);
    }
    if pending.status == "consumed" {
        return Ok(Poll::Consumed);
    }
    if now >= pending.expires_at {
        return Ok(Poll::Expired);
    }
    if let Some(last) = pending.last_poll_at
        && now - last < pending.interval_s * 1000
    {
        sql!(tx, |conn| {
            sqlx::query("UPDATE device_authorizations SET interval_s = interval_s + 5, last_poll_at = $1 WHERE id = $2")
                .bind(now)
                .bind(&pending.id)
                .execute(conn)
                .await
                .map(|_| ())
        })?;
        tx.commit().await?;
        return Ok(Poll::SlowDown);
    }
    sql!(tx, |conn| {
        sqlx::query("UPDATE device_authorizations SET last_poll_at = $1 WHERE id = $2")
            .bind(now)
            .bind(&pending.id)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    let found = match (pending.status.as_str(), pending.user_id) {
        ("denied", _) => Poll::Denied,
        ("approved", Some(user_id)) => {
            sql!(tx, |conn| {
                sqlx::query("UPDATE device_authorizations SET status = 'consumed' WHERE id = $1")
                    .bind(&pending.id)
                    .execute(conn)
                    .await
                    .map(|_| ())
            })?;
            Poll::Approved {
                user_id,
                client_id: pending.client_id,
                client_host: pending.client_host,
            }
        }
        _ => Poll::Pending,
    };
    tx.commit().await?;
    Ok(found)
}

/// A request as its user code finds it, for the approving user to check.
#[derive(sqlx::FromRow)]
pub struct Request {
    pub client_name: String,
    pub client_host: String,
    pub client_ip: String,
    pub status: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// The request a (normalised) user code names, expired or not.
pub async fn by_user_code(db: &Db, user_code: &str) -> Result<Option<Request>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT client_name, client_host, client_ip, status, created_at, expires_at
             FROM device_authorizations WHERE user_code_hash = $1",
        )
        .bind(hash_token(user_code))
        .fetch_optional(pool)
        .await
    })?)
}

/// Approves or denies the pending, unexpired request a (normalised) user
/// code names, for `user_id`; false when there is none.
pub async fn decide(db: &Db, user_code: &str, user_id: &str, approve: bool) -> Result<bool, Error> {
    let now = now_ms();
    let decided = sql!(db, |pool| {
        sqlx::query(
            "UPDATE device_authorizations SET status = $1, user_id = $2, decided_at = $3
             WHERE user_code_hash = $4 AND status = 'pending' AND expires_at > $5",
        )
        .bind(if approve { "approved" } else { "denied" })
        .bind(user_id)
        .bind(now)
        .bind(hash_token(user_code))
        .bind(now)
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(decided == 1)
}

/// Deletes device authorizations that expired more than a day ago (run from time to time).
pub async fn delete_expired(db: &Db) {
    let day_ago = now_ms() - 24 * 3600 * 1000;
    if let Err(error) = sql!(db, |pool| {
        sqlx::query("DELETE FROM device_authorizations WHERE expires_at < $1")
            .bind(day_ago)
            .execute(pool)
            .await
            .map(|_| ())
    }) {
        tracing::warn!(%error, "cannot delete expired device authorizations");
    }
}
