//! The books: pending reconciliation, per-tenant books, covered requests, seeding
//! (B7, D3, W8).
use super::helpers::*;

/// B7: attempts pending reconciliation are listed page by page in a stable order
/// (books, then attempt id), each exactly once, with their amount, key and whether the
/// balance pays; an operator settles one at a cost or writes it off, which releases what
/// it held (pending money on the balance and the key's spend, budget reservations unless
/// the sweep released them) exactly once — a second reconciliation answers "not pending"
/// and changes nothing — and an open attempt is left to its request.
pub async fn b7_pending_listed_in_pages_and_reconciled_once<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (t1, t2) = (tenant("b7r:one"), tenant("b7r:two"));
    let (k1, k2, lone) = (key("b7r:k1"), key("b7r:k2"), key("b7r:lone"));
    seed(&s, &t1, 1_000).await;
    seed(&s, &t2, 1_000).await;
    let x = budget("b7r:x", 1_000, None);
    let req = |a: &str, t: Option<&str>, k: &SubjectKey, money| BillingRequest {
        budgets: budgets(&[&x]),
        lifetime_ms: 2_000,
        ..bill(a, t, k, money)
    };
    let mut expected: Vec<AttemptRef> = Vec::new();
    for i in [4, 1, 3, 2, 0] {
        let a = format!("b7r:one:{i}");
        bill_ok(&s, &req(&a, Some(&t1), &k1, 10 + i)).await;
        settle_attempt(&s, &t1, &a, BillingOutcome::Pending).await;
        expected.push(in_tenant(&t1, &a));
    }
    for i in [1, 0] {
        let a = format!("b7r:two:{i}");
        bill_ok(&s, &req(&a, Some(&t2), &k2, 20)).await;
        settle_attempt(&s, &t2, &a, BillingOutcome::Pending).await;
        expected.push(in_tenant(&t2, &a));
    }
    // A tenant-less key's books, and an attempt covered by a subscription.
    bill_ok(&s, &req("b7r:lone", None, &lone, 7)).await;
    let lone_ref = AttemptRef {
        attempt: attempt("b7r:lone"),
        books: Books::Key(lone.clone()),
    };
    settle_ref(&s, &lone_ref, BillingOutcome::Pending).await;
    expected.push(lone_ref.clone());
    let covered = BillingRequest {
        bill_balance: false,
        ..req("b7r:covered", Some(&t2), &k2, 5)
    };
    bill_ok(&s, &covered).await;
    settle_attempt(&s, &t2, "b7r:covered", BillingOutcome::Pending).await;
    expected.push(in_tenant(&t2, "b7r:covered"));
    // One open attempt dies (swept later), one stays open and in flight.
    bill_ok(&s, &req("b7r:dead", Some(&t1), &k1, 50)).await;
    expected.push(in_tenant(&t1, "b7r:dead"));
    h.advance(ms(2_500)).await;
    bill_ok(&s, &req("b7r:live", Some(&t1), &k1, 1)).await;
    expected.sort_by(|a, b| (&a.books, &a.attempt).cmp(&(&b.books, &b.attempt)));

    for limit in [1, 3, expected.len(), 100] {
        let pages = all_pages(&s, limit).await;
        let listed: Vec<AttemptRef> = pages.iter().flatten().map(|p| p.attempt.clone()).collect();
        assert_eq!(
            listed, expected,
            "pages of {limit}: each pending attempt once, in order"
        );
    }
    let listed: Vec<PendingAttempt> = all_pages(&s, 100).await.concat();
    let find = |a: &AttemptRef| listed.iter().find(|p| p.attempt == *a).cloned().unwrap();
    let one0 = find(&in_tenant(&t1, "b7r:one:0"));
    assert_eq!(
        (one0.amount, one0.key.clone(), one0.billed_to_balance),
        (10, Some(k1.clone()), true)
    );
    assert!(one0.since.is_some(), "{one0:?}");
    let cov = find(&in_tenant(&t2, "b7r:covered"));
    assert_eq!((cov.amount, cov.billed_to_balance), (5, false));
    assert_eq!(find(&lone_ref).key, Some(lone.clone()));
    assert_eq!(find(&in_tenant(&t1, "b7r:dead")).amount, 50);

    // The open attempt is its request's to settle.
    assert_eq!(
        reconcile(&s, &in_tenant(&t1, "b7r:live"), Reconcile::Settle(1)).await,
        Reconciled::InFlight
    );
    // Settled at its real cost (above its upper bound: the operator knows better).
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    // 10+11+12+13+14 pending + 50 swept = 110; the budget holds 60 + the live 1.
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(1_000), 110, 0, 110), (0, 61))
    );
    let one3 = in_tenant(&t1, "b7r:one:3");
    let r = reconcile(&s, &one3, Reconcile::Settle(25)).await;
    assert_eq!(
        r,
        Reconciled::Settled {
            attempt: find(&one3),
            cost: 25
        }
    );
    for how in [
        Reconcile::Settle(25),
        Reconcile::Settle(1),
        Reconcile::WriteOff,
    ] {
        assert_eq!(
            reconcile(&s, &one3, how).await,
            Reconciled::NotPending,
            "{how:?} again changes nothing"
        );
    }
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(975), 97, 25, 97), (25, 48))
    );
    // Written off: released, nothing charged.
    let one4 = in_tenant(&t1, "b7r:one:4");
    assert_eq!(
        reconcile(&s, &one4, Reconcile::WriteOff).await,
        Reconciled::WrittenOff {
            attempt: find(&one4)
        }
    );
    assert_eq!(
        reconcile(&s, &one4, Reconcile::WriteOff).await,
        Reconciled::NotPending
    );
    assert_eq!(
        reconcile(&s, &one4, Reconcile::Settle(3)).await,
        Reconciled::NotPending
    );
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(975), 83, 25, 83), (25, 34))
    );
    // The swept attempt: its budget reservation went with the sweep, not again now.
    let dead = in_tenant(&t1, "b7r:dead");
    assert!(matches!(
        reconcile(&s, &dead, Reconcile::Settle(40)).await,
        Reconciled::Settled { cost: 40, .. }
    ));
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(935), 33, 65, 33), (65, 34))
    );
    // Unknown names change nothing.
    for unknown in [
        in_tenant(&t1, "b7r:never"),
        in_tenant(&tenant("b7r:nobody"), "b7r:one:0"),
    ] {
        assert_eq!(
            reconcile(&s, &unknown, Reconcile::WriteOff).await,
            Reconciled::NotPending
        );
    }
    // The tenant-less key's books, and the covered attempt (its balance untouched).
    assert!(matches!(
        reconcile(&s, &lone_ref, Reconcile::Settle(6)).await,
        Reconciled::Settled { cost: 6, .. }
    ));
    let v = account(&s, None, &lone, &[&x]).await;
    assert_eq!((money_of(&v), budget_of(&v, 0)), ((None, 0, 6, 0), (6, 0)));
    assert!(matches!(
        reconcile(&s, &in_tenant(&t2, "b7r:covered"), Reconcile::Settle(5)).await,
        Reconciled::Settled { cost: 5, .. }
    ));
    let v = account(&s, Some(&t2), &k2, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(1_000), 40, 0, 40), (5, 40))
    );

    let left: Vec<AttemptRef> = all_pages(&s, 2)
        .await
        .concat()
        .into_iter()
        .map(|p| p.attempt)
        .collect();
    let mut want: Vec<AttemptRef> = expected
        .into_iter()
        .filter(|a| {
            ![
                one3.clone(),
                one4.clone(),
                dead.clone(),
                lone_ref.clone(),
                in_tenant(&t2, "b7r:covered"),
            ]
            .contains(a)
        })
        .collect();
    want.sort_by(|a, b| (&a.books, &a.attempt).cmp(&(&b.books, &b.attempt)));
    assert_eq!(left, want);
    settle_attempt(&s, &t1, "b7r:live", BillingOutcome::Refund).await;
    s
}

