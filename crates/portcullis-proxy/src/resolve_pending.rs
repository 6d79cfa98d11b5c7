//! Pending money with an unknown outcome resolves itself (B7).
//!
//! An attempt whose outcome is unknown — a timeout after the request was sent, a
//! connection lost or a stream cut before any content — is kept pending at its upper
//! bound (B4). With a records database ledger, a task of every instance looks at the
//! ledger's pending rows every `[billing] resolve_interval`:
//!
//! - a row pending for longer than `unknown_grace` that names the provider's object (an
//!   OpenAI channel's answer names its response or chat completion before any content:
//!   `response.created`, the role chunk's `id`) is asked for: `GET {channel base}{object}`
//!   with the channel's credential. A final answer with usage is priced at the model's
//!   price and closes the attempt through [`portcullis::billing::resolve`], its record
//!   naming its evidence (`provider`). Still in progress, not found, or no answer: asked
//!   again at the next look;
//! - a row naming a job (a video's `/v1/videos/{id}`, left pending at its `per_video`
//!   hold when the job was created) is asked for at every look from the first, without
//!   the grace: a job's end is a status the provider reports, not a guess about a lost
//!   answer, so asking early can only find it still running. `completed` settles it at
//!   its one video at the model's price; `failed` or `cancelled` writes it off (nothing
//!   was made: the client is refunded), evidence `provider` both; still `queued` or
//!   `in_progress`, asked again. A client's own `GET /v1/videos/{id}` through the
//!   gateway that answers a final status resolves the job's attempt at once
//!   ([`Polls`]), through the same idempotent close;
//! - a row still pending `unknown_give_up` after its grace goes to the end policy,
//!   `[billing] unknown_outcome`: `hold` (the default) leaves it for an operator and
//!   says so once in the log; `upper_bound` settles it at its upper bound (evidence
//!   `upper_bound`). Rows of Anthropic or Gemini channels (no retrieval) and rows without
//!   an object wait for the same end: an operator has the same time to act on every one.
//!
//! - an attempt the gateway charged on its own evidence — what a stream cut by the client
//!   or the upstream had streamed (`streamed`), or its upper bound (`upper_bound`) — that
//!   names a provider object is asked for too, from its grace on (a job's from the first
//!   look) until `[billing] correct_within` after its charge: a final answer with usage
//!   corrects the charge once by the difference of its price ([`recheck`]), the store
//!   first ([`ReconcileStore::correct`](portcullis::core::ReconcileStore::correct), exactly
//!   once per attempt across instances), the
//!   ledger second (written once, evidence `provider`); a crash between the two is
//!   repaired by the next look (the store answers "already corrected", the ledger is
//!   written). Rows corrected already, or settled or written off by an operator, are not
//!   asked; an object that answers nothing yet is asked again later, less and less often
//!   (from the resolve interval, doubling up to an hour). A look rechecks at most
//!   1,000 such rows; the next look goes on from there.
//!
//! Closing is the store's idempotent reconciliation: of several instances resolving the
//! same attempt (or an operator who came first) exactly one closes it and leaves a usage
//! record; the others change and record nothing. The decision itself is [`decide`], a
//! plain function of the row's age, the settings and the provider's answer.

use crate::catalog::Route;
use crate::config::{BillingSettings, UnknownOutcomeConfig};
use crate::forward::HttpClient;
use crate::running::Stack;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use portcullis::billing::Evidence;
use portcullis::core::{
    AttemptRef, BillingStore, Books, Clock, Corrected, Correction, Money, Reconcile, Reconciled,
    Usage,
};
use portcullis_records::{CorrectableQuery, LedgerRow, PendingQuery, PendingRow, Records};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// Most pending rows read at once.
const PAGE: u32 = 200;
/// Most pages of automatic charges one look rechecks (B7); the next look goes on.
const RECHECK_PAGES: usize = 5;
/// Largest answer read from the provider.
const MOST_ANSWER: usize = 4 << 20;
/// Most attempts remembered as closed elsewhere or held (then forgotten and looked at
/// again: nothing is lost, a line may be logged twice).
const MOST_REMEMBERED: usize = 100_000;

/// The settings of the resolution, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `[billing] unknown_grace`.
    pub grace: u64,
    /// `[billing] unknown_give_up`.
    pub give_up: u64,
    /// `[billing] unknown_outcome`.
    pub end: UnknownOutcomeConfig,
    /// `[billing] correct_within` (0: no corrections).
    pub correct_within: u64,
}

impl Settings {
    /// The settings of `[billing]`.
    pub fn of(b: &BillingSettings) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            grace: ms(b.unknown_grace),
            give_up: ms(b.unknown_give_up),
            end: b.unknown_outcome,
            correct_within: ms(b.correct_within),
        }
    }
}

/// What a pending row names to ask the provider about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    /// Nothing that can be asked for (no object, or no channel or price to ask with).
    Absent,
    /// A stored answer (a response, a chat completion): asked after the grace.
    Stored,
    /// A job the provider runs (a video): asked at every look, from the first.
    Job,
}

