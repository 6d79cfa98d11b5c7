//! Rejections by code over the last minutes, for the operator page (P4).
//!
//! [`RejectionRing`] is a plain, fixed-size ring of per-minute counters — one slot per
//! wall-clock minute for the last [`MINUTES`] minutes, one counter per
//! [`GatewayCode`] — decided by the time it is given, so tests drive it with any clock.
//! [`RejectionLog`] shares one ring between the error path (fed through
//! [`RejectionLog::observer`], placed right inside the error mapping, so it sees exactly
//! the rejections `portcullis_rejections_total` counts) and `GET /admin/rejections`.
//!
//! Memory is fixed: [`MINUTES`] × the number of gateway codes counters, whatever the
//! traffic; a minute older than the ring is overwritten when its slot comes round.

use portcullis::core::{Clock, GatewayCode, Millis, Rejection};
use serde_json::{Map, Value, json};
use std::error::Error;
use std::sync::{Arc, Mutex};

/// Minutes kept.
pub const MINUTES: usize = 15;

const MINUTE_MS: Millis = 60_000;

/// Gateway codes counted, in [`GatewayCode::ALL`] order.
const CODES: usize = GatewayCode::ALL.len();

/// One minute's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    /// The minute (Unix milliseconds / 60 000) these counters are for; `None` if unused.
    minute: Option<u64>,
    counts: [u64; CODES],
}

const EMPTY: Slot = Slot {
    minute: None,
    counts: [0; CODES],
};

/// One minute of a [`RejectionRing::snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinuteCounts {
    /// Start of the minute (Unix milliseconds).
    pub start_ms: Millis,
    /// The codes refused in it and how many times, in code-table order (none if zero).
    pub counts: Vec<(GatewayCode, u64)>,
}

impl MinuteCounts {
    /// How many times `code` was answered in this minute.
    pub fn of(&self, code: GatewayCode) -> u64 {
        self.counts
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(0, |(_, n)| *n)
    }
}

/// Per-minute rejection counters for the last [`MINUTES`] minutes.
#[derive(Clone, Debug)]
pub struct RejectionRing {
    slots: [Slot; MINUTES],
}

impl Default for RejectionRing {
    fn default() -> Self {
        Self {
            slots: [EMPTY; MINUTES],
        }
    }
}

fn index_of(code: GatewayCode) -> Option<usize> {
    GatewayCode::ALL.iter().position(|c| *c == code)
}

impl RejectionRing {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one answer with `code` at `now_ms` (Unix milliseconds). A time older than
    /// the minute its slot already holds (a clock that went back by more than the ring)
    /// is dropped rather than counted into a newer minute.
    pub fn record(&mut self, code: GatewayCode, now_ms: Millis) {
        let Some(i) = index_of(code) else {
            return;
        };
        let minute = now_ms / MINUTE_MS;
        let slot = &mut self.slots[(minute % MINUTES as u64) as usize];
        match slot.minute {
            Some(m) if m == minute => {}
            Some(m) if m > minute => return,
            _ => {
                *slot = Slot {
                    minute: Some(minute),
                    counts: [0; CODES],
                }
            }
        }
        slot.counts[i] = slot.counts[i].saturating_add(1);
    }

    /// The last [`MINUTES`] minutes up to and including the one of `now_ms`, oldest
    /// first; a minute with nothing refused is there with no counts.
    pub fn snapshot(&self, now_ms: Millis) -> Vec<MinuteCounts> {
        let now = now_ms / MINUTE_MS;
        let first = now.saturating_sub(MINUTES as u64 - 1);
        (first..=now)
            .map(|minute| {
                let slot = &self.slots[(minute % MINUTES as u64) as usize];
                let counts = if slot.minute == Some(minute) {
                    GatewayCode::ALL
                        .iter()
                        .zip(slot.counts)
                        .filter(|(_, n)| *n > 0)
                        .map(|(c, n)| (*c, n))
                        .collect()
                } else {
                    Vec::new()
                };
                MinuteCounts {
                    start_ms: minute * MINUTE_MS,
                    counts,
                }
            })
            .collect()
    }
}

