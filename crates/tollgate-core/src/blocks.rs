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

/// Money and requests one billing block asks the shared store for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoneyAsk {
    /// Requests (the borrower's included).
    pub requests: u64,
    /// Money reserved in the request's budgets (the borrower's upper bound included).
    pub money: Money,
    /// Room the balance (less pending) and the key's spend cap must have beyond the
    /// block: `divisor` × `money`, so a block can never be what takes them to zero.
    pub headroom: Money,
}

impl BlockSizing {
    /// The billing block to borrow for `req`, or `None` where each request reserves in
    /// the shared store: a block is at most 1/`divisor` of every budget it draws on.
    pub fn money(&self, req: &BillingRequest) -> Option<MoneyAsk> {
        let m = req.money;
        if !self.money || m < 0 {
            return None;
        }
        let requests = u64::from(self.max_units);
        let by_budgets = req
            .budgets
            .iter()
            .map(|b| b.limit / self.divisor as Money)
            .min()
            .unwrap_or(Money::MAX);
        let money = m.saturating_mul(requests as Money).min(by_budgets);
        let headroom = money.saturating_mul(self.divisor as Money);
        // Amounts a store keeps exactly only (the Redis store: below 2^53).
        if money < m || headroom > crate::money::MAX_STORABLE_MONEY {
            return None;
        }
        Some(MoneyAsk {
            requests,
            money,
            headroom,
        })
    }
}

/// One borrowed block of a subject's windows.
#[derive(Clone, Debug)]
pub struct WindowBlock {
    id: u64,
    /// The shared store's ticket of the whole block (its demand: the block's tokens).
    shared: WindowTicket,
    requests: u64,
    /// Local time until which it admits.
    until: Millis,
    /// Requests admitted from it and not refunded.
    admitted: u64,
    /// Tokens committed: the estimates of requests in flight, the actual use of ended
    /// ones.
    tokens: u64,
    in_flight: u32,
    retired: bool,
    /// Given back with requests still in flight: those are counted in Redis as
    /// requests of their own now, and settle there.
    handed: bool,
}

impl WindowBlock {
    /// The block the shared store admitted as `shared` for `requests` requests, asked
    /// for at local time `asked_at`; the borrower's request, of `first`, is counted in
    /// it already.
    fn new(
        id: u64,
        shared: WindowTicket,
        requests: u64,
        policy: &Policy,
        first: &Demand,
        asked_at: Millis,
        sizing: &BlockSizing,
    ) -> Self {
        let at = shared.admitted_at;
        // What is left of the shortest window the block was counted in, at the shared
        // store's admission: from here, those windows end no earlier than `asked_at`
        // plus that.
        let left = shared.anchors[0].map_or(0, |anchor| {
            policy
                .requests
                .iter()
                .chain(&policy.tokens)
                .map(|t| {
                    window_end(anchor, t.window_ms, window_index(anchor, t.window_ms, at)) - at
                })
                .min()
                .unwrap_or(0)
        });
        let life = left.saturating_sub(WINDOW_MARGIN_MS).min(sizing.max_age_ms);
        Self {
            id,
            shared,
            requests,
            until: asked_at.saturating_add(life),
            admitted: 1,
            tokens: first.tokens,
            in_flight: 1,
            retired: life == 0,
            handed: false,
        }
    }

    fn ticket(&self, demand: &Demand) -> WindowTicket {
        WindowTicket {
            admitted_at: self.shared.admitted_at,
            anchors: self.shared.anchors,
            demand: *demand,
            amount: false,
            money: 0,
            rolling: false,
            fallback: false,
            borrowed: self.id,
        }
    }

    fn fits(&self, demand: &Demand, now: Millis) -> bool {
        !self.retired
            && !self.handed
            && now < self.until
            && self.admitted < self.requests
            && self.tokens.saturating_add(demand.tokens) <= self.shared.demand.tokens
    }

    fn take(&mut self, demand: &Demand) -> WindowTicket {
        self.admitted += 1;
        self.tokens = self.tokens.saturating_add(demand.tokens);
        self.in_flight += 1;
        // Every request handed out: it admits no more, and gives back its unused tokens
        // as soon as its last request ends.
        self.retired |= self.admitted >= self.requests;
        self.ticket(demand)
    }

