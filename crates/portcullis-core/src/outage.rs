//! What the log tells of an outage (D11): a line when failures begin, one every
//! [`OUTAGE_REPORT_EVERY`] while they go on, one when answers end them — with counts —
//! never a line per failure.
//!
//! An outage ends only once answers come without failures between them for
//! [`OUTAGE_QUIET`]: when one node of a Cluster is down, the calls to the healthy ones
//! are answered between the dead one's failures, and each answer would otherwise end
//! the outage and the next failure begin a new one — thousands of lines a minute for
//! one fault. Plain atomics and a caller's clock: a healthy path costs one relaxed load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often an outage that goes on is reported again.
pub const OUTAGE_REPORT_EVERY: Duration = Duration::from_secs(30);

/// How long answers must come without a failure for an outage to end.
pub const OUTAGE_QUIET: Duration = Duration::from_secs(1);

/// One outage's counts (see the [module](self)).
#[derive(Debug, Default)]
pub struct Outage {
    /// Failures in the outage under way; 0 = none.
    failures: AtomicU64,
    /// When it began, in ms of the caller's clock.
    began_ms: AtomicU64,
    /// When it was last reported.
    reported_ms: AtomicU64,
    /// When its last failure came.
    last_failure_ms: AtomicU64,
}

/// What the log says of an outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutageReport {
    /// The first failure after answers.
    Began,
    /// Still failing: failures so far, over how long.
    Continues {
        /// Failures since it began.
        failures: u64,
        /// Since it began, in ms.
        for_ms: u64,
    },
    /// Answers after failures: how many, over how long.
    Ended {
        /// Failures in the whole outage.
        failures: u64,
        /// From its first failure to the answer that ended it, in ms.
        for_ms: u64,
    },
}

impl Outage {
    /// A failure at `now_ms`: what to report, if anything.
    pub fn failed(&self, now_ms: u64) -> Option<OutageReport> {
        self.last_failure_ms.fetch_max(now_ms, Ordering::Relaxed);
        let before = self.failures.fetch_add(1, Ordering::AcqRel);
        if before == 0 {
            self.began_ms.store(now_ms, Ordering::Relaxed);
            self.reported_ms.store(now_ms, Ordering::Relaxed);
            return Some(OutageReport::Began);
        }
        let last = self.reported_ms.load(Ordering::Relaxed);
        let due = now_ms.saturating_sub(last) >= OUTAGE_REPORT_EVERY.as_millis() as u64;
        // One reporter per period: the one whose exchange succeeds.
        (due && self
            .reported_ms
            .compare_exchange(last, now_ms, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok())
        .then(|| OutageReport::Continues {
            failures: before + 1,
            for_ms: now_ms.saturating_sub(self.began_ms.load(Ordering::Relaxed)),
        })
    }

    /// An answer at `now()`: the end of the outage under way, if there is one and no
    /// failure came within [`OUTAGE_QUIET`] before it. The clock is read only during
    /// an outage: otherwise an answer costs one relaxed load.
    pub fn answered(&self, now: impl FnOnce() -> u64) -> Option<OutageReport> {
        if self.failures.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let now = now();
        let last = self.last_failure_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < OUTAGE_QUIET.as_millis() as u64 {
            return None;
        }
        let failures = self.failures.swap(0, Ordering::AcqRel);
        (failures > 0).then(|| OutageReport::Ended {
            failures,
            for_ms: now.saturating_sub(self.began_ms.load(Ordering::Relaxed)),
        })
    }

    /// True while an outage is under way (failures not yet ended by answers).
    pub fn is_on(&self) -> bool {
        self.failures.load(Ordering::Relaxed) > 0
    }
}

/// Milliseconds on a process-wide monotonic clock (for outage reports).
pub fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: u64 = OUTAGE_QUIET.as_millis() as u64;

    #[test]
    fn d11_an_outage_is_reported_when_it_begins_every_period_and_when_it_ends() {
        let o = Outage::default();
        assert_eq!(o.answered(|| 0), None, "no outage, nothing to say");
        assert_eq!(o.failed(1_000), Some(OutageReport::Began));
        let period = OUTAGE_REPORT_EVERY.as_millis() as u64;
        // A thousand failures within the period: silent.
        for i in 0..1_000 {
            assert_eq!(o.failed(1_000 + i % period), None, "failure {i}");
        }
        assert_eq!(
            o.failed(1_000 + period),
            Some(OutageReport::Continues {
                failures: 1_002,
                for_ms: period
            })
        );
        assert_eq!(
            o.failed(1_000 + period + 1),
            None,
            "reported once per period"
        );
        assert!(o.is_on());
        assert_eq!(
            o.answered(|| 5_000 + period),
            Some(OutageReport::Ended {
                failures: 1_003,
                for_ms: 4_000 + period
            })
        );
        assert!(!o.is_on());
        assert_eq!(o.answered(|| 6_000 + period), None, "ended once");
        assert_eq!(
            o.failed(7_000 + period),
            Some(OutageReport::Began),
            "a new outage"
        );
    }

    #[test]
    fn d11_answers_between_failures_do_not_end_an_outage() {
        // One dead node among healthy ones: its failures and the others' answers
        // interleave for 10 s. One line when it began, one when it ended.
        let o = Outage::default();
        let mut lines = Vec::new();
        for ms in (0..10_000).step_by(5) {
            lines.extend(o.failed(ms));
            lines.extend(o.answered(|| ms + 2));
        }
        assert_eq!(lines, [OutageReport::Began]);
        // Answers within the quiet period after the last failure still say nothing…
        assert_eq!(o.answered(|| 9_995 + QUIET - 1), None);
        // …the first one past it ends the outage, with every failure counted.
        assert_eq!(
            o.answered(|| 9_995 + QUIET),
            Some(OutageReport::Ended {
                failures: 2_000,
                for_ms: 9_995 + QUIET
            })
        );
    }
}
