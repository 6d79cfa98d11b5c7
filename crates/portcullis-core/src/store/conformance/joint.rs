//! Decisions over several subjects or several kinds of state at once (U1, D2).
use super::helpers::*;

/// U1, W4 across subjects: [`WindowStore::admit_all`] counts a request on every item
/// (one channel's credential, model and vendor windows) or on none — a refusal by the
/// third item leaves the first two exactly as they were, a state that existed before
/// included — and [`WindowStore::settle_all`] settles each item as
/// [`WindowStore::settle`] would.
pub async fn u1_admit_all_is_all_or_nothing_across_subjects<H: Harness>(h: &H) -> Case<H::Store> {
    use crate::store::{JointAdmission, JointItem, JointSettle};
    let s = case(h).await;
    let (a, b, c) = (key("u1:credential"), key("u1:model"), key("u1:vendor"));
    let rpm = Arc::new(Policy::default().with_requests(secs(60, 3)));
    let tpm = Arc::new(Policy::default().with_tokens(secs(60, 100)));
    let tight = Arc::new(Policy::default().with_tokens(secs(60, 50)));
    let item = |k: &SubjectKey, p: &Arc<Policy>, tokens: u64| JointItem {
        key: k.clone(),
        scope: Scope::Key,
        policy: p.clone(),
        demand: Demand::tokens(tokens),
    };
    // The credential's window already holds one request: it must be kept as it is.
    let earlier = admitted(&s, &a, &rpm, Demand::tokens(0)).await;
    let before = (
        view(&s, &a, Scope::Key, &rpm).await,
        view(&s, &b, Scope::Key, &tpm).await,
        view(&s, &c, Scope::Key, &tight).await,
    );
    let items = vec![item(&a, &rpm, 0), item(&b, &tpm, 60), item(&c, &tight, 60)];
    match s.admit_all(&items).await.expect("admit_all") {
        JointAdmission::Exceeded { index, exceeded } => {
            assert_eq!(index, 2, "the vendor window is the one without room");
            assert_eq!(limits_of(&exceeded), [(Dimension::Tokens, 60_000)]);
        }
        other => panic!("60 tokens do not fit a 50-token window: {other:?}"),
    }
    let after = (
        view(&s, &a, Scope::Key, &rpm).await,
        view(&s, &b, Scope::Key, &tpm).await,
        view(&s, &c, Scope::Key, &tight).await,
    );
    assert_eq!(after, before, "a refusal changed a window");
    // The same with a rolling limit on the item admitted before the refusal: its
    // rolling log is put back too (the next starts still fit exactly up to the limit).
    let (r, full) = (key("u1:rolling"), key("u1:full"));
    let rolling = Arc::new(Policy::default().with_rolling_rpm(2));
    let none = Arc::new(Policy::default().with_tokens(secs(60, 1)));
    s.touch(|f| {
        f.window(&full, Scope::Key, &none);
    });
    let rolling_item = |p: &Arc<Policy>, k: &SubjectKey, tokens| JointItem {
        key: k.clone(),
        scope: Scope::Key,
        policy: p.clone(),
        demand: Demand::tokens(tokens),
    };
    admitted(&s, &r, &rolling, Demand::tokens(0)).await;
    let before = view(&s, &r, Scope::Key, &rolling).await;
    for _ in 0..3 {
        let items = vec![rolling_item(&rolling, &r, 0), rolling_item(&none, &full, 5)];
        assert!(
            matches!(
                s.admit_all(&items).await.expect("admit_all"),
                JointAdmission::Exceeded { index: 1, .. }
            ),
            "5 tokens do not fit a 1-token window"
        );
    }
    assert_eq!(
        view(&s, &r, Scope::Key, &rolling).await,
        before,
        "a refusal changed a rolling window"
    );
    admitted(&s, &r, &rolling, Demand::tokens(0)).await;
    assert!(
        !matches!(
            s.admit(&r, Scope::Key, &rolling, &Demand::tokens(0))
                .await
                .expect("admit"),
            Admission::Admitted(_)
        ),
        "the rolling limit of 2 holds after the put-back starts"
    );
    // With room everywhere every item is counted, one ticket each, in order.
    let items = vec![item(&a, &rpm, 0), item(&b, &tpm, 60), item(&c, &tight, 40)];
    let tickets = match s.admit_all(&items).await.expect("admit_all") {
        JointAdmission::Admitted(t) => t,
        other => panic!("every window has room: {other:?}"),
    };
    assert_eq!(tickets.len(), 3);
    assert_eq!(
        used(
            &view(&s, &a, Scope::Key, &rpm).await,
            Dimension::Requests,
            60_000
        ),
        2
    );
    assert_eq!(
        used(
            &view(&s, &b, Scope::Key, &tpm).await,
            Dimension::Tokens,
            60_000
        ),
        60
    );
    assert_eq!(
        used(
            &view(&s, &c, Scope::Key, &tight).await,
            Dimension::Tokens,
            60_000
        ),
        40
    );
    // Settled together: the model window with the actual usage, the others refunded.
    let outcomes = [
        Outcome::Refund,
        Outcome::Completed(Some(crate::demand::Usage {
            input_tokens: 25,
            ..Default::default()
        })),
        Outcome::Refund,
    ];
    let settles = items
        .iter()
        .zip(tickets)
        .zip(outcomes)
        .map(|((it, ticket), outcome)| JointSettle {
            key: it.key.clone(),
            scope: it.scope,
            ticket,
            outcome,
        })
        .collect();
    s.settle_all(settles).await.expect("settle_all");
    assert_eq!(
        used(
            &view(&s, &a, Scope::Key, &rpm).await,
            Dimension::Requests,
            60_000
        ),
        1
    );
    assert_eq!(
        used(
            &view(&s, &b, Scope::Key, &tpm).await,
            Dimension::Tokens,
            60_000
        ),
        25
    );
    assert_eq!(
        used(
            &view(&s, &c, Scope::Key, &tight).await,
            Dimension::Tokens,
            60_000
        ),
        0
    );
    settle(&s, &a, earlier, Outcome::Refund).await;
    // The model window's completed request, and the two rolling starts let go as
    // completed; everything else was refunded.
    s.counted(&b, Scope::Key, &[(Dimension::Tokens, 60_000, 25)]);
    s.counted(
        &r,
        Scope::Key,
        &[(Dimension::RollingRequests, ROLLING_WINDOW_MS, 2)],
    );
    s
}

