//! Billing: balances, spend caps, budgets, settlement (B1–B4, B7).
use super::helpers::*;

/// B1: at request start a balance (less money pending reconciliation) ≤ 0 is refused,
/// and so is a key whose spend plus pending money has reached its cap. The balance is
/// checked first; any positive balance admits whatever the upper bound; caps are per
/// key; a request with no tenant has no balance check; a refusal reserves nothing and
/// starts no budget period.
pub async fn b1_balance_and_spend_cap<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (t, t2) = (tenant("b1"), tenant("b1:negative"));
    let (k0, k, k2, k3) = (
        key("b1:balance"),
        key("b1:capped"),
        key("b1:other"),
        key("b1:no-tenant"),
    );
    let x = budget("b1:x", 1_000, Some(4_000));
    let with_x = |a: &str, money| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill(a, Some(&t), &k0, money)
    };

    // A tenant with no books has no balance.
    bill_refused(&s, &with_x("b1:a0", 5), Refusal::InsufficientBalance).await;
    let v = account(&s, Some(&t), &k0, &[&x]).await;
    assert_eq!(money_of(&v), (Some(0), 0, 0, 0));
    assert_eq!(
        (budget_of(&v, 0), v.budgets[0].resets_at),
        ((0, 0), None),
        "a refusal reserved money or started a budget period"
    );
    seed(&s, &t, 0).await;
    bill_refused(&s, &with_x("b1:a0", 5), Refusal::InsufficientBalance).await;
    // Any positive balance admits, whatever the upper bound (B2).
    assert_eq!(credit(&s, &t, 1).await, 1);
    bill_ok(&s, &with_x("b1:a1", 5)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b1:a1", BillingOutcome::Settled(1)).await,
        Some(AttemptState::Settled(1))
    );
    bill_refused(&s, &with_x("b1:a2", 5), Refusal::InsufficientBalance).await;
    let v = account(&s, Some(&t), &k0, &[&x]).await;
    assert_eq!(money_of(&v), (Some(0), 0, 1, 0));
    assert_eq!(budget_of(&v, 0), (1, 0));

    // The spend cap counts spend and pending money.
    assert_eq!(credit(&s, &t, 100).await, 100);
    let capped = |a: &str, k: &SubjectKey, cap| BillingRequest {
        spend_cap: Some(cap),
        ..bill(a, Some(&t), k, 30)
    };
    bill_ok(&s, &capped("b1:a3", &k, 50)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b1:a3", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(30))
    );
    bill_ok(&s, &capped("b1:a4", &k, 50)).await; // 0 spent + 30 pending < 50
    assert_eq!(
        settle_attempt(&s, &t, "b1:a4", BillingOutcome::Settled(20)).await,
        Some(AttemptState::Settled(20))
    );
    let v = account(&s, Some(&t), &k, &[]).await;
    assert_eq!(money_of(&v), (Some(80), 30, 20, 30));
    // 20 spent + 30 pending = 50 = cap.
    bill_refused(&s, &capped("b1:a5", &k, 50), Refusal::SpendCap).await;
    bill_ok(&s, &capped("b1:a5", &k, 51)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b1:a5", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    // Caps are per key: another key of the tenant has spent nothing; a cap of 0 allows
    // nothing.
    bill_ok(&s, &capped("b1:a6", &k2, 50)).await;
    settle_attempt(&s, &t, "b1:a6", BillingOutcome::Refund).await;
    bill_refused(&s, &capped("b1:a6b", &k2, 0), Refusal::SpendCap).await;
    // No cap: no cap check.
    bill_ok(&s, &bill("b1:a7", Some(&t), &k, 30)).await;
    settle_attempt(&s, &t, "b1:a7", BillingOutcome::Refund).await;

    // The balance counts pending money: 30 - 30 pending = 0; checked before the cap.
    assert_eq!(credit(&s, &t, -50).await, 30);
    bill_refused(
        &s,
        &bill("b1:a8", Some(&t), &k, 1),
        Refusal::InsufficientBalance,
    )
    .await;
    bill_refused(&s, &capped("b1:a8", &k, 50), Refusal::InsufficientBalance).await;
    // Reconciled below its upper bound: room again, under the balance and the cap.
    assert_eq!(
        settle_attempt(&s, &t, "b1:a3", BillingOutcome::Settled(25)).await,
        Some(AttemptState::Settled(25))
    );
    let v = account(&s, Some(&t), &k, &[]).await;
    assert_eq!(money_of(&v), (Some(5), 0, 45, 0));
    bill_ok(&s, &capped("b1:a8", &k, 50)).await; // 45 < 50
    settle_attempt(&s, &t, "b1:a8", BillingOutcome::Refund).await;
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(5), 0, 45, 0),
        "a refund charged something"
    );

    // No tenant: no balance to check; the key's spend is still counted.
    bill_ok(&s, &bill("b1:a9", None, &k3, 1)).await;
    let in_k3 = AttemptRef {
        attempt: attempt("b1:a9"),
        books: Books::Key(k3.clone()),
    };
    assert_eq!(
        settle_ref(&s, &in_k3, BillingOutcome::Settled(1)).await,
        Some(AttemptState::Settled(1))
    );
    assert_eq!(
        money_of(&account(&s, None, &k3, &[]).await),
        (None, 0, 1, 0)
    );
    // A negative balance.
    seed(&s, &t2, -5).await;
    bill_refused(
        &s,
        &bill("b1:a10", Some(&t2), &k3, 1),
        Refusal::InsufficientBalance,
    )
    .await;
    // k3's spend without a tenant is kept in k3's own books (D3), not in t2's.
    assert_eq!(
        money_of(&account(&s, Some(&t2), &k3, &[]).await),
        (Some(-5), 0, 0, 0)
    );
    s
}

