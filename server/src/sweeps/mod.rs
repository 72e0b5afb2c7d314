//! Sweeps: searches over a space of parameters whose trials are ordinary
//! jobs of the sweep's project. `sampler` chooses each trial's parameters,
//! `pruner` stops trials early as Optuna would, `trials` turns a trial into
//! a job, `store` keeps sweeps and trials, and `controller` (run by the
//! leading server) judges, ends and proposes.

pub mod controller;
pub mod pruner;
pub mod sampler;
pub mod store;
pub mod trials;

use crate::identity::access::Principal;
use crate::store::{Db, Error};
use gpuplane_api::job::JobSpec;
use gpuplane_api::metric::Goal;
use gpuplane_api::spec::Policy;
use gpuplane_api::sweep::{Checked, SweepSpec};

/// Checks a sweep file as `principal` creates it: its fields, and its
/// first trial's job as a submit of theirs would be checked (the project,
/// their role in it, its node policy). Returns it checked, with its first
/// trial's job.
pub async fn check(
    db: &Db,
    policy: &Policy,
    spec: &SweepSpec,
    principal: &Principal,
) -> Result<(Checked, JobSpec), Error> {
    let seed = u64::from(rand::random::<u32>());
    let checked = spec.check(seed).map_err(Error::Invalid)?;
    let goal = checked.metric.as_ref().map_or(Goal::Min, |m| m.goal);
    let params =
        sampler::propose(checked.method, &checked.parameters, goal, checked.seed, 0, &[]).unwrap_or_default();
    let trial = trials::spec_of("swp_new", &checked, 0, &params, policy).map_err(Error::Invalid)?;
    crate::jobs::store::check_references(db, &trial, principal).await?;
    let mut tx = crate::store::read(db).await?;
    crate::jobs::node_policies::check(&mut tx, &trial).await?;
    Ok((checked, trial))
}
