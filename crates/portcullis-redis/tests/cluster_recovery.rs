//! T5, D9, D10 on a Redis Cluster under load: a master's fault — a forced failover, a
//! kill, a 3 s stall (SIGSTOP, failed over by the Cluster) — fails only the calls on the
//! keys it owns, those calls succeed again within 1 s of the Cluster being ok again, and
//! the run ends with nothing held by nobody and the books exact.
//!
//! The load: two store instances (two gateways), each with two clients per master; every
//! client makes billed requests on a subject and a tenant whose keys all live on one
//! master — a joint slot and window decision, a billing reservation with a budget, a
//! settlement with the cost, then the window settlement and the slot release as the
//! layers send them (without waiting). Every store writes with `replica_acks(1)`. A
//! request's decisions that fail are what the gateway answers 503; they are logged with
//! their time (`PORTCULLIS_DEBUG=1` prints each as it happens).
//!
//! "The Cluster is ok again": every live node says `cluster_state:ok`, the faulted
//! shard's master reports its replicas `online` in `INFO replication`
//! ([`cluster::ok_again`]) and acknowledges a write ([`cluster::acknowledging`]) — until
//! then D10 refuses the shard's admissions whatever the store does, and a replica
//! acknowledges some 0.3–0.5 s after it shows `online` (on a busy host, over 1 s).
//! Every Cluster here runs with `cluster-require-full-coverage no`, as the operations
//! guide says (D11): with `yes`, every node answers `CLUSTERDOWN` for every key while
//! a dead master is flagged FAIL and not yet replaced, whatever the client does.
//!
//! The load runs catch a client that holds every node's calls while it rereads the
//! topology only when such a hold outlasts the deadline (they did, in about half the
//! kill and stall runs, with redis-rs' Cluster client alone);
//! [`t5_a_slot_moved_while_a_master_is_stalled_fails_no_call_on_the_healthy_masters`]
//! shows that hold every time.

mod common;

use cluster::{MasterFault, RedisCluster};
use common::load::{self, Kept};
use portcullis_core::store::conformance::{assert_books_exact, assert_nothing_held};
use portcullis_core::{
    AttemptState, BillingOutcome, BillingStore, Budget, Demand, Outcome, Policy, Scope, SlotStore,
    SubjectKey, Tier, Usage,
};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use portcullis_test_support::cluster;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Store instances (gateways), clients per instance and master.
const INSTANCES: usize = 2;
const CLIENTS: usize = 2;
const BALANCE: i64 = 1_000_000_000;
const COST: i64 = 3;
const MONEY: i64 = 10;
const TOKENS: u64 = 7;
/// The bound of T5: decisions resume within this of the Cluster being ok again.
const RESUME: Duration = Duration::from_secs(1);
/// Load kept up after the Cluster is ok again: the 1 s of T5 and as much again.
const AFTER_OK: Duration = Duration::from_secs(2);

fn policy() -> Arc<Policy> {
    Arc::new(
        Policy::default()
            .with_concurrency(1_000)
            .with_requests(Tier::per_hour(10_000_000))
            .with_tokens(Tier::per_hour(10_000_000_000)),
    )
}

fn budget() -> Budget {
    Budget::new("rec-budget", 1_000_000_000, None)
}

/// The stores under test: the default deadline (20 ms) is for an idle host; on a
/// loaded 2-core host beside six to nine Redis processes a healthy call must not fail
/// for scheduling, so the deadline is 100 ms — still short enough that a client stack
/// holding every node's calls while one node fails over fails the healthy masters'
/// calls (what these runs caught). Every decision is a call to Redis (no quota blocks);
/// every write waits for one replica.
fn options() -> RedisStoreOptions {
    RedisStoreOptions::default()
        .deadline(Duration::from_millis(100))
        .blocks(None)
        .replica_acks(1)
}

/// One master's share of the load: a tenant and subjects whose keys all live on it.
#[derive(Clone)]
struct Group {
    master: u16,
    tenant: String,
    subjects: Vec<SubjectKey>,
}

/// A call that failed: when (since the run's start), on which master's group, what.
#[derive(Clone, Debug)]
struct Failure {
    at: Duration,
    group: usize,
    what: &'static str,
    error: String,
}

