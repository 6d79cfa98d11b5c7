//! Money: balances, key spend, budgets and per-attempt settlement (B1–B7), as a
//! plain ledger that both stores run.
//!
//! Eligibility is decided at request start (B1): a tenant whose balance (less what is
//! pending reconciliation) is ≤ 0, or a key whose spend (plus pending) has reached its
//! cap, is refused. Budgets (B3) reserve the request's money upper bound atomically and
//! settle to the real cost. Every attempt settles once, by its id (B4): settling the
//! same attempt again changes nothing. An attempt whose result is unknown stays
//! *pending*: its upper bound counts against balance, spend and budgets until it is
//! reconciled, and it is never written as zero. A request that starts with a positive
//! balance runs to completion, so a balance may end below zero (B2).
//!
//! **Books (D3).** Everything is kept per [`Books`]: the books of the request's tenant
//! (its balance, the spend of its keys, the budgets its requests draw on, its attempts),
//! or, for a request with no tenant, the books of its key. The Redis store puts one
//! books' keys on one Cluster slot, so every decision stays on one slot and tenants
//! spread over the nodes. A budget is therefore kept per books: a budget id named by
//! requests of two tenants is two budgets, one per tenant (give budgets ids unique
//! across tenants, as the proxy does). An attempt is named by an [`AttemptRef`] — its
//! id and its books — which the caller that settles already knows.
//!
//! **Bounded memory (D7, B7).** A settled or refunded attempt is forgotten at once: a
//! duplicate settlement then finds no attempt and does nothing, which is the idempotent
//! answer (the reservation it would have released is already gone). An open attempt
//! carries a deadline, its request's longest possible life
//! ([`BillingRequest::lifetime_ms`]); one still open after it (its instance died) is
//! swept into pending reconciliation at a later reservation in the same books, at most
//! [`SWEEP_BATCH`] per call, and its reservation is released from its budgets (its
//! upper bound then counts against the balance and the key's spend as pending money).
//! Pending attempts stay until reconciled.
//!
//! **Reconciliation (B7).** An operator lists the pending attempts ([`Ledger::pending_page`],
//! in a stable order, page by page) and settles one at its real cost or writes it off
//! ([`Ledger::reconcile`]): either releases what it held — its pending upper bound on the
//! balance and the key's spend, and its budget reservations unless the sweep already did —
//! exactly once; a second reconciliation finds nothing pending and changes nothing. Each
//! books keeps a [`PendingTotal`] counter (attempts and money pending reconciliation,
//! whoever pays), raised when an attempt goes pending and lowered when it is reconciled,
//! so reading the pending amount costs one read per books, not one per attempt.

use crate::clock::Millis;
use crate::money::Money;
use crate::subject::SubjectKey;
use std::collections::BTreeSet;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;

/// Identifies one attempt (one send to one channel).
pub type AttemptId = Arc<str>;

/// Whose books an attempt is kept in (D3): its tenant's, or for a request with no
/// tenant, its key's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Books {
    /// A tenant's books: its balance, its keys' spend, its budgets and attempts.
    Tenant(Arc<str>),
    /// The books of a key whose requests have no tenant.
    Key(SubjectKey),
}

impl Books {
    /// The books of a request of `tenant` (if any) under `key`.
    pub fn of(tenant: Option<&str>, key: &SubjectKey) -> Self {
        match tenant {
            Some(t) => Books::Tenant(t.into()),
            None => Books::Key(key.clone()),
        }
    }
}

/// An attempt and the books it was reserved in: what settling it needs (the billing
/// layer has it from the [`BillingRequest`]; [`Ledger::pending`] lists it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptRef {
    /// The attempt.
    pub attempt: AttemptId,
    /// Its books.
    pub books: Books,
}

/// Longest life of a request by default: an attempt still open an hour after it was
/// reserved is taken for lost (its instance died) and swept into pending
/// reconciliation (B7).
pub const DEFAULT_ATTEMPT_LIFETIME_MS: Millis = 3_600_000;

/// Most open attempts past their deadline that one reservation sweeps (B7): the sweep
/// is bounded work inside a decision.
pub const SWEEP_BATCH: usize = 16;

/// A money budget a request draws on (B3): per tenant, task or billing period.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Budget {
    /// Id, unique within the books it is kept in (see the module docs), e.g.
    /// `tenant:acme:monthly` or `task:nightly-eval`.
    pub id: Arc<str>,
    /// Most money spent + reserved per period.
    pub limit: Money,
    /// Period length; anchored at first use like the windows of W2. `None` = never
    /// resets.
    pub period_ms: Option<Millis>,
}

impl Budget {
    /// A budget `id` of `limit` per period of `period_ms` (`None` = never resets).
    pub fn new(id: impl Into<Arc<str>>, limit: Money, period_ms: Option<Millis>) -> Self {
        Self {
            id: id.into(),
            limit,
            period_ms,
        }
    }
}

/// What billing needs to decide on one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BillingRequest {
    /// The attempt.
    pub attempt: AttemptId,
    /// Whose balance pays; `None` = no balance check.
    pub tenant: Option<Arc<str>>,
    /// The key whose spend is counted.
    pub key: SubjectKey,
    /// The key's spend cap.
    pub spend_cap: Option<Money>,
    /// Budgets to reserve the upper bound in.
    pub budgets: Arc<[Budget]>,
    /// Money upper bound of the attempt.
    pub money: Money,
    /// False when a subscription covers the request (W8): the balance and the key's
    /// spend are neither checked nor charged (budgets still are).
    pub bill_balance: bool,
    /// Longest possible life of the attempt, in ms ([`DEFAULT_ATTEMPT_LIFETIME_MS`]):
    /// still open after it, it is swept into pending reconciliation (B7).
    pub lifetime_ms: Millis,
    /// The tenant is expected to have a billing record (the configuration names it with
    /// a balance): a missing record is [`Refusal::RecordMissing`], never a zero balance
    /// (B7).
    pub tenant_expected: bool,
}

impl BillingRequest {
    /// The books the attempt is kept in.
    pub fn books(&self) -> Books {
        Books::of(self.tenant.as_deref(), &self.key)
    }
    /// The attempt and its books, as settling it names them.
    pub fn attempt_ref(&self) -> AttemptRef {
        AttemptRef {
            attempt: self.attempt.clone(),
            books: self.books(),
        }
    }
}

/// Attempts and money pending reconciliation in one books (B7), whoever pays (the
/// balance, or a subscription): a counter raised when an attempt goes pending (an unknown
/// result, or the sweep) and lowered when it is settled or written off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingTotal {
    /// Attempts pending.
    pub attempts: u64,
    /// Their upper bounds, in minor units.
    pub amount: Money,
}

