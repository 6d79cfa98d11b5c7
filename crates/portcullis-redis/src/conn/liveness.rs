//! When Redis last answered: the deadline that tells a busy Redis from a stalled one
//! (D4, D8).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Runtime turns a call whose deadline passed gives the connection's reader task
/// before judging Redis silent (see [`Liveness::bounded`]).
const SETTLE_TURNS: usize = 3;

/// When Redis last answered anything, shared by every call of a store.
#[derive(Debug)]
pub(crate) struct Liveness {
    origin: Instant,
    /// Microseconds since `origin` of the last reply (0: none yet).
    last_reply_us: AtomicU64,
    /// A reply ended a silence of at least [`Liveness::RECOVERED_AFTER`] and nobody
    /// has taken the news yet ([`Liveness::take_recovered`]).
    recovered: AtomicBool,
}

/// How a bounded call ended without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GaveUp {
    /// Redis answered nobody for the deadline: stalled or gone.
    Silent,
    /// Redis kept answering others, but not this call within the busy limit.
    Busy,
}

impl Liveness {
    /// A silence after which a reply is news: Redis is back, and what waits for it
    /// (give-backs kept to send again) should go now rather than at its next turn.
    /// Longer than the gaps of a busy Redis on a loaded host, shorter than the first
    /// gap between retries of a give-back.
    pub(crate) const RECOVERED_AFTER: Duration = Duration::from_millis(50);

    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_reply_us: AtomicU64::new(0),
            recovered: AtomicBool::new(false),
        }
    }

    /// Records that a reply arrived now.
    pub(crate) fn replied(&self) {
        let us = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        let before = self.last_reply_us.fetch_max(us.max(1), Ordering::Relaxed);
        if before != 0 && us.saturating_sub(before) >= Self::RECOVERED_AFTER.as_micros() as u64 {
            self.recovered.store(true, Ordering::Relaxed);
        }
    }

    /// True once after a reply ended a silence of [`Liveness::RECOVERED_AFTER`] or
    /// more (a read, not a write, while nothing happened: every call asks).
    pub(crate) fn take_recovered(&self) -> bool {
        self.recovered.load(Ordering::Relaxed) && self.recovered.swap(false, Ordering::Relaxed)
    }

    /// How long Redis has answered nobody: since its last reply, or since `start` if it
    /// never replied. (Not clamped to `start`: while Redis is stalled, calls keep
    /// starting, and the silence is the stall's, not each call's.)
    pub(crate) fn silent_for(&self, start: Instant) -> Duration {
        Instant::now().saturating_duration_since(self.last_reply().unwrap_or(start))
    }

    /// When the last reply arrived, if any.
    fn last_reply(&self) -> Option<Instant> {
        match self.last_reply_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(self.origin + Duration::from_micros(us)),
        }
    }

    /// Awaits `fut`, started at `start`, until it answers or Redis is judged stalled:
    /// silent for `deadline` (no reply to any call since `max(start, last reply)`), or
    /// `busy_limit` after `start` whatever else it answered. Every reply — an answer or
    /// a server error — counts as a sign of life; a connection error does not.
    pub(crate) async fn bounded<F, T>(
        &self,
        start: Instant,
        deadline: Duration,
        busy_limit: Duration,
        fut: F,
    ) -> Result<redis::RedisResult<T>, GaveUp>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let hard = start + busy_limit.max(deadline);
        let mut until = start + deadline;
        let mut watched_again = false;
        tokio::pin!(fut);
        loop {
            let due = until.min(hard);
            match tokio::time::timeout_at(due, &mut fut).await {
                Ok(r) => return Ok(self.answered(r)),
                Err(_) => {
                    // A busy host, not a silent Redis: when this process is behind (its
                    // timer fired late, or its run queue is long), the reply may be
                    // sitting unread in the socket, its reader task queued behind this
                    // one. Let the runtime poll its I/O and run that task first, and
                    // time how long a turn takes.
                    let fired = Instant::now();
                    let mut behind = fired.saturating_duration_since(due) >= deadline / 2;
                    for _ in 0..SETTLE_TURNS {
                        let turn = Instant::now();
                        tokio::task::yield_now().await;
                        behind |= turn.elapsed() >= deadline / 4;
                        let polled = std::future::poll_fn(|cx| {
                            std::task::Poll::Ready(fut.as_mut().poll(cx))
                        })
                        .await;
                        if let std::task::Poll::Ready(r) = polled {
                            return Ok(self.answered(r));
                        }
                    }
                    let now = Instant::now();
                    if now >= hard {
                        return Err(GaveUp::Busy);
                    }
                    // Alive if anything was answered since this call was made.
                    let heard = self.last_reply().filter(|&t| t > start);
                    match heard.map(|t| t + deadline) {
                        Some(next) if next > now => until = next,
                        // Silence is only what was watched: while this process is behind,
                        // Redis may have answered long ago. The call watches once more,
                        // for one deadline, and is judged again — once only, so a stalled
                        // Redis on a loaded host costs a call two deadlines at most. An
                        // idle runtime takes a turn in microseconds and its timers are
                        // late by well under half of any deadline: there a stalled
                        // Redis fails the call at the deadline.
                        _ if behind && !watched_again => {
                            watched_again = true;
                            until = now + deadline;
                        }
                        _ => return Err(GaveUp::Silent),
                    }
                }
            }
        }
    }

    /// Notes a sign of life in `r` (an answer or a server error, not a broken
    /// connection) and passes it on.
    fn answered<T>(&self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if r.as_ref().map_or_else(is_reply, |_| true) {
            self.replied();
        }
        r
    }
}

