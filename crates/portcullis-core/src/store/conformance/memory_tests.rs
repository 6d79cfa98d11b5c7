//! The in-memory store against the suite, and the invariant checks proven able to fail.

mod memory {
    use super::super::Harness;
    use crate::clock::{Clock, ManualClock, Millis};
    use crate::store::memory::MemoryStore;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    /// A start time on no calendar boundary, so anchors are visibly the first use.
    const START: Millis = 1_700_000_000_123;

    struct MemoryHarness {
        clock: ManualClock,
    }

    impl MemoryHarness {
        fn new() -> Self {
            Self {
                clock: ManualClock::new(START),
            }
        }
    }

    impl Harness for MemoryHarness {
        type Store = MemoryStore<ManualClock>;

        async fn store(&self) -> Self::Store {
            MemoryStore::with_clock(self.clock.clone())
        }
        async fn advance(&self, d: Duration) {
            self.clock.advance(d);
        }
        fn now(&self) -> Option<Millis> {
            Some(self.clock.now())
        }
    }

    /// The in-memory store's futures are `Ready`: one poll finishes the whole check.
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("an in-memory store future was not ready"),
        }
    }

    crate::conformance_cases!(#[test] block_on(block_on) MemoryHarness::new());

    /// The suite with a slack declared: the tolerant branches (used by stores on real
    /// time) must pass too on an exact store.
    struct SlackHarness(MemoryHarness);

    impl Harness for SlackHarness {
        type Store = MemoryStore<ManualClock>;
        const SLACK_MS: Millis = 250;

        async fn store(&self) -> Self::Store {
            self.0.store().await
        }
        async fn advance(&self, d: Duration) {
            // Real time overshoots a little: so does this clock.
            self.0.advance(d + Duration::from_millis(7)).await;
        }
    }

    #[test]
    fn run_all_with_slack() {
        block_on(super::super::run_all(&SlackHarness(MemoryHarness::new())));
    }
}

