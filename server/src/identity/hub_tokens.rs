//! Each user's Hugging Face Hub token (`gpuctl hf link`): a secret that
//! belongs to that user. Stored sealed with the server's key and bound to
//! the user's id, so a copied row opens for no one else; never shown back.

use crate::identity::secrets::SecretKey;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};

/// The name a hub token is sealed under: no job variable can have it.
const SEALED_NAME: &str = "hub:token";

fn context(user_id: &str) -> String {
    format!("user:{user_id}")
}

/// Links (or replaces) the user's token; `hub_user` is who the Hub says it is.
pub async fn link(
    db: &Db,
    secret: &SecretKey,
    user_id: &str,
    token: &str,
    hub_user: Option<&str>,
) -> Result<(), Error> {
    let sealed = secret.seal(&context(user_id), SEALED_NAME, token);
    sql!(db, |pool| {
        sqlx::query(
            "INSERT INTO hub_tokens (user_id, sealed, hub_user, linked_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (user_id) DO UPDATE SET sealed = excluded.sealed, hub_user = excluded.hub_user,
                                                 linked_at = excluded.linked_at",
        )
        .bind(user_id)
        .bind(&sealed)
        .bind(hub_user)
        .bind(now_ms())
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// Forgets the user's token; whether there was one.
pub async fn unlink(db: &Db, user_id: &str) -> Result<bool, Error> {
    let removed = sql!(db, |pool| {
        sqlx::query("DELETE FROM hub_tokens WHERE user_id = $1")
            .bind(user_id)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(removed > 0)
}

/// When the user linked a token, and the Hub's name for it.
pub async fn linked(db: &Db, user_id: &str) -> Result<Option<(i64, Option<String>)>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as("SELECT linked_at, hub_user FROM hub_tokens WHERE user_id = $1")
            .bind(user_id)
            .fetch_optional(pool)
            .await
    })?)
}

/// The user's token, opened; none when there is none (or it does not open
/// with this server's key).
pub async fn token(db: &Db, secret: &SecretKey, user_id: &str) -> Result<Option<String>, Error> {
    let sealed: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT sealed FROM hub_tokens WHERE user_id = $1")
            .bind(user_id)
            .fetch_optional(pool)
            .await
    })?;
    Ok(sealed.and_then(|sealed| secret.open(&context(user_id), SEALED_NAME, &sealed)))
}