/// True when the error is a reply from a live server (a script error, `NOSCRIPT`,
/// `MOVED` …), not a broken or refused connection.
fn is_reply(e: &redis::RedisError) -> bool {
    !(e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call of the tests' shape: 20 ms deadline, 1 s busy limit.
    async fn watch<T>(
        l: &Liveness,
        start: Instant,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<redis::RedisResult<T>, GaveUp> {
        l.bounded(
            start,
            Duration::from_millis(20),
            Duration::from_secs(1),
            fut,
        )
        .await
    }

    async fn never() -> redis::RedisResult<()> {
        std::future::pending().await
    }

    #[tokio::test(start_paused = true)]
    async fn d8_a_silent_redis_fails_the_call_at_its_deadline() {
        let l = Liveness::new();
        let start = Instant::now();
        let r = watch(&l, start, never()).await;
        assert_eq!(r.err(), Some(GaveUp::Silent));
        assert_eq!(start.elapsed(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn d9_a_reply_after_a_silence_is_news_once() {
        let l = Liveness::new();
        l.replied();
        assert!(!l.take_recovered(), "a first reply ends no silence");
        tokio::time::sleep(Liveness::RECOVERED_AFTER / 2).await;
        l.replied();
        assert!(!l.take_recovered(), "a busy Redis' short gap is no news");
        tokio::time::sleep(Liveness::RECOVERED_AFTER).await;
        l.replied();
        assert!(l.take_recovered(), "a reply after the silence");
        assert!(!l.take_recovered(), "taken once");
        l.replied();
        assert!(!l.take_recovered(), "the next reply at once is no news");
    }

    #[tokio::test(start_paused = true)]
    async fn d8_a_busy_redis_that_answers_others_keeps_the_call_waiting() {
        let l = std::sync::Arc::new(Liveness::new());
        let start = Instant::now();
        // Others' calls are answered every 5 ms for 100 ms; then Redis falls silent.
        let beat = l.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                beat.replied();
            }
        });
        let answered = async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok::<_, redis::RedisError>(7)
        };
        let r = watch(&l, start, answered).await;
        assert_eq!(
            r.map(|r| r.ok()),
            Ok(Some(7)),
            "answered at 60 ms, past the 20 ms deadline"
        );
        // A call that is never answered: waits while the others are, then the deadline
        // after the last reply (100 ms + 20 ms).
        let start = Instant::now();
        let r = watch(&l, start, never()).await;
        assert_eq!(r.err(), Some(GaveUp::Silent));
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(55) && waited <= Duration::from_millis(65),
            "{waited:?}"
        );
    }

    /// Blocks the runtime's only thread for `ms` (as a busy host does to a gateway
    /// that is not scheduled), then wakes `after`.
    fn starve(ms: u64, after: std::sync::Arc<tokio::sync::Notify>) {
        tokio::spawn(async move {
            std::thread::sleep(Duration::from_millis(ms));
            after.notify_one();
        });
    }

    #[tokio::test(start_paused = true)]
    async fn d8_a_reply_read_in_the_deadlines_own_turn_is_taken_not_failed() {
        // The reply is in by the deadline, but the task that reads it runs a turn after
        // this call's timer (as a connection's reader task queued behind it).
        let l = Liveness::new();
        let start = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel::<redis::RedisResult<u8>>();
        tokio::spawn(async move {
            tokio::time::sleep_until(start + Duration::from_millis(20)).await;
            tokio::task::yield_now().await;
            let _ = tx.send(Ok(1));
        });
        let r = watch(&l, start, async { rx.await.expect("sent") }).await;
        assert_eq!(r.map(|r| r.ok()), Ok(Some(1)));
        assert_eq!(start.elapsed(), Duration::from_millis(20));
    }

    #[tokio::test]
    async fn d8_time_the_gateway_did_not_run_is_not_counted_as_silence() {
        // Redis answers 5 ms after the gateway runs again; the gateway did not run
        // from the start until 60 ms, so it watched Redis for 5 ms, not 20.
        let l = Liveness::new();
        let woke = std::sync::Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = tokio::sync::oneshot::channel::<redis::RedisResult<u8>>();
        let redis = woke.clone();
        tokio::spawn(async move {
            redis.notified().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _ = tx.send(Ok(2));
        });
        starve(60, woke);
        let start = Instant::now();
        let r = watch(&l, start, async { rx.await.expect("sent") }).await;
        assert_eq!(r.map(|r| r.ok()), Ok(Some(2)));
        // A Redis that stays silent once the gateway runs again still fails the call,
        // one deadline of watching later (and well within the busy limit).
        let woke = std::sync::Arc::new(tokio::sync::Notify::new());
        starve(60, woke);
        let start = Instant::now();
        let r = watch(&l, start, never()).await;
        assert_eq!(r.err(), Some(GaveUp::Silent));
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn d8_the_busy_limit_bounds_every_call() {
        let l = std::sync::Arc::new(Liveness::new());
        let beat = l.clone();
        let pulse = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                beat.replied();
            }
        });
        let start = Instant::now();
        let r = l
            .bounded(
                start,
                Duration::from_millis(20),
                Duration::from_millis(300),
                never(),
            )
            .await;
        assert_eq!(r.err(), Some(GaveUp::Busy));
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        pulse.abort();
    }
}
