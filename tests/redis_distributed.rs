//! Distributed operation on the Redis store, through the ready proxy (the distributed
//! rules D1–D11, C4, T4, T5): N instances enforce one set of limits, not N of them.
//!
//! Every test starts its own `redis-server` on a free 127.0.0.1 port
//! ([`portcullis_tests::redis::RedisServer`]), the bundled fake upstream, and gateway
//! instances — `portcullis_proxy::Gateway` routers served on their own ports, each with
//! its **own** `RedisStore` (own connection, own instance id) — or the `proxy` example
//! as a separate process. Clients are real HTTP/1.1 clients on real sockets.
//!
//! | test | proves |
//! |---|---|
//! | [`t4_two_instances_share_one_set_of_limits_under_load`] | two instances enforce one set of concurrency and window limits over ≥ 100 000 requests (random durations, streams, disconnects), and in-flight returns to 0 |
//! | [`t5_redis_killed_under_load_policy_layers_fail_open_within_deadline`] | Redis SIGKILLed under load: requests keep being served within the deadline, money kept in Redis fails closed (503), decisions resume ≤ 1 s after Redis returns |
//! | [`t5_frozen_redis_costs_each_decision_at_most_its_deadline`] | Redis SIGSTOPped under load: the same, when calls time out instead of failing fast |
//! | [`t5_sigkilled_instance_slots_are_reclaimed_within_the_lease_ttl`] | a SIGKILLed `proxy` process holding slots: refused until the lease TTL passes, admitted within TTL + 1 s |
//! | [`c4_stream_longer_than_the_ttl_keeps_its_slot`] | a stream of 3 × TTL keeps its slot on another instance's view, thanks to renewal |
//! | [`d2_instances_with_disagreeing_clocks_make_the_same_decisions`] | instances whose clocks disagree by a day make the same window and slot decisions |
//! | [`t5_slot_acquires_that_time_out_leave_no_phantom_leases`] (ignored) | reproduces a bug: acquires that time out but still run in Redis leave leases nobody releases |
//! | [`t5_a_forced_failover_through_three_gateways_refuses_only_its_shard_and_resumes_within_a_second`] and the killed and stalled master's | three gateways on a 3-master Cluster with every layer, quota blocks and `replica_acks = 1`: a master's fault refuses nothing on the other masters and nothing on its own from 1 s after the Cluster is ok again; nothing held after, no window unit counted for nothing |
//!
//! The tests run one at a time ([`serial`]): they measure time on a 2-core box and
//! must not load it for each other. (Other processes on a shared machine still can:
//! the timing lines print the load average next to the figures.) Every wait is bounded, every loop has a count.
//! The figures (throughput, added latency, recovery times) are printed with
//! `eprintln!`; run with `-- --nocapture` to see them.
//!
//! `PORTCULLIS_LOAD_REQUESTS` sets the size of the T4 load (default 100 000),
//! `PORTCULLIS_LOAD_SEED` its random seed (printed by every run, so a run can be replayed
//! as far as the scheduling allows).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use portcullis::core::{
    BillingStore, Demand, ManualClock, MemoryStore, Policy, Scope, SlotDecision, SlotStore,
    SubjectKey, Tier, WindowStore,
};
use portcullis::{AnchoredWindowLayer, ConcurrencySlotLayer, ErrorMappingLayer};
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::store::Split;
use portcullis_proxy::{Config, Gateway};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use portcullis_tests::cluster::MasterFault;
use portcullis_tests::example::{listening_addr, proxy_example_binary};
use portcullis_tests::redis::{RedisServer, free_port};
use portcullis_tests::{Keys, bounded, echo, fetch, request};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use tower::ServiceBuilder;
use tower::filter::FilterLayer;

/// Bound of one request (head and body) in these tests.
const STEP: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------ running a test

/// One test at a time: they measure latencies and lease timings on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `test` alone (holding [`SERIAL`]) on a fresh 2-worker tokio runtime.
fn serial<F: Future<Output = ()>>(test: F) {
    let _alone = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(test);
}

// ------------------------------------------------------------------ configuration

/// The limits of one test key `k<i>`: its policy `p<i>`, and its own model `m-<i>`
/// served by its own channel `ch-<i>` with credential `cred-<i>`, so the fake upstream
/// counts its in-flight calls per key.
#[derive(Clone, Copy, Debug)]
struct KeySpec {
    concurrency: u32,
    /// `(window, limit)` request tiers.
    requests: &'static [(u64, u64)],
    /// `(window, limit)` token tiers.
    tokens: &'static [(u64, u64)],
}

fn secret(i: usize) -> String {
    format!("sk-k{i}")
}
fn model(i: usize) -> String {
    format!("m-{i}")
}
fn credential(i: usize) -> String {
    format!("cred-{i}")
}

