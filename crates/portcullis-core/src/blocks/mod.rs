//! Quota blocks (D2, T3): decisions an instance takes in memory from a share of a
//! limit it borrowed from the shared store.
//!
//! A block is one admission in the shared store of many units at once: `k` requests
//! (and `K` tokens) of a subject's windows, or `k` leases of a subject's slots or a
//! channel's capacity. The instance then admits requests from the block without a
//! round trip until it is used up or too old, and gives back in one call what it did
//! not use once its last request has ended. The shared store counts the whole block
//! from the moment it is borrowed, so all instances together never admit more than a
//! limit. What a block costs is the opposite error, and it is bounded: requests refused
//! elsewhere while this instance holds units it does not use — at most one live block
//! per subject and instance (1/[`divisor`](BlockSizing::divisor) of the smallest limit
//! it counts against, at most [`max_units`](BlockSizing::max_units)), plus the unused
//! rest of retired blocks whose last request has not ended yet.
//!
//! Blocks are borrowed only where a limit is far from exhausted: none for a limit under
//! `divisor × min_units`, and near any limit the shared store grants a single unit
//! instead of the block (that decision is then exactly the unborrowed one). Only plain
//! counted limits are borrowed — request and token tiers, slots and capacity: a policy
//! with an amount cap, a rolling window or image / video tiers is decided in the shared
//! store request by request, and so is every rejection (its Retry-After and the limit
//! it names come from the shared counts).
//!
//! A window block admits only while every window it was counted in is still current
//! (seen from this instance, with the time taken *before* the borrowing call, so never
//! later than the shared store's own windows end), and for [`max_age_ms`] at most, which
//! bounds how stale the shared counts are. A slot block hands out leases for a quarter
//! of the lease TTL at most, so every lease it gives has three quarters of a TTL of
//! shared life left; renewing any of its leases renews the whole block in one call.
//!
//! Everything here is plain data on a manual clock; the Redis store does the I/O.
//!
//! [`max_age_ms`]: BlockSizing::max_age_ms

use crate::billing::{AttemptRef, AttemptState, BillingOutcome, BillingRequest};
use crate::clock::Millis;
use crate::demand::{Demand, Usage};
use crate::money::Money;
use crate::policy::Policy;
use crate::slots::LeaseId;
use crate::window::{Outcome, WindowTicket, window_end, window_index};
use std::collections::HashMap;
use std::sync::Arc;

mod block;
mod money;
use block::retire_in;
pub use block::{SlotBlock, WindowBlock};
use money::{LocalAttempt, MoneyEntry};
pub use money::{
    MONEY_PART_EVERY_MS, MoneyAsk, MoneyBack, MoneyBlock, MoneyLocal, MoneySettled, MoneyTick,
    money_key,
};

/// Most units of one block (slot blocks keep their leases in a 256-bit set).
pub const MAX_BLOCK_UNITS: u32 = 256;

/// Marks a lease handed out from a slot block: bit 62 (the store's own lease ids are
/// below 2^62, the local fallback's carry bit 63).
pub const BORROWED_LEASE: LeaseId = 1 << 62;

/// How far a window block's admissions stay inside its windows, in ms: room for the
/// two clocks' rates to differ.
const WINDOW_MARGIN_MS: Millis = 5;

/// How big the blocks an instance borrows are, and how long they serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockSizing {
    /// Most units in one block (at most [`MAX_BLOCK_UNITS`]).
    pub max_units: u32,
    /// A block is at most 1/`divisor` of every limit it counts against.
    pub divisor: u64,
    /// A block of fewer units is not worth it: below, every decision is shared.
    pub min_units: u32,
    /// Longest a block admits requests, in ms.
    pub max_age_ms: Millis,
    /// Billing blocks too (default off): money reserved per block instead of per
    /// request. Costs reach the shared balances, spend and budgets when a block settles
    /// (within `max_age_ms` of its last request's end), and an instance that dies holding
    /// one leaves the block's whole money pending reconciliation, not only its requests'.
    pub money: bool,
}

