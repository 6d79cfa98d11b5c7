//! The Lua scripts, one per decision, loaded once and called by SHA (`EVALSHA`).
//!
//! [`Script`] names each script; one table, keyed by it, holds each script's source and
//! its two variants (a single node's, and a Cluster's: see [`Script::on`]). The
//! arguments each script reads are written by one type per script ([`args`]).

pub(crate) mod args;
#[cfg(test)]
mod layout_tests;

use std::sync::LazyLock;

/// `now_ms`, shared by every script.
const TIME: &str = include_str!("../lua/time.lua");
/// `live_leases` and `add_lease`, shared by the scripts that take a lease.
const LEASE: &str = include_str!("../lua/lease.lua");
/// Shared helpers of the window scripts: the port of `ScopeState`.
const WINDOW_PRELUDE: &str = include_str!("../lua/window_prelude.lua");

const SLOT_ACQUIRE: &str = include_str!("../lua/slot_acquire.lua");
const SLOT_RENEW: &str = include_str!("../lua/slot_renew.lua");
/// A quota block's leases renewed together.
const SLOT_RENEW_BLOCK: &str = include_str!("../lua/slot_renew_block.lua");
const SLOT_IN_FLIGHT: &str = include_str!("../lua/slot_in_flight.lua");
const WINDOW_ADMIT: &str = include_str!("../lua/window_admit.lua");
const WINDOW_SETTLE: &str = include_str!("../lua/window_settle.lua");
const WINDOW_VIEW: &str = include_str!("../lua/window_view.lua");
const WINDOW_ADMIT_ALL: &str = include_str!("../lua/window_admit_all.lua");
/// A channel's provider windows and capacity lease in one step.
const ADMIT_ALL_ACQUIRE: &str = include_str!("../lua/admit_all_acquire.lua");
/// A subject's slot and window admission in one step.
const JOINT_ADMIT: &str = include_str!("../lua/joint_admit.lua");
/// Settlements and releases of many requests in one call.
const BATCH: &str = include_str!("../lua/batch.lua");
/// Shared helpers of the billing scripts: the port of `Ledger`.
const BILLING_PRELUDE: &str = include_str!("../lua/billing_prelude.lua");
const BILLING_RESERVE: &str = include_str!("../lua/billing_reserve.lua");
const BILLING_SETTLE: &str = include_str!("../lua/billing_settle.lua");
const BILLING_ACCOUNT: &str = include_str!("../lua/billing_account.lua");
const BILLING_SEED: &str = include_str!("../lua/billing_seed.lua");
const BILLING_CREDIT: &str = include_str!("../lua/billing_credit.lua");
/// A closed attempt's charge corrected once (B7).
const BILLING_CORRECT: &str = include_str!("../lua/billing_correct.lua");

/// Every script of the store, in the order they are loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Script {
    SlotAcquire,
    SlotRenew,
    SlotInFlight,
    WindowAdmit,
    WindowView,
    BillingReserve,
    BillingSettle,
    BillingAccount,
    BillingSeed,
    BillingCredit,
    WindowAdmitAll,
    Batch,
    /// A subject's slot with its windows.
    JointAdmit,
    /// A channel's provider windows with a capacity lease.
    ChannelAdmit,
    /// A quota block's leases renewed together.
    SlotRenewBlock,
    /// A closed attempt's charge corrected once.
    BillingCorrect,
}

/// One script: its source and the script as each kind of connection runs it.
struct Entry {
    source: String,
    node: redis::Script,
    cluster: redis::Script,
}

static TABLE: LazyLock<[Entry; Script::ALL.len()]> = LazyLock::new(|| {
    Script::ALL.map(|s| {
        let source = s.build();
        Entry {
            node: redis::Script::new(&source),
            cluster: redis::Script::new(&cluster_source(&source)),
            source,
        }
    })
});

