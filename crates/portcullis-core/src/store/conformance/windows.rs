//! Anchored windows (W1–W10) and refunds (L5).
use super::helpers::*;

/// W1: every tier of a dimension is enforced, each on its own window.
pub async fn w1_every_tier_enforced<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("w1");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(2, 2))
            .with_requests(secs(10, 3)),
    );
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 2_000)]);
    assert_eq!(e.limits[0].used, 2);
    assert_eq!(e.limits[0].tier.limit, 2);
    assert_retry::<H>(e.retry_after_ms(), 2_000, "W1 2 s tier");

    h.advance(ms(2_500)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 2_000), 1);
    assert_eq!(used(&v, Dimension::Requests, 10_000), 3);
    // The 2 s tier has room; the 10 s tier does not.
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 10_000)]);
    assert_eq!(e.limits[0].used, 3);
    assert_retry::<H>(e.retry_after_ms(), 7_500, "W1 10 s tier");
    // The three admitted requests were let go as completed: they stay counted.
    s.counted(
        &k,
        Scope::Key,
        &[
            (Dimension::Requests, 2_000, 1),
            (Dimension::Requests, 10_000, 3),
        ],
    );
    s
}

/// W2: a window starts at the first use and lasts the tier's length; afterwards it
/// moves on by whole window lengths from that anchor (not from calendar boundaries and
/// not from the later use).
pub async fn w2_anchor_at_first_use_and_rolls_by_whole_windows<H: Harness>(
    h: &H,
) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("w2:anchor");
    // The 20 s tier keeps the group in use, so the 4 s windows roll on from the anchor.
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 2))
            .with_requests(secs(20, 10)),
    );
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(
        line(&v, Dimension::Requests, 4_000).resets_at,
        None,
        "no use, no window yet"
    );
    assert_eq!(used(&v, Dimension::Requests, 4_000), 0);

    let first_use = h.now();
    let t = admitted(&s, &k, &p, Demand::tokens(1)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    let r = resets_at(&v, Dimension::Requests, 4_000);
    let anchor = r - 4_000;
    assert_eq!(t.anchors[AnchorGroup::RequestsTokens.index()], Some(anchor));
    assert_eq!(resets_at(&v, Dimension::Requests, 20_000), anchor + 20_000);
    if let Some(now) = first_use {
        assert_eq!(anchor, now, "the anchor is the time of the first use");
    }

    h.advance(ms(1_000)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 4_000)]);
    assert_retry::<H>(e.retry_after_ms(), 3_000, "W2 at 1 s");
    h.advance(ms(2_500)).await;
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_retry::<H>(e.retry_after_ms(), 500, "W2 at 3.5 s");
    if exact::<H>() {
        h.advance(ms(499)).await;
        let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
        assert_eq!(e.retry_after_ms(), Some(1), "1 ms before the window ends");
        h.advance(ms(1)).await; // exactly anchor + 4 s: the next window
    } else {
        h.advance(ms(1_000)).await; // 4.5 s
    }
    let t = admitted(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(t.anchors[AnchorGroup::RequestsTokens.index()], Some(anchor));
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(
        used(&v, Dimension::Requests, 4_000),
        1,
        "the 4 s count reset"
    );
    assert_eq!(used(&v, Dimension::Requests, 20_000), 3);
    assert_eq!(resets_at(&v, Dimension::Requests, 4_000), anchor + 8_000);
    assert_eq!(resets_at(&v, Dimension::Requests, 20_000), anchor + 20_000);

    // Skip the window [8 s, 12 s) entirely: the next one is still aligned at the anchor.
    h.advance(ms(8_000)).await; // 12.5 s (12 s with an exact clock)
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 1);
    assert_eq!(used(&v, Dimension::Requests, 20_000), 4);
    assert_eq!(resets_at(&v, Dimension::Requests, 4_000), anchor + 16_000);
    assert_eq!(resets_at(&v, Dimension::Requests, 20_000), anchor + 20_000);
    // Every admitted request was let go as completed.
    s.counted(
        &k,
        Scope::Key,
        &[
            (Dimension::Requests, 4_000, 1),
            (Dimension::Requests, 20_000, 4),
        ],
    );
    s
}