impl Object {
    /// What the object at `path` is (`/v1/videos/{id}` is a job).
    pub fn of(path: &str) -> Self {
        if path.starts_with("/v1/videos/") {
            Object::Job
        } else {
            Object::Stored
        }
    }
}

/// What the provider said when asked for the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Not asked (yet).
    NotAsked,
    /// Asked: still in progress, not found, an error, or no answer.
    Nothing,
    /// The object is final, with this usage (not yet priced).
    Final(Usage),
    /// The job ended without a result: failed or cancelled. Nothing to charge.
    Failed,
}

/// What to do with a pending attempt now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Too early, or the provider may still answer: look again later.
    Wait,
    /// Ask the provider for the object, then decide again with its answer.
    Ask,
    /// Settle at the provider's usage (evidence `provider`).
    Settle(Usage),
    /// Write it off: the provider says the job made nothing (evidence `provider`).
    WriteOff,
    /// Settle at the upper bound (evidence `upper_bound`).
    UpperBound,
    /// Leave it for an operator.
    Hold,
}

/// The decision for an attempt pending since `since` (ms) that names `object`, at
/// `now`, after asking as `asked` says (B7): nothing before the grace, except for a job
/// (its end is a status the provider reports, not a guess: asked from the first look);
/// the provider's final usage settles it, a failed or cancelled job is written off;
/// with an object and within the give-up period, ask; after the give-up period, the end
/// policy; else wait.
pub fn decide(since: u64, now: u64, s: &Settings, object: Object, asked: Asked) -> Decision {
    let grace_ends = since.saturating_add(s.grace);
    if now < grace_ends && object != Object::Job {
        return Decision::Wait;
    }
    let ended = now >= grace_ends.saturating_add(s.give_up);
    match asked {
        Asked::Final(u) => Decision::Settle(u),
        Asked::Failed => Decision::WriteOff,
        Asked::NotAsked if object != Object::Absent && !ended => Decision::Ask,
        _ if ended => match s.end {
            UnknownOutcomeConfig::Hold => Decision::Hold,
            UnknownOutcomeConfig::UpperBound => Decision::UpperBound,
        },
        _ => Decision::Wait,
    }
}

/// What to do with an automatic charge (B7): an attempt charged on the gateway's own
/// evidence (`streamed`, `upper_bound`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recheck {
    /// Nothing to do now: corrections off, past `correct_within`, nothing to ask with,
    /// a stored answer within its grace, or the provider had nothing final yet.
    Leave,
    /// Ask the provider for the object, then decide again with its answer.
    Ask,
    /// Correct the charge to this cost (the difference may be 0: the provider agrees,
    /// and the attempt is not asked again).
    Correct(Money),
}

/// The decision for an automatic charge of `charged` made at `at` (ms) that names
/// `object`, at `now`, after asking as `asked` says (B7). Only within
/// `correct_within` of the charge (0: never); a stored answer after its grace (the
/// provider may still be finishing what the cut stream began), a job from the first
/// look. A final answer corrects it to its priced usage (`asked`'s usage carries its
/// cost, see [`priced_answer`]); a failed or cancelled job to nothing; no answer yet
/// leaves it for a later look.
pub fn recheck(at: u64, now: u64, s: &Settings, object: Object, asked: Asked) -> Recheck {
    if s.correct_within == 0 || now >= at.saturating_add(s.correct_within) {
        return Recheck::Leave;
    }
    if object == Object::Absent || (object == Object::Stored && now < at.saturating_add(s.grace)) {
        return Recheck::Leave;
    }
    match asked {
        Asked::NotAsked => Recheck::Ask,
        Asked::Nothing => Recheck::Leave,
        Asked::Final(u) => Recheck::Correct(u.cost.unwrap_or(0).max(0)),
        Asked::Failed => Recheck::Correct(0),
    }
}

/// The wait before asking again an object that answered nothing final, after `last`
/// (0: the first time): from `interval`, doubling, at most an hour.
pub fn ask_again_after(last: u64, interval: u64) -> u64 {
    const MOST: u64 = 3_600_000;
    if last == 0 {
        interval.clamp(1, MOST)
    } else {
        last.saturating_mul(2).min(MOST)
    }
}

/// `asked` with a final usage priced at `price`.
fn priced_answer(asked: Asked, price: &portcullis::core::Price) -> Asked {
    match asked {
        Asked::Final(mut u) => {
            u.cost = Some(price.cost(&u));
            Asked::Final(u)
        }
        a => a,
    }
}

