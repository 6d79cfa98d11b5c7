//! Durable settlement (B7): a settlement or refund the store could not take is retried
//! with backoff until it lands. Settling is idempotent per attempt, so a retry of a
//! call that was in fact carried out (its answer lost) changes nothing.
//!
//! One queue and at most one retry task per layer. The queue is bounded: billing fails
//! closed while its store is down (B5), so what waits is at most the attempts that were
//! in flight when the store went away.

use super::{UsageRecord, UsageSink, report};
use crate::spawn::poll_now;
use portcullis_core::{AttemptRef, AttemptState, BillingOutcome, BillingStore, Money, StoreError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most settlements waiting for a retry per layer.
pub const MAX_WAITING_SETTLEMENTS: usize = 100_000;
/// First pause before a retry; doubled after each failed round up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// Longest pause between two retry rounds.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Counts of the settlement retries of one layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SettlementStats {
    /// Settlement or refund calls that failed and were queued for a retry.
    pub failed: u64,
    /// Retries sent.
    pub retried: u64,
    /// Settlements that landed after at least one failure.
    pub landed_late: u64,
    /// Waiting now.
    pub waiting: u64,
    /// Given up because the queue was full (logged at error level; the usage record is
    /// still emitted).
    pub dropped: u64,
}

/// One settlement to deliver.
pub(crate) struct Job {
    pub(crate) attempt: AttemptRef,
    pub(crate) outcome: BillingOutcome,
    /// The attempt's money upper bound (what a pending record stands for).
    pub(crate) money: Money,
    /// The usage record to emit once it lands (none for refunds of unanswered
    /// reservations).
    pub(crate) record: Option<(UsageRecord, Arc<dyn UsageSink>)>,
    pub(crate) what: &'static str,
}

/// The settlements of one layer that have not landed yet.
pub(crate) struct Settler<St> {
    store: St,
    queue: Mutex<VecDeque<Job>>,
    running: AtomicBool,
    failed: AtomicU64,
    retried: AtomicU64,
    landed_late: AtomicU64,
    dropped: AtomicU64,
    /// Failures logged as an outage (D11), not one line per attempt.
    outage: crate::failure::Outage,
}

/// How the log names settlements and what becomes of them while the store fails.
const SUBJECT: &str = "billing settlements";
const DOING: &str = "queuing each for retries (B7)";

impl<St: BillingStore> Settler<St> {
    /// The store settlements go to.
    pub(crate) fn store(&self) -> &St {
        &self.store
    }

    pub(crate) fn new(store: St) -> Arc<Self> {
        Arc::new(Self {
            store,
            queue: Mutex::default(),
            running: AtomicBool::new(false),
            failed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            landed_late: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            outage: Default::default(),
        })
    }
}

impl<St> Settler<St> {
    pub(crate) fn stats(&self) -> SettlementStats {
        SettlementStats {
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            landed_late: self.landed_late.load(Ordering::Relaxed),
            waiting: self.queue.lock().unwrap_or_else(|e| e.into_inner()).len() as u64,
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

impl<St: BillingStore> Settler<St> {
    /// Sends `job` now: in place when the store answers at once (the in-memory store,
    /// no task), on a task otherwise; a failure queues it for retries.
    pub(crate) fn settle(self: &Arc<Self>, job: Job) {
        let mut fut = self.store.settle_attempt(&job.attempt, job.outcome);
        match poll_now(&mut fut) {
            Some(Ok(state)) => self.landed(job, state, false),
            Some(Err(e)) => self.failed_once(job, &e),
            None => match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    let me = self.clone();
                    h.spawn(async move {
                        match fut.await {
                            Ok(state) => me.landed(job, state, false),
                            Err(e) => me.failed_once(job, &e),
                        }
                    });
                }
                Err(_) => self.give_up(job, "no tokio runtime to finish it on"),
            },
        }
    }

    /// `job` landed with the store's answer `state`: an outage under way ends.
    fn landed(&self, job: Job, state: Option<AttemptState>, after_failure: bool) {
        self.outage.log_answer(SUBJECT, job.what);
        finish(job, state, after_failure);
    }

    fn failed_once(self: &Arc<Self>, job: Job, e: &StoreError) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(attempt_id = &*job.attempt.attempt, error = %e, "{} failed", job.what);
        self.outage.log_failure(SUBJECT, DOING, job.what, e);
        #[cfg(feature = "metrics")]
        metrics::counter!("portcullis_billing_settlement_failures_total").increment(1);
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return self.give_up(job, "no tokio runtime to retry it on");
        };
        {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() >= MAX_WAITING_SETTLEMENTS {
                drop(q);
                return self.give_up(job, "the retry queue is full");
            }
            q.push_back(job);
        }
        if !self.running.swap(true, Ordering::AcqRel) {
            rt.spawn(retry(self.clone()));
        }
    }

    fn give_up(&self, job: Job, why: &str) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            attempt_id = &*job.attempt.attempt,
            outcome = ?job.outcome,
            "{} not delivered: {why}; reconcile this attempt by hand",
            job.what
        );
        // The usage record is still emitted, as the outcome the gateway determined.
        if let Some((record, sink)) = job.record {
            report(&*sink, record, assumed(job.outcome, job.money));
        }
    }
}

