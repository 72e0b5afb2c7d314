//! Metric batches are stored by group commit ([`crate::store::group`]):
//! requests decode and encode their batches in parallel, then one writer
//! stores every batch waiting at that moment in one transaction.

use super::{PreparedBatch, store};
use crate::store::group::{self, GroupStore, Limits};
use crate::store::{Db, Error, Tx};
use gpuplane_api::metric::IngestResult;

/// Points stored by one transaction at most (a few hundred milliseconds of
/// ingest: bigger groups would only delay the first batch's answer).
const GROUP_POINTS: usize = 200_000;

/// The handle the ingest route stores prepared batches through.
pub type MetricWriter = group::GroupCommit<Metrics>;

/// A run's prepared batch.
pub type RunBatch = (String, PreparedBatch);

/// Stores runs' metric batches, each with its own statements.
pub struct Metrics {
    loss_pattern: String,
}

/// Starts the metric writer over `db`.
pub fn start(db: Db, loss_pattern: String) -> MetricWriter {
    let limits = Limits {
        most: GROUP_POINTS,
        gather: std::time::Duration::ZERO,
    };
    group::GroupCommit::start(db, Metrics { loss_pattern }, limits)
}

impl GroupStore for Metrics {
    type Item = RunBatch;
    type Answer = IngestResult;

    fn weight((_, batch): &RunBatch) -> usize {
        batch.points()
    }

    async fn store(&self, tx: &mut Tx, items: &[RunBatch]) -> Result<Vec<IngestResult>, Error> {
        let mut results = Vec::with_capacity(items.len());
        for (run_id, batch) in items {
            results.push(store(tx, run_id, batch, &self.loss_pattern).await?);
        }
        Ok(results)
    }
}