/// What a provider's answer to `GET {object}` says: a response that is `completed`,
/// `incomplete`, `failed` or `cancelled` with usage, or a chat completion with usage, is
/// final; a video job `completed` is final at its one video, `failed` or `cancelled`
/// made nothing; anything else (in progress, queued, not found, an error, no usage) is
/// nothing yet.
pub fn answer_of(status: u16, body: &[u8]) -> Asked {
    if status != 200 {
        return Asked::Nothing;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Asked::Nothing;
    };
    if v.get("object").and_then(|o| o.as_str()) == Some("video") {
        return match v.get("status").and_then(|s| s.as_str()) {
            Some("completed") => Asked::Final(Usage {
                videos: 1,
                ..Usage::default()
            }),
            Some("failed" | "cancelled") => Asked::Failed,
            _ => Asked::Nothing,
        };
    }
    let final_ = match v.get("object").and_then(|o| o.as_str()) {
        Some("response") => matches!(
            v.get("status").and_then(|s| s.as_str()),
            Some("completed" | "incomplete" | "failed" | "cancelled")
        ),
        Some("chat.completion") => true,
        _ => false,
    };
    let usage = v
        .get("usage")
        .filter(|u| u.is_object())
        .and_then(|_| portcullis_dialects::usage_from_json(portcullis_core::Dialect::OpenAi, body));
    match (final_, usage) {
        (true, Some(u)) => Asked::Final(u),
        _ => Asked::Nothing,
    }
}

/// Most final job statuses seen in clients' polls waiting for the resolver; more are
/// left to its next look.
const MOST_POLLS: usize = 10_000;

/// The final statuses of jobs that clients' own polls through the gateway saw
/// (`GET /v1/videos/{id}` answered `completed`, `failed` or `cancelled`), handed to the
/// resolver to close each job's pending attempt at once (B7). Kept across reloads;
/// nothing is kept while no resolver runs.
#[derive(Default)]
pub struct Polls {
    on: AtomicBool,
    seen: Mutex<Vec<Polled>>,
    wake: Notify,
}

/// One final status a client's poll saw.
#[derive(Debug)]
pub(crate) struct Polled {
    /// The job's object path, `/v1/videos/{id}`.
    pub(crate) object: String,
    /// The channel that answered.
    pub(crate) channel: Arc<str>,
    /// What it answered.
    pub(crate) asked: Asked,
}

impl Polls {
    /// Whether a resolver takes what polls see.
    pub(crate) fn wanted(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// A client's poll of `object` on `channel` answered `asked`: a final status wakes
    /// the resolver.
    pub(crate) fn saw(&self, object: String, channel: Arc<str>, asked: Asked) {
        if !self.wanted() || !matches!(asked, Asked::Final(_) | Asked::Failed) {
            return;
        }
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.len() >= MOST_POLLS {
                return;
            }
            seen.push(Polled {
                object,
                channel,
                asked,
            });
        }
        self.wake.notify_one();
    }

