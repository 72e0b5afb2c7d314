//! Where console sessions are kept: the `tower_sessions` table the
//! migrations create (in either dialect), keyed by a hash of each session id.

use crate::store::Db;
use sha2::{Digest, Sha256};
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, ExpiredDeletion, SessionStore};
use tower_sessions_sqlx_store::{PostgresStore, SqliteStore};

/// The session store, keyed by a hash of each session id: the cookie is a
/// bearer secret like a token, so the database never holds it in clear.
#[derive(Debug, Clone)]
pub struct HashedIdStore(Dialect);

/// tower-sessions' store for the server's database.
#[derive(Debug, Clone)]
enum Dialect {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl HashedIdStore {
    /// Over the `tower_sessions` table that the migrations create.
    pub fn new(db: &Db) -> HashedIdStore {
        HashedIdStore(match db {
            Db::Sqlite(pool) => Dialect::Sqlite(SqliteStore::new(pool.clone())),
            Db::Postgres(pool) => Dialect::Postgres(
                PostgresStore::new(pool.clone())
                    .with_schema_name("public")
                    .and_then(|store| store.with_table_name("tower_sessions"))
                    .expect("valid names"),
            ),
        })
    }

    /// Deletes expired sessions (run from time to time).
    pub async fn delete_expired(&self) {
        let deleted = match &self.0 {
            Dialect::Sqlite(store) => store.delete_expired().await,
            Dialect::Postgres(store) => store.delete_expired().await,
        };
        if let Err(error) = deleted {
            tracing::warn!(%error, "cannot delete expired sessions");
        }
    }

    async fn save_hashed(&self, record: &Record) -> session_store::Result<()> {
        match &self.0 {
            Dialect::Sqlite(store) => store.save(record).await,
            Dialect::Postgres(store) => store.save(record).await,
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
        self.save_hashed(&stored).await
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let mut stored = record.clone();
        stored.id = hashed(&record.id);
        self.save_hashed(&stored).await
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let loaded = match &self.0 {
            Dialect::Sqlite(store) => store.load(&hashed(id)).await?,
            Dialect::Postgres(store) => store.load(&hashed(id)).await?,
        };
        Ok(loaded.map(|mut record| {
            record.id = *id;
            record
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        match &self.0 {
            Dialect::Sqlite(store) => store.delete(&hashed(id)).await,
            Dialect::Postgres(store) => store.delete(&hashed(id)).await,
        }
    }
}
