//! The Redis store against the in-memory store, decision by decision (L4, D1): a long
//! random sequence of admits, settlements, views and lease operations, over several
//! subjects, both scopes and changing policies, on one manual clock shared by both
//! stores. Every answer must be identical — tickets, exceeded limits with their
//! retry-afters, usage views, lease decisions and counts. Two `RedisStore` instances
//! share the Redis and take turns.

mod common;

use common::RedisServer;
use portcullis_core::{
    Admission, Clock, Demand, LeaseId, ManualClock, MemoryStore, Outcome, Policy, Scope,
    SlotDecision, SlotStore, SubjectKey, Tier, Usage, WindowStore, WindowTicket,
};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

fn t(ms: u64, limit: u64) -> Tier {
    Tier::new(Duration::from_millis(ms), limit)
}

fn policies() -> Vec<Arc<Policy>> {
    let ps = vec![
        Policy::default()
            .with_requests(t(2_000, 3))
            .with_requests(t(10_000, 8))
            .with_tokens(t(2_000, 100))
            .with_tokens(t(10_000, 300)),
        Policy::default()
            .with_requests(t(3_000, 2))
            .with_images(t(4_000, 2))
            .with_videos(t(5_000, 1))
            .with_amount_cap(200)
            .with_rolling_rpm(4),
        Policy::default()
            .with_tokens(t(1_000, 50))
            .with_images(t(2_000, 3)),
        Policy::default().with_amount_cap(100),
        Policy::default()
            .with_requests(t(1_000, 1))
            .with_requests(t(7_000, 4))
            .with_tokens(t(4_000, 60))
            .with_rolling_rpm(3)
            .with_amount_cap(500),
        // Same dimensions as the first with a tier removed and one added (policy change).
        Policy::default()
            .with_requests(t(2_000, 3))
            .with_tokens(t(2_000, 100))
            .with_tokens(t(6_000, 150)),
    ];
    ps.into_iter()
        .inspect(|p| p.validate().expect("valid test policy"))
        .map(Arc::new)
        .collect()
}

/// `a` with the id of the store's admission record cleared.
fn without_id(a: Admission) -> Admission {
    match a {
        Admission::Admitted(t) => Admission::Admitted(WindowTicket { id: 0, ..t }),
        other => other,
    }
}

fn demand(r: &mut Rng) -> Demand {
    Demand {
        tokens: r.below(80),
        images: if r.below(3) == 0 { r.below(3) } else { 0 },
        videos: if r.below(5) == 0 { 1 } else { 0 },
        money: r.below(90) as i64,
    }
}

fn outcome(r: &mut Rng) -> Outcome {
    match r.below(4) {
        0 => Outcome::Refund,
        1 => Outcome::Completed(None),
        _ => Outcome::Completed(Some(Usage {
            input_tokens: r.below(60),
            cached_input_tokens: r.below(10),
            output_tokens: r.below(60),
            cost: (r.below(2) == 0).then(|| r.below(120) as i64),
            ..Usage::default()
        })),
    }
}

struct Held {
    key: usize,
    mem: LeaseId,
    redis: LeaseId,
    instance: usize,
}

struct Pending {
    key: usize,
    scope: Scope,
    mem: WindowTicket,
    redis: WindowTicket,
}

#[tokio::test]
async fn redis_decides_exactly_as_memory_seed_1() {
    run(0x9E37_79B9_7F4A_7C15).await;
}

#[tokio::test]
async fn redis_decides_exactly_as_memory_seed_2() {
    run(0xDEAD_BEEF).await;
}

#[tokio::test]
async fn redis_decides_exactly_as_memory_seed_3() {
    run(0x42).await;
}

