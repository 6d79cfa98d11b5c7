//! Give-backs sent again until they land (D9).
//!
//! A release, a settlement or a refund that fails — a missed deadline, a dropped
//! connection, an open breaker — is not forgotten: its op is kept here and sent again,
//! with growing gaps while Redis stays silent (ended at once by its first reply after a
//! silence, [`Retries::wake`]), until Redis answers it or what it gives back has surely
//! expired ([`Code::retried_for`]). Every such op is idempotent, keyed by what it returns (a
//! lease member, an admission record, an attempt id), so sending it again after a reply
//! that was only lost changes nothing. The retries go around the breaker: they are what
//! must land when Redis is back, and there is one sender at a time, so they cost a
//! down Redis one call per gap.
//!
//! A give-back answered by a master whose replicas did not acknowledge it (D10) may be
//! lost with that master: one stalled past its node timeout wakes up still a master for
//! a moment, runs what waited in its socket, answers — and is then replaced by its
//! promoted replica, which never had those writes. Under
//! [`Unacknowledged::Refuse`](crate::Unacknowledged::Refuse) such give-backs are kept
//! too and sent again until one send is acknowledged, for
//! [`RESEND_UNACKNOWLEDGED_FOR`] at most (a shard that stays short of replicas takes no
//! new admissions then, so this is bounded by what was in flight); being keyed, a send
//! after one that did land changes nothing.
//!
//! One task sends them while any wait; it logs when it starts and when it has drained
//! (with counts), never a line per op. The queue is bounded by what was in flight when
//! the store failed (a failing store admits nothing new to give back) and, as a last
//! resort, by [`MAX_WAITING`]: past it the oldest op is dropped and counted.

use super::Client;
use crate::batch::{self, Code, Op};
use crate::future::spawn_quietly;
use crate::options::Unacknowledged;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Most ops waiting; past it the oldest is dropped (and counted as expired).
pub(crate) const MAX_WAITING: usize = 100_000;
/// The first gap before an op is sent again, and the longest.
const FIRST_GAP: Duration = Duration::from_millis(100);
const LONGEST_GAP: Duration = Duration::from_secs(2);
/// How long a give-back that landed unacknowledged is sent again, from its first such
/// landing: well past the few seconds a Cluster takes to replace a master and to tell
/// a woken one it was replaced.
pub(crate) const RESEND_UNACKNOWLEDGED_FOR: Duration = Duration::from_secs(10);

/// A give-back waiting to be sent again.
struct Waiting {
    code: Code,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
    until: std::time::Instant,
}

/// The ops waiting to be sent again, and what became of them.
#[derive(Default)]
pub(crate) struct Retries {
    queue: Mutex<VecDeque<Waiting>>,
    /// A sender task is running.
    sending: AtomicBool,
    /// Taken from the queue by the sender and not answered yet.
    in_hand: AtomicU64,
    /// Ends the sender's gap early: a node answered again after a silence.
    wake: tokio::sync::Notify,
    landed: AtomicU64,
    expired: AtomicU64,
    /// Tests: the sender sends nothing while set (what waits stays in the queue).
    #[cfg(test)]
    held: AtomicBool,
}

/// What became of give-backs that failed once (see [`RedisStore::give_backs`](crate::RedisStore::give_backs)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GiveBacks {
    /// Waiting to be sent again, or on their way.
    pub waiting: u64,
    /// Sent again and answered.
    pub landed: u64,
    /// Dropped unsent: what they would give back had expired, or the queue was full.
    pub expired: u64,
}

impl Retries {
    /// Keeps `op` to send again until `until`. True when no sender is running: the
    /// caller starts one.
    fn keep(&self, op: &Op, until: std::time::Instant) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= MAX_WAITING {
            q.pop_front();
            self.expired.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(Waiting {
            code: op.code,
            keys: op.keys.clone(),
            args: op.args.clone(),
            until,
        });
        !self.sending.swap(true, Ordering::AcqRel)
    }

    /// Sends what waits now, if anything does (a node answers again after a silence).
    pub(crate) fn wake(&self) {
        if self.sending.load(Ordering::Acquire) {
            self.wake.notify_one();
        }
    }

    /// Everything waiting whose object may still be held; the rest is counted expired.
    fn take_live(&self) -> Vec<Op> {
        #[cfg(test)]
        if self.held.load(Ordering::Acquire) {
            return Vec::new();
        }
        let now = std::time::Instant::now();
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(q.len());
        for w in q.drain(..) {
            if w.until <= now {
                self.expired.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.in_hand.fetch_add(1, Ordering::AcqRel);
            out.push(Op {
                code: w.code,
                keys: w.keys,
                args: w.args,
                until: Some(w.until),
                done: Box::new(drop),
            });
        }
        out
    }

    /// Ends the sender if nothing waits (checked under the queue's lock, so an op
    /// kept meanwhile starts a new one).
    fn stop_if_drained(&self) -> bool {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.is_empty() {
            self.sending.store(false, Ordering::Release);
            return true;
        }
        false
    }

    pub(super) fn counts(&self) -> GiveBacks {
        let waiting = self.queue.lock().unwrap_or_else(|e| e.into_inner()).len();
        GiveBacks {
            waiting: waiting as u64 + self.in_hand.load(Ordering::Acquire),
            landed: self.landed.load(Ordering::Relaxed),
            expired: self.expired.load(Ordering::Relaxed),
        }
    }
}

impl Client {
    /// Keeps the give-backs among `ops`, whose call failed, to send again.
    pub(super) fn keep_for_retry<'a>(&self, ops: impl IntoIterator<Item = &'a Op>) {
        let mut start = false;
        for op in ops {
            if let Some(until) = op.until {
                start |= self.inner.retries.keep(op, until);
            }
        }
        if start {
            tracing::warn!(
                waiting = self.inner.retries.counts().waiting,
                "redis store: give-backs failed; sending them again until they land"
            );
            self.start_sender();
        }
    }

