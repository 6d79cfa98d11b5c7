//! The in-memory store stays bounded under a flood of distinct keys, drops idle state
//! (released slots, rolled windows) instead of live state, and keeps slot limits exact
//! under concurrent use (L4, C1, C3, W2's "state whose every current window is empty
//! may be evicted").
//!
//! Every loop is bounded by a count.

use crate::store::memory::MemoryStats;
use crate::{
    Admission, Clock, Demand, ManualClock, MemoryStore, Outcome, Policy, Scope, SlotDecision,
    SubjectKey, Tier,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CAPACITY: usize = 10_000;
/// Slack over the capacity: the store bounds each of its shards at
/// `ceil(capacity / shards)`, so the total may exceed `capacity` by less than the
/// number of shards.
const MARGIN: usize = CAPACITY / 100;
const FLOOD: usize = 1_000_000;
const TTL: u64 = 600_000;

fn store(clock: &ManualClock) -> MemoryStore<ManualClock> {
    MemoryStore::with_clock_and_capacity(clock.clone(), CAPACITY)
}

#[track_caller]
fn assert_bounded(s: &MemoryStats, at: usize) {
    assert!(
        s.window_entries <= CAPACITY + MARGIN && s.slot_entries <= CAPACITY + MARGIN,
        "after {at} keys: {s:?} exceeds {CAPACITY} + {MARGIN}"
    );
}

/// A flood of 1,000,000 distinct keys, each admitted once and each taking and giving
/// back a slot, on a frozen clock: every window entry stays live, so the store must
/// evict live entries (and count each one) to stay within its capacity; released slots
/// leave nothing behind.
#[test]
fn flood_of_distinct_keys_stays_bounded() {
    let started = Instant::now();
    let clock = ManualClock::new(1_700_000_000_000);
    let s = store(&clock);
    let policy = Arc::new(Policy::default().with_requests(Tier::per_minute(1)));
    let demand = Demand::tokens(1);
    let mut max_windows = 0;
    for i in 0..FLOOD {
        let key = SubjectKey::from(format!("flood-{i}"));
        match s.admit_now(&key, Scope::Key, &policy, &demand) {
            // The request ran and ended: its window count stays, the ticket is closed.
            Admission::Admitted(t) => s.settle_now(&key, Scope::Key, &t, Outcome::Completed(None)),
            Admission::Exceeded(e) => panic!("key {i} is new, yet rejected: {e:?}"),
        }
        let SlotDecision::Acquired(lease) = s.acquire_now(&key, 1, TTL) else {
            panic!("key {i} is new, yet has no free slot");
        };
        s.release_now(&key, lease);
        if i % 10_000 == 9_999 {
            let st = s.stats();
            assert_bounded(&st, i + 1);
            assert_eq!(
                st.slot_entries,
                0,
                "released slots stayed after {} keys",
                i + 1
            );
            max_windows = max_windows.max(st.window_entries);
        }
    }
    let st = s.stats();
    eprintln!(
        "flood: {st:?}, max window entries {max_windows}, {:?}",
        started.elapsed()
    );
    assert_bounded(&st, FLOOD);
    assert_eq!(st.slot_entries, 0);
    // The store fills up to about its capacity (it evicts an eighth of a full shard
    // at a time) ...
    assert!(
        st.window_entries >= CAPACITY * 3 / 4,
        "the store kept only {} entries",
        st.window_entries
    );
    // ... and every key it no longer holds was a live eviction, counted.
    assert_eq!(st.evicted_live as usize + st.window_entries, FLOOD);

    // Every window rolls: all state is idle and a sweep drops it.
    clock.advance(Duration::from_secs(60));
    s.sweep();
    assert_eq!(s.stats().window_entries, 0);
    assert_eq!(
        s.stats().evicted_live,
        st.evicted_live,
        "a sweep is no live eviction"
    );
}

/// When the state that fills the store is idle (windows that rolled), new keys make
/// room by dropping it: no live entry is ever evicted, and the store stays bounded.
#[test]
fn idle_entries_are_dropped_before_live_ones() {
    let clock = ManualClock::new(1_700_000_000_000);
    let s = store(&clock);
    // 1 per second, one new key per ms: about 1,000 keys are live at any time, far
    // below the capacity, while 200,000 keys pass through.
    let policy = Arc::new(Policy::default().with_requests(Tier::new(Duration::from_secs(1), 1)));
    let demand = Demand::tokens(1);
    for i in 0..200_000 {
        let key = SubjectKey::from(format!("rolling-{i}"));
        let Admission::Admitted(t) = s.admit_now(&key, Scope::Key, &policy, &demand) else {
            panic!("key {i} is new, yet rejected");
        };
        s.settle_now(&key, Scope::Key, &t, Outcome::Completed(None));
        clock.advance(Duration::from_millis(1));
        if i % 5_000 == 4_999 {
            assert_bounded(&s.stats(), i + 1);
        }
    }
    let st = s.stats();
    eprintln!("rolling flood: {st:?}");
    assert_bounded(&st, 200_000);
    assert_eq!(
        st.evicted_live, 0,
        "a live entry was evicted while idle ones were held"
    );
    // The most recent second of keys is still live and still held.
    let last = SubjectKey::from("rolling-199999");
    assert!(matches!(
        s.admit_now(&last, Scope::Key, &policy, &demand),
        Admission::Exceeded(_)
    ));
    clock.advance(Duration::from_secs(1));
    s.sweep();
    assert_eq!(s.stats().window_entries, 0);
}

/// Slots leaked by crashed holders (never released) are bounded like any other state,
/// counted when evicted, and heal by themselves once their TTL has passed (C4).
#[test]
fn leaked_slots_are_bounded_and_expire() {
    let clock = ManualClock::new(1_700_000_000_000);
    let s = store(&clock);
    for i in 0..100_000 {
        let key = SubjectKey::from(format!("leak-{i}"));
        assert!(matches!(
            s.acquire_now(&key, 1, 30_000),
            SlotDecision::Acquired(_)
        ));
    }
    let st = s.stats();
    assert_bounded(&st, 100_000);
    assert!(st.slot_entries >= CAPACITY * 3 / 4, "{st:?}");
    assert_eq!(st.evicted_live as usize + st.slot_entries, 100_000);
    clock.advance(Duration::from_millis(30_000));
    s.sweep();
    assert_eq!(s.stats().slot_entries, 0, "expired leases are idle");
}

/// A refund (L5), a rejection (W4) or a release (C3) of an unknown key leaves no entry:
/// a flood of refused requests costs no memory.
#[test]
fn rejected_and_refunded_requests_leave_nothing() {
    let clock = ManualClock::new(1_700_000_000_000);
    let s = store(&clock);
    let policy = Arc::new(
        Policy::default()
            .with_requests(Tier::per_minute(10))
            .with_tokens(Tier::per_minute(100)),
    );
    for i in 0..20_000 {
        let key = SubjectKey::from(format!("refused-{i}"));
        // Larger than the tier: rejected.
        assert!(matches!(
            s.admit_now(&key, Scope::Key, &policy, &Demand::tokens(500)),
            Admission::Exceeded(_)
        ));
        // Admitted, then refunded.
        let Admission::Admitted(t) = s.admit_now(&key, Scope::Key, &policy, &Demand::tokens(50))
        else {
            panic!("key {i} is new, yet rejected");
        };
        s.settle_now(&key, Scope::Key, &t, crate::Outcome::Refund);
        // A stray release and renewal of a lease this key never had.
        s.release_now(&key, 42);
        assert!(!s.renew_now(&key, 42, TTL));
    }
    let st = s.stats();
    assert_eq!(
        (st.window_entries, st.slot_entries, st.evicted_live),
        (0, 0, 0),
        "{st:?}"
    );
}

/// C1 under contention: threads hammer one key with acquire/release on a limit of N and
/// never hold more than N slots at once (counted between acquire and release).
fn hammer_one_key(threads: usize, limit: u32, rounds: usize) {
    let clock = ManualClock::new(0);
    let s = store(&clock);
    let key = SubjectKey::from("hot");
    let live = AtomicU32::new(0);
    let max_live = AtomicU32::new(0);
    let acquired = AtomicU64::new(0);
    let full = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                for round in 0..rounds {
                    match s.acquire_now(&key, limit, TTL) {
                        SlotDecision::Acquired(lease) => {
                            let now_live = live.fetch_add(1, Ordering::SeqCst) + 1;
                            max_live.fetch_max(now_live, Ordering::SeqCst);
                            assert!(now_live <= limit, "{now_live} live slots, limit {limit}");
                            // Hold the slot a little so the others contend for it;
                            // now and then lose the CPU while holding it.
                            for _ in 0..50 {
                                std::hint::spin_loop();
                            }
                            if round % 64 == 0 {
                                std::thread::yield_now();
                            }
                            live.fetch_sub(1, Ordering::SeqCst);
                            s.release_now(&key, lease);
                            acquired.fetch_add(1, Ordering::Relaxed);
                        }
                        SlotDecision::Full { in_flight } => {
                            assert_eq!(in_flight, limit, "full below the limit");
                            full.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let (acquired, full) = (acquired.into_inner(), full.into_inner());
    eprintln!(
        "{threads} threads, limit {limit}: {acquired} acquired, {full} full, max live {}",
        max_live.load(Ordering::SeqCst)
    );
    assert_eq!(acquired + full, (threads * rounds) as u64);
    assert!(acquired > 0);
    assert!(full > 0, "no contention was observed");
    assert!(max_live.into_inner() <= limit);
    assert_eq!(s.in_flight_now(&key), 0, "a slot leaked");
    assert_eq!(s.stats().slot_entries, 0);
    assert_eq!(clock.now(), 0);
}

#[test]
fn c1_concurrent_acquire_never_exceeds_limit_of_one() {
    hammer_one_key(4, 1, 20_000);
}

#[test]
fn c1_concurrent_acquire_never_exceeds_limit_of_three() {
    hammer_one_key(4, 3, 20_000);
}

/// W4 under contention: an admission is one atomic check-and-reserve, so threads racing
/// on one key get exactly the limit admitted, no more, no fewer.
#[test]
fn w4_concurrent_admissions_admit_exactly_the_limit() {
    let clock = ManualClock::new(0);
    let s = store(&clock);
    let key = SubjectKey::from("hot-window");
    let policy = Arc::new(
        Policy::default()
            .with_requests(Tier::per_hour(1_000))
            .with_tokens(Tier::per_hour(50_000)),
    );
    let admitted = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..2_000 {
                    if let Admission::Admitted(_) =
                        s.admit_now(&key, Scope::Key, &policy, &Demand::tokens(10))
                    {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(admitted.into_inner(), 1_000);
    let v = s.view_now(&key, Scope::Key, &policy);
    assert_eq!(v[0].used, 1_000);
    assert_eq!(v[1].used, 10_000);
}