async fn run(seed: u64) {
    const OPS: usize = 4_000;
    let server = RedisServer::start();
    // Start on no calendar boundary.
    let clock = ManualClock::new(1_700_000_000_123);
    let mem = MemoryStore::with_clock(clock.clone());
    let options = |id: &str| {
        RedisStoreOptions::default()
            .deadline(Duration::from_secs(2))
            .manual_clock(clock.clone())
            .instance_id(id)
    };
    let redis = [
        RedisStore::connect(&server.url(), options("a"))
            .await
            .unwrap(),
        RedisStore::connect(&server.url(), options("b"))
            .await
            .unwrap(),
    ];
    let policies = policies();
    let keys: Vec<SubjectKey> = (0..4)
        .map(|i| SubjectKey::from(format!("diff:{i}")))
        .collect();
    let mut r = Rng(seed);
    let mut held: Vec<Held> = Vec::new();
    let mut released: Vec<Held> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let (mut admitted, mut exceeded, mut acquired, mut full) = (0, 0, 0, 0);

    // Key expiries run on real time: never let virtual time fall behind it.
    let real_start = Instant::now();
    let virtual_start = clock.now();

    for op in 0..OPS {
        let behind = portcullis_core::clock::millis(real_start.elapsed())
            .saturating_sub(clock.now() - virtual_start);
        if behind > 0 {
            clock.advance(Duration::from_millis(behind));
        }
        let rs = &redis[r.below(2) as usize];
        let k = r.below(keys.len() as u64) as usize;
        let key = &keys[k];
        let scope = if r.below(3) == 0 {
            Scope::Subscription
        } else {
            Scope::Key
        };
        // Mostly a key's own policy; sometimes another one (the policy changed).
        let policy = if r.below(10) == 0 {
            r.pick(&policies).clone()
        } else {
            policies[k % policies.len()].clone()
        };
        let ctx = |what: &str| format!("op {op} {what} {key:?} {scope:?} at {}", clock.now());
        match r.below(100) {
            0..=14 => {
                let step = *r.pick(&[1, 1, 249, 250, 499, 500, 999, 1_000, 2_000, 3_500]);
                let step = if r.below(40) == 0 { 61_000 } else { step };
                clock.advance(Duration::from_millis(step));
            }
            15..=44 => {
                let d = demand(&mut r);
                let a = mem.admit(key, scope, &policy, &d).await.unwrap();
                let b = rs.admit(key, scope, &policy, &d).await.unwrap();
                // Redis records each admission under an id of its own (D9); the rest of
                // the ticket is the in-memory store's.
                if let Admission::Admitted(t) = &b {
                    assert_ne!(t.id, 0, "{}", ctx("a recorded admission"));
                }
                assert_eq!(a, without_id(b.clone()), "{}", ctx(&format!("admit {d:?}")));
                if let (Admission::Admitted(m), Admission::Admitted(x)) = (a, b) {
                    admitted += 1;
                    pending.push(Pending {
                        key: k,
                        scope,
                        mem: m,
                        redis: x,
                    });
                } else {
                    exceeded += 1;
                }
            }
            45..=59 if !pending.is_empty() => {
                let p = pending.swap_remove(r.below(pending.len() as u64) as usize);
                let o = outcome(&mut r);
                mem.settle(&keys[p.key], p.scope, p.mem, o).await.unwrap();
                rs.settle(&keys[p.key], p.scope, p.redis, o).await.unwrap();
            }
            60..=69 => {
                let a = mem.view(key, scope, &policy).await.unwrap();
                let b = rs.view(key, scope, &policy).await.unwrap();
                assert_eq!(a, b, "{}", ctx("view"));
            }
            70..=81 => {
                let limit = r.below(4) as u32;
                let ttl = *r.pick(&[2_000, 3_000, 10_000]);
                let i = r.below(2) as usize;
                let a = mem.acquire(key, limit, ttl).await.unwrap();
                let b = redis[i].acquire(key, limit, ttl).await.unwrap();
                match (a, b) {
                    (SlotDecision::Acquired(m), SlotDecision::Acquired(x)) => {
                        acquired += 1;
                        held.push(Held {
                            key: k,
                            mem: m,
                            redis: x,
                            instance: i,
                        });
                    }
                    (a, b) => {
                        full += 1;
                        assert_eq!(a, b, "{}", ctx(&format!("acquire limit {limit}")));
                    }
                }
            }
            82..=87 if !held.is_empty() => {
                let h = &held[r.below(held.len() as u64) as usize];
                let ttl = *r.pick(&[2_000, 5_000]);
                let a = mem.renew(&keys[h.key], h.mem, ttl).await.unwrap();
                let b = redis[h.instance]
                    .renew(&keys[h.key], h.redis, ttl)
                    .await
                    .unwrap();
                assert_eq!(a, b, "{}", ctx("renew"));
            }
            88..=95 if !held.is_empty() => {
                let h = held.swap_remove(r.below(held.len() as u64) as usize);
                mem.release(&keys[h.key], h.mem).await.unwrap();
                redis[h.instance]
                    .release(&keys[h.key], h.redis)
                    .await
                    .unwrap();
                released.push(h);
            }
            96 if !released.is_empty() => {
                // A late duplicate release frees nothing.
                let h = &released[r.below(released.len() as u64) as usize];
                mem.release(&keys[h.key], h.mem).await.unwrap();
                redis[h.instance]
                    .release(&keys[h.key], h.redis)
                    .await
                    .unwrap();
            }
            _ => {
                let a = mem.in_flight(key).await.unwrap();
                let b = rs.in_flight(key).await.unwrap();
                assert_eq!(a, b, "{}", ctx("in_flight"));
            }
        }
    }
    // Everything settles; then both stores agree on every view.
    for p in pending.drain(..) {
        mem.settle(&keys[p.key], p.scope, p.mem, Outcome::Refund)
            .await
            .unwrap();
        redis[0]
            .settle(&keys[p.key], p.scope, p.redis, Outcome::Refund)
            .await
            .unwrap();
    }
    for key in &keys {
        for scope in [Scope::Key, Scope::Subscription] {
            for p in &policies {
                assert_eq!(
                    mem.view(key, scope, p).await.unwrap(),
                    redis[1].view(key, scope, p).await.unwrap()
                );
            }
        }
    }
    // The sequence exercised both sides of every decision.
    assert!(
        admitted > 200 && exceeded > 200,
        "{admitted} admitted, {exceeded} exceeded"
    );
    assert!(
        acquired > 50 && full > 50,
        "{acquired} acquired, {full} full"
    );
}