/// W2: once every tier's current window is empty, the next use is a new first use and
/// re-anchors; while any tier still counts something, it does not.
pub async fn w2_reanchor_after_idle<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (a, b) = (key("w2:reanchor:single"), key("w2:reanchor:two-tiers"));
    let pa = Arc::new(Policy::default().with_requests(secs(2, 1)));
    let pb = Arc::new(
        Policy::default()
            .with_requests(secs(2, 1))
            .with_requests(secs(10, 5)),
    );
    admitted(&s, &a, &pa, Demand::tokens(1)).await;
    admitted(&s, &b, &pb, Demand::tokens(1)).await;
    let ra = resets_at(
        &view(&s, &a, Scope::Key, &pa).await,
        Dimension::Requests,
        2_000,
    );
    let rb = resets_at(
        &view(&s, &b, Scope::Key, &pb).await,
        Dimension::Requests,
        2_000,
    );

    h.advance(ms(7_300)).await;
    // a: idle since its window ended: re-anchored at 7.3 s, not aligned to 6 s.
    let va = view(&s, &a, Scope::Key, &pa).await;
    assert_eq!(line(&va, Dimension::Requests, 2_000).resets_at, None);
    admitted(&s, &a, &pa, Demand::tokens(1)).await;
    let ra2 = resets_at(
        &view(&s, &a, Scope::Key, &pa).await,
        Dimension::Requests,
        2_000,
    );
    assert_near::<H>(ra2 - ra, 7_300, "W2 re-anchor after idle");
    let e = rejected(&s, &a, &pa, Demand::tokens(1)).await;
    assert_retry::<H>(
        e.retry_after_ms(),
        2_000,
        "a whole window after the new anchor",
    );

    // b: its 10 s tier still counts the first request, so no re-anchor: the 2 s window
    // is [6 s, 8 s) of the first anchor.
    admitted(&s, &b, &pb, Demand::tokens(1)).await;
    let vb = view(&s, &b, Scope::Key, &pb).await;
    assert_eq!(resets_at(&vb, Dimension::Requests, 2_000), rb + 6_000);
    assert_eq!(resets_at(&vb, Dimension::Requests, 10_000), rb + 8_000);
    assert_eq!(used(&vb, Dimension::Requests, 10_000), 2);
    let e = rejected(&s, &b, &pb, Demand::tokens(1)).await;
    assert_retry::<H>(e.retry_after_ms(), 700, "b keeps the first anchor");

    // At 12.5 s both of b's current windows ([12, 14) and [10, 20)) are empty.
    h.advance(ms(5_200)).await;
    let vb = view(&s, &b, Scope::Key, &pb).await;
    assert_eq!(used(&vb, Dimension::Requests, 10_000), 0);
    assert_eq!(line(&vb, Dimension::Requests, 10_000).resets_at, None);
    admitted(&s, &b, &pb, Demand::tokens(1)).await;
    let vb = view(&s, &b, Scope::Key, &pb).await;
    assert_near::<H>(
        resets_at(&vb, Dimension::Requests, 2_000) - rb,
        12_500,
        "W2 re-anchor once every tier is empty",
    );
    assert_near::<H>(
        resets_at(&vb, Dimension::Requests, 10_000) - rb,
        20_500,
        "W2 re-anchor moves every tier",
    );
    // Every admitted request was let go as completed; `a`'s window has rolled.
    s.counted(
        &b,
        Scope::Key,
        &[
            (Dimension::Requests, 2_000, 1),
            (Dimension::Requests, 10_000, 1),
        ],
    );
    s
}