/// A configuration with `keys` (one tenant with a balance that never runs out), their
/// channels on `base_url` (`fake://` or the fake's `http://` address), and `head`
/// prepended (`[store]`, `[limits]` sections). Every channel has `capacity = 16`, above
/// any key's concurrency, so channel capacity never binds here and the tests check
/// per-key concurrency and windows (capacity across instances has its own test).
fn config_text(head: &str, keys: &[KeySpec], base_url: &str) -> String {
    let tiers = |v: &[(u64, u64)]| {
        v.iter()
            .map(|(w, l)| format!("{{ window = \"{w}s\", limit = {l} }}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut t = format!(
        "{head}\n[server]\nupstream_timeout = \"30s\"\n\n[tenants.t]\nbalance = 1_000_000_000_000_000\n"
    );
    for (i, k) in keys.iter().enumerate() {
        t.push_str(&format!(
            "\n[policies.p{i}]\nconcurrency = {}\nrequests = [{}]\ntokens = [{}]\n\n\
             [keys.k{i}]\nkey = \"{}\"\ntenant = \"t\"\npolicy = \"p{i}\"\nmodels = [\"{}\"]\n\n\
             [channels.ch-{i}]\nvendor = \"openai\"\nbase_url = \"{base_url}\"\n\
             credential = \"{}\"\nmodels = [\"{}\"]\ncapacity = 16\n\n\
             [models.{}]\nprice = {{ input_per_mtok = 1, output_per_mtok = 1 }}\nmax_output_tokens = 16\n",
            k.concurrency,
            tiers(k.requests),
            tiers(k.tokens),
            secret(i),
            model(i),
            credential(i),
            model(i),
            model(i),
        ));
    }
    t
}

// ------------------------------------------------------------------ gateway instances

/// A gateway instance served on 127.0.0.1; the server task is aborted on drop.
struct Instance {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Its own `RedisStore` — own connection, instance id `id` — with the configuration's
/// prefix and deadline (as the `proxy` example builds it).
fn redis_store(config: &Config, url: &str, id: &str) -> RedisStore {
    let opts = portcullis_proxy::store::redis_options(config.store()).instance_id(id);
    // Lazy, as the example: an instance starts while Redis is down (D4).
    RedisStore::connect_lazy(url, opts).expect("a redis:// URL")
}

/// Serves `app` on a free port, with `TCP_NODELAY` on accepted connections as the
/// `proxy` example sets it (small stream chunks must not wait for delayed ACKs).
async fn serve(app: axum::Router) -> Instance {
    use axum::serve::ListenerExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Instance { addr, task }
}

/// A `Gateway` on `text` whose store is `store(<its own RedisStore, instance id
/// `id`>)`, pointed at `fake`. Balances are seeded through the store (`build`).
async fn instance_on<St>(
    text: &str,
    url: &str,
    id: &str,
    fake: &FakeUpstream,
    store: impl FnOnce(RedisStore) -> St,
) -> Instance
where
    St: portcullis::core::JointStore
        + portcullis::core::ChannelStore
        + BillingStore
        + portcullis::core::CapacityStore,
{
    let config = Config::parse(text).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
    let redis = redis_store(&config, url, id);
    // As the example: provider cooldowns reach every instance (D1, F6).
    let sync = Arc::new(
        portcullis_redis::CooldownSync::start_url(url, &config.store().prefix, id)
            .expect("a redis:// URL"),
    );
    let app = Gateway::new(config, store(redis))
        .on_registry(Arc::new(move |r| sync.attach(r)))
        .fake_upstream(fake.base_url())
        .build()
        .await
        .expect("the gateway's router");
    serve(app).await
}

/// A `Gateway` with everything — slots, windows and money — in Redis.
async fn instance(text: &str, url: &str, id: &str, fake: &FakeUpstream) -> Instance {
    instance_on(text, url, id, fake, |r| r).await
}

/// A `Gateway` with only the policy layers' state (slots, windows) in Redis; money in
/// this instance's memory (`Split`), as the `proxy` example keeps it.
async fn policy_instance(text: &str, url: &str, id: &str, fake: &FakeUpstream) -> Instance {
    instance_on(text, url, id, fake, |limits| Split {
        limits,
        billing: MemoryStore::new(),
    })
    .await
}

// ------------------------------------------------------------------ client

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A pooled HTTP/1.1 client (keep-alive; a response dropped mid-body closes its
/// connection, which is how a client disconnect is played).
fn http_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// `POST /v1/chat/completions` for key `i` ("hi", `max_tokens` 16, streamed or not) with
/// fake-upstream control headers.
fn chat(
    addr: SocketAddr,
    i: usize,
    stream: bool,
    fake: &[(&str, u64)],
) -> hyper::Request<Full<Bytes>> {
    let mut body = json!({
        "model": model(i),
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
    });
    if stream {
        body["stream"] = json!(true);
    }
    let mut b = hyper::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", secret(i)));
    for (name, v) in fake {
        b = b.header(*name, v.to_string());
    }
    b.body(Full::new(Bytes::from(body.to_string())))
        .expect("request")
}

/// The gateway code of an OpenAI-shaped error body (`"code":"42901"`), else 0.
fn gateway_code(body: &[u8]) -> u32 {
    let s = String::from_utf8_lossy(body);
    s.find("\"code\":\"")
        .map(|i| &s[i + 8..])
        .and_then(|r| r.get(..5))
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// The number after the last `"field":` in `text` (JSON or SSE).
fn last_number(text: &str, field: &str) -> Option<u64> {
    let pat = format!("\"{field}\":");
    let i = text.rfind(&pat)? + pat.len();
    let digits: String = text[i..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Tokens an OpenAI answer reports (prompt + completion), if it reports them.
fn reported_tokens(body: &[u8]) -> Option<u64> {
    let s = String::from_utf8_lossy(body);
    Some(last_number(&s, "prompt_tokens")? + last_number(&s, "completion_tokens")?)
}

/// Wall-clock microseconds of an `Instant` (Redis `TIME` reads the same kernel clock).
#[derive(Clone, Copy)]
struct Wall {
    at: Instant,
    us: u64,
}

impl Wall {
    fn new() -> Self {
        let us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_micros() as u64;
        Self {
            at: Instant::now(),
            us,
        }
    }
    fn us(&self, t: Instant) -> u64 {
        self.us + t.saturating_duration_since(self.at).as_micros() as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A JSON answer read to its end.
    Plain,
    /// A stream read to its end.
    Stream,
    /// A stream the client leaves after its first chunk.
    Disconnect,
}

/// One request as the client saw it.
#[derive(Clone, Copy, Debug)]
struct Rec {
    key: usize,
    inst: usize,
    kind: Kind,
    /// 0: no answer (transport error or timeout).
    status: u16,
    /// Gateway code of a rejection, else 0.
    code: u32,
    /// Wall-clock µs: sent, response head, end (body read or dropped).
    sent: u64,
    head: u64,
    end: u64,
    /// Tokens reported by a 200 answer read to its end (0 otherwise).
    tokens: u64,
    /// A 200 answer read to its end, usage block included.
    complete: bool,
    /// What the fake was told to take before its head (ms).
    latency_ms: u64,
}

/// What a request asks of the fake upstream.
#[derive(Clone, Copy, Debug)]
struct Shape {
    kind: Kind,
    latency_ms: u64,
    chunks: u64,
    interval_ms: u64,
}

impl Shape {
    fn plain(latency_ms: u64) -> Self {
        Self {
            kind: Kind::Plain,
            latency_ms,
            chunks: 4,
            interval_ms: 0,
        }
    }
}

/// Sends one request for key `i` to `addr` and records what happened (never panics:
/// transport errors and timeouts are recorded as status 0, with the reason in `errors`).
async fn call(
    client: &HttpClient,
    addr: SocketAddr,
    inst: usize,
    i: usize,
    shape: Shape,
    wall: Wall,
    errors: &Mutex<Vec<String>>,
) -> Rec {
    let stream = shape.kind != Kind::Plain;
    let mut headers = vec![("x-fake-latency-ms", shape.latency_ms)];
    if stream {
        headers.push(("x-fake-chunks", shape.chunks));
        headers.push(("x-fake-chunk-interval-ms", shape.interval_ms));
    }
    if shape.kind == Kind::Disconnect {
        // Counted apart at the fake (see the T4 concurrency check).
        headers.push((portcullis_fake_upstream::behavior::H_CLIENT_LEAVES, 1));
    }
    let req = chat(addr, i, stream, &headers);
    let sent = Instant::now();
    let mut rec = Rec {
        key: i,
        inst,
        kind: shape.kind,
        status: 0,
        code: 0,
        sent: wall.us(sent),
        head: 0,
        end: 0,
        tokens: 0,
        complete: false,
        latency_ms: shape.latency_ms,
    };
    let fail = |what: String| {
        let mut e = errors.lock().unwrap_or_else(|p| p.into_inner());
        if e.len() < 20 {
            e.push(what);
        }
    };
    let res = match timeout(STEP, client.request(req)).await {
        Ok(Ok(res)) => res,
        Ok(Err(e)) => {
            fail(format!("key {i} via {inst}: {e:?}"));
            rec.end = wall.us(Instant::now());
            return rec;
        }
        Err(_) => {
            fail(format!("key {i} via {inst}: no head within {STEP:?}"));
            rec.end = wall.us(Instant::now());
            return rec;
        }
    };
    rec.head = wall.us(Instant::now());
    let status = res.status().as_u16();
    let mut body: Incoming = res.into_body();
    if status == 200 && shape.kind == Kind::Disconnect {
        // Leave after the first data frame (the role chunk), mid-stream.
        for _ in 0..16 {
            match timeout(STEP, body.frame()).await {
                Ok(Some(Ok(f))) if f.is_data() => break,
                Ok(Some(Ok(_))) => continue,
                _ => break,
            }
        }
        drop(body);
        rec.status = status;
        rec.end = wall.us(Instant::now());
        return rec;
    }
    match timeout(STEP, body.collect()).await {
        Ok(Ok(c)) => {
            let bytes = c.to_bytes();
            rec.status = status;
            if status == 200 {
                rec.tokens = reported_tokens(&bytes).unwrap_or(0);
                rec.complete = rec.tokens > 0
                    && (!stream || String::from_utf8_lossy(&bytes).contains("[DONE]"));
                if !rec.complete {
                    fail(format!(
                        "key {i} via {inst}: incomplete 200 answer: {}",
                        String::from_utf8_lossy(&bytes)
                    ));
                }
            } else {
                rec.code = gateway_code(&bytes);
            }
        }
        Ok(Err(e)) => fail(format!("key {i} via {inst}: body error {e:?}")),
        Err(_) => fail(format!("key {i} via {inst}: body not read within {STEP:?}")),
    }
    rec.end = wall.us(Instant::now());
    rec
}

/// `GET /usage` for key `i` on `addr` (JSON), bounded.
async fn usage(client: &HttpClient, addr: SocketAddr, i: usize) -> Value {
    let req = hyper::Request::get(format!("http://{addr}/usage"))
        .header("authorization", format!("Bearer {}", secret(i)))
        .body(Full::default())
        .expect("request");
    let res = bounded(STEP, "GET /usage", client.request(req))
        .await
        .expect("GET /usage");
    assert_eq!(res.status(), 200, "/usage");
    let body = bounded(STEP, "/usage body", res.into_body().collect())
        .await
        .expect("/usage body")
        .to_bytes();
    serde_json::from_slice(&body).expect("/usage JSON")
}

/// Polls `/usage` of every key on every instance (and the fake's in-flight count) until
/// nothing is in flight, up to `within`. Returns how long it took.
async fn in_flight_returns_to_zero(
    client: &HttpClient,
    instances: &[&Instance],
    keys: usize,
    fake: &FakeUpstream,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    assert!(
        fake.wait_idle(within).await,
        "the fake upstream still has {} requests in flight after {within:?}",
        fake.in_flight()
    );
    let mut last = Vec::new();
    for _ in 0..(within.as_millis() / 50).max(1) {
        last.clear();
        for (n, inst) in instances.iter().enumerate() {
            for i in 0..keys {
                let v = usage(client, inst.addr, i).await;
                if v["in_flight"] != json!(0) {
                    last.push(format!(
                        "instance {n} key k{i}: in_flight {}",
                        v["in_flight"]
                    ));
                }
            }
        }
        if last.is_empty() {
            return start.elapsed();
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("in-flight did not return to 0 within {within:?}: {last:?}")
}

// ------------------------------------------------------------------ numbers

/// A small deterministic PRNG (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.replace('_', "")
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v:?}: {e}")),
    )
}

/// The `p`-quantile (0..=1) of `v` (sorted here), in the unit of `v`.
fn quantile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let idx = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[idx]
}

/// The 1-minute load average (`/proc/loadavg`), printed next to timings: the machine
/// may be shared.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Milliseconds the gateway added to a request: client-side time from sending to the
/// end of the answer, less the latency the fake upstream was told to take.
fn added_ms(r: &Rec) -> f64 {
    (r.end.saturating_sub(r.sent)) as f64 / 1000.0 - r.latency_ms as f64
}

// ------------------------------------------------------------------ window accounting

/// For one key and one tier of length `len_us` aligned at the anchor `A ∈ [a_lo, a_hi]`
/// (wall µs): the admissions (`[sent, head]`, widened by 1 ms for Redis' ms clock)
/// that certainly fall in one window, summed by `weight` per window index.
/// Returns (per window sum, admissions that straddle a possible boundary).
fn per_window(
    admitted: &[&Rec],
    (a_lo, a_hi): (u64, u64),
    len_us: u64,
    weight: impl Fn(&Rec) -> u64,
) -> (BTreeMap<u64, u64>, usize) {
    let mut sums = BTreeMap::new();
    let mut straddling = 0;
    for r in admitted {
        let (s, h) = (r.sent.saturating_sub(1000), r.head + 1000);
        // The anchoring admission itself is in window 0.
        let k = if s <= a_hi {
            if h >= a_lo + len_us {
                straddling += 1;
                continue;
            }
            0
        } else {
            let k = (s - a_hi) / len_us;
            if h >= a_lo + (k + 1) * len_us {
                straddling += 1;
                continue;
            }
            k
        };
        *sums.entry(k).or_insert(0) += weight(r);
    }
    (sums, straddling)
}

// ------------------------------------------------------------------ T4

/// The T4 keys. Every key has a 1 h request tier, so its anchor group (requests and
/// tokens, W3) always has a non-empty current window during the test and never
/// re-anchors: its 5 s windows form a fixed grid from the first admission (W2), which
/// the client can check against. Some keys are bound by concurrency, some by their 5 s
/// request window, some by their token window, one by its 1 h tier.
const T4_KEYS: [KeySpec; 8] = [
    // Bound by concurrency.
    KeySpec {
        concurrency: 2,
        requests: &[(5, 100_000), (3600, 10_000_000)],
        tokens: &[],
    },
    KeySpec {
        concurrency: 3,
        requests: &[(5, 100_000), (3600, 10_000_000)],
        tokens: &[],
    },
    KeySpec {
        concurrency: 4,
        requests: &[(5, 100_000), (3600, 10_000_000)],
        tokens: &[],
    },
    // Bound by its 5 s request window.
    KeySpec {
        concurrency: 2,
        requests: &[(5, 60), (3600, 10_000_000)],
        tokens: &[],
    },
    // Bound by its 5 s token window (24 tokens reserved, 17 reported per request).
    KeySpec {
        concurrency: 3,
        requests: &[(5, 100_000), (3600, 10_000_000)],
        tokens: &[(5, 1_000)],
    },
    // Bound by its 1 h request tier once a few hundred requests went through.
    KeySpec {
        concurrency: 4,
        requests: &[(5, 100_000), (3600, 400)],
        tokens: &[],
    },
    // Bound by requests and tokens in turn.
    KeySpec {
        concurrency: 2,
        requests: &[(5, 80), (3600, 10_000_000)],
        tokens: &[(5, 1_200)],
    },
    KeySpec {
        concurrency: 4,
        requests: &[(5, 100), (3600, 10_000_000)],
        tokens: &[(5, 3_000)],
    },
];

/// Concurrent client tasks of the T4 load.
const T4_CLIENTS: usize = 64;

/// T4, D1, rule 15: one redis-server, one fake upstream, two gateway instances with
/// their own `RedisStore`s holding slots, windows and money; ≥ 100 000 requests from
/// 64 client tasks alternating the instances, over 8 keys, with random latencies
/// (0–25 ms), 20 % streams read to the end and 10 % streams the client leaves after
/// the first chunk. The store deadline is 2 s: T4 is about decisions, and a decision
/// that timed out would fail open and admit past the limits by design (D4; the
/// deadline is the T5 tests' subject). Then:
///
/// - concurrency: the fake upstream's highest in-flight count per channel credential —
///   one channel per key — never exceeded the key's limit, counting the calls whose
///   client stays to the end (9 in 10). The fake counts a call from its request head
///   until its last byte is produced, inside the gateway's slot; a call whose client
///   leaves is counted until the fake notices the closed connection, after the gateway
///   has rightly freed its slot, so that count is printed only;
/// - windows: in every 5 s window of every key (a fixed grid from the key's first
///   admission, see [`T4_KEYS`]), the 200s certainly admitted in it never exceed the
///   request limit, and the tokens of the complete answers never exceed the token
///   limit (each answer reports 17 tokens, under the 24 reserved for it, so the sum of
///   reported tokens is bounded by what admission allowed); the 1 h tiers hold too;
/// - afterwards, in-flight is 0 on both instances' `/usage` and at the fake.
#[test]
fn t4_two_instances_share_one_set_of_limits_under_load() {
    serial(async {
        let total = env_u64("PORTCULLIS_LOAD_REQUESTS").unwrap_or(100_000);
        let redis = RedisServer::start();
        t4_two_instances(&redis.url(), total).await;
    });
}

/// D6, T4: the same run on a 3-master Redis Cluster (20,000 requests unless
/// `PORTCULLIS_CLUSTER_LOAD_REQUESTS` says otherwise): the instances reach it through the
/// comma-separated list of its masters.
#[test]
fn t4_two_instances_share_one_set_of_limits_on_a_redis_cluster() {
    serial(async {
        let total = env_u64("PORTCULLIS_CLUSTER_LOAD_REQUESTS").unwrap_or(20_000);
        let cluster = portcullis_tests::cluster::RedisCluster::start(3, 0);
        t4_two_instances(&cluster.comma_urls(), total).await;
    });
}

async fn t4_two_instances(url: &str, total: u64) {
    {
        let seed = env_u64("PORTCULLIS_LOAD_SEED").unwrap_or_else(|| Wall::new().us);
        eprintln!("T4: {total} requests, seed {seed} (PORTCULLIS_LOAD_SEED={seed} to replay)");

        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake upstream");
        // A deadline long enough never to be hit: T4 counts decisions, and a decision
        // that timed out would fail open (D4) and admit past the limits by design.
        let text = config_text("[store]\ndeadline = \"2s\"\n", &T4_KEYS, "fake://");
        let a = instance(&text, url, "gw-a", &fake).await;
        let b = instance(&text, url, "gw-b", &fake).await;
        let addrs = [a.addr, b.addr];
        let client = http_client();
        let wall = Wall::new();
        let errors = Arc::new(Mutex::new(Vec::new()));

        // Warm-up: one request per key, alone, sets the key's anchor (W2) at a known
        // moment within [sent, head].
        let mut recs = Vec::new();
        for i in 0..T4_KEYS.len() {
            let r = call(
                &client,
                addrs[i % 2],
                i % 2,
                i,
                Shape::plain(0),
                wall,
                &errors,
            )
            .await;
            assert_eq!(
                r.status,
                200,
                "warm-up of k{i}: {r:?} {:?}",
                errors.lock().unwrap()
            );
            recs.push(r);
        }
        let anchors: Vec<(u64, u64)> = recs
            .iter()
            .map(|r| (r.sent.saturating_sub(1000), r.head + 1000))
            .collect();

        let next = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let tasks: Vec<JoinHandle<Vec<Rec>>> = (0..T4_CLIENTS)
            .map(|t| {
                let (client, next, errors) = (client.clone(), next.clone(), errors.clone());
                let mut rng = Rng(seed ^ (t as u64).wrapping_mul(0xA24B_AED4_963E_E407));
                tokio::spawn(async move {
                    let mut recs = Vec::with_capacity((total as usize / T4_CLIENTS) + 16);
                    // Bounded: each turn takes one of `total` numbers.
                    for _ in 0..=total {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= total {
                            break;
                        }
                        let inst = (n % 2) as usize;
                        let key = rng.below(T4_KEYS.len() as u64) as usize;
                        let roll = rng.below(100);
                        let kind = match roll {
                            0..20 => Kind::Stream,
                            20..30 => Kind::Disconnect,
                            _ => Kind::Plain,
                        };
                        let shape = Shape {
                            kind,
                            latency_ms: rng.between(0, 25),
                            chunks: rng.between(2, 6),
                            interval_ms: rng.between(1, 12),
                        };
                        recs.push(
                            call(&client, addrs[inst], inst, key, shape, wall, &errors).await,
                        );
                    }
                    recs
                })
            })
            .collect();
        for t in tasks {
            let mut part = bounded(Duration::from_secs(900), "a T4 client task", t)
                .await
                .expect("T4 client task");
            recs.append(&mut part);
        }
        let elapsed = started.elapsed();

        // ---- every request answered
        let errs = errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let unanswered = recs.iter().filter(|r| r.status == 0).count();
        assert!(
            errs.is_empty() && unanswered == 0,
            "{unanswered} requests without an answer; first errors: {errs:#?}"
        );
        let mut by_code: BTreeMap<(u16, u32), u64> = BTreeMap::new();
        for r in &recs {
            *by_code.entry((r.status, r.code)).or_default() += 1;
        }
        for (status, code) in by_code.keys() {
            assert!(
                *status == 200 || (*status == 429 && [42901, 42902, 42905].contains(code)),
                "unexpected answer {status} {code}: {by_code:?}"
            );
        }

        // ---- concurrency (C1, T4)
        let stats = fake.stats();
        let mut report = Vec::new();
        for (i, k) in T4_KEYS.iter().enumerate() {
            // Exact over the calls whose client stays to the end. A call whose client
            // leaves mid-stream is freed by the gateway at once, but the fake counts it
            // until it notices the closed connection — on a loaded 2-core box a few ms
            // later, time enough for the other instance to send the key's next call: so
            // the count with those calls in is printed, not bounded.
            let stayed = stats.max_in_flight_stayed_for(&credential(i));
            let all = stats.max_in_flight_for(&credential(i));
            report.push(format!(
                "k{i}: max in flight {stayed}/{} ({all} counting calls whose client left)",
                k.concurrency
            ));
            assert!(
                stayed <= u64::from(k.concurrency),
                "k{i}: {stayed} requests in flight at the upstream at once, limit {}",
                k.concurrency
            );
        }

        // ---- windows (W1, W2, W4, T4)
        // The token check below needs every answer to report at most what was reserved
        // for it: 8 estimated input tokens ("hi") + 16 max output = 24.
        let over: Vec<&Rec> = recs.iter().filter(|r| r.tokens > 24).collect();
        assert!(
            over.is_empty(),
            "{} answers report more tokens than reserved (24): {:?}",
            over.len(),
            over.first()
        );
        let mut straddled = 0;
        let mut busiest = Vec::new();
        for (i, k) in T4_KEYS.iter().enumerate() {
            let admitted: Vec<&Rec> = recs
                .iter()
                .filter(|r| r.key == i && r.status == 200)
                .collect();
            let complete: Vec<&Rec> = admitted.iter().copied().filter(|r| r.complete).collect();
            for &(w, limit) in k.requests {
                let (sums, s) = per_window(&admitted, anchors[i], w * 1_000_000, |_| 1);
                straddled += s;
                let (win, max) = sums
                    .iter()
                    .max_by_key(|(_, v)| **v)
                    .map(|(a, b)| (*a, *b))
                    .unwrap_or((0, 0));
                busiest.push(format!("k{i} requests/{w}s: {max}/{limit}"));
                assert!(
                    max <= limit,
                    "k{i}: {max} requests admitted in {w}s-window #{win}, limit {limit}: {sums:?}"
                );
            }
            for &(w, limit) in k.tokens {
                let (sums, s) = per_window(&complete, anchors[i], w * 1_000_000, |r| r.tokens);
                straddled += s;
                let (win, max) = sums
                    .iter()
                    .max_by_key(|(_, v)| **v)
                    .map(|(a, b)| (*a, *b))
                    .unwrap_or((0, 0));
                busiest.push(format!("k{i} tokens/{w}s: {max}/{limit}"));
                assert!(
                    max <= limit,
                    "k{i}: {max} tokens reported in {w}s-window #{win}, limit {limit}: {sums:?}"
                );
            }
        }

        // ---- back to 0 (T5's "in-flight counts return to 0", C3)
        let drained = in_flight_returns_to_zero(
            &client,
            &[&a, &b],
            T4_KEYS.len(),
            &fake,
            Duration::from_secs(10),
        )
        .await;

        // ---- figures
        let n = recs.len() as f64;
        let ok = recs.iter().filter(|r| r.status == 200).count();
        let ok_b = recs
            .iter()
            .filter(|r| r.status == 200 && r.inst == 1)
            .count();
        let disconnects = recs
            .iter()
            .filter(|r| r.status == 200 && r.kind == Kind::Disconnect)
            .count();
        let streams = recs
            .iter()
            .filter(|r| r.status == 200 && r.kind == Kind::Stream)
            .count();
        let mut added: Vec<f64> = recs
            .iter()
            .filter(|r| r.status == 200 && r.kind == Kind::Plain)
            .map(added_ms)
            .collect();
        eprintln!(
            "T4: {} requests in {:.1} s = {:.0} requests/s through 2 instances ({:.0} admitted/s); \
             200: {ok} ({ok_b} through the second instance; {streams} streams read to the end, \
             {disconnects} left mid-stream); \
             by (status, code): {by_code:?}",
            recs.len(),
            elapsed.as_secs_f64(),
            n / elapsed.as_secs_f64(),
            ok as f64 / elapsed.as_secs_f64(),
        );
        // Requests answered per 10 s of the run, to tell a steady rate from a drift.
        let t0 = wall.us(started);
        let mut per_10s = vec![0u64; (elapsed.as_secs() / 10 + 1) as usize];
        for r in recs.iter().filter(|r| r.end >= t0) {
            let slot = (((r.end - t0) / 10_000_000) as usize).min(per_10s.len() - 1);
            per_10s[slot] += 1;
        }
        eprintln!(
            "T4: answered per 10 s: {per_10s:?}; 1-min load average of the machine at the end: {}",
            load_average()
        );
        eprintln!(
            "T4: added latency of admitted JSON answers (client time less the fake's latency): \
             p50 {:.1} ms, p99 {:.1} ms",
            quantile(&mut added, 0.5),
            quantile(&mut added, 0.99),
        );
        eprintln!("T4: 0 violations; {}", report.join(", "));
        eprintln!(
            "T4: busiest windows: {}; {straddled} admissions straddled a possible window boundary (not counted)",
            busiest.join(", ")
        );
        eprintln!(
            "T4: fake upstream: {} calls, {} cancelled by the gateway; in-flight back to 0 within {:.0} ms",
            stats.total_calls,
            stats.cancelled,
            drained.as_secs_f64() * 1000.0
        );
    }
}

// ------------------------------------------------------------------ T5: Redis dies

/// Keys of the T5 load: keys 0–3 with concurrency 4, not bound by their windows;
/// key 4 (concurrency 1) is the probe that tells whether Redis decides again; key 5 is
/// the billed key of the instance whose money is in Redis.
const T5_KEYS: [KeySpec; 6] = [
    KeySpec {
        concurrency: 4,
        requests: &[(60, 10_000_000)],
        tokens: &[],
    },
    KeySpec {
        concurrency: 4,
        requests: &[(60, 10_000_000)],
        tokens: &[],
    },
    KeySpec {
        concurrency: 4,
        requests: &[(60, 10_000_000)],
        tokens: &[],
    },
    KeySpec {
        concurrency: 4,
        requests: &[(60, 10_000_000)],
        tokens: &[],
    },
    KeySpec {
        concurrency: 1,
        requests: &[(60, 10_000_000)],
        tokens: &[],
    },
    KeySpec {
        concurrency: 4,
        requests: &[(60, 10_000_000)],
        tokens: &[],
    },
];
const PROBE: usize = 4;
const BILLED: usize = 5;
/// The store deadline of the T5 tests.
const DEADLINE_MS: u64 = 20;
/// Scheduling slack of a refusal's time on a loaded 2-core host; far below the
/// second a wait on a dead Redis's reconnection would take.
const REFUSAL_SLACK_MS: u64 = 250;
/// What the fake takes for each load request.
const T5_LATENCY_MS: u64 = 5;

/// The T5 store and lease settings: a 20 ms deadline, and a lease TTL of 2 s instead
/// of 600 s. The short TTL works around a bug (see
/// [`t5_slot_acquires_that_time_out_leave_no_phantom_leases`]): an acquire that times
/// out on the client but still runs in Redis — queued behind a frozen server, or slowed
/// by the script reload after a restart — leaves a lease nobody releases, so the key
/// stays (partly) full until the TTL.
/// Scheduling slack of the T5 latency bound on a loaded 2-core host (two CPU hogs or a
/// release build beside the test), on top of one store deadline and of the Redis-up
/// p99 measured under the same load in the same run.
///
/// What the bound proves: with Redis dead or frozen, a decision costs at most its
/// deadline, not a wait on the redis client — a reconnection, a connect timeout or a
/// command queued behind a dead connection takes a second or more, so if 1 request in
/// 100 did that, the p99 would exceed the bound by far. It does not tell a decision
/// that waits one deadline from one that waits two (the breaker's subject, tested
/// with a manual clock in the core); the maximum is printed.
const LATENCY_SLACK_MS: u64 = 150;

/// The T5 latency bound: with Redis dead or frozen, the 99th percentile of the added
/// latency stays within one store deadline + [`LATENCY_SLACK_MS`] of what the same load
/// saw with Redis up in the same run (on a busy 2-core box the Redis-up p99 itself can
/// be tens of ms).
fn added_latency_within_a_deadline(fault: &str, p99: f64, up_p99: f64) {
    let bound = up_p99 + (DEADLINE_MS + LATENCY_SLACK_MS) as f64;
    assert!(
        p99 <= bound,
        "p99 added latency {p99:.1} ms with Redis {fault} > Redis-up p99 {up_p99:.1} ms + \
         deadline {DEADLINE_MS} ms + {LATENCY_SLACK_MS} ms of scheduling slack"
    );
}

/// How long decisions may take to resume after Redis answers again (T5: within 1 s).
///
/// What the bound proves: the gateway reconnects and reloads its scripts on its own
/// within a second — the redis client's reconnection backoff, a breaker that stayed
/// open, or a script cache that was not reloaded would take longer or forever. The
/// measurement's own error is one probe round (a held stream, one request, a 20 ms
/// pause: tens of ms on a loaded 2-core host), within the bound.
const RESUME_BOUND: Duration = Duration::from_secs(1);

/// How long in-flight counts may take to return to 0 once the T5 load has stopped: the
/// lease TTL (a lease of an acquire that timed out on the client but ran in Redis lives
/// that long, see [`t5_head`]) plus a generous 5 s for a loaded host. Not a deadline
/// under test: a count that never returns (a slot not given back) fails it all the
/// same.
const T5_DRAIN: Duration = Duration::from_secs(2 + 5);

/// A billed request with Redis up, through `addr`, until one is served 200 (at most
/// 20 tries). With the 20 ms T5 deadline a busy host may make a billing decision miss
/// it — the first call also loads the scripts — and billing fails closed (503 50301,
/// B5): that refusal is retried, every other answer fails the test.
async fn billed_request_served(
    client: &HttpClient,
    addr: SocketAddr,
    wall: Wall,
    errors: &Mutex<Vec<String>>,
) {
    let mut seen = Vec::new();
    for _ in 0..20 {
        let r = call(client, addr, 2, BILLED, Shape::plain(0), wall, errors).await;
        if r.status == 200 {
            return;
        }
        assert_eq!(
            (r.status, r.code),
            (503, 50301),
            "billed request with Redis up: {r:?} {:?}",
            errors.lock().unwrap()
        );
        seen.push(r);
        sleep(Duration::from_millis(50)).await;
    }
    panic!("20 billed requests with Redis up refused: {seen:?}")
}

fn t5_head() -> String {
    format!("[store]\ndeadline = \"{DEADLINE_MS}ms\"\n[limits]\nlease_ttl = \"2s\"\n")
}

/// Concurrent client tasks of the T5 load: enough to keep both instances busy, few
/// enough that the 2-core box is not saturated by the test itself (the latency bound
/// is about the store deadline, not about CPU queueing).
const T5_CLIENTS: usize = 8;

/// A background load on keys 0–3 through both instances until `stop` is set.
fn t5_load(
    client: &HttpClient,
    addrs: [SocketAddr; 2],
    wall: Wall,
    stop: &Arc<AtomicBool>,
    errors: &Arc<Mutex<Vec<String>>>,
) -> Vec<JoinHandle<Vec<Rec>>> {
    (0..T5_CLIENTS)
        .map(|t| {
            let (client, stop, errors) = (client.clone(), stop.clone(), errors.clone());
            tokio::spawn(async move {
                let mut recs = Vec::new();
                // Bounded: the test stops it after a few seconds; 1 000 000 turns is a
                // backstop.
                for n in 0..1_000_000usize {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let inst = n % 2;
                    let key = (n / 2 + t) % 4;
                    let shape = Shape::plain(T5_LATENCY_MS);
                    recs.push(call(&client, addrs[inst], inst, key, shape, wall, &errors).await);
                }
                recs
            })
        })
        .collect()
}

/// After Redis is back: how long until a decision is taken by Redis again — the probe
/// key (concurrency 1) refused (42901) while a stream of it is held. Polled every
/// 20 ms, up to `within`.
async fn decisions_resume(
    client: &HttpClient,
    addrs: [SocketAddr; 2],
    wall: Wall,
    errors: &Mutex<Vec<String>>,
    within: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    for _ in 0..(within.as_millis() / 20) {
        // Hold the probe's slot with a stream through instance 0 …
        let hold = chat(
            addrs[0],
            PROBE,
            true,
            &[("x-fake-chunks", 2), ("x-fake-chunk-interval-ms", 300)],
        );
        let held = timeout(STEP, client.request(hold)).await;
        let refused = match held {
            Ok(Ok(res)) if res.status() == 429 => {
                // A lease of an earlier probe is still there: Redis decides.
                let body = res
                    .into_body()
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                gateway_code(&body) == 42901
            }
            Ok(Ok(res)) => {
                // … and ask through instance 1.
                let r = call(client, addrs[1], 1, PROBE, Shape::plain(0), wall, errors).await;
                drop(res);
                r.code == 42901
            }
            _ => false,
        };
        if refused {
            return Some(start.elapsed());
        }
        if start.elapsed() > within {
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Splits `recs` by the moment they were sent: before `a`, in `[a, b)`, after `b`.
fn phases(recs: &[Rec], a: u64, b: u64) -> (Vec<&Rec>, Vec<&Rec>, Vec<&Rec>) {
    let before = recs.iter().filter(|r| r.sent < a).collect();
    let during = recs.iter().filter(|r| r.sent >= a && r.sent < b).collect();
    let after = recs.iter().filter(|r| r.sent >= b).collect();
    (before, during, after)
}

/// B5, D4 with money in Redis and `billing_failure = "closed"` (the default): with
/// Redis gone, 20 billed requests through `addr` are each refused 503 50301 with a
/// Retry-After, and none reaches the upstream. Returns the slowest (ms).
///
/// What the time bound proves: no decision waits on a dead Redis past its deadline —
/// a wait on the redis client's reconnection or a connect timeout takes a second or
/// more, so it fails the bound of three deadlines + [`REFUSAL_SLACK_MS`]. The slack
/// is the scheduling noise of a loaded 2-core host (one request of 20 once took
/// 132 ms against a 110 ms bound while a build ran beside it); the typical time is
/// printed.
async fn billed_requests_refused(
    client: &HttpClient,
    addr: SocketAddr,
    fake: &FakeUpstream,
) -> f64 {
    let calls = fake.stats().calls_for(&credential(BILLED));
    let mut worst = 0f64;
    for n in 0..20 {
        let req = chat(addr, BILLED, false, &[("x-fake-latency-ms", 0)]);
        let t = Instant::now();
        let res = bounded(
            STEP,
            "a billed request with Redis down",
            client.request(req),
        )
        .await
        .expect("an answer");
        let took = t.elapsed().as_secs_f64() * 1000.0;
        worst = worst.max(took);
        let status = res.status();
        let retry_after = res.headers().get("retry-after").cloned();
        let body = bounded(STEP, "body", res.into_body().collect())
            .await
            .expect("body")
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 503, "billed request {n} with Redis down: {text}");
        assert_eq!(gateway_code(&body), 50301, "{text}");
        assert!(retry_after.is_some(), "503 without Retry-After: {text}");
        assert!(
            took <= (3 * DEADLINE_MS + REFUSAL_SLACK_MS) as f64,
            "billed request {n} took {took:.1} ms with Redis down (slot, windows and billing \
             decisions, each bounded by {DEADLINE_MS} ms, + {REFUSAL_SLACK_MS} ms of \
             scheduling slack)"
        );
    }
    assert_eq!(
        fake.stats().calls_for(&credential(BILLED)),
        calls,
        "a request refused by billing reached the upstream"
    );
    worst
}

/// p50, p99 and max of the added latency of `recs` (ms).
fn latency_figures(recs: &[&Rec]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = recs.iter().map(|r| added_ms(r)).collect();
    let max = v.iter().copied().fold(f64::NAN, f64::max);
    (quantile(&mut v, 0.5), quantile(&mut v, 0.99), max)
}

/// T5, D4: Redis SIGKILLed under load. With `[store] deadline = "20ms"` and slots and
/// windows failing open (the defaults), requests keep being served while Redis is
/// gone: every one answered 200, the 99th percentile of the latency the gateway adds
/// (client time less the fake's 5 ms) within deadline + 50 ms of the Redis-up p99 of
/// the same run (the slack of a loaded 2-core box; the maximum is printed). Redis restarted on the same port (empty: no
/// persistence): decisions resume — a concurrency-1 key is refused again while held —
/// within 1 s of Redis answering PING, and in-flight returns to 0 on both instances.
///
/// The two loaded instances keep money in their own memory (`Split`, as the `proxy`
/// example does), so the load measures the policy layers. A third instance keeps its
/// money in Redis too, with `billing_failure = "closed"` (the default, B5): while Redis
/// is gone its billed requests are refused 503 50301 + Retry-After, within the
/// deadlines, without reaching the upstream.
#[test]
fn t5_redis_killed_under_load_policy_layers_fail_open_within_deadline() {
    serial(async {
        let mut redis = RedisServer::start();
        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake");
        let text = config_text(&t5_head(), &T5_KEYS, "fake://");
        let a = policy_instance(&text, &redis.url(), "gw-a", &fake).await;
        let b = policy_instance(&text, &redis.url(), "gw-b", &fake).await;
        let billed = instance(&text, &redis.url(), "gw-billed", &fake).await;
        let addrs = [a.addr, b.addr];
        let client = http_client();
        let wall = Wall::new();
        let errors = Arc::new(Mutex::new(Vec::new()));

        billed_request_served(&client, billed.addr, wall, &errors).await;
        // Redis decides before the fault (not a deadline: a generous wait).
        let before = decisions_resume(&client, addrs, wall, &errors, Duration::from_secs(10)).await;
        assert!(
            before.is_some(),
            "the probe key is not limited even with Redis up"
        );

        let stop = Arc::new(AtomicBool::new(false));
        let load = t5_load(&client, addrs, wall, &stop, &errors);
        sleep(Duration::from_millis(1500)).await;

        redis.kill();
        let killed = Instant::now();
        let worst_billed = billed_requests_refused(&client, billed.addr, &fake).await;
        let rest = Duration::from_secs(2).saturating_sub(killed.elapsed());
        sleep(rest).await;
        let restarting = Instant::now();
        redis.restart();
        let up = Instant::now();
        let resumed = decisions_resume(&client, addrs, wall, &errors, Duration::from_secs(3)).await;
        sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        let mut recs = Vec::new();
        for t in load {
            recs.append(
                &mut bounded(STEP * 2, "a T5 client task", t)
                    .await
                    .expect("task"),
            );
        }

        let errs = errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(errs.is_empty(), "requests without an answer: {errs:#?}");
        let (up_before, down, after) = phases(&recs, wall.us(killed), wall.us(restarting));
        let after: Vec<&Rec> = after
            .into_iter()
            .filter(|r| r.sent >= wall.us(up))
            .collect();
        assert!(
            down.len() > 50,
            "only {} requests while Redis was down",
            down.len()
        );
        // A request still being answered when the restart began may have been decided by
        // the restarted Redis (and refused by a key's concurrency): only those answered
        // before it (all but at most one per client) were certainly decided while Redis
        // was down.
        let restart_us = wall.us(restarting);
        let refused: Vec<&&Rec> = down
            .iter()
            .filter(|r| r.end < restart_us && r.status != 200)
            .collect();
        assert!(
            refused.is_empty(),
            "{} of {} requests refused while Redis was down (slots and windows fail open): {:?}",
            refused.len(),
            down.len(),
            refused.first()
        );
        let (p50, p99, max) = latency_figures(&down);
        let (b50, b99, bmax) = latency_figures(&up_before);
        let (a50, a99, amax) = latency_figures(&after);
        eprintln!(
            "T5 kill: added latency (ms) p50/p99/max — Redis up {b50:.1}/{b99:.1}/{bmax:.1} ({} requests), \
             Redis killed {p50:.1}/{p99:.1}/{max:.1} ({} requests, all 200), after restart {a50:.1}/{a99:.1}/{amax:.1} ({} requests); \
             load average {}",
            up_before.len(),
            down.len(),
            after.len(),
            load_average()
        );
        added_latency_within_a_deadline("killed", p99, b99);
        let resumed = resumed.expect("decisions did not resume within 3 s of Redis answering PING");
        eprintln!(
            "T5 kill: decisions resumed {:.0} ms after Redis answered PING again",
            resumed.as_secs_f64() * 1000.0
        );
        assert!(
            resumed <= RESUME_BOUND,
            "decisions resumed after {resumed:?} (bound {RESUME_BOUND:?})"
        );
        let drained =
            in_flight_returns_to_zero(&client, &[&a, &b], T5_KEYS.len(), &fake, T5_DRAIN).await;
        eprintln!(
            "T5 kill: in-flight back to 0 {:.0} ms after the load ended; with money in Redis and \
             billing_failure = closed, 20/20 billed requests refused 503 50301 while Redis was down \
             (slowest {worst_billed:.1} ms)",
            drained.as_secs_f64() * 1000.0
        );
    });
}

/// T5, D4: Redis frozen (SIGSTOP) under load: connections stay open and nothing is
/// answered, so every store call runs into its deadline instead of failing fast. A
/// request makes two decisions on Redis (slot, windows), so it may wait up to twice
/// the deadline; the 99th percentile of the added latency stays within deadline +
/// 50 ms of the Redis-up p99 all the same (the breaker opens once the node has been
/// silent for two deadlines and then fails calls fast), every request is answered 200,
/// and after SIGCONT decisions resume within 1 s.
#[test]
fn t5_frozen_redis_costs_each_decision_at_most_its_deadline() {
    serial(async {
        let mut redis = RedisServer::start();
        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake");
        let text = config_text(&t5_head(), &T5_KEYS, "fake://");
        let a = policy_instance(&text, &redis.url(), "gw-a", &fake).await;
        let b = policy_instance(&text, &redis.url(), "gw-b", &fake).await;
        let addrs = [a.addr, b.addr];
        let client = http_client();
        let wall = Wall::new();
        let errors = Arc::new(Mutex::new(Vec::new()));

        let stop = Arc::new(AtomicBool::new(false));
        let load = t5_load(&client, addrs, wall, &stop, &errors);
        sleep(Duration::from_millis(1500)).await;
        redis.freeze();
        let frozen = Instant::now();
        sleep(Duration::from_secs(2)).await;
        let thawing = Instant::now();
        redis.thaw();
        let resumed = decisions_resume(&client, addrs, wall, &errors, Duration::from_secs(3)).await;
        sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        let mut recs = Vec::new();
        for t in load {
            recs.append(
                &mut bounded(STEP * 2, "a T5 client task", t)
                    .await
                    .expect("task"),
            );
        }

        let errs = errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(errs.is_empty(), "requests without an answer: {errs:#?}");
        let (up_before, down, _) = phases(&recs, wall.us(frozen), wall.us(thawing));
        assert!(
            down.len() > 20,
            "only {} requests while Redis was frozen",
            down.len()
        );
        // A request still being answered at SIGCONT may have got its slot decision from
        // the thawed Redis (and been refused by the leases of timed-out calls): only
        // those answered before it (all but at most one per client) were certainly
        // decided while Redis was frozen, however late a loaded host ran them.
        let thaw_us = wall.us(thawing);
        let refused: Vec<&&Rec> = down
            .iter()
            .filter(|r| r.end < thaw_us && r.status != 200)
            .collect();
        assert!(
            refused.is_empty(),
            "{} requests refused while Redis was frozen (slots and windows fail open): {:?}",
            refused.len(),
            refused.first()
        );
        let (p50, p99, max) = latency_figures(&down);
        let (b50, b99, bmax) = latency_figures(&up_before);
        eprintln!(
            "T5 freeze: added latency (ms) p50/p99/max — Redis up {b50:.1}/{b99:.1}/{bmax:.1} ({} requests), \
             Redis frozen {p50:.1}/{p99:.1}/{max:.1} ({} requests, all 200); load average {}",
            up_before.len(),
            down.len(),
            load_average()
        );
        added_latency_within_a_deadline("frozen", p99, b99);
        let resumed = resumed.expect("decisions did not resume within 3 s of SIGCONT");
        eprintln!(
            "T5 freeze: decisions resumed {:.0} ms after SIGCONT",
            resumed.as_secs_f64() * 1000.0
        );
        assert!(
            resumed <= RESUME_BOUND,
            "decisions resumed after {resumed:?} (bound {RESUME_BOUND:?})"
        );
        let drained =
            in_flight_returns_to_zero(&client, &[&a, &b], T5_KEYS.len(), &fake, T5_DRAIN).await;
        eprintln!(
            "T5 freeze: in-flight back to 0 {:.0} ms after the load ended",
            drained.as_secs_f64() * 1000.0
        );
    });
}

/// **Bug reproduction** (ignored until fixed; T5 "in-flight counts return to 0", C3,
/// D4). A slot acquire whose call times out on the client (the layer then fails open
/// and holds no lease) may still run in Redis: queued behind a frozen server and
/// answered after SIGCONT, or slowed past the deadline by the `NOSCRIPT` reload after a
/// restart. The lease it creates belongs to nobody and is never released, so the key
/// counts it in flight until the lease TTL — 600 s by default — and admits fewer
/// requests meanwhile (a concurrency-4 key under load was seen at 3 of 4 phantom slots
/// after a kill and restart). The lease id is chosen by the client (`<instance>:<n>`),
/// so a timed-out acquire could be followed by a best-effort `ZREM` of that member on
/// the same connection (executed after the late acquire).
///
/// Here: the T5 load, Redis frozen for 1 s, thawed, the load stopped; with the default
/// lease TTL, in-flight should return to 0 within 2 s on both instances.
#[test]
fn t5_slot_acquires_that_time_out_leave_no_phantom_leases() {
    serial(async {
        let mut redis = RedisServer::start();
        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake");
        let head = format!("[store]\ndeadline = \"{DEADLINE_MS}ms\"\n");
        let text = config_text(&head, &T5_KEYS, "fake://");
        let a = policy_instance(&text, &redis.url(), "gw-a", &fake).await;
        let b = policy_instance(&text, &redis.url(), "gw-b", &fake).await;
        let client = http_client();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let load = t5_load(&client, [a.addr, b.addr], Wall::new(), &stop, &errors);
        sleep(Duration::from_millis(1000)).await;
        redis.freeze();
        sleep(Duration::from_millis(1000)).await;
        redis.thaw();
        sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        for t in load {
            let _ = bounded(STEP * 2, "a T5 client task", t).await;
        }
        in_flight_returns_to_zero(
            &client,
            &[&a, &b],
            T5_KEYS.len(),
            &fake,
            Duration::from_secs(2),
        )
        .await;
    });
}

// ------------------------------------------------------------------ T5: an instance dies

/// The `proxy` example as a separate process; killed (SIGKILL) on drop.
struct ProxyProcess {
    child: tokio::process::Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Starts `proxy --config <text in a temp file> --listen 127.0.0.1:0 --store <url>`,
/// reads the address it bound ([`listening_addr`]) and waits (bounded) until
/// `/healthz` answers.
async fn start_proxy_process(text: &str, url: &str) -> ProxyProcess {
    let bin = tokio::task::spawn_blocking(proxy_example_binary)
        .await
        .expect("the proxy example");
    let dir = std::env::temp_dir();
    let tag = format!("{}-{}", std::process::id(), free_port());
    let config = dir.join(format!("portcullis-dist-{tag}.toml"));
    std::fs::write(&config, text).expect("write the config");
    let log = dir.join(format!("portcullis-dist-{tag}.log"));
    let out = dir.join(format!("portcullis-dist-{tag}.out"));
    let client = http_client();
    let mut child = tokio::process::Command::new(&bin)
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--store", url])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("a file for its output"))
        .stderr(
            std::fs::File::create(&log)
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        )
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let addr = listening_addr(&out, &mut child, Duration::from_secs(15)).await;
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&config);
    let addr = addr.unwrap_or_else(|e| {
        panic!(
            "the proxy did not start: {e}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let mut p = ProxyProcess { child, addr, log };
    for _ in 0..200 {
        let req = hyper::Request::get(format!("http://{addr}/healthz"))
            .body(Full::default())
            .expect("request");
        if let Ok(Ok(r)) = timeout(Duration::from_secs(1), client.request(req)).await
            && r.status() == 200
        {
            return p;
        }
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!(
                "the proxy exited with {status}: {}",
                std::fs::read_to_string(&p.log).unwrap_or_default()
            );
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("the proxy example did not answer /healthz within 10 s")
}

/// A store deadline for the tests that are not about it: long enough never to be hit
/// on a loaded host. With the default 20 ms a busy host makes a decision miss it now
/// and then, and a missed decision fails open (slots, windows, capacity: admitted past
/// the limit, by design, D4) or closed (billing: 503) — either would fail a test that
/// counts decisions.
const GENEROUS_DEADLINE: &str = "[store]\ndeadline = \"2s\"\n";

/// A key with concurrency 2 and lease TTL 3 s, on channels at `fake` (`http://`), with
/// a [`GENEROUS_DEADLINE`].
fn lease_config(fake: &FakeUpstream, concurrency: u32) -> String {
    let keys = [KeySpec {
        concurrency,
        requests: &[(3600, 1_000_000)],
        tokens: &[],
    }];
    config_text(
        &format!("{GENEROUS_DEADLINE}[limits]\nlease_ttl = \"3s\"\n"),
        &keys,
        &fake.base_url(),
    )
}
const TTL: Duration = Duration::from_secs(3);

/// How late the killed process's last lease renewal (every TTL / 3) may have run on a
/// loaded host: its leases expire at least TTL − TTL / 3 − this after the kill. A dead
/// instance's slots freed at once (on its dropped connection, or by a TTL not applied)
/// would be admitted about 0 s after the kill, far below that.
const RENEWAL_LATENESS: Duration = Duration::from_millis(500);

/// How long after its leases can have expired (TTL after the kill at most) the
/// survivor may take to admit the key: one probe round (a request and a 50 ms pause)
/// on a loaded host is tens of ms. A lease renewed after the kill, or an expiry not
/// purged by the acquire, would keep the key refused for another TTL or for good.
const ADMIT_SLACK: Duration = Duration::from_secs(1);
/// An open stream: its response head arrived; dropping it leaves mid-stream.
struct Held {
    status: u16,
    body: Incoming,
}

/// Opens a long stream (`chunks` × `interval_ms`) for key 0 through `addr`.
async fn hold(client: &HttpClient, addr: SocketAddr, chunks: u64, interval_ms: u64) -> Held {
    let req = chat(
        addr,
        0,
        true,
        &[
            ("x-fake-chunks", chunks),
            ("x-fake-chunk-interval-ms", interval_ms),
        ],
    );
    let res = bounded(STEP, "a stream's head", client.request(req))
        .await
        .expect("stream");
    Held {
        status: res.status().as_u16(),
        body: res.into_body(),
    }
}

/// One short request for key 0 through `addr`: (status, gateway code).
async fn probe(client: &HttpClient, addr: SocketAddr) -> (u16, u32) {
    let errors = Mutex::new(Vec::new());
    let r = call(client, addr, 0, 0, Shape::plain(0), Wall::new(), &errors).await;
    assert!(r.status != 0, "probe: {:?}", errors.lock().unwrap());
    (r.status, r.code)
}

/// T5, C4, D5: a gateway *process* (the `proxy` example, on Redis, lease TTL 3 s,
/// renewal every 1 s) holds both slots of a concurrency-2 key with two long streams and
/// is SIGKILLed. Through a second instance (in-process, same Redis) the key is refused
/// (42901) until its leases expire — at least TTL − one renewal period after the kill,
/// allowing 0.5 s for timer lateness — and admitted within TTL + 1 s of the kill.
#[test]
fn t5_sigkilled_instance_slots_are_reclaimed_within_the_lease_ttl() {
    serial(async {
        let redis = RedisServer::start();
        let fake = FakeUpstream::start().await;
        let text = lease_config(&fake, 2);
        let mut p1 = start_proxy_process(&text, &redis.url()).await;
        let g2 = instance(&text, &redis.url(), "gw-survivor", &fake).await;
        let client = http_client();

        let s1 = hold(&client, p1.addr, 200, 100).await;
        let s2 = hold(&client, p1.addr, 200, 100).await;
        assert_eq!((s1.status, s2.status), (200, 200), "the two streams");
        let cred = credential(0);
        let mut both = false;
        for _ in 0..250 {
            if fake.stats().in_flight_per_credential.get(&cred).copied() == Some(2) {
                both = true;
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        assert!(both, "the two streams did not reach the upstream");
        assert_eq!(
            probe(&client, g2.addr).await,
            (429, 42901),
            "the key is full before the kill"
        );
        // Let at least one renewal happen (every TTL/3).
        sleep(Duration::from_millis(1500)).await;

        let killed = Instant::now();
        p1.child.start_kill().expect("SIGKILL the proxy");
        bounded(STEP, "the proxy to die", p1.child.wait())
            .await
            .expect("wait");
        drop((s1, s2));

        let mut last_refused = Duration::ZERO;
        let mut admitted = None;
        // Bounded: TTL + 3 s of polls every 50 ms.
        for _ in 0..((TTL.as_millis() + 3000) / 50) {
            let sent = killed.elapsed();
            match probe(&client, g2.addr).await {
                (429, 42901) => last_refused = sent,
                (200, _) => {
                    admitted = Some(killed.elapsed());
                    break;
                }
                other => panic!("unexpected answer {other:?}"),
            }
            sleep(Duration::from_millis(50)).await;
        }
        let admitted = admitted.expect("the key was not admitted within TTL + 3 s of the kill");
        eprintln!(
            "T5 instance kill: key refused until {:.2} s after the SIGKILL, admitted {:.2} s after it (lease TTL {} s)",
            last_refused.as_secs_f64(),
            admitted.as_secs_f64(),
            TTL.as_secs()
        );
        let earliest = TTL - TTL / 3 - RENEWAL_LATENESS;
        assert!(
            last_refused >= earliest,
            "the dead instance's slots were freed {last_refused:?} after the kill, before TTL − renewal ({earliest:?})"
        );
        assert!(
            admitted <= TTL + ADMIT_SLACK,
            "admitted only {admitted:?} after the kill (TTL {TTL:?} + {ADMIT_SLACK:?})"
        );
        assert!(
            fake.wait_idle(Duration::from_secs(5)).await,
            "the upstream still has calls in flight"
        );
    });
}

/// How soon after a probe admitted while the long stream still runs the stream must
/// end, for that admission to count as the slot freed by the stream's end: the gateway
/// releases the slot when it has sent the last chunk, a few ms (on a loaded host, up to
/// hundreds) before the reader sees the end. A lease lost mid-stream (not renewed, or
/// renewed too late) lapses a TTL after its last renewal, with seconds of the 9 s
/// stream still to come.
const END_GRACE: Duration = Duration::from_secs(1);

/// How soon after the stream's end the other instance must admit the key: the release
/// is sent when the body ends. A release that did not happen would leave the lease to
/// expire, at least TTL − TTL / 3 (2 s, less the renewal's lateness) after the end.
const RELEASE_BOUND: Duration = Duration::from_millis(1500);

/// C4, D5: a stream of ~3 × the lease TTL (30 chunks 300 ms apart, TTL 3 s) through
/// one instance keeps its slot the whole time — the other instance refuses the
/// concurrency-1 key (42901) throughout (a probe admitted in the stream's last moment
/// counts when the stream ends within [`END_GRACE`] of it) — because the lease is
/// renewed while the body streams; once the stream ends the key is admitted again at
/// once (within [`RELEASE_BOUND`]).
#[test]
fn c4_stream_longer_than_the_ttl_keeps_its_slot() {
    serial(async {
        let redis = RedisServer::start();
        let fake = FakeUpstream::start().await;
        let text = lease_config(&fake, 1);
        let a = instance(&text, &redis.url(), "gw-a", &fake).await;
        let b = instance(&text, &redis.url(), "gw-b", &fake).await;
        let client = http_client();

        let started = Instant::now();
        let mut s = hold(&client, a.addr, 30, 300).await;
        assert_eq!(s.status, 200, "the stream");
        let mut reader = tokio::spawn(async move {
            let mut bytes = Vec::new();
            for _ in 0..10_000 {
                match bounded(STEP, "next frame of the long stream", s.body.frame()).await {
                    Some(Ok(f)) => {
                        if let Ok(d) = f.into_data() {
                            bytes.extend_from_slice(&d);
                        }
                    }
                    Some(Err(e)) => panic!("the long stream failed: {e}"),
                    None => break,
                }
            }
            (Instant::now(), String::from_utf8_lossy(&bytes).into_owned())
        });
        let mut probes = 0;
        let mut finished = None;
        // Bounded: at most 15 s of probes every 250 ms.
        for _ in 0..60 {
            if reader.is_finished() {
                break;
            }
            let (status, code) = probe(&client, b.addr).await;
            let at = started.elapsed();
            if reader.is_finished() {
                break;
            }
            if status == 200 {
                // Admitted: only right at the stream's end, when the slot was freed.
                let end = timeout(END_GRACE, &mut reader).await;
                assert!(
                    end.is_ok(),
                    "probe {}, {:.1} s into the stream: the other instance admitted the key \
                     and the stream went on for more than {END_GRACE:?}",
                    probes + 1,
                    at.as_secs_f64()
                );
                finished = end.ok();
                break;
            }
            probes += 1;
            assert_eq!(
                (status, code),
                (429, 42901),
                "probe {probes}, {:.1} s into the stream: the other instance admitted the key",
                at.as_secs_f64()
            );
            sleep(Duration::from_millis(250)).await;
        }
        let (ended, text) = match finished {
            Some(done) => done.expect("reader"),
            None => bounded(Duration::from_secs(20), "the long stream", reader)
                .await
                .expect("reader"),
        };
        let lasted = ended.duration_since(started);
        assert!(
            text.contains("[DONE]"),
            "the stream did not end cleanly: {text}"
        );
        assert!(lasted >= TTL * 2, "the stream lasted only {lasted:?}");
        let mut admitted = None;
        // Bounded: RELEASE_BOUND of probes every 50 ms, at most 100.
        for _ in 0..100 {
            if probe(&client, b.addr).await.0 == 200 {
                admitted = Some(ended.elapsed());
                break;
            }
            if ended.elapsed() > RELEASE_BOUND {
                break;
            }
            sleep(Duration::from_millis(50)).await;
        }
        let admitted =
            admitted.expect("the key was not admitted within RELEASE_BOUND of the stream's end");
        eprintln!(
            "C4: a {:.1} s stream (lease TTL {} s) kept its slot: {probes} probes through the other instance refused; \
             admitted {:.0} ms after the stream ended",
            lasted.as_secs_f64(),
            TTL.as_secs(),
            admitted.as_secs_f64() * 1000.0
        );
    });
}

// ------------------------------------------------------------------ D2

/// A gateway stack over `store` whose layers run on `clock` — the only clock a layer
/// reads (for subscription expiry) — with `/a` behind ErrorMapping → auth → slots →
/// windows, and `/usage/{key}` rendering the store's view of a key as the proxy's
/// `/usage` does (used, limit, `resets_at` per tier; in-flight).
fn skewed_gateway(store: RedisStore, clock: ManualClock, keys: Keys) -> axum::Router {
    use axum::extract::{Path as UrlPath, State};
    let auth = keys.clone();
    let stack = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .layer(FilterLayer::new(move |req| auth.authenticate(req)))
        .layer(ConcurrencySlotLayer::new(store.clone()).clock(clock.clone()))
        .layer(AnchoredWindowLayer::new(store.clone()).clock(clock));
    let usage =
        axum::Router::new()
            .route(
                "/usage/{key}",
                axum::routing::get(
                    |State((store, keys)): State<(RedisStore, Keys)>,
                     UrlPath(key): UrlPath<String>| async move {
                        let subject = SubjectKey::from(key.as_str());
                        let view = store
                            .view(&subject, Scope::Key, &keys.policy(&key))
                            .await
                            .expect("view");
                        let in_flight = store.in_flight(&subject).await.expect("in_flight");
                        axum::Json(json!({
                            "in_flight": in_flight,
                            "limits": view.iter().map(|v| json!({
                                "dimension": v.dimension.as_str(),
                                "window_secs": v.tier.window_ms / 1000,
                                "limit": v.tier.limit,
                                "used": v.used,
                                "resets_at": v.resets_at.map(|ms| ms.div_ceil(1000)),
                            })).collect::<Vec<_>>(),
                        }))
                    },
                ),
            )
            .with_state((store, keys));
    axum::Router::new()
        .route("/a", axum::routing::get(echo))
        .layer(stack)
        .merge(usage)
}

/// D2: two instances whose clocks disagree make the same decisions.
///
/// There is no process clock in the Redis path: every script reads the server's
/// `TIME`. To show it, instance A's layers run on a clock an hour behind and instance
/// B's on a clock a day ahead (`ManualClock`s; the layers' clock is only read for
/// subscription expiry), each with its own `RedisStore`:
///
/// - windows: 8 requests alternating A, B, A, … for a key with 5 requests per minute:
///   exactly the first 5 are admitted, the rest refused 42902 by whichever instance
///   they reach, with Retry-After within 1 s of each other; both `/usage` views are
///   identical — the same `used` and the same `resets_at`;
/// - slots: a 60 s lease taken through A is counted by B (a lease expiry computed on
///   B's clock, a day ahead, would have purged it).
///
/// A control shows the test would catch a store that used instance clocks: two stores
/// deciding on their own clocks an hour apart (`RedisStoreOptions::manual_clock`, a
/// test hook) admit the limit twice over, and purge each other's leases.
///
/// Not covered: subscription expiry *is* decided on each instance's own clock (a
/// subscription ending between two instances' clocks is active on one and expired on
/// the other), and so is `/usage`'s `active` flag; the proxy's `Gateway` has no hook
/// to give its layers another clock, so this test builds the two stacks from the
/// layers, with a `/usage` of its own.
#[test]
fn d2_instances_with_disagreeing_clocks_make_the_same_decisions() {
    serial(async {
        let redis = RedisServer::start();
        let now_ms = Wall::new().us / 1000;
        let policy = Policy::default()
            .with_concurrency(1)
            .with_requests(Tier::per_minute(5))
            .with_tokens(Tier::per_minute(1_000));
        let keys = Keys::new([("skew", policy.clone())]);
        let store = |id: &str| {
            RedisStoreOptions::default()
                .deadline(Duration::from_secs(1))
                .instance_id(id)
        };
        let sa = RedisStore::connect(&redis.url(), store("gw-behind"))
            .await
            .expect("connect");
        let sb = RedisStore::connect(&redis.url(), store("gw-ahead"))
            .await
            .expect("connect");
        let a = serve(skewed_gateway(
            sa.clone(),
            ManualClock::new(now_ms - 3_600_000),
            keys.clone(),
        ))
        .await;
        let b = serve(skewed_gateway(
            sb.clone(),
            ManualClock::new(now_ms + 86_400_000),
            keys.clone(),
        ))
        .await;

        let mut answers = Vec::new();
        for n in 0..8 {
            let addr = if n % 2 == 0 { a.addr } else { b.addr };
            let r = fetch(addr, request("/a").bearer("skew").tokens(10).build()).await;
            let code = if r.status == 200 { 200 } else { r.code() };
            let retry: Option<u64> = r.header("retry-after").and_then(|v| v.parse().ok());
            answers.push((n % 2, code, retry));
        }
        let codes: Vec<u64> = answers.iter().map(|a| a.1).collect();
        assert_eq!(
            codes,
            [200, 200, 200, 200, 200, 42902, 42902, 42902],
            "{answers:?}"
        );
        let retries: Vec<u64> = answers.iter().filter_map(|a| a.2).collect();
        assert_eq!(
            retries.len(),
            3,
            "every refusal has a Retry-After: {answers:?}"
        );
        let spread = retries.iter().max().unwrap() - retries.iter().min().unwrap();
        assert!(
            spread <= 1,
            "Retry-After differs between the instances: {answers:?}"
        );

        let view = |addr: SocketAddr| async move {
            fetch(addr, request("/usage/skew").build()).await.json()
        };
        let (va, vb) = (view(a.addr).await, view(b.addr).await);
        assert_eq!(va, vb, "the two instances' usage views differ");
        let requests = va["limits"]
            .as_array()
            .expect("limits")
            .iter()
            .find(|l| l["dimension"] == "requests")
            .cloned()
            .expect("a requests line");
        assert_eq!(requests["used"], 5, "{va}");
        let resets_at = requests["resets_at"].as_u64().expect("resets_at");
        let wall_s = Wall::new().us / 1_000_000;
        assert!(
            (wall_s..=wall_s + 61).contains(&resets_at),
            "resets_at {resets_at} is not within a minute of the server's time {wall_s}"
        );

        // Slots: a lease through A, counted through B.
        let key = SubjectKey::from("skew-slots");
        let lease = match sa.acquire(&key, 1, 60_000).await.expect("acquire") {
            SlotDecision::Acquired(l) => l,
            full => panic!("{full:?}"),
        };
        assert!(
            matches!(
                sb.acquire(&key, 1, 60_000).await.expect("acquire"),
                SlotDecision::Full { in_flight: 1 }
            ),
            "B did not see A's lease"
        );
        sa.release(&key, lease).await.expect("release");

        // Control: stores that decide on their own clocks, an hour apart, disagree.
        let control = |id: &str, at: u64| {
            RedisStoreOptions::default()
                .prefix("control")
                .deadline(Duration::from_secs(1))
                .instance_id(id)
                .manual_clock(ManualClock::new(at))
        };
        let ca = RedisStore::connect(&redis.url(), control("c-behind", now_ms - 3_600_000))
            .await
            .expect("connect");
        let cb = RedisStore::connect(&redis.url(), control("c-ahead", now_ms))
            .await
            .expect("connect");
        let p = Arc::new(policy);
        let mut admitted = 0;
        for n in 0..10 {
            let s = if n < 5 { &ca } else { &cb };
            let r = s
                .admit(
                    &SubjectKey::from("skew"),
                    Scope::Key,
                    &p,
                    &Demand::tokens(10),
                )
                .await
                .expect("admit");
            if matches!(r, portcullis::core::Admission::Admitted(_)) {
                admitted += 1;
            }
        }
        assert_eq!(
            admitted, 10,
            "control: instance clocks an hour apart should have admitted the limit twice"
        );
        let _ = ca.acquire(&key, 1, 60_000).await.expect("acquire");
        assert!(
            matches!(
                cb.acquire(&key, 1, 60_000).await.expect("acquire"),
                SlotDecision::Acquired(_)
            ),
            "control: the instance an hour ahead should have purged the other's lease"
        );
        eprintln!(
            "D2: clocks 1 h behind and 1 day ahead: 5/8 admitted, same usage view ({}), same resets_at ({resets_at}); \
             control with instance clocks: 10/5 admitted",
            requests
        );
    });
}

/// D4 `local` mode: with Redis down, each instance decides slots and windows in its
/// own memory with every limit divided by `[store] instances`, so an outage degrades
/// limits instead of removing them. Key 0: concurrency 4 and 10 requests per minute
/// over 2 instances → 2 in flight and 5 requests per instance while Redis is down.
#[test]
fn d4_local_mode_keeps_per_instance_limits_while_redis_is_down() {
    serial(async {
        let mut redis = RedisServer::start();
        let fake = FakeUpstream::start().await;
        const KEYS: [KeySpec; 1] = [KeySpec {
            concurrency: 4,
            requests: &[(60, 10)],
            tokens: &[],
        }];
        let head = "[store]\ndeadline = \"20ms\"\nslots_failure = \"local\"\nwindows_failure = \"local\"\ninstances = 2\n";
        let text = config_text(head, &KEYS, "fake://");
        let gw = instance_on(&text, &redis.url(), "gw-local", &fake, |r| Split {
            limits: portcullis::core::store::fallback::LocalFallback::new(r, 2, true, true),
            // Money in this instance's memory, as the `proxy` example keeps it: billing is
            // fail-closed only (B5), so with money in Redis every request would be a 503.
            billing: MemoryStore::new(),
        })
        .await;
        let client = http_client();
        redis.kill();
        // Concurrency: 3 slow requests at once → 2 admitted locally, 1 refused. Each
        // holds its slot for 2 s, far longer than a loaded host takes to send the three
        // 30 ms apart, so they overlap.
        let slow = [("x-fake-latency-ms", 2000)];
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (c, addr) = (client.clone(), gw.addr);
            tasks.push(tokio::spawn(async move {
                let res = tokio::time::timeout(STEP, c.request(chat(addr, 0, false, &slow)))
                    .await
                    .expect("bounded")
                    .expect("answered");
                let status = res.status().as_u16();
                let body = res.into_body().collect().await.expect("body").to_bytes();
                (status, gateway_code(&body))
            }));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let mut got = Vec::new();
        for t in tasks {
            got.push(t.await.expect("task"));
        }
        got.sort();
        assert_eq!(
            got,
            vec![(200, 0), (200, 0), (429, 42901)],
            "2 of 4 slots locally"
        );
        // Windows: 10 per minute over 2 instances → 5 here (2 already used above).
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let res = tokio::time::timeout(STEP, client.request(chat(gw.addr, 0, false, &[])))
                .await
                .expect("bounded")
                .expect("answered");
            let status = res.status().as_u16();
            let body = res.into_body().collect().await.expect("body").to_bytes();
            statuses.push((status, gateway_code(&body)));
        }
        assert_eq!(
            statuses,
            vec![(200, 0), (200, 0), (200, 0), (429, 42902), (429, 42902)],
            "5 requests a minute locally: 2 + 3 admitted, then 42902"
        );
        eprintln!(
            "D4 local: with Redis down, 2/4 slots and 5/10 requests per minute on this instance"
        );
    });
}

/// Q1 across instances: a channel's capacity lives in Redis, so two gateway instances
/// together never send it more than its capacity.
#[test]
fn q1_two_instances_share_one_channel_capacity() {
    serial(async {
        let redis = RedisServer::start();
        let fake = FakeUpstream::start().await;
        const KEYS: [KeySpec; 1] = [KeySpec {
            concurrency: 0,
            requests: &[(3600, 100_000)],
            tokens: &[],
        }];
        // A generous max_wait: 20 requests of 50 ms through 2 leases take about half a
        // second, and this test is about the shared capacity, not the queue's deadline.
        let head = format!("{GENEROUS_DEADLINE}[queue]\nmax_wait = \"20s\"\n");
        let text = config_text(&head, &KEYS, "fake://").replace("capacity = 16", "capacity = 2");
        let a = instance(&text, &redis.url(), "gw-a", &fake).await;
        let b = instance(&text, &redis.url(), "gw-b", &fake).await;
        let client = http_client();
        let mut tasks = Vec::new();
        for i in 0..20 {
            let addr = if i % 2 == 0 { a.addr } else { b.addr };
            let c = client.clone();
            tasks.push(tokio::spawn(async move {
                let res = timeout(
                    STEP * 3,
                    c.request(chat(addr, 0, false, &[("x-fake-latency-ms", 50)])),
                )
                .await
                .expect("bounded")
                .expect("answered");
                let status = res.status().as_u16();
                let _ = res.into_body().collect().await;
                status
            }));
        }
        let mut ok = 0;
        for t in tasks {
            if t.await.expect("task") == 200 {
                ok += 1;
            }
        }
        let stats = fake.stats();
        let peak = stats.max_in_flight_for(&credential(0));
        eprintln!(
            "Q1 shared: {ok}/20 served, channel peak in flight {peak} (capacity 2, two instances)"
        );
        assert_eq!(ok, 20, "everyone fits within max_wait");
        assert!(peak <= 2, "capacity 2 across two instances, saw {peak}");
        assert_eq!(peak, 2, "both leases were used");
    });
}

/// Subscribers of the pub/sub `channel` on `redis` (`PUBSUB NUMSUB`, through
/// `redis-cli`).
fn subscribers(redis: &RedisServer, channel: &str) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "PUBSUB", "NUMSUB", channel])
        .output()
        .expect("redis-cli (it comes with redis-server)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The admin token of the F6 instances (`GET /admin/channels`).
const ADMIN_TOKEN: &str = "admin-token-0123456789";

/// `cooling_until_ms` of channel `name` in `GET /admin/channels` of `addr` (`None` when
/// it is not cooling).
async fn cooling_until(client: &HttpClient, addr: SocketAddr, name: &str) -> Option<u64> {
    let req = hyper::Request::get(format!("http://{addr}/admin/channels"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(Full::default())
        .expect("request");
    let res = bounded(STEP, "GET /admin/channels", client.request(req))
        .await
        .expect("GET /admin/channels");
    assert_eq!(res.status(), 200, "/admin/channels");
    let body = bounded(STEP, "/admin/channels body", res.into_body().collect())
        .await
        .expect("/admin/channels body")
        .to_bytes();
    let v: Value = serde_json::from_slice(&body).expect("/admin/channels JSON");
    v["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["cooling_until_ms"].as_u64())
}

/// F6, D1: a provider's Retry-After seen by one instance holds for every instance —
/// the other instance sends nothing to that channel before it ends.
///
/// The cooldown travels over Redis pub/sub, best effort: the test waits (generously,
/// on the events themselves) until both instances are subscribed, and until the
/// second instance shows the cooldown in `/admin/channels`, before it sends there.
#[test]
fn f6_a_provider_retry_after_seen_by_one_instance_holds_for_all() {
    serial(async {
        let redis = RedisServer::start();
        let fake = FakeUpstream::start().await;
        const KEYS: [KeySpec; 1] = [KeySpec {
            concurrency: 0,
            requests: &[(3600, 100_000)],
            tokens: &[],
        }];
        // Model m-0 on two channels: ch-0 (first pick) and ch-0b.
        let text = config_text(GENEROUS_DEADLINE, &KEYS, "fake://").replace(
            "[server]\n",
            &format!("[server]\nadmin_token = \"{ADMIN_TOKEN}\"\n"),
        ) + "\n[channels.ch-0b]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"cred-0b\"\nmodels = [\"m-0\"]\n";
        fake.set_default_for(
            &credential(0),
            portcullis_fake_upstream::Behavior::error(
                portcullis_fake_upstream::ErrorKind::RateLimit,
            )
            .with_retry_after(30),
        );
        let a = instance(&text, &redis.url(), "gw-a", &fake).await;
        let b = instance(&text, &redis.url(), "gw-b", &fake).await;
        // Both subscriptions up (a change published before would not be replayed).
        let mut subscribed = 0;
        for _ in 0..200 {
            subscribed = subscribers(&redis, "portcullis:cooldowns");
            if subscribed >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(subscribed, 2, "both instances subscribed within 10 s");
        let client = http_client();
        let send = |addr| {
            let c = client.clone();
            async move {
                let res = timeout(STEP, c.request(chat(addr, 0, false, &[])))
                    .await
                    .expect("bounded")
                    .expect("answered");
                let status = res.status().as_u16();
                let _ = res.into_body().collect().await;
                status
            }
        };
        // Instance a: ch-0 answers 429 (Retry-After 30 s), failover serves on ch-0b.
        assert_eq!(send(a.addr).await, 200);
        assert_eq!(fake.stats().calls_for(&credential(0)), 1);
        // The cooldown reached instance b (pub/sub, off the request path).
        let mut cooling = None;
        for _ in 0..200 {
            cooling = cooling_until(&client, b.addr, "ch-0").await;
            if cooling.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            cooling.is_some(),
            "instance b did not learn of ch-0's cooldown within 10 s"
        );
        // Instance b never saw that 429, yet sends nothing to ch-0.
        for _ in 0..6 {
            assert_eq!(send(b.addr).await, 200);
        }
        let s = fake.stats();
        eprintln!(
            "F6 shared: ch-0 calls {}, ch-0b calls {}",
            s.calls_for(&credential(0)),
            s.calls_for("cred-0b")
        );
        assert_eq!(
            s.calls_for(&credential(0)),
            1,
            "instance b re-sent before Retry-After"
        );
        assert_eq!(s.calls_for("cred-0b"), 7);
    });
}

// ------------------------------------------------------------------ T3: calls per request

/// Every layer configured, as in `examples/bench.toml`: a key with a concurrency limit,
/// two request and two token tiers, a tenant balance and budget, a channel with provider
/// RPM + TPM and a capacity.
fn full_stack_config() -> String {
    const KEYS: [KeySpec; 1] = [KeySpec {
        concurrency: 100,
        requests: &[(60, 1_000_000), (86_400, 10_000_000)],
        tokens: &[(60, 100_000_000), (86_400, 1_000_000_000)],
    }];
    config_text("[store]\ndeadline = \"2s\"\n", &KEYS, "fake://")
        .replace(
            "capacity = 16\n",
            "capacity = 16\nlimits = { rpm = 1000000, tpm = 1000000000 }\n",
        )
        .replace(
            "balance = 1_000_000_000_000_000\n",
            "balance = 1_000_000_000_000_000\n\
             budgets = [{ name = \"monthly\", limit = 1_000_000_000_000_000, period = \"30d\" }]\n",
        )
}

/// `INFO <section>` of `redis`, through `redis-cli` (the whole reply; the test
/// harness's own `command` reads one line).
fn info(redis: &RedisServer, section: &str) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "INFO", section])
        .output()
        .expect("redis-cli (it comes with redis-server)");
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

/// `calls` of `command` in an `INFO commandstats` reply (0 when never called).
fn calls(stats: &str, command: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Script calls (`EVALSHA` and `EVAL`) so far.
fn script_calls(redis: &RedisServer) -> u64 {
    let stats = info(redis, "commandstats");
    calls(&stats, "evalsha") + calls(&stats, "eval")
}

/// `n` chat requests for key 0, one after the other, each answered 200 and read to
/// the end.
async fn chat_ok(client: &HttpClient, addr: SocketAddr, n: u64, stream: bool) {
    for _ in 0..n {
        let res = client
            .request(chat(addr, 0, stream, &[]))
            .await
            .expect("request");
        assert_eq!(res.status(), 200);
        let _ = res.into_body().collect().await;
    }
}

/// Keys in the server and keys without an expiry, from `INFO keyspace`.
fn key_counts(redis: &RedisServer) -> (u64, u64) {
    let text = info(redis, "keyspace");
    let field = |name: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.split_once(':').map(|(_, v)| v))
            .flat_map(|v| v.split(','))
            .filter_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .filter_map(|n| n.parse::<u64>().ok())
            .sum()
    };
    let (keys, expires) = (field("keys"), field("expires"));
    (keys, keys - expires)
}

/// Polls `read` every 100 ms until it returns the same value `quiet` apart (nothing
/// happening off the response path any more), at most 15 s; returns that value. Waits
/// on the condition instead of a fixed sleep, so a loaded host only makes it slower.
async fn once_quiet<T: PartialEq + std::fmt::Debug>(
    quiet: Duration,
    mut read: impl FnMut() -> T,
) -> T {
    let mut last = read();
    let mut since = Instant::now();
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = read();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return last;
        }
    }
    panic!("still changing after 15 s: {last:?}")
}

/// D7: what Redis keeps for the full stack does not grow with the requests served —
/// after 50 requests and after 500 more, the same number of keys and of keys without
/// an expiry (balances and spend are the only state kept without one; attempts are
/// deleted once settled, windows and leases expire).
#[test]
fn d7_full_stack_redis_keys_do_not_grow_with_requests_served() {
    serial(async {
        let redis = RedisServer::start();
        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake upstream");
        let gw = instance(&full_stack_config(), &redis.url(), "gw-keys", &fake).await;
        let client = http_client();
        let mut counts = Vec::new();
        for n in [50, 500] {
            chat_ok(&client, gw.addr, n, n == 500).await;
            // Settlements are off the response path, and a billing block (on by
            // default) settles when it retires, 1 s after it was borrowed at most: wait
            // until the server's script calls have been still for 1.5 s.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            once_quiet(Duration::from_millis(1_500), || script_calls(&redis)).await;
            counts.push(key_counts(&redis));
        }
        eprintln!(
            "D7 full stack: (keys, without expiry) after 50: {:?}, after 550: {:?}",
            counts[0], counts[1]
        );
        assert!(counts[0].0 > 0, "the stack keeps state in Redis");
        assert_eq!(counts[1], counts[0], "keys grew with the requests served");
    });
}

/// Script calls (`EVALSHA`) and all commands from the gateway per request of the full
/// stack — concurrency slot, two request and two token tiers, provider RPM + TPM on the
/// channel, channel capacity, failover, a balance and a budget — counted by the server
/// (`INFO commandstats` after `CONFIG RESETSTAT`), sequential requests, non-streaming.
///
/// T3: at most 3 sequential round trips before the request is sent upstream and
/// at most 4 script calls per request with every layer on. The stack makes 3
/// admissions in a row — the slot with the windows (`ConcurrencySlotLayer::join_windows`),
/// the channel's provider windows with a capacity lease on it
/// (`UpstreamLimitLayer::join_capacity`), the billing reservation — and one batch after
/// the answer carrying every settlement and release of the request (and of any other
/// request ending at the same moment). The scripts run before the upstream call are
/// counted while the fake upstream holds a request's answer.
#[test]
fn t3_full_stack_redis_calls_per_request_are_counted_and_bounded() {
    serial(async {
        const REQUESTS: u64 = 200;
        let redis = RedisServer::start();
        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake upstream");
        let gw = instance(&full_stack_config(), &redis.url(), "gw-count", &fake).await;
        let client = http_client();
        // Warm-up: the script cache and the connection.
        chat_ok(&client, gw.addr, 5, false).await;
        // Settlements are off the response path: wait for them before counting.
        once_quiet(Duration::from_millis(300), || script_calls(&redis)).await;
        redis
            .command(&["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");
        chat_ok(&client, gw.addr, REQUESTS, false).await;
        let evalsha = once_quiet(Duration::from_millis(300), || script_calls(&redis)).await;
        let zrem = calls(&info(&redis, "commandstats"), "zrem");
        // Before the upstream call: a request whose answer the fake holds for 5 s,
        // counted once the request has reached the fake (every admission is made by
        // then) and long before its answer (whose batch comes after).
        redis
            .command(&["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");
        let held = {
            let (client, addr) = (client.clone(), gw.addr);
            tokio::spawn(async move {
                let res = client
                    .request(chat(addr, 0, false, &[("x-fake-latency-ms", 5000)]))
                    .await
                    .expect("held request");
                let status = res.status();
                let _ = res.into_body().collect().await;
                status
            })
        };
        let mut reached = false;
        for _ in 0..250 {
            if fake.in_flight() == 1 {
                reached = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            reached,
            "the held request did not reach the upstream within 5 s"
        );
        let before_upstream = script_calls(&redis);
        assert_eq!(held.await.expect("held request"), 200);
        eprintln!("T3 full stack: {before_upstream} script calls before the upstream call");
        assert!(
            (2..=3).contains(&before_upstream),
            "{before_upstream} sequential store calls before the upstream call (T3: at most 3)"
        );
        let per = |n: u64| n as f64 / REQUESTS as f64;
        // ZREM counts the lease releases and the ZREMs that scripts run inside the
        // server alike (commandstats does not tell them apart): printed, not bounded.
        eprintln!(
            "T3 full stack: {:.2} EVALSHA, {:.2} ZREM per request",
            per(evalsha),
            per(zrem)
        );
        assert!(
            evalsha >= 3 * REQUESTS,
            "every layer decided in Redis: {evalsha} scripts"
        );
        // 4 per request by design: every settlement and release of a request in one
        // batch. (A flush timer that outlived its batch used to send the next request's
        // batch half filled: 17 to 21 requests in 100 here, now 0; see batch.rs.) On a
        // loaded host a request's inner and outer guards can still end more than the
        // 1 ms flush delay apart: allowed for 1 request in 50.
        assert!(
            evalsha <= 4 * REQUESTS + REQUESTS / 50,
            "{:.2} script calls per request (T3: at most 4)",
            per(evalsha)
        );
    });
}

/// T3 with quota blocks (`portcullis_core::blocks`): the full stack of
/// [`full_stack_config`] with limits far from exhausted — as `examples/bench.toml` —
/// and billing blocks on decides hot requests from blocks borrowed in Redis: the server
/// counts a small fraction of a script call per request, and the usage view and the
/// instance's in-flight count stay exact.
#[test]
fn t3_quota_blocks_decide_hot_keys_in_a_fraction_of_a_call_per_request() {
    serial(async {
        const REQUESTS: u64 = 600;
        let redis = RedisServer::start();
        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake upstream");
        let text = full_stack_config()
            .replace("[store]\n", "[store]\nmoney_blocks = true\n")
            .replace("concurrency = 100\n", "concurrency = 100000\n")
            .replace("capacity = 16\n", "capacity = 100000\n");
        assert!(text.contains("concurrency = 100000") && text.contains("capacity = 100000"));
        let gw = instance(&text, &redis.url(), "gw-blocks", &fake).await;
        let client = http_client();
        redis
            .command(&["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");
        let started = Instant::now();
        chat_ok(&client, gw.addr, REQUESTS, false).await;
        let elapsed = started.elapsed();
        let evalsha = script_calls(&redis);
        // Without blocks: 4 a request (t3_full_stack_redis_calls_per_request_are_counted_
        // and_bounded). With them: one borrow per block of 256 (or per second: a block
        // serves 1 s at most) for the slot with its windows, the channel and the billing,
        // and their give-backs — so a loaded host, serving the same requests more
        // slowly, borrows more blocks. The bound is a tenth of a call per request, or
        // BLOCK_CALLS_PER_SECOND for every second the requests took, whichever is more;
        // and never more than half a call per request, which a stack deciding every
        // request in Redis (4 a request) exceeds eightfold however long it runs.
        const BLOCK_CALLS_PER_SECOND: u64 = 10;
        let seconds = elapsed.as_millis().div_ceil(1000) as u64 + 1;
        let bound = (REQUESTS / 10).max(BLOCK_CALLS_PER_SECOND * seconds);
        eprintln!(
            "T3 with quota blocks: {:.3} script calls per request ({evalsha} for {REQUESTS} \
             requests in {:.2} s; bound {bound}); load average {}",
            evalsha as f64 / REQUESTS as f64,
            elapsed.as_secs_f64(),
            load_average()
        );
        assert!(
            evalsha <= bound && evalsha <= REQUESTS / 2,
            "{evalsha} script calls for {REQUESTS} requests in {elapsed:?} (bound {bound}, \
             and at most {} whatever the time)",
            REQUESTS / 2
        );
        let v = usage(&client, gw.addr, 0).await;
        assert_eq!(v["in_flight"], json!(0), "{v}");
        let requests: Vec<u64> = v["policies"][0]["limits"]
            .as_array()
            .expect("limits")
            .iter()
            .filter(|l| l["dimension"] == "requests")
            .map(|l| l["used"].as_u64().expect("used"))
            .collect();
        assert_eq!(requests, [REQUESTS, REQUESTS], "{v}");
        // Money from billing blocks: charged, spent and released exactly.
        let money = &v["money"];
        let spent = money["key_spent"].as_i64().expect("key_spent");
        assert!(spent >= REQUESTS as i64, "{v}");
        assert_eq!(
            money["balance"].as_i64().expect("balance") + spent,
            1_000_000_000_000_000,
            "{v}"
        );
        assert_eq!(money["budgets"][0]["spent"].as_i64(), Some(spent), "{v}");
        assert_eq!(money["budgets"][0]["reserved"].as_i64(), Some(0), "{v}");
    });
}

// ------------------------------------------------------------------ T5 on a Cluster

/// Gateways of the Cluster fault runs, keys on each master, client tasks per key.
const CF_GATEWAYS: usize = 3;
const CF_KEYS_PER_MASTER: usize = 2;
const CF_CLIENTS_PER_KEY: usize = 2;
/// What the fake takes for each request of the Cluster fault runs.
const CF_LATENCY_MS: u64 = 5;

/// The 3 s stall of the Cluster runs: three node timeouts, so the Cluster fails the
/// master over.
const CF_STALL: MasterFault = MasterFault::Stall(Duration::from_secs(3));

/// Names whose every Redis key hashes to one master: key `i` (of group
/// `i / CF_KEYS_PER_MASTER`, one group per master) is configured under `labels[i]`
/// (its limits' subject) and served by channel `channels[i]` (its capacity leases);
/// group `g`'s keys belong to tenant `tenants[g]` (its books).
struct Placed {
    masters: Vec<u16>,
    labels: Vec<String>,
    channels: Vec<String>,
    tenants: Vec<String>,
}

impl Placed {
    /// Finds the names by trying candidates until each hashes to its group's master.
    fn find(observer: &RedisStore, nodes: &[portcullis_tests::cluster::NodeInfo]) -> Self {
        let owner = |key: &str| {
            let slot = portcullis_tests::cluster::key_slot(key.as_bytes());
            nodes
                .iter()
                .find(|n| n.role == portcullis_tests::cluster::Role::Master && n.owns(slot))
                .map(|n| n.port)
                .expect("every slot has a master")
        };
        let masters: Vec<u16> = nodes
            .iter()
            .filter(|n| n.role == portcullis_tests::cluster::Role::Master)
            .map(|n| n.port)
            .collect();
        let on = |m: u16, stem: String, key: &dyn Fn(&str) -> String| {
            (0..10_000)
                .map(|n| format!("{stem}{n}"))
                .find(|name| owner(&key(name)) == m)
                .expect("a name on every master")
        };
        let slots = |name: &str| observer.slots_key(&SubjectKey::from(name));
        // A channel's capacity leases live under a subject of its own (the Redis
        // store's key schema, `keys.rs`).
        let capacity =
            |name: &str| observer.slots_key(&SubjectKey::from(format!("\0capacity\0{name}")));
        let tenant = |name: &str| observer.tenant_key(name);
        let (mut labels, mut channels, mut tenants) = (Vec::new(), Vec::new(), Vec::new());
        for (g, &m) in masters.iter().enumerate() {
            tenants.push(on(m, format!("t{g}x"), &tenant));
            for j in 0..CF_KEYS_PER_MASTER {
                labels.push(on(m, format!("k{g}-{j}x"), &slots));
                channels.push(on(m, format!("ch{g}-{j}x"), &capacity));
            }
        }
        Self {
            masters,
            labels,
            channels,
            tenants,
        }
    }

    fn keys(&self) -> usize {
        self.labels.len()
    }

    /// The configuration: every key with a policy far from its limits (1 h tiers, so
    /// that the window counts stay comparable with the provider's calls to the end), its
    /// own model and channel (`capacity = 16`), its group's tenant with a balance that
    /// never runs out — every request is billed in Redis.
    fn config(&self, head: &str) -> String {
        let mut t = format!(
            "{head}\n[server]\nupstream_timeout = \"30s\"\n\n[policies.cf]\nconcurrency = 1000\n\
             requests = [{{ window = \"3600s\", limit = 10000000 }}]\n\
             tokens = [{{ window = \"3600s\", limit = 10000000000 }}]\n"
        );
        for tenant in &self.tenants {
            t.push_str(&format!(
                "\n[tenants.{tenant}]\nbalance = 1_000_000_000_000_000\n"
            ));
        }
        for i in 0..self.keys() {
            t.push_str(&format!(
                "\n[keys.{}]\nkey = \"{}\"\ntenant = \"{}\"\npolicy = \"cf\"\nmodels = [\"{}\"]\n\n\
                 [channels.{}]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"{}\"\n\
                 models = [\"{}\"]\ncapacity = 16\n\n\
                 [models.{}]\nprice = {{ input_per_mtok = 1, output_per_mtok = 1 }}\nmax_output_tokens = 16\n",
                self.labels[i],
                secret(i),
                self.tenants[i / CF_KEYS_PER_MASTER],
                model(i),
                self.channels[i],
                credential(i),
                model(i),
                model(i),
            ));
        }
        t
    }

    /// The group whose names appear in the hash tag of `key`, if any.
    fn group_of(&self, key: &str) -> Option<usize> {
        let tag = key.split_once('{')?.1.split_once('}')?.0;
        let by_key = |i: usize| i / CF_KEYS_PER_MASTER;
        (0..self.keys())
            .find(|&i| tag == self.labels[i] || tag.ends_with(&format!("\0{}", self.channels[i])))
            .map(by_key)
            .or_else(|| {
                self.tenants
                    .iter()
                    .position(|t| tag == format!("tenant:{t}"))
            })
    }
}

/// The `used` of key `i`'s 1 h request tier, as instance `addr` reports it.
async fn requests_used(client: &HttpClient, addr: SocketAddr, i: usize) -> u64 {
    let v = usage(client, addr, i).await;
    v["policies"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["limits"].as_array().into_iter().flatten())
        .find(|l| l["dimension"] == "requests" && l["window_secs"] == 3600)
        .and_then(|l| l["used"].as_u64())
        .unwrap_or_else(|| panic!("no 1 h request tier in /usage of key {i}: {v}"))
}

/// T5, D9, D11 through the gateway: three gateway instances on a 3-master Redis
/// Cluster (`cluster-require-full-coverage no`, as the operations guide says), every
/// layer on with quota and billing blocks (the defaults), `replica_acks = 1`, the
/// default 20 ms deadline; two keys per master, each with its own channel and its
/// group's tenant, all their Redis keys on that master (checked from the keys Redis
/// holds at the end); billed requests from two clients per key, alternating the
/// gateways. `fault` hits group 0's master. Then:
///
/// - the keys on the other masters are never refused (nor any request unanswered);
/// - group 0's requests answer 200 again, and none is refused, from 1 s after the
///   Cluster is ok again (every node `cluster_state:ok`, the shard's master with its
///   replicas online);
/// - nothing is held once the load stops (in-flight 0 on every instance, the fake
///   idle), and no request-window unit is counted for a request that never reached the
///   provider: on the healthy masters the 1 h request counts equal the provider's calls
///   exactly; on the faulted one they are at most that (a window that failed open
///   while its shard was away admitted without counting).
fn cluster_fault_through_three_gateways(fault: MasterFault, replicas: usize) {
    // What the gateways log (each test its own process under nextest): a failing run
    // shows the store's lines — which node was down, whose replicas did not
    // acknowledge — beside the refusals.
    let lines = portcullis_test_support::logs::capture();
    serial(async move {
        let c = Arc::new(Mutex::new(portcullis_tests::cluster::RedisCluster::start(
            3, replicas,
        )));
        let lock = || c.lock().unwrap_or_else(|p| p.into_inner());
        let (url, nodes, ports) = {
            let c = lock();
            for p in c.ports() {
                c.cli(p, &["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
            }
            (c.comma_urls(), c.nodes(), c.ports())
        };
        let head = "[store]\nreplica_acks = 1\n";
        let bare = Config::parse(head).expect("the store section");
        let observer = RedisStore::connect(
            &url,
            portcullis_proxy::store::redis_options(bare.store()).deadline(Duration::from_secs(2)),
        )
        .await
        .expect("observer");
        let placed = Placed::find(&observer, &nodes);
        let probe_slot = portcullis_tests::cluster::key_slot(
            observer
                .slots_key(&SubjectKey::from(placed.labels[0].as_str()))
                .as_bytes(),
        );
        // Every shard ok before the load, its replicas acknowledging writes: a replica
        // still in its first sync, or linked up a moment ago, acknowledges nothing, and
        // that is not the run (the gateways' start waits for it, but only so long).
        for g in 0..placed.masters.len() {
            let label = placed.labels[g * CF_KEYS_PER_MASTER].as_str();
            let slot = portcullis_tests::cluster::key_slot(
                observer.slots_key(&SubjectKey::from(label)).as_bytes(),
            );
            let ports = ports.clone();
            tokio::task::spawn_blocking(move || {
                let limit = Duration::from_secs(15);
                let master = portcullis_tests::cluster::ok_again(&ports, slot, limit);
                portcullis_tests::cluster::acknowledging(master, slot, 1, limit);
            })
            .await
            .expect("every shard ok before the load");
        }

        let fake = FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .expect("fake upstream");
        let text = placed.config(head);
        let mut instances = Vec::new();
        for n in 0..CF_GATEWAYS {
            instances.push(instance(&text, &url, &format!("gw-{n}"), &fake).await);
        }
        let addrs: Vec<SocketAddr> = instances.iter().map(|i| i.addr).collect();
        let client = http_client();
        let wall = Wall::new();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let served: Arc<Vec<AtomicU64>> =
            Arc::new((0..placed.keys()).map(|_| AtomicU64::new(0)).collect());
        let mut tasks = Vec::new();
        for i in 0..placed.keys() {
            for t in 0..CF_CLIENTS_PER_KEY {
                let (client, stop, errors, served, addrs) = (
                    client.clone(),
                    stop.clone(),
                    errors.clone(),
                    served.clone(),
                    addrs.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    let begun = Instant::now();
                    let mut recs = Vec::new();
                    // Bounded: the test stops it within seconds; the count and the
                    // minute are backstops.
                    for n in 0..200_000usize {
                        if stop.load(Ordering::Relaxed) || begun.elapsed() > Duration::from_secs(60)
                        {
                            break;
                        }
                        let inst = (n + t) % CF_GATEWAYS;
                        let shape = Shape::plain(CF_LATENCY_MS);
                        let r = call(&client, addrs[inst], inst, i, shape, wall, &errors).await;
                        if r.status == 200 {
                            served[i].fetch_add(1, Ordering::Relaxed);
                        } else {
                            // A client refused comes back a little later.
                            sleep(Duration::from_millis(5)).await;
                        }
                        recs.push(r);
                    }
                    recs
                }));
            }
        }
        // Load on every master until each key was served 20 times.
        let loaded = Instant::now();
        while served.iter().any(|s| s.load(Ordering::Relaxed) < 20) {
            assert!(
                loaded.elapsed() < Duration::from_secs(20),
                "the load did not start: {:?} {:?}",
                served,
                errors.lock().unwrap()
            );
            sleep(Duration::from_millis(20)).await;
        }
        let victim = placed.masters[0];
        let fault_at = wall.us(Instant::now());
        let live: Vec<u16> = {
            let c = c.clone();
            tokio::task::spawn_blocking(move || {
                c.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .fault(victim, fault)
            })
            .await
            .expect("the fault")
        };
        // Ok again: the Cluster ok, the shard's master with its replicas online and
        // acknowledging writes — before that, D10 refuses its admissions whatever the
        // gateway does (a replica acknowledges some 0.3–0.5 s after it shows `online`,
        // on a busy host over 1 s).
        let (new_master, online_at) = tokio::task::spawn_blocking(move || {
            let master =
                portcullis_tests::cluster::ok_again(&live, probe_slot, Duration::from_secs(20));
            let online_at = wall.us(Instant::now());
            portcullis_tests::cluster::acknowledging(
                master,
                probe_slot,
                1,
                Duration::from_secs(15),
            );
            (master, online_at)
        })
        .await
        .expect("the Cluster ok again");
        let ok_at = wall.us(Instant::now());
        let resume = ok_at + RESUME_BOUND.as_micros() as u64;
        sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        let mut recs = Vec::new();
        for t in tasks {
            recs.extend(bounded(STEP * 2, "a load client", t).await.expect("client"));
        }

        let group = |r: &Rec| r.key / CF_KEYS_PER_MASTER;
        let ms = |us: u64| (us as f64 - fault_at as f64) / 1000.0;
        let refused = |g0: bool| -> Vec<(f64, usize, u16, u32)> {
            recs.iter()
                .filter(|r| r.status != 200 && (group(r) == 0) == g0)
                .map(|r| (ms(r.sent), r.key, r.status, r.code))
                .collect()
        };
        let (healthy, shard) = (refused(false), refused(true));
        let late: Vec<_> = recs
            .iter()
            .filter(|r| group(r) == 0 && r.status != 200 && r.sent > resume)
            .map(|r| (ms(r.sent), r.key, r.status, r.code))
            .collect();
        let after_resume = recs
            .iter()
            .filter(|r| group(r) == 0 && r.status == 200 && r.sent > resume)
            .count();
        let warnings = || {
            let text = lines.text();
            let warned: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
            warned[warned.len().saturating_sub(40)..].join("\n")
        };
        eprintln!(
            "{fault:?}: {} requests; master {victim} -> {new_master}; Cluster ok {:.0} ms \
             after the fault, its replicas acknowledging {:.0} ms after; faulted shard: {} \
             refused (last sent at {:?} ms), {after_resume} served after ok + 1 s; healthy \
             shards: {} refused; load {}",
            recs.len(),
            ms(online_at),
            ms(ok_at),
            shard.len(),
            shard.last().map(|s| s.0),
            healthy.len(),
            load_average(),
        );
        assert!(
            healthy.is_empty(),
            "{fault:?}: requests on healthy masters refused (ms after the fault, key, \
             status, code): {healthy:?} {:?}\nthe gateways' warnings:\n{}",
            errors.lock().unwrap(),
            warnings()
        );
        assert!(
            late.is_empty(),
            "{fault:?}: refused later than 1 s after the Cluster was ok again (at {:.0} ms): \
             {late:?}\nthe gateways' warnings:\n{}",
            ms(ok_at),
            warnings()
        );
        assert!(
            after_resume > 0,
            "{fault:?}: group 0 served nothing after it resumed"
        );
        assert!(
            shard.iter().all(|&(_, _, status, _)| status == 503),
            "{fault:?}: the faulted shard's refusals are 503s: {shard:?}"
        );

        // Nothing held, and no window unit for a request that never reached the provider.
        let all: Vec<&Instance> = instances.iter().collect();
        in_flight_returns_to_zero(&client, &all, placed.keys(), &fake, Duration::from_secs(10))
            .await;
        let stats = fake.stats();
        let start = Instant::now();
        loop {
            let mut off = Vec::new();
            for i in 0..placed.keys() {
                let calls = stats.calls_for(&credential(i));
                let used = requests_used(&client, addrs[0], i).await;
                let healthy = i / CF_KEYS_PER_MASTER != 0;
                if used > calls || (healthy && used != calls) {
                    // The admissions Redis still holds unsettled (D9's records: member
                    // `<instance>:<call>`, at ms since the fault), for the diagnosis.
                    let subject = SubjectKey::from(placed.labels[i].as_str());
                    let adm = format!("{}:adm", observer.window_key(&subject, Scope::Key));
                    let seed = lock().master_ports()[0];
                    let records =
                        lock().cli_cluster(seed, &["ZRANGE", &adm, "0", "-1", "WITHSCORES"]);
                    let records: Vec<String> = records
                        .lines()
                        .collect::<Vec<_>>()
                        .chunks(2)
                        .map(|m| match m {
                            [member, at] => format!(
                                "{member} at {:.0} ms",
                                at.parse::<f64>().unwrap_or(0.0) - fault_at as f64 / 1000.0
                            ),
                            other => format!("{other:?}"),
                        })
                        .collect();
                    off.push(format!(
                        "key {i}: {used} counted, {calls} reached the provider; \
                         records left {records:?}"
                    ));
                }
            }
            if off.is_empty() {
                break;
            }
            // Blocks are given back within 1 s of their borrowing; a give-back that
            // failed with its shard is sent again.
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{fault:?}: request windows counted what never reached the provider: {off:?}"
            );
            sleep(Duration::from_millis(100)).await;
        }

        // The premise: every key Redis holds for a group lives on that group's master.
        let owner_at_start = |slot: u16| {
            nodes
                .iter()
                .find(|n| n.role == portcullis_tests::cluster::Role::Master && n.owns(slot))
                .map(|n| n.port)
                .expect("an owner")
        };
        let c = lock();
        let mut misplaced = Vec::new();
        for p in c.ports().into_iter().filter(|&p| c.pid(p).is_some()) {
            if !c.cli(p, &["ROLE"]).starts_with("master") {
                continue;
            }
            for key in c.cli(p, &["KEYS", "*"]).lines() {
                let Some(g) = placed.group_of(key) else {
                    continue;
                };
                let at = owner_at_start(portcullis_tests::cluster::key_slot(key.as_bytes()));
                if at != placed.masters[g] {
                    misplaced.push(format!("{key:?} (group {g}) on {at}"));
                }
            }
        }
        assert!(
            misplaced.is_empty(),
            "keys off their group's master: {misplaced:?}"
        );
    });
}

/// [`cluster_fault_through_three_gateways`] with `CLUSTER FAILOVER FORCE` (3 masters × 1
/// replica).
#[test]
fn t5_a_forced_failover_through_three_gateways_refuses_only_its_shard_and_resumes_within_a_second()
{
    cluster_fault_through_three_gateways(MasterFault::ForcedFailover, 1);
}

/// [`cluster_fault_through_three_gateways`] with the master killed (3 masters × 2
/// replicas, so the promoted one still has a replica to acknowledge).
#[test]
fn t5_a_killed_master_through_three_gateways_refuses_only_its_shard_and_resumes_within_a_second() {
    cluster_fault_through_three_gateways(MasterFault::Kill, 2);
}

/// [`cluster_fault_through_three_gateways`] with the master stalled 3 s (3 masters × 1
/// replica; failed over, it comes back as a replica). Before quota blocks handed their
/// requests in flight over with a record each, this run left 1–3 request units counted
/// on the stalled shard's keys in most runs: the refunds of those requests, made while
/// the shard was away, were corrections without a record, never sent again.
#[test]
fn t5_a_stalled_master_through_three_gateways_refuses_only_its_shard_and_resumes_within_a_second() {
    cluster_fault_through_three_gateways(CF_STALL, 1);
}

/// D10 at start: a gateway whose `replica_acks` its Redis cannot meet yet — the replica
/// does not acknowledge (frozen here; a replica linked up a moment ago does not for
/// some 0.3–0.5 s, which is how a Cluster run failed at its start) — does not fail to
/// start: its seeding writes are tried again, and it starts once the replica
/// acknowledges. (Before, the first shortfall failed the start: "seeding the balance of
/// tenant …: … 0 of 1 replicas acknowledged the write".)
#[test]
fn d10_a_gateway_started_before_its_replicas_acknowledge_starts_once_they_do() {
    serial(async {
        let master = RedisServer::start();
        let mut replica = RedisServer::start();
        let port = master.port();
        master
            .command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
            .expect("CONFIG SET");
        replica
            .command(&["REPLICAOF", "127.0.0.1", &port.to_string()])
            .expect("REPLICAOF");
        tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            while portcullis_tests::cluster::acknowledged(port, "probe", 1, 100) != Ok(1) {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "the replica never acknowledged a write"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .await
        .expect("the replica acknowledges");
        replica.freeze();
        let text = "[store]\nreplica_acks = 1\n\n[tenants.acme]\nbalance = 1_000\n";
        let config = Config::parse(text).expect("config");
        let store = redis_store(&config, &master.url(), "gw-start");
        let observer = store.clone();
        let started = Instant::now();
        let building = tokio::spawn(Gateway::new(config, store).build());
        let frozen_for = Duration::from_millis(800);
        sleep(frozen_for).await;
        assert!(
            !building.is_finished(),
            "the start waits while the replica does not acknowledge: {:?}",
            timeout(Duration::from_secs(1), building)
                .await
                .map(|r| r.map(|app| app.err()))
        );
        replica.thaw();
        let built = timeout(Duration::from_secs(15), building)
            .await
            .expect("the start ends (10 s of retries at most)")
            .expect("the start's task");
        assert!(built.is_ok(), "the gateway started: {:?}", built.err());
        assert!(started.elapsed() >= frozen_for);
        let account = observer
            .account(Some("acme"), &SubjectKey::from("k"), &[])
            .await
            .expect("the account");
        assert_eq!(account.balance, Some(1_000), "the balance was seeded");
    });
}