/// B7: every books keeps a counter of its attempts pending reconciliation and their
/// money, whoever pays: raised when an attempt goes pending (an unknown result, or the
/// sweep), lowered when it is settled, written off or refunded by any path, and gone
/// once nothing is pending; books with nothing pending are not listed.
pub async fn b7_pending_counter_follows_attempts<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (t1, t2) = (tenant("b7c:one"), tenant("b7c:two"));
    let (k, lone) = (key("b7c:k"), key("b7c:lone"));
    seed(&s, &t1, 1_000).await;
    seed(&s, &t2, 1_000).await;
    let req = |a: &str, t: Option<&str>, k: &SubjectKey, money| BillingRequest {
        lifetime_ms: 2_000,
        ..bill(a, t, k, money)
    };
    let (b1, b2, bl) = (
        Books::Tenant(t1.as_str().into()),
        Books::Tenant(t2.as_str().into()),
        Books::Key(lone.clone()),
    );
    assert!(totals(&s).await.is_empty());
    bill_ok(&s, &req("b7c:a1", Some(&t1), &k, 30)).await;
    bill_ok(&s, &req("b7c:a2", Some(&t1), &k, 12)).await;
    assert!(totals(&s).await.is_empty(), "open attempts are not pending");
    settle_attempt(&s, &t1, "b7c:a1", BillingOutcome::Pending).await;
    assert_eq!(totals(&s).await, [(b1.clone(), total(1, 30))]);
    // Pending again: not counted twice.
    settle_attempt(&s, &t1, "b7c:a1", BillingOutcome::Pending).await;
    settle_attempt(&s, &t1, "b7c:a2", BillingOutcome::Pending).await;
    let covered = BillingRequest {
        bill_balance: false,
        ..req("b7c:c", Some(&t2), &k, 8)
    };
    bill_ok(&s, &covered).await;
    settle_attempt(&s, &t2, "b7c:c", BillingOutcome::Pending).await;
    bill_ok(&s, &req("b7c:l", None, &lone, 4)).await;
    let l_ref = AttemptRef {
        attempt: attempt("b7c:l"),
        books: bl.clone(),
    };
    settle_ref(&s, &l_ref, BillingOutcome::Pending).await;
    let mut want = vec![
        (b1.clone(), total(2, 42)),
        (b2.clone(), total(1, 8)),
        (bl.clone(), total(1, 4)),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(totals(&s).await, want);
    // A covered attempt is pending money of the books, not of the balance.
    assert_eq!(
        money_of(&account(&s, Some(&t2), &k, &[]).await),
        (Some(1_000), 0, 0, 0)
    );

    // Swept: counted when the sweep makes it pending.
    bill_ok(&s, &req("b7c:dead", Some(&t1), &k, 100)).await;
    h.advance(ms(2_500)).await;
    bill_ok(&s, &req("b7c:next", Some(&t1), &k, 1)).await;
    settle_attempt(&s, &t1, "b7c:next", BillingOutcome::Settled(1)).await;
    let t = totals(&s).await;
    assert_eq!(
        t.iter().find(|(b, _)| *b == b1).map(|x| x.1),
        Some(total(3, 142))
    );

    // Lowered by every way out: an ordinary settlement, a refund, an operator's.
    settle_attempt(&s, &t1, "b7c:a1", BillingOutcome::Settled(20)).await;
    settle_attempt(&s, &t1, "b7c:a2", BillingOutcome::Refund).await;
    let t = totals(&s).await;
    assert_eq!(
        t.iter().find(|(b, _)| *b == b1).map(|x| x.1),
        Some(total(1, 100))
    );
    reconcile(&s, &in_tenant(&t1, "b7c:dead"), Reconcile::WriteOff).await;
    reconcile(&s, &in_tenant(&t1, "b7c:dead"), Reconcile::WriteOff).await;
    reconcile(&s, &l_ref, Reconcile::Settle(4)).await;
    assert_eq!(
        totals(&s).await,
        [(b2.clone(), total(1, 8))],
        "books with nothing pending are gone"
    );
    reconcile(&s, &in_tenant(&t2, "b7c:c"), Reconcile::Settle(8)).await;
    assert!(totals(&s).await.is_empty());
    // The counter agrees with the listing.
    assert!(all_pages(&s, 10).await.is_empty());
    s
}