/// W3: requests and tokens share one anchor; images and videos each have their own,
/// set by their own first use.
pub async fn w3_images_have_own_anchor<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("w3");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 10))
            .with_tokens(secs(4, 1_000))
            .with_images(secs(4, 2))
            .with_videos(secs(4, 1)),
    );
    let t = admitted(&s, &k, &p, Demand::tokens(10)).await;
    assert!(t.anchors[AnchorGroup::RequestsTokens.index()].is_some());
    assert_eq!(t.anchors[AnchorGroup::Images.index()], None);
    assert_eq!(t.anchors[AnchorGroup::Videos.index()], None);
    let v = view(&s, &k, Scope::Key, &p).await;
    let rt = resets_at(&v, Dimension::Requests, 4_000);
    assert_eq!(
        resets_at(&v, Dimension::Tokens, 4_000),
        rt,
        "tokens share the requests anchor"
    );
    assert_eq!(line(&v, Dimension::Images, 4_000).resets_at, None);
    assert_eq!(line(&v, Dimension::Videos, 4_000).resets_at, None);

    h.advance(ms(1_500)).await;
    admitted(&s, &k, &p, demand(10, 2, 0, 0)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    let ri = resets_at(&v, Dimension::Images, 4_000);
    assert_near::<H>(ri - rt, 1_500, "images anchor at their own first use");
    assert_eq!(resets_at(&v, Dimension::Requests, 4_000), rt);
    assert_eq!(resets_at(&v, Dimension::Tokens, 4_000), rt);
    assert_eq!(used(&v, Dimension::Images, 4_000), 2);
    assert_eq!(used(&v, Dimension::Requests, 4_000), 2);
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 20);

    h.advance(ms(1_500)).await; // 3 s
    admitted(&s, &k, &p, demand(10, 0, 1, 0)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    let rv = resets_at(&v, Dimension::Videos, 4_000);
    assert_near::<H>(rv - rt, 3_000, "videos anchor at their own first use");
    assert_eq!(resets_at(&v, Dimension::Images, 4_000), ri);

    h.advance(ms(1_500)).await; // 4.5 s: requests/tokens window over, images not
    let e = rejected(&s, &k, &p, demand(10, 1, 0, 0)).await;
    assert_eq!(limits_of(&e), [(Dimension::Images, 4_000)]);
    assert_eq!(e.limits[0].used, 2);
    assert_retry::<H>(
        e.retry_after_ms(),
        1_000,
        "images window of their own anchor",
    );
    let e = rejected(&s, &k, &p, demand(10, 0, 1, 0)).await;
    assert_eq!(limits_of(&e), [(Dimension::Videos, 4_000)]);
    assert_retry::<H>(
        e.retry_after_ms(),
        2_500,
        "videos window of their own anchor",
    );
    // The rejected requests counted nothing (W4): this is the first of the new window.
    admitted(&s, &k, &p, Demand::tokens(10)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 1);
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 10);
    assert_near::<H>(
        resets_at(&v, Dimension::Requests, 4_000) - rt,
        4_500,
        "RT re-anchored",
    );
    assert_eq!(resets_at(&v, Dimension::Images, 4_000), ri);
    assert_eq!(resets_at(&v, Dimension::Videos, 4_000), rv);

    h.advance(ms(1_500)).await; // 6 s: the images window [1.5, 5.5) is over
    admitted(&s, &k, &p, demand(10, 2, 0, 0)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Images, 4_000), 2);
    assert_near::<H>(
        resets_at(&v, Dimension::Images, 4_000) - ri,
        4_500,
        "images re-anchored",
    );
    assert_eq!(resets_at(&v, Dimension::Videos, 4_000), rv);
    assert_eq!(used(&v, Dimension::Requests, 4_000), 2);
    // Every admitted request was let go as completed.
    s.counted(
        &k,
        Scope::Key,
        &[
            (Dimension::Requests, 4_000, 2),
            (Dimension::Tokens, 4_000, 20),
            (Dimension::Images, 4_000, 2),
            (Dimension::Videos, 4_000, 1),
        ],
    );
    s
}

