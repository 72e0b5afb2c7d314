//! Group commit. What the server acknowledges must be on disk first, and
//! each commit waits for the disk (`synchronous = FULL`); every statement
//! is also a round trip to the database thread. Writes that arrive often
//! (metric batches, agents' telemetry) are therefore handed, already
//! decoded and checked, to one writer task per kind, which stores every
//! item waiting in one transaction and answers each once it has committed.
//! An item that fails fails alone: when a group's transaction fails, its
//! items are stored again one transaction each.

use super::{Db, Error, Tx};
use std::future::Future;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Items waiting for a writer at most; a request past that waits to queue.
const QUEUE: usize = 256;

/// How one kind of item is stored, several in one transaction.
pub trait GroupStore: Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Answer: Send + 'static;

    /// What an item counts toward [`Limits::most`] (points, samples).
    fn weight(item: &Self::Item) -> usize;

    /// Stores `items` in `tx`; one answer per item, in order.
    fn store<'a>(
        &'a self,
        tx: &'a mut Tx,
        items: &'a [Self::Item],
    ) -> impl Future<Output = Result<Vec<Self::Answer>, Error>> + Send + 'a;
}

/// How big a group may grow, and how long its first item waits for others.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The total weight one transaction stores at most.
    pub most: usize,
    /// How long the writer gathers after a group's first item arrives. Zero
    /// stores what is waiting at once (clients sending at once still share
    /// a commit); more shares commits among writes that come steadily but
    /// apart, each answered that much later.
    pub gather: Duration,
}

/// An item waiting for the writer, and where its answer goes.
struct Waiting<S: GroupStore> {
    item: S::Item,
    answer: oneshot::Sender<Result<S::Answer, Error>>,
}

/// The handle requests store through (cheap to clone).
pub struct GroupCommit<S: GroupStore> {
    queue: mpsc::Sender<Waiting<S>>,
}

impl<S: GroupStore> Clone for GroupCommit<S> {
    fn clone(&self) -> Self {
        GroupCommit {
            queue: self.queue.clone(),
        }
    }
}

impl<S: GroupStore> GroupCommit<S> {
    /// Starts the writer task over `db`; it ends when the last handle is dropped.
    pub fn start(db: Db, store: S, limits: Limits) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUE);
        tokio::spawn(writer(db, store, limits, waiting));
        GroupCommit { queue }
    }

    /// Stores `item`; returns once it is on disk.
    pub async fn store(&self, item: S::Item) -> Result<S::Answer, Error> {
        let (answer, answered) = oneshot::channel();
        let gone = || {
            Error::Internal(anyhow::anyhow!(
                "the writer stopped (the server is shutting down)"
            ))
        };
        self.queue
            .send(Waiting { item, answer })
            .await
            .map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
    }
}

async fn writer<S: GroupStore>(db: Db, store: S, limits: Limits, mut waiting: mpsc::Receiver<Waiting<S>>) {
    while let Some(first) = waiting.recv().await {
        let until = tokio::time::Instant::now() + limits.gather;
        let mut weight = S::weight(&first.item);
        let mut group = vec![first];
        while weight < limits.most {
            let next = match waiting.try_recv() {
                Ok(next) => next,
                Err(_) if limits.gather.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(until, waiting.recv()).await {
                    Ok(Some(next)) => next,
                    Ok(None) | Err(_) => break,
                },
            };
            weight += S::weight(&next.item);
            group.push(next);
        }
        let (items, answers): (Vec<S::Item>, Vec<_>) = group.into_iter().map(|w| (w.item, w.answer)).unzip();
        match store_group(&db, &store, &items).await {
            Ok(results) => {
                for (answer, result) in answers.into_iter().zip(results) {
                    let _ = answer.send(Ok(result));
                }
            }
            Err(error) if items.len() == 1 => {
                let _ = answers.into_iter().next().expect("one").send(Err(error));
            }
            Err(error) => {
                tracing::debug!(%error, items = items.len(), "a group write failed; storing each item alone");
                for (item, answer) in items.iter().zip(answers) {
                    let result = store_group(&db, &store, std::slice::from_ref(item))
                        .await
                        .map(|mut results| results.remove(0));
                    let _ = answer.send(result);
                }
            }
        }
    }
}

/// Stores the items in one write transaction; their answers in order.
async fn store_group<S: GroupStore>(db: &Db, store: &S, items: &[S::Item]) -> Result<Vec<S::Answer>, Error> {
    let mut tx = super::write(db).await?;
    let answers = store.store(&mut tx, items).await?;
    debug_assert_eq!(answers.len(), items.len());
    tx.commit().await?;
    Ok(answers)
}
