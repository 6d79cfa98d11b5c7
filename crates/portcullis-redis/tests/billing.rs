//! Billing on Redis (B1–B5, D1–D4, T3–T5) beyond the conformance suite: one round trip
//! per call and its server time, two instances sharing one set of books under load, a
//! dead or frozen Redis failing every call within its deadline (so the billing layer
//! fails closed), the key layout (one hash tag, expiries) and the exact range of money.

mod common;

use common::{LOADED_HOST_SLACK, RedisServer, command_calls, until_ok};
use portcullis_core::{
    AttemptId, AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest,
    BillingStore, Books, Budget, Money, Refusal, StoreErrorKind, StoreResult, SubjectKey,
};
use portcullis_redis::{MAX_EXACT_MONEY, RedisStore, RedisStoreOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

fn budget(id: &str, limit: Money, period_ms: Option<u64>) -> Budget {
    Budget::new(id, limit, period_ms)
}

fn request(attempt: &str, tenant: &str, key: &str, money: Money, b: &[&Budget]) -> BillingRequest {
    BillingRequest {
        attempt: attempt.into(),
        tenant: Some(tenant.into()),
        key: key.into(),
        spend_cap: None,
        budgets: b.iter().map(|&b| b.clone()).collect(),
        money,
        bill_balance: true,
        lifetime_ms: portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS,
        tenant_expected: false,
    }
}

/// Attempt `a` in tenant `t`'s books.
fn in_t(a: &str, t: &str) -> AttemptRef {
    AttemptRef {
        attempt: a.into(),
        books: Books::Tenant(t.into()),
    }
}

async fn connect(server: &RedisServer, options: RedisStoreOptions) -> RedisStore {
    RedisStore::connect(&server.url(), options)
        .await
        .expect("connect to the test redis-server")
}

// ---------------------------------------------------------------------------------
// One round trip per call (D2, T3)

/// What the billing scripts call inside the server: not round trips.
const IN_SCRIPT: &[&str] = &[
    "time",
    "hmget",
    "hset",
    "hdel",
    "del",
    "exists",
    "pexpire",
    "pttl",
    "persist",
    "zadd",
    "zrem",
    "zrangebyscore",
    "zremrangebyscore",
    "zscore",
];
/// Test plumbing.
const HARNESS: &[&str] = &["config|resetstat", "info"];

fn client_commands(server: &RedisServer) -> Vec<(String, u64)> {
    let mut v: Vec<_> = command_calls(&server.cli(&["INFO", "commandstats"]))
        .into_iter()
        .filter(|(c, _, _)| !IN_SCRIPT.contains(&c.as_str()) && !HARNESS.contains(&c.as_str()))
        .map(|(c, n, _)| (c, n))
        .collect();
    v.sort();
    v
}

#[track_caller]
fn assert_two(server: &RedisServer, a: &str, b: &str, what: &str) {
    let mut want = [(a.to_owned(), 1), (b.to_owned(), 1)];
    want.sort();
    assert_eq!(client_commands(server), want, "{what}: two calls");
    server.cli(&["CONFIG", "RESETSTAT"]);
}

#[track_caller]
fn assert_one(server: &RedisServer, command: &str, what: &str) {
    assert_eq!(
        client_commands(server),
        [(command.to_owned(), 1)],
        "{what}: one call, one round trip"
    );
    server.cli(&["CONFIG", "RESETSTAT"]);
}

/// D2, T3: every billing call — reserve (admitted, refused by balance, by spend cap, by
/// budget, an attempt already known), settle (settled, pending, reconciled, refunded,
/// a duplicate, an unknown attempt), account, seed, credit — is one `EVALSHA`; setting
/// a balance is one `HSET`. Two calls on the rare paths: an attempt becoming pending
/// first registers its books (`SADD`, another slot), and the pending list reads the
/// registry (`SMEMBERS`) and then each books' list (`HGETALL`).
#[tokio::test]
async fn t3_every_billing_call_is_one_round_trip() {
    let server = RedisServer::start();
    let s = connect(&server, common::patient()).await;
    let x = budget("rt:x", 100, Some(60_000));
    let y = budget("rt:y", 1_000, None);
    server.cli(&["CONFIG", "RESETSTAT"]);

    s.seed_balance("rt:t", 1_000).await.unwrap();
    assert_one(&server, "evalsha", "seed");
    assert_eq!(s.credit("rt:t", 5).await.unwrap(), 1_005);
    assert_one(&server, "evalsha", "credit");
    let full = BillingRequest {
        spend_cap: Some(10_000),
        ..request("rt:a1", "rt:t", "rt:k", 60, &[&x, &y])
    };
    assert_eq!(
        s.check_and_reserve(&full).await.unwrap(),
        BillingDecision::Admitted
    );
    assert_one(&server, "evalsha", "reserve, admitted");
    assert_eq!(
        s.check_and_reserve(&full).await.unwrap(),
        BillingDecision::Admitted
    );
    assert_one(&server, "evalsha", "reserve, attempt already known");
    let over = request("rt:a2", "rt:t", "rt:k", 60, &[&y, &x]);
    assert_eq!(
        s.check_and_reserve(&over).await.unwrap(),
        BillingDecision::Refused(Refusal::Budget(x.id.clone()))
    );
    assert_one(&server, "evalsha", "reserve, refused by a budget");
    let broke = request("rt:a3", "rt:nobody", "rt:k", 1, &[]);
    assert_eq!(
        s.check_and_reserve(&broke).await.unwrap(),
        BillingDecision::Refused(Refusal::InsufficientBalance)
    );
    assert_one(&server, "evalsha", "reserve, refused by the balance");
    let capped = BillingRequest {
        spend_cap: Some(0),
        ..request("rt:a3", "rt:t", "rt:k", 1, &[])
    };
    assert_eq!(
        s.check_and_reserve(&capped).await.unwrap(),
        BillingDecision::Refused(Refusal::SpendCap)
    );
    assert_one(&server, "evalsha", "reserve, refused by the spend cap");

    let a1 = in_t("rt:a1", "rt:t");
    assert_eq!(
        s.settle_attempt(&a1, BillingOutcome::Pending)
            .await
            .unwrap(),
        Some(AttemptState::Pending(60))
    );
    assert_two(&server, "evalsha", "sadd", "settle, pending");
    assert_eq!(s.pending().await.unwrap(), [(a1.clone(), 60)]);
    assert_two(&server, "hgetall", "smembers", "pending list");
    assert_eq!(
        s.settle_attempt(&a1, BillingOutcome::Settled(42))
            .await
            .unwrap(),
        Some(AttemptState::Settled(42))
    );
    assert_one(&server, "evalsha", "settle, reconciled");
    assert_eq!(
        s.settle_attempt(&a1, BillingOutcome::Settled(42))
            .await
            .unwrap(),
        None
    );
    assert_one(&server, "evalsha", "settle, duplicate");
    assert_eq!(
        s.settle_attempt(&in_t("rt:never", "rt:t"), BillingOutcome::Refund)
            .await
            .unwrap(),
        None
    );
    assert_one(&server, "evalsha", "settle, unknown attempt");
    s.check_and_reserve(&request("rt:a4", "rt:t", "rt:k", 10, &[&x]))
        .await
        .unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert_eq!(
        s.settle_attempt(&in_t("rt:a4", "rt:t"), BillingOutcome::Refund)
            .await
            .unwrap(),
        Some(AttemptState::Refunded)
    );
    assert_one(&server, "evalsha", "settle, refund");
    let v = s
        .account(Some("rt:t"), &"rt:k".into(), &[x, y])
        .await
        .unwrap();
    assert_one(&server, "evalsha", "account");
    s.set_balance("rt:t", 963).await.unwrap();
    let calls: Vec<_> = command_calls(&server.cli(&["INFO", "commandstats"]))
        .into_iter()
        .filter(|(c, _, _)| !HARNESS.contains(&c.as_str()))
        .map(|(c, n, _)| (c, n))
        .collect();
    assert_eq!(calls, [("hset".to_owned(), 1)], "set balance: one HSET");
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert_eq!(
        (
            v.balance,
            v.key_spent,
            v.budgets[0].spent,
            v.budgets[1].spent
        ),
        (Some(963), 42, 42, 42)
    );
}

/// Server time per billing call (`usec_per_call` of `EVALSHA`), printed and bounded
/// loosely (T3's 10 µs is for the benchmarks on a quiet machine): a reservation with a
/// tenant, a spend cap and two budgets (admitted, refused), its settlement, the account
/// view.
#[tokio::test]
async fn t3_billing_script_server_time_per_call() {
    const N: usize = 500;
    let server = RedisServer::start();
    let s = connect(&server, common::patient()).await;
    let usec = |what: &str| {
        let stats = command_calls(&server.cli(&["INFO", "commandstats"]));
        let (_, calls, usec) = stats
            .iter()
            .find(|(c, _, _)| c == "evalsha")
            .cloned()
            .unwrap_or_else(|| panic!("no evalsha in {stats:?}"));
        eprintln!("billing {what}: {calls} calls, {usec:.2} µs of server time per call");
        server.cli(&["CONFIG", "RESETSTAT"]);
        usec
    };
    let x = budget("perf:x", 1_000_000_000, Some(3_600_000));
    let y = budget("perf:y", 1_000_000_000, None);
    for t in 0..10 {
        s.seed_balance(&format!("perf:t{t}"), 1_000_000_000)
            .await
            .unwrap();
    }
    let req = |i: usize| BillingRequest {
        spend_cap: Some(1_000_000_000),
        ..request(
            &format!("perf:a{i}"),
            &format!("perf:t{}", i % 10),
            &format!("perf:k{}", i % 50),
            1_000,
            &[&x, &y],
        )
    };
    server.cli(&["CONFIG", "RESETSTAT"]);
    for i in 0..N {
        assert_eq!(
            s.check_and_reserve(&req(i)).await.unwrap(),
            BillingDecision::Admitted
        );
    }
    let reserve = usec("check_and_reserve (admitted: tenant, cap, 2 budgets)");
    for i in 0..N {
        let o = if i % 3 == 0 {
            BillingOutcome::Pending
        } else {
            BillingOutcome::Settled(700)
        };
        s.settle_attempt(&req(i).attempt_ref(), o).await.unwrap();
    }
    let settle = usec("settle_attempt (settled or pending)");
    for _ in 0..N {
        s.account(Some("perf:t0"), &"perf:k0".into(), &[x.clone(), y.clone()])
            .await
            .unwrap();
    }
    let account = usec("account (tenant, key, 2 budgets)");
    let tight = budget("perf:tight", 0, None);
    for i in 0..N {
        let r = request(
            &format!("perf:r{i}"),
            "perf:t0",
            "perf:k0",
            1,
            &[&x, &tight],
        );
        assert!(matches!(
            s.check_and_reserve(&r).await.unwrap(),
            BillingDecision::Refused(Refusal::Budget(_))
        ));
    }
    let refused = usec("check_and_reserve (refused by the second budget)");
    // A guard against a script gone pathological (a scan, a loop over history), not a
    // performance goal: server time here includes the time Redis waits for a core while
    // the other tests of the suite run beside it (140-230 µs seen on this 2-core box
    // under load, for scripts that take a fraction of that on a quiet one).
    for u in [reserve, settle, account, refused] {
        assert!(u < 500.0, "a billing script took {u} µs of server time");
    }
}

// ---------------------------------------------------------------------------------
// Two instances, one set of books (D1, T4, T5)

/// B3, B4, T4, T5: 2 × 24 workers on two instances, each until it has had 12 attempts
/// admitted: reserve on one budget that cannot hold them all at once, hold a moment,
/// settle through the *other* instance — settled, refunded, or pending and reconciled
/// later — each settlement sent through both instances at once (racing). The money held
/// at once never exceeds the budget, every attempt settles exactly once, and at the end
/// the books add up to the cent: balance + every settled cost = the starting balance,
/// key spend and budget spend = the settled costs, nothing reserved or pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_two_instances_share_balances_and_budgets() {
    const START: Money = 1_000_000;
    const LIMIT: Money = 1_500;
    const WORKERS: u64 = 48;
    const ATTEMPTS: u64 = 12;
    let server = RedisServer::start();
    let stores = [
        connect(&server, common::patient().instance_id("gw-a")).await,
        connect(&server, common::patient().instance_id("gw-b")).await,
    ];
    stores[0].seed_balance("share:t", START).await.unwrap();
    let x = budget("share:x", LIMIT, None);
    let held = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let charged = Arc::new(AtomicI64::new(0));
    let refusals = Arc::new(AtomicI64::new(0));
    /// Settles `attempt` through both instances at once: exactly one does it.
    async fn settle_once(
        stores: [&RedisStore; 2],
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> AttemptState {
        let (a, b) = tokio::join!(
            stores[0].settle_attempt(attempt, outcome),
            stores[1].settle_attempt(attempt, outcome)
        );
        let done: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
        assert_eq!(done.len(), 1, "{attempt:?} settled {done:?}");
        done[0]
    }
    let tasks: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (mine, other) = (
                stores[(w % 2) as usize].clone(),
                stores[1 - (w % 2) as usize].clone(),
            );
            let x = x.clone();
            let (held, peak, charged, refusals) = (
                held.clone(),
                peak.clone(),
                charged.clone(),
                refusals.clone(),
            );
            tokio::spawn(async move {
                let mut n = 0;
                let mut tries = 0;
                while n < ATTEMPTS {
                    tries += 1;
                    assert!(tries < 5_000, "worker {w} starved");
                    let money = 20 + ((w * 31 + tries * 17) % 81) as Money;
                    let id: AttemptId = format!("share:{w}:{tries}").into();
                    let attempt = AttemptRef {
                        attempt: id.clone(),
                        books: Books::Tenant("share:t".into()),
                    };
                    let req = BillingRequest {
                        attempt: id,
                        ..request("", "share:t", &format!("share:k{}", w % 4), money, &[&x])
                    };
                    match mine.check_and_reserve(&req).await.unwrap() {
                        BillingDecision::Admitted => {}
                        d => {
                            assert_eq!(d, BillingDecision::Refused(Refusal::Budget(x.id.clone())));
                            refusals.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_micros(200)).await;
                            continue;
                        }
                    }
                    n += 1;
                    // Counted only while certainly reserved: from the answer to the call
                    // that releases it.
                    let now = held.fetch_add(money, Ordering::SeqCst) + money;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_micros((w * 13 + n * 7) % 900)).await;
                    let both = [&other, &mine];
                    let cost = money / 40;
                    match (w + n) % 6 {
                        0 | 1 => {
                            held.fetch_sub(money, Ordering::SeqCst);
                            let s = settle_once(both, &attempt, BillingOutcome::Refund).await;
                            assert_eq!(s, AttemptState::Refunded);
                        }
                        2 => {
                            let s = settle_once(both, &attempt, BillingOutcome::Pending).await;
                            assert_eq!(s, AttemptState::Pending(money));
                            if n == ATTEMPTS && w % 8 == 0 {
                                // Left for the reconciliation sweep below.
                                continue;
                            }
                            tokio::time::sleep(Duration::from_micros(300)).await;
                            held.fetch_sub(money, Ordering::SeqCst);
                            let s =
                                settle_once(both, &attempt, BillingOutcome::Settled(cost)).await;
                            assert_eq!(s, AttemptState::Settled(cost));
                            charged.fetch_add(cost, Ordering::SeqCst);
                        }
                        _ => {
                            held.fetch_sub(money, Ordering::SeqCst);
                            let s =
                                settle_once(both, &attempt, BillingOutcome::Settled(cost)).await;
                            assert_eq!(s, AttemptState::Settled(cost));
                            charged.fetch_add(cost, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // Reconciliation: every attempt still pending gets its real cost, half its bound.
    let pending = stores[1].pending().await.unwrap();
    assert!(!pending.is_empty());
    for (id, amount) in pending {
        let r = stores[(amount % 2) as usize]
            .settle_attempt(&id, BillingOutcome::Settled(amount / 2))
            .await
            .unwrap();
        assert_eq!(r, Some(AttemptState::Settled(amount / 2)));
        charged.fetch_add(amount / 2, Ordering::SeqCst);
    }
    assert!(stores[0].pending().await.unwrap().is_empty());

    let peak = peak.load(Ordering::SeqCst);
    let charged = charged.load(Ordering::SeqCst);
    let refusals = refusals.load(Ordering::Relaxed);
    assert!(peak <= LIMIT, "{peak} held at once on a budget of {LIMIT}");
    assert!(
        peak > LIMIT * 3 / 4 && refusals > 50,
        "the load never pressed the budget: peak {peak}, {refusals} refusals"
    );
    let v = stores[0]
        .account(
            Some("share:t"),
            &"share:k0".into(),
            std::slice::from_ref(&x),
        )
        .await
        .unwrap();
    assert_eq!(
        v.balance.unwrap() + charged,
        START,
        "balance + settled costs = start"
    );
    assert_eq!(v.tenant_pending, 0);
    assert_eq!(
        (v.budgets[0].spent, v.budgets[0].reserved),
        (charged, 0),
        "budget spend = settled costs, nothing left reserved"
    );
    let mut spent = 0;
    for k in 0..4 {
        let v = stores[1]
            .account(Some("share:t"), &format!("share:k{k}").into(), &[])
            .await
            .unwrap();
        assert_eq!(v.key_pending, 0);
        spent += v.key_spent;
    }
    assert_eq!(spent, charged, "key spend = settled costs");
    eprintln!(
        "{} attempts admitted on two instances, {refusals} refused; peak {peak} of {LIMIT} \
         held; {charged} charged",
        WORKERS * ATTEMPTS
    );
}

// ---------------------------------------------------------------------------------
// Faults (B5, D4, T5)

/// Billing resumes within this long of Redis answering again (B5, T5): the contract's
/// number, no slack added — the clock starts once the restarted Redis answers `PING`.
const RESUME_BOUND: Duration = Duration::from_secs(1);

/// One billing call fails with a store error within its deadline, plus what a loaded
/// host adds ([`LOADED_HOST_SLACK`]: one more deadline watched while the process is
/// behind, and scheduling delay).
async fn fails_fast<T: std::fmt::Debug>(
    deadline: Duration,
    what: &str,
    call: impl std::future::Future<Output = StoreResult<T>>,
) {
    let start = Instant::now();
    let e = call.await.expect_err(what);
    let took = start.elapsed();
    assert!(
        matches!(
            e.kind(),
            StoreErrorKind::Timeout | StoreErrorKind::Unavailable
        ),
        "{what}: {e}"
    );
    assert!(
        took < deadline + LOADED_HOST_SLACK,
        "{what} took {took:?}, deadline {deadline:?} (+ {LOADED_HOST_SLACK:?} for a loaded host)"
    );
}

async fn every_billing_call_fails_fast(s: &RedisStore, what: &str) {
    let d = s.deadline();
    let x = budget("fault:x", 100, Some(60_000));
    let req = request("fault:a", "fault:t", "fault:k", 10, &[&x]);
    let a = in_t("fault:a", "fault:t");
    for round in 0..3 {
        let what = |call: &str| format!("{what}, round {round}: {call}");
        fails_fast(d, &what("check_and_reserve"), s.check_and_reserve(&req)).await;
        fails_fast(
            d,
            &what("settle_attempt"),
            s.settle_attempt(&a, BillingOutcome::Settled(3)),
        )
        .await;
        fails_fast(
            d,
            &what("account"),
            s.account(Some("fault:t"), &"fault:k".into(), std::slice::from_ref(&x)),
        )
        .await;
        fails_fast(d, &what("seed_balance"), s.seed_balance("fault:t", 1)).await;
        fails_fast(d, &what("credit"), s.credit("fault:t", 1)).await;
        fails_fast(d, &what("set_balance"), s.set_balance("fault:t", 1)).await;
        fails_fast(d, &what("pending"), s.pending()).await;
    }
}

/// B5, D4, T5: Redis killed → every billing call fails with a store error within its
/// deadline (the billing layer then refuses with 503: no unbillable call is sent);
/// Redis back → billing resumes within 1 s.
///
/// Bounds: each failed call, from the call to its error, to the deadline (20 ms) +
/// [`LOADED_HOST_SLACK`]; the recovery, from the restarted Redis answering `PING` to
/// the first billing call answered, to [`RESUME_BOUND`].
#[tokio::test]
async fn b5_dead_redis_fails_every_billing_call_within_the_deadline() {
    let mut server = RedisServer::start();
    let s = connect(&server, RedisStoreOptions::default()).await;
    // Setup, not the subject of a deadline: on a loaded host a 20 ms call may time out.
    until_ok("seeding the balance", || s.seed_balance("fault:t", 100)).await;
    server.kill();
    every_billing_call_fails_fast(&s, "redis killed").await;
    server.restart();
    let start = Instant::now();
    loop {
        if s.seed_balance("fault:t", 100).await.is_ok() {
            break;
        }
        assert!(
            start.elapsed() < RESUME_BOUND,
            "billing did not resume within {RESUME_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Reservations work again. Not a deadline: each try is an attempt of its own, so a
    // try that timed out on a loaded host after Redis took it leaves the next one alone.
    let mut tries = 0;
    let decision = until_ok("a reservation after the restart", || {
        tries += 1;
        let req = request(&format!("fault:b{tries}"), "fault:t", "fault:k", 10, &[]);
        let s = &s;
        async move { s.check_and_reserve(&req).await }
    })
    .await;
    assert_eq!(decision, BillingDecision::Admitted);
}

/// B5, D4: a frozen Redis (SIGSTOP) holds no billing call past its deadline: `Timeout`.
///
/// Bounds: the first reservation, from the call to its error, between the deadline
/// (20 ms: it waits its deadline out, no less) and the deadline +
/// [`LOADED_HOST_SLACK`]; every later call to the deadline + that slack.
#[tokio::test]
async fn b5_frozen_redis_times_out_every_billing_call() {
    let server = RedisServer::start();
    let s = connect(&server, RedisStoreOptions::default()).await;
    until_ok("seeding the balance", || s.seed_balance("fault:t", 100)).await;
    server.stop();
    let start = Instant::now();
    let e = s
        .check_and_reserve(&request("fault:a", "fault:t", "fault:k", 10, &[]))
        .await
        .expect_err("reserve on a frozen redis");
    let took = start.elapsed();
    assert_eq!(e.kind(), StoreErrorKind::Timeout, "{e}");
    assert!(
        took >= s.deadline() && took < s.deadline() + LOADED_HOST_SLACK,
        "the first reservation on a frozen redis took {took:?}, deadline {:?}",
        s.deadline()
    );
    every_billing_call_fails_fast(&s, "redis frozen").await;
    server.cont();
}

// ---------------------------------------------------------------------------------
// Key layout and expiries (D3)

/// The first `{…}` of a key: its Cluster hash tag.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    Some(&key[open + 1..open + 1 + close]).filter(|t| !t.is_empty())
}

/// D3, D7: every key of one tenant's books carries that tenant's tag (so each script
/// stays on one Cluster slot and tenants spread over the nodes); a request with no
/// tenant uses its key's tag; the one shared key is the registry of books with pending
/// work, on the billing tag. Balances, key spend, the pending list and the registry
/// never expire; budgets expire `amount_ttl` after their last change; an open attempt
/// and the books' open list two lifetimes after the reservation; a pending attempt
/// never; a settled or refunded attempt is deleted. Money is stored as integer text.
#[tokio::test]
async fn d3_billing_keys_are_tagged_per_tenant_and_expire_as_documented() {
    let server = RedisServer::start();
    let s = connect(
        &server,
        common::patient()
            .prefix("gw")
            .billing_tag("books")
            .amount_ttl(Duration::from_secs(3_600)),
    )
    .await;
    let x = budget("team:{x}", 1_000, Some(60_000));
    let y = budget("task:y", 1_000, None);
    s.seed_balance("acme", 100).await.unwrap();
    s.seed_balance("globex", 100).await.unwrap();
    for (a, t, o) in [
        ("a1", "acme", Some(BillingOutcome::Settled(37))),
        ("a2", "acme", Some(BillingOutcome::Pending)),
        ("a3", "acme", Some(BillingOutcome::Refund)),
        ("a4", "acme", None),
        ("g1", "globex", Some(BillingOutcome::Settled(1))),
    ] {
        let req = request(a, t, "key-1", 50, &[&x, &y]);
        assert_eq!(
            s.check_and_reserve(&req).await.unwrap(),
            BillingDecision::Admitted
        );
        if let Some(o) = o {
            s.settle_attempt(&req.attempt_ref(), o).await.unwrap();
        }
    }
    let lone = BillingRequest {
        tenant: None,
        ..request("n1", "", "lone-key", 5, &[])
    };
    assert_eq!(
        s.check_and_reserve(&lone).await.unwrap(),
        BillingDecision::Admitted
    );
    let keys: BTreeMap<String, i64> = server
        .cli(&["KEYS", "*"])
        .lines()
        .filter(|k| !k.is_empty())
        .map(|k| {
            let ttl = server.cli(&["PTTL", k]).trim().parse().unwrap();
            (k.to_owned(), ttl)
        })
        .collect();
    for k in keys.keys() {
        let tag = hash_tag(k);
        assert!(
            [
                Some("tenant:acme"),
                Some("tenant:globex"),
                Some("lone-key"),
                Some("books")
            ]
            .contains(&tag),
            "{k}"
        );
        assert!(k.starts_with("gw:{"), "{k}");
    }
    let acme = Books::Tenant("acme".into());
    let ttl = |k: String| {
        *keys
            .get(&k)
            .unwrap_or_else(|| panic!("no key {k} in {keys:?}"))
    };
    let absent = |k: String| assert!(!keys.contains_key(&k), "{k} is left: {keys:?}");
    let hour = i64::try_from(portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS).unwrap();
    assert_eq!(ttl(s.tenant_key("acme")), -1);
    assert_eq!(ttl(s.spend_key(&acme, &"key-1".into())), -1);
    assert_eq!(ttl(s.pending_key(&acme)), -1);
    assert_eq!(ttl(s.pending_registry_key()), -1);
    assert_eq!(s.pending_registry_key(), "gw:{books}:pending-books");
    for b in [&x, &y] {
        let t = ttl(s.budget_key(&acme, &b.id));
        assert!((3_590_000..=3_600_000).contains(&t), "{}: {t}", b.id);
    }
    for a in ["a1", "a3"] {
        absent(s.attempt_key(&in_t(a, "acme")));
    }
    absent(s.attempt_key(&in_t("g1", "globex")));
    assert_eq!(
        ttl(s.attempt_key(&in_t("a2", "acme"))),
        -1,
        "pending must not expire"
    );
    for k in [s.attempt_key(&in_t("a4", "acme")), s.open_key(&acme)] {
        let t = ttl(k.clone());
        assert!((2 * hour - 10_000..=2 * hour).contains(&t), "open {k}: {t}");
    }
    let lone_ref = lone.attempt_ref();
    assert!(s.attempt_key(&lone_ref).starts_with("gw:{lone-key}:"));
    assert!(ttl(s.attempt_key(&lone_ref)) > 0);
    // The tombstones of settled attempts (D10) live two minutes.
    for t in ["acme", "globex"] {
        let done = format!("gw:{{tenant:{t}}}:billing:done");
        let t = ttl(done.clone());
        assert!((110_000..=120_000).contains(&t), "{done}: {t}");
    }
    // acme: tenant, spend, 2 budgets, a2, a4, open, pending, done; globex: tenant,
    // spend, 2 budgets, done; lone-key: spend? (not billed yet: none), attempt, open;
    // the registry.
    assert_eq!(keys.len(), 9 + 5 + 2 + 1, "{keys:?}");
    // Money is integer text, readable with redis-cli.
    let hget = |k: String, f: &str| server.cli(&["HGET", &k, f]).trim().to_owned();
    assert_eq!(hget(s.tenant_key("acme"), "bal"), "63");
    assert_eq!(hget(s.tenant_key("acme"), "pend"), "50");
    assert_eq!(hget(s.spend_key(&acme, &"key-1".into()), "spent"), "37");
    assert_eq!(hget(s.budget_key(&acme, "task:y"), "res"), "100");
    assert_eq!(hget(s.pending_key(&acme), "a2"), "50");
}

/// Keys of the test Redis: (total, without an expiry).
fn key_counts(server: &RedisServer) -> (usize, usize) {
    let keys: Vec<String> = server
        .cli(&["KEYS", "*"])
        .lines()
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    let persistent = keys
        .iter()
        .filter(|k| server.cli(&["TTL", k]).trim() == "-1")
        .count();
    let dbsize: usize = server.cli(&["DBSIZE"]).trim().parse().unwrap();
    assert_eq!(dbsize, keys.len());
    (keys.len(), persistent)
}

/// D7: what the store keeps does not grow with the requests served: after N reserve +
/// settle cycles over a few tenants (settled, refunded, some pending then reconciled),
/// the number of keys and of keys without an expiry is the same for N = 200 and
/// N = 2000 — settled attempts are deleted, not remembered.
#[tokio::test]
async fn d7_keys_do_not_grow_with_requests_served() {
    async fn serve(n: usize) -> (usize, usize) {
        let server = RedisServer::start();
        let s = connect(&server, common::patient()).await;
        let x = budget("mem:x", 1_000_000_000, Some(3_600_000));
        for t in 0..3 {
            s.seed_balance(&format!("mem:t{t}"), 1_000_000_000)
                .await
                .unwrap();
        }
        for i in 0..n {
            let req = request(
                &format!("mem:a{i}"),
                &format!("mem:t{}", i % 3),
                &format!("mem:k{}", i % 5),
                100,
                &[&x],
            );
            assert_eq!(
                s.check_and_reserve(&req).await.unwrap(),
                BillingDecision::Admitted
            );
            let r = req.attempt_ref();
            match i % 4 {
                0 => {
                    s.settle_attempt(&r, BillingOutcome::Refund).await.unwrap();
                }
                1 => {
                    s.settle_attempt(&r, BillingOutcome::Pending).await.unwrap();
                    s.settle_attempt(&r, BillingOutcome::Settled(7))
                        .await
                        .unwrap();
                }
                _ => {
                    s.settle_attempt(&r, BillingOutcome::Settled(9))
                        .await
                        .unwrap();
                }
            }
        }
        assert!(s.pending().await.unwrap().is_empty());
        let info = server.cli(&["INFO", "keyspace"]);
        eprintln!("after {n} requests: {}", info.trim());
        key_counts(&server)
    }
    let small = serve(200).await;
    let large = serve(2_000).await;
    eprintln!("keys (total, without expiry): N=200 {small:?}, N=2000 {large:?}");
    assert_eq!(small, large, "the keys grew with the requests served");
    // 3 tenants × (tenant, 5 keys' spend, a budget, the tombstones of the last two
    // minutes' settlements) + the pending registry.
    assert!(large.0 <= 3 * 8 + 1, "{large:?}");
}

// ---------------------------------------------------------------------------------
// Exact money (Lua numbers are doubles)

/// Money is exact up to 2^53 − 1: amounts beyond are refused before anything is sent,
/// and a script whose result would leave the range changes nothing (balance, spend,
/// budgets, the attempt) and fails, so the caller fails closed instead of rounding.
/// Limits may be any `i64`.
#[tokio::test]
async fn money_is_exact_up_to_2_pow_53() {
    let server = RedisServer::start();
    let s = connect(&server, common::patient()).await;
    let k: SubjectKey = "big:k".into();
    let x = budget("big:x", Money::MAX, None);
    assert_eq!(MAX_EXACT_MONEY, 9_007_199_254_740_991);

    assert_eq!(
        s.credit("big:t", MAX_EXACT_MONEY).await.unwrap(),
        MAX_EXACT_MONEY
    );
    let e = s.credit("big:t", 1).await.expect_err("past 2^53 - 1");
    assert_eq!(e.kind(), StoreErrorKind::Protocol, "{e}");
    for call in [
        s.credit("big:t", MAX_EXACT_MONEY + 1),
        s.credit("big:t", -MAX_EXACT_MONEY - 1),
    ] {
        assert_eq!(call.await.unwrap_err().kind(), StoreErrorKind::Protocol);
    }
    assert_eq!(
        s.seed_balance("big:other", Money::MIN)
            .await
            .unwrap_err()
            .kind(),
        StoreErrorKind::Protocol
    );
    let too_big = request("big:a0", "big:t", "big:k", MAX_EXACT_MONEY + 1, &[]);
    assert_eq!(
        s.check_and_reserve(&too_big).await.unwrap_err().kind(),
        StoreErrorKind::Protocol
    );
    let v = s.account(Some("big:t"), &k, &[]).await.unwrap();
    assert_eq!(
        v.balance,
        Some(MAX_EXACT_MONEY),
        "a refused credit changed it"
    );

    // Exact at the edge: the whole balance spent, to the last unit; limits of i64::MAX.
    let req = BillingRequest {
        spend_cap: Some(Money::MAX),
        ..request("big:a1", "big:t", "big:k", MAX_EXACT_MONEY, &[&x])
    };
    assert_eq!(
        s.check_and_reserve(&req).await.unwrap(),
        BillingDecision::Admitted
    );
    assert_eq!(
        s.settle_attempt(
            &in_t("big:a1", "big:t"),
            BillingOutcome::Settled(MAX_EXACT_MONEY)
        )
        .await
        .unwrap(),
        Some(AttemptState::Settled(MAX_EXACT_MONEY))
    );
    let v = s
        .account(Some("big:t"), &k, std::slice::from_ref(&x))
        .await
        .unwrap();
    assert_eq!(
        (v.balance, v.key_spent, v.budgets[0].spent),
        (Some(0), MAX_EXACT_MONEY, MAX_EXACT_MONEY)
    );

    // One more unit of spend would leave the range: the settlement fails and changes
    // nothing; the attempt is still open and settles once the cost fits.
    assert_eq!(s.credit("big:t", 10).await.unwrap(), 10);
    let req = request("big:a2", "big:t", "big:k", 5, &[&x]);
    assert_eq!(
        s.check_and_reserve(&req).await.unwrap(),
        BillingDecision::Admitted
    );
    let a2 = in_t("big:a2", "big:t");
    let e = s
        .settle_attempt(&a2, BillingOutcome::Settled(1))
        .await
        .expect_err("spend past 2^53 - 1");
    assert_eq!(e.kind(), StoreErrorKind::Protocol, "{e}");
    let v = s
        .account(Some("big:t"), &k, std::slice::from_ref(&x))
        .await
        .unwrap();
    assert_eq!(
        (
            v.balance,
            v.key_spent,
            v.budgets[0].spent,
            v.budgets[0].reserved
        ),
        (Some(10), MAX_EXACT_MONEY, MAX_EXACT_MONEY, 5),
        "a failed settlement changed something"
    );
    assert_eq!(
        s.settle_attempt(&a2, BillingOutcome::Settled(0))
            .await
            .unwrap(),
        Some(AttemptState::Settled(0))
    );
    let v = s.account(Some("big:t"), &k, &[x]).await.unwrap();
    assert_eq!((v.balance, v.budgets[0].reserved), (Some(10), 0));
}