impl Default for BlockSizing {
    fn default() -> Self {
        Self {
            max_units: MAX_BLOCK_UNITS,
            divisor: 64,
            min_units: 8,
            max_age_ms: 1_000,
            money: false,
        }
    }
}

/// Requests and tokens one window block asks the shared store for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAsk {
    /// Requests (the borrower's included).
    pub requests: u64,
    /// Tokens (the borrower's estimate included).
    pub tokens: u64,
}

impl BlockSizing {
    /// Sizing with these bounds (`max_units` clamped to [`MAX_BLOCK_UNITS`],
    /// `min_units` to at least 2, `divisor` to at least 1).
    pub fn new(max_units: u32, divisor: u64, min_units: u32, max_age_ms: Millis) -> Self {
        Self {
            max_units: max_units.min(MAX_BLOCK_UNITS),
            divisor: divisor.max(1),
            min_units: min_units.max(2),
            max_age_ms,
            money: false,
        }
    }

    /// The same sizing with billing blocks on or off.
    pub fn with_money(mut self, on: bool) -> Self {
        self.money = on;
        self
    }

    /// Leases of a slot block under `limit` (0 = unlimited) with leases of `ttl` ms, or
    /// `None` where no block is borrowed.
    pub fn slots(&self, limit: u32, ttl: Millis) -> Option<u32> {
        let by_limit = if limit == 0 {
            u64::from(self.max_units)
        } else {
            u64::from(limit) / self.divisor
        };
        let units = by_limit.min(u64::from(self.max_units)) as u32;
        // A block serves for a quarter of the TTL: a TTL too short to cover its
        // round trips is not worth one.
        (units >= self.min_units && ttl >= 40).then_some(units)
    }

    /// The block to borrow of `policy`'s windows for a request of `demand`, or `None`
    /// where every decision of it stays shared (see the module docs).
    pub fn window(&self, policy: &Policy, demand: &Demand) -> Option<BlockAsk> {
        let plain = policy.amount_cap.is_none()
            && policy.rolling_rpm.is_none_or(|n| n == 0)
            && policy.images.is_empty()
            && policy.videos.is_empty()
            && demand.images == 0
            && demand.videos == 0;
        if !plain || (policy.requests.is_empty() && policy.tokens.is_empty()) {
            return None;
        }
        let share = |tiers: &[crate::policy::Tier]| {
            tiers
                .iter()
                .map(|t| t.limit / self.divisor)
                .min()
                .unwrap_or(u64::MAX)
        };
        let requests = share(&policy.requests).min(u64::from(self.max_units));
        if requests < u64::from(self.min_units) {
            return None;
        }
        let tokens = demand
            .tokens
            .saturating_mul(requests)
            .min(share(&policy.tokens));
        // Room for at least `min_units` requests of this size in the tokens too.
        let enough = tokens >= demand.tokens.saturating_mul(u64::from(self.min_units));
        enough.then_some(BlockAsk { requests, tokens })
    }
}

/// The block id and index a borrowed lease names.
pub fn borrowed_lease(lease: LeaseId) -> Option<(u64, u32)> {
    (lease & BORROWED_LEASE != 0 && lease & (1 << 63) == 0)
        .then_some(((lease & !BORROWED_LEASE) >> 8, (lease & 0xff) as u32))
}

/// What the shared store must be told once a block is spent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GiveBack {
    /// Settle the block's shared ticket: `used` of its `requests` admitted, the tokens
    /// of `outcome` used.
    Window {
        /// The window state's key.
        key: String,
        /// The shared ticket.
        ticket: WindowTicket,
        /// Requests reserved.
        requests: u64,
        /// Requests used.
        used: u64,
        /// The tokens used (`Completed` with them as input tokens).
        outcome: Outcome,
        /// Requests still in flight, handed over to the shared store with the block
        /// (D9): each gets a record of its own there (`0..handed`), so that its later
        /// settlement is keyed too — sent again until it lands, counted once.
        handed: u32,
    },
    /// Release the shared leases `indices` of a block (those nobody holds).
    SlotMembers {
        /// The lease set's key.
        key: String,
        /// The shared lease id they are named after.
        shared: LeaseId,
        /// Their indices.
        indices: Vec<u32>,
    },
    /// Release the block's `size` shared leases.
    Slots {
        /// The lease set's key.
        key: String,
        /// The shared lease id they are named after.
        shared: LeaseId,
        /// Its leases.
        size: u32,
    },
}