/// B2: settlement deducts the real cost from the balance and adds it to the key's
/// spend; a request that started with a positive balance runs to completion, so the
/// balance may end below zero (and the next request is refused). The real cost is
/// charged in full even above the upper bound; a negative cost charges nothing.
pub async fn b2_settle_may_go_below_zero<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b2");
    let k = key("b2");
    seed(&s, &t, 10).await;
    bill_ok(&s, &bill("b2:a1", Some(&t), &k, 100)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b2:a1", BillingOutcome::Settled(37)).await,
        Some(AttemptState::Settled(37))
    );
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(-27), 0, 37, 0)
    );
    bill_refused(
        &s,
        &bill("b2:a2", Some(&t), &k, 1),
        Refusal::InsufficientBalance,
    )
    .await;
    assert_eq!(credit(&s, &t, 30).await, 3);
    bill_ok(&s, &bill("b2:a3", Some(&t), &k, 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b2:a3", BillingOutcome::Settled(15)).await,
        Some(AttemptState::Settled(15)),
        "the real cost, above the upper bound, is charged in full"
    );
    assert_eq!(credit(&s, &t, 13).await, 1);
    bill_ok(&s, &bill("b2:a4", Some(&t), &k, 5)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b2:a4", BillingOutcome::Settled(-5)).await,
        Some(AttemptState::Settled(0)),
        "a negative cost charges nothing"
    );
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(1), 0, 52, 0)
    );
    s
}

