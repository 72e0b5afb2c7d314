//! The agent's integration tests, in one binary: a real server in this
//! process and real `gpuplane-agent` processes running real jobs
//! (`common::Cluster`).

mod agent;
mod common;
mod diagnosis;
mod evaluations;
mod faults;
mod jobs;
mod scheduling;
mod security;
mod tensorboard;
