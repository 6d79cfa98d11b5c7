//! Unit tests of the block table, on a manual clock.

use super::*;
use crate::policy::Tier;

fn policy(requests: u64, tokens: u64) -> Arc<Policy> {
    Arc::new(Policy {
        requests: vec![
            Tier {
                window_ms: 60_000,
                limit: requests,
            },
            Tier {
                window_ms: 86_400_000,
                limit: requests * 10,
            },
        ],
        tokens: vec![Tier {
            window_ms: 60_000,
            limit: tokens,
        }],
        ..Policy::default()
    })
}

/// The shared store's ticket of a block admitted at `at` in a group anchored at
/// `anchor`, for `tokens` tokens.
fn shared(at: Millis, anchor: Millis, tokens: u64) -> WindowTicket {
    WindowTicket {
        admitted_at: at,
        anchors: [Some(anchor), None, None],
        demand: Demand::tokens(tokens),
        amount: false,
        money: 0,
        rolling: false,
        fallback: false,
        borrowed: 0,
        id: 0,
    }
}

fn window_part<'a>(p: &'a Arc<Policy>, d: &'a Demand) -> WindowPart<'a> {
    WindowPart {
        key: "w",
        policy: p,
        demand: d,
    }
}

/// Borrows a window block for `d` at `now` (the shared store admitted it at
/// `shared_at`, group anchored at `anchor`); returns the borrower's ticket.
fn borrow(
    b: &mut Blocks,
    p: &Arc<Policy>,
    d: &Demand,
    now: Millis,
    anchor: Millis,
) -> WindowTicket {
    let Local::Ask(borrow) = b.decide(None, &[window_part(p, d)], now) else {
        panic!("expected a borrow");
    };
    let ask = borrow.windows[0].expect("a block is asked");
    let (_, tickets, _) = b.install(
        None,
        &[(
            window_part(p, d),
            shared(now, anchor, ask.tokens),
            ask.requests,
        )],
        &borrow,
        now,
    );
    tickets[0]
}

#[test]
fn d2_a_block_is_a_bounded_share_of_the_smallest_limit() {
    let s = BlockSizing::default();
    let d = Demand::tokens(100);
    // 64 × 8 = 512 requests is the smallest limit borrowed from.
    assert_eq!(s.window(&policy(511, u64::MAX), &d), None);
    assert_eq!(
        s.window(&policy(512, 1 << 40), &d),
        Some(BlockAsk {
            requests: 8,
            tokens: 800
        })
    );
    assert_eq!(
        s.window(&policy(1 << 30, 1 << 40), &d).unwrap().requests,
        256
    );
    // Tokens: at most 1/64 of the smallest token tier, never less than the request.
    assert_eq!(
        s.window(&policy(1 << 30, 64 * 800), &d).unwrap().tokens,
        800,
        "room for min_units requests of this size"
    );
    assert_eq!(s.window(&policy(1 << 30, 64 * 800 - 1), &d), None);
    assert_eq!(s.slots(511, 60_000), None);
    assert_eq!(s.slots(512, 60_000), Some(8));
    assert_eq!(s.slots(0, 60_000), Some(256));
}

#[test]
fn d2_limits_with_an_amount_cap_a_rolling_window_or_media_are_never_borrowed() {
    let s = BlockSizing::default();
    let d = Demand::tokens(1);
    let mut p = (*policy(1 << 20, 1 << 40)).clone();
    p.amount_cap = Some(1_000);
    assert_eq!(s.window(&p, &d), None);
    let mut p = (*policy(1 << 20, 1 << 40)).clone();
    p.rolling_rpm = Some(1 << 20);
    assert_eq!(s.window(&p, &d), None);
    let mut p = (*policy(1 << 20, 1 << 40)).clone();
    p.images = vec![Tier {
        window_ms: 60_000,
        limit: 1 << 20,
    }];
    assert_eq!(s.window(&p, &d), None);
    let p = policy(1 << 20, 1 << 40);
    let with_image = Demand {
        images: 1,
        ..Demand::tokens(1)
    };
    assert_eq!(s.window(&p, &with_image), None);
    let mut b = Blocks::new(s);
    assert_eq!(
        b.decide(None, &[window_part(&p, &with_image)], 0),
        Local::Shared
    );
}

