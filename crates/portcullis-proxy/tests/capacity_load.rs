//! Load through the proxy (Q1–Q4): 10,000 requests from
//! three tenants of weights 1:2:4 through the gateway to the fake upstream, over three
//! channels of capacity 2, 3 and 4 (each with its own credential and generous provider
//! limits, so the upstream limit layer runs too), with random upstream latencies,
//! streamed answers, clients that give up while queued and clients that hang up
//! mid-stream.
//!
//! The fake upstream counts in-flight requests per credential: the maximum must never
//! exceed the channel's capacity, and afterwards nothing is in flight — neither at the
//! upstream nor in the gateway's capacity leases. Queue-wait percentiles and
//! per-tenant admissions are printed
//! (`cargo test -p portcullis-proxy --test capacity_load -- --nocapture`).

mod common;

use common::*;
use portcullis::core::CapacityStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const REQUESTS: usize = 10_000;
const CLIENTS_PER_TENANT: usize = 8;
const CHANNELS: [(&str, &str, u32); 3] = [
    ("c1", "cred-c1", 2),
    ("c2", "cred-c2", 3),
    ("c3", "cred-c3", 4),
];
const TENANTS: [(&str, u32); 3] = [("t1", 1), ("t2", 2), ("t4", 4)];

fn config() -> String {
    let mut s = String::from("[queue]\nmax_wait = \"10s\"\n\n[policies.open]\n\n");
    for (t, w) in TENANTS {
        s += &format!("[tenants.{t}]\nbalance = 1_000_000_000_000\nweight = {w}\n\n");
        s += &format!("[keys.{t}]\nkey = \"sk-{t}\"\npolicy = \"open\"\ntenant = \"{t}\"\n\n");
    }
    for (name, cred, cap) in CHANNELS {
        s += &format!(
            "[channels.{name}]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"{cred}\"\nmodels = [\"gpt-4o-mini\"]\ncapacity = {cap}\nlimits = {{ rpm = 1_000_000, tpm = 1_000_000_000 }}\n\n"
        );
    }
    s += "[models.gpt-4o-mini]\nprice = { input_per_mtok = 1, output_per_mtok = 1 }\nmax_output_tokens = 16\n";
    s
}

/// xorshift64*: enough randomness for a load shape, no dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

#[derive(Default)]
struct Tally {
    ok: usize,
    busy: usize,
    gave_up: usize,
    hung_up: usize,
    waits: Vec<u64>,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_load_through_the_proxy_never_exceeds_channel_capacity_and_releases_everything() {
    let started = Instant::now();
    let p = Proxy::start(&config()).await;
    let issued = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for (ti, (tenant, _)) in TENANTS.iter().enumerate() {
        for c in 0..CLIENTS_PER_TENANT {
            let (addr, issued) = (p.addr, issued.clone());
            let key = format!("sk-{tenant}");
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((ti * 100 + c + 1) as u64 * 0x1234_5677));
            clients.push(tokio::spawn(async move {
                let mut t = Tally::default();
                // Bounded in count (REQUESTS in all) and in time (the test's own bound).
                while issued.fetch_add(1, Ordering::SeqCst) < REQUESTS {
                    let stream = rng.below(2) == 0;
                    let req = ask(Dialect::OpenAi, &key, stream)
                        .header("x-fake-latency-ms", rng.below(4))
                        .header("x-fake-chunks", 1 + rng.below(3))
                        .header("x-fake-chunk-interval-ms", rng.below(3));
                    let fate = rng.below(100);
                    if fate < 4 {
                        // Gives up early, usually while queued.
                        let wait = Duration::from_micros(rng.below(3_000));
                        if let Ok(o) = tokio::time::timeout(wait, open(addr, &req)).await {
                            o.disconnect();
                        }
                        t.gave_up += 1;
                        continue;
                    }
                    let mut o = open(addr, &req).await;
                    match o.status.as_u16() {
                        200 => {}
                        429 => {
                            t.busy += 1;
                            o.rest().await;
                            continue;
                        }
                        s => panic!("unexpected status {s}"),
                    }
                    if let Some(q) = o.headers.get("x-portcullis-queued-ms") {
                        t.waits.push(q.to_str().unwrap().parse().unwrap());
                    }
                    if fate < 8 && stream {
                        // Hangs up after the first chunk.
                        o.next_data().await;
                        o.disconnect();
                        t.hung_up += 1;
                        continue;
                    }
                    o.rest().await;
                    t.ok += 1;
                }
                t
            }));
        }
    }
    let mut all = Tally::default();
    let mut per_tenant = [0usize; 3];
    for (i, c) in clients.into_iter().enumerate() {
        let t = bounded(Duration::from_secs(240), "a load client", c)
            .await
            .unwrap();
        per_tenant[i / CLIENTS_PER_TENANT] += t.ok + t.hung_up;
        all.ok += t.ok;
        all.busy += t.busy;
        all.gave_up += t.gave_up;
        all.hung_up += t.hung_up;
        all.waits.extend(t.waits);
    }
    // Everything drains: no request in flight at the upstream, no capacity lease held.
    let drained = eventually(Duration::from_secs(5), || async { p.fake.in_flight() == 0 }).await;
    assert!(drained, "upstream in flight: {}", p.fake.in_flight());
    for (name, _, _) in CHANNELS {
        let store = p.store.clone();
        let owned = name.to_owned();
        let released = eventually(Duration::from_secs(5), move || {
            let (store, name) = (store.clone(), owned.clone());
            async move { store.in_flight(&name).await.unwrap() == 0 }
        })
        .await;
        assert!(released, "channel {name} still holds leases");
    }
    let stats = p.fake.stats();
    for (name, cred, cap) in CHANNELS {
        let max = stats.max_in_flight_for(cred);
        println!(
            "channel {name}: capacity {cap}, max in flight at the upstream {max}, calls {}",
            stats.calls_for(cred)
        );
        assert!(
            max <= u64::from(cap),
            "{name}: {max} in flight > capacity {cap}"
        );
        assert!(max > 0, "{name} was never used");
    }
    all.waits.sort_unstable();
    let admitted: usize = per_tenant.iter().sum();
    println!(
        "{REQUESTS} requests in {:?}: {} complete, {} hung up mid-stream, {} gave up early, {} refused busy",
        started.elapsed(),
        all.ok,
        all.hung_up,
        all.gave_up,
        all.busy
    );
    println!(
        "queue wait of admitted requests that waited ({}): p50 {} ms, p99 {} ms, max {} ms",
        all.waits.len(),
        percentile(&all.waits, 0.5),
        percentile(&all.waits, 0.99),
        percentile(&all.waits, 1.0)
    );
    for (i, (t, w)) in TENANTS.iter().enumerate() {
        println!(
            "tenant {t} (weight {w}): {} admitted ({:.1} %)",
            per_tenant[i],
            100.0 * per_tenant[i] as f64 / admitted.max(1) as f64
        );
    }
    assert_eq!(all.ok + all.hung_up + all.gave_up + all.busy, REQUESTS);
    assert!(all.ok > REQUESTS / 2, "most requests complete: {}", all.ok);
    assert!(
        !all.waits.is_empty(),
        "the load never queued: it proves nothing"
    );
}
