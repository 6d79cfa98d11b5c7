//! Slot leases (C1–C5): each in-flight request holds one timestamped lease.
//!
//! A lease carries its expiry; an expired lease is purged at the next admission check
//! for that subject (C4), so slots leaked by a crashed instance heal by themselves.
//! Leases are renewed while their request runs, which lets the TTL be short.

use crate::clock::Millis;

/// Identifies one lease of one subject. Unique per store instance.
pub type LeaseId = u64;

/// One held slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The lease.
    pub id: LeaseId,
    /// When it expires unless renewed.
    pub expires_at: Millis,
}

/// The leases of one subject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseSet {
    leases: Vec<Lease>,
}

/// No slot was free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full {
    /// Live leases at the decision.
    pub in_flight: u32,
}

impl LeaseSet {
    /// Drops leases whose TTL has passed; returns how many.
    pub fn purge(&mut self, now: Millis) -> usize {
        let before = self.leases.len();
        self.leases.retain(|l| l.expires_at > now);
        before - self.leases.len()
    }

    /// Takes a slot for `id` if fewer than `limit` live leases exist (0 = unlimited).
    pub fn try_acquire(
        &mut self,
        id: LeaseId,
        limit: u32,
        ttl: Millis,
        now: Millis,
    ) -> Result<(), Full> {
        self.purge(now);
        if limit != 0 && self.leases.len() >= limit as usize {
            return Err(Full {
                in_flight: self.leases.len() as u32,
            });
        }
        self.leases.push(Lease {
            id,
            expires_at: now.saturating_add(ttl),
        });
        Ok(())
    }

    /// Extends a live lease to `now + ttl`. False if it is gone (expired and purged,
    /// or released): the caller's request is no longer counted.
    pub fn renew(&mut self, id: LeaseId, ttl: Millis, now: Millis) -> bool {
        match self.leases.iter_mut().find(|l| l.id == id) {
            Some(l) if l.expires_at > now => {
                l.expires_at = l.expires_at.max(now.saturating_add(ttl));
                true
            }
            _ => false,
        }
    }

    /// Gives a slot back. False if the lease was not held (already released or purged),
    /// so a double release can never free someone else's slot.
    pub fn release(&mut self, id: LeaseId) -> bool {
        match self.leases.iter().position(|l| l.id == id) {
            Some(i) => {
                self.leases.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Live leases at `now` (C5).
    pub fn in_flight(&self, now: Millis) -> u32 {
        self.leases.iter().filter(|l| l.expires_at > now).count() as u32
    }

    /// True when no live lease remains.
    pub fn is_idle(&self, now: Millis) -> bool {
        self.in_flight(now) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_limit_is_enforced_and_zero_is_unlimited() {
        let mut s = LeaseSet::default();
        assert!(s.try_acquire(1, 2, 100, 0).is_ok());
        assert!(s.try_acquire(2, 2, 100, 0).is_ok());
        assert_eq!(s.try_acquire(3, 2, 100, 0), Err(Full { in_flight: 2 }));
        let mut u = LeaseSet::default();
        for i in 0..1000 {
            assert!(u.try_acquire(i, 0, 100, 0).is_ok());
        }
    }

    #[test]
    fn c3_release_is_exactly_once() {
        let mut s = LeaseSet::default();
        s.try_acquire(1, 1, 100, 0).unwrap();
        assert!(s.release(1));
        assert!(!s.release(1));
        s.try_acquire(2, 1, 100, 0).unwrap();
        // A stale double release of lease 1 must not free lease 2.
        assert!(!s.release(1));
        assert_eq!(s.in_flight(0), 1);
    }

    #[test]
    fn c4_expired_lease_is_purged_at_next_check() {
        let mut s = LeaseSet::default();
        s.try_acquire(1, 1, 600_000, 0).unwrap();
        assert!(s.try_acquire(2, 1, 600_000, 599_999).is_err());
        assert!(s.try_acquire(2, 1, 600_000, 600_000).is_ok());
        assert!(!s.release(1), "the purged lease is gone");
    }

    #[test]
    fn c4_renewal_keeps_a_running_request_alive() {
        let mut s = LeaseSet::default();
        s.try_acquire(1, 1, 30_000, 0).unwrap();
        assert!(s.renew(1, 30_000, 10_000));
        assert!(s.renew(1, 30_000, 35_000));
        assert!(s.try_acquire(2, 1, 30_000, 60_000).is_err());
        assert_eq!(s.in_flight(60_000), 1);
        // Not renewed any more: gone after its TTL.
        assert!(s.try_acquire(2, 1, 30_000, 65_000).is_ok());
        assert!(!s.renew(1, 30_000, 65_000));
    }

    #[test]
    fn c4_a_lease_is_gone_at_its_expiry_instant() {
        let mut s = LeaseSet::default();
        s.try_acquire(1, 0, 100, 0).unwrap();
        s.try_acquire(2, 0, 200, 0).unwrap();
        assert_eq!(s.purge(99), 0);
        // At the instant it expires, a lease is no longer live: it cannot be renewed,
        // is not counted, and the next purge drops it (and says how many it dropped).
        assert!(!s.renew(1, 100, 100));
        assert_eq!(s.in_flight(100), 1);
        assert_eq!(s.purge(100), 1);
        assert_eq!(s.purge(250), 1);
        assert!(s.is_idle(250));
    }
}
