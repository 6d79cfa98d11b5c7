//! The store's writes at gateway start (the opening balances and key spends): retried
//! while the store fails transiently, for [`START_WRITES_WITHIN`] at most.
//!
//! A gateway started beside a Redis Cluster that has just formed, or is failing a
//! master over, meets a node that does not answer yet or a shard whose replicas do not
//! acknowledge yet (with `replica_acks`, D10: a replica whose link is up acknowledges
//! some 0.3–0.5 s later). That is not a reason to refuse to start; a store that stays
//! so, or answers something unusable, is — with its last error.

use portcullis::core::{StoreErrorKind, StoreResult};
use std::future::Future;
use std::time::Duration;

/// How long the writes at start are tried while the store fails transiently.
pub(crate) const START_WRITES_WITHIN: Duration = Duration::from_secs(10);

/// The first pause between tries, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// `call` until it answers: while it fails with a timeout, an unreachable store or a
/// replica shortfall, it is tried again after a pause that doubles (50 ms up to 1 s),
/// as long as the next try starts within `within`; a protocol error, or the error of
/// the last try, is the answer. `what` names the write in the one log line a retry
/// gets. Every seeding write keeps what the store holds already, so a try whose
/// answer was lost (or that a master took unacknowledged) changes nothing when made
/// again.
pub(crate) async fn retrying<T, F>(
    what: &str,
    within: Duration,
    mut call: impl FnMut() -> F,
) -> StoreResult<T>
where
    F: Future<Output = StoreResult<T>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut told = false;
    loop {
        match call().await {
            Err(e) if transient(e.kind()) && start.elapsed() + pause <= within => {
                if !told {
                    tracing::warn!(
                        error = %e,
                        "{what}: the store failed; trying again for up to {} s",
                        within.as_secs()
                    );
                    told = true;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            answer => return answer,
        }
    }
}

/// A failure that may pass by itself: the store did not answer, or its replicas did
/// not acknowledge yet.
fn transient(kind: StoreErrorKind) -> bool {
    match kind {
        StoreErrorKind::Timeout | StoreErrorKind::Unavailable | StoreErrorKind::Unacknowledged => {
            true
        }
        StoreErrorKind::Protocol => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::core::StoreError;
    use std::cell::Cell;

    fn fails(kind: StoreErrorKind) -> StoreResult<u32> {
        Err(StoreError::new(kind, "not yet"))
    }

    #[tokio::test(start_paused = true)]
    async fn d10_a_write_at_start_waits_out_a_transient_shortfall() {
        let tries = Cell::new(0);
        let started = tokio::time::Instant::now();
        let r = retrying("seeding", START_WRITES_WITHIN, || {
            tries.set(tries.get() + 1);
            let n = tries.get();
            async move {
                match n {
                    1 => fails(StoreErrorKind::Unacknowledged),
                    2 => fails(StoreErrorKind::Timeout),
                    3 => fails(StoreErrorKind::Unavailable),
                    _ => Ok(7),
                }
            }
        })
        .await;
        assert_eq!(r, Ok(7));
        assert_eq!(tries.get(), 4);
        // Pauses of 50, 100 and 200 ms between the four tries.
        assert_eq!(started.elapsed(), Duration::from_millis(350));
    }

    #[tokio::test(start_paused = true)]
    async fn d10_a_write_at_start_that_keeps_failing_fails_with_its_last_error_within_the_bound() {
        let tries = Cell::new(0);
        let started = tokio::time::Instant::now();
        let within = Duration::from_secs(3);
        let r = retrying("seeding", within, || {
            tries.set(tries.get() + 1);
            async { fails(StoreErrorKind::Unacknowledged) }
        })
        .await;
        assert_eq!(r.unwrap_err().kind(), StoreErrorKind::Unacknowledged);
        // 50 + 100 + 200 + 400 + 800 + 1000 = 2550 ms; the next pause would end past 3 s.
        assert_eq!(started.elapsed(), Duration::from_millis(2_550));
        assert_eq!(tries.get(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn d10_a_protocol_error_at_start_fails_at_once() {
        let tries = Cell::new(0);
        let r = retrying("seeding", START_WRITES_WITHIN, || {
            tries.set(tries.get() + 1);
            async { fails(StoreErrorKind::Protocol) }
        })
        .await;
        assert_eq!(r.unwrap_err().kind(), StoreErrorKind::Protocol);
        assert_eq!(tries.get(), 1);
    }
}