/// W4: a request is admitted only if every tier of every dimension it touches has
/// room; a rejected request changes no counter (checked through the usage view).
pub async fn w4_all_or_nothing_rejected_changes_nothing<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("w4");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 5))
            .with_tokens(secs(4, 100))
            .with_images(secs(4, 2))
            .with_videos(secs(4, 1))
            .with_amount_cap(1_000)
            .with_rolling_rpm(10),
    );
    admitted(&s, &k, &p, demand(60, 1, 0, 100)).await;
    let before = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(line(&before, Dimension::Videos, 4_000).resets_at, None);

    // Tokens do not fit; requests, images, videos, amount and rolling would.
    let e = rejected(&s, &k, &p, demand(50, 1, 1, 100)).await;
    assert_eq!(limits_of(&e), [(Dimension::Tokens, 4_000)]);
    assert_eq!(e.limits[0].used, 60);
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        before,
        "a rejection changed state"
    );
    // Two dimensions at once: both are named.
    let e = rejected(&s, &k, &p, demand(50, 2, 1, 100)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::Tokens, 4_000), (Dimension::Images, 4_000)]
    );
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        before,
        "a rejection changed state"
    );

    h.advance(ms(1_000)).await;
    admitted(&s, &k, &p, demand(40, 1, 1, 100)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 2);
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 100);
    assert_eq!(used(&v, Dimension::Images, 4_000), 2);
    assert_eq!(used(&v, Dimension::Videos, 4_000), 1);
    assert_eq!(used(&v, Dimension::Amount, 0), 200);
    assert_eq!(used(&v, Dimension::RollingRequests, ROLLING_WINDOW_MS), 2);
    // Now full in tokens, images and videos: all three are named, nothing counted.
    let before = v;
    let e = rejected(&s, &k, &p, demand(1, 1, 1, 1)).await;
    assert_eq!(
        limits_of(&e),
        [
            (Dimension::Tokens, 4_000),
            (Dimension::Images, 4_000),
            (Dimension::Videos, 4_000)
        ]
    );
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        before,
        "a rejection changed state"
    );
    // The two admitted requests were let go as completed; the refusals counted nothing.
    s.counted(
        &k,
        Scope::Key,
        &[
            (Dimension::Requests, 4_000, 2),
            (Dimension::Tokens, 4_000, 100),
            (Dimension::Images, 4_000, 2),
            (Dimension::Videos, 4_000, 1),
            (Dimension::Amount, 0, 200),
            (Dimension::RollingRequests, ROLLING_WINDOW_MS, 2),
        ],
    );
    s
}

/// W5: tokens reserved from the estimate are corrected by the delta to the actual
/// usage (which may push a window over its limit, rejecting the next request); a
/// settlement after a window rolled is dropped for that window, not charged to the
/// new one.
pub async fn w5_settle_applies_delta_and_drops_after_roll<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("w5");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 10))
            .with_requests(secs(20, 100))
            .with_tokens(secs(4, 100))
            .with_tokens(secs(20, 1_000)),
    );
    let tok = |v: &[LimitView], w| used(v, Dimension::Tokens, w);

    let t1 = admitted(&s, &k, &p, Demand::tokens(50)).await;
    assert_eq!(tok(&view(&s, &k, Scope::Key, &p).await, 4_000), 50);
    settle(&s, &k, t1, Outcome::Completed(Some(tokens_used(20)))).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (20, 20));
    assert_eq!(
        used(&v, Dimension::Requests, 4_000),
        1,
        "a completed request still counts"
    );

    let in_flight = admitted(&s, &k, &p, Demand::tokens(30)).await; // 50
    let t2 = admitted(&s, &k, &p, Demand::tokens(30)).await; // 80
    settle(&s, &k, t2, Outcome::Completed(None)).await;
    assert_eq!(
        tok(&view(&s, &k, Scope::Key, &p).await, 4_000),
        80,
        "without usage the reservation stands"
    );
    let t3 = admitted(&s, &k, &p, Demand::tokens(20)).await; // exactly 100
    settle(&s, &k, t3, Outcome::Completed(Some(tokens_used(70)))).await; // 150
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (150, 150));
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Tokens, 4_000)]);
    assert_eq!(e.limits[0].used, 150);
    assert_retry::<H>(
        e.retry_after_ms(),
        4_000,
        "over the limit until the window ends",
    );

    h.advance(ms(4_500)).await; // the 4 s window rolled, the 20 s one did not
    let t5 = admitted(&s, &k, &p, Demand::tokens(10)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (10, 160));
    // The request admitted in the old 4 s window ends now, using 90 instead of 30.
    settle(&s, &k, in_flight, Outcome::Completed(Some(tokens_used(90)))).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(
        tok(&v, 4_000),
        10,
        "a settlement after the roll was charged to the new window"
    );
    assert_eq!(
        tok(&v, 20_000),
        220,
        "the still-current 20 s window takes the delta"
    );
    settle(&s, &k, t5, Outcome::Refund).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (0, 210));
    assert_eq!(used(&v, Dimension::Requests, 4_000), 0);
    assert_eq!(used(&v, Dimension::Requests, 20_000), 4);
    // What the completed requests left in the 20 s tiers (the 4 s ones rolled).
    s.counted(
        &k,
        Scope::Key,
        &[
            (Dimension::Requests, 20_000, 4),
            (Dimension::Tokens, 20_000, 210),
        ],
    );
    s
}