/// D2, C1, W4: [`JointStore::acquire_and_admit`] takes a slot only if the windows
/// admit and counts the windows only if a slot is free — a refusal of either leaves both
/// as they were — and the lease and ticket it hands out are the store's own (released
/// and settled as any other).
///
/// [`JointStore::acquire_and_admit`]: crate::store::JointStore::acquire_and_admit
pub async fn d2_slot_and_window_decided_together<H: Harness>(h: &H) -> Case<H::Store> {
    use crate::store::{JointDecision, JointStore, SlotAsk, WindowAsk};
    let s = case(h).await;
    let k = key("d2-joint");
    let p = Arc::new(Policy::default().with_requests(secs(60, 2)));
    let d = Demand::default();
    let ask = SlotAsk {
        key: k.clone(),
        limit: 2,
        ttl: LONG_TTL,
    };
    let w = || {
        Some(WindowAsk {
            scope: Scope::Key,
            policy: &p,
            demand: &d,
        })
    };
    s.touch(|f| {
        f.slot(&k).window(&k, Scope::Key, &p);
    });
    let joint = |window| s.acquire_and_admit(&ask, window);
    let JointDecision::Admitted {
        lease: first,
        ticket: Some(t1),
    } = joint(w()).await.expect("joint")
    else {
        panic!("a free slot and room in the window")
    };
    assert_eq!(in_flight(&s, &k).await, 1);
    // The slot alone: a slot-only call counts no window.
    let JointDecision::Admitted {
        lease: second,
        ticket: None,
    } = joint(None).await.expect("slot only")
    else {
        panic!("a second free slot")
    };
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        1
    );
    // Both slots taken: refused as full, the window untouched.
    assert_eq!(
        joint(w()).await.expect("joint"),
        JointDecision::SlotFull { in_flight: 2 }
    );
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        1
    );
    release(&s, &k, second).await;
    // A free slot again, and the window's second request.
    let JointDecision::Admitted {
        lease: third,
        ticket: Some(t3),
    } = joint(w()).await.expect("joint")
    else {
        panic!("the released slot is free again")
    };
    release(&s, &k, third).await;
    // The window is full: refused as exceeded, and no slot is taken by the refusal.
    match joint(w()).await.expect("joint") {
        JointDecision::Exceeded(e) => {
            assert_eq!(limits_of(&e), [(Dimension::Requests, 60_000)]);
        }
        other => panic!("the 60 s window holds 2 requests: {other:?}"),
    }
    assert_eq!(in_flight(&s, &k).await, 1, "the refusal took no slot");
    // Lease and tickets are ordinary: released and settled as any other.
    release(&s, &k, first).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    settle(&s, &k, t1, Outcome::Refund).await;
    settle(&s, &k, t3, Outcome::Refund).await;
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        0
    );
    s
}

