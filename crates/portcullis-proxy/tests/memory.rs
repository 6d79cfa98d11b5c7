//! Memory bounded by what is live, never by requests served (D7, T1).
//!
//! A counting global allocator measures the bytes the whole test process holds (the
//! gateway, its store, its metrics recorder, the bundled fake upstream and the client
//! alike). After a warm-up, the gateway serves N more requests with every layer on; once
//! they are done and the metrics upkeep has run, the process must hold what it held
//! before, give or take a small slack — never an amount that grows with N. Before the
//! metrics upkeep existed, the three histograms recorded per request kept every sample
//! until a scrape (≈ 45 bytes a request: 0.45 MB over this test's 10,000 requests).
//!
//! On Redis the same run also counts the keys Redis holds: the keys written per request
//! (leases, attempts, blocks) are gone or expiring by then, so their number does not grow
//! with N either.

mod common;
#[path = "../../portcullis-redis/tests/common/mod.rs"]
mod redis_server;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::Config;
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;

/// Bytes allocated and not yet freed, by anyone in this process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting [`LIVE`] bytes.
struct Counting;

// SAFETY: every call is forwarded to `System` unchanged; only a counter is updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Every layer does its full work and none is the bottleneck (the benchmark's shape):
/// a concurrency limit, request and token tiers, a tenant balance and budget, provider
/// RPM/TPM and a capacity lease on the channel, failover's attempt.
// The store deadline is far above the default 20 ms: this test is about memory, and on
// a host whose two cores are busy with other tests a Redis call missing 20 ms would
// fail billing closed (503) and fail the run for a reason it does not test.
const CONFIG: &str = r#"
[store]
deadline = "2s"

[policies.p]
concurrency = 100000
requests = [{ window = "1m", limit = 100000000 }, { window = "1d", limit = 1000000000 }]
tokens = [{ window = "1m", limit = 100000000000 }, { window = "1d", limit = 1000000000000 }]

[tenants.t]
balance = 1_000_000_000_000_000
budgets = [{ name = "monthly", limit = 1_000_000_000_000_000, period = "30d" }]

[keys.k]
key = "sk-soak"
tenant = "t"
policy = "p"

[channels.openai]
vendor = "openai"
base_url = "fake://"
credential = "sk-upstream-soak"
models = ["gpt-4o-mini"]
capacity = 100000
limits = { rpm = 100000000, tpm = 100000000000 }

[models.gpt-4o-mini]
price = { input_per_mtok = 150_000, output_per_mtok = 600_000 }
max_output_tokens = 16
"#;

const BODY: &str = r#"{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say hello."}]}"#;

/// Client connections, each sending its share of the requests one after the other.
const CONNECTIONS: usize = 8;
const WARM_UP: usize = 2_000;
const MEASURED: usize = 10_000;
/// What the process may hold more after [`MEASURED`] requests than after the warm-up:
/// allocator-independent slack for maps and pools that settle at a larger size. A
/// retention of 20 bytes a request or more exceeds it.
const SLACK: isize = 192 * 1024;

/// Sends `n` requests over [`CONNECTIONS`] keep-alive connections; every answer must be
/// a 200.
async fn drive(addr: SocketAddr, n: usize) {
    drive_keys(addr, n, |_, _| "sk-soak".to_owned(), 200).await;
}

/// Sends `n` requests over [`CONNECTIONS`] keep-alive connections, request `i` of
/// connection `c` with the key `key(c, i)`; every answer must be `status`.
async fn drive_keys(addr: SocketAddr, n: usize, key: fn(usize, usize) -> String, status: u16) {
    let per = n / CONNECTIONS;
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.expect("connect");
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            let conn = tokio::spawn(conn);
            for i in 0..per {
                let req = hyper::Request::post("/v1/chat/completions")
                    .header("host", addr.to_string())
                    .header("authorization", format!("Bearer {}", key(c, i)))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                    .expect("request");
                sender.ready().await.expect("connection ready");
                let res = sender.send_request(req).await.expect("send");
                let (status, want) = (res.status(), status);
                let body = res.into_body().collect().await.expect("body").to_bytes();
                assert_eq!(status, want, "{}", String::from_utf8_lossy(&body));
            }
            drop(sender);
            let _ = conn.await;
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
}

/// Waits until everything a finished request left behind has been let go: releases
/// and settlements sent off the response path have landed, and the metrics upkeep
/// has folded the histogram samples into their summaries.
async fn quiesce() {
    tokio::time::sleep(portcullis_proxy::metrics::UPKEEP_EVERY + Duration::from_millis(700)).await;
}

/// Starts the gateway on `store_url` with the fake upstream and [`CONFIG`].
async fn start(store_url: &str) -> (SocketAddr, FakeUpstream, tokio::task::JoinHandle<()>) {
    let fake = FakeUpstream::start().await;
    let mut config = Config::parse(CONFIG).expect("config");
    config.set_store_url(store_url);
    let (addr, server) = common::serve_opened(config, fake.base_url()).await;
    (addr, fake, server)
}