#[test]
fn d2_a_block_admits_locally_until_its_requests_are_used_up() {
    let p = policy(1 << 20, 1 << 40);
    let d = Demand::tokens(10);
    let mut b = Blocks::new(BlockSizing::default());
    let first = borrow(&mut b, &p, &d, 1_000, 1_000);
    assert_ne!(first.borrowed, 0);
    let mut tickets = vec![first];
    for _ in 1..256 {
        match b.decide(None, &[window_part(&p, &d)], 1_001) {
            Local::Granted(g) => tickets.push(g.tickets[0]),
            other => panic!("expected a local admission, got {other:?}"),
        }
    }
    // The 257th needs a new block; only one borrow is under way at a time.
    assert!(
        matches!(b.decide(None, &[window_part(&p, &d)], 1_001), Local::Ask(a) if a.windows[0].is_some())
    );
    assert!(
        matches!(b.decide(None, &[window_part(&p, &d)], 1_001), Local::Ask(a) if a.is_single())
    );
    assert_eq!(b.unused_window("w", 1), (0, 2_560 - 2_560));
    // Every request ends: the last one gives the block back with 256 used and the
    // tokens actually used.
    let mut back = None;
    for (i, t) in tickets.iter().enumerate() {
        let used = Usage {
            output_tokens: 3,
            ..Usage::default()
        };
        let SettleLocal::Done(r) = b.settle("w", t, Outcome::Completed(Some(used))) else {
            panic!("settled in the block")
        };
        if i < 255 {
            assert_eq!(r, None);
        } else {
            back = r;
        }
    }
    let Some(GiveBack::Window {
        requests,
        used,
        outcome: Outcome::Completed(Some(u)),
        ..
    }) = back
    else {
        panic!("the block is given back: {back:?}");
    };
    assert_eq!((requests, used, u.total_tokens()), (256, 256, 256 * 3));
}

#[test]
fn w5_refunds_and_unknown_outcomes_settle_into_the_block() {
    let p = policy(1 << 20, 1 << 40);
    let d = Demand::tokens(10);
    let mut b = Blocks::new(BlockSizing::default());
    let t1 = borrow(&mut b, &p, &d, 0, 0);
    let Local::Granted(g) = b.decide(None, &[window_part(&p, &d)], 1) else {
        panic!()
    };
    let t2 = g.tickets[0];
    let Local::Granted(g) = b.decide(None, &[window_part(&p, &d)], 1) else {
        panic!()
    };
    let t3 = g.tickets[0];
    assert_eq!(b.unused_window("w", 1), (253, 2_560 - 30));
    assert_eq!(b.settle("w", &t1, Outcome::Refund), SettleLocal::Done(None));
    assert_eq!(
        b.settle("w", &t2, Outcome::Completed(None)),
        SettleLocal::Done(None)
    );
    assert_eq!(b.unused_window("w", 1), (254, 2_560 - 20));
    // The timer retires it with one request in flight: what it did not use goes
    // back at once, the request in flight counted as used with its estimate.
    let id = t3.borrowed;
    let back = b.retire("w", id, BlockKind::Window);
    let Some(GiveBack::Window {
        requests,
        used,
        outcome,
        handed,
        ..
    }) = back
    else {
        panic!("{back:?}")
    };
    assert_eq!((requests, used, handed), (256, 2, 1));
    let Outcome::Completed(Some(u)) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(u.total_tokens(), 20, "t2's estimate and t3's");
    assert_eq!(b.unused_window("w", 1), (0, 0));
    // The request in flight then settles in the shared store, under the record its
    // block left for it.
    let done = Outcome::Completed(Some(Usage {
        input_tokens: 50,
        ..Usage::default()
    }));
    assert!(
        matches!(
            b.settle("w", &t3, done),
            SettleLocal::Handed {
                requests: 256,
                index: 0,
                ..
            }
        ),
        "settled under its handed record"
    );
    assert!(b.is_empty());
}

