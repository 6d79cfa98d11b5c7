//! Slot leases on Redis: per-subject in-flight slots as leases in a ZSET (C1–C5), and
//! the capacity leases of channels on the same scripts (Q1–Q5).

use super::book::{self, BlockBook};
use crate::client::{Client, Undo, count, protocol};
use crate::future::RedisStoreFuture;
use crate::keys::Keys;
use crate::scripts::args::{
    BlockLeasesArgs, InFlightArgs, LeaseReleaseArgs, SlotAcquireArgs, SlotRenewArgs,
};
use portcullis_core::{LeaseId, Millis, SlotDecision, SubjectKey};
use std::sync::Arc;

/// Slot leases: acquire, renew, release, count.
#[derive(Clone)]
pub(crate) struct SlotOps {
    client: Client,
    book: Option<Arc<BlockBook>>,
}

impl SlotOps {
    pub(crate) fn new(client: Client, book: Option<Arc<BlockBook>>) -> Self {
        Self { client, book }
    }

    /// [`SlotStore::acquire`](portcullis_core::SlotStore::acquire).
    pub(crate) fn acquire(
        &self,
        key: &SubjectKey,
        limit: u32,
        ttl: Millis,
    ) -> RedisStoreFuture<SlotDecision> {
        let c = &self.client;
        let id = c.next_id();
        let slots = c.keys().slots(key);
        let args = SlotAcquireArgs {
            time: c.time(),
            limit,
            ttl,
            member: c.member(id),
        };
        let decided = c.eval(vec![slots.clone()], args, move |r: (i64, i64)| match r {
            (1, _) => Ok(SlotDecision::Acquired(id)),
            (0, n) => Ok(SlotDecision::Full {
                in_flight: count(n, "acquire")?,
            }),
            r => Err(protocol(format!("acquire: unexpected reply {r:?}"))),
        });
        c.undoing(lease_undo(c, &slots, id, 1), decided)
    }

    /// [`SlotStore::renew`](portcullis_core::SlotStore::renew).
    pub(crate) fn renew(
        &self,
        key: &SubjectKey,
        lease: LeaseId,
        ttl: Millis,
    ) -> RedisStoreFuture<bool> {
        let c = &self.client;
        let slots = c.keys().slots(key);
        if let Some(renewed) = book::renew(self.book.as_ref(), &slots, lease, ttl) {
            return renewed;
        }
        // Its slot changed owner within a lease TTL: a lease the old owner had not
        // replicated is restored (and counted) rather than reported gone (D10).
        let restore = c.slot_moved_within(&slots, ttl);
        let args = SlotRenewArgs {
            time: c.time(),
            ttl,
            member: c.member(lease),
            restore,
        };
        c.eval(vec![slots], args, |r: i64| Ok(r == 1))
    }

    /// Removes `lease` of `key` in the batch; `now`: send the batch at once instead of
    /// letting it wait for company.
    pub(crate) fn release(
        &self,
        key: &SubjectKey,
        lease: LeaseId,
        now: bool,
    ) -> RedisStoreFuture<()> {
        let c = &self.client;
        let slots = c.keys().slots(key);
        if let Some(released) = book::release(self.book.as_ref(), &slots, lease) {
            return released;
        }
        // One ZREM, atomic by itself, sent in the batch with the settlements ending at
        // the same moment. A release is never dropped for a passing outage: if its call
        // fails it is sent again until it lands (see `client::retry`); the lease's TTL is the
        // last resort.
        let args = LeaseReleaseArgs {
            member: c.member(lease),
        };
        let sent = c.batched(vec![slots], args, |_: i64| Ok(()));
        if now {
            c.flush_batch();
        }
        sent
    }

    /// [`SlotStore::in_flight`](portcullis_core::SlotStore::in_flight).
    pub(crate) fn in_flight(&self, key: &SubjectKey) -> RedisStoreFuture<u32> {
        let c = &self.client;
        let slots = c.keys().slots(key);
        let book = self.book.clone();
        let args = InFlightArgs { time: c.time() };
        c.eval(vec![slots.clone()], args, move |r: i64| {
            // Leases this instance borrowed and did not hand out are not in flight.
            let unused = book.map_or(0, |b| b.unused_slots(&slots));
            Ok(count(r, "in_flight")?.saturating_sub(unused))
        })
    }
}

/// What a call taking leases of `slots` under `id` gives back if its answer never
/// comes: the plain lease and, asking for a block of `size`, the block's.
pub(crate) fn lease_undo(c: &Client, slots: &str, id: LeaseId, size: u32) -> Vec<Undo> {
    let member = c.member(id);
    let mut undo = Vec::with_capacity(3);
    if size > 1 {
        let args = BlockLeasesArgs {
            base: member.clone(),
            size,
        };
        undo.push(Undo::op(vec![slots.to_owned()], args));
    }
    undo.push(Undo::op(
        vec![slots.to_owned()],
        LeaseReleaseArgs { member },
    ));
    undo
}

/// Capacity leases of channels: the slot scripts under a channel subject (Q1–Q5).
#[derive(Clone)]
pub(crate) struct CapacityOps {
    slots: SlotOps,
}

impl CapacityOps {
    pub(crate) fn new(slots: SlotOps) -> Self {
        Self { slots }
    }

    /// [`CapacityStore::try_acquire`](portcullis_core::CapacityStore::try_acquire).
    pub(crate) fn try_acquire(
        &self,
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> RedisStoreFuture<Option<LeaseId>> {
        let decided = self
            .slots
            .acquire(&Keys::channel_subject(channel), capacity, ttl);
        RedisStoreFuture::new(async move {
            Ok(match decided.await? {
                SlotDecision::Acquired(id) => Some(id),
                SlotDecision::Full { .. } => None,
            })
        })
    }

    pub(crate) fn renew(
        &self,
        channel: &str,
        lease: LeaseId,
        ttl: Millis,
    ) -> RedisStoreFuture<bool> {
        self.slots
            .renew(&Keys::channel_subject(channel), lease, ttl)
    }

    pub(crate) fn release(&self, channel: &str, lease: LeaseId) -> RedisStoreFuture<()> {
        // Waits for company (up to the batch delay): the request's concurrency slot,
        // released right after, sends it.
        self.slots
            .release(&Keys::channel_subject(channel), lease, false)
    }

    pub(crate) fn in_flight(&self, channel: &str) -> RedisStoreFuture<u32> {
        self.slots.in_flight(&Keys::channel_subject(channel))
    }
}
