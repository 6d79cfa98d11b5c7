//! The link to Redis: one node or a Cluster (D6), and the deadline that tells a busy
//! Redis from a stalled one (D4, D8).
//!
//! - [`Conn`]: a single node through redis-rs' [`ConnectionManager`] (one multiplexed
//!   connection, reconnected in the background) or a Cluster through redis-rs'
//!   [`ClusterConnection`], which follows `MOVED` / `ASK` and refreshes its slot map
//!   on topology changes. Both route every script call by its first key; the store
//!   keeps every script's keys on one hash slot (D3).
//! - [`Endpoint`]: what a store URL names — one node, a list of Cluster nodes, or one
//!   node to ask whether it belongs to a Cluster.
//! - [`Liveness`]: when the last reply came. A call is given up only when Redis has
//!   been *silent* for the deadline — no reply to any call — not merely when this call
//!   waited that long: a Redis that is slow because it is busy keeps answering others'
//!   calls, and its callers wait (up to the busy limit); one that is stalled or gone
//!   answers nobody, and every call waiting on it fails at its deadline.

use portcullis_core::{StoreError, StoreErrorKind, StoreResult};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// One node or a Cluster; cheap to clone (both are handles to a shared driver task).
#[derive(Clone)]
pub(crate) enum Conn {
    /// A single Redis node.
    Node(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// True for a Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// What a store URL names (`--store` / `[store] url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// One node URL: a Cluster if that node says it is part of one, else a single node.
    Detect(String),
    /// A comma-separated list: the nodes of a Cluster (any reachable one is enough to
    /// learn the rest).
    Cluster(Vec<String>),
}

impl Endpoint {
    /// Splits a store URL: one `redis://` / `rediss://` URL, or several separated by
    /// commas (spaces around them allowed).
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let nodes: Vec<String> = url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if nodes.is_empty() {
            return Err("redis url: empty".to_owned());
        }
        for n in &nodes {
            if !(n.starts_with("redis://") || n.starts_with("rediss://")) {
                return Err(format!(
                    "redis url {n:?}: expected redis://host:port or rediss://host:port"
                ));
            }
        }
        Ok(if nodes.len() == 1 {
            Endpoint::Detect(nodes.into_iter().next().unwrap_or_default())
        } else {
            Endpoint::Cluster(nodes)
        })
    }
}

