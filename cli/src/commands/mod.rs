//! One module per command family.

pub mod auth;
pub mod status;