impl PendingTotal {
    fn add(&mut self, money: Money) {
        self.attempts = self.attempts.saturating_add(1);
        self.amount = self.amount.saturating_add(money);
    }
    /// Never below zero (an attempt that went pending before the store kept the
    /// counter is not in it).
    fn remove(&mut self, money: Money) {
        self.attempts = self.attempts.saturating_sub(1);
        self.amount = if self.attempts == 0 {
            0
        } else {
            self.amount.saturating_sub(money).max(0)
        };
    }
}

/// One attempt pending reconciliation, as an operator sees it (B7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAttempt {
    /// The attempt and its books.
    pub attempt: AttemptRef,
    /// Its upper bound, held pending.
    pub amount: Money,
    /// The key it ran under (`None` only for a record the store kept from before it
    /// stored keys with attempts).
    pub key: Option<SubjectKey>,
    /// Whether the balance and the key's spend pay for it (false: a subscription
    /// covered it, W8).
    pub billed_to_balance: bool,
    /// When it went pending, on the store's clock (`None`: not known).
    pub since: Option<Millis>,
}

impl PendingAttempt {
    /// Its place in the listing order: books, then attempt id.
    pub fn order(&self) -> (&Books, &AttemptId) {
        (&self.attempt.books, &self.attempt.attempt)
    }
}

/// True if `a` comes after the cursor `after` in the listing order (books, then
/// attempt id).
pub fn listed_after(a: &AttemptRef, after: Option<&AttemptRef>) -> bool {
    after.is_none_or(|c| (&a.books, &a.attempt) > (&c.books, &c.attempt))
}

/// What an operator does with an attempt pending reconciliation (B7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconcile {
    /// Settle it at this cost (minor units, ≥ 0): charged to the balance, the key's spend
    /// and its budgets like any settlement.
    Settle(Money),
    /// Write it off: release what it held and charge nothing.
    WriteOff,
}

/// The answer to a reconciliation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// It was pending and is now settled at `cost`.
    Settled {
        /// The attempt as it was pending.
        attempt: PendingAttempt,
        /// The cost charged.
        cost: Money,
    },
    /// It was pending and is now written off.
    WrittenOff {
        /// The attempt as it was pending.
        attempt: PendingAttempt,
    },
    /// It is still open (its request is in flight): not for an operator to settle.
    InFlight,
    /// Nothing pending under that name: never pending, or already reconciled (so a
    /// second reconciliation changes nothing).
    NotPending,
}

/// Longest a correction's marker is kept by default (B7): a day, the default
/// `[billing] correct_within` of the proxy. A caller that may correct later passes a
/// longer [`Correction::keep_ms`].
pub const DEFAULT_CORRECTION_KEEP_MS: Millis = 24 * 3_600_000;

/// Most expired correction markers one call sweeps (bounded work inside a decision).
pub const CORRECTION_SWEEP_BATCH: usize = 64;

/// A correction of a closed attempt's charge by a later, better report (B7): the
/// attempt was charged automatically (what a cut stream streamed, or its upper bound)
/// and its provider later reported its usage, whose price differs. The store knows
/// nothing of a closed attempt (final ones are forgotten), so the correction names what
/// the charge moved: the key, whether the balance paid, the budgets it drew on and when
/// it was charged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Correction {
    /// The attempt and its books.
    pub attempt: AttemptRef,
    /// The key whose spend it was charged to.
    pub key: SubjectKey,
    /// Whether the balance and the key's spend paid it (false: a subscription covered
    /// it, W8; only budgets move).
    pub bill_balance: bool,
    /// The budgets it was charged to: each moves only while the period it was charged in
    /// is still the current one (a budget whose period has rolled since keeps its new
    /// period's spend).
    pub budgets: Arc<[Budget]>,
    /// When it was charged, on the store's clock (ms).
    pub charged_at: Millis,
    /// New cost − what was charged (minor units; negative gives money back).
    pub difference: Money,
    /// How long the store remembers that the attempt was corrected (ms, > 0): at least
    /// as long as anyone may try to correct it again.
    pub keep_ms: Millis,
}

/// The answer to a [`Correction`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corrected {
    /// The difference moved the balance, the key's spend and the budgets; the attempt
    /// is marked corrected.
    Applied,
    /// The attempt was corrected already (by another instance, or a try whose answer
    /// was lost): nothing changed.
    AlreadyCorrected,
    /// The store still holds the attempt open or pending: not a closed charge to
    /// correct (a pending one is settled, not corrected). Nothing changed.
    NotClosed,
}

/// Why billing refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Balance ≤ 0.
    InsufficientBalance,
    /// Key spend cap reached.
    SpendCap,
    /// A budget cannot hold the upper bound.
    Budget(Arc<str>),
    /// The tenant's billing record is missing although the request expected it (B7):
    /// the store lost its data. A fail-closed 503, never a 402.
    RecordMissing,
}

/// Billing's answer at request start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BillingDecision {
    /// Go ahead; settle the attempt when it ends.
    Admitted,
    /// Refused; nothing was reserved.
    Refused(Refusal),
}

/// How an attempt ended, for billing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BillingOutcome {
    /// Known cost.
    Settled(Money),
    /// Unknown result: keep the reservation as pending reconciliation (B4).
    Pending,
    /// Never sent, or refused further in: release everything (L5).
    Refund,
}

/// The state an attempt ended in, as settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptState {
    /// Reserved, not settled yet.
    Open,
    /// Settled at this cost.
    Settled(Money),
    /// Pending reconciliation of this upper bound.
    Pending(Money),
    /// Released.
    Refunded,
}

/// A tenant's or key's money as the usage view shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountView {
    /// Tenant balance (may be below zero, B2).
    pub balance: Option<Money>,
    /// Tenant money pending reconciliation.
    pub tenant_pending: Money,
    /// Key spend.
    pub key_spent: Money,
    /// Key money pending reconciliation.
    pub key_pending: Money,
    /// Budgets: (id, limit, spent, reserved, period end).
    pub budgets: Vec<BudgetView>,
}

/// One budget in the usage view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetView {
    /// Budget id.
    pub id: Arc<str>,
    /// Limit.
    pub limit: Money,
    /// Spent in the current period.
    pub spent: Money,
    /// Reserved by attempts in flight or pending.
    pub reserved: Money,
    /// End of the current period, if it has one and has started.
    pub resets_at: Option<Millis>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Acct {
    money: Money,
    pending: Money,
}

