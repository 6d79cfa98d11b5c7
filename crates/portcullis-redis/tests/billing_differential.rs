//! The Redis billing store against the in-memory `Ledger`, call by call (B1–B4, D1): a
//! long random sequence of reservations, settlements (every outcome, duplicates, unknown
//! attempts), account views, credits, seeds and pending lists, over several tenants,
//! keys and budgets (periods, no period, a period of 0, a budget named twice), with the
//! time moving across budget periods and past attempt lifetimes (open attempts swept into
//! pending, B7), tenants whose record is expected but missing, per-tenant books (D3), on
//! one manual clock shared by both stores. Every answer must be identical, to the cent. Two
//! `RedisStore` instances share the Redis and take turns.

mod common;

use common::RedisServer;
use portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS;
use portcullis_core::{
    AttemptId, AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest,
    BillingStore, Books, Budget, ManualClock, MemoryStore, Refusal, SubjectKey,
};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use std::sync::Arc;
use std::time::Duration;

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
    /// In `lo..hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

fn budgets() -> Vec<Budget> {
    [
        ("diff:b0", 150, Some(2_000)),
        ("diff:b1", 400, Some(5_000)),
        ("diff:b2", 3_000, None),
        ("diff:b3", 60, Some(3_000)),
        ("diff:b4", 1_000, Some(0)),
    ]
    .into_iter()
    .map(|(id, limit, period_ms)| Budget::new(id, limit, period_ms))
    .collect()
}

fn pick_budgets(r: &mut Rng, all: &[Budget]) -> Vec<Budget> {
    let mut v: Vec<Budget> = all.iter().filter(|_| r.chance(20)).cloned().collect();
    if !v.is_empty() && r.chance(3) {
        // The same budget twice in one request.
        v.push(v[0].clone());
    }
    v
}

fn outcome(r: &mut Rng) -> BillingOutcome {
    match r.below(10) {
        0..=1 => BillingOutcome::Refund,
        2..=3 => BillingOutcome::Pending,
        4 => BillingOutcome::Settled(r.range(-5, 0)),
        _ => BillingOutcome::Settled(r.range(0, 100)),
    }
}

#[derive(Default)]
struct Counts {
    admitted: u32,
    balance: u32,
    cap: u32,
    budget: u32,
    missing: u32,
    settled: u32,
    pending: u32,
    refunded: u32,
    ignored: u32,
}

#[tokio::test]
async fn redis_bills_exactly_as_the_ledger_seed_1() {
    run(0x9E37_79B9_7F4A_7C15).await;
}

#[tokio::test]
async fn redis_bills_exactly_as_the_ledger_seed_2() {
    run(0xB111_1A6E).await;
}

#[tokio::test]
async fn redis_bills_exactly_as_the_ledger_seed_3() {
    run(7).await;
}

