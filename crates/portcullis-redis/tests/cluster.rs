//! The Redis store on a real Redis Cluster (D6): `redis-server --cluster-enabled yes`
//! processes on loopback ports joined with `redis-cli --cluster create`.
//!
//! - The store conformance suite of portcullis-core (slots, windows, billing) and the
//!   channel-capacity suite run unchanged on a 3-master Cluster, once reached through
//!   one node URL (Cluster mode detected) and once through the comma-separated list;
//!   every case ends with the invariants of D9 and D10 (`run_all` checks them after
//!   each case). One Cluster per harness runs the whole list in order (`run_all`, which
//!   `conformance_cases!` generates from the suite's one list): a Cluster of its own per
//!   case would start 66 Clusters.
//! - Keys spread over the masters (D3): every script's keys are on one slot, different
//!   subjects on different slots.
//! - A master failing over to its replica under load (D6): no over-admission, every
//!   call answered or failed within its deadline, and normal service within 1 s.

mod common;

use cluster::RedisCluster;
use portcullis_core::store::conformance::Harness;
use portcullis_core::{
    Clock, JointDecision, JointStore, ManualClock, Millis, SlotAsk, SlotDecision, SlotStore,
    StoreErrorKind, SubjectKey,
};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use portcullis_test_support::cluster;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The suites check decisions, not latency: a generous deadline keeps them from failing
/// on a busy machine.
fn options() -> RedisStoreOptions {
    RedisStoreOptions::default().deadline(Duration::from_secs(2))
}

/// How the harness reaches the Cluster.
#[derive(Clone, Copy)]
enum Reach {
    /// One node URL: the store must detect the Cluster.
    OneNode,
    /// Every master, comma-separated.
    List,
}

struct ClusterHarness {
    cluster: RedisCluster,
    reach: Reach,
    offset: Arc<AtomicU64>,
    clock: Option<ManualClock>,
}

impl ClusterHarness {
    fn new(reach: Reach, manual: bool) -> Self {
        Self {
            cluster: RedisCluster::start(3, 0),
            reach,
            offset: Arc::new(AtomicU64::new(0)),
            // A start on no calendar boundary, as the in-memory suite uses.
            clock: manual.then(|| ManualClock::new(1_700_000_000_123)),
        }
    }

    async fn connect(&self, options: RedisStoreOptions) -> RedisStore {
        let url = match self.reach {
            Reach::OneNode => self.cluster.seed_url(),
            Reach::List => self.cluster.comma_urls(),
        };
        let store = RedisStore::connect(&url, options)
            .await
            .expect("connect to the test cluster");
        assert!(
            store.is_cluster(),
            "{url} is a Cluster: the store must say so"
        );
        store
    }

    fn options(&self) -> RedisStoreOptions {
        match &self.clock {
            Some(c) => options().manual_clock(c.clone()),
            None => options().time_offset(self.offset.clone()),
        }
    }
}

impl Harness for ClusterHarness {
    type Store = RedisStore;

    /// Real time passing between the suite's calls on the server-time variant.
    const SLACK_MS: Millis = 250;

    async fn store(&self) -> RedisStore {
        // "A store with no state": the suite's functions never share a store.
        self.cluster.flush_all();
        self.connect(self.options()).await
    }

    async fn advance(&self, d: Duration) {
        match &self.clock {
            Some(c) => c.advance(d),
            None => {
                self.offset
                    .fetch_add(portcullis_core::clock::millis(d), Ordering::SeqCst);
            }
        }
    }