/// The gateway code of an error the error mapping is about to render: the first
/// [`Rejection`] in its source chain, else 50001 (as the error mapping answers it).
pub fn code_of(err: &(dyn Error + 'static)) -> GatewayCode {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<Rejection>() {
            return r.code();
        }
        cur = e.source();
    }
    GatewayCode::Internal
}

/// A [`RejectionRing`] shared by the request path and the admin route, read on a clock.
#[derive(Clone)]
pub struct RejectionLog<C = portcullis::time::TokioClock> {
    ring: Arc<Mutex<RejectionRing>>,
    clock: C,
}

impl Default for RejectionLog {
    fn default() -> Self {
        Self::with_clock(portcullis::time::TokioClock::default())
    }
}

impl std::fmt::Debug for RejectionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RejectionLog").finish_non_exhaustive()
    }
}

impl<C: Clock + Clone + Send + Sync + 'static> RejectionLog<C> {
    /// An empty log reading `clock` (Unix milliseconds).
    pub fn with_clock(clock: C) -> Self {
        Self {
            ring: Arc::new(Mutex::new(RejectionRing::new())),
            clock,
        }
    }

    /// Counts one answer with `code` now.
    pub fn record(&self, code: GatewayCode) {
        let now = self.clock.now();
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(code, now);
    }

    /// The last [`MINUTES`] minutes, oldest first.
    pub fn snapshot(&self) -> Vec<MinuteCounts> {
        let now = self.clock.now();
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .snapshot(now)
    }

    /// A function for `ServiceBuilder::map_err` right inside the error mapping: counts
    /// the error's code and passes the error on unchanged.
    pub fn observer(
        &self,
    ) -> impl Fn(portcullis::BoxError) -> portcullis::BoxError + Clone + Send + Sync + 'static {
        let log = self.clone();
        move |err| {
            log.record(code_of(&*err));
            err
        }
    }

    /// `GET /admin/rejections`: the minutes oldest first, each with its start and the
    /// codes refused in it, and the totals per code over them all.
    pub fn to_json(&self) -> Value {
        snapshot_json(&self.snapshot())
    }
}

