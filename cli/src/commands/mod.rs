//! One module per command family.

pub mod auth;
pub mod evals;
pub mod events;
pub mod jobs;
pub mod logs;
pub mod projects;
pub mod runs;
pub mod status;
