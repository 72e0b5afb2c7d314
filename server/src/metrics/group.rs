//! Group commit of metric batches. A batch is acknowledged only once it is
//! on disk, and each commit waits for the disk (`synchronous = FULL`), so
//! clients sending at once would each pay a commit while holding the one
//! write lock. Requests therefore hand their prepared batches (decoded and
//! encoded in parallel, before this) to one writer task, which stores every
//! batch waiting at that moment in one transaction and answers each when
//! it has committed. A batch that fails fails alone: when a group's
//! transaction fails, its batches are stored again one transaction each.

use super::{PreparedBatch, store};
use crate::store::Error;
use gpuplane_api::metric::IngestResult;
use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

/// Points stored by one transaction at most (a few hundred milliseconds of
/// ingest: bigger groups would only delay the first batch's answer).
const GROUP_POINTS: usize = 200_000;

/// Batches waiting for the writer at most; a request past that waits to queue.
const QUEUE: usize = 64;

/// A batch waiting for the writer, and where its answer goes.
struct Waiting {
    run_id: String,
    batch: PreparedBatch,
    answer: oneshot::Sender<Result<IngestResult, Error>>,
}

/// The handle requests store through (cheap to clone).
#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Waiting>,
}

impl GroupCommit {
    /// Starts the writer task over `db`; it ends when the last handle is dropped.
    pub fn start(db: SqlitePool, loss_pattern: String) -> GroupCommit {
        let (queue, waiting) = mpsc::channel(QUEUE);
        tokio::spawn(writer(db, loss_pattern, waiting));
        GroupCommit { queue }
    }

    /// Stores a validated, prepared batch for a run; returns once it is on
    /// disk (or is a batch id already stored for the run).
    pub async fn store(&self, run_id: String, batch: PreparedBatch) -> Result<IngestResult, Error> {
        let (answer, answered) = oneshot::channel();
        let gone = || {
            Error::Internal(anyhow::anyhow!(
                "the metric writer stopped (the server is shutting down)"
            ))
        };
        self.queue
            .send(Waiting {
                run_id,
                batch,
                answer,
            })
            .await
            .map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
    }
}

async fn writer(db: SqlitePool, loss_pattern: String, mut waiting: mpsc::Receiver<Waiting>) {
    while let Some(first) = waiting.recv().await {
        let mut points = first.batch.points();
        let mut group = vec![first];
        while points < GROUP_POINTS
            && let Ok(next) = waiting.try_recv()
        {
            points += next.batch.points();
            group.push(next);
        }
        match store_group(&db, &loss_pattern, &group).await {
            Ok(results) => {
                for (waiting, result) in group.into_iter().zip(results) {
                    let _ = waiting.answer.send(Ok(result));
                }
            }
            Err(error) if group.len() == 1 => {
                let _ = group.pop().expect("one").answer.send(Err(error));
            }
            Err(error) => {
                tracing::debug!(%error, batches = group.len(), "a group of metric batches failed; storing each alone");
                for waiting in group {
                    let result = store_group(&db, &loss_pattern, std::slice::from_ref(&waiting))
                        .await
                        .map(|mut results| results.remove(0));
                    let _ = waiting.answer.send(result);
                }
            }
        }
    }
}

/// Stores the batches in one write transaction; their results in order.
async fn store_group(
    db: &SqlitePool,
    loss_pattern: &str,
    group: &[Waiting],
) -> Result<Vec<IngestResult>, Error> {
    let mut tx = crate::store::write(db).await?;
    let mut results = Vec::with_capacity(group.len());
    for waiting in group {
        results.push(store(&mut tx, &waiting.run_id, &waiting.batch, loss_pattern).await?);
    }
    tx.commit().await?;
    Ok(results)
}
