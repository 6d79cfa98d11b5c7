//! The Lua scripts, one per decision, loaded once and called by SHA (`EVALSHA`).

use redis::Script;
use std::sync::LazyLock;

/// `now_ms`, shared by every script.
const TIME: &str = include_str!("lua/time.lua");
/// `live_leases` and `add_lease`, shared by the scripts that take a lease.
const LEASE: &str = include_str!("lua/lease.lua");
/// Shared helpers of the window scripts: the port of `ScopeState`.
const WINDOW_PRELUDE: &str = include_str!("lua/window_prelude.lua");

const SLOT_ACQUIRE: &str = include_str!("lua/slot_acquire.lua");
const SLOT_RENEW: &str = include_str!("lua/slot_renew.lua");
/// A quota block's leases renewed together.
const SLOT_RENEW_BLOCK: &str = include_str!("lua/slot_renew_block.lua");
const SLOT_IN_FLIGHT: &str = include_str!("lua/slot_in_flight.lua");
const WINDOW_ADMIT: &str = include_str!("lua/window_admit.lua");
const WINDOW_SETTLE: &str = include_str!("lua/window_settle.lua");
const WINDOW_VIEW: &str = include_str!("lua/window_view.lua");
const WINDOW_ADMIT_ALL: &str = include_str!("lua/window_admit_all.lua");
/// A channel's provider windows and capacity lease in one step.
const ADMIT_ALL_ACQUIRE: &str = include_str!("lua/admit_all_acquire.lua");
/// A subject's slot and window admission in one step.
const JOINT_ADMIT: &str = include_str!("lua/joint_admit.lua");
/// Settlements and releases of many requests in one call.
const BATCH: &str = include_str!("lua/batch.lua");
/// Shared helpers of the billing scripts: the port of `Ledger`.
const BILLING_PRELUDE: &str = include_str!("lua/billing_prelude.lua");
const BILLING_RESERVE: &str = include_str!("lua/billing_reserve.lua");
const BILLING_SETTLE: &str = include_str!("lua/billing_settle.lua");
const BILLING_ACCOUNT: &str = include_str!("lua/billing_account.lua");
const BILLING_SEED: &str = include_str!("lua/billing_seed.lua");
const BILLING_CREDIT: &str = include_str!("lua/billing_credit.lua");

/// Every script of the store.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) in_flight: Script,
    pub(crate) admit: Script,
    pub(crate) view: Script,
    pub(crate) admit_all: Script,
    pub(crate) batch: Script,
    pub(crate) joint: Script,
    pub(crate) channel: Script,
    pub(crate) renew_block: Script,
    pub(crate) reserve: Script,
    pub(crate) settle_attempt: Script,
    pub(crate) account: Script,
    pub(crate) seed: Script,
    pub(crate) credit: Script,
    /// Source of each script, for `SCRIPT LOAD`.
    pub(crate) sources: Vec<String>,
}

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

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let sources = vec![
        slot(SLOT_ACQUIRE),
        slot(SLOT_RENEW),
        slot(SLOT_IN_FLIGHT),
        window(WINDOW_ADMIT),
        window(WINDOW_VIEW),
        billing(BILLING_RESERVE),
        billing(BILLING_SETTLE),
        billing(BILLING_ACCOUNT),
        billing(BILLING_SEED),
        billing(BILLING_CREDIT),
        with_admit(false, WINDOW_ADMIT_ALL),
        batch(),
        with_admit(true, JOINT_ADMIT),
        admit_all_acquire(),
        slot(SLOT_RENEW_BLOCK),
    ];
    Scripts {
        acquire: Script::new(&sources[0]),
        renew: Script::new(&sources[1]),
        in_flight: Script::new(&sources[2]),
        admit: Script::new(&sources[3]),
        view: Script::new(&sources[4]),
        reserve: Script::new(&sources[5]),
        settle_attempt: Script::new(&sources[6]),
        account: Script::new(&sources[7]),
        seed: Script::new(&sources[8]),
        credit: Script::new(&sources[9]),
        admit_all: Script::new(&sources[10]),
        batch: Script::new(&sources[11]),
        joint: Script::new(&sources[12]),
        channel: Script::new(&sources[13]),
        renew_block: Script::new(&sources[14]),
        sources,
    }
});

/// The scripts as a Redis Cluster runs them: each with a `#!lua` shebang (Redis 7+),
/// which declares it a write command. redis-rs marks every Cluster connection
/// `READONLY` (so reads may go to replicas), and a replica serves a script *without*
/// the shebang to such a connection instead of redirecting it: after a failover, the
/// demoted master would answer every call with `READONLY` errors and the client would
/// never learn the new topology. A write command gets `MOVED` to the new master, which
/// makes the client refresh its slot map. In the order of [`Scripts::sources`].
pub(crate) static CLUSTER_SCRIPTS: LazyLock<Vec<Script>> = LazyLock::new(|| {
    SCRIPTS
        .sources
        .iter()
        .map(|src| Script::new(&cluster_source(src)))
        .collect()
});

/// A script's source as a Cluster runs it.
pub(crate) fn cluster_source(src: &str) -> String {
    ["#!lua\n", src].concat()
}

/// The Cluster variant of one of [`SCRIPTS`]' scripts.
pub(crate) fn for_cluster(script: &'static Script) -> &'static Script {
    let i = SCRIPTS
        .hashes()
        .iter()
        .position(|h| *h == script.get_hash())
        .expect("every script of the store is one of SCRIPTS");
    &CLUSTER_SCRIPTS[i]
}

impl Scripts {
    /// SHA1 of every script, in the order of `sources`.
    pub(crate) fn hashes(&self) -> [&str; 15] {
        [
            self.acquire.get_hash(),
            self.renew.get_hash(),
            self.in_flight.get_hash(),
            self.admit.get_hash(),
            self.view.get_hash(),
            self.reserve.get_hash(),
            self.settle_attempt.get_hash(),
            self.account.get_hash(),
            self.seed.get_hash(),
            self.credit.get_hash(),
            self.admit_all.get_hash(),
            self.batch.get_hash(),
            self.joint.get_hash(),
            self.channel.get_hash(),
            self.renew_block.get_hash(),
        ]
    }
}

/// The source `SCRIPT LOAD` takes for `script`, one of [`SCRIPTS`]' scripts or of their
/// Cluster variants.
pub(crate) fn source_of(script: &Script) -> String {
    let hash = script.get_hash();
    if let Some(i) = SCRIPTS.hashes().iter().position(|h| *h == hash) {
        return SCRIPTS.sources[i].clone();
    }
    let i = CLUSTER_SCRIPTS
        .iter()
        .position(|s| s.get_hash() == hash)
        .expect("every script of the store is one of SCRIPTS or CLUSTER_SCRIPTS");
    cluster_source(&SCRIPTS.sources[i])
}