    fn now(&self) -> Option<Millis> {
        self.clock.as_ref().map(|c| c.now())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_conformance_suite_runs_unchanged_on_a_cluster_found_from_one_node() {
    let h = ClusterHarness::new(Reach::OneNode, false);
    portcullis_core::store::conformance::run_all(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_conformance_suite_runs_unchanged_on_a_cluster_named_by_a_list_exact_time() {
    let h = ClusterHarness::new(Reach::List, true);
    portcullis_core::store::conformance::run_all(&h).await;
}

mod capacity {
    use super::*;
    use portcullis_core::capacity::conformance::{Harness as CapacityHarness, run_all};

    impl CapacityHarness for ClusterHarness {
        type Store = RedisStore;
        async fn store(&self) -> RedisStore {
            self.cluster.flush_all();
            self.connect(self.options()).await
        }
        async fn advance(&self, d: Duration) {
            Harness::advance(self, d).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn d6_capacity_conformance_suite_runs_unchanged_on_a_cluster() {
        run_all(&ClusterHarness::new(Reach::List, true)).await;
    }
}

/// D3: per-subject keys spread over the masters, each subject's keys on one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_subjects_spread_over_the_masters_of_a_cluster() {
    let c = RedisCluster::start(3, 0);
    let store = RedisStore::connect(&c.seed_url(), options()).await.unwrap();
    let mut masters = HashMap::new();
    for i in 0..64 {
        let key = SubjectKey::from(format!("key-{i}"));
        let SlotDecision::Acquired(_) = store.acquire(&key, 1, 60_000).await.unwrap() else {
            panic!("a fresh subject has a free slot");
        };
        let slot = cluster::key_slot(store.slots_key(&key).as_bytes());
        *masters.entry(c.master_of_slot(slot)).or_insert(0) += 1;
    }
    assert_eq!(masters.len(), 3, "64 subjects on every master: {masters:?}");
    let (total, _) = c.key_counts();
    assert_eq!(total, 64, "one lease key per subject across the masters");
}

/// Scheduling slack of a failed call's time on a loaded 2-core host: far below the
/// seconds a call waiting on a failed master's reconnection would take. It covers the
/// second deadline a store watches while its process is behind (`conn/liveness.rs`) and
/// the timers' lateness; beside two busy loops and other builds on a 2-core box the
/// slowest call on a stalled master (50 ms deadline) took 58 ms.
const FAILURE_SLACK: Duration = Duration::from_millis(200);

/// What the failover test measured.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    slowest_failure_us: AtomicU64,
    violations: AtomicU64,
}

/// D6, T4, T5: a master fails over to its replica while 16 workers take and give back
/// slots of 8 subjects (limit 2 each). No subject is ever over its limit, every call is
/// answered or fails within its deadline (plus scheduling slack), and within 1 s of the
/// failover every call succeeds again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_master_failover_under_load_loses_no_limit_and_recovers_within_a_second() {
    const LIMIT: u32 = 2;
    const SUBJECTS: usize = 8;
    let deadline = Duration::from_millis(100);
    let c = RedisCluster::start(3, 1);
    let store = RedisStore::connect(&c.comma_urls(), options().deadline(deadline))
        .await
        .unwrap();
    let held: Arc<Vec<AtomicI64>> = Arc::new((0..SUBJECTS).map(|_| AtomicI64::new(0)).collect());
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    // Failures after this instant (µs since `t0`) break "normal service within 1 s".
    let t0 = Instant::now();
    let late_failures = Arc::new(AtomicU64::new(0));
    let recovered_after_us = Arc::new(AtomicU64::new(u64::MAX));
    let mut workers = Vec::new();
    for w in 0..16 {
        let (store, held, tally, stop) = (store.clone(), held.clone(), tally.clone(), stop.clone());
        let (late, recovered) = (late_failures.clone(), recovered_after_us.clone());
        workers.push(tokio::spawn(async move {
            let mut n = 0u64;
            // Bounded: at most 20 s of work or 100k calls per worker.
            while !stop.load(Ordering::Relaxed)
                && n < 100_000
                && t0.elapsed() < Duration::from_secs(20)
            {
                n += 1;
                let s = (w + n as usize) % SUBJECTS;
                let key = SubjectKey::from(format!("sub-{s}"));
                let began = Instant::now();
                match store.acquire(&key, LIMIT, 30_000).await {
                    Ok(SlotDecision::Acquired(lease)) => {
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                        let now_held = held[s].fetch_add(1, Ordering::SeqCst) + 1;
                        if now_held > i64::from(LIMIT) {
                            tally.violations.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        held[s].fetch_sub(1, Ordering::SeqCst);
                        // A release that fails is retried by the store; the lease TTL is
                        // the last resort. Either way the slot is no longer ours.
                        let _ = store.release(&key, lease).await;
                    }
                    Ok(SlotDecision::Full { .. }) => {
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        let took = began.elapsed().as_micros() as u64;
                        tally.failed.fetch_add(1, Ordering::Relaxed);
                        tally.slowest_failure_us.fetch_max(took, Ordering::Relaxed);
                        assert!(
                            matches!(
                                e.kind(),
                                StoreErrorKind::Timeout | StoreErrorKind::Unavailable
                            ),
                            "a failover fails calls as timeouts or unavailability, not {e}"
                        );
                        let at = t0.elapsed().as_micros() as u64;
                        if std::env::var_os("PORTCULLIS_DEBUG").is_some()
                            && !e.to_string().contains("failing fast")
                        {
                            eprintln!("{at} us: {e}");
                        }
                        if at > recovered.load(Ordering::Relaxed) {
                            late.fetch_add(1, Ordering::Relaxed);
                        }
                        // A failed call comes back at once while the breaker is open:
                        // without a pause this loop never yields, and 16 of them starve
                        // the runtime (and the connection's reader the breaker's probe
                        // waits on) — a client of the gateway gets its error and comes
                        // back later.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        }));
    }
    // Load on every master (at least 500 ms of it, and until calls succeed: a loaded
    // host may take longer to start the workers), then fail over the master of subject
    // 0's slot.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = Instant::now();
    while tally.ok.load(Ordering::Relaxed) < 100 && loaded.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_ok = tally.ok.load(Ordering::Relaxed);
    assert!(before_ok > 0, "no call succeeded before the failover");
    let slot = cluster::key_slot(store.slots_key(&SubjectKey::from("sub-0")).as_bytes());
    let old = c.master_of_slot(slot);
    let failover_started = t0.elapsed();
    // Blocks this worker thread only: the workers go on on the other one.
    let new = tokio::task::block_in_place(|| c.failover(old));
    assert_ne!(new, old);
    let failover_done = t0.elapsed();
    // From 1 s after the new master took over, every call must succeed.
    recovered_after_us.store(
        (failover_done + Duration::from_secs(1)).as_micros() as u64,
        Ordering::Relaxed,
    );
    let ok_at_failover = tally.ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let ok_after = tally.ok.load(Ordering::Relaxed) - ok_at_failover;
    let failed = tally.failed.load(Ordering::Relaxed);
    let slowest = Duration::from_micros(tally.slowest_failure_us.load(Ordering::Relaxed));
    eprintln!(
        "failover {failover_started:?}..{failover_done:?}: ok {} (after: {ok_after}), failed {failed}, \
         slowest failure {slowest:?}",
        tally.ok.load(Ordering::Relaxed)
    );
    assert_eq!(
        tally.violations.load(Ordering::Relaxed),
        0,
        "a subject went over its limit"
    );
    assert!(
        ok_after > 100,
        "service resumed after the failover ({ok_after} calls)"
    );
    assert_eq!(
        late_failures.load(Ordering::Relaxed),
        0,
        "calls still failed more than 1 s after the failover"
    );
    // A failure costs at most the deadline, plus scheduling slack on a busy 2-core box:
    // what the bound catches is a call that waits on the failed master past its
    // deadline (a reconnection or a slot refresh takes seconds), not scheduling noise.
    assert!(
        slowest <= deadline + FAILURE_SLACK,
        "a failed call took {slowest:?} (deadline {deadline:?} + {FAILURE_SLACK:?} of slack)"
    );
    // Nothing left held: every lease of the run was released.
    for s in 0..SUBJECTS {
        let key = SubjectKey::from(format!("sub-{s}"));
        let n = store.in_flight(&key).await.unwrap();
        assert_eq!(n, 0, "subject {s} still has {n} leases");
    }
}

/// T5, D8 on a Cluster: one master stalled (SIGSTOP) fails the calls on its slots at
/// the deadline — its silence is judged per node, not drowned by the other nodes'
/// answers — while calls on the other masters go on succeeding (no breaker shared
/// across nodes); once it resumes, its calls succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_one_stalled_master_fails_its_own_calls_at_the_deadline_and_no_others() {
    let deadline = Duration::from_millis(50);
    let c = RedisCluster::start(3, 0);
    let store = RedisStore::connect(&c.comma_urls(), options().deadline(deadline))
        .await
        .unwrap();
    // Give the store its first read of the slot owners.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let master_of =
        |k: &SubjectKey| c.master_of_slot(cluster::key_slot(store.slots_key(k).as_bytes()));
    let stalled_key = SubjectKey::from("stalled-0");
    let frozen = master_of(&stalled_key);
    let healthy_key = (0..)
        .map(|i| SubjectKey::from(format!("healthy-{i}")))
        .find(|k| master_of(k) != frozen)
        .unwrap();
    // Warm-up, not the subject of a deadline: a 50 ms call may time out on a loaded
    // host, so each key is tried until answered (the store then holds a connection to
    // both masters).
    for k in [&stalled_key, &healthy_key] {
        common::until_ok(&format!("warm-up on {k:?}"), || store.in_flight(k)).await;
    }
    c.freeze(frozen);
    // Shorter than the Cluster's node timeout (1 s): no failover, no CLUSTERDOWN.
    let until = Instant::now() + Duration::from_millis(600);
    let healthy = {
        let store = store.clone();
        let key = healthy_key.clone();
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while Instant::now() < until {
                match store.acquire(&key, 1_000, 30_000).await {
                    Ok(SlotDecision::Acquired(lease)) => {
                        ok += 1;
                        let _ = store.release(&key, lease).await;
                    }
                    Ok(SlotDecision::Full { .. }) => ok += 1,
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        })
    };
    let mut stalled_calls = Vec::new();
    while Instant::now() < until {
        let began = Instant::now();
        let r = store.in_flight(&stalled_key).await;
        stalled_calls.push((began.elapsed(), r.map_err(|e| e.kind())));
    }
    c.thaw(frozen);
    let (ok, failed) = healthy.await.unwrap();
    eprintln!(
        "stalled node: {} calls, slowest {:?}; healthy node: {ok} ok, {} failed",
        stalled_calls.len(),
        stalled_calls.iter().map(|(d, _)| *d).max(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "calls on a healthy master failed: {failed:?}"
    );
    assert!(ok > 10, "calls on a healthy master went on ({ok})");
    assert!(
        stalled_calls.iter().all(|(_, r)| r.is_err()),
        "a stalled master answered nothing"
    );
    for (took, r) in &stalled_calls {
        // The deadline (or at once, while its breaker is open), plus scheduling slack.
        assert!(
            *took <= deadline + FAILURE_SLACK,
            "a call on the stalled master took {took:?} ({r:?})"
        );
    }
    // Back: within 1 s its calls succeed again.
    let back = Instant::now();
    loop {
        if store.in_flight(&stalled_key).await.is_ok() {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "no recovery within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Decisions on a subject whose slot is on a healthy master, after another master
/// (with no replica) was killed and flagged failed by the Cluster: how many of 20
/// were answered.
async fn answered_next_to_a_dead_master(full_coverage: bool) -> usize {
    let mut cluster = RedisCluster::start(3, 0);
    let setting = if full_coverage { "yes" } else { "no" };
    for m in cluster.master_ports() {
        cluster.cli(
            m,
            &["CONFIG", "SET", "cluster-require-full-coverage", setting],
        );
    }
    // No quota blocks: every decision is a call to Redis.
    let store = RedisStore::connect(&cluster.comma_urls(), options().blocks(None))
        .await
        .expect("connect");
    let ports = cluster.master_ports();
    let (healthy, dead) = (ports[0], ports[1]);
    let key = (0..)
        .map(|i| SubjectKey::from(format!("subject-{i}").as_str()))
        .find(|k| cluster.master_of_key(store.slots_key(k).as_bytes()) == healthy)
        .expect("a subject on the first master");
    assert!(matches!(
        store.acquire(&key, 1_000, 30_000).await,
        Ok(SlotDecision::Acquired(_))
    ));
    let dead_id = cluster.node_id(dead);
    cluster.kill(dead);
    // Until the healthy master has flagged the dead one FAIL (a few node timeouts).
    let flagged = Instant::now();
    while !cluster
        .cli(healthy, &["CLUSTER", "NODES"])
        .lines()
        .any(|l| l.starts_with(&dead_id) && l.contains(" master,fail "))
    {
        assert!(
            flagged.elapsed() < Duration::from_secs(20),
            "the dead master was never flagged FAIL"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // With full coverage required, the healthy master also declares the cluster down
    // (on its next state update, within about a second).
    while full_coverage
        && !cluster
            .cli(healthy, &["CLUSTER", "INFO"])
            .contains("cluster_state:fail")
    {
        assert!(
            flagged.elapsed() < Duration::from_secs(20),
            "the cluster never went down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut answered = 0;
    for _ in 0..20 {
        if store.acquire(&key, 1_000, 30_000).await.is_ok() {
            answered += 1;
        }
    }
    answered
}

/// D11: with `cluster-require-full-coverage no` the healthy masters keep serving the
/// subjects on their slots while a master is dead; with the default `yes` every node
/// answers CLUSTERDOWN, so a dead master takes every key down (the Redis operations
/// guide's Cluster settings say which to use).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d11_without_full_coverage_a_dead_master_leaves_the_other_masters_serving() {
    assert_eq!(answered_next_to_a_dead_master(false).await, 20);
    assert_eq!(answered_next_to_a_dead_master(true).await, 0);
}

/// Every key of the node at `port` with its remaining TTL (ms, 0 = none), read in one
/// transaction: a consistent copy of what the node holds.
async fn snapshot(port: u16) -> Vec<(String, Vec<u8>, i64)> {
    let mut con = node_connection(port).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap();
    let mut pipe = redis::pipe();
    pipe.atomic();
    for k in &keys {
        pipe.cmd("DUMP").arg(k).cmd("PTTL").arg(k);
    }
    let values: Vec<(Vec<u8>, i64)> = pipe.query_async(&mut con).await.unwrap();
    keys.into_iter()
        .zip(values)
        .map(|(k, (dump, ttl))| (k, dump, ttl.max(0)))
        .collect()
}

/// Puts the node at `port` back as `snapshot` had it, in one transaction.
async fn restore(port: u16, snapshot: &[(String, Vec<u8>, i64)]) {
    let mut con = node_connection(port).await;
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("FLUSHALL").ignore();
    for (k, dump, ttl) in snapshot {
        pipe.cmd("RESTORE").arg(k).arg(ttl).arg(dump).ignore();
    }
    let () = pipe.query_async(&mut con).await.unwrap();
}

/// A plain connection to one node of the Cluster (no redirections followed).
async fn node_connection(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the node")
}

/// D10 without replica acks: a billing block's retirement that the old master
/// acknowledged and a failover lost — here the new master's data put back as the old
/// master held it before the retirement — is sent again once the store sees the
/// books' slot change owner, and lands: the block holds no money, the balance is
/// charged once, nothing is left pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d10_a_block_retirement_lost_with_a_failover_is_sent_again_and_lands() {
    use portcullis_core::{
        AttemptState, BillingDecision, BillingOutcome, BillingRequest, BillingStore, Budget,
    };
    const START: i64 = 1 << 45;
    let c = RedisCluster::start(3, 1);
    let sizing = portcullis_core::blocks::BlockSizing::default().with_money(true);
    let store = RedisStore::connect(&c.comma_urls(), options().blocks(Some(sizing)))
        .await
        .expect("connect");
    let budgets = [Budget::new("month", 1 << 50, None)];
    store.seed_balance("acme", START).await.unwrap();
    let req = BillingRequest {
        attempt: "lost-retirement".into(),
        tenant: Some("acme".into()),
        key: "k1".into(),
        spend_cap: None,
        budgets: Arc::from(budgets.to_vec()),
        money: 100,
        bill_balance: true,
        lifetime_ms: 60_000,
        tenant_expected: true,
    };
    assert_eq!(
        store.check_and_reserve(&req).await.unwrap(),
        BillingDecision::Admitted
    );
    assert_eq!(
        store
            .settle_attempt(&req.attempt_ref(), BillingOutcome::Settled(40))
            .await
            .unwrap(),
        Some(AttemptState::Settled(40))
    );
    let tenant = store.tenant_key("acme");
    let old = c.master_of_key(tenant.as_bytes());
    let held = |port: u16| {
        let blk = c.cli(port, &["HGET", &tenant, "blk"]);
        blk.trim().parse::<i64>().unwrap_or(0)
    };
    let until_none_held = async |port: u16, what: &str| {
        let start = Instant::now();
        while held(port) > 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    // What a replica that never received the retirement holds: the block open.
    let open = snapshot(old).await;
    assert!(held(old) > 0, "the block retired before the copy was taken");
    until_none_held(old, "the block retires").await;
    let new = tokio::task::block_in_place(|| c.failover(old));
    restore(new, &open).await;
    assert!(held(new) > 0, "the retirement is lost with the failover");
    until_none_held(new, "the retirement is sent again and lands").await;
    let v = store
        .account(Some("acme"), &"k1".into(), &budgets)
        .await
        .unwrap();
    assert_eq!(v.balance, Some(START - 40));
    assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (40, 0));
    assert!(store.pending().await.unwrap().is_empty());
}

/// D10 without replica acknowledgements: a lease lost with a failover (the old master
/// had not replicated it) is restored by its next renewal and counted again — the
/// request still runs. (Without a failover a lease that is gone stays gone: the
/// conformance suite's C4 runs on a Cluster too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d10_a_lease_lost_with_a_failover_is_restored_by_its_next_renewal() {
    let c = RedisCluster::start(3, 1);
    let store = RedisStore::connect(&c.comma_urls(), options())
        .await
        .expect("connect");
    let key = SubjectKey::from("lost-lease");
    let ttl = 60_000;
    let SlotDecision::Acquired(lease) = store.acquire(&key, 5, ttl).await.unwrap() else {
        panic!("no slot");
    };
    let slots = store.slots_key(&key);
    let old = c.master_of_key(slots.as_bytes());
    let new = tokio::task::block_in_place(|| c.failover(old));
    // The lease the old master had not replicated: gone on the new one.
    let member = format!("{}:{lease}", store.instance_id());
    c.cli(new, &["ZREM", &slots, &member]);
    assert_eq!(
        store.in_flight(&key).await.unwrap(),
        0,
        "lost with the failover"
    );
    // The store learns the new owner within a second (it rereads the slot owners).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        store.renew(&key, lease, ttl).await.unwrap(),
        "the running request's lease is restored"
    );
    assert_eq!(store.in_flight(&key).await.unwrap(), 1, "and counted");
    store.release(&key, lease).await.unwrap();
    assert_eq!(store.in_flight(&key).await.unwrap(), 0);

    // A request's lease from a quota block, lost with the block in a failover: restored
    // by its next renewal too (the block has retired by then; its holders renew alone).
    let blocks = RedisStore::connect(
        &c.comma_urls(),
        options().blocks(Some(portcullis_core::blocks::BlockSizing::default())),
    )
    .await
    .expect("connect");
    let key = SubjectKey::from("lost-block");
    let ask = SlotAsk {
        key: key.clone(),
        limit: 1_000,
        ttl,
    };
    let JointDecision::Admitted { lease, .. } = blocks.acquire_and_admit(&ask, None).await.unwrap()
    else {
        panic!("no slot");
    };
    let (_, index) = portcullis_core::blocks::borrowed_lease(lease).expect("a block's lease");
    let slots = blocks.slots_key(&key);
    let old = c.master_of_key(slots.as_bytes());
    let new = tokio::task::block_in_place(|| c.failover(old));
    let held = c.cli(new, &["ZCARD", &slots]);
    assert!(
        held.trim().parse::<u32>().unwrap() > 1,
        "a block was borrowed: {held}"
    );
    c.cli(new, &["DEL", &slots]);
    assert_eq!(
        store.in_flight(&key).await.unwrap(),
        0,
        "lost with the failover"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        blocks.renew(&key, lease, ttl).await.unwrap(),
        "the running request's lease (index {index} of its block) is restored"
    );
    assert_eq!(store.in_flight(&key).await.unwrap(), 1, "and counted");
    blocks.release(&key, lease).await.unwrap();
    assert_eq!(store.in_flight(&key).await.unwrap(), 0);
}