/// What a script does to the state others rely on, for the replicas' acknowledgement
/// of its writes (D10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Reads only: nothing to acknowledge.
    Read,
    /// Admits something new (a decision, a reservation, a top-up): under
    /// [`Unacknowledged::Refuse`](crate::Unacknowledged::Refuse) it is not relied on
    /// without the acknowledgement.
    Admits,
    /// Follows up on an admission (a settlement, a correction of one, a release, a
    /// renewal): taken with or
    /// without the acknowledgement — it is on the master either way, and refusing it
    /// would only leave held what it gives back.
    FollowsUp,
}

impl Script {
    /// What the script does (see [`Effect`]); the batch script's depends on its ops.
    pub(crate) fn effect(self) -> Effect {
        match self {
            Script::SlotInFlight | Script::WindowView | Script::BillingAccount => Effect::Read,
            Script::SlotAcquire
            | Script::WindowAdmit
            | Script::BillingReserve
            | Script::BillingSeed
            | Script::BillingCredit
            | Script::WindowAdmitAll
            | Script::JointAdmit
            | Script::ChannelAdmit => Effect::Admits,
            Script::SlotRenew
            | Script::BillingSettle
            | Script::BillingCorrect
            | Script::SlotRenewBlock
            | Script::Batch => Effect::FollowsUp,
        }
    }

    /// Every script, in load order (the table's order).
    pub(crate) const ALL: [Script; 16] = [
        Script::SlotAcquire,
        Script::SlotRenew,
        Script::SlotInFlight,
        Script::WindowAdmit,
        Script::WindowView,
        Script::BillingReserve,
        Script::BillingSettle,
        Script::BillingAccount,
        Script::BillingSeed,
        Script::BillingCredit,
        Script::WindowAdmitAll,
        Script::Batch,
        Script::JointAdmit,
        Script::ChannelAdmit,
        Script::SlotRenewBlock,
        Script::BillingCorrect,
    ];

    fn entry(self) -> &'static Entry {
        &TABLE[self as usize]
    }

    /// The script as a connection runs it: on a Cluster, with a `#!lua` shebang
    /// (Redis 7+), which declares it a write command. redis-rs marks every Cluster
    /// connection `READONLY` (so reads may go to replicas), and a replica serves a
    /// script *without* the shebang to such a connection instead of redirecting it:
    /// after a failover, the demoted master would answer every call with `READONLY`
    /// errors and the client would never learn the new topology. A write command gets
    /// `MOVED` to the new master, which makes the client refresh its slot map.
    pub(crate) fn on(self, cluster: bool) -> &'static redis::Script {
        let e = self.entry();
        if cluster { &e.cluster } else { &e.node }
    }

    /// The source `SCRIPT LOAD` takes for the script as [`on`](Self::on) gives it.
    pub(crate) fn load_source(self, cluster: bool) -> String {
        let src = &self.entry().source;
        if cluster {
            cluster_source(src)
        } else {
            src.clone()
        }
    }

    /// The whole source: the shared helpers, then the operation.
    fn build(self) -> String {
        match self {
            Script::SlotAcquire => slot(SLOT_ACQUIRE),
            Script::SlotRenew => slot(SLOT_RENEW),
            Script::SlotInFlight => slot(SLOT_IN_FLIGHT),
            Script::WindowAdmit => window(WINDOW_ADMIT),
            Script::WindowView => window(WINDOW_VIEW),
            Script::BillingReserve => billing(BILLING_RESERVE),
            Script::BillingSettle => billing(BILLING_SETTLE),
            Script::BillingAccount => billing(BILLING_ACCOUNT),
            Script::BillingSeed => billing(BILLING_SEED),
            Script::BillingCredit => billing(BILLING_CREDIT),
            Script::WindowAdmitAll => with_admit(false, WINDOW_ADMIT_ALL),
            Script::Batch => batch(),
            Script::JointAdmit => with_admit(true, JOINT_ADMIT),
            Script::ChannelAdmit => admit_all_acquire(),
            Script::SlotRenewBlock => slot(SLOT_RENEW_BLOCK),
            Script::BillingCorrect => billing(BILLING_CORRECT),
        }
    }

    /// The operation's own Lua (the one that reads the script's `ARGV`).
    #[cfg(test)]
    pub(crate) fn operation(self) -> &'static str {
        match self {
            Script::SlotAcquire => SLOT_ACQUIRE,
            Script::SlotRenew => SLOT_RENEW,
            Script::SlotInFlight => SLOT_IN_FLIGHT,
            Script::WindowAdmit => WINDOW_ADMIT,
            Script::WindowView => WINDOW_VIEW,
            Script::BillingReserve => BILLING_RESERVE,
            Script::BillingSettle => BILLING_SETTLE,
            Script::BillingAccount => BILLING_ACCOUNT,
            Script::BillingSeed => BILLING_SEED,
            Script::BillingCredit => BILLING_CREDIT,
            Script::WindowAdmitAll => WINDOW_ADMIT_ALL,
            Script::Batch => BATCH,
            Script::JointAdmit => JOINT_ADMIT,
            Script::ChannelAdmit => ADMIT_ALL_ACQUIRE,
            Script::SlotRenewBlock => SLOT_RENEW_BLOCK,
            Script::BillingCorrect => BILLING_CORRECT,
        }
    }
}

