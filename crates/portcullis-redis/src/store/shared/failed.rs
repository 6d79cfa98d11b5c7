//! The attempts whose settlement call failed (D10).

use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// Most attempts remembered as having a failed settlement; past it, a retry is sent as a
/// first try (and an attempt it cannot find is "nothing done", as before D10).
const MAX_FAILED_SETTLES: usize = 100_000;

/// The attempts (by record key) whose settlement call failed and has not landed since:
/// a settlement of one of them is a retry, which Redis answers with the attempt's final
/// state, or — finding nothing — records as an unknown outcome (D10).
#[derive(Default)]
pub(crate) struct FailedSettles {
    set: Mutex<std::collections::HashSet<String>>,
    /// Its size: a settlement checks it without the lock while nothing failed.
    len: std::sync::atomic::AtomicUsize,
}

impl FailedSettles {
    /// True when a settlement of `attempt` failed before.
    pub(crate) fn was_failed(&self, attempt: &str) -> bool {
        self.len.load(Ordering::Acquire) != 0
            && self
                .set
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(attempt)
    }

    /// Notes how a settlement of `attempt` ended.
    pub(crate) fn note(&self, attempt: String, landed: bool) {
        if landed && self.len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        if landed {
            set.remove(&attempt);
        } else if set.len() < MAX_FAILED_SETTLES {
            set.insert(attempt);
        }
        self.len.store(set.len(), Ordering::Release);
    }
}