/// The tests of this file one at a time: [`LIVE`] counts the whole process. (Under
/// `cargo nextest` each test is a process of its own, and the `load` group of
/// `.config/nextest.toml` keeps it from running beside another load run.)
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs the warm-up, then `at_rest` once the process is at rest, then the measured
/// requests, then `at_rest` again; returns the bytes held at each rest.
async fn held_before_and_after(addr: SocketAddr, mut at_rest: impl FnMut()) -> (isize, isize) {
    drive(addr, WARM_UP).await;
    quiesce().await;
    let before = LIVE.load(Ordering::Relaxed);
    at_rest();
    drive(addr, MEASURED).await;
    quiesce().await;
    let after = LIVE.load(Ordering::Relaxed);
    at_rest();
    (before, after)
}

fn assert_flat(what: &str, before: isize, after: isize) {
    let grown = after - before;
    eprintln!(
        "{what}: {before} bytes held after the warm-up, {after} after {MEASURED} more requests"
    );
    assert!(
        grown < SLACK,
        "{what}: the process holds {grown} bytes more after {MEASURED} requests than \
         after the warm-up ({} bytes a request; slack {SLACK}): something keeps \
         per-request state",
        grown / MEASURED as isize
    );
}

/// D7 / T1: with every layer on and the in-memory store, what the process holds does
/// not grow with the requests it served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d7_memory_store_stack_holds_no_per_request_state() {
    let _serial = SERIAL.lock().await;
    let (addr, _fake, server) = start("memory").await;
    let (before, after) = held_before_and_after(addr, || {}).await;
    server.abort();
    assert_flat("in-memory store", before, after);
}

/// D7: the same on a Redis store (quota and billing blocks as configured by default):
/// neither the gateway process nor Redis's key count grows with requests served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d7_redis_store_stack_holds_no_per_request_state() {
    let _serial = SERIAL.lock().await;
    let redis = redis_server::RedisServer::start();
    let (addr, _fake, server) = start(&redis.url()).await;
    let mut keys = Vec::new();
    let (before, after) = held_before_and_after(addr, || {
        keys.push(
            redis
                .cli(&["DBSIZE"])
                .trim()
                .parse::<i64>()
                .expect("DBSIZE"),
        );
    })
    .await;
    server.abort();
    assert_flat("Redis store", before, after);
    let (keys_before, keys_after) = (keys[0], keys[1]);
    eprintln!("Redis: {keys_before} keys after the warm-up, {keys_after} after");
    assert!(
        keys_after <= keys_before + 16,
        "Redis holds {keys_after} keys after {MEASURED} more requests, {keys_before} \
         before: keys are written per request and kept"
    );
}

/// K4 / D7: a flood of distinct unknown keys against a gateway with a records database
/// costs no database call (only the follower's poll of the revision reaches it) and
/// holds no memory per key: an unknown key is answered from the in-memory replica, which
/// holds the keys there are, never the ones asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k4_a_flood_of_unknown_keys_costs_no_database_call_and_no_memory() {
    let _serial = SERIAL.lock().await;
    let dir = std::env::temp_dir().join(format!("pcx-memory-flood-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let poll = Duration::from_secs(1);
    // No ledger: its resolver's looks at the ledger (two queries every
    // `resolve_interval`) are database calls of their own, not the keys'; with them the
    // bound below would hold or not by how long a loaded host takes over the flood.
    let text = format!(
        "[database]\nurl = \"sqlite://{}\"\npoll = \"1s\"\nledger = false\n{CONFIG}",
        dir.join("records.db").display()
    );
    let config = Config::parse(&text).expect("config");
    let directory = portcullis_proxy::keys::Directory::open(&config)
        .await
        .expect("the records database")
        .expect("configured");
    let fake = FakeUpstream::start().await;
    let (addr, server) =
        common::serve_with_directory(config, fake.base_url(), Some(directory.clone())).await;
    // Every request a key never seen before (unique across the warm-up and the run).
    fn unknown(c: usize, i: usize) -> String {
        static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = RUN.fetch_add(1, Ordering::Relaxed);
        format!("sk-pcx-{c:02}{i:08}{n:010}unknown0000000000000000")
    }
    drive_keys(addr, WARM_UP, unknown, 401).await;
    quiesce().await;
    let (held_before, calls_before) = (LIVE.load(Ordering::Relaxed), directory.records().calls());
    let start = std::time::Instant::now();
    drive_keys(addr, MEASURED, unknown, 401).await;
    quiesce().await;
    let (held_after, calls_after) = (LIVE.load(Ordering::Relaxed), directory.records().calls());
    let elapsed = start.elapsed();
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
    assert_flat("records database, unknown keys", held_before, held_after);
    // The follower's poll: one revision read a second, and a read of the changes when
    // the revision moved (it does not: nothing is written).
    let polls = elapsed.as_millis() / poll.as_millis() + 2;
    let calls = u128::from(calls_after - calls_before);
    eprintln!(
        "{MEASURED} unknown keys in {elapsed:?}: {calls} database calls ({polls} polls at most)"
    );
    assert!(
        calls <= polls,
        "{MEASURED} unknown keys made {calls} database calls in {elapsed:?}; the poll alone \
         makes at most {polls}: unknown keys reach the database"
    );
}