#[derive(Clone, Copy, Debug, Default)]
struct BudgetState {
    start: Option<Millis>,
    spent: Money,
    reserved: Money,
}

impl BudgetState {
    /// Rolls the period forward (by whole periods) when it has ended; reservations of
    /// attempts still open carry over.
    fn roll(&mut self, period: Option<Millis>, now: Millis) {
        let (Some(p), Some(start)) = (period.filter(|&p| p > 0), self.start) else {
            return;
        };
        if now >= start + p {
            self.start = Some(start + (now - start) / p * p);
            self.spent = 0;
        }
    }

    /// Gives back a reservation of `money`: a period only it had started has not
    /// started (L5), judged on the current period (rolled first).
    fn release(&mut self, money: Money, period: Option<Millis>, now: Millis) {
        self.reserved = self.reserved.saturating_sub(money).max(0);
        self.roll(period, now);
        if self.spent == 0 && self.reserved == 0 {
            self.start = None;
        }
    }
}

#[derive(Clone, Debug)]
struct Attempt {
    /// Billed to the tenant's balance (a tenant, and `bill_balance`).
    to_tenant: bool,
    key: SubjectKey,
    budgets: Arc<[Budget]>,
    money: Money,
    bill_balance: bool,
    /// Open: swept into pending reconciliation once this has passed.
    deadline: Millis,
    /// The budgets no longer hold its reservation (swept, B7).
    released: bool,
    state: AttemptState,
    /// When it went pending.
    pending_since: Option<Millis>,
}

/// One books (D3): what one Redis Cluster slot holds.
#[derive(Debug, Default)]
struct Book {
    /// The tenant's record (tenant books only); `None` = missing.
    tenant: Option<Acct>,
    keys: HashMap<SubjectKey, Acct>,
    budgets: HashMap<Arc<str>, BudgetState>,
    /// Open and pending attempts (final ones are forgotten at once).
    attempts: HashMap<AttemptId, Attempt>,
    /// Open attempts by deadline, then id.
    open: BTreeSet<(Millis, AttemptId)>,
    /// Attempts pending reconciliation and their money.
    pending_total: PendingTotal,
    /// Attempts corrected (B7), until when the marker is kept.
    corrected: HashMap<AttemptId, Millis>,
    /// The same markers by expiry, then id: the sweep's work list.
    corrected_until: BTreeSet<(Millis, AttemptId)>,
}

impl Book {
    fn is_empty(&self) -> bool {
        self.tenant.is_none()
            && self.keys.is_empty()
            && self.attempts.is_empty()
            && self.corrected.is_empty()
            // A budget holds spend or reservations only once its period has started
            // (both start it), so an unstarted budget is an empty one.
            && self.budgets.values().all(|b| b.start.is_none())
    }

    /// Forgets up to [`CORRECTION_SWEEP_BATCH`] correction markers kept past their
    /// time.
    fn sweep_corrections(&mut self, now: Millis) {
        for _ in 0..CORRECTION_SWEEP_BATCH {
            match self.corrected_until.first() {
                Some((until, _)) if *until <= now => {}
                _ => break,
            }
            let (until, id) = self.corrected_until.pop_first().expect("first exists");
            if self.corrected.get(&id) == Some(&until) {
                self.corrected.remove(&id);
            }
        }
    }

    /// Sweeps up to [`SWEEP_BATCH`] open attempts whose deadline has passed into
    /// pending reconciliation, releasing their budget reservations (B7).
    fn sweep(&mut self, now: Millis) {
        self.sweep_corrections(now);
        for _ in 0..SWEEP_BATCH {
            match self.open.first() {
                Some((deadline, _)) if *deadline <= now => {}
                _ => break,
            }
            let (_, id) = self.open.pop_first().expect("first exists");
            let Some(a) = self.attempts.get_mut(&id) else {
                continue;
            };
            if a.state != AttemptState::Open {
                continue;
            }
            let money = a.money;
            if a.bill_balance {
                if a.to_tenant {
                    let t = self.tenant.get_or_insert_default();
                    t.pending = t.pending.saturating_add(money);
                }
                let k = self.keys.entry(a.key.clone()).or_default();
                k.pending = k.pending.saturating_add(money);
            }
            for b in a.budgets.iter() {
                self.budgets
                    .entry(b.id.clone())
                    .or_default()
                    .release(money, b.period_ms, now);
            }
            a.released = true;
            a.state = AttemptState::Pending(money);
            a.pending_since = Some(now);
            self.pending_total.add(money);
        }
    }
}

/// The books: balances, key spend, budgets, attempts, kept per [`Books`].
#[derive(Debug, Default)]
pub struct Ledger {
    books: HashMap<Books, Book>,
}

impl Ledger {
    fn tenant_book(&mut self, tenant: &str) -> &mut Book {
        self.books.entry(Books::Tenant(tenant.into())).or_default()
    }

    /// Sets a tenant's balance if it has no record yet (seeding from configuration
    /// must not reset a running balance). True if it was written, false if the tenant
    /// kept the record it had.
    pub fn seed_balance(&mut self, tenant: &str, amount: Money) -> bool {
        let b = self.tenant_book(tenant);
        if b.tenant.is_some() {
            return false;
        }
        b.tenant = Some(Acct {
            money: amount,
            pending: 0,
        });
        true
    }

    /// Sets `key`'s spend in `books` if it has no record there yet (seeding from the
    /// books at start must not reset a running spend). True if it was written.
    pub fn seed_key_spend(&mut self, books: &Books, key: &SubjectKey, spent: Money) -> bool {
        let b = self.books.entry(books.clone()).or_default();
        if b.keys.contains_key(key) {
            return false;
        }
        b.keys.insert(
            key.clone(),
            Acct {
                money: spent,
                pending: 0,
            },
        );
        true
    }

    /// Sets a tenant's balance explicitly (an operator's decision, e.g. after the
    /// store lost its data); money pending reconciliation is kept.
    pub fn set_balance(&mut self, tenant: &str, amount: Money) {
        self.tenant_book(tenant)
            .tenant
            .get_or_insert_default()
            .money = amount;
    }

    /// Adds to a tenant's balance; returns the new balance.
    pub fn credit(&mut self, tenant: &str, amount: Money) -> Money {
        let a = self.tenant_book(tenant).tenant.get_or_insert_default();
        a.money = a.money.saturating_add(amount);
        a.money
    }

