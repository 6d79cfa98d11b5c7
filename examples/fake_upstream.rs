//! The bundled fake model provider (P5), on its own.
//!
//! ```text
//! cargo run -p portcullis-examples --example fake_upstream -- --port 9100
//! curl -s localhost:9100/v1/chat/completions -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
//! curl -sN localhost:9100/v1/messages -H 'x-fake-chunk-interval-ms: 200' \
//!      -d '{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
//! curl -si localhost:9100/v1/messages -H 'x-fake-error: overloaded_error' -d '{}'
//! ```
//!
//! Listens on 127.0.0.1 only (default port 9100). Stops on Ctrl-C.
#![deny(unreachable_pub)]

use std::net::{Ipv4Addr, SocketAddr};

use portcullis_fake_upstream::{FakeUpstream, behavior};

fn usage() -> ! {
    eprintln!("usage: fake_upstream [--port PORT]   (binds 127.0.0.1, default port 9100)");
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let mut port: u16 = 9100;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" | "-p" => {
                port = args
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--help" | "-h" => usage(),
            _ => usage(),
        }
    }

    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let fake = match FakeUpstream::start_on(addr).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fake upstream: cannot listen on {addr}: {e}");
            std::process::exit(1)
        }
    };
    let base = fake.base_url();
    println!("fake upstream listening on {base}");
    println!();
    println!("routes:");
    println!(
        "  POST {base}/v1/chat/completions                          OpenAI (\"stream\": true → SSE)"
    );
    println!(
        "  GET  {base}/v1/models                                    OpenAI (Anthropic shape with anthropic-version)"
    );
    println!(
        "  POST {base}/v1/messages                                  Anthropic (\"stream\": true → SSE)"
    );
    println!("  POST {base}/v1beta/models/MODEL:generateContent          Gemini");
    println!("  POST {base}/v1beta/models/MODEL:streamGenerateContent?alt=sse   Gemini stream");
    println!("  GET  {base}/v1beta/models                                Gemini");
    println!();
    println!("control headers:");
    for h in [
        behavior::H_LATENCY_MS,
        behavior::H_TTFB_MS,
        behavior::H_CHUNK_INTERVAL_MS,
        behavior::H_STATUS,
        behavior::H_ERROR,
        behavior::H_RETRY_AFTER,
        behavior::H_FAIL_AFTER_CHUNKS,
        behavior::H_CUT,
        behavior::H_HANG,
        behavior::H_CHUNKS,
        behavior::H_INPUT_TOKENS,
        behavior::H_OUTPUT_TOKENS,
        behavior::H_CACHED_TOKENS,
        behavior::H_CACHE_CREATION_TOKENS,
        behavior::H_RL_LIMIT_REQUESTS,
        behavior::H_RL_REMAINING_REQUESTS,
        behavior::H_RL_LIMIT_TOKENS,
        behavior::H_RL_REMAINING_TOKENS,
        behavior::H_RL_RESET_MS,
    ] {
        println!("  {h}");
    }
    println!(
        "  x-fake-error names: rate_limit_exceeded slow_down insufficient_quota server_is_overloaded \
         rate_limit_error overloaded_error enforced_spend_limit_reached invalid_request_error \
         RESOURCE_EXHAUSTED UNAVAILABLE invalid_api_key server_error bad_gateway timeout"
    );

    let _ = tokio::signal::ctrl_c().await;
    let s = fake.stats();
    println!(
        "\nserved {} calls (max {} in flight at once); shutting down",
        s.total_calls, s.max_in_flight
    );
    fake.shutdown().await;
}
