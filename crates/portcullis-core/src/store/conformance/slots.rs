//! Concurrency slots (C1–C5).
use super::helpers::*;

/// C1, C5: at most `limit` live leases per subject; 0 means unlimited; the in-flight
/// count is the number of live leases.
pub async fn c1_limit_enforced_zero_unlimited<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("c1");
    assert_eq!(in_flight(&s, &k).await, 0);
    let a = acquired(&s, &k, 2, LONG_TTL).await;
    let b = acquired(&s, &k, 2, LONG_TTL).await;
    assert_ne!(a, b, "two live leases share an id");
    assert_eq!(in_flight(&s, &k).await, 2);
    assert_eq!(
        acquire(&s, &k, 2, LONG_TTL).await,
        SlotDecision::Full { in_flight: 2 }
    );
    // A lower limit (the policy changed) sees every live lease.
    assert_eq!(
        acquire(&s, &k, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 2 }
    );
    // The refused attempts took nothing.
    assert_eq!(in_flight(&s, &k).await, 2);
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    let c = acquired(&s, &k, 2, LONG_TTL).await;
    assert_eq!(in_flight(&s, &k).await, 2);
    release(&s, &k, b).await;
    release(&s, &k, c).await;
    assert_eq!(in_flight(&s, &k).await, 0);

    // 0 = unlimited.
    let u = key("c1:unlimited");
    let mut ids = Vec::new();
    for _ in 0..50 {
        ids.push(acquired(&s, &u, 0, LONG_TTL).await);
    }
    assert_eq!(in_flight(&s, &u).await, 50);
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 50, "lease ids must be unique");
    for id in ids {
        release(&s, &u, id).await;
    }
    assert_eq!(in_flight(&s, &u).await, 0);
    s
}

/// C3: a lease is released exactly once; a second (stale) release is harmless and
/// never frees a slot someone else holds.
pub async fn c3_release_exactly_once<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("c3");
    let a = acquired(&s, &k, 1, LONG_TTL).await;
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 0, "double release went below zero");
    let b = acquired(&s, &k, 1, LONG_TTL).await;
    // A late duplicate release of `a` must not free `b`'s slot.
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    assert_eq!(
        acquire(&s, &k, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    assert!(
        !renew(&s, &k, a, LONG_TTL).await,
        "a released lease was renewed"
    );
    assert!(renew(&s, &k, b, LONG_TTL).await);
    release(&s, &k, b).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    let c = acquired(&s, &k, 1, LONG_TTL).await;
    release(&s, &k, c).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    s
}

/// C4: a lease older than its TTL stops counting and is purged at the next admission
/// check, so a crashed holder's slot heals by itself.
pub async fn c4_expired_lease_purged_at_next_check<H: Harness>(h: &H) -> Case<H::Store> {
    const TTL: Millis = 2_000;
    let s = case(h).await;
    let k = key("c4:purge");
    let crashed = acquired(&s, &k, 1, TTL).await;
    h.advance(ms(1_500)).await;
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    if exact::<H>() {
        h.advance(ms(499)).await; // 1 ms before the TTL
        assert_eq!(in_flight(&s, &k).await, 1);
        assert_eq!(
            acquire(&s, &k, 1, TTL).await,
            SlotDecision::Full { in_flight: 1 }
        );
        h.advance(ms(1)).await; // exactly at the TTL: expired
    } else {
        h.advance(ms(1_000)).await;
    }
    assert_eq!(in_flight(&s, &k).await, 0, "an expired lease still counts");
    let fresh = acquired(&s, &k, 1, TTL).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    // The crashed holder's lease is gone: renewing fails, releasing is harmless.
    assert!(!renew(&s, &k, crashed, TTL).await);
    release(&s, &k, crashed).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    release(&s, &k, fresh).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    s
}

/// C4: renewing a running request's lease keeps it counted past its first TTL; once
/// renewals stop it expires a TTL after the last one.
pub async fn c4_renewal_keeps_lease<H: Harness>(h: &H) -> Case<H::Store> {
    const TTL: Millis = 2_000;
    let s = case(h).await;
    let k = key("c4:renew");
    let a = acquired(&s, &k, 1, TTL).await;
    h.advance(ms(1_500)).await;
    assert!(renew(&s, &k, a, TTL).await); // now expires at 3.5 s
    h.advance(ms(1_500)).await; // 3.0 s: past the first TTL
    assert_eq!(in_flight(&s, &k).await, 1);
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    assert!(renew(&s, &k, a, TTL).await); // now expires at 5.0 s
    h.advance(ms(1_500)).await; // 4.5 s
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    h.advance(ms(1_000)).await; // 5.5 s: no renewal since 3.0 s
    assert!(!renew(&s, &k, a, TTL).await, "an expired lease was renewed");
    assert_eq!(in_flight(&s, &k).await, 0);
    let b = acquired(&s, &k, 1, TTL).await;
    release(&s, &k, b).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    s
}

/// C1: slots are counted per subject key; a release under the wrong key frees nothing.
pub async fn slots_are_per_key<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (k1, k2) = (key("slots:1"), key("slots:2"));
    let a = acquired(&s, &k1, 1, LONG_TTL).await;
    let b = acquired(&s, &k2, 1, LONG_TTL).await;
    assert_eq!(
        acquire(&s, &k1, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    assert_eq!(
        acquire(&s, &k2, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    release(&s, &k2, a).await;
    assert_eq!(in_flight(&s, &k1).await, 1);
    assert_eq!(in_flight(&s, &k2).await, 1);
    release(&s, &k1, a).await;
    assert_eq!(in_flight(&s, &k1).await, 0);
    assert_eq!(in_flight(&s, &k2).await, 1);
    release(&s, &k2, b).await;
    assert_eq!(in_flight(&s, &k2).await, 0);
    s
}
