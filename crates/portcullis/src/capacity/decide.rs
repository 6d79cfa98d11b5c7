//! The capacity layer's decision, sans I/O: which channel a request gets — the first
//! candidate with room (Q1, Q2), else the queue expected to free first (Q2) — for how
//! long it may wait (Q3), and as which tenant of the fair queue (Q4).
//!
//! The interface of every layer's `decide` module: [`start`] gives the first
//! [`Probe`], [`on_answer`] the next one after a store answer. `call` decides at once
//! when the store answers at once; the response future awaits the answer and queues.

use super::queue::{CapacityGuard, Channel, Shared};
use super::{CapacityConfig, DEADLINE_HEADER};
use crate::extensions::Prefetched;
use crate::spawn::poll_now;
use http::{HeaderMap, Request};
use portcullis_core::capacity::expected_wait_us;
use portcullis_core::{
    CapacityStore, ChannelRef, LayerKind, LeaseId, Rejection, StoreResult, Subject, TenantWeight,
};
use std::sync::Arc;
use std::time::Duration;

/// Where the search for a channel stands.
pub(crate) enum Probe<St: CapacityStore> {
    /// Admitted on candidate `index`; `guard` is `None` for an unlimited channel (or a
    /// store failure with the layer failing open).
    Admit {
        index: usize,
        guard: Option<CapacityGuard<St>>,
    },
    /// The store is still deciding candidate `index`.
    Ask {
        index: usize,
        answer: St::Future<Option<LeaseId>>,
    },
    /// Every candidate is full: queue.
    AllFull,
    /// Refused (store failure with the layer failing closed).
    Refuse(Rejection),
}

/// The first step for a request on `candidates`.
pub(crate) fn start<St: CapacityStore>(
    shared: &Arc<Shared<St>>,
    candidates: &[ChannelRef],
    prefetched: Option<&Prefetched>,
) -> Probe<St> {
    probe(shared, candidates, 0, prefetched)
}

/// The step after the store's `answer` for candidate `index`: admitted there, or on
/// to the next candidates.
pub(crate) fn on_answer<St: CapacityStore>(
    shared: &Arc<Shared<St>>,
    candidates: &[ChannelRef],
    index: usize,
    answer: StoreResult<Option<LeaseId>>,
) -> Probe<St> {
    let ch = shared.channel(&candidates[index]);
    match answer_for(shared, &ch, index, answer) {
        Some(probe) => probe,
        None => probe(shared, candidates, index + 1, None),
    }
}

/// Tries the candidates from `from` on, in order (Q2). A channel whose queue has
/// waiters counts as full: a newcomer never jumps the queue. A lease the upstream layer
/// `prefetched` with the channel's windows (see `crate::joint`) is held as taken here,
/// and a channel it found full is not asked again.
fn probe<St: CapacityStore>(
    shared: &Arc<Shared<St>>,
    candidates: &[ChannelRef],
    from: usize,
    prefetched: Option<&Prefetched>,
) -> Probe<St> {
    for (index, c) in candidates.iter().enumerate().skip(from) {
        if c.is_unlimited() {
            return Probe::Admit { index, guard: None };
        }
        let ch = shared.channel(c);
        let known = prefetched.filter(|p| p.channel() == &*c.name);
        if ch.queued() > 0 {
            // Given back through a guard, so the waiters see it free.
            if let Some(lease) = known.and_then(Prefetched::take_lease) {
                drop(CapacityGuard::new(shared.clone(), ch.clone(), lease).start());
            }
            continue;
        }
        if let Some(p) = known {
            if let Some(lease) = p.take_lease() {
                return Probe::Admit {
                    index,
                    guard: Some(CapacityGuard::new(shared.clone(), ch.clone(), lease).start()),
                };
            }
            if p.was_full() {
                continue;
            }
        }
        let mut answer = shared
            .config
            .store
            .try_acquire(&c.name, c.capacity, shared.ttl());
        match poll_now(&mut answer) {
            Some(a) => {
                if let Some(p) = answer_for(shared, &ch, index, a) {
                    return p;
                }
            }
            None => return Probe::Ask { index, answer },
        }
    }
    Probe::AllFull
}

/// The store's answer for candidate `index`; `None` = full, try the next.
fn answer_for<St: CapacityStore>(
    shared: &Arc<Shared<St>>,
    ch: &Arc<Channel<St>>,
    index: usize,
    answer: StoreResult<Option<LeaseId>>,
) -> Option<Probe<St>> {
    shared
        .state
        .failures
        .answered(LayerKind::CapacityQueue, &answer);
    match answer {
        Ok(Some(lease)) => Some(Probe::Admit {
            index,
            guard: Some(CapacityGuard::new(shared.clone(), ch.clone(), lease).start()),
        }),
        Ok(None) => None,
        Err(e) => Some(
            match shared.state.failures.on_error(
                shared.config.settings.failure_mode,
                LayerKind::CapacityQueue,
                &e,
            ) {
                None => Probe::Admit { index, guard: None },
                Some(r) => Probe::Refuse(r),
            },
        ),
    }
}

/// What the end of the wait answers.
#[derive(Clone, Copy)]
pub(crate) enum Expiry {
    /// `max_wait` binds: 42910.
    Busy,
    /// The request's deadline binds: 50401.
    Deadline,
}

/// How long a request may wait in the queue, and what answers it when that is over
/// (Q3): its deadline (the [`DEADLINE_HEADER`], else the layer's default) when that is
/// shorter than `max_wait`, else `max_wait`.
pub(crate) fn wait_budget(headers: &HeaderMap, config: &CapacityConfig) -> (Duration, Expiry) {
    let max_wait = config.max_wait;
    let deadline = headers
        .get(DEADLINE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .or(config.default_deadline);
    match deadline {
        Some(d) if d < max_wait => (d, Expiry::Deadline),
        _ => (max_wait, Expiry::Busy),
    }
}

/// The queue to join when every candidate is full (Q2): the limited candidate whose
/// waiters are expected to be served first; `None` when every candidate is unlimited.
pub(crate) fn shortest_wait<St: CapacityStore>(
    shared: &Shared<St>,
    candidates: &[ChannelRef],
) -> Option<(usize, Arc<Channel<St>>)> {
    let channels: Vec<(usize, Arc<Channel<St>>)> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.is_unlimited())
        .map(|(i, c)| (i, shared.channel(c)))
        .collect();
    // A channel with no history yet is assumed as fast as the known ones on average.
    let known: Vec<u64> = channels
        .iter()
        .filter_map(|(_, c)| c.avg_service_us())
        .collect();
    let default_us = match known.len() {
        0 => 1,
        n => known.iter().sum::<u64>() / n as u64,
    };
    channels.into_iter().min_by_key(|(_, c)| {
        expected_wait_us(
            c.queued(),
            c.capacity(),
            c.avg_service_us().unwrap_or(default_us),
        )
    })
}

/// The request's tenant for the fair queue: `Subject.tenant`, else the subject key,
/// else one shared anonymous tenant; and its weight (default 1).
pub(crate) fn tenant_of<B>(req: &Request<B>) -> (Arc<str>, u32) {
    let ext = req.extensions();
    let tenant = match ext.get::<Subject>() {
        Some(s) => s
            .tenant
            .clone()
            .unwrap_or_else(|| Arc::from(s.key.as_str())),
        None => Arc::from(""),
    };
    let weight = ext.get::<TenantWeight>().copied().unwrap_or_default();
    (tenant, weight.effective())
}