/// The invariant checks fail when something is held or the books are off: each test
/// leaves one thing behind on the in-memory store on purpose.
mod checks_can_fail {
    use super::super::helpers::*;
    use super::super::{Footprint, assert_books_exact, assert_nothing_held};
    use crate::capacity::CapacityStore;
    use crate::clock::ManualClock;
    use crate::store::memory::MemoryStore;
    use std::task::{Context, Waker};

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("an in-memory store future was not ready"),
        }
    }

    fn fresh() -> Case<MemoryStore<ManualClock>> {
        Case::new(MemoryStore::with_clock(ManualClock::new(1_700_000_000_123)))
    }

    fn nothing_held(s: &Case<MemoryStore<ManualClock>>) {
        block_on(assert_nothing_held(s.store(), &s.footprint()));
    }

    fn books_exact(s: &Case<MemoryStore<ManualClock>>) {
        block_on(assert_books_exact(s.store(), &s.footprint()));
    }

    fn policy() -> Arc<Policy> {
        Arc::new(
            Policy::default()
                .with_requests(secs(60, 10))
                .with_amount_cap(1_000),
        )
    }

    /// A request of every kind, everything given back and settled: both checks pass
    /// (so the failures below are the checks', not a check that always fails).
    #[test]
    fn d9_d10_a_run_that_gives_everything_back_passes_both_checks() {
        let s = fresh();
        block_on(async {
            let (k, t, p) = (key("clean"), tenant("clean"), policy());
            let lease = acquired(&s, &k, 1, LONG_TTL).await;
            let ticket = admitted(&s, &k, &p, demand(5, 0, 0, 10)).await;
            seed(&s, &t, 100).await;
            bill_ok(&s, &bill("clean:a", Some(&t), &k, 10)).await;
            settle_attempt(&s, &t, "clean:a", BillingOutcome::Settled(7)).await;
            settle(&s, &k, ticket, Outcome::Refund).await;
            release(&s, &k, lease).await;
        });
        nothing_held(&s);
        books_exact(&s);
    }

    #[test]
    #[should_panic(expected = "1 slot lease(s) of SubjectKey(\"conformance:held\")")]
    fn d9_nothing_held_fails_on_a_slot_lease_left_held() {
        let s = fresh();
        block_on(acquired(&s, &key("held"), 2, LONG_TTL));
        nothing_held(&s);
    }

    #[test]
    #[should_panic(expected = "1 capacity lease(s) of channel \"conformance-held\"")]
    fn d9_nothing_held_fails_on_a_capacity_lease_left_held() {
        let s = fresh();
        s.touch(|f| {
            f.channel("conformance-held");
        });
        let lease = block_on(CapacityStore::try_acquire(
            s.store(),
            "conformance-held",
            1,
            LONG_TTL,
        ));
        assert!(lease.expect("try_acquire").is_some());
        nothing_held(&s);
    }

    /// A window admission never settled (its request gone) counts one request and its
    /// money more than the completed requests account for.
    #[test]
    #[should_panic(
        expected = "the amount tier of 0 ms counts 30, the completed requests account for 20"
    )]
    fn d9_nothing_held_fails_on_a_window_reservation_left_counted() {
        let s = fresh();
        let (k, p) = (key("window"), policy());
        block_on(async {
            let done = admitted(&s, &k, &p, demand(1, 0, 0, 20)).await;
            settle(&s, &k, done, Outcome::Completed(None)).await;
            let _forgotten = admitted(&s, &k, &p, demand(1, 0, 0, 10)).await;
        });
        // What the completed request left: one request, its 20.
        s.counted(
            &k,
            Scope::Key,
            &[(Dimension::Requests, 60_000, 2), (Dimension::Amount, 0, 20)],
        );
        nothing_held(&s);
    }

    /// One unit more than declared is one unit held by nobody.
    #[test]
    #[should_panic(
        expected = "the requests tier of 60000 ms counts 2, the completed requests account for 1"
    )]
    fn d9_nothing_held_fails_on_one_window_unit_more_than_completed() {
        let s = fresh();
        let (k, p) = (key("unit"), policy());
        block_on(async {
            for _ in 0..2 {
                let t = admitted(&s, &k, &p, Demand::tokens(1)).await;
                settle(&s, &k, t, Outcome::Completed(None)).await;
            }
        });
        s.counted(&k, Scope::Key, &[(Dimension::Requests, 60_000, 1)]);
        nothing_held(&s);
    }

    /// A money reservation whose request is gone: open, neither settled nor pending.
    #[test]
    #[should_panic(expected = "is still open: its 10 reserved with nobody to settle it")]
    fn d9_nothing_held_fails_on_a_money_reservation_left_open() {
        let s = fresh();
        let (k, t) = (key("money"), tenant("money"));
        block_on(async {
            seed(&s, &t, 100).await;
            bill_ok(&s, &bill("money:a", Some(&t), &k, 10)).await;
        });
        nothing_held(&s);
    }

    /// A budget still reserving an attempt's money after the attempt was settled (the
    /// ledger is told the reservation was a different attempt's, so it expects none).
    #[test]
    #[should_panic(expected = "reserves 25, its open and pending attempts 0")]
    fn d9_nothing_held_fails_on_a_budget_reservation_left() {
        let s = fresh();
        let (k, t) = (key("budget"), tenant("budget"));
        let x = budget("budget:x", 100, None);
        let req = BillingRequest {
            budgets: budgets(&[&x]),
            ..bill("budget:a", Some(&t), &k, 25)
        };
        block_on(async {
            seed(&s, &t, 100).await;
            bill_ok(&s, &req).await;
        });
        // The ledger believes it refunded; the store still holds it.
        s.touch(|f| {
            f.ledger_mut()
                .settled(&req.attempt_ref(), Some(AttemptState::Refunded))
        });
        let mut f = s.footprint();
        f.ledger_mut().reserved(
            &BillingRequest {
                attempt: attempt("budget:other"),
                ..req.clone()
            },
            &BillingDecision::Admitted,
        );
        f.ledger_mut()
            .settled(&in_tenant(&t, "budget:other"), Some(AttemptState::Refunded));
        block_on(assert_nothing_held(s.store(), &f));
    }

    /// A balance one unit off what the settled costs leave: a debit the books did not
    /// answer as a settlement.
    #[test]
    #[should_panic(expected = "balance Some(92), the settled costs leave 93")]
    fn d10_books_exact_fails_on_a_balance_off_by_one() {
        let s = fresh();
        let (k, t) = (key("off"), tenant("off"));
        block_on(async {
            seed(&s, &t, 100).await;
            bill_ok(&s, &bill("off:a", Some(&t), &k, 10)).await;
            settle_attempt(&s, &t, "off:a", BillingOutcome::Settled(7)).await;
            // Not a settlement: one unit moved that no request was charged.
            BillingStore::credit(s.store(), &t, -1)
                .await
                .expect("credit");
        });
        books_exact(&s);
    }

    /// A key's spend one unit off its settled costs.
    #[test]
    #[should_panic(expected = "spent 7, its settled costs are 6")]
    fn d10_books_exact_fails_on_a_key_spend_off_by_one() {
        let s = fresh();
        let (k, t) = (key("spend"), tenant("spend"));
        block_on(async {
            seed(&s, &t, 100).await;
            bill_ok(&s, &bill("spend:a", Some(&t), &k, 10)).await;
            let r = in_tenant(&t, "spend:a");
            let answer = BillingStore::settle_attempt(s.store(), &r, BillingOutcome::Settled(7))
                .await
                .expect("settle");
            assert_eq!(answer, Some(AttemptState::Settled(7)));
            // Recorded as one less than the store charged.
            s.touch(|f| f.ledger_mut().settled(&r, Some(AttemptState::Settled(6))));
        });
        books_exact(&s);
    }

    /// An attempt answered pending that the listing does not hold.
    #[test]
    #[should_panic(expected = "listed pending with None, the store answered Some(10)")]
    fn d10_books_exact_fails_on_a_pending_attempt_not_listed() {
        let s = fresh();
        let (k, t) = (key("pending"), tenant("pending"));
        block_on(async {
            seed(&s, &t, 100).await;
            bill_ok(&s, &bill("pending:a", Some(&t), &k, 10)).await;
            let r = in_tenant(&t, "pending:a");
            BillingStore::settle_attempt(s.store(), &r, BillingOutcome::Refund)
                .await
                .expect("refund");
            s.touch(|f| f.ledger_mut().settled(&r, Some(AttemptState::Pending(10))));
        });
        books_exact(&s);
    }

    /// The footprint's ledger is plain data: what a fault run fills from its clients.
    #[test]
    fn d10_a_ledger_filled_by_hand_checks_the_same_books() {
        let s = fresh();
        let (k, t) = (key("hand"), tenant("hand"));
        let req = bill("hand:a", Some(&t), &k, 10);
        let mut f = Footprint::new();
        block_on(async {
            BillingStore::set_balance(s.store(), &t, 50)
                .await
                .expect("set_balance");
            f.ledger_mut().balance_set(&t, 50);
            let d = BillingStore::check_and_reserve(s.store(), &req)
                .await
                .expect("reserve");
            f.ledger_mut().reserved(&req, &d);
            let answer = BillingStore::settle_attempt(
                s.store(),
                &req.attempt_ref(),
                BillingOutcome::Settled(4),
            )
            .await
            .expect("settle");
            f.ledger_mut().settled(&req.attempt_ref(), answer);
            assert_nothing_held(s.store(), &f).await;
            assert_books_exact(s.store(), &f).await;
        });
        assert_eq!(f.ledger().balance(&t), Some(46));
    }
}
