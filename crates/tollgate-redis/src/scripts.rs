//! The Lua scripts, one per decision, loaded once and called by SHA (`EVALSHA`).

use redis::Script;
use std::sync::LazyLock;

/// `now_ms`, shared by every script.
const TIME: &str = include_str!("lua/time.lua");
/// Shared helpers of the window scripts: the port of `ScopeState`.
const WINDOW_PRELUDE: &str = include_str!("lua/window_prelude.lua");

const SLOT_ACQUIRE: &str = include_str!("lua/slot_acquire.lua");
const SLOT_RENEW: &str = include_str!("lua/slot_renew.lua");
const SLOT_IN_FLIGHT: &str = include_str!("lua/slot_in_flight.lua");
const WINDOW_ADMIT: &str = include_str!("lua/window_admit.lua");
const WINDOW_SETTLE: &str = include_str!("lua/window_settle.lua");
const WINDOW_VIEW: &str = include_str!("lua/window_view.lua");

/// Every script of the store.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) in_flight: Script,
    pub(crate) admit: Script,
    pub(crate) settle: Script,
    pub(crate) view: Script,
    /// Source of each script, for `SCRIPT LOAD`.
    pub(crate) sources: Vec<String>,
}

fn slot(op: &str) -> String {
    [TIME, op].concat()
}

fn window(op: &str) -> String {
    [TIME, WINDOW_PRELUDE, op].concat()
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let sources = vec![
        slot(SLOT_ACQUIRE),
        slot(SLOT_RENEW),
        slot(SLOT_IN_FLIGHT),
        window(WINDOW_ADMIT),
        window(WINDOW_SETTLE),
        window(WINDOW_VIEW),
    ];
    Scripts {
        acquire: Script::new(&sources[0]),
        renew: Script::new(&sources[1]),
        in_flight: Script::new(&sources[2]),
        admit: Script::new(&sources[3]),
        settle: Script::new(&sources[4]),
        view: Script::new(&sources[5]),
        sources,
    }
});

impl Scripts {
    /// SHA1 of every script, in the order of `sources`.
    pub(crate) fn hashes(&self) -> [&str; 6] {
        [
            self.acquire.get_hash(),
            self.renew.get_hash(),
            self.in_flight.get_hash(),
            self.admit.get_hash(),
            self.settle.get_hash(),
            self.view.get_hash(),
        ]
    }
}