/// The state an outcome puts an open attempt in.
fn assumed(outcome: BillingOutcome, money: Money) -> Option<AttemptState> {
    match outcome {
        BillingOutcome::Settled(c) => Some(AttemptState::Settled(c.max(0))),
        BillingOutcome::Pending => Some(AttemptState::Pending(money.max(0))),
        BillingOutcome::Refund => Some(AttemptState::Refunded),
    }
}

/// The settlement landed with the store's answer `state`. After a failure, "nothing
/// done" is an *unknown* outcome (D10): an earlier try may have been carried out (its
/// answer lost) or the attempt itself lost (a failover took it before it was
/// replicated). It is never taken for "settled": the record says pending — a refund
/// of nothing holds nothing — and the attempt is named for reconciliation. (A store
/// that tells these apart, as the Redis store does, answers a retry with the final
/// state or records the unknown outcome as pending itself.)
fn finish(job: Job, state: Option<AttemptState>, after_failure: bool) {
    let state = match state {
        None if after_failure => {
            let unknown = match job.outcome {
                BillingOutcome::Refund => AttemptState::Refunded,
                BillingOutcome::Settled(cost) => AttemptState::Pending(cost.max(0)),
                BillingOutcome::Pending => AttemptState::Pending(job.money.max(0)),
            };
            if matches!(unknown, AttemptState::Pending(_)) {
                tracing::error!(
                    attempt_id = &*job.attempt.attempt,
                    outcome = ?job.outcome,
                    "{}: the store no longer knows this attempt after a failed try; \
                     its outcome is unknown: reconcile it by hand",
                    job.what
                );
            }
            Some(unknown)
        }
        state => state,
    };
    if let Some((record, sink)) = job.record {
        report(&*sink, record, state);
    }
}

/// Retries every waiting settlement, round after round with backoff, until none is
/// left.
async fn retry<St: BillingStore>(s: Arc<Settler<St>>) {
    let mut pause = FIRST_BACKOFF;
    loop {
        tokio::time::sleep(pause).await;
        let jobs: Vec<Job> = s
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        let mut failed = false;
        for job in jobs {
            s.retried.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            metrics::counter!("portcullis_billing_settlement_retries_total").increment(1);
            match s.store.settle_attempt(&job.attempt, job.outcome).await {
                Ok(state) => {
                    s.landed_late.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        attempt_id = &*job.attempt.attempt,
                        "{} landed on a retry",
                        job.what
                    );
                    s.landed(job, state, true);
                }
                Err(e) => {
                    tracing::debug!(attempt_id = &*job.attempt.attempt, error = %e, "{} retry failed", job.what);
                    failed = true;
                    s.queue
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_back(job);
                }
            }
        }
        pause = if failed {
            (pause * 2).min(MAX_BACKOFF)
        } else {
            FIRST_BACKOFF
        };
        let q = s.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.is_empty() {
            // Stopped under the lock: a job queued after this sees `running` false and
            // starts a new task.
            s.running.store(false, Ordering::Release);
            return;
        }
        drop(q);
    }
}
