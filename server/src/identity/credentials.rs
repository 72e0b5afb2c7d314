//! Credentials people and programs present, and how they are kept: a
//! token is 256 random bits shown once, and the database keeps only its
//! SHA-256 (enough for a secret of that entropy, and lookups use an index);
//! passwords are argon2 hashes.

use crate::store::Db;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::now_ms;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine;
use gpuplane_api::auth::Scope;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Every token starts with this, so leaked tokens are easy to recognise in logs and scanners.
pub const TOKEN_PREFIX: &str = "gpp_";

/// A new secret token: the prefix and 256 random bits, base64url.
pub fn generate_token() -> String {
    generate_secret(TOKEN_PREFIX)
}

/// `prefix` and 256 random bits, base64url: a secret to keep only hashed.
pub fn generate_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// Hex SHA-256 of a token, the only form in which tokens are stored.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt =
        SaltString::encode_b64(&salt).map_err(|error| anyhow::anyhow!("cannot encode salt: {error}"))?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| anyhow::anyhow!("cannot hash password: {error}"))
}

pub fn verify_password(password: &str, stored: &str) -> bool {
    PasswordHash::new(stored)
        .map(|hash| {
            argon2::Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A token to create: who owns it and what it may do.
pub struct NewToken<'a> {
    pub user_id: Option<&'a str>,
    pub name: &'a str,
    pub scope: Scope,
    pub expires_at: Option<i64>,
    /// Limits the token to one project.
    pub project: Option<&'a str>,
    /// For agent tokens: the only node the token may speak for (else the
    /// first node it registers).
    pub node: Option<&'a str>,
}

/// Stores a new token and returns `(token id, secret)`; the secret is not kept.
pub async fn create_token(db: &Db, new: NewToken<'_>) -> Result<(String, String), Error> {
    let id = new_id("tok");
    let secret = generate_token();
    sql!(db, |pool| {
        sqlx::query(
        "INSERT INTO api_tokens (id, user_id, name, scope, token_hash, created_at, expires_at, project, node_name)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&id)
    .bind(new.user_id)
    .bind(new.name)
    .bind(new.scope.as_str())
    .bind(hash_token(&secret))
    .bind(now_ms())
    .bind(new.expires_at)
    .bind(new.project)
    .bind(new.node)
    .execute(pool)
    .await.map(|_| ())
    })?;
    Ok((id, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_prefixed() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        // 32 bytes in unpadded base64 are 43 characters: 256 bits.
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
    }

    #[test]
    fn passwords_verify_only_themselves() {
        let stored = hash_password("correct horse").unwrap();
        assert!(stored.starts_with("$argon2"));
        assert!(verify_password("correct horse", &stored));
        assert!(!verify_password("correct horsf", &stored));
        assert!(!verify_password("x", "not a hash"));
    }
}