/// B3: a budget reserves the upper bound atomically (all budgets of a request or
/// none), settles to the real cost and refuses a request that does not fit. A budget
/// period starts at the first use and rolls by whole periods from that anchor; spend
/// starts again, reservations of attempts still open carry over, and a cost is charged
/// to the period it settles in. A refund leaves no trace: a period only that attempt
/// had started, or that it leaves empty, has not started (whether or not a refused
/// request looked at the budget in between, L5). A budget with no period never resets.
pub async fn b3_budgets_reserve_and_roll_by_period<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b3");
    let k = key("b3");
    seed(&s, &t, 1_000_000).await;
    let x = budget("b3:x", 100, Some(4_000));
    let y = budget("b3:y", 1_000, None);
    let z = budget("b3:z", 50, None);
    let w = budget("b3:w", 100, Some(4_000));
    let req = |a: &str, money, b: &[&Budget]| BillingRequest {
        budgets: budgets(b),
        ..bill(a, Some(&t), &k, money)
    };
    let all = [&x, &y, &z];

    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(
        (v.budgets[0].limit, budget_of(&v, 0), v.budgets[0].resets_at),
        (100, (0, 0), None),
        "no use, no period"
    );
    bill_ok(&s, &req("b3:a1", 60, &[&x, &y])).await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!((budget_of(&v, 0), budget_of(&v, 1)), ((0, 60), (0, 60)));
    let anchor = v.budgets[0].resets_at.expect("the period started") - 4_000;
    if let Some(now) = h.now() {
        assert_eq!(anchor, now, "the period is anchored at its first use");
    }
    assert_eq!(v.budgets[1].resets_at, None, "no period, no reset");

    bill_refused(&s, &req("b3:a2", 60, &[&x]), Refusal::Budget(x.id.clone())).await;
    // All or nothing: y has room, x does not; y has room, z does not.
    bill_refused(
        &s,
        &req("b3:a2", 60, &[&y, &x]),
        Refusal::Budget(x.id.clone()),
    )
    .await;
    bill_refused(
        &s,
        &req("b3:a2", 60, &[&y, &z]),
        Refusal::Budget(z.id.clone()),
    )
    .await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(
        (budget_of(&v, 0), budget_of(&v, 1), budget_of(&v, 2)),
        ((0, 60), (0, 60), (0, 0)),
        "a refused request reserved money"
    );
    assert_eq!(v.budgets[2].resets_at, None);
    bill_ok(&s, &req("b3:a3", 40, &[&x])).await; // exactly the limit
    bill_refused(&s, &req("b3:a4", 1, &[&x]), Refusal::Budget(x.id.clone())).await;
    assert_eq!(
        settle_attempt(&s, &t, "b3:a1", BillingOutcome::Settled(10)).await,
        Some(AttemptState::Settled(10))
    );
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!((budget_of(&v, 0), budget_of(&v, 1)), ((10, 40), (10, 0)));
    settle_attempt(&s, &t, "b3:a3", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(budget_of(&v, 0), (10, 0));
    assert_eq!(
        v.budgets[0].resets_at,
        Some(anchor + 4_000),
        "spend keeps the period"
    );
    bill_ok(&s, &req("b3:a5", 90, &[&x])).await; // 10 + 90 = 100, open across the roll

    if exact::<H>() {
        h.advance(ms(3_999)).await;
        let v = account(&s, Some(&t), &k, &[&x]).await;
        assert_eq!(budget_of(&v, 0), (10, 90), "1 ms before the period ends");
        h.advance(ms(1)).await; // exactly anchor + 4 s: the next period
    } else {
        h.advance(ms(4_500)).await;
    }
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        budget_of(&v, 0),
        (0, 90),
        "spend starts again, open reservations carry over"
    );
    assert_eq!(v.budgets[0].resets_at, Some(anchor + 8_000));
    bill_ok(&s, &req("b3:a6", 10, &[&x])).await;
    bill_refused(&s, &req("b3:a7", 1, &[&x]), Refusal::Budget(x.id.clone())).await;
    settle_attempt(&s, &t, "b3:a5", BillingOutcome::Settled(70)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        budget_of(&v, 0),
        (70, 10),
        "charged to the period it settles in"
    );
    settle_attempt(&s, &t, "b3:a6", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(budget_of(&v, 0), (70, 0));
    assert_eq!(v.budgets[0].resets_at, Some(anchor + 8_000));
    assert_eq!(
        (budget_of(&v, 1), v.budgets[1].resets_at),
        ((10, 0), None),
        "no period: never resets"
    );

    // Skip the period [8 s, 12 s): the next one is still aligned at the anchor.
    h.advance(ms(8_000)).await; // 12.5 s (12 s with an exact clock)
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(budget_of(&v, 0), (0, 0));
    assert_eq!(v.budgets[0].resets_at, Some(anchor + 16_000));
    assert_eq!(budget_of(&v, 1), (10, 0));

    // A refund leaves no trace: the period only it had started has not started.
    bill_ok(&s, &req("b3:a8", 30, &[&w])).await;
    assert!(
        account(&s, Some(&t), &k, &[&w]).await.budgets[0]
            .resets_at
            .is_some()
    );
    settle_attempt(&s, &t, "b3:a8", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &[&w]).await;
    assert_eq!((budget_of(&v, 0), v.budgets[0].resets_at), ((0, 0), None));
    h.advance(ms(1_000)).await;
    bill_ok(&s, &req("b3:a9", 30, &[&w])).await;
    let r = account(&s, Some(&t), &k, &[&w]).await.budgets[0]
        .resets_at
        .expect("the period started");
    if let Some(now) = h.now() {
        assert_eq!(r, now + 4_000);
    }
    let expected = if exact::<H>() { 17_000 } else { 17_500 };
    assert_near::<H>(
        r - anchor,
        expected,
        "anchored at the first use that stayed",
    );
    settle_attempt(&s, &t, "b3:a9", BillingOutcome::Refund).await;

    // L5: a refused request changes nothing. A refund that leaves a rolled period empty
    // un-starts it, whether or not a refused request looked at the budget in between.
    let v1 = budget("b3:v1", 100, Some(4_000));
    let v2 = budget("b3:v2", 100, Some(4_000));
    for (i, v) in [&v1, &v2].into_iter().enumerate() {
        bill_ok(&s, &req(&format!("b3:v{i}:a"), 10, &[v])).await;
        settle_attempt(&s, &t, &format!("b3:v{i}:a"), BillingOutcome::Settled(10)).await;
        bill_ok(&s, &req(&format!("b3:v{i}:b"), 10, &[v])).await;
    }
    h.advance(ms(4_500)).await;
    bill_refused(
        &s,
        &req("b3:v0:c", 1_000, &[&v1]),
        Refusal::Budget(v1.id.clone()),
    )
    .await;
    for (i, v) in [&v1, &v2].into_iter().enumerate() {
        settle_attempt(&s, &t, &format!("b3:v{i}:b"), BillingOutcome::Refund).await;
        let view = account(&s, Some(&t), &k, &[v]).await;
        assert_eq!(
            (budget_of(&view, 0), view.budgets[0].resets_at),
            ((0, 0), None),
            "{}: the refund left an empty period started",
            v.id
        );
    }
    s
}