/// One slot part of a joint decision.
#[derive(Clone, Copy, Debug)]
pub struct SlotPart<'a> {
    /// The lease set's key.
    pub key: &'a str,
    /// Most live leases (0 = unlimited).
    pub limit: u32,
    /// Lease TTL in ms.
    pub ttl: Millis,
}

/// One window part of a joint decision.
#[derive(Clone, Copy, Debug)]
pub struct WindowPart<'a> {
    /// The window state's key.
    pub key: &'a str,
    /// Its policy.
    pub policy: &'a Arc<Policy>,
    /// The request's demand.
    pub demand: &'a Demand,
}

/// A joint decision taken from blocks: the lease (when a slot was asked) and one ticket
/// per window part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalGrant {
    /// The borrowed lease.
    pub lease: Option<LeaseId>,
    /// The tickets, in part order.
    pub tickets: Vec<WindowTicket>,
}

/// What to ask the shared store for when the blocks could not decide: per part, the
/// block to borrow with this request, or a single unit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Borrow {
    /// Leases to ask for the slot part (1 = no block).
    pub slots: u32,
    /// Per window part, the block to ask for (`None` = this request alone).
    pub windows: Vec<Option<BlockAsk>>,
}

impl Borrow {
    /// True when nothing beyond the request itself is asked.
    pub fn is_single(&self) -> bool {
        self.slots <= 1 && self.windows.iter().all(Option::is_none)
    }
}

/// Outcome of [`Blocks::decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// Decided from blocks: no call.
    Granted(LocalGrant),
    /// Ask the shared store, borrowing as said (then [`Blocks::install`] what it
    /// granted, or [`Blocks::abandon`] on failure).
    Ask(Borrow),
    /// Not for blocks: ask the shared store as usual.
    Shared,
}

#[derive(Debug, Default)]
struct WindowEntry {
    policy: Option<Arc<Policy>>,
    blocks: Vec<WindowBlock>,
    borrowing: bool,
}

#[derive(Debug, Default)]
struct SlotEntry {
    blocks: Vec<SlotBlock>,
    borrowing: bool,
}

/// Answer of [`Blocks::settle`].
// Returned once per settlement and matched at once: moving it costs less than boxing
// the give-back would.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettleLocal {
    /// Settled here; the block to give back if that ended it.
    Done(Option<GiveBack>),
    /// Settle it in the shared store as an ordinary ticket: its block is not held
    /// here.
    Shared,
    /// Settle it in the shared store under the record `index` its block left for it
    /// when it was handed over with this request in flight (see
    /// [`GiveBack::Window::handed`]): the block's shared ticket `block` (its record's
    /// id), admitted as a block of `requests`.
    Handed {
        /// The id of the block's shared ticket.
        block: u64,
        /// Requests the block reserved (its record is a block's when above 1).
        requests: u64,
        /// This request's record among the handed ones.
        index: u32,
    },
}

/// Answer of [`Blocks::release`].
// As `SettleLocal`.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseLocal {
    /// Released here (or not held: nothing to do); the block to give back if that ended
    /// it.
    Done(Option<GiveBack>),
    /// Release shared lease `index` of the block named after `shared`: the block was
    /// given back while this lease was held.
    Member {
        /// The shared lease id the block's leases are named after.
        shared: LeaseId,
        /// This lease's index.
        index: u32,
    },
}

