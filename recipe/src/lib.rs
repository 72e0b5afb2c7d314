//! Recipes: versioned job templates whose config is checked by a JSON
//! Schema and a few rules. One implementation, used by `gpuctl` (offline,
//! from an experiment's cached recipe) and by the server (before anything
//! queues), so both refuse the same configs with the same words.
//!
//! - [`file`]: the recipe file (TOML), its checks and its contract;
//! - [`config`]: a config checked against a recipe, every problem at once;
//! - [`template`]: the job spec a recipe and a config make;
//! - [`changes`]: what changed between two versions, and a config carried over.

pub mod changes;
pub mod config;
pub mod file;
pub mod template;

pub use file::{Recipe, Rule};