async fn run(seed: u64) {
    const OPS: usize = 4_000;
    let server = RedisServer::start();
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
    // diff:t3 has no record until the last quarter (B7: a missing expected record).
    let tenants: Vec<String> = (0..4).map(|i| format!("diff:t{i}")).collect();
    let keys: Vec<SubjectKey> = (0..4)
        .map(|i| SubjectKey::from(format!("diff:k{i}")))
        .collect();
    let all_budgets = budgets();
    let mut r = Rng(seed);
    let mut ids: Vec<AttemptRef> = Vec::new();
    // Admitted and not final yet (open or pending), as the ledger answered.
    let mut live: Vec<AttemptRef> = Vec::new();
    let mut c = Counts::default();

    // Two tenants start with money, one with none (seeded later, or credited).
    for (t, amount) in [(&tenants[0], 500), (&tenants[1], 120)] {
        mem.seed_balance(t, amount).await.unwrap();
        redis[0].seed_balance(t, amount).await.unwrap();
    }

    let funded = |op: usize| &tenants[..if op < OPS * 3 / 4 { 3 } else { 4 }];
    for op in 0..OPS {
        let rs = &redis[r.below(2) as usize];
        let ctx = |what: &str| format!("op {op} {what}");
        match r.below(100) {
            0..=12 => {
                let step = *r.pick(&[1, 499, 500, 999, 1_000, 1_999, 2_000, 3_000, 4_999, 5_000]);
                let step = if r.chance(3) { 60_000 } else { step };
                clock.advance(Duration::from_millis(step));
            }
            13..=44 => {
                let (attempt, tenant, key) = if ids.is_empty() || r.chance(88) {
                    let id: AttemptId = format!("diff:{seed:x}:{op}").into();
                    let tenant: Option<Arc<str>> =
                        r.chance(85).then(|| r.pick(&tenants).as_str().into());
                    let key = r.pick(&keys).clone();
                    ids.push(AttemptRef {
                        attempt: id.clone(),
                        books: Books::of(tenant.as_deref(), &key),
                    });
                    (id, tenant, key)
                } else {
                    // A known attempt again, in its own books.
                    let known = r.pick(&ids).clone();
                    match known.books {
                        Books::Tenant(t) => (known.attempt, Some(t), r.pick(&keys).clone()),
                        Books::Key(k) => (known.attempt, None, k),
                    }
                };
                let mut req = BillingRequest {
                    attempt,
                    tenant_expected: tenant.is_some() && r.chance(20),
                    tenant,
                    key,
                    spend_cap: r.chance(40).then(|| r.range(0, 2_000)),
                    budgets: Arc::from(pick_budgets(&mut r, &all_budgets)),
                    money: if r.chance(5) {
                        r.range(-10, 0)
                    } else {
                        r.range(0, 80)
                    },
                    bill_balance: r.chance(80),
                    // Short enough that the time steps sweep some; long enough that no
                    // record expires on the server's real time during the run.
                    lifetime_ms: *r.pick(&[20_000, 45_000, DEFAULT_ATTEMPT_LIFETIME_MS]),
                };
                if r.chance(30) {
                    // On the edges: a cap at the key's spend + pending ± 1, an upper
                    // bound at the first budget's room ± 1 (the ledger's view of now).
                    let v = mem
                        .account(req.tenant.as_deref(), &req.key, &req.budgets)
                        .await
                        .unwrap();
                    let edge = r.range(-1, 2);
                    if r.chance(50) {
                        req.spend_cap = Some(v.key_spent + v.key_pending + edge);
                    }
                    if let Some(b) = v.budgets.first() {
                        req.money = (b.limit - b.spent - b.reserved + edge).max(0);
                    }
                }
                let a = mem.check_and_reserve(&req).await.unwrap();
                let b = rs.check_and_reserve(&req).await.unwrap();
                assert_eq!(a, b, "{}", ctx(&format!("check_and_reserve {req:?}")));
                match a {
                    BillingDecision::Admitted => {
                        c.admitted += 1;
                        let known = req.attempt_ref();
                        if !live.contains(&known) {
                            live.push(known);
                        }
                    }
                    BillingDecision::Refused(Refusal::InsufficientBalance) => c.balance += 1,
                    BillingDecision::Refused(Refusal::SpendCap) => c.cap += 1,
                    BillingDecision::Refused(Refusal::Budget(_)) => c.budget += 1,
                    BillingDecision::Refused(Refusal::RecordMissing) => c.missing += 1,
                }
            }
            45..=69 if !ids.is_empty() => {
                let attempt: AttemptRef = if r.chance(3) {
                    AttemptRef {
                        attempt: "diff:unknown".into(),
                        books: Books::Tenant(r.pick(&tenants).as_str().into()),
                    }
                } else if !live.is_empty() && r.chance(75) {
                    r.pick(&live).clone()
                } else {
                    r.pick(&ids).clone()
                };
                let o = outcome(&mut r);
                let a = mem.settle_attempt(&attempt, o).await.unwrap();
                let b = rs.settle_attempt(&attempt, o).await.unwrap();
                assert_eq!(a, b, "{}", ctx(&format!("settle {attempt:?} {o:?}")));
                if matches!(a, Some(AttemptState::Settled(_) | AttemptState::Refunded)) {
                    live.retain(|id| *id != attempt);
                }
                match a {
                    Some(AttemptState::Settled(_)) => c.settled += 1,
                    Some(AttemptState::Pending(_)) => c.pending += 1,
                    Some(AttemptState::Refunded) => c.refunded += 1,
                    Some(AttemptState::Open) => panic!("settled into Open"),
                    None => c.ignored += 1,
                }
            }
            70..=81 => {
                let tenant = r.chance(80).then(|| r.pick(&tenants).clone());
                let key = r.pick(&keys).clone();
                let b = pick_budgets(&mut r, &all_budgets);
                let x = mem.account(tenant.as_deref(), &key, &b).await.unwrap();
                let y = rs.account(tenant.as_deref(), &key, &b).await.unwrap();
                assert_eq!(x, y, "{}", ctx(&format!("account {tenant:?} {key:?}")));
            }
            82..=86 => {
                let t = r.pick(funded(op)).clone();
                let amount = if r.chance(25) {
                    // On the edge: balance less pending to exactly 0 or 1.
                    let v = mem.account(Some(&t), &keys[0], &[]).await.unwrap();
                    v.tenant_pending - v.balance.unwrap_or(0) + r.range(0, 2)
                } else {
                    r.range(-60, 150)
                };
                let x = mem.credit(&t, amount).await.unwrap();
                let y = rs.credit(&t, amount).await.unwrap();
                assert_eq!(x, y, "{}", ctx(&format!("credit {t} {amount}")));
            }
            87..=89 => {
                let t = r.pick(funded(op)).clone();
                let amount = r.range(-20, 300);
                let x = mem.seed_balance(&t, amount).await.unwrap();
                let y = rs.seed_balance(&t, amount).await.unwrap();
                assert_eq!(x, y, "{}", ctx(&format!("seed {t} {amount}")));
            }
            _ => {
                let mut x = mem.pending().await.unwrap();
                x.sort();
                let y = rs.pending().await.unwrap();
                assert_eq!(x, y, "{}", ctx("pending"));
            }
        }
    }

    // Every attempt ends (pending ones reconciled); then both books agree everywhere.
    for id in &ids {
        let o = if r.chance(50) {
            BillingOutcome::Refund
        } else {
            BillingOutcome::Settled(r.range(0, 50))
        };
        let a = mem.settle_attempt(id, o).await.unwrap();
        let b = redis[0].settle_attempt(id, o).await.unwrap();
        assert_eq!(a, b, "final settle {id:?}");
    }
    assert!(mem.pending().await.unwrap().is_empty());
    assert!(redis[1].pending().await.unwrap().is_empty());
    for t in tenants.iter().map(|t| Some(t.as_str())).chain([None]) {
        for key in &keys {
            let x = mem.account(t, key, &all_budgets).await.unwrap();
            let y = redis[1].account(t, key, &all_budgets).await.unwrap();
            assert_eq!(x, y, "final account {t:?} {key:?}");
            assert!(y.budgets.iter().all(|b| b.reserved == 0), "{y:?}");
        }
    }
    let summary = format!(
        "seed {seed:x}: admitted {}; refused for balance {}, cap {}, budget {}, missing \
         record {}; settled {}, pending {}, refunded {}, ignored {}",
        c.admitted,
        c.balance,
        c.cap,
        c.budget,
        c.missing,
        c.settled,
        c.pending,
        c.refunded,
        c.ignored
    );
    eprintln!("{summary}");
    // The sequence exercised every branch.
    assert!(
        c.admitted > 300
            && c.balance > 30
            && c.cap > 30
            && c.budget > 30
            && c.missing > 5
            && c.settled > 100
            && c.pending > 50
            && c.refunded > 50
            && c.ignored > 100,
        "{summary}"
    );
}
