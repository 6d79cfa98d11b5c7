//! A client that stops reading releases what its request holds (L3): through real
//! sockets, a client that reads the head and the first chunk of a long stream and
//! then reads nothing (socket open, small receive buffer, the gateway's send buffer
//! small too) has its concurrency slot back within `stall_timeout`; the partial
//! attempt is charged what the gateway saw streamed (B7: not zero, not lost, not held)
//! and the connection
//! is closed without the rest of the answer. A response read steadily is cut at
//! `max_response_lifetime` the same way. Over HTTP/2 the stalled stream releases
//! the same, and its connection is then closed by the idle timeout.

mod common;

use common::*;
use portcullis::core::MemoryStore;
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::serve::{ServeOptions, serve_with};
use portcullis_proxy::{Config, Gateway};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Socket buffers small enough that a client that stops reading is seen within a few
/// hundred frames.
const SMALL_BUFFER: u32 = 8 * 1024;

/// A fake upstream and the gateway served by `serve_with` on a listener whose accepted
/// sockets have a small send buffer; `server` is the `[server]` section's body.
struct Served {
    addr: SocketAddr,
    fake: FakeUpstream,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn start(server: &str) -> Served {
    let text = format!(
        "[server]\n{server}\n\
         [policies.one]\nconcurrency = 1\n\
         [tenants.t]\nbalance = 1_000_000_000\n\
         [keys.a]\nkey = \"sk-a\"\ntenant = \"t\"\npolicy = \"one\"\n{CHANNELS}"
    );
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("test config: {e}"));
    let options = ServeOptions::from(config.server());
    let fake = FakeUpstream::start().await;
    let app = Gateway::new(config, MemoryStore::new())
        .fake_upstream(fake.base_url())
        .router()
        .unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    // Accepted sockets inherit the listener's send buffer size.
    socket.set_send_buffer_size(SMALL_BUFFER as usize).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket.listen(64).unwrap();
    socket.set_nonblocking(true).unwrap();
    let listener = TcpListener::from_std(socket.into()).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_with(listener, app, options, std::future::pending()));
    Served { addr, fake, server }
}

/// A connection to `addr` with a small receive buffer.
async fn small_client(addr: SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.set_recv_buffer_size(SMALL_BUFFER).unwrap();
    bounded(WAIT, "connect", s.connect(addr)).await.unwrap()
}

