//! Anchored-window maths (W1–W6, W9, W10) as plain data and functions.
//!
//! Public are the types the window layer and the stores exchange: [`WindowTicket`],
//! [`Outcome`], [`Exceeded`], [`LimitView`]. The state itself is crate-private: a
//! `ScopeState` holds everything the window layer counts for one subject under one
//! policy scope (the three anchor groups of W3, the cumulative amount of W6 and the
//! rolling log of W10); its `admit` is one all-or-nothing decision (W4), its `settle`
//! applies the actual usage or gives everything back (W5, L5). The in-memory store
//! runs exactly this code under a shard lock; the Redis store runs the same rules in
//! Lua, held to them by the conformance suite.

use crate::clock::Millis;
use crate::demand::{Demand, Usage};
use crate::money::Money;
use crate::policy::{AnchorGroup, Dimension, Policy, Tier};
use std::collections::VecDeque;

/// Length of the rolling window of W10.
pub const ROLLING_WINDOW_MS: Millis = 60_000;

/// Count of one tier inside its current window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TierState {
    /// Dimension of the tier.
    pub(crate) dimension: Dimension,
    /// Window length.
    pub(crate) window_ms: Millis,
    /// Index k of the window the count belongs to: `[A + k·len, A + (k+1)·len)`.
    pub(crate) index: u64,
    /// Units used in window `index`.
    pub(crate) used: u64,
}

/// State of one anchor group: the anchor and the count of each tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GroupState {
    /// The anchor A (W2).
    pub(crate) anchor: Millis,
    /// One entry per tier of the group's dimensions.
    pub(crate) tiers: Vec<TierState>,
}

/// Index of the window of length `len` aligned at `anchor` that contains `now`.
#[inline]
pub(crate) fn window_index(anchor: Millis, len: Millis, now: Millis) -> u64 {
    now.saturating_sub(anchor) / len.max(1)
}

/// End of window `index` (exclusive).
#[inline]
pub(crate) fn window_end(anchor: Millis, len: Millis, index: u64) -> Millis {
    anchor.saturating_add(len.saturating_mul(index.saturating_add(1)))
}

impl GroupState {
    /// Units used in the tier's *current* window at `now` (0 once it has rolled).
    #[inline]
    pub(crate) fn used_now(&self, t: &TierState, now: Millis) -> u64 {
        if window_index(self.anchor, t.window_ms, now) == t.index {
            t.used
        } else {
            0
        }
    }

    /// True when every tier's current window is empty: the next use re-anchors (W2).
    pub(crate) fn is_empty_at(&self, now: Millis) -> bool {
        self.tiers.iter().all(|t| self.used_now(t, now) == 0)
    }

    fn tier(&self, d: Dimension, len: Millis) -> Option<&TierState> {
        self.tiers
            .iter()
            .find(|t| t.dimension == d && t.window_ms == len)
    }
}

/// Cumulative spend under a cap (W6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AmountState {
    /// Settled spend.
    pub(crate) spent: Money,
    /// Money upper bounds of requests still in flight.
    pub(crate) reserved: Money,
}

/// Start times of the requests of the last 60 s (W10), oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RollingLog {
    starts: VecDeque<Millis>,
}

impl RollingLog {
    fn purge(&mut self, now: Millis) {
        while self
            .starts
            .front()
            .is_some_and(|&t| t.saturating_add(ROLLING_WINDOW_MS) <= now)
        {
            self.starts.pop_front();
        }
    }
    /// Requests started in the 60 s before `now`.
    pub(crate) fn count(&self, now: Millis) -> usize {
        self.starts
            .iter()
            .filter(|&&t| t.saturating_add(ROLLING_WINDOW_MS) > now)
            .count()
    }
    /// Starts kept (live or not yet purged).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }
    fn remove(&mut self, at: Millis) {
        if let Some(i) = self.starts.iter().position(|&t| t == at) {
            self.starts.remove(i);
        }
    }
}

/// Everything the window layer keeps for one (subject, scope).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ScopeState {
    /// The anchor groups, indexed by [`AnchorGroup::index`].
    pub(crate) groups: [Option<GroupState>; 3],
    /// Cumulative amount.
    pub(crate) amount: AmountState,
    /// Rolling 60 s log.
    pub(crate) rolling: RollingLog,
    /// Admitted requests not yet settled: while any is out, the state is not idle, so
    /// a settlement always finds the windows it must correct.
    pub(crate) pending: u32,
}