    /// As if a resolver ran (for unit tests).
    #[cfg(test)]
    pub(crate) fn start_for_tests(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    fn take(&self) -> Vec<Polled> {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Starts the resolver of `stack`'s pending attempts on the ledger in `records`, asking
/// providers through `client` and taking the job statuses clients' polls saw from
/// `polls`. It ends when the stack is gone (the gateway dropped).
pub(crate) fn start<St: BillingStore>(
    stack: Weak<Stack<St>>,
    records: Arc<Records>,
    client: HttpClient,
    polls: Arc<Polls>,
) {
    polls.on.store(true, Ordering::Relaxed);
    tokio::spawn(async move {
        let mut r = Resolver {
            records,
            client,
            closed: HashSet::new(),
            held: HashSet::new(),
            held_up_to: None,
            asked_again: HashMap::new(),
            recheck_after: None,
        };
        let mut next_look = tokio::time::Instant::now();
        loop {
            {
                let Some(s) = stack.upgrade() else {
                    polls.on.store(false, Ordering::Relaxed);
                    return;
                };
                let polled = polls.take();
                if !polled.is_empty() {
                    r.polled(&s, polled).await;
                }
                if tokio::time::Instant::now() >= next_look {
                    r.look(&s).await;
                    next_look =
                        tokio::time::Instant::now() + s.load().config.billing().resolve_interval;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(next_look) => {}
                _ = polls.wake.notified() => {}
            }
        }
    });
}

struct Resolver {
    records: Arc<Records>,
    client: HttpClient,
    /// Attempts the store no longer holds pending (closed by an operator or another
    /// instance first, or lost): not looked at again.
    closed: HashSet<String>,
    /// Attempts held for an operator, said once.
    held: HashSet<String>,
    /// Held rows are read up to here already (the end of the last look's end window).
    held_up_to: Option<u64>,
    /// Automatic charges whose object answered nothing final: when to ask again, and the
    /// wait that led there (B7).
    asked_again: HashMap<String, (u64, u64)>,
    /// Where the next look's rechecks go on (the last row's charge time and attempt).
    recheck_after: Option<(u64, String)>,
}

impl Resolver {
    /// One look at the ledger's pending rows.
    async fn look<St: BillingStore>(&mut self, stack: &Stack<St>) {
        let running = stack.load_full();
        let s = Settings::of(running.config.billing());
        let now = crate::keys::now_ms();
        let grace_ends = now.saturating_sub(s.grace);
        let ended = grace_ends.saturating_sub(s.give_up);
        // Rows that can still be asked for: with an object, in the give-up period (a
        // job's from the first look: `decide` leaves the others to their grace).
        let ask = PendingQuery {
            from: Some(ended),
            before: now.saturating_add(1),
            with_object: Some(true),
            ..PendingQuery::default()
        };
        // Rows past the give-up period: all of them to settle at their upper bound; to
        // hold, only those that crossed since the last look (each said once).
        let end = PendingQuery {
            from: match s.end {
                UnknownOutcomeConfig::Hold => self.held_up_to,
                UnknownOutcomeConfig::UpperBound => None,
            },
            before: ended,
            ..PendingQuery::default()
        };
        for q in [ask, end] {
            if !self.pages(&running, &s, q, now).await {
                return;
            }
        }
        if s.end == UnknownOutcomeConfig::Hold {
            self.held_up_to = Some(ended);
        }
        if s.correct_within > 0 {
            let interval = u64::try_from(running.config.billing().resolve_interval.as_millis())
                .unwrap_or(u64::MAX);
            self.rechecks(&running, &s, now, interval).await;
        }
        for set in [&mut self.closed, &mut self.held] {
            if set.len() > MOST_REMEMBERED {
                set.clear();
            }
        }
        if self.asked_again.len() > MOST_REMEMBERED {
            self.asked_again.clear();
        }
    }

    /// The automatic charges within `correct_within`, page by page from where the last
    /// look stopped, each rechecked (B7): at most [`RECHECK_PAGES`] pages a look, so a
    /// look's work stays bounded however many charges the window holds; the next look
    /// goes on from there, and starts over once the end is reached.
    async fn rechecks<St: BillingStore>(
        &mut self,
        running: &crate::running::Running<St>,
        s: &Settings,
        now: u64,
        interval: u64,
    ) {
        let from = now.saturating_sub(s.correct_within);
        let mut q = CorrectableQuery {
            from,
            before: now.saturating_add(1),
            after: self.recheck_after.take().filter(|(at, _)| *at >= from),
        };
        for _ in 0..RECHECK_PAGES {
            let rows = match self.records.correctable_ledger(&q, PAGE).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::debug!(error = %e, "correcting automatic charges: the ledger did not answer");
                    self.recheck_after = q.after;
                    return;
                }
            };
            for row in &rows {
                self.recheck_one(running, s, row, now, interval).await;
            }
            match rows.last() {
                Some(last) if rows.len() == PAGE as usize => {
                    q.after = Some((last.at, last.attempt.clone()));
                }
                _ => return,
            }
        }
        self.recheck_after = q.after;
    }

    /// Rechecks one automatic charge: asks its provider when [`recheck`] says so, and
    /// corrects it by what the answer prices it at.
    async fn recheck_one<St: BillingStore>(
        &mut self,
        running: &crate::running::Running<St>,
        s: &Settings,
        row: &LedgerRow,
        now: u64,
        interval: u64,
    ) {
        let last = match self.asked_again.get(&row.attempt) {
            Some(&(next, _)) if next > now => return,
            Some(&(_, last)) => last,
            None => 0,
        };
        let live = &running.live;
        let asking = asking(&live.catalog, row);
        let object = match (&asking, row.provider_object.as_deref()) {
            (Some(_), Some(path)) => Object::of(path),
            _ => Object::Absent,
        };
        let mut decision = recheck(row.at, now, s, object, Asked::NotAsked);
        if let (Recheck::Ask, Some((route, price))) = (decision, &asking) {
            let path = row.provider_object.as_deref().unwrap_or_default();
            let asked = self.ask(route, path, live.catalog.upstream_timeout).await;
            decision = recheck(row.at, now, s, object, priced_answer(asked, price));
            if decision == Recheck::Leave {
                let wait = ask_again_after(last, interval);
                self.asked_again
                    .insert(row.attempt.clone(), (now.saturating_add(wait), wait));
            }
        }
        if let Recheck::Correct(cost) = decision {
            self.asked_again.remove(&row.attempt);
            self.correct(running, s, row, cost).await;
        }
    }

    /// Corrects `row`'s charge to `cost`: the store first (exactly once per attempt),
    /// then the ledger (written once). Either failing leaves the row to the next look.
    async fn correct<St: BillingStore>(
        &mut self,
        running: &crate::running::Running<St>,
        s: &Settings,
        row: &LedgerRow,
        cost: Money,
    ) {
        let Some(rec) = running.live.store.reconciler() else {
            return;
        };
        let difference = cost.saturating_sub(row.amount);
        let budgets = row
            .tenant
            .as_deref()
            .and_then(|t| running.config.tenant_profiles().get(t))
            .map(|t| t.budgets.clone())
            .unwrap_or_default();
        let c = Correction {
            attempt: attempt_of(row),
            key: row.key.as_str().into(),
            bill_balance: row.billed_to_balance,
            budgets: budgets.into(),
            charged_at: row.at,
            difference,
            // Past any look at the row (its window runs from its charge), with room for
            // the clocks of instances and store to differ.
            keep_ms: s.correct_within.saturating_add(3_600_000),
        };
        match rec.correct(&c).await {
            Ok(Corrected::Applied | Corrected::AlreadyCorrected) => {}
            Ok(Corrected::NotClosed) => {
                tracing::debug!(attempt_id = %row.attempt, "an automatic charge the store still holds open or pending: not corrected");
                return;
            }
            Err(e) => {
                tracing::debug!(attempt_id = %row.attempt, error = %e, "correcting an automatic charge: the store failed; tried again at the next look");
                return;
            }
        }
        let at = crate::keys::now_ms();
        match self
            .records
            .correct_ledger(&row.attempt, difference, Evidence::Provider.as_str(), at)
            .await
        {
            Ok(true) => tracing::info!(
                attempt_id = %row.attempt,
                charged = row.amount,
                cost,
                difference,
                evidence = row.resolved_by.as_deref().unwrap_or(""),
                "an automatic charge corrected by the provider's report (B7)"
            ),
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(attempt_id = %row.attempt, error = %e, "recording a correction: the ledger failed; written at the next look");
            }
        }
    }

    /// Every page `q` reads, each row decided; false if the database failed.
    async fn pages<St: BillingStore>(
        &mut self,
        running: &crate::running::Running<St>,
        s: &Settings,
        mut q: PendingQuery,
        now: u64,
    ) -> bool {
        loop {
            let rows = match self.records.pending_ledger(&q, PAGE).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::debug!(error = %e, "resolving pending attempts: the ledger did not answer");
                    return false;
                }
            };
            for p in &rows {
                self.one(running, s, p, now).await;
            }
            match rows.last() {
                Some(last) if rows.len() == PAGE as usize => {
                    q.after = Some((last.since, last.row.attempt.clone()));
                }
                _ => return true,
            }
        }
    }

    /// Decides one pending row and acts on it.
    async fn one<St: BillingStore>(
        &mut self,
        running: &crate::running::Running<St>,
        s: &Settings,
        p: &PendingRow,
        now: u64,
    ) {
        let row = &p.row;
        if self.closed.contains(&row.attempt) {
            return;
        }
        let live = &running.live;
        // Only an object of a channel (still) configured, of a model with a price, can be
        // asked for and priced.
        let asking = asking(&live.catalog, row);
        let object = match (&asking, row.provider_object.as_deref()) {
            (Some(_), Some(path)) => Object::of(path),
            _ => Object::Absent,
        };
        let mut decision = decide(p.since, now, s, object, Asked::NotAsked);
        if let (Decision::Ask, Some((route, price))) = (decision, &asking) {
            let path = row.provider_object.as_deref().unwrap_or_default();
            let asked = self.ask(route, path, live.catalog.upstream_timeout).await;
            decision = priced(decide(p.since, now, s, object, asked), price);
        }
        self.act(running, row, decision).await;
    }

    /// Closes the pending attempts of the jobs clients' polls saw end, at once: the
    /// rows naming each job's object, of the channel that answered (B7).
    async fn polled<St: BillingStore>(&mut self, stack: &Stack<St>, polled: Vec<Polled>) {
        let running = stack.load_full();
        let before = crate::keys::now_ms().saturating_add(1);
        for seen in polled {
            let q = PendingQuery {
                before,
                object: Some(seen.object.clone()),
                ..PendingQuery::default()
            };
            let rows = match self.records.pending_ledger(&q, PAGE).await {
                Ok(rows) => rows,
                Err(e) => {
                    // The resolver's next look asks the provider itself.
                    tracing::debug!(error = %e, "resolving a polled job: the ledger did not answer");
                    continue;
                }
            };
            for p in &rows {
                let row = &p.row;
                if row.channel.as_deref() != Some(&*seen.channel)
                    || self.closed.contains(&row.attempt)
                {
                    continue;
                }
                let Some((_, price)) = asking(&running.live.catalog, row) else {
                    continue;
                };
                let decision = match seen.asked {
                    Asked::Final(u) => Decision::Settle(u),
                    Asked::Failed => Decision::WriteOff,
                    Asked::NotAsked | Asked::Nothing => continue,
                };
                tracing::debug!(attempt_id = %row.attempt, object = %seen.object, "a client's poll saw the job end");
                self.act(&running, row, priced(decision, &price)).await;
            }
        }
    }

    /// Acts on the decision for one pending row: closes it through the store's
    /// idempotent reconciliation, holds it (said once), or leaves it.
    async fn act<St: BillingStore>(
        &mut self,
        running: &crate::running::Running<St>,
        row: &LedgerRow,
        decision: Decision,
    ) {
        let live = &running.live;
        let (how, usage, evidence) = match decision {
            Decision::Wait | Decision::Ask => return,
            Decision::Hold => {
                if self.held.insert(row.attempt.clone()) {
                    tracing::warn!(
                        attempt_id = %row.attempt,
                        tenant = row.tenant.as_deref().unwrap_or(""),
                        amount = row.amount,
                        provider_object = row.provider_object.as_deref().unwrap_or(""),
                        "a pending attempt's outcome is still unknown after [billing] \
                         unknown_grace + unknown_give_up: held for an operator \
                         (POST /admin/pending/settle or /write-off) (B7)"
                    );
                }
                return;
            }
            Decision::Settle(u) => (
                Reconcile::Settle(u.cost.unwrap_or(0)),
                Some(u),
                Evidence::Provider,
            ),
            // The job made nothing: refunded.
            Decision::WriteOff => (Reconcile::WriteOff, None, Evidence::Provider),
            Decision::UpperBound => (
                Reconcile::Settle(row.amount),
                Some(usage_of(row, row.amount)),
                Evidence::UpperBound,
            ),
        };
        let Some(rec) = live.store.reconciler() else {
            return;
        };
        let attempt = attempt_of(row);
        let stamp = portcullis::core::SystemClock::new().now();
        match portcullis::billing::resolve(
            &*rec,
            &*live.sink,
            &attempt,
            how,
            usage,
            stamp,
            evidence,
        )
        .await
        {
            Ok(Reconciled::Settled { .. } | Reconciled::WrittenOff { .. }) => {}
            Ok(Reconciled::NotPending) => {
                tracing::debug!(attempt_id = %row.attempt, "pending attempt already closed (by an operator or another instance)");
                self.closed.insert(row.attempt.clone());
            }
            Ok(Reconciled::InFlight) => {}
            Err(e) => {
                tracing::debug!(attempt_id = %row.attempt, error = %e, "resolving a pending attempt: the store failed; tried again at the next look");
            }
        }
    }

    /// Asks the channel's provider for `object`.
    async fn ask(&self, route: &Route, object: &str, timeout: Duration) -> Asked {
        let Ok(uri) = format!("{}{object}", route.base_url).parse::<http::Uri>() else {
            return Asked::Nothing;
        };
        let mut req = http::Request::get(uri);
        if let (Some(cred), Some(h)) = (route.credential.clone(), req.headers_mut()) {
            portcullis_dialects::providers::inject_credential(route.dialect, cred, h);
        }
        let Ok(req) = req.body(Full::new(Bytes::new())) else {
            return Asked::Nothing;
        };
        let asked = async {
            let res = self.client.request(req).await.ok()?;
            let status = res.status().as_u16();
            let body = Limited::new(res.into_body(), MOST_ANSWER)
                .collect()
                .await
                .ok()?
                .to_bytes();
            Some(answer_of(status, &body))
        };
        match tokio::time::timeout(timeout, asked).await {
            Ok(Some(a)) => {
                tracing::debug!(channel = %route.name, object, answer = ?a, "asked the provider for a pending attempt's object");
                a
            }
            _ => Asked::Nothing,
        }
    }
}

