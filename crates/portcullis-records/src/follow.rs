//! Keeping a [`Replica`] up to date.
//!
//! One task owns the replica and is the only one that changes it: it waits for a
//! notification (a PostgreSQL `NOTIFY` from any instance's change, or [`Follower::changed`]
//! for a change made in this process) or for the poll interval to pass, reads the rows
//! stamped above the revision it holds, applies them and hands the result to `publish`.
//! The poll is the safety net for a notification lost (a listener reconnecting, SQLite,
//! which has none): a change reaches every instance within one poll interval at worst.
//! The instance that made a change waits for it ([`Follower::sync`]): a read begun after
//! the change was written, so that its answer to the change is given once it serves it.
//!
//! While the database does not answer, the replica keeps serving what it last read —
//! for as long as the outage lasts: nothing can change in the database meanwhile, since
//! every change is written there first — and the task logs the outage once, retries at
//! every interval, and logs the recovery.

use crate::db::{Backend, CHANNEL, Records};
use crate::replica::Replica;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// Where a follower stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowerStatus {
    /// The revision the replica is at.
    pub revision: u64,
    /// Whether the last read reached the database.
    pub connected: bool,
    /// Reads that failed since the last one that did not.
    pub failures: u64,
}

/// Keeps a replica of `records` up to date (see the module docs). Dropping it stops its
/// tasks.
pub struct Follower {
    wake: Arc<Notify>,
    status: Arc<Mutex<FollowerStatus>>,
    reads: Reads,
    tasks: Vec<JoinHandle<()>>,
}

/// The follower's reads, numbered in the order they begin: the number of the last one
/// begun, and (watched) the number of the last one finished, read or failed.
#[derive(Clone)]
struct Reads {
    begun: Arc<std::sync::atomic::AtomicU64>,
    finished: watch::Sender<u64>,
}

impl Reads {
    fn new() -> Self {
        Self {
            begun: Arc::default(),
            finished: watch::Sender::new(0),
        }
    }

    /// Numbers a read about to begin.
    fn begin(&self) -> u64 {
        self.begun.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Follower {
    /// Reads the whole replica (an error if the database cannot be read: a gateway does
    /// not start without its keys), publishes it, and follows the changes from there.
    pub async fn start(
        records: Arc<Records>,
        poll: Duration,
        publish: impl Fn(&Replica) + Send + Sync + 'static,
    ) -> Result<Self, crate::RecordsError> {
        let mut replica = Replica::default();
        replica.apply(records.changes_since(0).await?);
        publish(&replica);
        let wake = Arc::new(Notify::new());
        let status = Arc::new(Mutex::new(FollowerStatus {
            revision: replica.revision(),
            connected: true,
            failures: 0,
        }));
        let reads = Reads::new();
        let mut tasks = vec![tokio::spawn(follow(
            records.clone(),
            replica,
            poll,
            wake.clone(),
            (status.clone(), reads.clone()),
            publish,
        ))];
        if records.backend() == Backend::Postgres {
            tasks.push(tokio::spawn(listen(records, poll, wake.clone())));
        }
        Ok(Self {
            wake,
            status,
            reads,
            tasks,
        })
    }

    /// A change was made in this process: read it now.
    pub fn changed(&self) {
        self.wake.notify_one();
    }

    /// A change was made in this process: read it now, and wait (up to `within`) until
    /// a read begun after this call has finished — so the replica holds the change, or
    /// the database could not be read. True when such a read finished in time; false
    /// when `within` passed first (the change still arrives, as every change does, by
    /// the next read).
    pub async fn sync(&self, within: Duration) -> bool {
        let mut finished = self.reads.finished.subscribe();
        // A read numbered above `now` begins after the change was written.
        let now = self.reads.begun.load(std::sync::atomic::Ordering::SeqCst);
        self.wake.notify_one();
        tokio::time::timeout(within, finished.wait_for(|&n| n > now))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Where it stands.
    pub fn status(&self) -> FollowerStatus {
        *self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn follow(
    records: Arc<Records>,
    mut replica: Replica,
    poll: Duration,
    wake: Arc<Notify>,
    (status, reads): (Arc<Mutex<FollowerStatus>>, Reads),
    publish: impl Fn(&Replica) + Send + Sync + 'static,
) {
    loop {
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(poll) => {}
        }
        let this = reads.begin();
        let read = records.changes_since(replica.revision()).await;
        let mut s = status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match read {
            Ok(changes) => {
                if !s.connected {
                    tracing::warn!(
                        database = %records.url(),
                        failed_reads = s.failures,
                        "the records database answers again; following its changes"
                    );
                }
                let before = replica.secrets().count();
                replica.forget_expired_secrets(now_ms());
                let pruned = replica.secrets().count() != before;
                if replica.apply(changes) || pruned {
                    publish(&replica);
                }
                *s = FollowerStatus {
                    revision: replica.revision(),
                    connected: true,
                    failures: 0,
                };
            }
            Err(e) => {
                if s.connected {
                    tracing::error!(
                        database = %records.url(),
                        error = %e,
                        "the records database does not answer: serving the keys already \
                         known until it does; key changes answer 503"
                    );
                }
                s.connected = false;
                s.failures += 1;
            }
        }
        drop(s);
        reads.finished.send_replace(this);
    }
}

/// Turns PostgreSQL notifications into wake-ups; reconnects after a failure (and wakes
/// once then, for what it may have missed).
async fn listen(records: Arc<Records>, poll: Duration, wake: Arc<Notify>) {
    loop {
        let listener = async {
            let mut l = sqlx::postgres::PgListener::connect(records.raw_url()).await?;
            l.listen(CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        match listener {
            Ok(mut l) => {
                wake.notify_one();
                while l.recv().await.is_ok() {
                    wake.notify_one();
                }
            }
            Err(e) => tracing::debug!(error = %e, "records change listener: connecting"),
        }
        tokio::time::sleep(poll).await;
    }
}
