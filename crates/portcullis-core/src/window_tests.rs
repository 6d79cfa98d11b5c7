//! Rules of `ScopeState` and `Exceeded` that the reference model in
//! `window_model_tests` does not look at: what the state keeps in memory, and which
//! rejections a wait can help.

use crate::demand::Demand;
use crate::policy::{Dimension, Policy, Tier};
use crate::window::{Exceeded, ExceededLimit, ROLLING_WINDOW_MS, ScopeState};

#[test]
fn d7_the_rolling_log_keeps_only_the_last_minute() {
    let p = Policy::default().with_rolling_rpm(1_000);
    let mut s = ScopeState::default();
    let one = Demand::default(); // one request
    for t in 0..100 {
        s.admit(&p, &one, t).expect("room");
    }
    // At 60,098 ms the starts at 0 … 98 ms have left the minute; the next admission
    // drops them, and only the start at 99 ms and its own stay.
    s.admit(&p, &one, 98 + ROLLING_WINDOW_MS).expect("room");
    assert_eq!(s.rolling.count(98 + ROLLING_WINDOW_MS), 2);
    assert_eq!(s.rolling.len(), 2, "starts older than a minute are kept");
}

#[test]
fn w10_max_wait_applies_only_when_the_rolling_window_alone_is_exceeded() {
    let limit = |dimension| ExceededLimit {
        dimension,
        tier: Tier {
            window_ms: 60_000,
            limit: 1,
        },
        used: 1,
        retry_after_ms: Some(1_000),
    };
    let rolling = Exceeded {
        limits: vec![limit(Dimension::RollingRequests)],
    };
    assert!(rolling.only_rolling());
    let with_a_tier = Exceeded {
        limits: vec![
            limit(Dimension::RollingRequests),
            limit(Dimension::Requests),
        ],
    };
    assert!(!with_a_tier.only_rolling());
}