/// True when an `INFO cluster` reply says the node runs in Cluster mode.
pub(crate) fn says_cluster(info: &str) -> bool {
    info.lines()
        .any(|l| l.trim().strip_prefix("cluster_enabled:") == Some("1"))
}

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
    /// Tells it how a call ended; `silent`: how long the node had answered nobody
    /// when it did.
    pub(crate) fn record<T>(&self, r: &StoreResult<T>, silent: Duration) {
        let trip = match r {
            // An answer, or a reply of a live server (a script error): Redis is there.
            Ok(_) => false,
            Err(e) => match e.kind() {
                StoreErrorKind::Protocol => false,
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

/// Hash slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// Most Cluster nodes whose liveness is told apart; nodes beyond share one entry.
const MAX_NODES: usize = 255;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16/XMODEM of the key, or of
/// its hash tag (the text between the first `{` and the next `}`, when not empty).
pub(crate) fn hash_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS as u16
}

/// Which node owns each hash slot (as last read from `CLUSTER SLOTS`), and one
/// [`Liveness`] per node: on a Cluster, a node that is stalled must fail its own calls
/// at the deadline even while the other nodes answer theirs (T5), and a node that is
/// busy must not fail its calls because it was quiet for a while on some slot. Entry 0
/// stands for "owner unknown" (before the first read, or past [`MAX_NODES`]).
pub(crate) struct Nodes {
    owner: Box<[AtomicU16]>,
    /// Per slot: when its owner last changed (a failover, a reshard), in ms since
    /// `origin` (0 = never seen to change): writes the old owner had not replicated may
    /// be lost, so a lease renewed soon after is restored if it is gone (D10).
    moved: Box<[AtomicU64]>,
    origin: std::time::Instant,
    names: Mutex<Vec<String>>,
    live: Box<[Liveness]>,
    breakers: Box<[Breaker]>,
}

impl Nodes {
    /// The nodes of a Cluster whose calls have `deadline`.
    pub(crate) fn new(deadline: Duration) -> Self {
        Self {
            owner: (0..SLOTS).map(|_| AtomicU16::new(0)).collect(),
            moved: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            origin: std::time::Instant::now(),
            names: Mutex::new(Vec::new()),
            live: (0..=MAX_NODES).map(|_| Liveness::new()).collect(),
            breakers: (0..=MAX_NODES).map(|_| Breaker::new(deadline)).collect(),
        }
    }

    /// The liveness of the node that owns `key`'s slot.
    pub(crate) fn of(&self, key: &[u8]) -> &Liveness {
        let node = self.owner[usize::from(hash_slot(key))].load(Ordering::Relaxed);
        &self.live[usize::from(node)]
    }

    /// The breaker of the node that owns `key`'s slot: one node down fails its own
    /// calls fast, not every node's.
    pub(crate) fn breaker_of(&self, key: &[u8]) -> &Breaker {
        let node = self.owner[usize::from(hash_slot(key))].load(Ordering::Relaxed);
        &self.breakers[usize::from(node)]
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// True when the owner of `key`'s slot changed within the last `window`.
    pub(crate) fn moved_within(&self, key: &[u8], window: Duration) -> bool {
        let at = self.moved[usize::from(hash_slot(key))].load(Ordering::Relaxed);
        at != 0
            && self.now_ms().saturating_sub(at)
                <= u64::try_from(window.as_millis()).unwrap_or(u64::MAX)
    }

    /// Index (≥ 1) of the node `name` (`host:port`), 0 past [`MAX_NODES`].
    fn index(&self, name: &str) -> u16 {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = names.iter().position(|n| n == name) {
            return (i + 1) as u16;
        }
        if names.len() >= MAX_NODES {
            return 0;
        }
        names.push(name.to_owned());
        names.len() as u16
    }

    /// Takes the slot owners from a `CLUSTER SLOTS` reply; returns how many ranges it
    /// read.
    pub(crate) fn update(&self, reply: &Value) -> usize {
        let Value::Array(ranges) = reply else {
            return 0;
        };
        let mut read = 0;
        for r in ranges {
            let Value::Array(r) = r else { continue };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (r.first(), r.get(1), r.get(2))
            else {
                continue;
            };
            let host = match master.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                continue;
            };
            let node = self.index(&format!("{host}:{port}"));
            let last = SLOTS as i64 - 1;
            let now = self.now_ms().max(1);
            for slot in (*start).clamp(0, last)..=(*end).clamp(0, last) {
                let was = self.owner[slot as usize].swap(node, Ordering::Relaxed);
                if was != 0 && was != node {
                    self.moved[slot as usize].store(now, Ordering::Relaxed);
                }
            }
            read += 1;
        }
        read
    }
}

/// Keeps `nodes` up to date with the Cluster's slot owners: reads `CLUSTER SLOTS` now
/// and every `every` until the store is dropped (the task holds a weak reference only).
pub(crate) fn watch_topology(
    conn: ClusterConnection,
    nodes: std::sync::Weak<Nodes>,
    every: Duration,
    limit: Duration,
) {
    tokio::spawn(async move {
        let mut conn = conn;
        while nodes.strong_count() > 0 {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            let read = cmd.query_async::<Value>(&mut conn);
            if let Ok(Ok(reply)) = tokio::time::timeout(limit, read).await {
                let Some(n) = nodes.upgrade() else { return };
                n.update(&reply);
            }
            tokio::time::sleep(every).await;
        }
    });
}

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

    #[test]
    fn d6_one_url_is_detected_a_list_is_a_cluster() {
        assert_eq!(
            Endpoint::parse("redis://127.0.0.1:7001"),
            Ok(Endpoint::Detect("redis://127.0.0.1:7001".into()))
        );
        assert_eq!(
            Endpoint::parse("redis://a:1, redis://b:2,,rediss://c:3"),
            Ok(Endpoint::Cluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into(),
                "rediss://c:3".into()
            ]))
        );
        assert!(Endpoint::parse("").is_err());
        assert!(Endpoint::parse("redis://a:1,http://b:2").is_err());
    }

    #[test]
    fn d3_hash_slots_follow_the_cluster_rules() {
        // Values from CLUSTER KEYSLOT on redis-server 7.
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"portcullis:{k}:slots"), hash_slot(b"k"));
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(
            hash_slot(b"a{}b"),
            crc16::State::<crc16::XMODEM>::calculate(b"a{}b") % 16384
        );
    }

    #[test]
    fn d6_slot_owners_are_read_from_cluster_slots() {
        let nodes = Nodes::new(Duration::from_millis(20));
        let master = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |a: i64, b: i64, port: i64| {
            Value::Array(vec![Value::Int(a), Value::Int(b), master(port)])
        };
        let key_in = |lo: u16, hi: u16| {
            (0..)
                .map(|i| format!("k{i}"))
                .find(|k| (lo..=hi).contains(&hash_slot(k.as_bytes())))
                .unwrap()
        };
        let (low, high) = (key_in(0, 8191), key_in(8192, 16383));
        // Before the first read every key shares the "unknown" entry.
        assert!(std::ptr::eq(nodes.of(low.as_bytes()), &nodes.live[0]));
        let reply = Value::Array(vec![range(0, 8191, 7001), range(8192, 16383, 7002)]);
        assert_eq!(nodes.update(&reply), 2);
        assert!(std::ptr::eq(nodes.of(low.as_bytes()), &nodes.live[1]));
        assert!(std::ptr::eq(nodes.of(high.as_bytes()), &nodes.live[2]));
        assert!(!nodes.moved_within(low.as_bytes(), Duration::from_secs(60)));
        // A failover moves the range to another node.
        nodes.update(&Value::Array(vec![
            range(0, 8191, 7001),
            range(8192, 16383, 7003),
        ]));
        assert!(std::ptr::eq(nodes.of(high.as_bytes()), &nodes.live[3]));
        assert!(nodes.moved_within(high.as_bytes(), Duration::from_secs(60)));
        assert!(
            !nodes.moved_within(low.as_bytes(), Duration::from_secs(60)),
            "only the slots whose owner changed"
        );
        nodes.update(&Value::Array(vec![range(0, 16383, 7003)]));
        assert!(std::ptr::eq(nodes.of(low.as_bytes()), &nodes.live[3]));
        assert!(std::ptr::eq(nodes.of(high.as_bytes()), &nodes.live[3]));
    }

    #[test]
    fn d6_info_cluster_reply_is_read() {
        assert!(says_cluster("# Cluster\r\ncluster_enabled:1\r\n"));
        assert!(!says_cluster("# Cluster\r\ncluster_enabled:0\r\n"));
        assert!(!says_cluster(""));
    }

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