/// U1, Q1, D2: [`ChannelStore::admit_all_and_acquire`] admits a channel's windows all
/// or nothing and, when they admit, takes a capacity lease if the channel has one free
/// — a full channel leaves the windows admitted and no lease; refused windows take no
/// lease — and the lease is an ordinary capacity lease.
///
/// [`ChannelStore::admit_all_and_acquire`]: crate::store::ChannelStore::admit_all_and_acquire
pub async fn u1_windows_and_capacity_lease_in_one_step<H: Harness>(h: &H) -> Case<H::Store> {
    use crate::capacity::CapacityStore;
    use crate::store::{CapacityTake, ChannelStore, JointAdmission, JointItem};
    let s = case(h).await;
    let (k, ch) = (key("u1-channel:credential"), "conformance-u1-channel");
    let p = Arc::new(Policy::default().with_requests(secs(60, 3)));
    s.touch(|f| {
        f.channel(ch).window(&k, Scope::Key, &p);
    });
    let items = |tokens: u64| {
        vec![JointItem {
            key: k.clone(),
            scope: Scope::Key,
            policy: p.clone(),
            demand: Demand::tokens(tokens),
        }]
    };
    let tickets = |a: JointAdmission| match a {
        JointAdmission::Admitted(t) => t,
        other => panic!("the window has room: {other:?}"),
    };
    // Room in the window and on the channel: both.
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    let first = tickets(a);
    let CapacityTake::Taken(lease) = take else {
        panic!("a free lease on the channel: {take:?}")
    };
    assert_eq!(CapacityStore::in_flight(s.store(), ch).await.unwrap(), 1);
    // The channel full: the window still admits, no lease.
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    let second = tickets(a);
    assert_eq!(take, CapacityTake::Full);
    assert_eq!(CapacityStore::in_flight(s.store(), ch).await.unwrap(), 1);
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        2
    );
    // The lease is ordinary: released, the channel has room again.
    CapacityStore::release(s.store(), ch, lease).await.unwrap();
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    let third = tickets(a);
    let CapacityTake::Taken(lease) = take else {
        panic!("the released lease is free again: {take:?}")
    };
    // The window full: refused, and no lease taken.
    CapacityStore::release(s.store(), ch, lease).await.unwrap();
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    assert!(
        matches!(a, JointAdmission::Exceeded { index: 0, .. }),
        "{a:?}"
    );
    assert_eq!(take, CapacityTake::NotAsked);
    assert_eq!(
        CapacityStore::in_flight(s.store(), ch).await.unwrap(),
        0,
        "a refusal took no lease"
    );
    for t in first.into_iter().chain(second).chain(third) {
        settle(&s, &k, t, Outcome::Refund).await;
    }
    s
}

/// Windows are counted per subject key and per policy scope (subscription and key
/// counters are kept apart, W8).
pub async fn windows_are_per_key_and_scope<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (k1, k2) = (key("windows:1"), key("windows:2"));
    let p = Arc::new(Policy::default().with_requests(secs(4, 1)));
    admitted(&s, &k1, &p, Demand::tokens(1)).await;
    rejected(&s, &k1, &p, Demand::tokens(1)).await;
    admitted(&s, &k2, &p, Demand::tokens(1)).await;
    match admit(&s, &k1, Scope::Subscription, &p, Demand::tokens(1)).await {
        Admission::Admitted(_) => {}
        Admission::Exceeded(e) => panic!("the subscription scope shares the key scope: {e:?}"),
    }
    match admit(&s, &k1, Scope::Subscription, &p, Demand::tokens(1)).await {
        Admission::Exceeded(e) => assert_eq!(limits_of(&e), [(Dimension::Requests, 4_000)]),
        Admission::Admitted(t) => panic!("subscription scope over its limit: {t:?}"),
    }
    for (k, scope) in [
        (&k1, Scope::Key),
        (&k1, Scope::Subscription),
        (&k2, Scope::Key),
    ] {
        let v = view(&s, k, scope, &p).await;
        assert_eq!(used(&v, Dimension::Requests, 4_000), 1, "{k:?} {scope:?}");
    }
    let v = view(&s, &k2, Scope::Subscription, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 0);
    // One request let go as completed in each window.
    for (k, scope) in [
        (&k1, Scope::Key),
        (&k1, Scope::Subscription),
        (&k2, Scope::Key),
    ] {
        s.counted(k, scope, &[(Dimension::Requests, 4_000, 1)]);
    }
    s
}
