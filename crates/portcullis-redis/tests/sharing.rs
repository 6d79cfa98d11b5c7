//! Limits do not multiply with instances (T4, ENGINEERING rule 15): two `RedisStore`s —
//! two connections, two instance ids — on one Redis enforce one set of limits under
//! concurrent load.

mod common;

use common::RedisServer;
use portcullis_core::{
    Admission, Demand, Outcome, Policy, Scope, SlotDecision, SlotStore, SubjectKey, Tier,
    WindowStore,
};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Two instances; a generous deadline: these tests count decisions, not latency.
async fn two_instances(server: &RedisServer) -> [RedisStore; 2] {
    let options = |id: &str| {
        RedisStoreOptions::default()
            .deadline(Duration::from_secs(2))
            .instance_id(id)
    };
    [
        RedisStore::connect(&server.url(), options("gw-a"))
            .await
            .unwrap(),
        RedisStore::connect(&server.url(), options("gw-b"))
            .await
            .unwrap(),
    ]
}

/// C1, T4: a burst of 2 × 100 simultaneous acquires over both instances takes exactly
/// the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_burst_of_acquires_on_two_instances_takes_exactly_the_limit() {
    const LIMIT: u32 = 5;
    let server = RedisServer::start();
    let stores = two_instances(&server).await;
    let key = SubjectKey::from("burst");
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let (s, key) = (stores[i % 2].clone(), key.clone());
            tokio::spawn(async move { (i % 2, s.acquire(&key, LIMIT, 60_000).await.unwrap()) })
        })
        .collect();
    let mut leases = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            (i, SlotDecision::Acquired(l)) => leases.push((i, l)),
            (_, SlotDecision::Full { in_flight }) => assert_eq!(in_flight, LIMIT),
        }
    }
    assert_eq!(leases.len(), LIMIT as usize);
    assert_eq!(stores[1].in_flight(&key).await.unwrap(), LIMIT);
    // Lease ids never coincide between instances: a lease released through the wrong
    // instance frees nothing.
    for &(i, l) in &leases {
        stores[1 - i].release(&key, l).await.unwrap();
    }
    assert_eq!(stores[0].in_flight(&key).await.unwrap(), LIMIT);
    for (i, l) in leases {
        stores[i].release(&key, l).await.unwrap();
    }
    assert_eq!(stores[0].in_flight(&key).await.unwrap(), 0);
}

/// C1, C3, T4: 2 × 40 workers acquire, hold for a moment and release, until each has
/// held a slot 5 times, on both instances: the number held never exceeds the limit, and
/// every slot is given back at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_churn_on_two_instances_never_exceeds_the_limit() {
    const LIMIT: u32 = 4;
    let server = RedisServer::start();
    let stores = two_instances(&server).await;
    let key = SubjectKey::from("churn");
    let held = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let taken = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..80u64)
        .map(|w| {
            let s = stores[(w % 2) as usize].clone();
            let (key, held, peak, taken) = (key.clone(), held.clone(), peak.clone(), taken.clone());
            tokio::spawn(async move {
                // Until this worker has held a slot 5 times.
                let mut n = 0u64;
                while n < 5 {
                    if let SlotDecision::Acquired(l) = s.acquire(&key, LIMIT, 60_000).await.unwrap()
                    {
                        // Counted only while certainly held: between the acquire's answer
                        // and the release's call.
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        taken.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_micros((w * 7 + n * 13) % 1_500)).await;
                        held.fetch_sub(1, Ordering::SeqCst);
                        s.release(&key, l).await.unwrap();
                        n += 1;
                    } else {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= LIMIT, "{peak} slots held at once, limit {LIMIT}");
    assert_eq!(peak, LIMIT, "the load never filled the limit: a weak test");
    assert_eq!(taken.load(Ordering::Relaxed), 400);
    assert_eq!(stores[0].in_flight(&key).await.unwrap(), 0);
}

/// W1, W4, T4: 2 × 100 simultaneous admits over both instances: exactly the request
/// limit is admitted; with a token tier tighter than the request tier, exactly as many
/// as the tokens allow. Refunds give everything back on either instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_admits_on_two_instances_never_exceed_a_window() {
    let server = RedisServer::start();
    let stores = two_instances(&server).await;
    for (name, policy, expected) in [
        (
            "requests",
            Policy::default().with_requests(Tier::per_minute(10)),
            10,
        ),
        (
            "tokens",
            Policy::default()
                .with_requests(Tier::per_minute(100))
                .with_tokens(Tier::per_minute(1_000)),
            33, // 33 × 30 = 990 ≤ 1000 < 34 × 30
        ),
        (
            "amount",
            Policy::default().with_amount_cap(1_000),
            // Admitted while spend + reservations < cap: 0, 70, …, 980 → 15.
            15,
        ),
    ] {
        let policy = Arc::new(policy);
        let key = SubjectKey::from(format!("windows:{name}"));
        let demand = Demand {
            money: 70,
            ..Demand::tokens(30)
        };
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let (s, key, policy) = (stores[i % 2].clone(), key.clone(), policy.clone());
                tokio::spawn(async move {
                    (
                        i % 2,
                        s.admit(&key, Scope::Key, &policy, &demand).await.unwrap(),
                    )
                })
            })
            .collect();
        let mut tickets = Vec::new();
        for t in tasks {
            if let (i, Admission::Admitted(ticket)) = t.await.unwrap() {
                tickets.push((i, ticket));
            }
        }
        assert_eq!(tickets.len(), expected, "{name}");
        for (i, ticket) in tickets {
            // Settled on the other instance than the one that admitted.
            stores[1 - i]
                .settle(&key, Scope::Key, ticket, Outcome::Refund)
                .await
                .unwrap();
        }
        let view = stores[0].view(&key, Scope::Key, &policy).await.unwrap();
        assert!(view.iter().all(|l| l.used == 0), "{name}: {view:?}");
    }
}

