//! Time as the limiters see it: whole milliseconds on a Unix-like axis.
//!
//! Every limiter takes its clock from outside (governor's rule): the in-memory store is
//! generic over a [`Clock`], tests drive a [`ManualClock`], and the Redis store reads
//! the server's `TIME` so instances never disagree.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (or since any fixed origin, for manual clocks).
pub type Millis = u64;

/// Converts a [`Duration`] to whole milliseconds, saturating.
pub fn millis(d: Duration) -> Millis {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A source of "now".
pub trait Clock: Clone + Send + Sync + 'static {
    /// The current time in milliseconds.
    fn now(&self) -> Millis;
}

/// Monotonic clock that reads like Unix time: the wall clock is sampled once at
/// construction and advanced by a monotonic clock afterwards, so NTP steps never move
/// a window backwards while reset times still convert to real dates.
///
/// The monotonic part is `quanta`'s (the CPU's invariant TSC where there is one, the
/// OS clock otherwise): every store operation and most layers read "now", about twenty
/// times per request through the whole stack, and the TSC read costs a fraction of a
/// `clock_gettime` call.
#[derive(Clone, Debug)]
pub struct SystemClock {
    origin: quanta::Instant,
    origin_unix_ms: Millis,
}

impl SystemClock {
    /// A clock anchored at the current wall time.
    pub fn new() -> Self {
        let origin_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(millis)
            .unwrap_or(0);
        Self {
            origin: quanta::Instant::now(),
            origin_unix_ms,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        self.origin_unix_ms + millis(quanta::Instant::now().saturating_duration_since(self.origin))
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A manual clock reading `start` milliseconds.
    pub fn new(start: Millis) -> Self {
        Self(Arc::new(AtomicU64::new(start)))
    }
    /// Moves the clock forward.
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(millis(d), Ordering::SeqCst);
    }
    /// Sets the clock to an absolute reading.
    pub fn set(&self, now: Millis) {
        self.0.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_unix_like_and_monotonic() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        // 2020-01-01 in ms: the clock must read like real Unix time.
        assert!(a > 1_577_836_800_000);
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let c = ManualClock::new(5);
        let d = c.clone();
        c.advance(Duration::from_millis(10));
        assert_eq!(d.now(), 15);
        d.set(1);
        assert_eq!(c.now(), 1);
    }
}