/// W6: the amount cap admits while spend plus in-flight reservations is below the
/// cap, each admitted request reserves its money bound until it settles, and the cap
/// never resets by itself (no retry-after).
pub async fn w6_amount_cap_counts_reservations<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("w6");
    let p = Arc::new(Policy::default().with_amount_cap(100));
    let amount = |v: &[LimitView]| used(v, Dimension::Amount, 0);
    let cost = |c: Money| Usage {
        cost: Some(c),
        ..tokens_used(10)
    };

    let r1 = admitted(&s, &k, &p, demand(10, 0, 0, 40)).await;
    let r2 = admitted(&s, &k, &p, demand(10, 0, 0, 40)).await;
    // 80 < 100: admitted, and it reserves its whole bound.
    let r3 = admitted(&s, &k, &p, demand(10, 0, 0, 40)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(amount(&v), 120);
    assert_eq!(line(&v, Dimension::Amount, 0).tier.limit, 100);
    assert_eq!(line(&v, Dimension::Amount, 0).resets_at, None);
    let e = rejected(&s, &k, &p, demand(10, 0, 0, 1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Amount, 0)]);
    assert_eq!(e.limits[0].used, 120);
    assert_eq!(e.limits[0].tier.limit, 100);
    assert_eq!(
        e.retry_after_ms(),
        None,
        "the amount cap has no retry-after"
    );

    settle(&s, &k, r1, Outcome::Completed(Some(cost(10)))).await; // 10 + 80
    settle(&s, &k, r3, Outcome::Refund).await; // 10 + 40
    assert_eq!(amount(&view(&s, &k, Scope::Key, &p).await), 50);
    settle(&s, &k, r2, Outcome::Completed(None)).await; // the bound is the charge: 50
    assert_eq!(amount(&view(&s, &k, Scope::Key, &p).await), 50);
    let r4 = admitted(&s, &k, &p, demand(10, 0, 0, 30)).await; // 80
    settle(&s, &k, r4, Outcome::Completed(Some(cost(50)))).await; // exactly 100
    assert_eq!(amount(&view(&s, &k, Scope::Key, &p).await), 100);
    let e = rejected(&s, &k, &p, demand(10, 0, 0, 0)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::Amount, 0)],
        "spend == cap is not below it"
    );

    h.advance(ms(5_000)).await;
    let e = rejected(&s, &k, &p, demand(10, 0, 0, 0)).await;
    assert_eq!(e.limits[0].used, 100, "the amount never resets by itself");
    assert_eq!(e.retry_after_ms(), None);
    // The spend of the completed requests; nothing reserved.
    s.counted(&k, Scope::Key, &[(Dimension::Amount, 0, 100)]);
    s
}

