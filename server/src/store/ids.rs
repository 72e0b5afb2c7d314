//! Opaque, sortable, unguessable ids with a type prefix (`job_01JD…`).
//!
//! A ULID carries a 48-bit timestamp (so ids sort by creation) and 80 random
//! bits from the thread's CSPRNG (so ids in shareable URLs cannot be guessed).

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", ulid::Ulid::new())
}
