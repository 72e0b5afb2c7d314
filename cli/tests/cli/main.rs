//! gpuctl's integration tests, in one binary: the real `gpuctl` binary
//! against a real server (and, in `jobs`, a real agent).

mod cli;
mod jobs;
