//! Billing blocks: a books' money borrowed as one attempt, and the requests reserved and
//! settled from it (see the parent module).

use super::*;

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
    /// Of `cost`, what was sent to the shared store already as a part (see
    /// [`MoneyTick::Part`]).
    charged: Money,
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
/// may be repeated until it lands). Also a part of a block still in use (see
/// [`MoneyTick::Part`]): the cost of its requests ended so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoneyBack {
    /// The block's attempt.
    pub attempt: AttemptRef,
    /// What the requests admitted from it cost (all of them, or those ended so far):
    /// cumulative, so a part sent again or after a later one charges nothing twice.
    pub cost: Money,
}

/// Longest a settled request's cost waits in a billing block still in use before it is
/// charged to the shared books (as a [`MoneyTick::Part`]).
pub const MONEY_PART_EVERY_MS: Millis = 2_000;

/// What a billing block's timer finds (see [`Blocks::retire_money`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MoneyTick {
    /// Gone: it was settled when its last request ended.
    Gone,
    /// Spent now: settle it.
    Spent(MoneyBack),
    /// Requests still in flight (a long stream): charge the costs of the ended ones so
    /// far — cumulative — and look again in [`MONEY_PART_EVERY_MS`].
    Part(MoneyBack),
    /// Requests still in flight, nothing new to charge: look again then.
    Wait,
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

#[derive(Debug, Default)]
pub(super) struct MoneyEntry {
    pub(super) blocks: Vec<MoneyBlock>,
    pub(super) borrowing: bool,
}

#[derive(Debug)]
pub(super) struct LocalAttempt {
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
        let e = entry(&mut self.money, key);
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
            charged: 0,
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
        let e = entry(&mut self.money, key);
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

    /// Retires billing block `block` of `key` (its timer went off): it admits no more.
    /// Spent, it is settled; with requests still in flight, the costs of those that
    /// ended are charged as a part now, and again every [`MONEY_PART_EVERY_MS`] while
    /// it lasts, so each request's cost reaches the shared books within seconds of its
    /// end even when a long stream shares its block.
    pub fn retire_money(&mut self, key: &str, block: u64) -> MoneyTick {
        let Some(e) = self.money.get_mut(key) else {
            return MoneyTick::Gone;
        };
        let Some(i) = e.blocks.iter().position(|b| b.id == block) else {
            return MoneyTick::Gone;
        };
        let b = &mut e.blocks[i];
        b.retired = true;
        if !b.spent() {
            if b.cost == b.charged {
                return MoneyTick::Wait;
            }
            b.charged = b.cost;
            return MoneyTick::Part(b.give_back());
        }
        let back = e.blocks.swap_remove(i).give_back();
        if e.blocks.is_empty() && !e.borrowing {
            self.money.remove(key);
        }
        MoneyTick::Spent(back)
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
            // What the shared books do not hold yet: costs not sent as a part; the
            // block's money less those parts (each part released its cost there).
            let cost = b.cost.saturating_sub(b.charged);
            let held = b.money.saturating_sub(b.charged);
            if b.to_tenant {
                if let Some(balance) = view.balance.as_mut() {
                    *balance = balance.saturating_sub(cost);
                }
            }
            if b.bills && &b.req.key == key {
                view.key_spent = view.key_spent.saturating_add(cost);
            }
            for v in &mut view.budgets {
                if b.req.budgets.iter().any(|x| x.id == v.id) {
                    v.spent = v.spent.saturating_add(cost);
                    v.reserved = v
                        .reserved
                        .saturating_sub(held)
                        .saturating_add(b.reserved)
                        .max(0);
                }
            }
        }
    }
}