/// B3: a budget whose period is zero is a budget with no period: it never resets, and
/// its view shows no reset time.
pub async fn b3_a_zero_period_is_no_period<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b3z");
    let k = key("b3z");
    seed(&s, &t, 1_000_000).await;
    let z = budget("b3z:zero", 100, Some(0));
    let req = |a: &str, money| BillingRequest {
        budgets: budgets(&[&z]),
        ..bill(a, Some(&t), &k, money)
    };
    bill_ok(&s, &req("b3z:a1", 60)).await;
    settle_attempt(&s, &t, "b3z:a1", BillingOutcome::Settled(60)).await;
    h.advance(ms(10_000)).await;
    let v = account(&s, Some(&t), &k, &[&z]).await;
    assert_eq!(
        (budget_of(&v, 0), v.budgets[0].resets_at),
        ((60, 0), None),
        "a zero period never resets"
    );
    bill_refused(&s, &req("b3z:a2", 41), Refusal::Budget(z.id.clone())).await;
    s
}

/// B8: an attempt is settled at its real cost, all of it, however little it held (a
/// capped or estimated hold): the balance and the key's spend take the whole cost, and
/// so does every budget it drew on, which may then end above its limit by that
/// attempt's overshoot (cost − hold); the next reservation is then refused, however
/// small.
pub async fn b8_a_cost_above_its_hold_is_charged_in_full_and_refuses_the_next<H: Harness>(
    h: &H,
) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b8");
    let k = key("b8");
    seed(&s, &t, 1_000).await;
    let x = budget("b8:x", 100, None);
    let req = |a: &str, money| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill(a, Some(&t), &k, money)
    };
    bill_ok(&s, &req("b8:a1", 40)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b8:a1", BillingOutcome::Settled(90)).await,
        Some(AttemptState::Settled(90)),
        "held 40, charged all 90"
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(910), 0, 90, 0), (90, 0))
    );
    // 90 spent + 10 held fits the limit of 100; the cost of 70 overruns it by 60.
    bill_ok(&s, &req("b8:a2", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b8:a2", BillingOutcome::Settled(70)).await,
        Some(AttemptState::Settled(70))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(840), 0, 160, 0), (160, 0)),
        "the budget ends above its limit by the last attempt's overshoot"
    );
    bill_refused(&s, &req("b8:a3", 1), Refusal::Budget(x.id.clone())).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(840), 0, 160, 0), (160, 0))
    );
    s
}

