//! The two invariants every conformance case ends with, and every fault run too:
//!
//! - [`assert_nothing_held`] — **nothing held by nobody** (D9): once every request's
//!   guard is gone, no slot lease, no channel capacity lease, no window unit beyond what
//!   the requests that completed left counted, no money reserved by an attempt that is
//!   neither in flight for a live request nor pending reconciliation;
//! - [`assert_books_exact`] — **books exact** (D10): every balance moved by exactly the
//!   costs the store answered "settled" (and the credits and balances an operator
//!   wrote), every key's spend by exactly its settled costs, every attempt the store
//!   answered "pending" listed with its amount, and the pending money of every books
//!   and key, and its pending counter, exactly what the listing holds.
//!
//! Both read the store through its traits only, so one check serves the in-memory
//! store, Redis and a Redis Cluster. What to read is a [`Footprint`]: the subjects,
//! channels and windows a run touched, the window units it leaves counted on purpose,
//! and a [`Ledger`] of the store's billing answers. The suite's helpers fill the
//! footprint as a case goes (a case's store is a [`Case`]), so a case declares only
//! what the helpers cannot know — the units its completed requests leave in a window
//! ([`Footprint::counted`]); the fault runs fill one from their clients' answers.
use crate::billing::{
    AttemptRef, AttemptState, BillingDecision, BillingRequest, Books, Budget, PendingAttempt,
    PendingTotal, Reconcile, Reconciled,
};
use crate::capacity::CapacityStore;
use crate::clock::Millis;
use crate::money::Money;
use crate::policy::{Dimension, Policy};
use crate::store::MAX_PENDING_PAGE;
use crate::store::{
    BillingStore, ChannelStore, JointStore, ReconcileStore, SlotStore, WindowStore,
};
use crate::subject::{Scope, SubjectKey};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// A store with every store trait: what the suite and its checks run on.
pub trait Store: JointStore + ChannelStore + BillingStore + ReconcileStore {}

impl<S: JointStore + ChannelStore + BillingStore + ReconcileStore> Store for S {}

/// What a run touched and what its requests left: the input of [`assert_nothing_held`]
/// and [`assert_books_exact`].
#[derive(Clone, Debug, Default)]
pub struct Footprint {
    slots: BTreeSet<SubjectKey>,
    channels: BTreeSet<String>,
    windows: BTreeMap<(SubjectKey, Scope), Windows>,
    ledger: Ledger,
}

/// One subject's windows in one scope: the policies they were used with, and the
/// units declared counted at the end (every other line must read 0).
#[derive(Clone, Debug, Default)]
struct Windows {
    policies: Vec<Arc<Policy>>,
    counted: BTreeMap<(Dimension, Millis), u64>,
}

impl Footprint {
    /// Nothing touched yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `key`'s slot leases: none may be live at the end.
    pub fn slot(&mut self, key: &SubjectKey) -> &mut Self {
        self.slots.insert(key.clone());
        self
    }

    /// `channel`'s capacity leases: none may be live at the end.
    pub fn channel(&mut self, channel: &str) -> &mut Self {
        self.channels.insert(channel.to_owned());
        self
    }

    /// `key`'s windows in `scope`, read with `policy` at the end: every line reads 0
    /// unless [`counted`](Self::counted) says otherwise.
    pub fn window(&mut self, key: &SubjectKey, scope: Scope, policy: &Arc<Policy>) -> &mut Self {
        let w = self.windows.entry((key.clone(), scope)).or_default();
        if !w.policies.iter().any(|p| Arc::ptr_eq(p, policy)) {
            w.policies.push(policy.clone());
        }
        self
    }

