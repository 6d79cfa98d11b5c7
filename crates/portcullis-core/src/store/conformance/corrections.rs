//! The correction of a closed attempt's charge by a later report (B7).
use super::helpers::*;
use crate::billing::{Corrected, Correction};

/// B7: an automatic charge (what a cut stream streamed, an upper bound) that a later
/// provider report prices differently is corrected by the difference exactly once per
/// attempt: the balance, the key's spend and the budgets whose period the charge fell in
/// move by it; a second correction — the same or another difference, sent twice at once
/// by two instances, or again after a lost reply — changes nothing and says so; an
/// attempt still open or pending is not corrected (it is settled); a covered attempt
/// moves its budgets only; a budget whose period rolled since the charge keeps its new
/// period's spend; the marker lasts as long as the correction asks, then is forgotten.
pub async fn b7_a_correction_applies_once_and_moves_balance_spend_and_budgets<H: Harness>(
    h: &H,
) -> Case<H::Store> {
    let s = case(h).await;
    let t = tenant("b7k");
    let (k, lone) = (key("b7k:k"), key("b7k:lone"));
    seed(&s, &t, 1_000).await;
    let x = budget("b7k:x", 10_000, None);
    let p = budget("b7k:p", 10_000, Some(4_000));
    let req = |a: &str, tn: Option<&str>, k: &SubjectKey, money| BillingRequest {
        budgets: budgets(&[&x, &p]),
        ..bill(a, tn, k, money)
    };
    let view = |tn: Option<&str>, k: &SubjectKey| {
        let (s, tn, k, b) = (
            s.store().clone(),
            tn.map(str::to_owned),
            k.clone(),
            vec![x.clone(), p.clone()],
        );
        async move {
            let v = BillingStore::account(&s, tn.as_deref(), &k, &b)
                .await
                .expect("account: store error");
            (money_of(&v), budget_of(&v, 0), budget_of(&v, 1))
        }
    };
    // Charged what a cut stream streamed (40), and another attempt (5) in the same period.
    bill_ok(&s, &req("b7k:a1", Some(&t), &k, 100)).await;
    settle_attempt(&s, &t, "b7k:a1", BillingOutcome::Settled(40)).await;
    bill_ok(&s, &req("b7k:a4", Some(&t), &k, 100)).await;
    settle_attempt(&s, &t, "b7k:a4", BillingOutcome::Settled(5)).await;
    let v = account(&s, Some(&t), &k, &[&x, &p]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0), budget_of(&v, 1)),
        ((Some(955), 0, 45, 0), (45, 0), (45, 0))
    );
    // The period's start, on the store's clock: when both were charged, or just before.
    let charged_at = v.budgets[1].resets_at.expect("a started period") - 4_000;
    let fix = |a: &str, books: Books, k: &SubjectKey, difference, bill_balance| Correction {
        attempt: AttemptRef {
            attempt: attempt(a),
            books,
        },
        key: k.clone(),
        bill_balance,
        budgets: budgets(&[&x, &p]),
        charged_at,
        difference,
        keep_ms: 600_000,
    };
    let books = Books::Tenant(t.as_str().into());
    // The provider reported 55: 15 more.
    let a1 = fix("b7k:a1", books.clone(), &k, 15, true);
    assert_eq!(correct(&s, &a1).await, Corrected::Applied);
    let after_a1 = ((Some(940), 0, 60, 0), (60, 0), (60, 0));
    assert_eq!(view(Some(&t), &k).await, after_a1);
    for again in [
        a1.clone(),
        Correction {
            difference: -30,
            ..a1.clone()
        },
    ] {
        assert_eq!(correct(&s, &again).await, Corrected::AlreadyCorrected);
        assert_eq!(
            view(Some(&t), &k).await,
            after_a1,
            "{again:?} changed nothing"
        );
    }
    // Two instances correct the same attempt at once: one applies it.
    bill_ok(&s, &req("b7k:a2", Some(&t), &k, 100)).await;
    settle_attempt(&s, &t, "b7k:a2", BillingOutcome::Settled(30)).await;
    let a2 = fix("b7k:a2", books.clone(), &k, -20, true);
    let answers = join_all(vec![
        ReconcileStore::correct(s.store(), &a2),
        ReconcileStore::correct(s.store(), &a2),
    ])
    .await;
    let mut answers: Vec<Corrected> = answers
        .into_iter()
        .map(|a| a.expect("correct: store error"))
        .collect();
    for a in &answers {
        s.touch(|f| f.ledger_mut().corrected(&a2, *a));
    }
    answers.sort_by_key(|a| *a != Corrected::Applied);
    assert_eq!(
        answers,
        vec![Corrected::Applied, Corrected::AlreadyCorrected]
    );
    // 940 − 30 + 20; 60 + 30 − 20.
    assert_eq!(
        view(Some(&t), &k).await,
        ((Some(930), 0, 70, 0), (70, 0), (70, 0))
    );
    // An attempt still open, or pending, is settled, not corrected.
    bill_ok(&s, &req("b7k:open", Some(&t), &k, 10)).await;
    bill_ok(&s, &req("b7k:pend", Some(&t), &k, 10)).await;
    settle_attempt(&s, &t, "b7k:pend", BillingOutcome::Pending).await;
    for a in ["b7k:open", "b7k:pend"] {
        assert_eq!(
            correct(&s, &fix(a, books.clone(), &k, 5, true)).await,
            Corrected::NotClosed,
            "{a}"
        );
    }
    assert_eq!(
        view(Some(&t), &k).await,
        ((Some(930), 10, 70, 10), (70, 20), (70, 20))
    );
    settle_attempt(&s, &t, "b7k:open", BillingOutcome::Refund).await;
    reconcile(&s, &in_tenant(&t, "b7k:pend"), Reconcile::WriteOff).await;
    // Covered by a subscription: the budgets move, the balance and the spend do not.
    let covered = BillingRequest {
        bill_balance: false,
        ..req("b7k:cov", Some(&t), &k, 50)
    };
    bill_ok(&s, &covered).await;
    settle_attempt(&s, &t, "b7k:cov", BillingOutcome::Settled(20)).await;
    let cov = fix("b7k:cov", books.clone(), &k, 10, false);
    assert_eq!(correct(&s, &cov).await, Corrected::Applied);
    assert_eq!(
        view(Some(&t), &k).await,
        ((Some(930), 0, 70, 0), (100, 0), (100, 0))
    );
    // A tenant-less key's own books.
    let lone_books = Books::Key(lone.clone());
    bill_ok(&s, &req("b7k:lone", None, &lone, 50)).await;
    settle_ref(
        &s,
        &AttemptRef {
            attempt: attempt("b7k:lone"),
            books: lone_books.clone(),
        },
        BillingOutcome::Settled(10),
    )
    .await;
    // Its budgets' period started with its own reservation.
    let lone_v = account(&s, None, &lone, &[&x, &p]).await;
    let lone_fix = Correction {
        charged_at: lone_v.budgets[1].resets_at.expect("a started period") - 4_000,
        ..fix("b7k:lone", lone_books.clone(), &lone, 7, true)
    };
    assert_eq!(correct(&s, &lone_fix).await, Corrected::Applied);
    assert_eq!(correct(&s, &lone_fix).await, Corrected::AlreadyCorrected);
    assert_eq!(
        view(None, &lone).await,
        ((None, 0, 17, 0), (17, 0), (17, 0))
    );
    // The periodic budget's period rolls: a4, charged in the period before, corrects the
    // budget without a period only. Its marker is kept 2 s.
    h.advance(ms(4_500)).await;
    let a4 = Correction {
        keep_ms: 2_000,
        ..fix("b7k:a4", books.clone(), &k, 3, true)
    };
    assert_eq!(correct(&s, &a4).await, Corrected::Applied);
    assert_eq!(
        view(Some(&t), &k).await,
        ((Some(927), 0, 73, 0), (103, 0), (0, 0))
    );
    assert_eq!(correct(&s, &a4).await, Corrected::AlreadyCorrected);
    // Past its keep the marker is forgotten (what markers hold stays bounded): a caller
    // keeps it as long as it may correct again. a1's, kept 10 minutes, still holds.
    h.advance(ms(2_500)).await;
    assert_eq!(correct(&s, &a1).await, Corrected::AlreadyCorrected);
    assert_eq!(correct(&s, &a4).await, Corrected::Applied);
    assert_eq!(
        view(Some(&t), &k).await,
        ((Some(924), 0, 76, 0), (106, 0), (0, 0))
    );
    s
}
