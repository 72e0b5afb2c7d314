//! The server's integration tests, in one binary so the server is linked
//! once: a real server on a free port over a real SQLite file, spoken to
//! over HTTP (and the real `gpuplane-server` binary in `binary`).

mod access;
mod alerts;
mod api;
mod audit;
mod binary;
mod charts;
mod device;
mod experiments;
mod hub;
mod job_spec_reference;
mod leaders;
mod metric_storage;
mod metrics;
mod mlflow;
mod multi_node;
mod nodes;
mod project_rights;
mod recipes;
mod schema;
mod security;
mod sessions;
mod shares;
mod users;