/// Answer of [`Blocks::renew`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenewLocal {
    /// Renew shared lease `index` of the block named after `shared` on its own (its
    /// block was given back while it was held).
    Member {
        /// The shared lease id the block's leases are named after.
        shared: LeaseId,
        /// This lease's index.
        index: u32,
    },
    /// Not a lease of a live block: it is gone.
    Gone,
    /// Held, and its block's shared leases live long enough.
    Alive,
    /// Held: renew block `block`'s `size` shared leases, named after `shared` (then
    /// [`Blocks::renewed`]).
    Renew {
        /// The block.
        block: u64,
        /// The shared lease id they are named after.
        shared: LeaseId,
        /// Its leases.
        size: u32,
    },
}

/// Every block one store instance holds, by the shared store's keys.
#[derive(Debug)]
pub struct Blocks {
    sizing: BlockSizing,
    next_id: u64,
    windows: HashMap<String, WindowEntry>,
    slots: HashMap<String, SlotEntry>,
    money: HashMap<String, MoneyEntry>,
    /// Attempts admitted from billing blocks: their block and request.
    attempts: HashMap<AttemptRef, LocalAttempt>,
}

impl Blocks {
    /// No blocks yet, sized by `sizing`.
    pub fn new(sizing: BlockSizing) -> Self {
        Self {
            sizing,
            next_id: 1,
            windows: HashMap::new(),
            slots: HashMap::new(),
            money: HashMap::new(),
            attempts: HashMap::new(),
        }
    }

    /// The sizing.
    pub fn sizing(&self) -> &BlockSizing {
        &self.sizing
    }

