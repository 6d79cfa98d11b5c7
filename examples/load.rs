//! A small load generator: N requests at fixed concurrency against a gateway, then
//! requests/s and latency percentiles; or, with `--rate R`, N requests started on a
//! fixed schedule of R per second (open loop, up to `--concurrency` at once), whose
//! latency is measured from each request's scheduled start, so a target that falls
//! behind shows it in its percentiles instead of hiding it (no coordinated omission).
//!
//! ```sh
//! cargo run --release -p portcullis-examples --example load -- \
//!     --url http://127.0.0.1:8080/v1/chat/completions --key sk-demo-pro \
//!     --requests 20000 --concurrency 32 [--stream] [--rate 5000]
//! ```
//!
//! Every request is an OpenAI chat completion for `gpt-4o-mini` (the demo model); the
//! loop is bounded by `--requests` and by `--seconds` (default 120), whichever ends
//! first. Only loopback targets are accepted.
#![deny(unreachable_pub)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Args {
    url: String,
    key: String,
    requests: u64,
    concurrency: usize,
    stream: bool,
    seconds: u64,
    /// Requests per second on a fixed schedule; `None` = as fast as `concurrency` allows.
    rate: Option<f64>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: "http://127.0.0.1:8080/v1/chat/completions".into(),
        key: "sk-demo-pro".into(),
        requests: 10_000,
        concurrency: 32,
        stream: false,
        seconds: 120,
        rate: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut v = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = v()?,
            "--key" => a.key = v()?,
            "--requests" => a.requests = v()?.parse().map_err(|e| format!("--requests: {e}"))?,
            "--concurrency" => {
                a.concurrency = v()?.parse().map_err(|e| format!("--concurrency: {e}"))?
            }
            "--seconds" => a.seconds = v()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--stream" => a.stream = true,
            "--rate" => {
                let r: f64 = v()?.parse().map_err(|e| format!("--rate: {e}"))?;
                if !(r.is_finite() && r > 0.0) {
                    return Err("--rate must be a positive number".into());
                }
                a.rate = Some(r);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let host = a.url.split("://").nth(1).unwrap_or_default();
    if !(host.starts_with("127.") || host.starts_with("localhost") || host.starts_with("[::1]")) {
        return Err("only loopback targets are allowed".into());
    }
    Ok(a)
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(a.concurrency)
        .build_http();
    let body = Bytes::from(format!(
        r#"{{"model":"gpt-4o-mini","stream":{},"max_tokens":16,"messages":[{{"role":"user","content":"Say hello in five words."}}]}}"#,
        a.stream
    ));
    let next = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency {
        let (a, client, body, next) = (a.clone(), client.clone(), body.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut statuses = BTreeMap::<u16, u64>::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= a.requests || Instant::now() >= deadline {
                    break;
                }
                // Open loop: request i starts at its slot of the schedule.
                let scheduled = a
                    .rate
                    .map(|r| started + Duration::from_secs_f64(i as f64 / r));
                if let Some(at) = scheduled {
                    tokio::time::sleep_until(at.into()).await;
                }
                let req = hyper::Request::post(&a.url)
                    .header("authorization", format!("Bearer {}", a.key))
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .expect("request");
                let t = scheduled.unwrap_or_else(Instant::now);
                let status = match client.request(req).await {
                    Ok(res) => {
                        let s = res.status().as_u16();
                        let _ = res.into_body().collect().await;
                        s
                    }
                    Err(_) => 0,
                };
                lat.push(t.elapsed());
                *statuses.entry(status).or_default() += 1;
            }
            (lat, statuses)
        }));
    }
    let mut lat = Vec::new();
    let mut statuses = BTreeMap::<u16, u64>::new();
    for t in tasks {
        let (l, s) = t.await.expect("load task");
        lat.extend(l);
        for (k, v) in s {
            *statuses.entry(k).or_default() += v;
        }
    }
    let elapsed = started.elapsed();
    lat.sort();
    let pct = |p: f64| lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)));
    println!(
        "requests={} seconds={:.2} rps={:.0} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} statuses={:?}",
        lat.len(),
        elapsed.as_secs_f64(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50).map_or(0.0, |d| d.as_secs_f64() * 1e3),
        pct(0.99).map_or(0.0, |d| d.as_secs_f64() * 1e3),
        lat.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        statuses
    );
}