    /// Eligibility and reservation at request start (B1, B3, B7). First sweeps the
    /// request's books (see the module docs). Re-admitting an attempt that is still
    /// open or pending reserves nothing twice.
    pub fn admit(&mut self, req: &BillingRequest, now: Millis) -> BillingDecision {
        let books = req.books();
        let d = self.admit_in(&books, req, now);
        if matches!(d, BillingDecision::Refused(_))
            && self.books.get(&books).is_some_and(Book::is_empty)
        {
            // A refusal in books nobody has written leaves nothing behind.
            self.books.remove(&books);
        }
        d
    }

    fn admit_in(&mut self, books: &Books, req: &BillingRequest, now: Millis) -> BillingDecision {
        let book = self.books.entry(books.clone()).or_default();
        book.sweep(now);
        if book.attempts.contains_key(&req.attempt) {
            return BillingDecision::Admitted;
        }
        if req.bill_balance {
            if req.tenant.is_some() {
                let a = match book.tenant {
                    None if req.tenant_expected => {
                        return BillingDecision::Refused(Refusal::RecordMissing);
                    }
                    a => a.unwrap_or_default(),
                };
                if a.money.saturating_sub(a.pending) <= 0 {
                    return BillingDecision::Refused(Refusal::InsufficientBalance);
                }
            }
            if let Some(cap) = req.spend_cap {
                let k = book.keys.get(&req.key).copied().unwrap_or_default();
                if k.money.saturating_add(k.pending) >= cap {
                    return BillingDecision::Refused(Refusal::SpendCap);
                }
            }
        }
        let money = req.money.max(0);
        for b in req.budgets.iter() {
            let s = book.budgets.entry(b.id.clone()).or_default();
            s.roll(b.period_ms, now);
            let committed = s.spent.saturating_add(s.reserved);
            if committed.saturating_add(money) > b.limit {
                return BillingDecision::Refused(Refusal::Budget(b.id.clone()));
            }
        }
        for b in req.budgets.iter() {
            let s = book.budgets.entry(b.id.clone()).or_default();
            s.start.get_or_insert(now);
            s.reserved = s.reserved.saturating_add(money);
        }
        let deadline = now.saturating_add(req.lifetime_ms);
        book.open.insert((deadline, req.attempt.clone()));
        book.attempts.insert(
            req.attempt.clone(),
            Attempt {
                to_tenant: req.tenant.is_some() && req.bill_balance,
                key: req.key.clone(),
                budgets: req.budgets.clone(),
                money,
                bill_balance: req.bill_balance,
                deadline,
                released: false,
                state: AttemptState::Open,
                pending_since: None,
            },
        );
        BillingDecision::Admitted
    }

    /// Settles an attempt. Idempotent: an unknown attempt (never reserved, or already
    /// settled or refunded, which forgets it) is left alone and `None` is returned; so
    /// is a pending one settled as pending again. A pending attempt may be settled
    /// later with its real cost (reconciliation).
    pub fn settle(
        &mut self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
        now: Millis,
    ) -> Option<AttemptState> {
        let book = self.books.get_mut(&attempt.books)?;
        let a = book.attempts.get(&attempt.attempt)?;
        let was_pending = matches!(a.state, AttemptState::Pending(_));
        if was_pending && outcome == BillingOutcome::Pending {
            return None;
        }
        let a = book.attempts.remove(&attempt.attempt).expect("present");
        book.open.remove(&(a.deadline, attempt.attempt.clone()));
        let money = a.money;
        let bill = a.bill_balance;
        if was_pending {
            book.pending_total.remove(money);
        }
        // Undo what "pending" counted.
        if was_pending && bill {
            if a.to_tenant {
                let t = book.tenant.get_or_insert_default();
                t.pending = t.pending.saturating_sub(money);
            }
            let k = book.keys.entry(a.key.clone()).or_default();
            k.pending = k.pending.saturating_sub(money);
        }
        let state = match outcome {
            BillingOutcome::Settled(cost) => {
                let cost = cost.max(0);
                if bill {
                    if a.to_tenant {
                        let t = book.tenant.get_or_insert_default();
                        t.money = t.money.saturating_sub(cost);
                    }
                    let k = book.keys.entry(a.key.clone()).or_default();
                    k.money = k.money.saturating_add(cost);
                }
                for b in a.budgets.iter() {
                    let s = book.budgets.entry(b.id.clone()).or_default();
                    if !a.released {
                        s.reserved = s.reserved.saturating_sub(money).max(0);
                    }
                    // Charged to the period it settles in.
                    s.roll(b.period_ms, now);
                    s.start.get_or_insert(now);
                    s.spent = s.spent.saturating_add(cost);
                }
                AttemptState::Settled(cost)
            }
            BillingOutcome::Pending => {
                if bill {
                    if a.to_tenant {
                        let t = book.tenant.get_or_insert_default();
                        t.pending = t.pending.saturating_add(money);
                    }
                    let k = book.keys.entry(a.key.clone()).or_default();
                    k.pending = k.pending.saturating_add(money);
                }
                book.pending_total.add(money);
                // Budgets keep the reservation; no longer open, so never swept.
                book.attempts.insert(
                    attempt.attempt.clone(),
                    Attempt {
                        state: AttemptState::Pending(money),
                        pending_since: Some(now),
                        ..a
                    },
                );
                return Some(AttemptState::Pending(money));
            }
            BillingOutcome::Refund => {
                if !a.released {
                    for b in a.budgets.iter() {
                        book.budgets.entry(b.id.clone()).or_default().release(
                            money,
                            b.period_ms,
                            now,
                        );
                    }
                }
                AttemptState::Refunded
            }
        };
        Some(state)
    }

    /// The state of an attempt, if it is open or pending (final ones are forgotten).
    pub fn attempt(&self, attempt: &AttemptRef) -> Option<AttemptState> {
        self.books
            .get(&attempt.books)?
            .attempts
            .get(&attempt.attempt)
            .map(|a| a.state)
    }

    /// Attempts held now (open or pending), over all books.
    #[cfg(test)]
    pub(crate) fn attempts_held(&self) -> usize {
        self.books.values().map(|b| b.attempts.len()).sum()
    }

    /// Attempts pending reconciliation, with their amounts.
    pub fn pending(&self) -> Vec<(AttemptRef, Money)> {
        let mut v: Vec<(AttemptRef, Money)> = self
            .books
            .iter()
            .flat_map(|(books, b)| {
                b.attempts.iter().filter_map(|(id, a)| match a.state {
                    AttemptState::Pending(m) => Some((
                        AttemptRef {
                            attempt: id.clone(),
                            books: books.clone(),
                        },
                        m,
                    )),
                    _ => None,
                })
            })
            .collect();
        v.sort();
        v
    }