    /// Keeps the give-backs among `ops`, answered but not acknowledged by the
    /// replicas, to send again until a send is — under `Unacknowledged::Refuse`, for
    /// [`RESEND_UNACKNOWLEDGED_FOR`] from the first such answer (see the module docs).
    pub(super) fn keep_unacknowledged(&self, ops: &[Op]) {
        if self.inner.unacknowledged != Unacknowledged::Refuse {
            return;
        }
        let bound = std::time::Instant::now() + RESEND_UNACKNOWLEDGED_FOR;
        let mut start = false;
        for op in ops {
            // A give-back sent again already carries the bound of its first answer.
            if let Some(until) = op.until {
                start |= self.inner.retries.keep(op, until.min(bound));
            }
        }
        if start {
            tracing::info!(
                waiting = self.inner.retries.counts().waiting,
                "redis store: give-backs not acknowledged by the replicas; sending them \
                 again until they are"
            );
            self.start_sender();
        }
    }

    /// Tests: holds back the sender (`true`) — what waits is kept, in order, and sent
    /// once released.
    #[cfg(test)]
    pub(crate) fn hold_retries(&self, on: bool) {
        self.inner.retries.held.store(on, Ordering::Release);
        if !on {
            self.inner.retries.wake();
        }
    }

    fn start_sender(&self) {
        let client = self.clone();
        spawn_quietly(async move { client.send_retries().await });
    }

    /// The sender: sends what waits, with a growing gap while Redis fails, until
    /// nothing waits. A reply after a silence ([`Retries::wake`]) ends the gap at once:
    /// the gap only spares a Redis that is down, and every moment a give-back waits
    /// once it is back, what it gives back is held by nobody. Rounds stay at least
    /// [`FIRST_GAP`] apart even so: on a Cluster, another node's reply after an idle
    /// spell also wakes the sender, and a node still down then gets a try per
    /// `FIRST_GAP` at most, as at the start.
    async fn send_retries(self) {
        let mut gap = FIRST_GAP;
        let before = self.inner.retries.counts();
        let mut pace = Pace::new();
        loop {
            pace.wait(gap, &self.inner.retries.wake).await;
            let ops = self.inner.retries.take_live();
            if ops.is_empty() {
                if self.inner.retries.stop_if_drained() {
                    let now = self.inner.retries.counts();
                    tracing::info!(
                        landed = now.landed - before.landed,
                        expired = now.expired - before.expired,
                        "redis store: the give-backs that had failed have landed"
                    );
                    return;
                }
                continue;
            }
            let mut failed = false;
            for call in batch::calls(ops, |k| self.slot_of(k)) {
                let n = call.len() as u64;
                // A failed call puts its ops back in the queue before it resolves.
                let landed = self.send_batch(call, false).await;
                if landed {
                    self.inner.retries.landed.fetch_add(n, Ordering::Relaxed);
                }
                self.inner.retries.in_hand.fetch_sub(n, Ordering::AcqRel);
                failed |= !landed;
            }
            gap = if failed {
                (gap * 2).min(LONGEST_GAP)
            } else {
                FIRST_GAP
            };
        }
    }
}

/// The sender's wait before each round: its gap, ended early by a wake-up
/// ([`Retries::wake`]) — but never to less than [`FIRST_GAP`] after the last round
/// began (a wait that runs its gap is at least that long already).
struct Pace {
    last_round: tokio::time::Instant,
}

impl Pace {
    fn new() -> Self {
        Self {
            last_round: tokio::time::Instant::now(),
        }
    }

    /// Waits until the next round may go, and notes that it goes.
    async fn wait(&mut self, gap: Duration, wake: &tokio::sync::Notify) {
        if tokio::time::timeout(gap, wake.notified()).await.is_ok() {
            tokio::time::sleep_until(self.last_round + FIRST_GAP).await;
        }
        self.last_round = tokio::time::Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::sync::Notify;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn d9_a_wake_up_never_brings_two_retry_rounds_closer_than_the_first_gap() {
        let wake = Notify::new();
        let mut pace = Pace::new();
        let start = Instant::now();
        // Woken before the wait began (the permit is kept): the round waits out the
        // first gap after the last one, not the 2 s gap, and not nothing.
        wake.notify_one();
        pace.wait(LONGEST_GAP, &wake).await;
        assert_eq!(start.elapsed(), FIRST_GAP, "woken at once");
        // Not woken: the whole gap.
        let start = Instant::now();
        pace.wait(Duration::from_millis(800), &wake).await;
        assert_eq!(start.elapsed(), Duration::from_millis(800), "the gap ran");
        // Woken halfway through a long gap, past the first gap: at once.
        let start = Instant::now();
        let waiting = pace.wait(LONGEST_GAP, &wake);
        let waking = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            wake.notify_one();
        };
        tokio::join!(waiting, waking);
        assert_eq!(start.elapsed(), Duration::from_millis(500), "woken halfway");
    }
}
