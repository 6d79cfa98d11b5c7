//! The arguments of every script: one type per script (or batch op) that writes its
//! `ARGV` in the order the Lua side reads it, and declares that order ([`Layout`]),
//! which a test holds the Lua sources to.
//!
//! Numbers a window script reads travel as one blob of doubles ([`Doubles`], see
//! [`crate::codec`]); everything else as text.

use super::Script;
use crate::batch::Code;
use crate::codec::Doubles;
use portcullis_core::{Millis, Money};

/// A script's `ARGV`, as bytes.
#[derive(Default)]
pub(crate) struct Argv(Vec<Vec<u8>>);

impl Argv {
    fn text(&mut self, s: impl Into<String>) -> &mut Self {
        self.0.push(s.into().into_bytes());
        self
    }
    fn num(&mut self, n: impl std::fmt::Display) -> &mut Self {
        self.text(n.to_string())
    }
    fn flag(&mut self, b: bool) -> &mut Self {
        self.text(if b { "1" } else { "0" })
    }
    fn blob(&mut self, d: &Doubles) -> &mut Self {
        self.0.push(d.bytes().to_vec());
        self
    }
    fn raw(&mut self, b: Vec<u8>) -> &mut Self {
        self.0.push(b);
        self
    }
    pub(crate) fn into_vec(self) -> Vec<Vec<u8>> {
        self.0
    }
}

/// The positions of a script's `ARGV`: `head` at 1.., then `each` repeated per item,
/// then `tail`. A name ending in `?` is a position that may be left out (the last ones
/// of the head or of the tail only). Read by the layout tests only.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Layout {
    pub(crate) head: &'static [&'static str],
    pub(crate) each: &'static [&'static str],
    pub(crate) tail: &'static [&'static str],
}

#[cfg_attr(not(test), allow(dead_code))]
impl Layout {
    const fn head(head: &'static [&'static str]) -> Self {
        Self {
            head,
            each: &[],
            tail: &[],
        }
    }
}

/// The arguments of one script or batch op.
pub(crate) trait ScriptArgs {
    /// Where the Lua side reads each argument.
    #[cfg_attr(not(test), allow(dead_code))]
    const LAYOUT: Layout;
    /// Writes the arguments in [`LAYOUT`](Self::LAYOUT) order.
    fn write(&self, argv: &mut Argv);
    fn argv(&self) -> Vec<Vec<u8>> {
        let mut a = Argv::default();
        self.write(&mut a);
        a.into_vec()
    }
}

/// Arguments of a script called on its own (`EVALSHA`).
pub(crate) trait ScriptCall: ScriptArgs {
    const SCRIPT: Script;
}

/// Arguments of an op of the batch script.
pub(crate) trait BatchArgs: ScriptArgs {
    fn code(&self) -> Code;
}

/// `slot_acquire.lua`: a lease if a slot is free.
pub(crate) struct SlotAcquireArgs {
    pub(crate) time: String,
    pub(crate) limit: u32,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
}

impl ScriptArgs for SlotAcquireArgs {
    const LAYOUT: Layout = Layout::head(&["time", "limit", "ttl", "member"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.limit)
            .num(self.ttl)
            .text(&*self.member);
    }
}

impl ScriptCall for SlotAcquireArgs {
    const SCRIPT: Script = Script::SlotAcquire;
}

/// `slot_renew.lua`: one lease extended (or, `restore`, put back if gone).
pub(crate) struct SlotRenewArgs {
    pub(crate) time: String,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
    pub(crate) restore: bool,
}