/// One limit a request did not fit under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExceededLimit {
    /// The dimension.
    pub dimension: Dimension,
    /// The tier (for `Amount`: `window_ms` 0 and the cap as `limit`).
    pub tier: Tier,
    /// Used (or spent + reserved for the amount) at the decision.
    pub used: u64,
    /// Time until this limit has room for the request; `None` = not by waiting
    /// (amount cap, or a demand larger than the tier).
    pub retry_after_ms: Option<Millis>,
}

/// Why a request was not admitted: every limit it did not fit under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exceeded {
    /// Never empty.
    pub limits: Vec<ExceededLimit>,
}

impl Exceeded {
    /// The limit that recovers last (unknown recovery counts as last): the one to name
    /// in the message and the Retry-After (W8, W9).
    pub fn binding(&self) -> &ExceededLimit {
        self.limits
            .iter()
            .max_by_key(|l| l.retry_after_ms.unwrap_or(Millis::MAX))
            .expect("Exceeded is never empty")
    }
    /// Time until every exceeded limit has room (W9); `None` if waiting cannot help.
    pub fn retry_after_ms(&self) -> Option<Millis> {
        self.binding().retry_after_ms
    }
    /// True when only the rolling window of W10 is exceeded (the case `max_wait`
    /// applies to).
    pub fn only_rolling(&self) -> bool {
        self.limits
            .iter()
            .all(|l| l.dimension == Dimension::RollingRequests)
    }
}

/// What was reserved at admission, enough to settle or refund later without the
/// policy. `Copy`, no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowTicket {
    /// Time of the admission.
    pub admitted_at: Millis,
    /// Anchor of each group the request was counted in.
    pub anchors: [Option<Millis>; 3],
    /// The demand that was reserved.
    pub demand: Demand,
    /// Whether the request was counted against an amount cap.
    pub amount: bool,
    /// Money reserved against the amount cap.
    pub money: Money,
    /// Whether an entry was added to the rolling log.
    pub rolling: bool,
    /// Issued by the local fallback store while the shared store was down (D4
    /// `local` mode): settle it there.
    pub fallback: bool,
    /// Non-zero: admitted from the quota block of this id that the issuing store
    /// borrowed ([`crate::blocks`]): settle it with that store, which settles the block.
    pub borrowed: u64,
    /// Non-zero: the id under which a shared store recorded the admission, so that its
    /// settlement counts once and only for what was counted (D9). 0: not recorded (the
    /// in-memory store, whose caller settles each ticket exactly once).
    pub id: u64,
}

/// How a request ended, for settlement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The request ran. With usage: tokens and money are corrected to the actual
    /// figures (W5, W6). Without: the reservation stands as the charge (never zero).
    Completed(Option<Usage>),
    /// The request was rejected further in (L5) or never sent: everything is given
    /// back.
    Refund,
}

/// Demand of dimension `d`, and whether the request touches it at all.
fn demand_of(d: Dimension, demand: &Demand) -> (u64, bool) {
    match d {
        Dimension::Requests => (1, true),
        // Requests and tokens share a group: every request may use tokens, so a token
        // window already over its limit (W5) rejects even a zero estimate, while one
        // exactly at its limit still has room for it (W4).
        Dimension::Tokens => (demand.tokens, true),
        Dimension::Images => (demand.images, demand.images > 0),
        Dimension::Videos => (demand.videos, demand.videos > 0),
        _ => (0, false),
    }
}

fn group_touched(g: AnchorGroup, demand: &Demand) -> bool {
    match g {
        AnchorGroup::RequestsTokens => true,
        AnchorGroup::Images => demand.images > 0,
        AnchorGroup::Videos => demand.videos > 0,
    }
}

fn group_has_tiers(policy: &Policy, g: AnchorGroup) -> bool {
    Policy::group_dimensions(g)
        .iter()
        .any(|&d| !policy.tiers(d).is_empty())
}

impl ScopeState {
    /// One all-or-nothing admission decision at `now` (W4). On success the demand is
    /// reserved in every tier, the amount and the rolling log; on failure nothing
    /// changes.
    pub(crate) fn admit(
        &mut self,
        policy: &Policy,
        demand: &Demand,
        now: Millis,
    ) -> Result<WindowTicket, Exceeded> {
        let exceeded = self.check(policy, demand, now);
        if !exceeded.is_empty() {
            return Err(Exceeded { limits: exceeded });
        }
        Ok(self.apply(policy, demand, now))
    }

