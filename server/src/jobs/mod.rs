//! Jobs: validation, storage, scheduling, and what happens once they run.

pub mod lifecycle;
pub mod plan;
pub mod scheduler;
pub mod spec;
pub mod store;