/// W9: the retry-after of a window rejection is the time until every exceeded tier
/// has reset enough for this request (the latest of them); none when waiting cannot
/// help (a demand larger than the tier).
pub async fn w9_retry_after_is_time_to_reset<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let (a, b, c) = (key("w9:a"), key("w9:b"), key("w9:c"));
    let pa = Arc::new(
        Policy::default()
            .with_requests(secs(3, 2))
            .with_requests(secs(8, 2))
            .with_tokens(secs(3, 100)),
    );
    let pb = Arc::new(
        Policy::default()
            .with_requests(secs(3, 2))
            .with_requests(secs(8, 3)),
    );
    let pc = Arc::new(Policy::default().with_tokens(secs(3, 100)));
    admitted(&s, &a, &pa, Demand::tokens(10)).await;
    admitted(&s, &b, &pb, Demand::tokens(10)).await;
    admitted(&s, &c, &pc, Demand::tokens(60)).await;

    h.advance(ms(1_000)).await;
    admitted(&s, &a, &pa, Demand::tokens(10)).await;
    admitted(&s, &b, &pb, Demand::tokens(10)).await;
    // a: both request tiers exceeded: the later reset decides.
    let e = rejected(&s, &a, &pa, Demand::tokens(10)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::Requests, 3_000), (Dimension::Requests, 8_000)]
    );
    assert_retry::<H>(retry_of(&e, Dimension::Requests, 3_000), 2_000, "3 s tier");
    assert_retry::<H>(retry_of(&e, Dimension::Requests, 8_000), 7_000, "8 s tier");
    assert_retry::<H>(e.retry_after_ms(), 7_000, "every exceeded tier");
    assert_eq!(e.binding().tier.window_ms, 8_000);
    // A demand larger than a tier can never fit: no retry-after.
    let e = rejected(&s, &a, &pa, Demand::tokens(150)).await;
    assert_eq!(retry_of(&e, Dimension::Tokens, 3_000), None);
    assert_eq!(e.retry_after_ms(), None);
    assert_eq!(e.binding().dimension, Dimension::Tokens);
    // b: only the short tier is exceeded.
    let e = rejected(&s, &b, &pb, Demand::tokens(10)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 3_000)]);
    assert_retry::<H>(e.retry_after_ms(), 2_000, "b at 1 s");
    // c: "enough for this request": 60 used, 50 more do not fit, 40 do.
    let e = rejected(&s, &c, &pc, Demand::tokens(50)).await;
    assert_eq!(limits_of(&e), [(Dimension::Tokens, 3_000)]);
    assert_retry::<H>(e.retry_after_ms(), 2_000, "c at 1 s");
    admitted(&s, &c, &pc, Demand::tokens(40)).await;

    h.advance(ms(2_500)).await; // 3.5 s
    admitted(&s, &b, &pb, Demand::tokens(10)).await;
    let e = rejected(&s, &b, &pb, Demand::tokens(10)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 8_000)]);
    assert_retry::<H>(e.retry_after_ms(), 4_500, "b at 3.5 s");
    // a: the 3 s tier reset, the 8 s one did not.
    let e = rejected(&s, &a, &pa, Demand::tokens(10)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 8_000)]);
    assert_retry::<H>(e.retry_after_ms(), 4_500, "a at 3.5 s");
    // Every admitted request was let go as completed; the 3 s tiers of `a` and `c` rolled.
    s.counted(&a, Scope::Key, &[(Dimension::Requests, 8_000, 2)]);
    s.counted(
        &b,
        Scope::Key,
        &[
            (Dimension::Requests, 3_000, 1),
            (Dimension::Requests, 8_000, 3),
        ],
    );
    s
}

