//! Where console sessions are kept: the SQLite table the migrations create,
//! keyed by a hash of each session id.

use sha2::{Digest, Sha256};
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};
use tower_sessions_sqlx_store::SqliteStore;

/// The SQLite store, keyed by a hash of each session id: the cookie is a
/// bearer secret like a token, so the database never holds it in clear.
#[derive(Debug, Clone)]
pub struct HashedIdStore(SqliteStore);

impl HashedIdStore {
    /// Over the `tower_sessions` table that the migrations create.
    pub fn new(db: sqlx::SqlitePool) -> HashedIdStore {
        HashedIdStore(SqliteStore::new(db))
    }

    /// Deletes expired sessions (run from time to time).
    pub async fn delete_expired(&self) {
        use tower_sessions::session_store::ExpiredDeletion;
        if let Err(error) = self.0.delete_expired().await {
            tracing::warn!(%error, "cannot delete expired sessions");
        }
    }
}

fn hashed(id: &Id) -> Id {
    let digest = Sha256::digest(id.0.to_le_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Id(i128::from_le_bytes(bytes))
}

#[async_trait::async_trait]
impl SessionStore for HashedIdStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        // 128 random bits: a collision is not a practical concern.
        let mut stored = record.clone();
        stored.id = hashed(&record.id);
        self.0.save(&stored).await
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let mut stored = record.clone();
        stored.id = hashed(&record.id);
        self.0.save(&stored).await
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        Ok(self.0.load(&hashed(id)).await?.map(|mut record| {
            record.id = *id;
            record
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        self.0.delete(&hashed(id)).await
    }
}