/// A settlement at the provider's usage, priced at `price`; any other decision as it is.
fn priced(decision: Decision, price: &portcullis::core::Price) -> Decision {
    match decision {
        Decision::Settle(mut u) => {
            u.cost = Some(price.cost(&u));
            Decision::Settle(u)
        }
        d => d,
    }
}

/// The channel to ask for `row`'s object and the price to settle at, if it can be
/// asked: an OpenAI channel still configured for the row's model, which has a price.
fn asking(
    catalog: &crate::catalog::Catalog,
    row: &LedgerRow,
) -> Option<(Arc<Route>, portcullis::core::Price)> {
    row.provider_object.as_ref()?;
    let model = row.model.as_deref()?;
    let route = catalog.route(model, row.channel.as_deref()?)?;
    if route.dialect != portcullis_core::Dialect::OpenAi {
        return None;
    }
    let served = route.upstream_model(model).map(|m| m.to_string());
    let priced = served
        .as_deref()
        .and_then(|m| catalog.model(m))
        .or_else(|| catalog.model(model))
        .is_some();
    priced.then(|| {
        let price = catalog.served_price(model, &route);
        (route, price)
    })
}

/// The attempt and its books, as the store knows them.
fn attempt_of(row: &LedgerRow) -> AttemptRef {
    AttemptRef {
        attempt: row.attempt.as_str().into(),
        books: match &row.tenant {
            Some(t) => Books::Tenant(t.as_str().into()),
            None => Books::Key(row.key.as_str().into()),
        },
    }
}