/// W10: the optional rolling window counts requests started in the last 60 s; room
/// appears when the oldest start leaves it, which the retry-after announces.
pub async fn w10_rolling_window<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("w10");
    let p = Arc::new(Policy::default().with_rolling_rpm(3));
    let rolling = |v: &[LimitView]| used(v, Dimension::RollingRequests, ROLLING_WINDOW_MS);

    admitted(&s, &k, &p, Demand::tokens(1)).await; // 0 s
    h.advance(ms(20_000)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await; // 20 s
    h.advance(ms(20_000)).await;
    let last = admitted(&s, &k, &p, Demand::tokens(1)).await; // 40 s
    h.advance(ms(1_000)).await; // 41 s
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::RollingRequests, ROLLING_WINDOW_MS)]
    );
    assert!(e.only_rolling());
    assert_eq!(e.limits[0].used, 3);
    assert_eq!(e.limits[0].tier.limit, 3);
    assert_retry::<H>(e.retry_after_ms(), 19_000, "the 0 s start leaves at 60 s");
    assert_eq!(
        rolling(&view(&s, &k, Scope::Key, &p).await),
        3,
        "a rejection counted"
    );
    // A lowered limit (the policy changed): room appears only when enough starts have
    // left to go below it — the 20 s start for a limit of 2, the 40 s one for 1.
    for (limit, expected) in [(2, 39_000), (1, 59_000)] {
        let lower = Arc::new(Policy::default().with_rolling_rpm(limit));
        let e = rejected(&s, &k, &lower, Demand::tokens(1)).await;
        assert_eq!(e.limits[0].used, 3);
        assert_retry::<H>(e.retry_after_ms(), expected, "a lowered rolling limit");
    }

    // A refunded request gives its start back (L5).
    settle(&s, &k, last, Outcome::Refund).await;
    assert_eq!(rolling(&view(&s, &k, Scope::Key, &p).await), 2);
    admitted(&s, &k, &p, Demand::tokens(1)).await; // 41 s
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_retry::<H>(e.retry_after_ms(), 19_000, "still the 0 s start");

    if exact::<H>() {
        h.advance(ms(18_999)).await;
        let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
        assert_eq!(e.retry_after_ms(), Some(1));
        h.advance(ms(1)).await; // exactly 60 s after the first start
    } else {
        h.advance(ms(19_500)).await; // 60.5 s
    }
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(rolling(&view(&s, &k, Scope::Key, &p).await), 3);
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    let expected = if exact::<H>() { 20_000 } else { 19_500 };
    assert_retry::<H>(e.retry_after_ms(), expected, "then the 20 s start");
    // The starts of the last 60 s: requests let go as completed.
    s.counted(
        &k,
        Scope::Key,
        &[(Dimension::RollingRequests, ROLLING_WINDOW_MS, 3)],
    );
    s
}

/// L5: a refunded request gives back everything it reserved: request, token, image
/// and video counts, money and its rolling-window start.
pub async fn l5_refund_gives_everything_back<H: Harness>(h: &H) -> Case<H::Store> {
    let s = case(h).await;
    let k = key("l5");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 1))
            .with_tokens(secs(4, 100))
            .with_images(secs(4, 1))
            .with_videos(secs(4, 1))
            .with_amount_cap(100)
            .with_rolling_rpm(1),
    );
    let full = demand(100, 1, 1, 100);
    let empty = view(&s, &k, Scope::Key, &p).await;
    let t = admitted(&s, &k, &p, full).await;
    let e = rejected(&s, &k, &p, demand(1, 1, 1, 1)).await;
    assert_eq!(
        limits_of(&e),
        [
            (Dimension::Requests, 4_000),
            (Dimension::Tokens, 4_000),
            (Dimension::Images, 4_000),
            (Dimension::Videos, 4_000),
            (Dimension::Amount, 0),
            (Dimension::RollingRequests, ROLLING_WINDOW_MS),
        ]
    );
    h.advance(ms(1_000)).await;
    settle(&s, &k, t, Outcome::Refund).await;
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        empty,
        "the refund left something counted"
    );
    // Everything is available again, to the last unit.
    let t = admitted(&s, &k, &p, full).await;
    settle(&s, &k, t, Outcome::Completed(None)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    for (d, w) in [
        (Dimension::Requests, 4_000),
        (Dimension::Images, 4_000),
        (Dimension::Videos, 4_000),
        (Dimension::RollingRequests, ROLLING_WINDOW_MS),
    ] {
        assert_eq!(used(&v, d, w), 1, "{d}");
    }
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 100);
    assert_eq!(used(&v, Dimension::Amount, 0), 100);
    // The last request completed with its bound.
    s.counted(
        &k,
        Scope::Key,
        &[
            (Dimension::Requests, 4_000, 1),
            (Dimension::Tokens, 4_000, 100),
            (Dimension::Images, 4_000, 1),
            (Dimension::Videos, 4_000, 1),
            (Dimension::Amount, 0, 100),
            (Dimension::RollingRequests, ROLLING_WINDOW_MS, 1),
        ],
    );
    s
}
