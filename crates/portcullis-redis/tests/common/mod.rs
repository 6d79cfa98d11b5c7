//! The helpers of the Redis store's tests: the shared ones from
//! `portcullis-test-support` (one copy for the workspace), and store options of this
//! crate's own.

#![allow(dead_code)]

#[allow(unused_imports)] // not every test file parses `INFO commandstats`
pub use portcullis_test_support::redis::{RedisServer, command_calls};

pub mod load;
use std::time::{Duration, Instant};

/// Store options for a test that is not about a silent Redis: its calls wait for Redis
/// up to 2 s instead of the default 20 ms, so a host whose two cores are busy with
/// other tests cannot fail them (the 20 ms default is what the stall and give-up tests
/// use).
pub fn patient() -> portcullis_redis::RedisStoreOptions {
    portcullis_redis::RedisStoreOptions::default().deadline(Duration::from_secs(2))
}

/// What a loaded host may add, beyond the deadline, to a call that waits out its
/// deadline on a silent Redis (the fault tests' "fails within its deadline", D4/T5).
/// Neither part is the store's to bound:
///
/// - when the test process is behind (a timer fired half a deadline late, or a runtime
///   turn took a quarter of one), the store watches a silent Redis for one more
///   deadline before judging it stalled — its rule for a loaded host
///   (`conn/liveness.rs`: "two deadlines at most"): 20 ms more at the default deadline;
/// - each timer fires, and the test's task runs, late by the host's scheduling delay.
///   On the 2-core box these tests run on, beside two busy loops and two other builds,
///   a call on the 20 ms default deadline took 90 ms at worst (two deadlines + ~50 ms).
///
/// 250 ms: more than twice that, and still half the default busy limit (500 ms), so a
/// call that waits for a reconnection, for the busy limit or with no deadline at all
/// still fails the bound. The deadline itself is shown to hold from below (a call on a
/// frozen Redis gives up no earlier than its deadline); from above, on a loaded host,
/// only up to this slack.
pub const LOADED_HOST_SLACK: Duration = Duration::from_millis(250);

/// How long a test waits for something that is not the subject of a deadline (a call
/// that must eventually be answered, a state that must eventually show): generous, so a
/// loaded host cannot fail it, and the test still fails with a message if it never
/// happens.
pub const EVENTUALLY: Duration = Duration::from_secs(10);