/// B3, T4: many reservations on one small budget in flight at once never reserve more
/// than its limit, and none that fitted is refused; many settlements of one attempt in
/// flight at once settle it once.
pub async fn b3_concurrent_reservations_never_exceed_budget<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("concurrent");
    seed(&s, &t, 1_000_000).await;
    let x = budget("concurrent:x", 100, None);
    let req = |i: usize, wave: usize, money: Money| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill(
            &format!("concurrent:{wave}:{i}"),
            Some(&t),
            &key(&format!("concurrent:{}", i % 4)),
            money,
        )
    };

    // Wave 1: 64 reservations of 7 at once on a budget of 100: exactly 14 fit.
    let reqs: Vec<_> = (0..64).map(|i| req(i, 1, 7)).collect();
    let decisions = join_all(reqs.iter().map(|r| s.check_and_reserve(r)).collect()).await;
    let mut admitted = Vec::new();
    for (r, d) in reqs.iter().zip(decisions) {
        let d = d.expect("check_and_reserve: store error");
        s.touch(|f| f.ledger_mut().reserved(r, &d));
        match d {
            BillingDecision::Admitted => admitted.push(r.attempt_ref()),
            d => assert_eq!(d, BillingDecision::Refused(Refusal::Budget(x.id.clone()))),
        }
    }
    assert_eq!(admitted.len(), 14, "14 × 7 = 98 ≤ 100 < 15 × 7");
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (0, 98));

    // Each admitted attempt settled twice at once (two instances racing): once.
    let outcome = |j: usize| {
        if j % 2 == 0 {
            BillingOutcome::Settled(5)
        } else {
            BillingOutcome::Refund
        }
    };
    let settles: Vec<_> = admitted
        .iter()
        .enumerate()
        .flat_map(|(j, a)| [(j, a), (j, a)])
        .map(|(j, a)| s.settle_attempt(a, outcome(j)))
        .collect();
    let results = join_all(settles).await;
    for (pair, a) in results.chunks_exact(2).zip(&admitted) {
        for r in pair {
            let answer = r.clone().expect("settle_attempt: store error");
            s.touch(|f| f.ledger_mut().settled(a, answer));
        }
    }
    for (j, pair) in results.chunks_exact(2).enumerate() {
        let done: Vec<_> = pair
            .iter()
            .map(|r| r.clone().expect("settle_attempt: store error"))
            .filter(Option::is_some)
            .collect();
        let expected = match outcome(j) {
            BillingOutcome::Settled(c) => AttemptState::Settled(c),
            _ => AttemptState::Refunded,
        };
        assert_eq!(done, [Some(expected)], "attempt {j} settled {pair:?}");
    }
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (35, 0), "7 settled at 5, 7 refunded");
    assert_eq!(v.balance, Some(1_000_000 - 35));

    // Wave 2: 48 mixed amounts at once on the 65 left: what is admitted fits, and every
    // refused request did not fit even beside what was admitted.
    let reqs: Vec<_> = (0..48)
        .map(|i| req(i, 2, 1 + (i as Money * 7) % 20))
        .collect();
    let decisions = join_all(reqs.iter().map(|r| s.check_and_reserve(r)).collect()).await;
    let (mut sum, mut refused) = (0, Vec::new());
    for (r, d) in reqs.iter().zip(decisions) {
        let d = d.expect("check_and_reserve: store error");
        s.touch(|f| f.ledger_mut().reserved(r, &d));
        match d {
            BillingDecision::Admitted => sum += r.money,
            _ => refused.push(r.money),
        }
    }
    assert!(sum <= 65, "{sum} reserved on the 65 left");
    assert!(
        sum > 0 && !refused.is_empty(),
        "a weak test: {sum} {refused:?}"
    );
    for m in &refused {
        assert!(sum + m > 65, "{m} was refused but fits beside {sum}");
    }
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (35, sum));
    let refunds: Vec<_> = reqs
        .iter()
        .map(|r| s.settle_attempt(&r.attempt_ref(), BillingOutcome::Refund))
        .collect();
    for (r, answer) in reqs.iter().zip(join_all(refunds).await) {
        let answer = answer.expect("settle_attempt: store error");
        s.touch(|f| f.ledger_mut().settled(&r.attempt_ref(), answer));
    }
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (35, 0));
    s
}

