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
/// How a sealed secret starts in the database.
const SEALED_PREFIX: &str = "sealed:v1:";

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

    /// This installation's identity, told to agents so that attempt
    /// directories left by another server are never reported here. Derived
    /// from the key (one-way), so it reveals nothing of it.
    pub fn server_id(&self) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"server-id");
        format!("srv_{}", hex::encode(&mac.finalize().into_bytes()[..10]))
    }

    /// The key that encrypts secret job variables, derived so that
    /// `secret.key` itself serves one purpose per derivation.
    fn secret_env_key(&self) -> ring::aead::LessSafeKey {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"secret-env-key");
        let bytes = mac.finalize().into_bytes();
        let key = ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, &bytes)
            .expect("a 32-byte key fits ChaCha20-Poly1305");
        ring::aead::LessSafeKey::new(key)
    }

    /// Encrypts the value of secret variable `name` of job `job_id`
    /// (ChaCha20-Poly1305, random nonce, bound to the job and the name).
    /// Alert channels seal their webhook secret the same way, with the
    /// channel's name for `job_id` and a name no variable can have.
    pub fn seal(&self, job_id: &str, name: &str, value: &str) -> String {
        let mut nonce = [0u8; 12];
        rand::rng().fill_bytes(&mut nonce);
        let mut sealed = value.as_bytes().to_vec();
        self.secret_env_key()
            .seal_in_place_append_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(format!("{job_id}\0{name}")),
                &mut sealed,
            )
            .expect("ChaCha20-Poly1305 seals any message of this size");
        let mut bytes = nonce.to_vec();
        bytes.extend(sealed);
        format!(
            "{SEALED_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        )
    }

    /// The value [`seal`](Self::seal) encrypted, if this key sealed it for this job and name.
    pub fn open(&self, job_id: &str, name: &str, sealed: &str) -> Option<String> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sealed.strip_prefix(SEALED_PREFIX)?)
            .ok()?;
        if bytes.len() < 12 {
            return None;
        }
        let (nonce, ciphertext) = bytes.split_at(12);
        let mut buffer = ciphertext.to_vec();
        let plain = self
            .secret_env_key()
            .open_in_place(
                ring::aead::Nonce::try_assume_unique_for_key(nonce).ok()?,
                ring::aead::Aad::from(format!("{job_id}\0{name}")),
                &mut buffer,
            )
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }

    /// A key of fixed bytes, for unit tests elsewhere in the server.
    #[cfg(test)]
    pub fn for_tests(bytes: [u8; 32]) -> SecretKey {
        SecretKey(bytes)
    }

    /// A signature of `message` for one `purpose` (a confirmation handed
    /// to an MCP client, say), checked later with [`SecretKey::verify`].
    pub fn sign(&self, purpose: &str, message: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("{purpose}:{message}").as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Whether `signature` is [`SecretKey::sign`]'s for `purpose` and `message`
    /// (compared in constant time).
    pub fn verify(&self, purpose: &str, message: &str, signature: &str) -> bool {
        let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("{purpose}:{message}").as_bytes());
        mac.verify_slice(&bytes).is_ok()
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
            crate::identity::credentials::TOKEN_PREFIX,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_for_their_job_and_name() {
        let key = SecretKey([7; 32]);
        let sealed = key.seal("job_1", "API_KEY", "hunter2-very-secret");
        assert!(!sealed.contains("hunter2"));
        assert_ne!(
            sealed,
            key.seal("job_1", "API_KEY", "hunter2-very-secret"),
            "random nonces"
        );
        assert_eq!(
            key.open("job_1", "API_KEY", &sealed).as_deref(),
            Some("hunter2-very-secret")
        );
        assert_eq!(
            key.open("job_2", "API_KEY", &sealed),
            None,
            "moved to another job"
        );
        assert_eq!(key.open("job_1", "OTHER", &sealed), None, "moved to another name");
        assert_eq!(
            SecretKey([8; 32]).open("job_1", "API_KEY", &sealed),
            None,
            "another server"
        );
        assert_eq!(key.open("job_1", "API_KEY", "sealed:v1:AAAA"), None);
    }
}