/// The Lua of the window settlement, which runs as an op of the batch script.
#[cfg(test)]
pub(crate) const WINDOW_SETTLE_LUA: &str = WINDOW_SETTLE;

fn slot(op: &str) -> String {
    [TIME, LEASE, op].concat()
}

fn window(op: &str) -> String {
    [TIME, WINDOW_PRELUDE, op].concat()
}

/// `op` after the window admission as a local function `admit(KEYS, ARGV)` (its own
/// KEYS and ARGV shadow the script's), which `op` calls once per item; `lease`: with
/// the lease helpers too.
fn with_admit(lease: bool, op: &str) -> String {
    [
        TIME,
        if lease { LEASE } else { "" },
        WINDOW_PRELUDE,
        "local function admit(KEYS, ARGV)\n",
        WINDOW_ADMIT,
        "\nend\n",
        op,
    ]
    .concat()
}

/// The batch script: the window and billing settlements and the billing reservation as
/// local functions, then the dispatcher. The window prelude is pure functions, shared at the top; the billing
/// prelude holds a per-call cache, so it sits inside its function (every op starts
/// from fresh state).
fn batch() -> String {
    [
        TIME,
        WINDOW_PRELUDE,
        "local function window_settle(KEYS, ARGV)\n",
        WINDOW_SETTLE,
        "\nend\nlocal function billing_settle(KEYS, ARGV)\n",
        BILLING_PRELUDE,
        BILLING_SETTLE,
        "\nend\nlocal function billing_reserve(KEYS, ARGV)\n",
        BILLING_PRELUDE,
        BILLING_RESERVE,
        "\nend\n",
        BATCH,
    ]
    .concat()
}

/// The channel script: the all-or-nothing loop as a local function too, then the
/// capacity lease.
fn admit_all_acquire() -> String {
    let op = [
        "local function admit_all(KEYS, ARGV)\n",
        WINDOW_ADMIT_ALL,
        "\nend\n",
        ADMIT_ALL_ACQUIRE,
    ]
    .concat();
    with_admit(true, &op)
}

fn billing(op: &str) -> String {
    [TIME, BILLING_PRELUDE, op].concat()
}

/// A script's source as a Cluster runs it.
fn cluster_source(src: &str) -> String {
    ["#!lua\n", src].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_has_its_place_in_the_table() {
        for (i, s) in Script::ALL.into_iter().enumerate() {
            assert_eq!(s as usize, i, "{s:?}");
            assert_ne!(s.on(false).get_hash(), s.on(true).get_hash());
            assert_eq!(
                redis::Script::new(&s.load_source(true)).get_hash(),
                s.on(true).get_hash()
            );
            assert!(s.load_source(false).ends_with(s.operation()) || s == Script::ChannelAdmit);
        }
    }
}