impl ScriptArgs for SlotRenewArgs {
    const LAYOUT: Layout = Layout::head(&["time", "ttl", "member", "restore?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).num(self.ttl).text(&*self.member);
        if self.restore {
            a.flag(true);
        }
    }
}

impl ScriptCall for SlotRenewArgs {
    const SCRIPT: Script = Script::SlotRenew;
}

/// `slot_renew_block.lua`: a quota block's `count` leases `base:0` .. extended together.
pub(crate) struct SlotRenewBlockArgs {
    pub(crate) time: String,
    pub(crate) ttl: Millis,
    pub(crate) base: String,
    pub(crate) count: u32,
    pub(crate) restore: bool,
}

impl ScriptArgs for SlotRenewBlockArgs {
    const LAYOUT: Layout = Layout::head(&["time", "ttl", "member base", "count", "restore?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.ttl)
            .text(&*self.base)
            .num(self.count);
        if self.restore {
            a.flag(true);
        }
    }
}

impl ScriptCall for SlotRenewBlockArgs {
    const SCRIPT: Script = Script::SlotRenewBlock;
}

/// `slot_in_flight.lua`: the live leases.
pub(crate) struct InFlightArgs {
    pub(crate) time: String,
}

impl ScriptArgs for InFlightArgs {
    const LAYOUT: Layout = Layout::head(&["time"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time);
    }
}

impl ScriptCall for InFlightArgs {
    const SCRIPT: Script = Script::SlotInFlight;
}

/// `window_admit.lua`: one admission, recorded under `record` (D9).
pub(crate) struct WindowAdmitArgs {
    pub(crate) time: String,
    /// [`codec::admit_args`](crate::codec::admit_args).
    pub(crate) doubles: Doubles,
    pub(crate) record: String,
}

impl ScriptArgs for WindowAdmitArgs {
    const LAYOUT: Layout = Layout::head(&["time", "doubles", "record?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).blob(&self.doubles).text(&*self.record);
    }
}

impl ScriptCall for WindowAdmitArgs {
    const SCRIPT: Script = Script::WindowAdmit;
}

/// `window_view.lua`: the limits' use.
pub(crate) struct WindowViewArgs {
    pub(crate) time: String,
    pub(crate) doubles: Doubles,
}

impl ScriptArgs for WindowViewArgs {
    const LAYOUT: Layout = Layout::head(&["time", "doubles"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).blob(&self.doubles);
    }
}

impl ScriptCall for WindowViewArgs {
    const SCRIPT: Script = Script::WindowView;
}

/// `window_admit_all.lua`: several windows admitted all or nothing.
pub(crate) struct AdmitAllArgs {
    pub(crate) time: String,
    pub(crate) record: String,
    /// Each item's [`codec::admit_block_args`](crate::codec::admit_block_args).
    pub(crate) items: Vec<Doubles>,
}

impl ScriptArgs for AdmitAllArgs {
    const LAYOUT: Layout = Layout {
        head: &["time", "record"],
        each: &["item doubles"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).text(&*self.record);
        for d in &self.items {
            a.blob(d);
        }
    }
}

impl ScriptCall for AdmitAllArgs {
    const SCRIPT: Script = Script::WindowAdmitAll;
}

/// The window part of a joint call: its doubles and the admission's record.
pub(crate) struct JointWindow {
    pub(crate) doubles: Doubles,
    pub(crate) record: String,
}

/// `joint_admit.lua`: a subject's slot (`leases` of them for a quota block) with its
/// windows, or the slot alone.
pub(crate) struct JointArgs {
    pub(crate) time: String,
    pub(crate) limit: u32,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
    pub(crate) leases: u32,
    pub(crate) window: Option<JointWindow>,
}

impl ScriptArgs for JointArgs {
    const LAYOUT: Layout = Layout::head(&[
        "time", "limit", "ttl", "member", "leases", "doubles?", "record?",
    ]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.limit)
            .num(self.ttl)
            .text(&*self.member)
            .num(self.leases);
        if let Some(w) = &self.window {
            a.blob(&w.doubles).text(&*w.record);
        }
    }
}

impl ScriptCall for JointArgs {
    const SCRIPT: Script = Script::JointAdmit;
}

/// `admit_all_acquire.lua`: a channel's provider windows with `leases` capacity leases.
pub(crate) struct ChannelArgs {
    pub(crate) time: String,
    pub(crate) capacity: u32,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
    pub(crate) leases: u32,
    pub(crate) record: String,
    pub(crate) items: Vec<Doubles>,
}

impl ScriptArgs for ChannelArgs {
    const LAYOUT: Layout = Layout {
        head: &["time", "capacity", "ttl", "member", "leases", "record"],
        each: &["item doubles"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.capacity)
            .num(self.ttl)
            .text(&*self.member)
            .num(self.leases)
            .text(&*self.record);
        for d in &self.items {
            a.blob(d);
        }
    }
}

impl ScriptCall for ChannelArgs {
    const SCRIPT: Script = Script::ChannelAdmit;
}

/// `window_settle.lua` (batch op `ws`): an admission settled, keyed by its `record`
/// (D9), or unkeyed without one.
pub(crate) struct WindowSettleArgs {
    pub(crate) time: String,
    /// [`codec::settle_args`](crate::codec::settle_args) or an undo's.
    pub(crate) doubles: Doubles,
    pub(crate) record: Option<String>,
}

impl ScriptArgs for WindowSettleArgs {
    const LAYOUT: Layout = Layout::head(&["time", "doubles", "record?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).blob(&self.doubles);
        if let Some(r) = &self.record {
            a.text(&**r);
        }
    }
}

impl BatchArgs for WindowSettleArgs {
    fn code(&self) -> Code {
        if self.record.is_some() {
            Code::WindowSettle
        } else {
            Code::WindowCorrect
        }
    }
}

/// How a reservation is checked (`billing_reserve.lua`'s last argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReserveMode {
    /// A request's own reservation.
    Plain,
    /// Without checks: an attempt of a quota block, whose block holds its money.
    Force,
    /// A billing quota block: admitted only with `headroom` to spare beyond it.
    Block { headroom: Money },
}

/// A budget as the reservation script takes it.
pub(crate) struct BudgetArg {
    pub(crate) limit: Money,
    /// In ms; `None`: no period.
    pub(crate) period: Option<Millis>,
}

/// `billing_reserve.lua` (and batch op `br`): a check-and-reserve on one books.
pub(crate) struct ReserveArgs {
    pub(crate) time: String,
    pub(crate) bill_balance: bool,
    pub(crate) has_tenant: bool,
    pub(crate) spend_cap: Option<Money>,
    /// Checked exact by the caller.
    pub(crate) money: Money,
    pub(crate) budget_ttl: Millis,
    pub(crate) lifetime: Millis,
    pub(crate) tenant_expected: bool,
    pub(crate) books_base: String,
    pub(crate) attempt: String,
    pub(crate) budgets: Vec<BudgetArg>,
    pub(crate) subject: String,
    pub(crate) mode: ReserveMode,
}

impl ScriptArgs for ReserveArgs {
    const LAYOUT: Layout = Layout {
        head: &[
            "time",
            "bill balance",
            "has tenant",
            "spend cap",
            "money",
            "budget ttl",
            "lifetime",
            "tenant expected",
            "books base",
            "attempt",
        ],
        each: &["budget limit", "budget period"],
        tail: &["subject", "mode?"],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .flag(self.bill_balance)
            .flag(self.has_tenant)
            .text(self.spend_cap.map_or_else(String::new, |c| c.to_string()))
            .num(self.money)
            .num(self.budget_ttl)
            .num(self.lifetime)
            .flag(self.tenant_expected)
            .text(&*self.books_base)
            .text(&*self.attempt);
        for b in &self.budgets {
            a.num(b.limit);
            match b.period {
                Some(p) => a.num(p),
                None => a.text("-1"),
            };
        }
        a.text(&*self.subject);
        match self.mode {
            ReserveMode::Plain => {}
            ReserveMode::Force => {
                a.text("f");
            }
            ReserveMode::Block { headroom } => {
                a.text(format!("h{headroom}"));
            }
        }
    }
}

impl ScriptCall for ReserveArgs {
    const SCRIPT: Script = Script::BillingReserve;
}

impl BatchArgs for ReserveArgs {
    fn code(&self) -> Code {
        Code::BillingReserve
    }
}

/// Batch op `bb`: a billing quota block (its `block_keys` keys first), else the
/// request `alone`.
pub(crate) struct BlockReserveArgs {
    pub(crate) block_keys: usize,
    pub(crate) block: ReserveArgs,
    pub(crate) alone: ReserveArgs,
}

impl ScriptArgs for BlockReserveArgs {
    const LAYOUT: Layout = Layout {
        head: &["block key count", "block argument count"],
        each: &["the block's arguments, then the request's"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        let block = self.block.argv();
        a.num(self.block_keys).num(block.len());
        for b in block.into_iter().chain(self.alone.argv()) {
            a.raw(b);
        }
    }
}

impl BatchArgs for BlockReserveArgs {
    fn code(&self) -> Code {
        Code::BillingBlock
    }
}

/// What a settlement does to its attempt (`billing_settle.lua`'s outcome).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SettleOutcome {
    /// Settled at the cost.
    Settled,
    /// Pending reconciliation.
    Pending,
    /// Refunded (or, reconciling, written off).
    Refund,
    /// A part of a billing block still in use: its costs so far (cumulative).
    Part,
}

impl SettleOutcome {
    fn as_str(self) -> &'static str {
        match self {
            SettleOutcome::Settled => "s",
            SettleOutcome::Pending => "p",
            SettleOutcome::Refund => "r",
            SettleOutcome::Part => "c",
        }
    }
}

/// `billing_settle.lua` (and batch op `bs`): an attempt settled.
pub(crate) struct SettleArgs {
    pub(crate) time: String,
    pub(crate) outcome: SettleOutcome,
    /// Checked exact by the caller.
    pub(crate) cost: Money,
    pub(crate) budget_ttl: Millis,
    pub(crate) attempt: String,
    /// An operator's reconciliation: for a pending attempt only.
    pub(crate) reconcile: bool,
    /// A retry after a try whose answer never came (D10).
    pub(crate) retry: bool,
}

impl ScriptArgs for SettleArgs {
    const LAYOUT: Layout = Layout::head(&[
        "time",
        "outcome",
        "cost",
        "budget ttl",
        "attempt",
        "reconcile?",
        "retry?",
    ]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .text(self.outcome.as_str())
            .num(self.cost)
            .num(self.budget_ttl)
            .text(&*self.attempt)
            .flag(self.reconcile)
            .flag(self.retry);
    }
}

impl ScriptCall for SettleArgs {
    const SCRIPT: Script = Script::BillingSettle;
}

impl BatchArgs for SettleArgs {
    fn code(&self) -> Code {
        Code::BillingSettle
    }
}

/// `billing_account.lua`: the usage view.
pub(crate) struct AccountArgs {
    pub(crate) time: String,
    pub(crate) has_tenant: bool,
    /// Each budget's period (ms; `None`: none).
    pub(crate) periods: Vec<Option<Millis>>,
}

impl ScriptArgs for AccountArgs {
    const LAYOUT: Layout = Layout {
        head: &["time", "has tenant"],
        each: &["budget period"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).flag(self.has_tenant);
        for p in &self.periods {
            match p {
                Some(p) => a.num(p),
                None => a.text("-1"),
            };
        }
    }
}

impl ScriptCall for AccountArgs {
    const SCRIPT: Script = Script::BillingAccount;
}

/// `billing_seed.lua`: a tenant's balance, unless it has one.
pub(crate) struct SeedArgs {
    /// Checked exact by the caller.
    pub(crate) amount: Money,
}

impl ScriptArgs for SeedArgs {
    const LAYOUT: Layout = Layout::head(&["amount"]);
    fn write(&self, a: &mut Argv) {
        a.num(self.amount);
    }
}

impl ScriptCall for SeedArgs {
    const SCRIPT: Script = Script::BillingSeed;
}

/// `billing_credit.lua`: added to a tenant's balance.
pub(crate) struct CreditArgs {
    /// Checked exact by the caller.
    pub(crate) amount: Money,
}

impl ScriptArgs for CreditArgs {
    const LAYOUT: Layout = Layout::head(&["amount"]);
    fn write(&self, a: &mut Argv) {
        a.num(self.amount);
    }
}

impl ScriptCall for CreditArgs {
    const SCRIPT: Script = Script::BillingCredit;
}

/// Batch op `zr`: one lease released.
pub(crate) struct LeaseReleaseArgs {
    pub(crate) member: String,
}

impl ScriptArgs for LeaseReleaseArgs {
    const LAYOUT: Layout = Layout::head(&["member"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.member);
    }
}

impl BatchArgs for LeaseReleaseArgs {
    fn code(&self) -> Code {
        Code::LeaseRelease
    }
}

/// Batch op `zm`: a quota block's leases `base:0` .. `base:<size - 1>` released.
pub(crate) struct BlockLeasesArgs {
    pub(crate) base: String,
    pub(crate) size: u32,
}

impl ScriptArgs for BlockLeasesArgs {
    const LAYOUT: Layout = Layout::head(&["member base", "size"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.base).num(self.size);
    }
}

impl BatchArgs for BlockLeasesArgs {
    fn code(&self) -> Code {
        Code::BlockLeases
    }
}

/// Batch op `zl`: some of a quota block's leases released, by index.
pub(crate) struct SomeBlockLeasesArgs {
    pub(crate) base: String,
    pub(crate) indices: Vec<u32>,
}

impl ScriptArgs for SomeBlockLeasesArgs {
    const LAYOUT: Layout = Layout {
        head: &["member base"],
        each: &["index"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.base);
        for i in &self.indices {
            a.num(i);
        }
    }
}

impl BatchArgs for SomeBlockLeasesArgs {
    fn code(&self) -> Code {
        Code::BlockLeasesSome
    }
}

/// One queued op as the batch script reads it.
#[derive(Clone, Copy)]
pub(crate) struct QueuedOp<'a> {
    pub(crate) code: Code,
    pub(crate) keys: usize,
    pub(crate) args: &'a [Vec<u8>],
}

/// `batch.lua`: every op's code, key count, argument count and arguments.
pub(crate) struct BatchCallArgs<'a> {
    pub(crate) ops: Vec<QueuedOp<'a>>,
}

impl ScriptArgs for BatchCallArgs<'_> {
    const LAYOUT: Layout = Layout {
        head: &["op count"],
        each: &["code", "key count", "argument count", "arguments…"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.num(self.ops.len());
        for op in &self.ops {
            a.text(op.code.as_str()).num(op.keys).num(op.args.len());
            for x in op.args {
                a.raw(x.clone());
            }
        }
    }
}

impl ScriptCall for BatchCallArgs<'_> {
    const SCRIPT: Script = Script::Batch;
}