    /// Up to `limit` attempts pending reconciliation that come after `after` in the
    /// listing order (books, then attempt id): one page of the operator's listing
    /// (B7). Pass the last attempt of a page to get the next one; an empty page is the
    /// end. Every attempt pending throughout a listing is on exactly one page.
    pub fn pending_page(&self, after: Option<&AttemptRef>, limit: usize) -> Vec<PendingAttempt> {
        let mut v: Vec<PendingAttempt> = self
            .books
            .iter()
            .filter(|(books, _)| after.is_none_or(|c| **books >= c.books))
            .flat_map(|(books, b)| {
                b.attempts.iter().filter_map(move |(id, a)| match a.state {
                    AttemptState::Pending(amount) => Some(PendingAttempt {
                        attempt: AttemptRef {
                            attempt: id.clone(),
                            books: books.clone(),
                        },
                        amount,
                        key: Some(a.key.clone()),
                        billed_to_balance: a.bill_balance,
                        since: a.pending_since,
                    }),
                    _ => None,
                })
            })
            .filter(|p| listed_after(&p.attempt, after))
            .collect();
        if v.len() > limit {
            v.select_nth_unstable_by(limit, |a, b| a.order().cmp(&b.order()));
            v.truncate(limit);
        }
        v.sort_by(|a, b| a.order().cmp(&b.order()));
        v
    }

    /// Settles a pending attempt at a cost, or writes it off (B7): releases what it held
    /// exactly once. An open attempt is left alone ([`Reconciled::InFlight`]: its request
    /// settles it); one not pending — never, or no longer — changes nothing
    /// ([`Reconciled::NotPending`]).
    pub fn reconcile(&mut self, attempt: &AttemptRef, how: Reconcile, now: Millis) -> Reconciled {
        let Some(a) = self
            .books
            .get(&attempt.books)
            .and_then(|b| b.attempts.get(&attempt.attempt))
        else {
            return Reconciled::NotPending;
        };
        let amount = match a.state {
            AttemptState::Pending(m) => m,
            AttemptState::Open => return Reconciled::InFlight,
            AttemptState::Settled(_) | AttemptState::Refunded => return Reconciled::NotPending,
        };
        let was = PendingAttempt {
            attempt: attempt.clone(),
            amount,
            key: Some(a.key.clone()),
            billed_to_balance: a.bill_balance,
            since: a.pending_since,
        };
        let outcome = match how {
            Reconcile::Settle(cost) => BillingOutcome::Settled(cost.max(0)),
            Reconcile::WriteOff => BillingOutcome::Refund,
        };
        match self.settle(attempt, outcome, now) {
            Some(AttemptState::Settled(cost)) => Reconciled::Settled { attempt: was, cost },
            Some(AttemptState::Refunded) => Reconciled::WrittenOff { attempt: was },
            _ => Reconciled::NotPending,
        }
    }

    /// Corrects a closed attempt's charge by [`Correction::difference`], exactly once
    /// (B7): the tenant's balance (when the balance paid) goes down by it, the key's
    /// spend up by it, and each budget's spend up by it (never below zero) while the
    /// period the charge fell in is still current; the attempt is marked corrected for
    /// [`Correction::keep_ms`]. A second correction of the same attempt within that time
    /// changes nothing ([`Corrected::AlreadyCorrected`]); an attempt the store still
    /// holds open or pending is not corrected ([`Corrected::NotClosed`]). Expired
    /// markers are swept, a bounded number per call.
    pub fn correct(&mut self, c: &Correction, now: Millis) -> Corrected {
        let book = self.books.entry(c.attempt.books.clone()).or_default();
        book.sweep_corrections(now);
        if book.corrected.contains_key(&c.attempt.attempt) {
            return Corrected::AlreadyCorrected;
        }
        if book.attempts.contains_key(&c.attempt.attempt) {
            return Corrected::NotClosed;
        }
        let d = c.difference;
        if c.bill_balance {
            if matches!(c.attempt.books, Books::Tenant(_)) {
                let t = book.tenant.get_or_insert_default();
                t.money = t.money.saturating_sub(d);
            }
            let k = book.keys.entry(c.key.clone()).or_default();
            k.money = k.money.saturating_add(d);
        }
        for b in c.budgets.iter() {
            let Some(s) = book.budgets.get_mut(&b.id) else {
                continue;
            };
            s.roll(b.period_ms, now);
            if s.start.is_some_and(|start| start <= c.charged_at) {
                s.spent = s.spent.saturating_add(d).max(0);
            }
        }
        let until = now.saturating_add(c.keep_ms.max(1));
        book.corrected.insert(c.attempt.attempt.clone(), until);
        book.corrected_until
            .insert((until, c.attempt.attempt.clone()));
        Corrected::Applied
    }

    /// Correction markers held now, over all books.
    #[cfg(test)]
    pub(crate) fn corrections_held(&self) -> usize {
        self.books.values().map(|b| b.corrected.len()).sum()
    }