    fn settle(&mut self, reserved: &Demand, outcome: Outcome) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Refund => {
                self.admitted = self.admitted.saturating_sub(1);
                self.tokens = self.tokens.saturating_sub(reserved.tokens);
            }
            Outcome::Completed(Some(u)) => {
                self.tokens = self
                    .tokens
                    .saturating_sub(reserved.tokens)
                    .saturating_add(u.total_tokens());
            }
            // Unknown: the estimate stands as the use (W5).
            Outcome::Completed(None) => {}
        }
    }

    fn spent(&self) -> bool {
        self.retired && self.in_flight == 0
    }

    fn give_back(&self, key: &str) -> GiveBack {
        GiveBack::Window {
            key: key.to_owned(),
            ticket: self.shared,
            requests: self.requests,
            used: self.admitted,
            outcome: Outcome::Completed(Some(Usage {
                input_tokens: self.tokens,
                ..Usage::default()
            })),
        }
    }
}

/// One borrowed block of a subject's slots (or a channel's capacity leases).
#[derive(Clone, Debug)]
pub struct SlotBlock {
    id: u64,
    /// The shared store's lease id the block's leases are named after.
    shared: LeaseId,
    size: u32,
    held: [u64; 4],
    count: u32,
    ttl: Millis,
    /// Local time until which it hands out leases.
    until: Millis,
    /// Local time by which its shared leases expire unless renewed.
    expires: Millis,
    renewing: bool,
    retired: bool,
    /// Its unheld leases were given back while some were still held: each of those is
    /// a lease of its own in Redis now, released and renewed there.
    handed: bool,
    /// The limit it was borrowed under: a block serves no other.
    limit: u32,
}

impl SlotBlock {
    fn new(
        id: u64,
        shared: LeaseId,
        (size, limit): (u32, u32),
        ttl: Millis,
        asked_at: Millis,
        sizing: &BlockSizing,
    ) -> Self {
        let mut held = [0u64; 4];
        held[0] = 1;
        Self {
            id,
            shared,
            size: size.min(MAX_BLOCK_UNITS),
            held,
            count: 1,
            ttl,
            until: asked_at.saturating_add(sizing.max_age_ms.min(ttl / 4)),
            expires: asked_at.saturating_add(ttl),
            renewing: false,
            retired: false,
            handed: false,
            limit,
        }
    }

    fn lease(&self, index: u32) -> LeaseId {
        BORROWED_LEASE | (self.id << 8) | LeaseId::from(index)
    }

    fn holds(&self, index: u32) -> bool {
        index < self.size && self.held[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    fn fits(&self, limit: u32, ttl: Millis, now: Millis) -> bool {
        !self.retired
            && !self.handed
            && now < self.until
            && ttl == self.ttl
            && limit == self.limit
            && self.count < self.size
    }

    fn take(&mut self) -> Option<LeaseId> {
        let index = (0..self.size).find(|&i| !self.holds(i))?;
        self.held[(index / 64) as usize] |= 1 << (index % 64);
        self.count += 1;
        Some(self.lease(index))
    }

    fn release(&mut self, index: u32) -> bool {
        if !self.holds(index) {
            return false;
        }
        self.held[(index / 64) as usize] &= !(1 << (index % 64));
        self.count -= 1;
        true
    }

    fn spent(&self) -> bool {
        self.retired && self.count == 0
    }

    fn give_back(&self, key: &str) -> GiveBack {
        GiveBack::Slots {
            key: key.to_owned(),
            shared: self.shared,
            size: self.size,
        }
    }

    /// The leases nobody holds, given back while some are held.
    fn hand_over(&mut self, key: &str) -> GiveBack {
        self.handed = true;
        GiveBack::SlotMembers {
            key: key.to_owned(),
            shared: self.shared,
            indices: (0..self.size).filter(|&i| !self.holds(i)).collect(),
        }
    }
}

/// One borrowed block of a books' money: one attempt in the shared store that reserved
/// the block's money in the request's budgets; the requests admitted from it settle
/// here and the block settles once, at the sum of their costs.
#[derive(Clone, Debug)]
pub struct MoneyBlock {
    id: u64,
    /// The block's own attempt in the shared store.
    attempt: AttemptRef,
    money: Money,
    requests: u64,
    until: Millis,
    admitted: u64,
    /// Upper bounds of the requests in flight.
    reserved: Money,
    /// Costs of the requests settled.
    cost: Money,
    in_flight: u32,
    retired: bool,
    /// Whether its costs are charged to the tenant's balance (else only the key's
    /// spend, or nothing for a subscription).
    to_tenant: bool,
    bills: bool,
    /// The borrower's request: books, key and budgets of every request of the block.
    req: BillingRequest,
}

impl MoneyBlock {
    fn fits(&self, money: Money, now: Millis) -> bool {
        !self.retired
            && now < self.until
            && self.admitted < self.requests
            && self
                .reserved
                .saturating_add(self.cost)
                .saturating_add(money)
                <= self.money
    }

    fn take(&mut self, money: Money) {
        self.admitted += 1;
        self.in_flight += 1;
        self.reserved = self.reserved.saturating_add(money);
        self.retired |= self.admitted >= self.requests;
    }

    fn spent(&self) -> bool {
        self.retired && self.in_flight == 0
    }

    fn give_back(&self) -> MoneyBack {
        MoneyBack {
            attempt: self.attempt.clone(),
            cost: self.cost,
        }
    }
}

/// A spent billing block: settle its attempt at `cost` (idempotent per attempt, so it
/// may be repeated until it lands).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoneyBack {
    /// The block's attempt.
    pub attempt: AttemptRef,
    /// What the requests admitted from it cost.
    pub cost: Money,
}

/// Outcome of [`Blocks::decide_money`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MoneyLocal {
    /// Admitted from a block: no call.
    Admitted,
    /// Ask the shared store for this block with the request (then
    /// [`Blocks::install_money`], or [`Blocks::abandon_money`]).
    Borrow(MoneyAsk),
    /// Ask the shared store for the request alone.
    Shared,
    /// A block for it is being borrowed: wait for it (or ask alone).
    Wait,
}