/// B4: every attempt settles on its own, once, by its id: a second settlement, of any
/// outcome, changes nothing; an unknown attempt settles nothing; admitting a known
/// attempt again reserves nothing twice. An attempt whose result is unknown stays
/// pending with its upper bound — counted against balance, spend and budgets and
/// listed for reconciliation, never written as zero — until it is settled with its
/// real cost or refunded.
pub async fn b4_settlement_idempotent_and_pending_reconciled<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b4");
    let k = key("b4");
    seed(&s, &t, 100).await;
    let x = budget("b4:x", 100, None);
    let req = |a: &str, money| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill(a, Some(&t), &k, money)
    };
    let figures = |v: &AccountView| (money_of(v), budget_of(v, 0));

    bill_ok(&s, &req("b4:a1", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b4:a1", BillingOutcome::Settled(7)).await,
        Some(AttemptState::Settled(7))
    );
    for o in [
        BillingOutcome::Settled(7),
        BillingOutcome::Settled(9),
        BillingOutcome::Refund,
        BillingOutcome::Pending,
    ] {
        assert_eq!(
            settle_attempt(&s, &t, "b4:a1", o).await,
            None,
            "{o:?} again"
        );
    }
    assert_eq!(
        settle_attempt(&s, &t, "b4:never", BillingOutcome::Settled(7)).await,
        None
    );
    assert_eq!(
        settle_attempt(&s, &t, "b4:never", BillingOutcome::Pending).await,
        None
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(93), 0, 7, 0), (7, 0)));
    // An open attempt admitted again reserves nothing twice.
    bill_ok(&s, &req("b4:a1b", 10)).await;
    bill_ok(&s, &req("b4:a1b", 10)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(93), 0, 7, 0), (7, 10)));
    settle_attempt(&s, &t, "b4:a1b", BillingOutcome::Refund).await;

    // Two attempts of one request, each settled on its own.
    bill_ok(&s, &req("b4:a2", 20)).await;
    bill_ok(&s, &req("b4:a3", 20)).await;
    settle_attempt(&s, &t, "b4:a2", BillingOutcome::Refund).await;
    settle_attempt(&s, &t, "b4:a3", BillingOutcome::Settled(12)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(81), 0, 19, 0), (19, 0)));

    // Unknown result: pending with its upper bound.
    bill_ok(&s, &req("b4:a4", 40)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(40))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        figures(&v),
        ((Some(81), 40, 19, 40), (19, 40)),
        "budgets keep the reservation"
    );
    assert_eq!(pending_list(&s).await, [(attempt("b4:a4"), 40)]);
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Pending).await,
        None
    );
    bill_ok(&s, &req("b4:a4", 40)).await; // known: nothing reserved twice
    bill_refused(&s, &req("b4:a5", 50), Refusal::Budget(x.id.clone())).await; // 19 + 40 + 50
    // Pending money counts against the balance: 40 - 40 = 0.
    assert_eq!(credit(&s, &t, -41).await, 40);
    bill_refused(&s, &req("b4:a6", 1), Refusal::InsufficientBalance).await;
    assert_eq!(credit(&s, &t, 41).await, 81);
    bill_ok(&s, &req("b4:a7", 30)).await;
    settle_attempt(&s, &t, "b4:a7", BillingOutcome::Pending).await;
    assert_eq!(
        pending_list(&s).await,
        [(attempt("b4:a4"), 40), (attempt("b4:a7"), 30)]
    );

    // Reconciled with the real cost.
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Settled(25)).await,
        Some(AttemptState::Settled(25))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(56), 30, 44, 30), (44, 30)));
    assert_eq!(pending_list(&s).await, [(attempt("b4:a7"), 30)]);
    // Reconciled as never sent: everything released, nothing charged.
    assert_eq!(
        settle_attempt(&s, &t, "b4:a7", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(56), 0, 44, 0), (44, 0)));
    assert!(pending_list(&s).await.is_empty());
    assert_eq!(
        settle_attempt(&s, &t, "b4:a7", BillingOutcome::Settled(1)).await,
        None
    );
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Settled(1)).await,
        None
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(56), 0, 44, 0), (44, 0)));
    s
}