/// The row's figures (what was seen before the outcome became unknown) at `cost`.
fn usage_of(row: &LedgerRow, cost: i64) -> Usage {
    let u = row.usage.unwrap_or_default();
    Usage {
        input_tokens: u.input_tokens,
        cached_input_tokens: u.cached_input_tokens,
        cache_write_tokens: u.cache_write_tokens,
        output_tokens: u.output_tokens,
        images: u.images,
        videos: u.videos,
        cost: Some(cost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Settings = Settings {
        grace: 120_000,
        give_up: 3_600_000,
        end: UnknownOutcomeConfig::Hold,
        correct_within: 86_400_000,
    };

    fn used(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn b7_before_the_grace_nothing_is_asked_or_settled() {
        let since = 1_000_000;
        for object in [Object::Stored, Object::Absent] {
            for asked in [Asked::NotAsked, Asked::Nothing, Asked::Final(used(1, 1))] {
                assert_eq!(
                    decide(since, since + S.grace - 1, &S, object, asked),
                    Decision::Wait
                );
            }
        }
    }

    #[test]
    fn b7_after_the_grace_the_provider_is_asked_and_its_final_usage_settles() {
        let since = 1_000_000;
        let now = since + S.grace;
        assert_eq!(
            decide(since, now, &S, Object::Stored, Asked::NotAsked),
            Decision::Ask
        );
        let u = used(12, 9);
        assert_eq!(
            decide(since, now, &S, Object::Stored, Asked::Final(u)),
            Decision::Settle(u)
        );
        // Still in progress or not found: asked again at the next look.
        assert_eq!(
            decide(since, now, &S, Object::Stored, Asked::Nothing),
            Decision::Wait
        );
        // Nothing to ask with: waits for the end of the give-up period.
        assert_eq!(
            decide(since, now, &S, Object::Absent, Asked::NotAsked),
            Decision::Wait
        );
    }

    #[test]
    fn b7_nothing_answered_past_give_up_is_held_or_settled_at_the_upper_bound() {
        let since = 1_000_000;
        let end = since + S.grace + S.give_up;
        let upper = Settings {
            end: UnknownOutcomeConfig::UpperBound,
            ..S
        };
        for object in [Object::Stored, Object::Absent] {
            assert_eq!(
                decide(since, end - 1, &S, object, Asked::Nothing),
                Decision::Wait
            );
            for asked in [Asked::NotAsked, Asked::Nothing] {
                assert_eq!(decide(since, end, &S, object, asked), Decision::Hold);
                assert_eq!(
                    decide(since, end + 5, &upper, object, asked),
                    Decision::UpperBound
                );
            }
        }
        // A final answer still wins at the end.
        let u = used(1, 2);
        assert_eq!(
            decide(since, end, &upper, Object::Stored, Asked::Final(u)),
            Decision::Settle(u)
        );
    }

    #[test]
    fn b7_only_a_final_answer_with_usage_is_evidence() {
        let done = br#"{"id":"resp_1","object":"response","status":"completed","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":2},"output_tokens":9,"total_tokens":21}}"#;
        let Asked::Final(u) = answer_of(200, done) else {
            panic!("final");
        };
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.output_tokens),
            (10, 2, 9)
        );
        let chat = br#"{"id":"chatcmpl-1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":16,"total_tokens":26}}"#;
        assert!(matches!(answer_of(200, chat), Asked::Final(u) if u.output_tokens == 16));
        let running = br#"{"id":"resp_1","object":"response","status":"in_progress","usage":null}"#;
        assert_eq!(answer_of(200, running), Asked::Nothing);
        let no_usage = br#"{"id":"resp_1","object":"response","status":"failed","usage":null}"#;
        assert_eq!(answer_of(200, no_usage), Asked::Nothing);
        assert_eq!(answer_of(404, chat), Asked::Nothing);
        assert_eq!(answer_of(200, b"not json"), Asked::Nothing);
    }

    #[test]
    fn b7_a_job_is_asked_from_the_first_look_and_settled_or_refunded_by_its_status() {
        let since = 1_000_000;
        let video = Usage {
            videos: 1,
            ..Usage::default()
        };
        // No grace for a job: its end is a status, asking early only finds it running.
        for now in [since, since + 1, since + S.grace - 1, since + S.grace] {
            assert_eq!(
                decide(since, now, &S, Object::Job, Asked::NotAsked),
                Decision::Ask
            );
            assert_eq!(
                decide(since, now, &S, Object::Job, Asked::Nothing),
                Decision::Wait
            );
            assert_eq!(
                decide(since, now, &S, Object::Job, Asked::Final(video)),
                Decision::Settle(video)
            );
            assert_eq!(
                decide(since, now, &S, Object::Job, Asked::Failed),
                Decision::WriteOff
            );
        }
        // A stored answer keeps its grace.
        assert_eq!(
            decide(since, since + 1, &S, Object::Stored, Asked::NotAsked),
            Decision::Wait
        );
        // No end seen by the end of the give-up period: the same end policy.
        let end = since + S.grace + S.give_up;
        let upper = Settings {
            end: UnknownOutcomeConfig::UpperBound,
            ..S
        };
        assert_eq!(
            decide(since, end - 1, &S, Object::Job, Asked::NotAsked),
            Decision::Ask
        );
        assert_eq!(
            decide(since, end, &S, Object::Job, Asked::NotAsked),
            Decision::Hold
        );
        assert_eq!(
            decide(since, end, &S, Object::Job, Asked::Nothing),
            Decision::Hold
        );
        assert_eq!(
            decide(since, end, &upper, Object::Job, Asked::Nothing),
            Decision::UpperBound
        );
        // An end seen at the last moment still wins.
        assert_eq!(
            decide(since, end, &upper, Object::Job, Asked::Failed),
            Decision::WriteOff
        );
        assert_eq!(Object::of("/v1/videos/video_1"), Object::Job);
        assert_eq!(Object::of("/v1/responses/resp_1"), Object::Stored);
    }

    #[test]
    fn b7_a_jobs_final_status_is_its_evidence() {
        let job = |status: &str| {
            format!(
                r#"{{"id":"video_1","object":"video","status":"{status}","progress":0,"error":null}}"#
            )
        };
        assert_eq!(
            answer_of(200, job("completed").as_bytes()),
            Asked::Final(Usage {
                videos: 1,
                ..Usage::default()
            })
        );
        for ended in ["failed", "cancelled"] {
            assert_eq!(answer_of(200, job(ended).as_bytes()), Asked::Failed);
        }
        for running in ["queued", "in_progress", "something_new"] {
            assert_eq!(answer_of(200, job(running).as_bytes()), Asked::Nothing);
        }
        // Not found (deleted, or another provider's), or an error: nothing yet.
        assert_eq!(answer_of(404, job("completed").as_bytes()), Asked::Nothing);
        assert_eq!(answer_of(500, job("failed").as_bytes()), Asked::Nothing);
        // Priced at the model's `per_video`.
        let price = portcullis::core::Price {
            per_video: 500_000,
            ..portcullis::core::Price::default()
        };
        let Asked::Final(u) = answer_of(200, job("completed").as_bytes()) else {
            panic!("final");
        };
        assert_eq!(
            priced(Decision::Settle(u), &price),
            Decision::Settle(Usage {
                videos: 1,
                cost: Some(500_000),
                ..Usage::default()
            })
        );
        assert_eq!(priced(Decision::WriteOff, &price), Decision::WriteOff);
    }

    #[test]
    fn b7_an_automatic_charge_is_asked_for_within_its_window_and_corrected_by_a_final_answer() {
        let at = 1_000_000;
        let priced = |cost| {
            Asked::Final(Usage {
                cost: Some(cost),
                ..used(12, 30)
            })
        };
        // A stored answer waits out its grace: the provider may still be finishing it.
        for asked in [Asked::NotAsked, priced(55)] {
            assert_eq!(
                recheck(at, at + S.grace - 1, &S, Object::Stored, asked),
                Recheck::Leave
            );
        }
        let now = at + S.grace;
        assert_eq!(
            recheck(at, now, &S, Object::Stored, Asked::NotAsked),
            Recheck::Ask
        );
        assert_eq!(
            recheck(at, now, &S, Object::Stored, priced(55)),
            Recheck::Correct(55)
        );
        // The provider agrees: corrected by nothing, not asked again.
        assert_eq!(
            recheck(at, now, &S, Object::Stored, priced(40)),
            Recheck::Correct(40)
        );
        // Nothing final yet: left for a later look.
        assert_eq!(
            recheck(at, now, &S, Object::Stored, Asked::Nothing),
            Recheck::Leave
        );
        // Nothing to ask with.
        assert_eq!(
            recheck(at, now, &S, Object::Absent, Asked::NotAsked),
            Recheck::Leave
        );
        // A job from the first look; a failed one made nothing.
        assert_eq!(
            recheck(at, at, &S, Object::Job, Asked::NotAsked),
            Recheck::Ask
        );
        assert_eq!(
            recheck(at, at, &S, Object::Job, Asked::Failed),
            Recheck::Correct(0)
        );
        // The window ends `correct_within` after the charge, whatever the answer.
        let end = at + S.correct_within;
        assert_eq!(
            recheck(at, end - 1, &S, Object::Stored, Asked::NotAsked),
            Recheck::Ask
        );
        for asked in [Asked::NotAsked, priced(55), Asked::Failed] {
            assert_eq!(recheck(at, end, &S, Object::Stored, asked), Recheck::Leave);
        }
        // 0 turns corrections off.
        let off = Settings {
            correct_within: 0,
            ..S
        };
        for asked in [Asked::NotAsked, priced(55)] {
            assert_eq!(
                recheck(at, now, &off, Object::Stored, asked),
                Recheck::Leave
            );
        }
        // A final answer is priced at the model's price.
        let price = portcullis::core::Price {
            output_per_mtok: 1_000_000,
            ..portcullis::core::Price::default()
        };
        let Asked::Final(u) = priced_answer(Asked::Final(used(0, 30)), &price) else {
            panic!("final");
        };
        assert_eq!(u.cost, Some(price.cost(&used(0, 30))));
        assert_eq!(priced_answer(Asked::Nothing, &price), Asked::Nothing);
    }

    #[test]
    fn b7_an_object_that_answers_nothing_is_asked_less_and_less_often() {
        let mut waits = Vec::new();
        let mut last = 0;
        for _ in 0..12 {
            last = ask_again_after(last, 15_000);
            waits.push(last);
        }
        assert_eq!(&waits[..4], &[15_000, 30_000, 60_000, 120_000]);
        assert_eq!(*waits.last().unwrap(), 3_600_000);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(ask_again_after(0, 0), 1);
    }
}