/// B7: a tenant whose billing record is missing although the request expects one (the
/// configuration names it) is refused as [`Refusal::RecordMissing`], never as a zero
/// balance; an explicit balance brings it back, and seeding keeps a record that exists.
pub async fn b7_missing_tenant_record_is_its_own_refusal<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b7m");
    let k = key("b7m");
    let expected = |a: &str| BillingRequest {
        tenant_expected: true,
        ..bill(a, Some(&t), &k, 5)
    };
    bill_refused(&s, &expected("b7m:a1"), Refusal::RecordMissing).await;
    // Not expected: no record reads as no balance.
    bill_refused(
        &s,
        &bill("b7m:a1", Some(&t), &k, 5),
        Refusal::InsufficientBalance,
    )
    .await;
    // A request the balance does not pay for needs no record.
    let covered = BillingRequest {
        bill_balance: false,
        ..expected("b7m:a2")
    };
    bill_ok(&s, &covered).await;
    settle_attempt(&s, &t, "b7m:a2", BillingOutcome::Refund).await;
    bill_refused(&s, &expected("b7m:a3"), Refusal::RecordMissing).await;

    set_balance(&s, &t, 50).await;
    bill_ok(&s, &expected("b7m:a3")).await;
    settle_attempt(&s, &t, "b7m:a3", BillingOutcome::Pending).await;
    assert!(!seed(&s, &t, 1_000).await, "seeding replaced a record");
    set_balance(&s, &t, 7).await;
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(7), 5, 0, 5),
        "an explicit balance keeps pending money"
    );
    settle_attempt(&s, &t, "b7m:a3", BillingOutcome::Settled(2)).await;
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(5), 0, 2, 0)
    );
    assert!(
        seed(&s, &tenant("b7m:new"), 3).await,
        "a new tenant was not seeded"
    );
    s
}