/// U1, D1: provider limits are windows under NUL-prefixed upstream scope keys; two
/// instances share them — a burst of 200 sends over both takes exactly the RPM, and
/// the ITPM key of the same scope counts apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u1_upstream_scope_windows_are_shared_by_instances() {
    use portcullis_core::upstream::{RateLimits, credential_key, scope_windows};
    let server = RedisServer::start();
    let stores = two_instances(&server).await;
    let limits = RateLimits {
        rpm: Some(50),
        itpm: Some(1_000_000),
        ..RateLimits::default()
    };
    let windows = Arc::new(scope_windows(&credential_key("org-1"), &limits));
    assert_eq!(windows.len(), 2);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let (s, w) = (stores[i % 2].clone(), windows.clone());
            tokio::spawn(async move {
                s.admit(&w[0].key, Scope::Key, &w[0].policy, &Demand::tokens(10))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        if let Admission::Admitted(_) = t.await.unwrap() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 50);
    let view = stores[1]
        .view(&windows[0].key, Scope::Key, &windows[0].policy)
        .await
        .unwrap();
    assert_eq!(view[0].used, 50);
    let itpm = stores[0]
        .view(&windows[1].key, Scope::Key, &windows[1].policy)
        .await
        .unwrap();
    assert_eq!(itpm[0].used, 0);
}

/// D1, F6: a cooldown or a disabled credential set on one instance reaches the others
/// over pub/sub (durations, not instants), and an operator's re-enable too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_cooldowns_set_on_one_instance_reach_the_other() {
    use portcullis_core::upstream::{DISABLED, UpstreamRegistry};
    use portcullis_core::{Clock, SystemClock};
    use portcullis_redis::CooldownSync;
    let server = RedisServer::start();
    let client = || portcullis_redis::redis::Client::open(server.url()).unwrap();
    let (a, b) = (
        Arc::new(UpstreamRegistry::new()),
        Arc::new(UpstreamRegistry::new()),
    );
    let sync_a = CooldownSync::start(client(), "t", "gw-a");
    let sync_b = CooldownSync::start(client(), "t", "gw-b");
    sync_a.attach(&a);
    sync_b.attach(&b);
    let now = || SystemClock::new().now();
    let until = |r: &UpstreamRegistry, k: &str| r.cooldowns().until(k, now());
    // Subscriptions come up asynchronously: wait (bounded) until one change goes through.
    let mut linked = false;
    for i in 0..100 {
        a.cooldowns()
            .cool(&format!("probe{i}"), now() + 60_000, now());
        tokio::time::sleep(Duration::from_millis(50)).await;
        if until(&b, &format!("probe{i}")).is_some() {
            linked = true;
            break;
        }
    }
    assert!(linked, "instance b never heard instance a");

    let eventually = |r: Arc<UpstreamRegistry>, k: &'static str, want: fn(Option<u64>) -> bool| async move {
        for _ in 0..100 {
            if want(r.cooldowns().until(k, SystemClock::new().now())) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    let t = now();
    a.cooldowns().cool("scope", t + 5_000, t);
    assert!(eventually(b.clone(), "scope", |u| u.is_some()).await);
    let got = until(&b, "scope").unwrap();
    assert!(
        got.abs_diff(t + 5_000) < 1_000,
        "{} ms off",
        got.abs_diff(t + 5_000)
    );
    // The other way round, and a disablement.
    b.cooldowns().disable("cred", now());
    assert!(eventually(a.clone(), "cred", |u| u == Some(DISABLED)).await);
    // An operator re-enables on b: a hears it.
    b.cooldowns().clear("cred");
    assert!(eventually(a.clone(), "cred", |u| u.is_none()).await);
    // Own messages are not applied twice: a's table still has one entry for "scope".
    assert_eq!(until(&a, "scope"), Some(t + 5_000));
}

/// D4 for cooldown sharing: with Redis dead, a storm of cooldown changes does not block
/// the request path, and the local table still works. (The publishing backlog's bound
/// is a `try_send` on a channel of `BACKLOG` places; this test does not measure it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_cooldown_sharing_with_redis_dead_never_blocks() {
    use portcullis_core::upstream::UpstreamRegistry;
    use portcullis_core::{Clock, SystemClock};
    use portcullis_redis::CooldownSync;
    let mut server = RedisServer::start();
    let registry = Arc::new(UpstreamRegistry::new());
    let sync = CooldownSync::start(
        portcullis_redis::redis::Client::open(server.url()).unwrap(),
        "t",
        "gw-a",
    );
    sync.attach(&registry);
    server.kill();
    let now = SystemClock::new().now();
    let started = std::time::Instant::now();
    for i in 0..20_000 {
        registry
            .cooldowns()
            .cool(&format!("k{i}"), now + 60_000, now);
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "20,000 local changes took {took:?}"
    );
    assert_eq!(
        registry.cooldowns().until("k19999", now),
        Some(now + 60_000)
    );
}