/// Retries `call` until it succeeds, for [`EVENTUALLY`] at most (pausing 10 ms between
/// tries); panics with `what` and the last error. For a call that is the test's setup
/// or its evidence that service is back, not the subject of a deadline: a store on the
/// 20 ms default deadline may time out on a loaded host while Redis is up.
pub async fn until_ok<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut call: impl FnMut() -> F,
) -> T {
    let start = std::time::Instant::now();
    loop {
        match call().await {
            Ok(v) => return v,
            Err(e) => assert!(
                start.elapsed() < EVENTUALLY,
                "{what}: still failing after {EVENTUALLY:?}: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A master and its replica, replication up.
pub fn replicated() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    // Sync at once, not after the default 5 s of diskless-sync delay; the replica
    // loads the sync in memory and writes no dump file into the test's directory.
    master.cli(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
    replica.cli(&["CONFIG", "SET", "repl-diskless-load", "on-empty-db"]);
    replica.cli(&["REPLICAOF", "127.0.0.1", &master.port().to_string()]);
    let start = Instant::now();
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the replica did not sync"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The replica's link is up some 0.3–0.5 s before it acknowledges writes: until then
    // a write's `WAIT 1` answers 0.
    let mut con = portcullis_redis::redis::Client::open(master.url())
        .and_then(|c| c.get_connection())
        .expect("a connection to the master");
    loop {
        let (_, acks): ((), i64) = portcullis_redis::redis::pipe()
            .cmd("SET")
            .arg("replicated-probe")
            .arg(1)
            .cmd("WAIT")
            .arg(1)
            .arg(100)
            .query(&mut con)
            .expect("SET + WAIT");
        if acks == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the replica never acknowledged a write"
        );
    }
    portcullis_redis::redis::cmd("DEL")
        .arg("replicated-probe")
        .exec(&mut con)
        .expect("DEL");
    (master, replica)
}

/// Busy loops beside the test (`sh -c 'while :; do :; done'`), one per `n`: the loaded
/// host a test must hold on. Killed when dropped.
pub struct CpuHogs(Vec<std::process::Child>);

impl CpuHogs {
    pub fn start(n: usize) -> Self {
        Self(
            (0..n)
                .map(|_| {
                    std::process::Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("sh, for a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A billed request of tenant `acme`, key `k`, for `money`, as `attempt`.
pub fn request(attempt: &str, money: i64) -> portcullis_core::BillingRequest {
    portcullis_core::BillingRequest {
        attempt: attempt.into(),
        tenant: Some("acme".into()),
        key: portcullis_core::SubjectKey::from("k"),
        spend_cap: None,
        budgets: Vec::new().into(),
        money,
        bill_balance: true,
        lifetime_ms: portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS,
        tenant_expected: false,
    }
}

/// The attempt `a` of tenant `acme`.
pub fn attempt(a: &str) -> portcullis_core::AttemptRef {
    portcullis_core::AttemptRef {
        attempt: a.into(),
        books: portcullis_core::Books::Tenant("acme".into()),
    }
}

/// `n` joint slot-and-window decisions of `key` (slots up to the policy's concurrency,
/// leases of 60 s) by `s`, each retried until answered ([`until_ok`]); panics on a
/// refusal, and unless each was decided from a quota block. Their window tickets.
pub async fn admitted_from_a_block(
    s: &portcullis_redis::RedisStore,
    key: &portcullis_core::SubjectKey,
    policy: &std::sync::Arc<portcullis_core::Policy>,
    demand: portcullis_core::Demand,
    n: usize,
) -> Vec<portcullis_core::WindowTicket> {
    use portcullis_core::{JointDecision, JointStore, Scope, SlotAsk, WindowAsk};
    let mut tickets = Vec::with_capacity(n);
    for _ in 0..n {
        let slot = SlotAsk {
            key: key.clone(),
            limit: policy.concurrency,
            ttl: 60_000,
        };
        let window = WindowAsk {
            scope: Scope::Key,
            policy,
            demand: &demand,
        };
        match until_ok("a joint decision", || {
            s.acquire_and_admit(&slot, Some(window))
        })
        .await
        {
            JointDecision::Admitted { ticket, .. } => tickets.push(ticket.expect("windows")),
            other => panic!("refused: {other:?}"),
        }
    }
    assert!(
        tickets.iter().all(|t| t.borrowed != 0),
        "decided from a quota block: {tickets:?}"
    );
    tickets
}

/// A policy far from its limits whose requests quota blocks serve: 1,000 slots, 100k
/// requests and 10M tokens a minute.
pub fn roomy_policy() -> std::sync::Arc<portcullis_core::Policy> {
    use portcullis_core::{Policy, Tier};
    std::sync::Arc::new(
        Policy::default()
            .with_concurrency(1_000)
            .with_requests(Tier::per_minute(100_000))
            .with_tokens(Tier::per_minute(10_000_000)),
    )
}

/// Requests and tokens counted in `key`'s current windows under [`roomy_policy`], as
/// `s` reads them (read retried until answered, [`until_ok`]).
pub async fn used(
    s: &portcullis_redis::RedisStore,
    key: &portcullis_core::SubjectKey,
) -> (u64, u64) {
    use portcullis_core::{Dimension, Scope, WindowStore};
    let p = roomy_policy();
    let v = until_ok("a view of the windows", || s.view(key, Scope::Key, &p)).await;
    let of = |d: Dimension| v.iter().find(|l| l.dimension == d).map_or(0, |l| l.used);
    (of(Dimension::Requests), of(Dimension::Tokens))
}

/// The end of the D9 hand-over tests: `rest`, requests of 10 tokens a block handed over
/// and not refunded, settle as estimated — `key` keeps counting `counted` — and no
/// handed request's admission record is left in Redis.
pub async fn handed_rest_settles_and_leaves_no_record(
    server: &RedisServer,
    s: &portcullis_redis::RedisStore,
    plain: &portcullis_redis::RedisStore,
    key: &portcullis_core::SubjectKey,
    rest: &[portcullis_core::WindowTicket],
    counted: (u64, u64),
) {
    use portcullis_core::{Outcome, Scope, WindowStore};
    for &t in rest {
        until_ok("a settlement", || {
            s.settle(key, Scope::Key, t, Outcome::Completed(None))
        })
        .await;
    }
    assert_eq!(used(plain, key).await, counted, "the others as estimated");
    let records = format!("{}:adm", s.window_key(key, Scope::Key));
    assert_eq!(
        server.cli(&["ZCARD", &records]).trim(),
        "0",
        "every handed request's record went with its settlement"
    );
}