/// D3: the books are per tenant (or, with no tenant, per key): one attempt id in two
/// books is two attempts, a budget id named by requests of two tenants is two budgets,
/// and the pending list names each attempt's books.
pub async fn d3_books_are_kept_per_tenant<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (t1, t2) = (tenant("d3:one"), tenant("d3:two"));
    let k = key("d3");
    seed(&s, &t1, 100).await;
    seed(&s, &t2, 100).await;
    let x = budget("d3:x", 50, None);
    let req = |t: &str| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill("d3:a", Some(t), &k, 40)
    };
    bill_ok(&s, &req(&t1)).await;
    bill_ok(&s, &req(&t2)).await; // its own budget x: 40 ≤ 50
    bill_ok(&s, &bill("d3:a", None, &k, 40)).await;
    assert_eq!(
        settle_attempt(&s, &t2, "d3:a", BillingOutcome::Settled(3)).await,
        Some(AttemptState::Settled(3))
    );
    assert_eq!(
        settle_attempt(&s, &t1, "d3:a", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(40))
    );
    let in_key = AttemptRef {
        attempt: attempt("d3:a"),
        books: Books::Key(k.clone()),
    };
    assert_eq!(
        settle_ref(&s, &in_key, BillingOutcome::Pending).await,
        Some(AttemptState::Pending(40))
    );
    let v1 = account(&s, Some(&t1), &k, &[&x]).await;
    let v2 = account(&s, Some(&t2), &k, &[&x]).await;
    let v0 = account(&s, None, &k, &[&x]).await;
    assert_eq!(
        (money_of(&v1), budget_of(&v1, 0)),
        ((Some(100), 40, 0, 40), (0, 40))
    );
    assert_eq!(
        (money_of(&v2), budget_of(&v2, 0)),
        ((Some(97), 0, 3, 0), (3, 0))
    );
    assert_eq!(
        (money_of(&v0), budget_of(&v0, 0)),
        ((None, 0, 0, 40), (0, 0))
    );
    let mut pending = s.pending().await.expect("pending: store error");
    pending.sort();
    let mut want = vec![(in_tenant(&t1, "d3:a"), 40), (in_key.clone(), 40)];
    want.sort();
    assert_eq!(pending, want);
    for r in [in_tenant(&t1, "d3:a"), in_key] {
        settle_ref(&s, &r, BillingOutcome::Refund).await;
    }
    assert!(pending_list(&s).await.is_empty());
    s
}

/// W8, B1: a request covered by a subscription is neither checked against nor charged
/// to the balance or the key's spend (pending money included); budgets still are.
pub async fn w8_covered_requests_skip_balance_and_spend<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("w8");
    let k = key("w8");
    seed(&s, &t, 0).await;
    let x = budget("w8:x", 100, None);
    let covered = |a: &str, money| BillingRequest {
        bill_balance: false,
        spend_cap: Some(0),
        budgets: budgets(&[&x]),
        ..bill(a, Some(&t), &k, money)
    };
    let figures = |v: &AccountView| (money_of(v), budget_of(v, 0));
    bill_refused(
        &s,
        &BillingRequest {
            bill_balance: true,
            ..covered("w8:a0", 10)
        },
        Refusal::InsufficientBalance,
    )
    .await;
    bill_ok(&s, &covered("w8:a1", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "w8:a1", BillingOutcome::Settled(10)).await,
        Some(AttemptState::Settled(10))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (10, 0)));
    bill_ok(&s, &covered("w8:a2", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "w8:a2", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(10))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (10, 10)));
    assert_eq!(pending_list(&s).await, [(attempt("w8:a2"), 10)]);
    settle_attempt(&s, &t, "w8:a2", BillingOutcome::Settled(4)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (14, 0)));
    assert!(pending_list(&s).await.is_empty());
    // Budgets still bind a covered request.
    bill_refused(&s, &covered("w8:a3", 87), Refusal::Budget(x.id.clone())).await;
    bill_ok(&s, &covered("w8:a3", 86)).await;
    settle_attempt(&s, &t, "w8:a3", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (14, 0)));
    s
}

