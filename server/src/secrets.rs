//! The server's secret key (`DATA_DIR/secret.key`, created on first start,
//! mode 0600) and what is derived from it.

use anyhow::Context;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub const SECRET_FILE: &str = "secret.key";

#[derive(Clone)]
pub struct SecretKey([u8; 32]);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    /// Reads the key from the data dir, creating it the first time.
    pub fn load_or_create(data_dir: &Path) -> anyhow::Result<SecretKey> {
        let path = data_dir.join(SECRET_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let bytes =
                    hex::decode(text.trim()).with_context(|| format!("{} is not hex", path.display()))?;
                let key: [u8; 32] = bytes
                    .try_into()
                    .map_err(|_| anyhow::anyhow!("{} must hold 32 bytes", path.display()))?;
                Ok(SecretKey(key))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                rand::rng().fill_bytes(&mut key);
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                file.write_all(hex::encode(key).as_bytes())?;
                file.sync_all()?;
                Ok(SecretKey(key))
            }
            Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// The sdk token of one attempt of one job. Derived rather than stored, so
    /// the server can hand it to the agent again without keeping it: only its
    /// hash is in the database, like every token.
    pub fn attempt_token(&self, job_id: &str, attempt: i64) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("attempt-sdk-token:{job_id}:{attempt}").as_bytes());
        let bytes = mac.finalize().into_bytes();
        format!(
            "{}{}",
            crate::auth::TOKEN_PREFIX,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        )
    }
}