/// B4, D7, B7: a settled or refunded attempt is forgotten at once — a duplicate
/// settlement finds nothing and changes nothing, and the same id admitted again is a
/// new attempt. An attempt still open after its lifetime (its instance died) is swept
/// into pending reconciliation at the next reservation in its books, its budget
/// reservation released; its upper bound then counts against the balance and the key's
/// spend as pending money until it is reconciled, and its budgets are not released
/// twice. A pending attempt is never swept.
pub async fn b7_final_attempts_forgotten_open_ones_swept<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b7");
    let k = key("b7");
    seed(&s, &t, 100).await;
    let x = budget("b7:x", 100, None);
    let req = |a: &str, money| BillingRequest {
        budgets: budgets(&[&x]),
        lifetime_ms: 2_000,
        ..bill(a, Some(&t), &k, money)
    };
    let figures = |v: &AccountView| (money_of(v), budget_of(v, 0));

    bill_ok(&s, &req("b7:a1", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b7:a1", BillingOutcome::Settled(5)).await,
        Some(AttemptState::Settled(5))
    );
    for o in [BillingOutcome::Settled(5), BillingOutcome::Refund] {
        assert_eq!(
            settle_attempt(&s, &t, "b7:a1", o).await,
            None,
            "{o:?} again"
        );
    }
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(95), 0, 5, 0), (5, 0)));
    // Forgotten: the same id is a new attempt.
    bill_ok(&s, &req("b7:a1", 10)).await;
    assert_eq!(
        budget_of(&account(&s, Some(&t), &k, &[&x]).await, 0),
        (5, 10)
    );
    assert_eq!(
        settle_attempt(&s, &t, "b7:a1", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );

    // An attempt whose instance died stays open; another one goes pending.
    bill_ok(&s, &req("b7:dead", 60)).await;
    bill_ok(&s, &req("b7:a2", 30)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b7:a2", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(30))
    );
    h.advance(ms(1_000)).await;
    // 5 + 60 + 30 + 40 > 100: the dead attempt still holds its reservation.
    bill_refused(&s, &req("b7:a3", 40), Refusal::Budget(x.id.clone())).await;
    h.advance(ms(1_500)).await;
    // Past its lifetime: swept at this reservation, before the decision.
    bill_ok(&s, &req("b7:a3", 40)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(95), 90, 5, 90), (5, 70)));
    assert_eq!(
        pending_list(&s).await,
        [(attempt("b7:a2"), 30), (attempt("b7:dead"), 60)]
    );
    // Reconciled at its real cost; the budget is not released twice.
    assert_eq!(
        settle_attempt(&s, &t, "b7:dead", BillingOutcome::Settled(20)).await,
        Some(AttemptState::Settled(20))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(75), 30, 25, 30), (25, 70)));
    assert_eq!(
        settle_attempt(&s, &t, "b7:dead", BillingOutcome::Settled(20)).await,
        None
    );
    assert_eq!(
        settle_attempt(&s, &t, "b7:a3", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    assert_eq!(
        settle_attempt(&s, &t, "b7:a2", BillingOutcome::Settled(10)).await,
        Some(AttemptState::Settled(10))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(65), 0, 35, 0), (35, 0)));
    assert!(pending_list(&s).await.is_empty());

    // A swept attempt refunded later gives nothing back to the budgets twice.
    bill_ok(&s, &req("b7:dead2", 50)).await;
    h.advance(ms(2_500)).await;
    bill_ok(&s, &req("b7:a4", 1)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(65), 50, 35, 50), (35, 1)));
    assert_eq!(
        settle_attempt(&s, &t, "b7:dead2", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    settle_attempt(&s, &t, "b7:a4", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(65), 0, 35, 0), (35, 0)));
    s
}