/// Seeding a key's spend from the books (a start after the store lost it) writes it only
/// where the store has no record of the key's spend: a running spend is never reset, and
/// the spend cap counts the seeded spend (B6).
pub async fn seed_key_spend_writes_only_a_missing_record<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("keyseed");
    let (fresh, running, own) = (
        key("keyseed:fresh"),
        key("keyseed:running"),
        key("keyseed:own"),
    );
    seed(&s, &t, 1_000).await;
    let tb = Books::of(Some(&t), &fresh);
    let spent = |k: &SubjectKey| {
        let (s, t, k) = (s.store().clone(), t.clone(), k.clone());
        async move {
            let v = BillingStore::account(&s, Some(&t), &k, &[]).await;
            v.expect("account: store error").key_spent
        }
    };
    // A key the store knows nothing of takes the seed; seeding again changes nothing.
    assert!(
        seed_key(&s, &tb, &fresh, 40).await,
        "a missing record is written"
    );
    assert_eq!(spent(&fresh).await, 40);
    assert!(
        !seed_key(&s, &tb, &fresh, 90).await,
        "a seed never resets a spend"
    );
    assert_eq!(spent(&fresh).await, 40);
    // A key with a running spend keeps it.
    bill_ok(&s, &bill("keyseed:a1", Some(&t), &running, 50)).await;
    settle_attempt(&s, &t, "keyseed:a1", BillingOutcome::Settled(30)).await;
    assert!(!seed_key(&s, &Books::of(Some(&t), &running), &running, 7).await);
    assert_eq!(spent(&running).await, 30);
    // A key with no tenant keeps its spend in books of its own; its cap counts the seed.
    let kb = Books::of(None, &own);
    assert!(seed_key(&s, &kb, &own, 100).await);
    let capped = |id: &str, cap| BillingRequest {
        spend_cap: Some(cap),
        ..bill(id, None, &own, 5)
    };
    bill_refused(&s, &capped("keyseed:a2", 100), Refusal::SpendCap).await;
    bill_ok(&s, &capped("keyseed:a3", 101)).await;
    let a3 = AttemptRef {
        attempt: attempt("keyseed:a3"),
        books: kb,
    };
    settle_ref(&s, &a3, BillingOutcome::Settled(5)).await;
    assert_eq!(s.account(None, &own, &[]).await.unwrap().key_spent, 105);
    s
}

/// Seeding a balance from configuration sets it only for a tenant with no books: a
/// running balance is never reset. Credits add (or, negative, debit) and return the new
/// balance; a tenant first credited keeps that balance when seeded later.
pub async fn seed_balance_keeps_running_balance<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (t, t2, t3, t4) = (
        tenant("seed"),
        tenant("seed:credited"),
        tenant("seed:negative"),
        tenant("seed:unknown"),
    );
    let k = key("seed");
    let balance = |t: &str| {
        let (s, t, k) = (s.store().clone(), t.to_owned(), k.clone());
        async move {
            let v = BillingStore::account(&s, Some(&t), &k, &[]).await;
            v.expect("account: store error").balance
        }
    };
    seed(&s, &t, 100).await;
    assert_eq!(balance(&t).await, Some(100));
    bill_ok(&s, &bill("seed:a1", Some(&t), &k, 50)).await;
    settle_attempt(&s, &t, "seed:a1", BillingOutcome::Settled(30)).await;
    assert_eq!(balance(&t).await, Some(70));
    seed(&s, &t, 100).await;
    assert_eq!(
        balance(&t).await,
        Some(70),
        "seeding reset a running balance"
    );
    seed(&s, &t, 0).await;
    assert_eq!(balance(&t).await, Some(70));
    assert_eq!(credit(&s, &t, 5).await, 75);
    assert_eq!(credit(&s, &t, -80).await, -5);
    assert_eq!(balance(&t).await, Some(-5));
    bill_refused(
        &s,
        &bill("seed:a2", Some(&t), &k, 1),
        Refusal::InsufficientBalance,
    )
    .await;

    assert_eq!(credit(&s, &t2, 5).await, 5);
    seed(&s, &t2, 100).await;
    assert_eq!(balance(&t2).await, Some(5));
    seed(&s, &t3, -5).await;
    assert_eq!(balance(&t3).await, Some(-5));
    assert_eq!(balance(&t4).await, Some(0));
    s
}