    /// Declares what `key`'s windows in `scope` keep counted at the end, by (dimension,
    /// window length in ms — 0 for the amount cap, [`ROLLING_WINDOW_MS`] for the
    /// rolling window): the units of requests that completed (or whose tickets the run
    /// let go as completed), which no give-back may take away. Lines not declared read
    /// 0. The window must have been [used](Self::window).
    ///
    /// [`ROLLING_WINDOW_MS`]: crate::window::ROLLING_WINDOW_MS
    pub fn counted(
        &mut self,
        key: &SubjectKey,
        scope: Scope,
        lines: &[(Dimension, Millis, u64)],
    ) -> &mut Self {
        let w = self
            .windows
            .get_mut(&(key.clone(), scope))
            .unwrap_or_else(|| panic!("{key:?} {scope:?}: declared counted but never used"));
        for &(d, window_ms, n) in lines {
            w.counted.insert((d, window_ms), n);
        }
        self
    }

    /// The store's billing answers.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The store's billing answers, to record one.
    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }
}

/// The store's billing answers as a run received them — what the books must show.
///
/// Balances start where a seed (that was written), an explicit balance or a credit put
/// them (0 for a tenant first met by a credit or a charge) and move by exactly the costs
/// answered settled; a key's spend in its books is the sum of its settled costs.
/// Attempts are followed from their reservation to their end: open, pending (as
/// answered), or gone (settled, refunded, reconciled).
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    attempts: BTreeMap<AttemptRef, Attempt>,
    balances: BTreeMap<String, Money>,
    spend: BTreeMap<(Books, SubjectKey), Money>,
    budgets: BTreeMap<(Books, Arc<str>), (SubjectKey, Budget)>,
}

#[derive(Clone, Debug)]
struct Attempt {
    key: SubjectKey,
    billed: bool,
    money: Money,
    budgets: Arc<[Budget]>,
    life: Life,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Reserved, not settled (or swept by the store into pending: the listing tells).
    Open,
    /// Answered pending at settlement: listed with `amount`, its budget reservation
    /// kept until it is reconciled.
    Pending { amount: Money },
}

impl Ledger {
    /// A reservation and its answer: an admitted attempt is open (once: admitting a
    /// known attempt again reserves nothing twice).
    pub fn reserved(&mut self, req: &BillingRequest, decision: &BillingDecision) {
        if *decision != BillingDecision::Admitted {
            return;
        }
        let r = req.attempt_ref();
        for b in req.budgets.iter() {
            self.budgets
                .entry((r.books.clone(), b.id.clone()))
                .or_insert_with(|| (req.key.clone(), b.clone()));
        }
        if req.bill_balance {
            self.spend
                .entry((r.books.clone(), req.key.clone()))
                .or_insert(0);
        }
        self.attempts.entry(r).or_insert_with(|| Attempt {
            key: req.key.clone(),
            billed: req.bill_balance,
            money: req.money,
            budgets: req.budgets.clone(),
            life: Life::Open,
        });
    }

    /// A settlement of `attempt` and the store's answer.
    pub fn settled(&mut self, attempt: &AttemptRef, answer: Option<AttemptState>) {
        match answer {
            None | Some(AttemptState::Open) => {}
            Some(AttemptState::Refunded) => {
                self.attempts.remove(attempt);
            }
            Some(AttemptState::Pending(amount)) => {
                let a = self.known(attempt, "answered pending");
                a.life = Life::Pending { amount };
            }
            Some(AttemptState::Settled(cost)) => {
                let a = self.known(attempt, "answered settled").clone();
                self.attempts.remove(attempt);
                if a.billed {
                    self.charge(&attempt.books, &a.key, cost);
                }
            }
        }
    }

    /// An operator's reconciliation of `attempt` and the store's answer.
    pub fn reconciled(&mut self, attempt: &AttemptRef, answer: &Reconciled) {
        match answer {
            Reconciled::Settled { attempt: p, cost } => {
                let a = self.attempts.remove(attempt);
                if p.billed_to_balance {
                    let key = p
                        .key
                        .clone()
                        .or_else(|| a.map(|a| a.key))
                        .expect("a reconciled attempt's key");
                    self.charge(&attempt.books, &key, *cost);
                }
            }
            Reconciled::WrittenOff { .. } => {
                self.attempts.remove(attempt);
            }
            Reconciled::InFlight | Reconciled::NotPending => {}
        }
    }