    /// One joint decision at local time `now`: the slot part (if any) and every window
    /// part from blocks, all or nothing. When some part has no block with room, the
    /// answer says which blocks to borrow with this request (each part at most one
    /// borrow in flight) and marks them borrowing; when a part is not for blocks, the
    /// whole decision is shared.
    pub fn decide(
        &mut self,
        slot: Option<SlotPart<'_>>,
        windows: &[WindowPart<'_>],
        now: Millis,
    ) -> Local {
        let sizing = self.sizing;
        let slot_units = match slot {
            Some(s) => match sizing.slots(s.limit, s.ttl) {
                Some(n) => Some(n),
                None => return Local::Shared,
            },
            None => None,
        };
        let mut asks = Vec::with_capacity(windows.len());
        for w in windows {
            match sizing.window(w.policy, w.demand) {
                Some(a) => asks.push(a),
                None => return Local::Shared,
            }
        }
        // Which parts a block can serve now.
        let slot_ok = slot.map(|s| {
            let e = entry(&mut self.slots, s.key);
            retire_old_slots(e, now);
            e.blocks.iter().position(|b| b.fits(s.limit, s.ttl, now))
        });
        let mut window_ok = Vec::with_capacity(windows.len());
        for w in windows {
            let e = entry(&mut self.windows, w.key);
            if e.policy.as_ref().is_some_and(|p| !same_policy(p, w.policy)) {
                // The policy changed: its blocks admit no more.
                e.blocks.iter_mut().for_each(|b| b.retired = true);
            }
            e.policy = Some(w.policy.clone());
            let fit = e.blocks.iter().position(|b| b.fits(w.demand, now));
            if fit.is_none() {
                // A block this request does not fit (its tokens ran short) admits no
                // more: one live block per subject, and its rest goes back at its timer.
                e.blocks.iter_mut().for_each(|b| b.retired = true);
            }
            window_ok.push(fit);
        }
        let all = slot_ok.is_none_or(|i| i.is_some()) && window_ok.iter().all(Option::is_some);
        if all {
            let lease = match (slot, slot_ok.flatten()) {
                (Some(s), Some(i)) => self.slots.get_mut(s.key).and_then(|e| e.blocks[i].take()),
                _ => None,
            };
            let tickets = windows
                .iter()
                .zip(&window_ok)
                .map(|(w, i)| {
                    let e = self.windows.get_mut(w.key).expect("entry made above");
                    e.blocks[i.expect("all fit")].take(w.demand)
                })
                .collect();
            return Local::Granted(LocalGrant { lease, tickets });
        }
        // Borrow where a part has no room and no borrow is under way.
        let mut borrow = Borrow {
            slots: 1,
            windows: vec![None; windows.len()],
        };
        if let (Some(s), Some(None), Some(n)) = (slot, slot_ok, slot_units) {
            let e = self.slots.get_mut(s.key).expect("entry made above");
            if !e.borrowing {
                e.borrowing = true;
                borrow.slots = n;
            }
        }
        for ((w, ok), (ask, out)) in windows
            .iter()
            .zip(&window_ok)
            .zip(asks.iter().zip(borrow.windows.iter_mut()))
        {
            let e = self.windows.get_mut(w.key).expect("entry made above");
            if ok.is_none() && !e.borrowing {
                e.borrowing = true;
                *out = Some(*ask);
            }
        }
        Local::Ask(borrow)
    }

    /// What the shared store granted for `borrow`, asked at `asked_at`: a slot block of
    /// `slots` leases (1 = a plain lease, no block) whose borrower's lease is
    /// `shared_lease`; per window part, the shared ticket and the requests it was
    /// counted for (1 = no block). Returns the lease and tickets the request holds (from
    /// the new blocks where one was granted) and the new blocks' ids with the local time
    /// each stops admitting, for the caller's retirement timers.
    #[allow(clippy::too_many_arguments)]
    pub fn install(
        &mut self,
        slot: Option<(SlotPart<'_>, u32, LeaseId)>,
        windows: &[(WindowPart<'_>, WindowTicket, u64)],
        borrow: &Borrow,
        asked_at: Millis,
    ) -> (Option<LeaseId>, Vec<WindowTicket>, Vec<Retire>) {
        let sizing = self.sizing;
        let mut retire = Vec::new();
        let mut singles: Vec<(&str, bool)> = Vec::new();
        let lease = slot.map(|(part, granted, shared)| {
            let e = entry(&mut self.slots, part.key);
            if borrow.slots > 1 {
                e.borrowing = false;
            }
            if granted <= 1 {
                singles.push((part.key, false));
                return shared;
            }
            let id = self.next_id;
            self.next_id += 1;
            let b = SlotBlock::new(
                id,
                shared,
                (granted, part.limit),
                part.ttl,
                asked_at,
                &sizing,
            );
            let lease = b.lease(0);
            retire.push(Retire {
                key: part.key.to_owned(),
                block: id,
                kind: BlockKind::Slots,
                at: b.until,
            });
            e.blocks.push(b);
            lease
        });
        let mut tickets = Vec::with_capacity(windows.len());
        for (i, (part, ticket, granted)) in windows.iter().enumerate() {
            let e = entry(&mut self.windows, part.key);
            if borrow.windows.get(i).is_some_and(Option::is_some) {
                e.borrowing = false;
            }
            if *granted <= 1 {
                tickets.push(*ticket);
                singles.push((part.key, true));
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            let b = WindowBlock::new(
                id,
                *ticket,
                *granted,
                part.policy,
                part.demand,
                asked_at,
                &sizing,
            );
            let mut b = b;
            // Counted under the policy the request was asked with: if the policy changed
            // while the borrow was under way, the block serves no other request.
            if e.policy
                .as_ref()
                .is_some_and(|p| !same_policy(p, part.policy))
            {
                b.retired = true;
            }
            tickets.push(b.ticket(part.demand));
            retire.push(Retire {
                key: part.key.to_owned(),
                block: id,
                kind: BlockKind::Window,
                at: b.until,
            });
            e.blocks.push(b);
        }
        for (key, window) in singles {
            self.forget(key, window);
        }
        (lease, tickets, retire)
    }

    /// The borrowing call failed or was refused: clear the parts' borrowing marks.
    pub fn abandon(&mut self, slot: Option<&str>, windows: &[&str], borrow: &Borrow) {
        if let Some(k) = slot.filter(|_| borrow.slots > 1) {
            if let Some(e) = self.slots.get_mut(k) {
                e.borrowing = false;
            }
            self.forget(k, false);
        }
        for (k, b) in windows.iter().zip(&borrow.windows) {
            if b.is_some() {
                if let Some(e) = self.windows.get_mut(*k) {
                    e.borrowing = false;
                }
                self.forget(k, true);
            }
        }
    }

    /// Settles a ticket handed out from a block of `key`: here, giving back the block if
    /// that was its last request; or, for a block already given back with the ticket
    /// in flight (or a block unknown here), in the shared store as an ordinary ticket.
    pub fn settle(&mut self, key: &str, ticket: &WindowTicket, outcome: Outcome) -> SettleLocal {
        let Some(e) = self.windows.get_mut(key) else {
            return SettleLocal::Shared;
        };
        let Some(i) = e.blocks.iter().position(|b| b.id == ticket.borrowed) else {
            return SettleLocal::Shared;
        };
        let b = &mut e.blocks[i];
        if b.handed {
            // The requests in flight at the hand-over settle in any order; each takes
            // the next of the records left for them.
            let index = b.handed_in_flight.saturating_sub(b.in_flight);
            let handed = SettleLocal::Handed {
                block: b.shared.id,
                requests: b.requests,
                index,
            };
            b.in_flight = b.in_flight.saturating_sub(1);
            if b.in_flight == 0 {
                e.blocks.swap_remove(i);
            }
            self.forget(key, true);
            return handed;
        }
        b.settle(&ticket.demand, outcome);
        let back = b.spent().then(|| e.blocks.swap_remove(i).give_back(key));
        self.forget(key, true);
        SettleLocal::Done(back)
    }

    /// Releases a lease handed out from a slot block of `key`; releasing twice is
    /// harmless.
    pub fn release(&mut self, key: &str, lease: LeaseId) -> ReleaseLocal {
        let Some((block, index)) = borrowed_lease(lease) else {
            return ReleaseLocal::Done(None);
        };
        let Some(e) = self.slots.get_mut(key) else {
            return ReleaseLocal::Done(None);
        };
        let Some(i) = e.blocks.iter().position(|b| b.id == block) else {
            return ReleaseLocal::Done(None);
        };
        let b = &mut e.blocks[i];
        if !b.release(index) {
            return ReleaseLocal::Done(None);
        }
        let answer = if b.handed {
            let shared = b.shared;
            if b.count == 0 {
                e.blocks.swap_remove(i);
            }
            ReleaseLocal::Member { shared, index }
        } else {
            ReleaseLocal::Done(b.spent().then(|| e.blocks.swap_remove(i).give_back(key)))
        };
        self.forget(key, false);
        answer
    }

    /// Renewal of a borrowed lease to `ttl` at `now`.
    pub fn renew(&mut self, key: &str, lease: LeaseId, ttl: Millis, now: Millis) -> RenewLocal {
        let Some((block, index)) = borrowed_lease(lease) else {
            return RenewLocal::Gone;
        };
        let Some(b) = self
            .slots
            .get_mut(key)
            .and_then(|e| e.blocks.iter_mut().find(|b| b.id == block))
        else {
            return RenewLocal::Gone;
        };
        if !b.holds(index) {
            return RenewLocal::Gone;
        }
        if b.handed {
            return RenewLocal::Member {
                shared: b.shared,
                index,
            };
        }
        if b.expires <= now {
            return RenewLocal::Gone;
        }
        // Renewed as a whole whenever a tenth of a TTL has passed since it last was:
        // whatever the holders' renewal period, no lease of it lapses between two.
        let ttl = ttl.max(b.ttl);
        if b.renewing || b.expires.saturating_sub(now) >= ttl - ttl / 10 {
            return RenewLocal::Alive;
        }
        b.renewing = true;
        RenewLocal::Renew {
            block,
            shared: b.shared,
            size: b.size,
        }
    }

    /// A block renewal asked at `asked_at` ended: `live` when the shared leases were
    /// still there (now extended by `ttl`), false when they had expired (every lease of
    /// the block is gone: it hands out no more and its holders' renewals fail).
    pub fn renewed(
        &mut self,
        key: &str,
        block: u64,
        asked_at: Millis,
        ttl: Millis,
        live: Option<bool>,
    ) {
        let Some(b) = self
            .slots
            .get_mut(key)
            .and_then(|e| e.blocks.iter_mut().find(|b| b.id == block))
        else {
            return;
        };
        b.renewing = false;
        match live {
            Some(true) => b.expires = b.expires.max(asked_at.saturating_add(ttl)),
            Some(false) => {
                b.expires = 0;
                b.retired = true;
            }
            // The call failed: try again at the next renewal.
            None => {}
        }
    }

    /// Retires window or slot block `block` of `key` (its timer went off): it admits no
    /// more, and what it did not use goes back now — all of it when nothing of it is in
    /// flight; else a window block settles with its requests in flight counted as used
    /// (they settle in the shared store as ordinary requests from then on), a slot
    /// block releases the leases nobody holds (the held ones are released one by one).
    pub fn retire(&mut self, key: &str, block: u64, kind: BlockKind) -> Option<GiveBack> {
        let back = match kind {
            BlockKind::Money => return None,
            BlockKind::Window => retire_in(&mut self.windows.get_mut(key)?.blocks, block, key),
            BlockKind::Slots => retire_in(&mut self.slots.get_mut(key)?.blocks, block, key),
        };
        self.forget(key, kind == BlockKind::Window);
        back
    }

    /// Requests and tokens of `key`'s windows borrowed here and not (yet) used: what a
    /// usage view of this instance takes off the shared counts.
    /// Only blocks still admitting at `now` count: the windows of older ones may have
    /// rolled.
    pub fn unused_window(&self, key: &str, now: Millis) -> (u64, u64) {
        self.windows.get(key).map_or((0, 0), |e| {
            e.blocks
                .iter()
                .filter(|b| !b.retired && !b.handed && now < b.until)
                .fold((0, 0), |(r, t), b| {
                    (
                        r + b.requests.saturating_sub(b.admitted),
                        t + b.shared.demand.tokens.saturating_sub(b.tokens),
                    )
                })
        })
    }

    /// Leases of `key` borrowed here and not handed out.
    pub fn unused_slots(&self, key: &str) -> u32 {
        self.slots.get(key).map_or(0, |e| {
            e.blocks
                .iter()
                .filter(|b| !b.handed)
                .map(|b| b.size - b.count)
                .sum()
        })
    }

    /// Blocks held (live or retired with requests in flight).
    pub fn len(&self) -> usize {
        self.windows.values().map(|e| e.blocks.len()).sum::<usize>()
            + self.slots.values().map(|e| e.blocks.len()).sum::<usize>()
            + self.money.values().map(|e| e.blocks.len()).sum::<usize>()
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn forget(&mut self, key: &str, window: bool) {
        if window {
            if self
                .windows
                .get(key)
                .is_some_and(|e| e.blocks.is_empty() && !e.borrowing)
            {
                self.windows.remove(key);
            }
        } else if self
            .slots
            .get(key)
            .is_some_and(|e| e.blocks.is_empty() && !e.borrowing)
        {
            self.slots.remove(key);
        }
    }
}

/// The entry of `key`, made if missing: a lookup by `&str`, so the key is copied only
/// when an entry is made, not at every decision.
fn entry<'m, V: Default>(map: &'m mut HashMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).expect("just made")
}

fn same_policy(a: &Arc<Policy>, b: &Arc<Policy>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// A new block's retirement, for the caller's timer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retire {
    /// Its key.
    pub key: String,
    /// The block.
    pub block: u64,
    /// What it holds.
    pub kind: BlockKind,
    /// Local time it stops admitting.
    pub at: Millis,
}

/// What a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// Requests and tokens of a subject's windows.
    Window,
    /// Leases of a subject's slots or a channel's capacity.
    Slots,
    /// Money of a books' budgets.
    Money,
}

fn retire_old_slots(e: &mut SlotEntry, now: Millis) {
    for b in &mut e.blocks {
        if now >= b.until {
            b.retired = true;
        }
    }
}

#[cfg(test)]
mod tests;