    /// Every limit the demand does not fit under at `now` (empty = admit).
    pub(crate) fn check(
        &self,
        policy: &Policy,
        demand: &Demand,
        now: Millis,
    ) -> Vec<ExceededLimit> {
        let mut out = Vec::new();
        for g in AnchorGroup::ALL {
            if !group_touched(g, demand) || !group_has_tiers(policy, g) {
                continue;
            }
            // A group with no state or nothing used in any current window starts fresh
            // at `now` (W2): every tier has its full limit.
            let state = self.groups[g.index()]
                .as_ref()
                .filter(|s| !s.is_empty_at(now));
            for &d in Policy::group_dimensions(g) {
                let (units, touched) = demand_of(d, demand);
                if !touched {
                    continue;
                }
                let need = units;
                for tier in policy.tiers(d) {
                    let (used, end) = match state {
                        Some(s) => {
                            let k = window_index(s.anchor, tier.window_ms, now);
                            let used = s.tier(d, tier.window_ms).map_or(0, |t| s.used_now(t, now));
                            (used, window_end(s.anchor, tier.window_ms, k))
                        }
                        None => (0, now.saturating_add(tier.window_ms)),
                    };
                    if used.saturating_add(need) > tier.limit {
                        out.push(ExceededLimit {
                            dimension: d,
                            tier: *tier,
                            used,
                            // After the reset the count is 0: the request fits then
                            // unless it is larger than the tier itself (W9).
                            retry_after_ms: (need <= tier.limit).then(|| end - now),
                        });
                    }
                }
            }
        }
        if let Some(cap) = policy.amount_cap {
            let committed = self.amount.spent.saturating_add(self.amount.reserved);
            if committed >= cap {
                out.push(ExceededLimit {
                    dimension: Dimension::Amount,
                    tier: Tier {
                        window_ms: 0,
                        limit: u64::try_from(cap).unwrap_or(0),
                    },
                    used: u64::try_from(committed).unwrap_or(0),
                    retry_after_ms: None,
                });
            }
        }
        if let Some(limit) = policy.rolling_rpm.filter(|&n| n > 0) {
            let count = self.rolling.count(now);
            if count >= limit as usize {
                // Room appears when the oldest start that keeps us at the limit leaves
                // the 60 s window.
                let in_window: Vec<Millis> = self
                    .rolling
                    .starts
                    .iter()
                    .copied()
                    .filter(|&t| t.saturating_add(ROLLING_WINDOW_MS) > now)
                    .collect();
                let leaving = in_window[count - limit as usize];
                out.push(ExceededLimit {
                    dimension: Dimension::RollingRequests,
                    tier: Tier {
                        window_ms: ROLLING_WINDOW_MS,
                        limit: u64::from(limit),
                    },
                    used: count as u64,
                    retry_after_ms: Some(leaving + ROLLING_WINDOW_MS - now),
                });
            }
        }
        out
    }

    fn apply(&mut self, policy: &Policy, demand: &Demand, now: Millis) -> WindowTicket {
        let mut anchors = [None; 3];
        for g in AnchorGroup::ALL {
            if !group_touched(g, demand) || !group_has_tiers(policy, g) {
                continue;
            }
            let slot = &mut self.groups[g.index()];
            if slot.as_ref().is_none_or(|s| s.is_empty_at(now)) {
                *slot = Some(GroupState {
                    anchor: now,
                    tiers: Vec::new(),
                });
            }
            let state = slot.as_mut().expect("just set");
            // Follow the policy's current tiers: keep counts of tiers that still exist,
            // forget removed ones, start added ones at 0.
            state.tiers.retain(|t| {
                policy
                    .tiers(t.dimension)
                    .iter()
                    .any(|p| p.window_ms == t.window_ms)
            });
            let anchor = state.anchor;
            for &d in Policy::group_dimensions(g) {
                let (units, _) = demand_of(d, demand);
                for tier in policy.tiers(d) {
                    let k = window_index(anchor, tier.window_ms, now);
                    let t = match state
                        .tiers
                        .iter_mut()
                        .position(|t| t.dimension == d && t.window_ms == tier.window_ms)
                    {
                        Some(i) => &mut state.tiers[i],
                        None => {
                            state.tiers.push(TierState {
                                dimension: d,
                                window_ms: tier.window_ms,
                                index: k,
                                used: 0,
                            });
                            state.tiers.last_mut().expect("just pushed")
                        }
                    };
                    if t.index != k {
                        t.index = k;
                        t.used = 0;
                    }
                    t.used = t.used.saturating_add(units);
                }
            }
            anchors[g.index()] = Some(anchor);
        }
        let amount = policy.amount_cap.is_some();
        let money = if amount {
            let m = demand.money.max(0);
            self.amount.reserved = self.amount.reserved.saturating_add(m);
            m
        } else {
            0
        };
        let rolling = policy.rolling_rpm.is_some_and(|n| n > 0);
        if rolling {
            self.rolling.purge(now);
            self.rolling.starts.push_back(now);
        }
        self.pending = self.pending.saturating_add(1);
        WindowTicket {
            admitted_at: now,
            anchors,
            demand: *demand,
            amount,
            money,
            rolling,
            fallback: false,
            borrowed: 0,
            id: 0,
        }
    }

