//! [`CapacityStore`](portcullis_core::CapacityStore) on Redis: per-channel capacity
//! leases, on the slot scripts under a channel subject (Q1–Q5).

use super::*;
use portcullis_core::{LeaseId, Millis, SlotDecision, SlotStore};

impl portcullis_core::CapacityStore for RedisStore {
    type Future<T: Send + 'static> = RedisStoreFuture<T>;

    fn try_acquire(
        &self,
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> Self::Future<Option<LeaseId>> {
        let decided = SlotStore::acquire(self, &Keys::channel_subject(channel), capacity, ttl);
        RedisStoreFuture::new(async move {
            Ok(match decided.await? {
                SlotDecision::Acquired(id) => Some(id),
                SlotDecision::Full { .. } => None,
            })
        })
    }
    fn renew(&self, channel: &str, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        SlotStore::renew(self, &Keys::channel_subject(channel), lease, ttl)
    }
    fn release(&self, channel: &str, lease: LeaseId) -> Self::Future<()> {
        // Waits for company (up to the batch delay): the request's concurrency slot,
        // released right after, sends it.
        self.release_lease(&Keys::channel_subject(channel), lease, false)
    }
    fn in_flight(&self, channel: &str) -> Self::Future<u32> {
        SlotStore::in_flight(self, &Keys::channel_subject(channel))
    }
}
