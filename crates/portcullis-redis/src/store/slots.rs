//! [`SlotStore`] on Redis: per-subject in-flight slots as leases in a ZSET (C1–C5).

use super::*;
use crate::client::Undo;
use crate::scripts::args::{InFlightArgs, LeaseReleaseArgs, SlotAcquireArgs, SlotRenewArgs};
use portcullis_core::blocks::borrowed_lease;
use portcullis_core::{
    LeaseId, Millis, SlotDecision, SlotStore, StoreError, StoreErrorKind, SubjectKey,
};

impl SlotStore for RedisStore {
    type Future<T: Send + 'static> = RedisStoreFuture<T>;

    fn acquire(&self, key: &SubjectKey, limit: u32, ttl: Millis) -> Self::Future<SlotDecision> {
        let id = self.client().next_id();
        let args = SlotAcquireArgs {
            time: self.client().time(),
            limit,
            ttl,
            member: self.client().member(id),
        };
        let decided =
            self.client().eval(
                vec![self.slots_key(key)],
                args,
                move |r: (i64, i64)| match r {
                    (1, _) => Ok(SlotDecision::Acquired(id)),
                    (0, n) => Ok(SlotDecision::Full {
                        in_flight: count(n, "acquire")?,
                    }),
                    r => Err(StoreError::new(
                        StoreErrorKind::Protocol,
                        format!("acquire: unexpected reply {r:?}"),
                    )),
                },
            );
        let member = self.client().member(id);
        let undo = Undo::op(vec![self.slots_key(key)], LeaseReleaseArgs { member });
        self.client().undoing(vec![undo], decided)
    }

    fn renew(&self, key: &SubjectKey, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        if borrowed_lease(lease).is_some() {
            return self.renew_borrowed(self.slots_key(key), lease, ttl);
        }
        let slots = self.slots_key(key);
        // Its slot changed owner within a lease TTL: a lease the old owner had not
        // replicated is restored (and counted) rather than reported gone (D10).
        let restore = self.client().slot_moved_within(&slots, ttl);
        let args = SlotRenewArgs {
            time: self.client().time(),
            ttl,
            member: self.client().member(lease),
            restore,
        };
        self.client().eval(vec![slots], args, |r: i64| Ok(r == 1))
    }

    fn release(&self, key: &SubjectKey, lease: LeaseId) -> Self::Future<()> {
        // The next request of this subject — maybe on another instance, which cannot
        // flush this one's batch — waits for this release: it goes out at once, with
        // whatever the request queued before it (its settlements, its capacity lease).
        self.release_lease(key, lease, true)
    }

    fn in_flight(&self, key: &SubjectKey) -> Self::Future<u32> {
        let slots = self.slots_key(key);
        let store = self.clone();
        self.client().eval(
            vec![slots.clone()],
            InFlightArgs {
                time: self.client().time(),
            },
            move |r: i64| {
                // Leases this instance borrowed and did not hand out are not in flight.
                let unused = store.blocks().map_or(0, |b| b.unused_slots(&slots));
                Ok(count(r, "in_flight")?.saturating_sub(unused))
            },
        )
    }
}

impl RedisStore {
    /// Removes `lease` of `key` in the batch; `now`: send the batch at once instead of
    /// letting it wait for company.
    pub(super) fn release_lease(
        &self,
        key: &SubjectKey,
        lease: LeaseId,
        now: bool,
    ) -> RedisStoreFuture<()> {
        if portcullis_core::blocks::borrowed_lease(lease).is_some() {
            return self.release_borrowed(&self.slots_key(key), lease);
        }
        // One ZREM, atomic by itself, sent in the batch with the settlements ending at
        // the same moment. A release is never dropped for a passing outage: if its call
        // fails it is sent again until it lands (see `retry`); the lease's TTL is the
        // last resort.
        let sent = self.client().batched(
            vec![self.slots_key(key)],
            LeaseReleaseArgs {
                member: self.client().member(lease),
            },
            |_: i64| Ok(()),
        );
        if now {
            self.client().flush_batch();
        }
        sent
    }
}