    /// A correction of a closed attempt's charge and the store's answer (B7): applied,
    /// its difference is charged like a cost; otherwise nothing moved.
    pub fn corrected(&mut self, c: &crate::Correction, answer: crate::Corrected) {
        if answer == crate::Corrected::Applied && c.bill_balance {
            self.charge(&c.attempt.books, &c.key, c.difference);
        }
    }

    /// A seed of `tenant`'s balance and whether the store wrote it.
    pub fn seeded(&mut self, tenant: &str, amount: Money, written: bool) {
        if written {
            self.balances.insert(tenant.to_owned(), amount);
        }
    }

    /// A seed of `key`'s spend in `books` and whether the store wrote it.
    pub fn key_spend_seeded(
        &mut self,
        books: &Books,
        key: &SubjectKey,
        spent: Money,
        written: bool,
    ) {
        if written {
            self.spend.insert((books.clone(), key.clone()), spent);
        }
    }

    /// An explicit balance (an operator's).
    pub fn balance_set(&mut self, tenant: &str, amount: Money) {
        self.balances.insert(tenant.to_owned(), amount);
    }

    /// A credit (negative: a debit).
    pub fn credited(&mut self, tenant: &str, amount: Money) {
        *self.balances.entry(tenant.to_owned()).or_insert(0) += amount;
    }

    /// The balance the books must show for `tenant`, if the ledger knows it.
    pub fn balance(&self, tenant: &str) -> Option<Money> {
        self.balances.get(tenant).copied()
    }

    fn known(&mut self, attempt: &AttemptRef, what: &str) -> &mut Attempt {
        self.attempts.get_mut(attempt).unwrap_or_else(|| {
            panic!("{attempt:?} was {what}, but the ledger never saw it reserved")
        })
    }

    fn charge(&mut self, books: &Books, key: &SubjectKey, cost: Money) {
        if let Books::Tenant(t) = books {
            *self.balances.entry(t.to_string()).or_insert(0) -= cost;
        }
        *self.spend.entry((books.clone(), key.clone())).or_insert(0) += cost;
    }
}

/// The tenant whose account holds `books` (`None`: a key's own books).
fn tenant_of(books: &Books) -> Option<&str> {
    match books {
        Books::Tenant(t) => Some(t),
        Books::Key(_) => None,
    }
}

