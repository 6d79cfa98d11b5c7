//! Script arguments and replies: the Rust side of the Lua scripts' calling convention.
//!
//! Numbers travel to the window scripts as one blob of little-endian `f64`s (decoded in
//! C by the scripts' `struct.unpack`, far cheaper than converting dozens of string
//! arguments in Lua): the policy as `n, (dimension, window_ms, limit) × n` in the order
//! groups → dimensions → tiers, after the demand or the ticket. Doubles are exact up to
//! 2^53: timestamps in ms, counts and minor units stay far below it (a limit above it is
//! compared approximately, which for such a limit changes nothing).
//!
//! Replies are flat integer arrays. Limits are never read back from Redis: an exceeded
//! limit or a view line names its tier by position and the tier is taken from the
//! caller's policy, so u64 limits stay exact.

mod reply;

pub(crate) use reply::{AdmitReply, admit_reply, admitted_requests, view_reply};

use portcullis_core::blocks::BlockAsk;
use portcullis_core::{
    Demand, Dimension, Millis, Outcome, Policy, StoreError, StoreErrorKind, Tier, WindowTicket,
};

/// The windowed dimensions, numbered 1..=4 in the scripts, in the order of their groups
/// (requests and tokens share the first).
const WINDOWED: [Dimension; 4] = [
    Dimension::Requests,
    Dimension::Tokens,
    Dimension::Images,
    Dimension::Videos,
];

/// Script code of the amount cap in replies.
const AMOUNT: i64 = 5;
/// Script code of the rolling window in replies.
const ROLLING: i64 = 7;

fn protocol(what: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, what)
}

/// A blob of little-endian doubles.
#[derive(Default)]
pub(crate) struct Doubles(Vec<u8>);

impl Doubles {
    fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n * 8))
    }
    // Precision above 2^53 is given up on purpose (see the module docs).
    #[allow(clippy::cast_precision_loss)]
    fn u(&mut self, v: u64) -> &mut Self {
        self.f(v as f64)
    }
    #[allow(clippy::cast_precision_loss)]
    fn i(&mut self, v: i64) -> &mut Self {
        self.f(v as f64)
    }
    fn b(&mut self, v: bool) -> &mut Self {
        self.f(if v { 1.0 } else { 0.0 })
    }
    fn f(&mut self, v: f64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
    /// Any bytes, as a test's stand-in.
    #[cfg(test)]
    pub(crate) fn text(s: String) -> Self {
        Self(s.into_bytes())
    }
}

/// Every windowed tier of the policy, in the scripts' order, with its dimension.
fn tiers(p: &Policy) -> impl Iterator<Item = (Dimension, &Tier)> {
    WINDOWED
        .into_iter()
        .flat_map(move |d| p.tiers(d).iter().map(move |t| (d, t)))
}

fn code(d: Dimension) -> f64 {
    match d {
        Dimension::Requests => 1.0,
        Dimension::Tokens => 2.0,
        Dimension::Images => 3.0,
        _ => 4.0,
    }
}

/// `ARGV[2]` of the admit and view scripts: amount TTL, demand, cap, rolling rpm, tiers.
pub(crate) fn admit_args(amount_ttl: Millis, p: &Policy, d: &Demand) -> Doubles {
    let n = tiers(p).count();
    let mut b = Doubles::with_capacity(9 + 3 * n);
    b.u(amount_ttl)
        .u(d.tokens)
        .u(d.images)
        .u(d.videos)
        .i(d.money)
        .b(p.amount_cap.is_some())
        .i(p.amount_cap.unwrap_or(0))
        .u(u64::from(p.rolling_rpm.unwrap_or(0)))
        .u(n as u64);
    for (d, t) in tiers(p) {
        b.f(code(d)).u(t.window_ms).u(t.limit);
    }
    b
}

/// [`admit_args`] asking for a quota block of `block` too (portcullis_core::blocks): the
/// script counts the block where it fits under every limit, else the request alone.
pub(crate) fn admit_block_args(
    amount_ttl: Millis,
    p: &Policy,
    d: &Demand,
    block: Option<BlockAsk>,
) -> Doubles {
    let mut b = admit_args(amount_ttl, p, d);
    if let Some(a) = block {
        b.u(a.requests).u(a.tokens);
    }
    b
}

/// [`settle_args`] of a quota block's shared ticket: `used` of its `requests`.
pub(crate) fn settle_block_args(
    amount_ttl: Millis,
    t: &WindowTicket,
    outcome: Outcome,
    requests: u64,
    used: u64,
    handed: u32,
) -> Doubles {
    let mut b = settle_args(amount_ttl, t, outcome);
    b.u(requests).u(used);
    if handed > 0 {
        // [17] (an undo's; the block's tokens), then the requests handed over.
        b.u(t.demand.tokens).u(u64::from(handed));
    }
    b
}