    /// Settles an admitted request. Corrections go only to the windows the request was
    /// counted in; a window that has rolled (or a group that re-anchored) since is left
    /// alone (W5).
    pub(crate) fn settle(&mut self, ticket: &WindowTicket, outcome: Outcome, now: Millis) {
        let refund = matches!(outcome, Outcome::Refund);
        let usage = match outcome {
            Outcome::Completed(u) => u,
            Outcome::Refund => None,
        };
        for g in AnchorGroup::ALL {
            let (Some(anchor), Some(state)) =
                (ticket.anchors[g.index()], self.groups[g.index()].as_mut())
            else {
                continue;
            };
            if state.anchor != anchor {
                continue;
            }
            for t in state.tiers.iter_mut() {
                let k = window_index(anchor, t.window_ms, ticket.admitted_at);
                if t.index != k || window_index(anchor, t.window_ms, now) != k {
                    continue;
                }
                let reserved = demand_of(t.dimension, &ticket.demand).0;
                let actual = if refund {
                    0
                } else if t.dimension == Dimension::Tokens {
                    usage.map_or(reserved, |u| u.total_tokens())
                } else {
                    reserved
                };
                t.used = t.used.saturating_sub(reserved).saturating_add(actual);
            }
        }
        if ticket.amount {
            self.amount.reserved = self.amount.reserved.saturating_sub(ticket.money).max(0);
            if !refund {
                let cost = usage.and_then(|u| u.cost).unwrap_or(ticket.money);
                self.amount.spent = self.amount.spent.saturating_add(cost.max(0));
            }
        }
        self.pending = self.pending.saturating_sub(1);
        if ticket.rolling && refund {
            self.rolling.remove(ticket.admitted_at);
        }
    }

    /// True when dropping this state changes no future decision: every window empty,
    /// nothing spent or reserved, no recent start.
    pub(crate) fn is_idle(&self, now: Millis) -> bool {
        self.groups.iter().flatten().all(|g| g.is_empty_at(now))
            && self.amount == AmountState::default()
            && self.rolling.count(now) == 0
            && self.pending == 0
    }

    /// Used / limit / reset of every limit of `policy` at `now` (the usage view).
    pub(crate) fn view(&self, policy: &Policy, now: Millis) -> Vec<LimitView> {
        let mut out = Vec::new();
        for g in AnchorGroup::ALL {
            let state = self.groups[g.index()]
                .as_ref()
                .filter(|s| !s.is_empty_at(now));
            for &d in Policy::group_dimensions(g) {
                for tier in policy.tiers(d) {
                    let (used, resets_at) = match state {
                        Some(s) => {
                            let k = window_index(s.anchor, tier.window_ms, now);
                            let used = s.tier(d, tier.window_ms).map_or(0, |t| s.used_now(t, now));
                            (used, Some(window_end(s.anchor, tier.window_ms, k)))
                        }
                        None => (0, None),
                    };
                    out.push(LimitView {
                        dimension: d,
                        tier: *tier,
                        used,
                        resets_at,
                    });
                }
            }
        }
        if let Some(cap) = policy.amount_cap {
            out.push(LimitView {
                dimension: Dimension::Amount,
                tier: Tier {
                    window_ms: 0,
                    limit: u64::try_from(cap).unwrap_or(0),
                },
                used: u64::try_from(self.amount.spent.saturating_add(self.amount.reserved))
                    .unwrap_or(0),
                resets_at: None,
            });
        }
        if let Some(n) = policy.rolling_rpm.filter(|&n| n > 0) {
            out.push(LimitView {
                dimension: Dimension::RollingRequests,
                tier: Tier {
                    window_ms: ROLLING_WINDOW_MS,
                    limit: u64::from(n),
                },
                used: self.rolling.count(now) as u64,
                resets_at: None,
            });
        }
        out
    }
}

/// One line of the usage view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitView {
    /// The dimension.
    pub dimension: Dimension,
    /// The tier (amount: window 0, cap as limit).
    pub tier: Tier,
    /// Used in the current window (amount: spent + reserved).
    pub used: u64,
    /// End of the current window; `None` when nothing is used (the window starts at
    /// the next use) or the limit has no window.
    pub resets_at: Option<Millis>,
}