/// Every attempt the store lists pending, page by page.
async fn listing<S: Store>(store: &S) -> Vec<PendingAttempt> {
    let mut all: Vec<PendingAttempt> = Vec::new();
    loop {
        let page =
            ReconcileStore::pending_page(store, all.last().map(|p| &p.attempt), MAX_PENDING_PAGE)
                .await
                .expect("pending_page: store error");
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

/// **Nothing held by nobody** (D9), read from `store`: no live slot lease of any
/// subject of `f`, no live capacity lease of any of its channels; every line of every
/// window it used reads exactly what [`Footprint::counted`] declares (0 if nothing:
/// anything more is a reservation or a unit no request accounts for); no attempt of its
/// ledger still open — neither settled nor listed pending (a store probe: its
/// reconciliation answers "in flight", which changes nothing); and every budget the
/// ledger's attempts named reserves exactly the upper bounds of its attempts still
/// pending with their reservation (0 when none is).
///
/// Panics naming everything held.
pub async fn assert_nothing_held<S: Store>(store: &S, f: &Footprint) {
    let mut held: Vec<String> = Vec::new();
    for k in &f.slots {
        let n = SlotStore::in_flight(store, k)
            .await
            .expect("in_flight: store error");
        if n > 0 {
            held.push(format!("{n} slot lease(s) of {k:?}"));
        }
    }
    for ch in &f.channels {
        let n = CapacityStore::in_flight(store, ch)
            .await
            .expect("in_flight: store error");
        if n > 0 {
            held.push(format!("{n} capacity lease(s) of channel {ch:?}"));
        }
    }
    for ((k, scope), w) in &f.windows {
        for p in &w.policies {
            let view = WindowStore::view(store, k, *scope, p)
                .await
                .expect("view: store error");
            for l in view {
                let want = w
                    .counted
                    .get(&(l.dimension, l.tier.window_ms))
                    .copied()
                    .unwrap_or(0);
                if l.used != want {
                    held.push(format!(
                        "{k:?} {scope:?}: the {} tier of {} ms counts {}, the completed \
                         requests account for {want}",
                        l.dimension, l.tier.window_ms, l.used
                    ));
                }
            }
        }
    }
    let listed = listing(store).await;
    let is_listed = |a: &AttemptRef| listed.iter().any(|p| p.attempt == *a);
    let ledger = &f.ledger;
    for (a, at) in &ledger.attempts {
        if at.life != Life::Open || is_listed(a) {
            continue;
        }
        match ReconcileStore::reconcile(store, a, Reconcile::WriteOff)
            .await
            .expect("reconcile: store error")
        {
            Reconciled::InFlight => held.push(format!(
                "{a:?} is still open: its {} reserved with nobody to settle it",
                at.money
            )),
            Reconciled::NotPending => held.push(format!(
                "{a:?}: reserved, never answered settled, refunded or pending, and unknown \
                 to the store (a settlement the ledger did not record)"
            )),
            other => panic!("{a:?} was pending but not listed: {other:?}"),
        }
    }
    for ((books, id), (key, budget)) in &ledger.budgets {
        let want: Money = ledger
            .attempts
            .iter()
            .filter(|(a, at)| a.books == *books && at.budgets.iter().any(|b| b.id == *id))
            .map(|(a, at)| match at.life {
                // Open and not listed is reported above; open and listed was swept,
                // which released its budgets.
                Life::Open if !is_listed(a) => at.money,
                Life::Open => 0,
                Life::Pending { .. } => at.money,
            })
            .sum();
        let view =
            BillingStore::account(store, tenant_of(books), key, std::slice::from_ref(budget))
                .await
                .expect("account: store error");
        let reserved = view.budgets[0].reserved;
        if reserved != want {
            held.push(format!(
                "budget {id:?} of {books:?} reserves {reserved}, its open and pending \
                 attempts {want}"
            ));
        }
    }
    assert!(
        held.is_empty(),
        "held by nobody (D9):\n  {}",
        held.join("\n  ")
    );
}

/// **Books exact** (D10), read from `store`: every balance of `f`'s ledger is what its
/// seeds, explicit balances and credits put there less exactly the costs answered
/// settled; every key's spend in its books is exactly its settled costs; every attempt
/// answered pending is listed with that amount and nothing is listed that the ledger
/// does not hold open or pending (an open attempt listed was swept: listed with its
/// upper bound); each books' and key's pending money is the sum of what the listing
/// holds for it (the balance's share: attempts billed to it), and each books' pending
/// counter agrees with the listing.
///
/// Panics naming every figure that is off.
pub async fn assert_books_exact<S: Store>(store: &S, f: &Footprint) {
    let ledger = &f.ledger;
    let listed = listing(store).await;
    let mut off: Vec<String> = Vec::new();
    for (a, at) in &ledger.attempts {
        let want = match at.life {
            Life::Pending { amount } => Some(amount),
            Life::Open => None,
        };
        let got = listed.iter().find(|p| p.attempt == *a).map(|p| p.amount);
        match (want, got) {
            (Some(w), Some(g)) if w == g => {}
            (None, None) => {}
            (None, Some(g)) if g == at.money => {} // swept with its upper bound
            (w, g) => off.push(format!(
                "{a:?}: listed pending with {g:?}, the store answered {w:?}"
            )),
        }
    }
    for p in &listed {
        if !ledger.attempts.contains_key(&p.attempt) {
            off.push(format!(
                "{:?} is listed pending with {}, but no request left it open or pending",
                p.attempt, p.amount
            ));
        }
    }
    let billed_pending = |books: &Books, key: Option<&SubjectKey>| -> Money {
        listed
            .iter()
            .filter(|p| p.attempt.books == *books && p.billed_to_balance)
            .filter(|p| key.is_none_or(|k| p.key.as_ref() == Some(k)))
            .map(|p| p.amount)
            .sum()
    };
    let mut tenants: BTreeSet<&str> = ledger.balances.keys().map(String::as_str).collect();
    tenants.extend(listed.iter().filter_map(|p| tenant_of(&p.attempt.books)));
    let anyone = SubjectKey::from("conformance:books");
    for t in tenants {
        let v = BillingStore::account(store, Some(t), &anyone, &[])
            .await
            .expect("account: store error");
        if let Some(want) = ledger.balance(t) {
            if v.balance != Some(want) {
                off.push(format!(
                    "tenant {t:?}: balance {:?}, the settled costs leave {want}",
                    v.balance
                ));
            }
        }
        let want = billed_pending(&Books::Tenant(t.into()), None);
        if v.tenant_pending != want {
            off.push(format!(
                "tenant {t:?}: {} pending on the balance, the listing holds {want}",
                v.tenant_pending
            ));
        }
    }
    for ((books, key), want) in &ledger.spend {
        let v = BillingStore::account(store, tenant_of(books), key, &[])
            .await
            .expect("account: store error");
        if v.key_spent != *want {
            off.push(format!(
                "{key:?} in {books:?}: spent {}, its settled costs are {want}",
                v.key_spent
            ));
        }
        let pending = billed_pending(books, Some(key));
        if v.key_pending != pending {
            off.push(format!(
                "{key:?} in {books:?}: {} pending, the listing holds {pending}",
                v.key_pending
            ));
        }
    }
    let mut want: BTreeMap<Books, PendingTotal> = BTreeMap::new();
    for p in &listed {
        let t = want.entry(p.attempt.books.clone()).or_insert(PendingTotal {
            attempts: 0,
            amount: 0,
        });
        t.attempts += 1;
        t.amount += p.amount;
    }
    let totals: BTreeMap<Books, PendingTotal> = ReconcileStore::pending_totals(store)
        .await
        .expect("pending_totals: store error")
        .into_iter()
        .collect();
    if totals != want {
        off.push(format!("pending counters {totals:?}, the listing {want:?}"));
    }
    assert!(off.is_empty(), "books off (D10):\n  {}", off.join("\n  "));
}

/// A conformance case's store and its [`Footprint`], which the suite's helpers fill as
/// the case goes. Dereferences to the store, so the case calls the store's own methods
/// on it too (and records by hand what such calls touch).
#[must_use = "a case ends with its invariants: `assert_case_invariants`"]
pub struct Case<S> {
    store: S,
    footprint: Mutex<Footprint>,
}

impl<S> Case<S> {
    /// A case on `store`, nothing touched yet.
    pub fn new(store: S) -> Self {
        Self {
            store,
            footprint: Mutex::new(Footprint::new()),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// What the case touched so far.
    pub fn footprint(&self) -> Footprint {
        self.lock().clone()
    }

    /// Records in the footprint.
    pub fn touch(&self, f: impl FnOnce(&mut Footprint)) {
        f(&mut self.lock());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Footprint> {
        self.footprint.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Footprint::counted`].
    pub fn counted(&self, key: &SubjectKey, scope: Scope, lines: &[(Dimension, Millis, u64)]) {
        self.touch(|f| {
            f.counted(key, scope, lines);
        });
    }
}

impl<S> Deref for Case<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.store
    }
}

/// Both invariants on what `case` touched: [`assert_nothing_held`], then
/// [`assert_books_exact`]. Every case of the suite ends with it (the
/// [`conformance_cases!`](crate::conformance_cases) tests and [`run_all`](super::run_all)
/// call it).
pub async fn assert_case_invariants<S: Store>(case: &Case<S>) {
    let f = case.footprint();
    assert_nothing_held(case.store(), &f).await;
    assert_books_exact(case.store(), &f).await;
}