/// The JSON of a snapshot: `{"minutes": N, "buckets": [{"start_ms", "counts": {"42902":
/// 3}}…], "totals": {"42902": 3}}`.
pub fn snapshot_json(minutes: &[MinuteCounts]) -> Value {
    let mut totals = [0u64; CODES];
    let buckets: Vec<Value> = minutes
        .iter()
        .map(|m| {
            let mut counts = Map::new();
            for (code, n) in &m.counts {
                if let Some(i) = index_of(*code) {
                    totals[i] = totals[i].saturating_add(*n);
                }
                counts.insert(code.code().to_string(), json!(n));
            }
            json!({"start_ms": m.start_ms, "counts": counts})
        })
        .collect();
    let totals: Map<String, Value> = GatewayCode::ALL
        .iter()
        .zip(totals)
        .filter(|(_, n)| *n > 0)
        .map(|(c, n)| (c.code().to_string(), json!(n)))
        .collect();
    json!({"minutes": MINUTES, "buckets": buckets, "totals": totals})
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::core::{LayerKind, ManualClock};

    const T0: Millis = 1_700_000_000_000 - 1_700_000_000_000 % MINUTE_MS;

    #[test]
    fn p4_rejections_are_counted_per_minute_and_code() {
        let mut r = RejectionRing::new();
        r.record(GatewayCode::RpmLimit, T0 + 1_000);
        r.record(GatewayCode::RpmLimit, T0 + 59_999);
        r.record(GatewayCode::ConcurrencyLimit, T0 + 30_000);
        r.record(GatewayCode::RpmLimit, T0 + MINUTE_MS);
        let s = r.snapshot(T0 + MINUTE_MS + 5);
        assert_eq!(s.len(), MINUTES);
        let last = &s[MINUTES - 1];
        let before = &s[MINUTES - 2];
        assert_eq!(last.start_ms, T0 + MINUTE_MS);
        assert_eq!(last.counts, vec![(GatewayCode::RpmLimit, 1)]);
        assert_eq!(before.start_ms, T0);
        // Code-table order: 42901 before 42902.
        assert_eq!(
            before.counts,
            vec![
                (GatewayCode::ConcurrencyLimit, 1),
                (GatewayCode::RpmLimit, 2)
            ]
        );
        assert!(s[..MINUTES - 2].iter().all(|m| m.counts.is_empty()));
        // Oldest first, one minute apart.
        assert!(
            s.windows(2)
                .all(|w| w[1].start_ms == w[0].start_ms + MINUTE_MS)
        );
    }

    #[test]
    fn p4_minutes_older_than_the_ring_fall_off_and_their_slot_is_reused() {
        let mut r = RejectionRing::new();
        r.record(GatewayCode::TpmLimit, T0);
        let later = T0 + MINUTES as u64 * MINUTE_MS;
        // Still in view one minute before it falls off …
        let s = r.snapshot(later - 1);
        assert_eq!(s[0].of(GatewayCode::TpmLimit), 1);
        // … gone once it is MINUTES minutes old, though nothing overwrote its slot.
        let s = r.snapshot(later);
        assert!(s.iter().all(|m| m.counts.is_empty()), "{s:?}");
        // The same slot, a new minute: counted from zero.
        r.record(GatewayCode::RpmLimit, later);
        let s = r.snapshot(later);
        assert_eq!(s[MINUTES - 1].counts, vec![(GatewayCode::RpmLimit, 1)]);
        assert_eq!(s[MINUTES - 1].of(GatewayCode::TpmLimit), 0);
    }

    #[test]
    fn p4_a_clock_gone_back_past_a_slot_is_not_counted_into_a_newer_minute() {
        let mut r = RejectionRing::new();
        let later = T0 + MINUTES as u64 * MINUTE_MS;
        r.record(GatewayCode::RpmLimit, later);
        r.record(GatewayCode::RpmLimit, T0); // same slot, an older minute
        let s = r.snapshot(later);
        assert_eq!(s[MINUTES - 1].of(GatewayCode::RpmLimit), 1);
    }

    #[test]
    fn p4_the_ring_stays_the_same_size_under_a_flood() {
        let mut r = RejectionRing::new();
        let size = std::mem::size_of_val(&r);
        for i in 0..100_000u64 {
            let code = GatewayCode::ALL[(i as usize) % CODES];
            r.record(code, T0 + i * 997);
        }
        assert_eq!(std::mem::size_of_val(&r), size);
        let now = T0 + 99_999 * 997;
        let s = r.snapshot(now);
        let total: u64 = s.iter().flat_map(|m| m.counts.iter().map(|(_, n)| n)).sum();
        // About 60 records a minute, 15 minutes kept (the current one in part).
        assert!((14 * 60..=15 * 61).contains(&total), "{total}");
    }

    #[test]
    fn p4_the_log_reads_its_clock_and_the_observer_counts_the_rejection_in_a_chain() {
        let clock = ManualClock::new(T0);
        let log = RejectionLog::with_clock(clock.clone());
        let observe = log.observer();
        let rejected: portcullis::BoxError =
            Rejection::new(GatewayCode::SubscriptionQuota, LayerKind::AnchoredWindow).into();
        let back = observe(rejected);
        assert!(
            back.downcast_ref::<Rejection>().is_some(),
            "passed on as is"
        );
        #[derive(Debug)]
        struct Wrapped(Rejection);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("wrapped")
            }
        }
        impl Error for Wrapped {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        clock.advance(std::time::Duration::from_secs(60));
        observe(Box::new(Wrapped(Rejection::new(
            GatewayCode::CapacityBusy,
            LayerKind::CapacityQueue,
        ))));
        observe("not a rejection".into());
        let s = log.snapshot();
        assert_eq!(
            s[MINUTES - 2].counts,
            vec![(GatewayCode::SubscriptionQuota, 1)]
        );
        assert_eq!(
            s[MINUTES - 1].counts,
            vec![(GatewayCode::CapacityBusy, 1), (GatewayCode::Internal, 1)]
        );
        let v = log.to_json();
        assert_eq!(v["minutes"], MINUTES);
        assert_eq!(v["buckets"].as_array().map(Vec::len), Some(MINUTES));
        assert_eq!(v["buckets"][MINUTES - 1]["start_ms"], T0 + MINUTE_MS);
        assert_eq!(v["buckets"][MINUTES - 1]["counts"]["42910"], 1);
        assert_eq!(
            v["totals"],
            json!({"42906": 1, "42910": 1, "50001": 1}),
            "{v}"
        );
    }
}