    /// The pending counter of every books that has attempts pending (B7), in books
    /// order.
    pub fn pending_totals(&self) -> Vec<(Books, PendingTotal)> {
        let mut v: Vec<(Books, PendingTotal)> = self
            .books
            .iter()
            .filter(|(_, b)| b.pending_total != PendingTotal::default())
            .map(|(books, b)| (books.clone(), b.pending_total))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Money as the usage view shows it (in the books of `tenant`, or of `key` when
    /// there is none).
    pub fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
        now: Millis,
    ) -> AccountView {
        let book = self.books.get(&Books::of(tenant, key));
        let t = book.and_then(|b| b.tenant);
        let k = book
            .and_then(|b| b.keys.get(key))
            .copied()
            .unwrap_or_default();
        AccountView {
            balance: tenant.map(|_| t.unwrap_or_default().money),
            tenant_pending: t.map_or(0, |t| t.pending),
            key_spent: k.money,
            key_pending: k.pending,
            budgets: budgets
                .iter()
                .map(|b| {
                    let mut s = book
                        .and_then(|bk| bk.budgets.get(&b.id))
                        .copied()
                        .unwrap_or_default();
                    s.roll(b.period_ms, now);
                    BudgetView {
                        id: b.id.clone(),
                        limit: b.limit,
                        spent: s.spent,
                        reserved: s.reserved,
                        resets_at: b
                            .period_ms
                            .filter(|&p| p > 0)
                            .zip(s.start)
                            .map(|(p, st)| st + p),
                    }
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(attempt: &str, money: Money) -> BillingRequest {
        BillingRequest {
            attempt: attempt.into(),
            tenant: Some("acme".into()),
            key: "k".into(),
            spend_cap: None,
            budgets: Arc::from(vec![]),
            money,
            bill_balance: true,
            lifetime_ms: DEFAULT_ATTEMPT_LIFETIME_MS,
            tenant_expected: false,
        }
    }

    /// Attempt `a` in acme's books.
    fn r(a: &str) -> AttemptRef {
        AttemptRef {
            attempt: a.into(),
            books: Books::Tenant("acme".into()),
        }
    }

    #[test]
    fn d7_a_refusal_in_books_nobody_wrote_leaves_nothing_behind() {
        let mut l = Ledger::default();
        // A flood of requests for tenants with no record and no balance: each is
        // refused, and none leaves books behind.
        for t in ["ghost-1", "ghost-2", "ghost-3"] {
            let unknown = BillingRequest {
                tenant: Some(t.into()),
                ..req("a1", 5)
            };
            assert_eq!(
                l.admit(&unknown, 0),
                BillingDecision::Refused(Refusal::InsufficientBalance)
            );
        }
        assert!(l.books.is_empty());
        // Books someone wrote stay, refusal or not.
        l.seed_balance("acme", 0);
        l.admit(&req("a1", 5), 0);
        assert_eq!(l.books.len(), 1);
    }

    #[test]
    fn d7_a_refusal_keeps_books_whose_only_trace_is_a_budget_period() {
        let mut l = Ledger::default();
        let period = Budget::new("p", 100, Some(10_000));
        let small = Budget::new("small", 10, None);
        // Covered requests (W8) of a key without a tenant: only budgets are written.
        let covered = |a: &str, money, b: &Budget| BillingRequest {
            tenant: None,
            bill_balance: false,
            budgets: Arc::from(vec![b.clone()]),
            ..req(a, money)
        };
        let books = Books::of(None, &"k".into());
        // A refusal in books nobody wrote leaves nothing, budget entries included.
        assert_eq!(
            l.admit(&covered("a0", 50, &small), 0),
            BillingDecision::Refused(Refusal::Budget("small".into()))
        );
        assert!(l.books.is_empty());
        // A request that cost nothing still started the budget's period at 0 …
        assert_eq!(
            l.admit(&covered("a1", 5, &period), 0),
            BillingDecision::Admitted
        );
        let a1 = AttemptRef {
            attempt: "a1".into(),
            books,
        };
        l.settle(&a1, BillingOutcome::Settled(0), 0);
        // … and a refusal in the same books must not forget it.
        assert_eq!(
            l.admit(&covered("a2", 50, &small), 1),
            BillingDecision::Refused(Refusal::Budget("small".into()))
        );
        let v = l.account(None, &"k".into(), &[period], 1);
        assert_eq!(v.budgets[0].resets_at, Some(10_000));
    }

    #[test]
    fn b3_a_budget_with_a_zero_period_never_resets() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1000);
        let budget = Budget::new("b", 100, Some(0));
        let with_budget = |a: &str| BillingRequest {
            budgets: Arc::from(vec![budget.clone()]),
            ..req(a, 60)
        };
        assert_eq!(l.admit(&with_budget("a1"), 0), BillingDecision::Admitted);
        l.settle(&r("a1"), BillingOutcome::Settled(60), 1);
        // Much later, the budget still holds what was spent: a zero period is no period.
        assert_eq!(
            l.admit(&with_budget("a2"), 1_000_000),
            BillingDecision::Refused(Refusal::Budget("b".into()))
        );
        let v = l.account(Some("acme"), &"k".into(), &[budget], 1_000_000);
        assert_eq!((v.budgets[0].spent, v.budgets[0].resets_at), (60, None));
    }

    #[test]
    fn b1_balance_at_or_below_zero_is_refused() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 0);
        assert_eq!(
            l.admit(&req("a1", 5), 0),
            BillingDecision::Refused(Refusal::InsufficientBalance)
        );
        l.credit("acme", 1);
        assert_eq!(l.admit(&req("a1", 5), 0), BillingDecision::Admitted);
    }

    #[test]
    fn b2_positive_start_runs_to_completion_and_may_end_below_zero() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 10);
        assert_eq!(l.admit(&req("a1", 100), 0), BillingDecision::Admitted);
        assert_eq!(
            l.settle(&r("a1"), BillingOutcome::Settled(37), 1),
            Some(AttemptState::Settled(37))
        );
        let v = l.account(Some("acme"), &"k".into(), &[], 1);
        assert_eq!(v.balance, Some(-27));
        assert_eq!(v.key_spent, 37);
        assert_eq!(
            l.admit(&req("a2", 1), 2),
            BillingDecision::Refused(Refusal::InsufficientBalance)
        );
    }

    #[test]
    fn b1_spend_cap_counts_spend_and_pending() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1000);
        let capped = |a: &str| BillingRequest {
            spend_cap: Some(50),
            ..req(a, 30)
        };
        assert_eq!(l.admit(&capped("a1"), 0), BillingDecision::Admitted);
        l.settle(&r("a1"), BillingOutcome::Pending, 0);
        assert_eq!(l.admit(&capped("a2"), 0), BillingDecision::Admitted);
        l.settle(&r("a2"), BillingOutcome::Settled(20), 0);
        // 20 spent + 30 pending = 50 = cap.
        assert_eq!(
            l.admit(&capped("a3"), 0),
            BillingDecision::Refused(Refusal::SpendCap)
        );
    }

    #[test]
    fn b4_settlement_is_idempotent_per_attempt() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 100);
        l.admit(&req("a1", 10), 0);
        assert!(l.settle(&r("a1"), BillingOutcome::Settled(7), 0).is_some());
        assert_eq!(l.settle(&r("a1"), BillingOutcome::Settled(7), 0), None);
        assert_eq!(l.settle(&r("a1"), BillingOutcome::Refund, 0), None);
        assert_eq!(l.settle(&r("never"), BillingOutcome::Settled(7), 0), None);
        // A re-admission of a known attempt reserves nothing twice.
        assert_eq!(l.admit(&req("a1", 10), 0), BillingDecision::Admitted);
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &[], 0).balance,
            Some(93)
        );
    }

    #[test]
    fn b4_unknown_result_stays_pending_until_reconciled() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 100);
        l.admit(&req("a1", 40), 0);
        assert_eq!(
            l.settle(&r("a1"), BillingOutcome::Pending, 0),
            Some(AttemptState::Pending(40))
        );
        let v = l.account(Some("acme"), &"k".into(), &[], 0);
        assert_eq!(
            (v.balance, v.tenant_pending, v.key_pending),
            (Some(100), 40, 40)
        );
        assert_eq!(l.pending(), vec![(r("a1"), 40)]);
        // Reconciled with the real cost.
        assert_eq!(
            l.settle(&r("a1"), BillingOutcome::Settled(25), 0),
            Some(AttemptState::Settled(25))
        );
        let v = l.account(Some("acme"), &"k".into(), &[], 0);
        assert_eq!(
            (v.balance, v.tenant_pending, v.key_spent, v.key_pending),
            (Some(75), 0, 25, 0)
        );
        assert!(l.pending().is_empty());
    }

    #[test]
    fn b3_budget_reserves_upper_bound_and_settles_to_cost() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1_000_000);
        let budget = Arc::from(vec![Budget {
            id: "task:x".into(),
            limit: 100,
            period_ms: Some(1000),
        }]);
        let b = |a: &str, m| BillingRequest {
            budgets: Arc::clone(&budget),
            ..req(a, m)
        };
        assert_eq!(l.admit(&b("a1", 60), 0), BillingDecision::Admitted);
        assert_eq!(
            l.admit(&b("a2", 60), 0),
            BillingDecision::Refused(Refusal::Budget("task:x".into())),
            "60 reserved + 60 > 100"
        );
        l.settle(&r("a1"), BillingOutcome::Settled(10), 0);
        assert_eq!(l.admit(&b("a2", 60), 0), BillingDecision::Admitted);
        l.settle(&r("a2"), BillingOutcome::Refund, 0);
        let v = l.account(Some("acme"), &"k".into(), &budget, 0);
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (10, 0));
        // The period rolls: spend starts again.
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &budget, 1000).budgets[0].spent,
            0
        );
    }

    #[test]
    fn l5_refused_request_leaves_no_trace_on_a_later_refund() {
        // A refused request must change nothing (L5): whether one came in between or not,
        // the refund of the last reservation in a new, empty period behaves the same.
        let budget: Arc<[Budget]> = Arc::from(vec![Budget {
            id: "p".into(),
            limit: 100,
            period_ms: Some(4_000),
        }]);
        let b = |a: &str, m| BillingRequest {
            budgets: Arc::clone(&budget),
            ..req(a, m)
        };
        let run = |refused_in_between: bool| {
            let mut l = Ledger::default();
            l.seed_balance("acme", 1_000);
            l.admit(&b("a1", 10), 0);
            l.settle(&r("a1"), BillingOutcome::Settled(10), 0);
            l.admit(&b("a2", 10), 1_000);
            if refused_in_between {
                assert!(matches!(
                    l.admit(&b("a3", 1_000), 5_000),
                    BillingDecision::Refused(Refusal::Budget(_))
                ));
            }
            l.settle(&r("a2"), BillingOutcome::Refund, 6_000);
            l.account(Some("acme"), &"k".into(), &budget, 7_000).budgets[0].resets_at
        };
        assert_eq!(run(true), run(false));
    }

    #[test]
    fn w8_subscription_covered_request_ignores_balance() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 0);
        let covered = BillingRequest {
            bill_balance: false,
            ..req("a1", 10)
        };
        assert_eq!(l.admit(&covered, 0), BillingDecision::Admitted);
        l.settle(&r("a1"), BillingOutcome::Settled(10), 0);
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &[], 0).balance,
            Some(0)
        );
    }

    #[test]
    fn d7_final_attempts_are_forgotten_at_once() {
        let mut l = Ledger::default();
        l.seed_balance("acme", Money::MAX / 2);
        for i in 0..1000 {
            let id = format!("a{i}");
            l.admit(&req(&id, 1), 0);
            if i % 2 == 0 {
                l.settle(&r(&id), BillingOutcome::Settled(1), 0);
            } else {
                l.settle(&r(&id), BillingOutcome::Refund, 0);
            }
        }
        assert_eq!(l.attempts_held(), 0);
        assert!(l.books.values().all(|b| b.open.is_empty()));
        // A duplicate settlement finds nothing and charges nothing.
        assert_eq!(l.settle(&r("a0"), BillingOutcome::Settled(1), 0), None);
        assert_eq!(l.account(Some("acme"), &"k".into(), &[], 0).key_spent, 500);
    }

    #[test]
    fn b7_open_attempt_past_its_lifetime_is_swept_into_pending_and_releases_budgets() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1_000);
        let budget: Arc<[Budget]> = Arc::from(vec![Budget {
            id: "x".into(),
            limit: 100,
            period_ms: None,
        }]);
        let b = |a: &str, m| BillingRequest {
            budgets: Arc::clone(&budget),
            lifetime_ms: 1_000,
            ..req(a, m)
        };
        assert_eq!(l.admit(&b("dead", 80), 0), BillingDecision::Admitted);
        assert_eq!(
            l.admit(&b("a2", 30), 999),
            BillingDecision::Refused(Refusal::Budget("x".into()))
        );
        // Past its deadline: swept at the next reservation in the same books.
        assert_eq!(l.admit(&b("a2", 30), 1_000), BillingDecision::Admitted);
        assert_eq!(l.attempt(&r("dead")), Some(AttemptState::Pending(80)));
        assert_eq!(l.pending(), vec![(r("dead"), 80)]);
        let v = l.account(Some("acme"), &"k".into(), &budget, 1_000);
        assert_eq!(
            (v.balance, v.tenant_pending, v.key_pending),
            (Some(1_000), 80, 80)
        );
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (0, 30));
        // Reconciled later: charged, budgets not released twice.
        assert_eq!(
            l.settle(&r("dead"), BillingOutcome::Settled(50), 2_000),
            Some(AttemptState::Settled(50))
        );
        let v = l.account(Some("acme"), &"k".into(), &budget, 2_000);
        assert_eq!(
            (v.balance, v.tenant_pending, v.key_pending),
            (Some(950), 0, 0)
        );
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (50, 30));
        // A late settlement of the dead instance's attempt changes nothing.
        assert_eq!(
            l.settle(&r("dead"), BillingOutcome::Settled(50), 2_000),
            None
        );
    }

    #[test]
    fn b7_sweep_is_bounded_per_reservation() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1_000_000);
        for i in 0..(SWEEP_BATCH + 5) {
            let a = BillingRequest {
                lifetime_ms: 10,
                ..req(&format!("o{i:03}"), 1)
            };
            l.admit(&a, 0);
        }
        l.admit(&req("n1", 1), 100);
        assert_eq!(l.pending().len(), SWEEP_BATCH);
        l.admit(&req("n2", 1), 100);
        assert_eq!(l.pending().len(), SWEEP_BATCH + 5);
    }

    #[test]
    fn b7_missing_expected_tenant_record_is_not_a_zero_balance() {
        let mut l = Ledger::default();
        let expected = BillingRequest {
            tenant_expected: true,
            ..req("a1", 5)
        };
        assert_eq!(
            l.admit(&expected, 0),
            BillingDecision::Refused(Refusal::RecordMissing)
        );
        // Not expected: read as no balance, as before.
        assert_eq!(
            l.admit(&req("a1", 5), 0),
            BillingDecision::Refused(Refusal::InsufficientBalance)
        );
        l.set_balance("acme", 10);
        assert_eq!(l.admit(&expected, 0), BillingDecision::Admitted);
        assert!(!l.seed_balance("acme", 99), "kept");
        l.set_balance("acme", 7);
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &[], 0).balance,
            Some(7)
        );
    }

    #[test]
    fn d3_books_are_per_tenant_and_budgets_with_them() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 100);
        l.seed_balance("other", 100);
        let budget: Arc<[Budget]> = Arc::from(vec![Budget {
            id: "shared-id".into(),
            limit: 50,
            period_ms: None,
        }]);
        let b = |a: &str, t: &str| BillingRequest {
            tenant: Some(t.into()),
            budgets: Arc::clone(&budget),
            ..req(a, 40)
        };
        assert_eq!(l.admit(&b("a1", "acme"), 0), BillingDecision::Admitted);
        assert_eq!(l.admit(&b("a1", "other"), 0), BillingDecision::Admitted);
        // The same attempt id in the other books is another attempt.
        let other = AttemptRef {
            attempt: "a1".into(),
            books: Books::Tenant("other".into()),
        };
        assert_eq!(
            l.settle(&other, BillingOutcome::Settled(3), 0),
            Some(AttemptState::Settled(3))
        );
        assert_eq!(l.attempt(&r("a1")), Some(AttemptState::Open));
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &[], 0).balance,
            Some(100)
        );
        assert_eq!(
            l.account(Some("other"), &"k".into(), &[], 0).balance,
            Some(97)
        );
    }

    #[test]
    fn b7_reconcile_releases_a_pending_attempt_once_and_keeps_the_counter() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1_000);
        let budget: Arc<[Budget]> = Arc::from(vec![Budget {
            id: "x".into(),
            limit: 500,
            period_ms: None,
        }]);
        let b = |a: &str, m| BillingRequest {
            budgets: Arc::clone(&budget),
            ..req(a, m)
        };
        l.admit(&b("p1", 100), 0);
        l.admit(&b("p2", 60), 0);
        l.admit(&b("open", 10), 0);
        l.settle(&r("p1"), BillingOutcome::Pending, 5);
        l.settle(&r("p2"), BillingOutcome::Pending, 6);
        let acme = Books::Tenant("acme".into());
        assert_eq!(
            l.pending_totals(),
            vec![(
                acme.clone(),
                PendingTotal {
                    attempts: 2,
                    amount: 160
                }
            )]
        );
        assert_eq!(
            l.reconcile(&r("open"), Reconcile::Settle(1), 7),
            Reconciled::InFlight
        );
        let settled = l.reconcile(&r("p1"), Reconcile::Settle(70), 7);
        let Reconciled::Settled { attempt, cost } = settled else {
            panic!("{settled:?}")
        };
        assert_eq!((attempt.amount, attempt.since, cost), (100, Some(5), 70));
        assert_eq!(attempt.key, Some("k".into()));
        assert_eq!(
            l.reconcile(&r("p1"), Reconcile::Settle(70), 8),
            Reconciled::NotPending,
            "settling twice changes nothing"
        );
        assert_eq!(
            l.reconcile(&r("p1"), Reconcile::WriteOff, 8),
            Reconciled::NotPending
        );
        assert!(matches!(
            l.reconcile(&r("p2"), Reconcile::WriteOff, 9),
            Reconciled::WrittenOff { .. }
        ));
        assert!(l.pending_totals().is_empty());
        let v = l.account(Some("acme"), &"k".into(), &budget, 9);
        // 1000 − 70; the open attempt still holds its 10 in the budget.
        assert_eq!(
            (v.balance, v.tenant_pending, v.key_spent, v.key_pending),
            (Some(930), 0, 70, 0)
        );
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (70, 10));
    }

    #[test]
    fn b7_correction_markers_are_swept_after_their_keep() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1_000);
        let c = |a: &str| Correction {
            attempt: r(a),
            key: "k".into(),
            bill_balance: true,
            budgets: Arc::from(Vec::new()),
            charged_at: 0,
            difference: 1,
            keep_ms: 10,
        };
        for i in 0..100 {
            assert_eq!(l.correct(&c(&format!("c{i}")), 0), Corrected::Applied);
        }
        assert_eq!(l.corrections_held(), 100);
        assert_eq!(l.correct(&c("c0"), 9), Corrected::AlreadyCorrected);
        // Past their keep: each call forgets a bounded batch, a reservation too.
        assert_eq!(l.correct(&c("new"), 10), Corrected::Applied);
        assert_eq!(l.corrections_held(), 101 - CORRECTION_SWEEP_BATCH);
        assert_eq!(l.admit(&req("a1", 1), 20), BillingDecision::Admitted);
        assert_eq!(l.corrections_held(), 0);
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &[], 20).balance,
            Some(1_000 - 101)
        );
    }

    #[test]
    fn b7_pending_pages_list_every_attempt_once_in_books_then_id_order() {
        let mut l = Ledger::default();
        let mut all = Vec::new();
        for t in ["b", "a", "c"] {
            l.seed_balance(t, 1_000_000);
            for i in [3, 1, 2, 10] {
                let id = format!("{t}{i}");
                l.admit(
                    &BillingRequest {
                        tenant: Some(t.into()),
                        ..req(&id, 1)
                    },
                    0,
                );
                let a = AttemptRef {
                    attempt: id.as_str().into(),
                    books: Books::Tenant(t.into()),
                };
                l.settle(&a, BillingOutcome::Pending, 0);
                all.push(a);
            }
        }
        all.sort_by(|a, b| (&a.books, &a.attempt).cmp(&(&b.books, &b.attempt)));
        let mut seen = Vec::new();
        let mut after: Option<AttemptRef> = None;
        for _ in 0..10 {
            let page = l.pending_page(after.as_ref(), 5);
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 5);
            after = page.last().map(|p| p.attempt.clone());
            seen.extend(page.into_iter().map(|p| p.attempt));
        }
        assert_eq!(seen, all);
    }
}