/// D9: a block handed over with requests in flight leaves one record per request in
/// the shared store, and each of them settles under its own — whichever order they end
/// in — so a settlement sent again after a failure counts once.
#[test]
fn d9_requests_of_a_handed_over_block_settle_under_records_of_their_own() {
    let p = policy(1 << 20, 1 << 40);
    let d = Demand::tokens(10);
    let mut b = Blocks::new(BlockSizing::default());
    let t1 = borrow(&mut b, &p, &d, 0, 0);
    let mut tickets = vec![t1];
    for _ in 0..2 {
        let Local::Granted(g) = b.decide(None, &[window_part(&p, &d)], 1) else {
            panic!()
        };
        tickets.push(g.tickets[0]);
    }
    let back = b.retire("w", t1.borrowed, BlockKind::Window);
    let Some(GiveBack::Window { ticket, handed, .. }) = back else {
        panic!("{back:?}")
    };
    assert_eq!(handed, 3, "three requests in flight at the hand-over");
    let mut indices = Vec::new();
    for t in [tickets[2], tickets[0], tickets[1]] {
        match b.settle("w", &t, Outcome::Refund) {
            SettleLocal::Handed {
                block,
                requests,
                index,
            } => {
                assert_eq!((block, requests), (ticket.id, 256));
                indices.push(index);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(indices, [0, 1, 2], "each under a record of its own");
    assert!(b.is_empty());
    // A block given back whole, nothing in flight, hands over nothing.
    let t = borrow(&mut b, &p, &d, 0, 0);
    assert_eq!(b.settle("w", &t, Outcome::Refund), SettleLocal::Done(None));
    let back = b.retire("w", t.borrowed, BlockKind::Window);
    assert!(
        matches!(back, Some(GiveBack::Window { handed: 0, .. })),
        "{back:?}"
    );
}

#[test]
fn w5_a_block_never_admits_once_a_window_it_counts_in_may_have_rolled() {
    let p = policy(1 << 20, 1 << 40);
    let d = Demand::tokens(1);
    let mut b = Blocks::new(BlockSizing::default());
    // The group was anchored at 0; the shared store admitted the block at 59_800 ms:
    // 200 ms are left of the 1-minute windows.
    let Local::Ask(borrow) = b.decide(None, &[window_part(&p, &d)], 100) else {
        panic!()
    };
    let ask = borrow.windows[0].unwrap();
    let (_, _, retire) = b.install(
        None,
        &[(
            window_part(&p, &d),
            shared(59_800, 0, ask.tokens),
            ask.requests,
        )],
        &borrow,
        100,
    );
    assert_eq!(retire[0].at, 100 + 200 - WINDOW_MARGIN_MS);
    assert!(matches!(
        b.decide(None, &[window_part(&p, &d)], 294),
        Local::Granted(_)
    ));
    assert!(matches!(
        b.decide(None, &[window_part(&p, &d)], 295),
        Local::Ask(_)
    ));
}

#[test]
fn d2_a_policy_change_retires_the_blocks_of_the_old_one() {
    let p = policy(1 << 20, 1 << 40);
    let d = Demand::tokens(1);
    let mut b = Blocks::new(BlockSizing::default());
    borrow(&mut b, &p, &d, 0, 0);
    let q = policy(1 << 21, 1 << 40);
    assert!(
        matches!(b.decide(None, &[window_part(&q, &d)], 1), Local::Ask(a) if a.windows[0].is_some())
    );
    // The same limits in a new Arc are the same policy.
    let mut b = Blocks::new(BlockSizing::default());
    borrow(&mut b, &p, &d, 0, 0);
    let same = Arc::new((*p).clone());
    assert!(matches!(
        b.decide(None, &[window_part(&same, &d)], 1),
        Local::Granted(_)
    ));
}

fn slot(limit: u32) -> SlotPart<'static> {
    SlotPart {
        key: "s",
        limit,
        ttl: 60_000,
    }
}

#[test]
fn c1_borrowed_leases_are_freed_once_and_the_block_given_back_when_retired_and_empty() {
    let mut b = Blocks::new(BlockSizing::default());
    let Local::Ask(borrow) = b.decide(Some(slot(1_000)), &[], 0) else {
        panic!()
    };
    assert_eq!(borrow.slots, 15);
    let (lease, _, retire) = b.install(Some((slot(1_000), 15, 77)), &[], &borrow, 0);
    let first = lease.unwrap();
    assert_eq!(borrowed_lease(first).map(|(_, i)| i), Some(0));
    // A block hands leases out for a quarter of the TTL at most (and max_age).
    assert_eq!(retire[0].at, 1_000);
    let mut leases = vec![first];
    for _ in 1..15 {
        let Local::Granted(g) = b.decide(Some(slot(1_000)), &[], 10) else {
            panic!()
        };
        leases.push(g.lease.unwrap());
    }
    assert_eq!(b.unused_slots("s"), 0);
    assert!(matches!(
        b.decide(Some(slot(1_000)), &[], 10),
        Local::Ask(_)
    ));
    assert_eq!(b.release("s", leases[3]), ReleaseLocal::Done(None));
    assert_eq!(
        b.release("s", leases[3]),
        ReleaseLocal::Done(None),
        "a second release frees nothing"
    );
    assert_eq!(b.unused_slots("s"), 1);
    // Released leases are handed out again.
    let Local::Granted(g) = b.decide(Some(slot(1_000)), &[], 11) else {
        panic!()
    };
    assert_eq!(g.lease, Some(leases[3]));
    // Every lease released but one: the block goes back whole when the last one
    // ends before its timer...
    for l in &leases[..14] {
        assert_eq!(b.release("s", *l), ReleaseLocal::Done(None));
    }
    assert_eq!(
        b.release("s", leases[14]),
        ReleaseLocal::Done(None),
        "still live: it hands out leases until its timer"
    );
    let id = borrowed_lease(first).unwrap().0;
    assert_eq!(
        b.retire("s", id, BlockKind::Slots),
        Some(GiveBack::Slots {
            key: "s".into(),
            shared: 77,
            size: 15
        })
    );
    assert!(b.is_empty());
}

#[test]
fn c1_a_retired_slot_block_gives_back_its_free_leases_at_once() {
    let mut b = Blocks::new(BlockSizing::default());
    let Local::Ask(borrow) = b.decide(Some(slot(1_000)), &[], 0) else {
        panic!()
    };
    let (lease, _, _) = b.install(Some((slot(1_000), 15, 77)), &[], &borrow, 0);
    let Local::Granted(g) = b.decide(Some(slot(1_000)), &[], 1) else {
        panic!()
    };
    let (first, second) = (lease.unwrap(), g.lease.unwrap());
    assert_eq!(b.release("s", first), ReleaseLocal::Done(None));
    // Retired with one lease held: the 14 others go back now, not when it ends.
    let id = borrowed_lease(first).unwrap().0;
    assert_eq!(
        b.retire("s", id, BlockKind::Slots),
        Some(GiveBack::SlotMembers {
            key: "s".into(),
            shared: 77,
            indices: (0..15).filter(|&i| i != 1).collect()
        })
    );
    assert_eq!(b.unused_slots("s"), 0);
    // The held one is a lease of its own in the shared store now.
    assert_eq!(
        b.renew("s", second, 60_000, 2),
        RenewLocal::Member {
            shared: 77,
            index: 1
        }
    );
    assert_eq!(
        b.release("s", second),
        ReleaseLocal::Member {
            shared: 77,
            index: 1
        }
    );
    assert_eq!(b.release("s", second), ReleaseLocal::Done(None));
    assert!(b.is_empty());
}

#[test]
fn c4_renewing_a_borrowed_lease_renews_its_block_once() {
    let mut b = Blocks::new(BlockSizing::default());
    let Local::Ask(borrow) = b.decide(Some(slot(0)), &[], 0) else {
        panic!()
    };
    let (lease, _, _) = b.install(Some((slot(0), 256, 5)), &[], &borrow, 0);
    let lease = lease.unwrap();
    // Renewed as a whole once a tenth of the TTL has passed since it last was.
    assert_eq!(b.renew("s", lease, 60_000, 5_000), RenewLocal::Alive);
    let RenewLocal::Renew {
        block,
        shared,
        size,
    } = b.renew("s", lease, 60_000, 7_000)
    else {
        panic!()
    };
    assert_eq!((shared, size), (5, 256));
    // One renewal in flight: the others need none.
    assert_eq!(b.renew("s", lease, 60_000, 7_001), RenewLocal::Alive);
    b.renewed("s", block, 7_000, 60_000, Some(true));
    assert_eq!(b.renew("s", lease, 60_000, 10_000), RenewLocal::Alive);
    // The shared leases expired meanwhile (a stall): every lease of it is gone.
    let RenewLocal::Renew { block, .. } = b.renew("s", lease, 60_000, 20_000) else {
        panic!()
    };
    b.renewed("s", block, 20_000, 60_000, Some(false));
    assert_eq!(b.renew("s", lease, 60_000, 20_001), RenewLocal::Gone);
    assert_eq!(b.renew("s", 12345, 60_000, 1), RenewLocal::Gone);
}

#[test]
fn d2_a_joint_decision_is_local_only_when_every_part_has_room() {
    let p = policy(1 << 20, 1 << 40);
    let d = Demand::tokens(1);
    let mut b = Blocks::new(BlockSizing::default());
    let parts = [window_part(&p, &d)];
    let Local::Ask(borrow) = b.decide(Some(slot(0)), &parts, 0) else {
        panic!()
    };
    assert_eq!(borrow.slots, 256);
    let ask = borrow.windows[0].unwrap();
    // The shared store granted the window block but only a single lease.
    let (lease, tickets, _) = b.install(
        Some((slot(0), 1, 9)),
        &[(parts[0], shared(0, 0, ask.tokens), ask.requests)],
        &borrow,
        0,
    );
    assert_eq!(lease, Some(9));
    assert_ne!(tickets[0].borrowed, 0);
    // No slot block: the next decision borrows one and takes nothing locally.
    let before = b.unused_window("w", 1);
    assert!(
        matches!(b.decide(Some(slot(0)), &parts, 1), Local::Ask(a) if a.slots == 256 && a.windows[0].is_none())
    );
    assert_eq!(b.unused_window("w", 1), before);
    b.abandon(
        Some("s"),
        &["w"],
        &Borrow {
            slots: 256,
            windows: vec![None],
        },
    );
    assert!(matches!(b.decide(Some(slot(0)), &parts, 1), Local::Ask(a) if a.slots == 256));
}

fn bill(attempt: &str, money: Money, budget: Money) -> BillingRequest {
    BillingRequest {
        attempt: attempt.into(),
        tenant: Some("acme".into()),
        key: "k".into(),
        spend_cap: None,
        budgets: Arc::from(vec![crate::billing::Budget::new("month", budget, None)]),
        money,
        bill_balance: true,
        lifetime_ms: 60_000,
        tenant_expected: true,
    }
}

fn money_blocks() -> Blocks {
    Blocks::new(BlockSizing::default().with_money(true))
}

#[test]
fn b3_billing_blocks_are_off_unless_asked_and_a_bounded_share_of_each_budget() {
    let r = bill("a", 100, 1 << 40);
    assert_eq!(BlockSizing::default().money(&r), None);
    let s = BlockSizing::default().with_money(true);
    assert_eq!(
        s.money(&r),
        Some(MoneyAsk {
            requests: 256,
            money: 25_600,
            headroom: 25_600 * 64
        })
    );
    // At most 1/64 of the budget; none when that is less than one request's bound.
    assert_eq!(s.money(&bill("a", 100, 64_000)).unwrap().money, 1_000);
    assert_eq!(s.money(&bill("a", 100, 6_399)), None);
    // Never beyond what a store keeps exactly.
    assert_eq!(s.money(&bill("a", 1 << 40, i64::MAX)), None);
}

#[test]
fn b4_requests_from_a_billing_block_settle_once_and_the_block_at_their_costs() {
    let mut b = money_blocks();
    let first = bill("a0", 100, 1 << 40);
    let key = money_key(&first);
    let MoneyLocal::Borrow(ask) = b.decide_money(&key, &first, 0) else {
        panic!("a block is asked")
    };
    let block = AttemptRef {
        attempt: "blk-1".into(),
        books: first.books(),
    };
    let retire = b.install_money(&key, &first, block.clone(), ask, 0);
    assert_eq!((retire.kind, retire.at), (BlockKind::Money, 1_000));
    // Admitted again under the same attempt: nothing counted twice.
    assert_eq!(b.decide_money(&key, &first, 1), MoneyLocal::Admitted);
    let reqs: Vec<_> = (1..4)
        .map(|i| bill(&format!("a{i}"), 100, 1 << 40))
        .collect();
    for r in &reqs {
        assert_eq!(b.decide_money(&key, r, 1), MoneyLocal::Admitted);
    }
    let mut view = crate::billing::AccountView {
        balance: Some(10_000),
        budgets: vec![crate::billing::BudgetView {
            id: "month".into(),
            limit: 1 << 40,
            spent: 0,
            reserved: 25_600,
            resets_at: None,
        }],
        ..Default::default()
    };
    assert_eq!(
        b.settle_money(&first.attempt_ref(), BillingOutcome::Settled(70)),
        Some(MoneySettled::Done(Some(AttemptState::Settled(70)), None))
    );
    assert_eq!(
        b.settle_money(&first.attempt_ref(), BillingOutcome::Settled(70)),
        None
    );
    assert_eq!(
        b.settle_money(&reqs[0].attempt_ref(), BillingOutcome::Refund),
        Some(MoneySettled::Done(Some(AttemptState::Refunded), None))
    );
    b.correct_account(Some("acme"), &"k".into(), &mut view);
    // 70 charged here, not yet in the shared books; two requests of 100 in flight.
    assert_eq!(view.balance, Some(10_000 - 70));
    assert_eq!(view.key_spent, 70);
    assert_eq!((view.budgets[0].spent, view.budgets[0].reserved), (70, 200));
    // Another key of the same tenant: its balance is the tenant's, its spend its own.
    let mut other = crate::billing::AccountView {
        balance: Some(10_000),
        ..Default::default()
    };
    b.correct_account(Some("acme"), &"other".into(), &mut other);
    assert_eq!(other.balance, Some(10_000 - 70));
    assert_eq!(
        other.key_spent, 0,
        "another key's spend is not this block's"
    );
    // An unknown result goes to the shared store as its own pending attempt.
    let Some(MoneySettled::ToPending(r, None)) =
        b.settle_money(&reqs[1].attempt_ref(), BillingOutcome::Pending)
    else {
        panic!()
    };
    assert_eq!(r.attempt, reqs[1].attempt);
    // Retired by its timer with one request in flight: what the ended ones cost is
    // charged as a part now (cumulative), nothing new later; the block is settled when
    // its last request ends.
    assert_eq!(
        b.retire_money(&key, 1),
        MoneyTick::Part(MoneyBack {
            attempt: block.clone(),
            cost: 70
        })
    );
    assert_eq!(b.retire_money(&key, 1), MoneyTick::Wait);
    // The shared books now hold the part: 70 charged, released from the block's money.
    let mut shared = crate::billing::AccountView {
        balance: Some(10_000 - 70),
        budgets: vec![crate::billing::BudgetView {
            id: "month".into(),
            limit: 1 << 40,
            spent: 70,
            reserved: 25_600 - 70,
            resets_at: None,
        }],
        ..Default::default()
    };
    b.correct_account(Some("acme"), &"k".into(), &mut shared);
    assert_eq!(
        shared.balance,
        Some(10_000 - 70),
        "the part is not counted twice"
    );
    assert_eq!(
        (shared.budgets[0].spent, shared.budgets[0].reserved),
        (70, 100),
        "the one request in flight"
    );
    assert_eq!(
        b.settle_money(&reqs[2].attempt_ref(), BillingOutcome::Settled(30)),
        Some(MoneySettled::Done(
            Some(AttemptState::Settled(30)),
            Some(MoneyBack {
                attempt: block,
                cost: 100
            })
        ))
    );
    assert!(b.is_empty());
}

#[test]
fn b3_a_billing_block_admits_up_to_its_money_then_borrows_again() {
    let mut b = money_blocks();
    // 1/64 of 64,000: 1,000 of money, ten requests of 100.
    let first = bill("a0", 100, 64_000);
    let key = money_key(&first);
    let MoneyLocal::Borrow(ask) = b.decide_money(&key, &first, 0) else {
        panic!()
    };
    let block = AttemptRef {
        attempt: "blk".into(),
        books: first.books(),
    };
    b.install_money(&key, &first, block, ask, 0);
    for i in 1..10 {
        assert_eq!(
            b.decide_money(&key, &bill(&format!("a{i}"), 100, 64_000), 1),
            MoneyLocal::Admitted
        );
    }
    assert!(matches!(
        b.decide_money(&key, &bill("a10", 100, 64_000), 1),
        MoneyLocal::Borrow(_)
    ));
    // One borrow at a time: the next one waits for it (or reserves alone).
    assert_eq!(
        b.decide_money(&key, &bill("a11", 100, 64_000), 1),
        MoneyLocal::Wait
    );
    // A request of other books, key or budgets is another block.
    let other = BillingRequest {
        key: "k2".into(),
        ..bill("b0", 100, 64_000)
    };
    assert_ne!(money_key(&other), key);
}