/// A long OpenAI stream (200,000 chunks) asked for on a raw HTTP/1.1 connection.
fn long_stream_request(addr: SocketAddr, interval_ms: u64) -> Vec<u8> {
    let body = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer sk-a\r\n\
         content-type: application/json\r\nx-fake-chunks: 200000\r\n\
         x-fake-chunk-interval-ms: {interval_ms}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads from `conn` until `buf` holds `needle`.
async fn read_until(conn: &mut TcpStream, buf: &mut Vec<u8>, needle: &str) {
    bounded(WAIT, "the expected bytes", async {
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(buf).contains(needle) {
            let n = conn.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(buf));
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
}

/// Everything `conn` still delivers until the server closes it.
async fn drain(conn: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    bounded(WAIT, "the server to close the connection", async {
        let mut chunk = [0u8; 65536];
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => all.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    all
}

fn money(v: &Value) -> &Value {
    &v["money"]
}

/// The value of a metric line carrying every label of `labels`.
fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A stream cut after its content went out (here: cut by the gateway, its client
/// stopped reading) is charged at once what the gateway saw streamed (B7): something,
/// and nothing left pending.
fn assert_charged_what_streamed(v: &serde_json::Value) {
    assert!(
        money(v)["key_spent"].as_i64().is_some_and(|m| m > 0),
        "charged: {v}"
    );
    assert_eq!(
        money(v)["key_pending_reconciliation"],
        0,
        "nothing held: {v}"
    );
    assert_eq!(
        money(v)["tenant_pending_reconciliation"],
        0,
        "nothing held: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_a_client_that_stops_reading_gets_its_slot_back_and_the_attempt_is_charged_what_streamed()
 {
    let s = start("stall_timeout = \"500ms\"").await;
    let mut conn = small_client(s.addr).await;
    conn.write_all(&long_stream_request(s.addr, 0))
        .await
        .unwrap();
    // The head and the first chunk, then nothing more is read.
    let mut seen = Vec::new();
    read_until(&mut conn, &mut seen, "data: {").await;
    assert!(
        String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    let stopped = Instant::now();
    assert_eq!(
        in_flight(&usage(s.addr, "sk-a").await),
        1,
        "the slot is held while the answer is coming"
    );
    // The slot comes back within the stall timeout (+ the time the buffers take to
    // fill, + slack), with the socket still open and unread.
    let (back, view) = usage_until(s.addr, "sk-a", Duration::from_secs(4), |v| {
        in_flight(v) == 0
    })
    .await;
    let waited = stopped.elapsed();
    assert!(back, "slot still held after {waited:?}: {view}");
    assert!(waited < Duration::from_millis(3_500), "{waited:?}");
    // A second request that needs the slot is served.
    let r = send(s.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The cut attempt is charged what was streamed (B7): not zero, not lost, not held.
    let v = usage(s.addr, "sk-a").await;
    assert_charged_what_streamed(&v);
    // The upstream call was dropped with it.
    assert!(
        eventually(WAIT, || async { s.fake.in_flight() == 0 }).await,
        "the upstream stream is released"
    );
    // The connection was closed without the rest of the answer (no final chunk).
    let rest = drain(&mut conn).await;
    let text = String::from_utf8_lossy(&rest);
    assert!(!text.contains("[DONE]"), "the answer did not complete");
    assert!(!text.ends_with("0\r\n\r\n"), "no final chunk");
    // And it is counted.
    let m = send(s.addr, &Req::get("/metrics")).await;
    assert!(
        metric(
            &m.text(),
            "portcullis_responses_cut_total",
            &["reason=\"stalled\""]
        )
        .is_some_and(|n| n >= 1.0),
        "{}",
        m.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_a_client_that_reads_steadily_is_not_cut_before_the_stall_timeout() {
    // Frames every 100 ms for 2 s, read as they come: nothing is ever left unread for
    // the 500 ms stall timeout, so the answer completes.
    let s = start("stall_timeout = \"500ms\"").await;
    let req = ask(Dialect::OpenAi, "sk-a", true)
        .header("x-fake-chunks", 20)
        .header("x-fake-chunk-interval-ms", 100);
    let r = send(s.addr, &req).await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("data: [DONE]"), "{}", r.text());
    let v = usage(s.addr, "sk-a").await;
    assert_eq!(money(&v)["key_pending_reconciliation"], 0, "{v}");
    assert!(
        money(&v)["key_spent"].as_i64().is_some_and(|m| m > 0),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_a_response_past_max_response_lifetime_is_cut_and_releases() {
    let s = start("max_response_lifetime = \"800ms\"").await;
    let mut conn = small_client(s.addr).await;
    // A chunk every 50 ms, read steadily: no stall, but the lifetime runs out.
    conn.write_all(&long_stream_request(s.addr, 50))
        .await
        .unwrap();
    let started = Instant::now();
    let body = drain(&mut conn).await;
    let lived = started.elapsed();
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("data: {"), "some chunks came");
    assert!(!text.contains("[DONE]"), "cut before its end");
    assert!(
        (Duration::from_millis(700)..Duration::from_millis(3_000)).contains(&lived),
        "ended after {lived:?}"
    );
    let (back, view) = usage_until(s.addr, "sk-a", WAIT, |v| in_flight(v) == 0).await;
    assert!(back, "{view}");
    assert_charged_what_streamed(&view);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_an_http2_stream_left_unread_releases_and_its_connection_closes() {
    let s = start("stall_timeout = \"500ms\"\nh2_idle_timeout = \"500ms\"").await;
    let tcp = small_client(s.addr).await;
    let (mut send_req, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(SMALL_BUFFER)
            .initial_connection_window_size(SMALL_BUFFER)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let body = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
    let req = http::Request::post(format!("http://{}/v1/chat/completions", s.addr))
        .header("authorization", "Bearer sk-a")
        .header("content-type", "application/json")
        .header("x-fake-chunks", 200_000)
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let res = bounded(WAIT, "an HTTP/2 answer", send_req.send_request(req))
        .await
        .expect("h2 request");
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let first = bounded(
        WAIT,
        "a first frame",
        http_body_util::BodyExt::frame(&mut body),
    )
    .await
    .expect("a frame")
    .expect("a data frame");
    assert!(first.is_data());
    let stopped = Instant::now();
    // Nothing more is read; the body stays alive (the stream is not reset).
    let (back, view) = usage_until(s.addr, "sk-a", Duration::from_secs(4), |v| {
        in_flight(v) == 0
    })
    .await;
    assert!(
        back,
        "slot still held after {:?}: {view}",
        stopped.elapsed()
    );
    assert_charged_what_streamed(&view);
    // The stream no longer counts as open: the idle timeout closes the connection.
    let _ = bounded(WAIT, "the gateway to close the HTTP/2 connection", conn)
        .await
        .expect("connection task");
    drop(body);
}

#[test]
fn p3_serving_bounds_default_sanely_and_bad_ones_name_their_line() {
    let c = Config::parse(CHANNELS).unwrap();
    let o = ServeOptions::from(c.server());
    assert_eq!(c.server().stall_timeout, Duration::from_secs(60));
    assert_eq!(c.server().max_response_lifetime, Duration::from_secs(1800));
    assert_eq!(o.max_connections, 4096);
    assert_eq!(o.h2_idle_timeout, Duration::from_secs(120));
    for (line, reason) in [
        (
            "stall_timeout = \"0s\"",
            "server.stall_timeout must be between 1ms and 24h",
        ),
        (
            "max_response_lifetime = \"30d\"",
            "server.max_response_lifetime must be between 1ms and 7d",
        ),
        (
            "h2_idle_timeout = \"0ms\"",
            "server.h2_idle_timeout must be between 1ms and 24h",
        ),
        (
            "max_connections = 0",
            "server.max_connections must be between 1 and 16777216",
        ),
    ] {
        let text = format!("[server]\nlisten = \"127.0.0.1:0\"\n{line}\n{CHANNELS}");
        let e = Config::parse(&text).unwrap_err();
        assert_eq!(e.reason, reason, "{line}");
        assert_eq!(e.line, Some(3), "{line}: {e}");
    }
}
