//! What the log tells of one node (D10, D11): when it went down and came back, and
//! when its replicas stopped and started acknowledging writes again — one line each,
//! with counts, whatever the number of calls (the redis crate's own line per
//! reconnection attempt is folded into these: the proxy filters it out).

use portcullis_core::outage::{Outage, OutageReport, mono_ms};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long after a node's replicas fell short its writes skip the wait for them (the
/// first write after it asks again): refused at once, or taken unacknowledged, instead
/// of each paying the whole wait while the shard has no replica to answer.
pub const SHORTFALL_RECHECK: Duration = Duration::from_millis(200);

/// One node's outages and replica shortfalls.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Calls failed while the node was down (its breaker open, or a call timed out).
    down: Outage,
    /// Writes its replicas did not acknowledge.
    short: Outage,
    /// Until when (ms of [`mono_ms`]) writes skip the wait for the replicas.
    short_until_ms: AtomicU64,
    /// Writes taken without the acknowledgement, and admissions refused for the lack of
    /// it, since the store started.
    unacked_taken: AtomicU64,
    unacked_refused: AtomicU64,
}

/// Counts of writes the replicas did not acknowledge (see
/// [`RedisStore::unacknowledged`](crate::RedisStore::unacknowledged)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unacked {
    /// Taken without the acknowledgement (give-backs, or every write under
    /// [`Unacknowledged::Accept`](crate::Unacknowledged::Accept)).
    pub taken: u64,
    /// Admissions refused for the lack of it.
    pub refused: u64,
}

impl Unacked {
    fn add(self, o: Unacked) -> Unacked {
        Unacked {
            taken: self.taken + o.taken,
            refused: self.refused + o.refused,
        }
    }
}

impl Health {
    /// A call to `node` failed as down (unreachable, silent, or its breaker open).
    pub(crate) fn down(&self, node: &str, error: &dyn std::fmt::Display) {
        match self.down.failed(mono_ms()) {
            Some(OutageReport::Began) => {
                tracing::warn!(node, %error, "redis node {node} down: its calls fail until it answers")
            }
            Some(OutageReport::Continues { failures, for_ms }) => tracing::warn!(
                node,
                %error,
                failures,
                for_ms,
                "redis node {node} still down: {failures} calls failed over {for_ms} ms"
            ),
            _ => {}
        }
    }

    /// The node (named by `node`, asked only when there is news) answered a call.
    pub(crate) fn up(&self, node: impl FnOnce() -> String) {
        if let Some(OutageReport::Ended { failures, for_ms }) = self.down.answered(mono_ms) {
            let node = node();
            tracing::info!(
                node = node.as_str(),
                failures,
                for_ms,
                "redis node {node} answers again: {failures} calls failed over {for_ms} ms"
            );
        }
    }

    /// True while writes on the node skip the wait for its replicas (a shortfall was
    /// seen within [`SHORTFALL_RECHECK`]).
    pub(crate) fn known_short(&self, now_ms: u64) -> bool {
        let until = self.short_until_ms.load(Ordering::Relaxed);
        until != 0 && now_ms < until
    }

    /// True from a write its replicas did not acknowledge until one they did: the
    /// node's replicas are known not to acknowledge (a write then waits for them once;
    /// outside a shortfall, twice before it counts as one).
    pub(crate) fn in_shortfall(&self) -> bool {
        self.short.is_on()
    }

    /// At `now` (ms of [`mono_ms`]), `acks` of `wanted` replicas of `node`
    /// acknowledged a write within `wait_ms`, or (`acks` = `None`) the write went
    /// without asking, its shortfall known; `taken`: the write is relied on all the
    /// same, else refused.
    pub(crate) fn fell_short(
        &self,
        now: u64,
        node: &str,
        acks: Option<i64>,
        wanted: u32,
        wait_ms: u64,
        taken: bool,
    ) {
        if acks.is_some() {
            self.short_until_ms.store(
                now + SHORTFALL_RECHECK.as_millis() as u64,
                Ordering::Relaxed,
            );
        }
        let counter = if taken {
            &self.unacked_taken
        } else {
            &self.unacked_refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "portcullis_store_unacknowledged_writes_total",
            "node" => node.to_owned(),
            "outcome" => if taken { "taken" } else { "refused" }
        )
        .increment(1);
        let doing = if taken {
            "taking writes unacknowledged"
        } else {
            "refusing admissions"
        };
        match self.short.failed(now) {
            Some(OutageReport::Began) => tracing::warn!(
                node,
                acks,
                wanted,
                wait_ms,
                "replicas of redis node {node} do not acknowledge writes ({} of {wanted} \
                 within {wait_ms} ms): a durability shortfall, not an outage; {doing} until \
                 they do",
                acks.unwrap_or(0)
            ),
            Some(OutageReport::Continues { failures, for_ms }) => tracing::warn!(
                node,
                failures,
                for_ms,
                "replicas of redis node {node} still do not acknowledge writes: \
                 {failures} writes over {for_ms} ms; {doing}"
            ),
            _ => {}
        }
    }

    /// The node's (named by `node`, asked only when there is news) replicas
    /// acknowledged a write.
    pub(crate) fn acknowledged(&self, node: impl FnOnce() -> String) {
        if self.short_until_ms.load(Ordering::Relaxed) != 0 {
            self.short_until_ms.store(0, Ordering::Relaxed);
        }
        if let Some(OutageReport::Ended { failures, for_ms }) = self.short.answered(mono_ms) {
            let node = node();
            tracing::info!(
                node = node.as_str(),
                failures,
                for_ms,
                "replicas of redis node {node} acknowledge writes again: {failures} writes \
                 not acknowledged over {for_ms} ms"
            );
        }
    }

    /// Its counts of unacknowledged writes.
    pub(crate) fn unacked(&self) -> Unacked {
        Unacked {
            taken: self.unacked_taken.load(Ordering::Relaxed),
            refused: self.unacked_refused.load(Ordering::Relaxed),
        }
    }
}

/// The sum of `health`'s counts.
pub(crate) fn unacked_total<'a>(health: impl IntoIterator<Item = &'a Health>) -> Unacked {
    health
        .into_iter()
        .fold(Unacked::default(), |t, h| t.add(h.unacked()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECHECK: u64 = SHORTFALL_RECHECK.as_millis() as u64;

    #[test]
    fn d10_a_shortfall_skips_the_wait_for_a_while_and_an_acknowledgement_ends_it() {
        let h = Health::default();
        assert!(!h.known_short(1_000));
        assert!(!h.in_shortfall());
        h.fell_short(1_000, "n", Some(0), 1, 100, false);
        assert!(h.in_shortfall());
        assert!(h.known_short(1_000), "the next writes do not wait again");
        assert!(h.known_short(1_000 + RECHECK - 1));
        assert!(!h.known_short(1_000 + RECHECK), "then one asks again");
        // A write that went without asking does not push the recheck further.
        h.fell_short(1_100, "n", None, 1, 100, false);
        h.fell_short(1_100, "n", None, 1, 100, true);
        assert!(!h.known_short(1_000 + RECHECK));
        assert_eq!(
            h.unacked(),
            Unacked {
                taken: 1,
                refused: 2
            }
        );
        h.fell_short(2_000, "n", Some(0), 1, 100, true);
        assert!(h.known_short(2_000));
        h.acknowledged(|| "n".to_owned());
        assert!(
            !h.known_short(2_000),
            "acknowledged: every write waits again"
        );
        assert_eq!(unacked_total([&h, &Health::default()]).taken, 2);
    }
}
