//! The arguments of the billing scripts and batch ops.

use super::{Argv, Layout, ScriptArgs};
use portcullis_core::{Millis, Money};

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

/// `billing_correct.lua`: a closed attempt's charge corrected once (B7).
pub(crate) struct CorrectArgs {
    pub(crate) time: String,
    /// New cost − charged; checked exact by the caller.
    pub(crate) difference: Money,
    pub(crate) bill_balance: bool,
    pub(crate) has_tenant: bool,
    pub(crate) charged_at: Millis,
    /// How long the marker is kept (ms, > 0).
    pub(crate) keep: Millis,
    pub(crate) budget_ttl: Millis,
    /// Each budget's period (ms; `None`: none).
    pub(crate) periods: Vec<Option<Millis>>,
}

impl ScriptArgs for CorrectArgs {
    const LAYOUT: Layout = Layout {
        head: &[
            "time",
            "difference",
            "bill balance",
            "has tenant",
            "charged at",
            "keep",
            "budget ttl",
        ],
        each: &["budget period"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.difference)
            .flag(self.bill_balance)
            .flag(self.has_tenant)
            .num(self.charged_at)
            .num(self.keep)
            .num(self.budget_ttl);
        for p in &self.periods {
            match p {
                Some(p) => a.num(p),
                None => a.text("-1"),
            };
        }
    }
}