/// `ARGV[2]` of the settle script: amount TTL, the ticket, the outcome.
pub(crate) fn settle_args(amount_ttl: Millis, t: &WindowTicket, outcome: Outcome) -> Doubles {
    let (refund, usage) = match outcome {
        Outcome::Completed(u) => (false, u),
        Outcome::Refund => (true, None),
    };
    let mut b = Doubles::with_capacity(14);
    b.u(amount_ttl).u(t.admitted_at);
    for a in t.anchors {
        match a {
            Some(a) => b.u(a),
            None => b.f(-1.0),
        };
    }
    b.u(t.demand.tokens)
        .u(t.demand.images)
        .u(t.demand.videos)
        .b(t.amount)
        .i(t.money)
        .b(t.rolling)
        .b(refund)
        .u(usage.map_or(t.demand.tokens, |u| u.total_tokens()))
        .i(usage.and_then(|u| u.cost).unwrap_or(t.money));
    b
}

/// `ARGV[2]` of the settle script undoing an admission whose answer never came (D9):
/// what the call asked — `p`, `d` and the block `ask` — with the time and anchors left
/// to the admission's record (see `window_settle.lua`).
pub(crate) fn undo_args(
    amount_ttl: Millis,
    p: &Policy,
    d: &Demand,
    ask: Option<BlockAsk>,
) -> Doubles {
    let amount = p.amount_cap.is_some();
    // The groups the script counts (window_admit.lua's `counted`).
    let counted = [
        !(p.requests.is_empty() && p.tokens.is_empty()),
        !p.images.is_empty() && d.images > 0,
        !p.videos.is_empty() && d.videos > 0,
    ];
    let mut b = Doubles::with_capacity(17);
    b.u(amount_ttl).f(-1.0);
    for c in counted {
        b.f(if c { -2.0 } else { -1.0 });
    }
    let money = if amount { d.money.max(0) } else { 0 };
    b.u(d.tokens)
        .u(d.images)
        .u(d.videos)
        .b(amount)
        .i(money)
        .b(p.rolling_rpm.is_some_and(|n| n > 0))
        .b(true)
        .u(d.tokens)
        .i(money)
        .u(ask.map_or(1, |a| a.requests))
        .u(0)
        .u(ask.map_or(d.tokens, |a| a.tokens));
    b
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    /// A policy with every kind of limit.
    pub(crate) fn policy() -> Policy {
        Policy::default()
            .with_requests(Tier::new(Duration::from_secs(60), 10))
            .with_tokens(Tier::new(Duration::from_secs(60), u64::MAX))
            .with_images(Tier::new(Duration::from_secs(10), 2))
            .with_amount_cap(100)
            .with_rolling_rpm(3)
    }

    fn decode(b: &Doubles) -> Vec<f64> {
        b.bytes()
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn admit_args_layout() {
        let d = Demand {
            tokens: 7,
            images: 1,
            videos: 0,
            money: -3,
        };
        assert_eq!(
            decode(&admit_args(9, &policy(), &d)),
            [
                9.0,
                7.0,
                1.0,
                0.0,
                -3.0,
                1.0,
                100.0,
                3.0,
                3.0, //
                1.0,
                60_000.0,
                10.0, //
                2.0,
                60_000.0,
                1.8446744073709552e19, //
                3.0,
                10_000.0,
                2.0,
            ]
        );
        assert_eq!(
            decode(&admit_args(0, &Policy::default(), &Demand::default())),
            [0.0; 9]
        );
    }

    #[test]
    fn settle_args_layout() {
        let t = WindowTicket {
            admitted_at: 1_000,
            anchors: [Some(900), None, Some(0)],
            demand: Demand {
                tokens: 50,
                images: 2,
                videos: 1,
                money: 40,
            },
            amount: true,
            money: 40,
            rolling: true,
            fallback: false,
            borrowed: 0,
            id: 0,
        };
        let used = portcullis_core::Usage {
            input_tokens: 5,
            output_tokens: 6,
            cost: Some(12),
            ..Default::default()
        };
        assert_eq!(
            decode(&settle_args(1, &t, Outcome::Completed(Some(used)))),
            [
                1.0, 1_000.0, 900.0, -1.0, 0.0, 50.0, 2.0, 1.0, 1.0, 40.0, 1.0, 0.0, 11.0, 12.0
            ]
        );
        // Without usage the reservation is the charge; a refund is flagged.
        let r = decode(&settle_args(1, &t, Outcome::Refund));
        assert_eq!((r[11], r[12], r[13]), (1.0, 50.0, 40.0));
    }
}
