//! System tests: a real server, real `gpuplane-agent` processes running real
//! jobs, and the real `gpuctl`, together (`gpuplane_testkit::cluster`).
//! One module per subject.

mod arrays;
mod concurrency;
mod crash;
mod diagnosis;
mod diskfull;
mod evaluations;
mod faults;
mod gpuctl;
mod hostile;
mod idle;
mod imports;
mod jobs;
mod lifecycle;
mod recipes;
mod migrate;
mod multi_node;
mod partition;
mod prometheus;
mod replicas;
mod scheduling;
mod security;
mod slurm;
mod sweeps;
mod telemetry;
mod tensorboard;
mod usage;