/// What the clients did.
#[derive(Default)]
struct Tally {
    failures: Mutex<Vec<Failure>>,
    /// Completed requests, per group and subject.
    completed: Mutex<std::collections::BTreeMap<SubjectKey, u64>>,
    /// Completions per group after the run's `resume` mark (µs since start).
    completed_after: [AtomicU64; 3],
    /// Costs the store answered "settled", per group.
    charged: [AtomicI64; 3],
    kept: Kept,
}

impl Tally {
    fn failed(&self, t0: Instant, group: usize, what: &'static str, e: impl ToString) {
        let f = Failure {
            at: t0.elapsed(),
            group,
            what,
            error: e.to_string(),
        };
        if std::env::var_os("PORTCULLIS_DEBUG").is_some() {
            eprintln!(
                "{:>6} ms group {group} {what}: {}",
                f.at.as_millis(),
                f.error
            );
        }
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(f);
    }
    fn failures(&self) -> Vec<Failure> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Shared by the clients of a run.
struct Run {
    t0: Instant,
    tally: Tally,
    stop: AtomicBool,
    /// µs since `t0` after which completions are counted in `completed_after`.
    resume_mark_us: AtomicU64,
}

/// One client: billed requests on `key` and the group's tenant until the run stops
/// (bounded: 30 s or 100k requests at most).
async fn client(
    s: RedisStore,
    name: String,
    group: usize,
    on: Group,
    key: SubjectKey,
    run: Arc<Run>,
) {
    let p = policy();
    let failed = |what, e| run.tally.failed(run.t0, group, what, e);
    let kept = &run.tally.kept;
    let mut n = 0u64;
    while !run.stop.load(Ordering::Relaxed)
        && n < 100_000
        && run.t0.elapsed() < Duration::from_secs(30)
    {
        n += 1;
        let req = load::billed(format!("{name}-{n}"), &on.tenant, &key, budget(), MONEY);
        let demand = Demand::tokens(TOKENS);
        let Some(a) = load::admit_and_reserve(&s, &p, demand, 60_000, &req, kept, &failed).await
        else {
            continue;
        };
        // The provider's answer: a few ms, so the load leaves the host some CPU (a
        // starved Redis looks stalled, D8).
        tokio::time::sleep(Duration::from_millis(4 + n % 4)).await;
        let settled = BillingOutcome::Settled(COST);
        match load::settle_until_landed(&s, &a.attempt, settled, kept, &failed).await {
            Some(AttemptState::Settled(c)) => {
                run.tally.charged[group].fetch_add(c, Ordering::Relaxed);
            }
            other => panic!("a settlement answered {other:?}"),
        }
        let usage = Usage {
            input_tokens: TOKENS,
            ..Usage::default()
        };
        load::give_back(&s, &key, &a, Outcome::Completed(Some(usage)));
        *run.tally
            .completed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default() += 1;
        if run.t0.elapsed().as_micros() as u64 > run.resume_mark_us.load(Ordering::Relaxed) {
            run.tally.completed_after[group].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A Cluster the faults change (a kill needs it mutably).
type Shared = Mutex<RedisCluster>;

fn lock(c: &Shared) -> std::sync::MutexGuard<'_, RedisCluster> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`cluster::ok_again`] (the Cluster ok again after a fault on the shard of
/// `probe_slot`; its master's port), off the runtime's worker threads.
async fn ok_again(live: &[u16], probe_slot: u16, limit: Duration) -> u16 {
    let live = live.to_vec();
    tokio::task::spawn_blocking(move || cluster::ok_again(&live, probe_slot, limit))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Waits until the master at `master` gets a replica's acknowledgement of a write in
/// `slot` ([`cluster::acknowledging`]), off the runtime's worker threads.
async fn acknowledging(master: u16, slot: u16) {
    tokio::task::spawn_blocking(move || {
        cluster::acknowledging(master, slot, 1, Duration::from_secs(15))
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// The 3 s stall of these runs: three node timeouts, so the Cluster fails the master over.
const STALL: MasterFault = MasterFault::Stall(Duration::from_secs(3));

/// Runs the load on a Cluster of 3 masters × `replicas` replicas, applies `fault` to the
/// master of group 0, waits until the Cluster is ok again, keeps the load up
/// [`AFTER_OK`] more, and checks T5 (a, b) and D9/D10 (c).
async fn recovers(fault: MasterFault, replicas: usize) {
    let c: Arc<Shared> = Arc::new(Mutex::new(RedisCluster::start(3, replicas)));
    // As the operations guide says to run a Cluster (D11): with the default `yes`, every
    // node answers CLUSTERDOWN for every key from the moment a dead master is flagged
    // FAIL until its replica is promoted, and no client can keep the other shards up.
    {
        let c = lock(&c);
        for p in c.ports() {
            c.cli(p, &["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
        }
    }
    let url = lock(&c).comma_urls();
    let observer = RedisStore::connect(&url, common::patient().blocks(None))
        .await
        .expect("connect");
    let masters = lock(&c).master_ports();
    let nodes = lock(&c).nodes();
    let owner_of = |key: &str| {
        let slot = cluster::key_slot(key.as_bytes());
        nodes
            .iter()
            .find(|n| n.role == cluster::Role::Master && n.owns(slot))
            .map(|n| n.port)
            .expect("an owner")
    };
    // Per master: a tenant, and subjects, whose keys all hash to it.
    let groups: Vec<Group> = masters
        .iter()
        .enumerate()
        .map(|(g, &m)| {
            let tenant = (0..)
                .map(|i| format!("tenant-{g}-{i}"))
                .find(|t| owner_of(&observer.tenant_key(t)) == m)
                .unwrap();
            let subjects = (0..)
                .map(|i| SubjectKey::from(format!("subject-{g}-{i}")))
                .filter(|k| owner_of(&observer.slots_key(k)) == m)
                .take(CLIENTS)
                .collect();
            Group {
                master: m,
                tenant,
                subjects,
            }
        })
        .collect();
    // Every shard ok before the load, its replicas acknowledging writes: a replica still
    // in its first sync, or linked up a moment ago, answers no `WAIT`, and that is not
    // the run.
    let all: Vec<u16> = lock(&c).ports();
    for g in &groups {
        let slot = cluster::key_slot(observer.slots_key(&g.subjects[0]).as_bytes());
        let master = ok_again(&all, slot, Duration::from_secs(15)).await;
        acknowledging(master, slot).await;
    }
    let run = Arc::new(Run {
        t0: Instant::now(),
        tally: Tally::default(),
        stop: AtomicBool::new(false),
        resume_mark_us: AtomicU64::new(u64::MAX),
    });
    for g in &groups {
        observer.set_balance(&g.tenant, BALANCE).await.unwrap();
        run.tally.kept.record(|f| {
            f.ledger_mut().balance_set(&g.tenant, BALANCE);
            for k in &g.subjects {
                f.slot(k).window(k, Scope::Key, &policy());
            }
        });
    }
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        instances.push(RedisStore::connect(&url, options()).await.unwrap());
    }
    let mut tasks = Vec::new();
    for (i, s) in instances.iter().enumerate() {
        for (gi, g) in groups.iter().enumerate() {
            for (ci, k) in g.subjects.iter().enumerate() {
                let name = format!("{fault:?}-i{i}g{gi}c{ci}");
                tasks.push(tokio::spawn(client(
                    s.clone(),
                    name,
                    gi,
                    g.clone(),
                    k.clone(),
                    run.clone(),
                )));
            }
        }
    }
    // How late this process's runtime runs a 10 ms timer: the host's load, logged next
    // to the failures (a healthy call fails only if its master is silent for its deadline).
    let lag = {
        let run = run.clone();
        tokio::spawn(async move {
            let mut worst = (Duration::ZERO, Duration::ZERO);
            while !run.stop.load(Ordering::Relaxed) && run.t0.elapsed() < Duration::from_secs(40) {
                let asked = Instant::now();
                tokio::time::sleep(Duration::from_millis(10)).await;
                let late = asked.elapsed().saturating_sub(Duration::from_millis(10));
                if late > worst.0 {
                    worst = (late, run.t0.elapsed());
                }
            }
            worst
        })
    };
    // Load on every master: 500 ms at least, and until each group completed requests.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = Instant::now();
    loop {
        let done = run.tally.completed.lock().unwrap().clone();
        let each = groups.iter().all(|g| {
            g.subjects
                .iter()
                .all(|k| done.get(k).copied().unwrap_or(0) >= 20)
        });
        if each {
            break;
        }
        assert!(
            loaded.elapsed() < Duration::from_secs(10),
            "the load did not start: {done:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let victim = groups[0].master;
    let probe_slot = cluster::key_slot(observer.slots_key(&groups[0].subjects[0]).as_bytes());
    let fault_at = run.t0.elapsed();
    let live: Vec<u16> = {
        let c2 = c.clone();
        tokio::task::spawn_blocking(move || lock(&c2).fault(victim, fault))
            .await
            .unwrap()
    };
    let faulted = run.t0.elapsed();
    let new_master = ok_again(&live, probe_slot, Duration::from_secs(15)).await;
    let online_at = run.t0.elapsed();
    acknowledging(new_master, probe_slot).await;
    let ok_at = run.t0.elapsed();
    let resume = ok_at + RESUME;
    run.resume_mark_us
        .store(resume.as_micros() as u64, Ordering::Relaxed);
    tokio::time::sleep(AFTER_OK).await;
    run.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client");
    }
    let stopped = run.t0.elapsed();
    let (lag, lag_at) = lag.await.expect("lag monitor");

    let failures = run.tally.failures();
    let healthy: Vec<&Failure> = failures.iter().filter(|f| f.group != 0).collect();
    let faulted_shard: Vec<&Failure> = failures.iter().filter(|f| f.group == 0).collect();
    let late: Vec<&Failure> = faulted_shard
        .iter()
        .copied()
        .filter(|f| f.at > resume)
        .collect();
    let last = faulted_shard.iter().map(|f| f.at).max();
    eprintln!(
        "{fault:?}: fault at {fault_at:?}, done at {faulted:?} (master {victim} -> {new_master}), \
         cluster ok at {online_at:?}, its replicas acknowledging at {ok_at:?}, stopped at \
         {stopped:?}; faulted shard: {} failures, last at \
         {last:?} ({:?} after ok), {} later than ok + 1 s; healthy shards: {} failures; \
         completions after ok + 1 s per group {:?}; a 10 ms timer late by {lag:?} at worst \
         (at {lag_at:?})",
        faulted_shard.len(),
        last.map(|l| l.as_secs_f64() - ok_at.as_secs_f64()),
        late.len(),
        healthy.len(),
        run.tally
            .completed_after
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect::<Vec<_>>()
    );
    let show = |fs: &[&Failure]| {
        fs.iter()
            .take(10)
            .map(|f| {
                format!(
                    "{} ms {} {}: {}",
                    f.at.as_millis(),
                    f.group,
                    f.what,
                    f.error
                )
            })
            .collect::<Vec<_>>()
            .join("\n  ")
    };
    // (a) A fault fails only the calls on the keys its master owns.
    assert!(
        healthy.is_empty(),
        "{} calls on healthy masters failed:\n  {}",
        healthy.len(),
        show(&healthy)
    );
    // (b) Decisions resume within 1 s of the Cluster being ok again.
    assert!(
        late.is_empty(),
        "{} calls on the faulted shard failed more than {RESUME:?} after the Cluster was \
         ok again (at {ok_at:?}):\n  {}",
        late.len(),
        show(&late)
    );
    for (g, a) in run.tally.completed_after.iter().enumerate() {
        assert!(
            a.load(Ordering::Relaxed) > 0,
            "group {g} completed nothing after the Cluster was ok again + 1 s"
        );
    }

    // (c) Nothing held by nobody, books exact: every give-back lands.
    load::give_backs_landed(&instances, Duration::from_secs(10)).await;
    // The releases and window settlements the clients sent without waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut footprint = run.tally.kept.footprint();
    let completed = run.tally.completed.lock().unwrap().clone();
    for g in &groups {
        for k in &g.subjects {
            let n = completed.get(k).copied().unwrap_or(0);
            load::counted_in_the_hour(&mut footprint, k, n, TOKENS);
        }
    }
    assert_nothing_held(&observer, &footprint).await;
    assert_books_exact(&observer, &footprint).await;
    for (gi, g) in groups.iter().enumerate() {
        let view = observer
            .account(Some(&g.tenant), &g.subjects[0], &[budget()])
            .await
            .unwrap();
        let charged = run.tally.charged[gi].load(Ordering::Relaxed);
        assert_eq!(
            view.balance,
            Some(BALANCE - charged),
            "group {gi}: the balance went down by the settled costs"
        );
        assert_eq!(view.budgets[0].reserved, 0, "group {gi}: budget reserved");
    }
    assert!(
        observer.pending().await.unwrap().is_empty(),
        "nothing pending"
    );
}

/// T5, D9, D10: `CLUSTER FAILOVER FORCE` of a master under billed load (3 masters × 1
/// replica, replica acks 1): no call on the other masters fails, the shard's decisions
/// succeed again within 1 s of the Cluster being ok again, nothing is left held and
/// the books are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_forced_failover_under_load_fails_only_its_shard_and_resumes_within_a_second() {
    recovers(MasterFault::ForcedFailover, 1).await;
}

/// T5, D9, D10: a master killed under billed load (3 masters × 2 replicas, so the
/// promoted master still has a replica to acknowledge writes): as for the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_killed_master_under_load_fails_only_its_shard_and_resumes_within_a_second() {
    recovers(MasterFault::Kill, 2).await;
}

/// T5, D9, D10: a master stalled 3 s (SIGSTOP) under billed load — three node timeouts,
/// so the Cluster fails it over and it comes back as a replica: as for the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_stalled_master_under_load_fails_only_its_shard_and_resumes_within_a_second() {
    recovers(STALL, 1).await;
}

/// T5: a slot moved between two healthy masters while a third is stalled (shorter than
/// the node timeout: no failover). The first call on the moved slot gets `MOVED`, and
/// the store learns the slot's new owner — without holding any call on the healthy
/// masters while the stalled one does not answer (a client that rereads the Cluster's
/// topology by asking every node, the stalled one included, before it sends anything
/// else, fails every call on every master for the whole stall).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_a_slot_moved_while_a_master_is_stalled_fails_no_call_on_the_healthy_masters() {
    let c = RedisCluster::start(3, 0);
    for p in c.ports() {
        c.cli(p, &["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let store = RedisStore::connect(&c.comma_urls(), options().replica_acks(0))
        .await
        .expect("connect");
    let masters = c.master_ports();
    let (stalled, from, to) = (masters[0], masters[1], masters[2]);
    let on = |m: u16, skip: &[SubjectKey]| {
        (0..)
            .map(|i| SubjectKey::from(format!("moved-{m}-{i}")))
            .find(|k| c.master_of_key(store.slots_key(k).as_bytes()) == m && !skip.contains(k))
            .unwrap()
    };
    let moved = on(from, &[]);
    let keys = [
        on(from, std::slice::from_ref(&moved)),
        on(to, &[]),
        moved.clone(),
    ];
    let asleep = on(stalled, &[]);
    // Warm-up, not the subject: every master has answered this store once.
    for k in keys.iter().chain([&asleep]) {
        common::until_ok(&format!("warm-up on {k:?}"), || store.in_flight(k)).await;
    }
    let slot = cluster::key_slot(store.slots_key(&moved).as_bytes());
    tokio::task::block_in_place(|| c.migrate_slot(slot, to));
    c.freeze(stalled);
    let t0 = Instant::now();
    // Shorter than the node timeout (1 s): no failover, the Cluster stays ok.
    let until = t0 + Duration::from_millis(700);
    let mut workers = Vec::new();
    for k in keys.clone() {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while Instant::now() < until {
                match store.acquire(&k, 1_000, 30_000).await {
                    Ok(portcullis_core::SlotDecision::Acquired(lease)) => {
                        ok += 1;
                        let _ = store.release(&k, lease).await;
                    }
                    Ok(_) => ok += 1,
                    Err(e) => {
                        failed.push(format!("{} ms {k:?}: {e}", t0.elapsed().as_millis()));
                        // A failing call comes back at once: no busy loop.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            (ok, failed)
        }));
    }
    let mut ok = 0;
    let mut failed = Vec::new();
    for w in workers {
        let (o, f) = w.await.unwrap();
        ok += o;
        failed.extend(f);
    }
    c.thaw(stalled);
    eprintln!(
        "slot {slot} moved {from} -> {to}, master {stalled} stalled: {ok} calls answered, {} failed",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "calls on healthy masters failed: {failed:#?}"
    );
    assert!(ok > 10, "the healthy masters answered ({ok})");
}
