//! The breaker of a node (D4, D8).

use portcullis_core::{StoreError, StoreErrorKind, StoreResult};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Fail fast while Redis is known to be down (D4, T5): after a connection error, or
/// after a timeout with the node silent — no reply to any call — for
/// [`Breaker::TRIP_SILENCE`] deadlines, calls fail at once instead of each waiting out
/// its deadline — a request crosses up to four layers, and each would otherwise pay
/// the deadline again. While open, one call at a time goes through as a probe,
/// [`Breaker::PROBE_GAP`] after the last probe ended (so a request whose first call was
/// a probe fails its next ones fast). Any answer closes the breaker: a probe's, or a
/// late one to a call made before it opened.
///
/// Busy is not dead (D8): a Redis starved of CPU on a loaded host goes quiet for a few
/// tens of ms now and then and answers again. Each call caught in such a gap fails at
/// its own deadline, but the gap does not open the breaker unless it lasts two
/// deadlines: opening it would fail every call for the rest of the gap and until a
/// probe is answered — on a loaded 2-core box, ten times as many failures as the gap
/// itself caused. A stalled Redis is silent for good, so it opens the breaker two
/// deadlines in.
#[derive(Debug)]
pub(crate) struct Breaker {
    origin: std::time::Instant,
    open: AtomicBool,
    /// Silence after which a timeout opens it: [`Breaker::TRIP_SILENCE`] deadlines.
    trip_silence: Duration,
    probing: AtomicBool,
    /// Microseconds since `origin` from which the next probe may go.
    next_probe_us: AtomicU64,
}

/// A call let through by [`Breaker::check`]; a probe frees the next probe's turn when
/// it ends, whether it was answered, failed or dropped.
pub(crate) struct Pass<'a> {
    probe: Option<&'a Breaker>,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.probe {
            let next = b.now_us() + Breaker::PROBE_GAP.as_micros() as u64;
            b.next_probe_us.store(next, Ordering::Relaxed);
            b.probing.store(false, Ordering::Release);
        }
    }
}

impl Breaker {
    const TRIP_SILENCE: u32 = 2;
    const PROBE_GAP: Duration = Duration::from_millis(10);

    /// A breaker for calls with `deadline`.
    pub(crate) fn new(deadline: Duration) -> Self {
        Self {
            origin: std::time::Instant::now(),
            open: AtomicBool::new(false),
            trip_silence: deadline * Self::TRIP_SILENCE,
            probing: AtomicBool::new(false),
            next_probe_us: AtomicU64::new(0),
        }
    }
    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
    /// Lets a call through (closed, or its turn to probe), or the error to fail with.
    pub(crate) fn check(&self) -> Result<Pass<'_>, StoreError> {
        if !self.open.load(Ordering::Relaxed) {
            return Ok(Pass { probe: None });
        }
        let due = self.now_us() >= self.next_probe_us.load(Ordering::Relaxed);
        if due
            && self
                .probing
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return Ok(Pass { probe: Some(self) });
        }
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "redis is down (failing fast until a probe is answered)",
        ))
    }
    /// True while it fails calls fast.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Tells it how a call ended; `silent`: how long the node had answered nobody
    /// when it did.
    pub(crate) fn record<T>(&self, r: &StoreResult<T>, silent: Duration) {
        let trip = match r {
            // An answer, or a reply of a live server (a script error): Redis is there.
            Ok(_) => false,
            Err(e) => match e.kind() {
                // A reply of a live server: a script error, or replicas short of the
                // acknowledgements a write wanted (D10: not an outage).
                StoreErrorKind::Protocol | StoreErrorKind::Unacknowledged => false,
                StoreErrorKind::Unavailable => true,
                StoreErrorKind::Timeout if silent >= self.trip_silence => true,
                // A gap, or a busy Redis past the busy limit: this call failed, the
                // breaker stays as it is.
                StoreErrorKind::Timeout => return,
            },
        };
        if trip {
            if !self.open.swap(true, Ordering::Relaxed) {
                let next = self.now_us() + Self::PROBE_GAP.as_micros() as u64;
                self.next_probe_us.fetch_max(next, Ordering::Relaxed);
            }
        } else {
            self.open.store(false, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out() -> StoreResult<()> {
        Err(StoreError::new(StoreErrorKind::Timeout, "no answer"))
    }

    const DEADLINE: Duration = Duration::from_millis(20);

    #[test]
    fn d4_the_breaker_opens_on_a_timeout_after_two_deadlines_of_silence_and_probes_one_call_at_a_time()
     {
        let b = Breaker::new(DEADLINE);
        b.record(&timed_out(), DEADLINE);
        assert!(b.check().is_ok(), "one deadline of silence: still closed");
        b.record(&timed_out(), 2 * DEADLINE);
        let e = b.check().err().expect("open");
        assert_eq!(e.kind(), StoreErrorKind::Unavailable);
        std::thread::sleep(Breaker::PROBE_GAP + Duration::from_millis(2));
        let probe = b.check().expect("the probe's turn");
        assert!(b.check().is_err(), "one probe at a time");
        b.record(&timed_out(), 3 * DEADLINE);
        drop(probe);
        assert!(b.check().is_err(), "the next probe waits its gap");
        std::thread::sleep(Breaker::PROBE_GAP + Duration::from_millis(2));
        let probe = b.check().expect("the next probe's turn");
        b.record(&Ok(()), Duration::ZERO);
        drop(probe);
        assert!(
            b.check().is_ok() && b.check().is_ok(),
            "an answer closed it"
        );
    }

    #[test]
    fn d8_timeouts_in_short_gaps_of_a_starved_redis_never_open_the_breaker() {
        // A Redis starved of CPU on a loaded host: every call in a 30 ms gap fails at
        // its 20 ms deadline, then it answers again. However many such gaps, no call
        // outside them is failed fast.
        let b = Breaker::new(DEADLINE);
        for _ in 0..100 {
            b.record(&timed_out(), Duration::from_millis(30));
            assert!(b.check().is_ok());
        }
        // A busy Redis past the busy limit (it answered others the whole time) neither.
        b.record(&timed_out(), Duration::from_millis(1));
        assert!(b.check().is_ok());
    }

    #[test]
    fn d4_a_late_answer_closes_the_breaker_and_a_refused_connection_opens_it() {
        let b = Breaker::new(DEADLINE);
        b.record::<()>(
            &Err(StoreError::new(StoreErrorKind::Unavailable, "refused")),
            Duration::ZERO,
        );
        assert!(b.check().is_err(), "a connection error opens it at once");
        // An answer to a call made before it opened: Redis is there again.
        b.record(&Ok(()), Duration::ZERO);
        assert!(b.check().is_ok());
        // A server error is a reply too: it neither opens nor keeps it open.
        b.record::<()>(
            &Err(StoreError::new(StoreErrorKind::Protocol, "ERR")),
            Duration::ZERO,
        );
        assert!(b.check().is_ok());
    }
}