/// Outcome of [`Blocks::settle_money`] for an attempt admitted from a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MoneySettled {
    /// Settled here: the answer, and the block to give back if that ended it.
    Done(Option<AttemptState>, Option<MoneyBack>),
    /// Its result is unknown: it must be pending in the shared store, where an operator
    /// reconciles it. Reserve it there on its own (no checks: its block already holds
    /// its money) and settle it as pending; the block no longer counts it.
    ToPending(BillingRequest, Option<MoneyBack>),
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
    /// Settle it in the shared store as an ordinary ticket: its block was given back
    /// while it was in flight (or is not held here).
    Shared,
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

#[derive(Debug, Default)]
struct MoneyEntry {
    blocks: Vec<MoneyBlock>,
    borrowing: bool,
}

#[derive(Debug)]
struct LocalAttempt {
    key: String,
    block: u64,
    req: BillingRequest,
}

/// The billing block table key of `req`: requests that share it draw on the same
/// books, key, budgets and checks, so one block serves them all.
pub fn money_key(req: &BillingRequest) -> String {
    use std::fmt::Write;
    let mut k = String::new();
    let _ = write!(
        k,
        "{:?}|{}|{}|{}|{}|{:?}",
        req.books(),
        req.key.as_str(),
        req.bill_balance,
        req.tenant_expected,
        req.tenant.is_some(),
        req.spend_cap
    );
    for b in req.budgets.iter() {
        let _ = write!(k, "|{}:{}:{:?}", b.id, b.limit, b.period_ms);
    }
    k
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
            let e = self.slots.entry(s.key.to_owned()).or_default();
            retire_old_slots(e, now);
            e.blocks.iter().position(|b| b.fits(s.limit, s.ttl, now))
        });
        let mut window_ok = Vec::with_capacity(windows.len());
        for w in windows {
            let e = self.windows.entry(w.key.to_owned()).or_default();
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
            let e = self.slots.entry(part.key.to_owned()).or_default();
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
            let e = self.windows.entry(part.key.to_owned()).or_default();
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
            b.in_flight = b.in_flight.saturating_sub(1);
            if b.in_flight == 0 {
                e.blocks.swap_remove(i);
            }
            self.forget(key, true);
            return SettleLocal::Shared;
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

    /// Billing for `req` at `now` from a block of `key` ([`money_key`]), or what to ask.
    /// An attempt admitted here already is admitted again without counting twice.
    pub fn decide_money(&mut self, key: &str, req: &BillingRequest, now: Millis) -> MoneyLocal {
        let attempt = req.attempt_ref();
        if self.attempts.contains_key(&attempt) {
            return MoneyLocal::Admitted;
        }
        let Some(ask) = self.sizing.money(req) else {
            return MoneyLocal::Shared;
        };
        let money = req.money.max(0);
        let e = self.money.entry(key.to_owned()).or_default();
        if let Some(b) = e.blocks.iter_mut().find(|b| b.fits(money, now)) {
            b.take(money);
            let block = b.id;
            self.attempts.insert(
                attempt,
                LocalAttempt {
                    key: key.to_owned(),
                    block,
                    req: req.clone(),
                },
            );
            return MoneyLocal::Admitted;
        }
        if e.borrowing {
            return MoneyLocal::Wait;
        }
        e.borrowing = true;
        MoneyLocal::Borrow(ask)
    }

    /// The shared store reserved `ask` for `req` as the block attempt `block`, asked at
    /// `asked_at`: the block is installed with `req` admitted from it. Returns its
    /// retirement, for the caller's timer.
    pub fn install_money(
        &mut self,
        key: &str,
        req: &BillingRequest,
        block: AttemptRef,
        ask: MoneyAsk,
        asked_at: Millis,
    ) -> Retire {
        let id = self.next_id;
        self.next_id += 1;
        let money = req.money.max(0);
        let b = MoneyBlock {
            id,
            attempt: block,
            money: ask.money,
            requests: ask.requests,
            until: asked_at.saturating_add(self.sizing.max_age_ms),
            admitted: 1,
            reserved: money,
            cost: 0,
            in_flight: 1,
            retired: ask.requests <= 1,
            to_tenant: req.tenant.is_some() && req.bill_balance,
            bills: req.bill_balance,
            req: req.clone(),
        };
        let retire = Retire {
            key: key.to_owned(),
            block: id,
            kind: BlockKind::Money,
            at: b.until,
        };
        let e = self.money.entry(key.to_owned()).or_default();
        e.borrowing = false;
        e.blocks.push(b);
        self.attempts.insert(
            req.attempt_ref(),
            LocalAttempt {
                key: key.to_owned(),
                block: id,
                req: req.clone(),
            },
        );
        retire
    }

    /// The borrowing call for `key` failed or was refused.
    pub fn abandon_money(&mut self, key: &str) {
        if let Some(e) = self.money.get_mut(key) {
            e.borrowing = false;
            if e.blocks.is_empty() {
                self.money.remove(key);
            }
        }
    }

    /// True when `attempt` was admitted from a block here and is not settled yet.
    pub fn holds_attempt(&self, attempt: &AttemptRef) -> bool {
        self.attempts.contains_key(attempt)
    }

    /// Settles an attempt admitted from a block; `None` if it is not one of them (never
    /// admitted here, or settled already: settle it in the shared store, which answers
    /// for it).
    pub fn settle_money(
        &mut self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> Option<MoneySettled> {
        let local = self.attempts.remove(attempt)?;
        let e = self.money.get_mut(&local.key)?;
        let i = e.blocks.iter().position(|b| b.id == local.block)?;
        let b = &mut e.blocks[i];
        let money = local.req.money.max(0);
        b.in_flight = b.in_flight.saturating_sub(1);
        b.reserved = b.reserved.saturating_sub(money);
        let state = match outcome {
            BillingOutcome::Settled(cost) => {
                let cost = cost.max(0);
                b.cost = b.cost.saturating_add(cost);
                Some(AttemptState::Settled(cost))
            }
            BillingOutcome::Refund => {
                b.admitted = b.admitted.saturating_sub(1);
                Some(AttemptState::Refunded)
            }
            BillingOutcome::Pending => None,
        };
        let back = b.spent().then(|| e.blocks.swap_remove(i).give_back());
        if e.blocks.is_empty() && !e.borrowing {
            self.money.remove(&local.key);
        }
        Some(match outcome {
            BillingOutcome::Pending => MoneySettled::ToPending(local.req, back),
            _ => MoneySettled::Done(state, back),
        })
    }

    /// Retires billing block `block` of `key` (its timer went off).
    pub fn retire_money(&mut self, key: &str, block: u64) -> Option<MoneyBack> {
        let e = self.money.get_mut(key)?;
        let i = e.blocks.iter().position(|b| b.id == block)?;
        e.blocks[i].retired = true;
        let back = e.blocks[i]
            .spent()
            .then(|| e.blocks.swap_remove(i).give_back());
        if e.blocks.is_empty() && !e.borrowing {
            self.money.remove(key);
        }
        back
    }

    /// Corrects a shared account view of `tenant` and `key` for this instance's billing
    /// blocks: costs settled here are not charged there until the block settles, and
    /// the shared budgets hold a block's whole money, not only what its requests in
    /// flight hold.
    pub fn correct_account(
        &self,
        tenant: Option<&str>,
        key: &crate::subject::SubjectKey,
        view: &mut crate::billing::AccountView,
    ) {
        let books = crate::billing::Books::of(tenant, key);
        for b in self.money.values().flat_map(|e| &e.blocks) {
            if b.req.books() != books {
                continue;
            }
            if b.to_tenant {
                if let Some(balance) = view.balance.as_mut() {
                    *balance = balance.saturating_sub(b.cost);
                }
            }
            if b.bills && &b.req.key == key {
                view.key_spent = view.key_spent.saturating_add(b.cost);
            }
            for v in &mut view.budgets {
                if b.req.budgets.iter().any(|x| x.id == v.id) {
                    v.spent = v.spent.saturating_add(b.cost);
                    v.reserved = v
                        .reserved
                        .saturating_sub(b.money)
                        .saturating_add(b.reserved)
                        .max(0);
                }
            }
        }
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

/// What [`Blocks::retire`] needs of a window or slot block.
trait Retiring {
    fn id(&self) -> u64;
    fn handed(&self) -> bool;
    fn retire(&mut self);
    fn spent(&self) -> bool;
    fn give_back(&self, key: &str) -> GiveBack;
    /// Gives back what is unused while some is still in flight.
    fn hand_over(&mut self, key: &str) -> GiveBack;
}

impl Retiring for WindowBlock {
    fn id(&self) -> u64 {
        self.id
    }
    fn handed(&self) -> bool {
        self.handed
    }
    fn retire(&mut self) {
        self.retired = true;
    }
    fn spent(&self) -> bool {
        WindowBlock::spent(self)
    }
    fn give_back(&self, key: &str) -> GiveBack {
        WindowBlock::give_back(self, key)
    }
    fn hand_over(&mut self, key: &str) -> GiveBack {
        // The requests in flight count as used, with their estimates.
        self.handed = true;
        WindowBlock::give_back(self, key)
    }
}

impl Retiring for SlotBlock {
    fn id(&self) -> u64 {
        self.id
    }
    fn handed(&self) -> bool {
        self.handed
    }
    fn retire(&mut self) {
        self.retired = true;
    }
    fn spent(&self) -> bool {
        SlotBlock::spent(self)
    }
    fn give_back(&self, key: &str) -> GiveBack {
        SlotBlock::give_back(self, key)
    }
    fn hand_over(&mut self, key: &str) -> GiveBack {
        SlotBlock::hand_over(self, key)
    }
}

/// Retires block `id` of `blocks` (of `key`): all of it back if nothing is in flight,
/// else what is unused.
fn retire_in<B: Retiring>(blocks: &mut Vec<B>, id: u64, key: &str) -> Option<GiveBack> {
    let i = blocks.iter().position(|b| b.id() == id)?;
    let b = &mut blocks[i];
    if b.handed() {
        return None;
    }
    b.retire();
    Some(if b.spent() {
        blocks.swap_remove(i).give_back(key)
    } else {
        b.hand_over(key)
    })
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
mod tests {
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
            ..
        }) = back
        else {
            panic!("{back:?}")
        };
        assert_eq!((requests, used), (256, 2));
        let Outcome::Completed(Some(u)) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(u.total_tokens(), 20, "t2's estimate and t3's");
        assert_eq!(b.unused_window("w", 1), (0, 0));
        // The request in flight then settles in the shared store as an ordinary one.
        let done = Outcome::Completed(Some(Usage {
            input_tokens: 50,
            ..Usage::default()
        }));
        assert_eq!(b.settle("w", &t3, done), SettleLocal::Shared);
        assert!(b.is_empty());
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
        // An unknown result goes to the shared store as its own pending attempt.
        let Some(MoneySettled::ToPending(r, None)) =
            b.settle_money(&reqs[1].attempt_ref(), BillingOutcome::Pending)
        else {
            panic!()
        };
        assert_eq!(r.attempt, reqs[1].attempt);
        // Retired by its timer with one request in flight: settled when that one ends.
        assert_eq!(b.retire_money(&key, 1), None);
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
}
