//! Slow clients are bounded (P2): a request head trickled
//! slower than `header_read_timeout` loses its connection; a normal request on the
//! same server is served. A connection that sends nothing, or half the HTTP/2 preface,
//! is closed within `header_read_timeout` too, and HTTP/2 with prior knowledge is
//! still served. Connections are bounded: beyond `max_connections`
//! a connection waits and the metrics say so; an idle HTTP/2 connection is closed after
//! `h2_idle_timeout`, one with a stream open is not.

mod common;

use common::*;
use portcullis::core::MemoryStore;
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::{Config, Gateway};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_headers_are_cut_after_header_read_timeout() {
    let fake = FakeUpstream::start().await;
    let (addr, server) = served(&fake).await;

    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let closed = bounded(WAIT, "the server to close the slow connection", async {
        let mut chunk = [0u8; 1024];
        loop {
            match slow.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    closed.await;
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(2), "closed after {waited:?}");
    let text = String::from_utf8_lossy(&buf);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
    assert_eq!(fake.stats().total_calls, 0);

    // A normal client is served by the same server.
    let r = send(addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    server.abort();
}

/// A gateway served on 127.0.0.1 with a 300 ms `header_read_timeout`.
async fn served(fake: &FakeUpstream) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let config = Config::parse(&format!(
        "[policies.open]\n[keys.a]\nkey = \"sk-a\"\npolicy = \"open\"\n{CHANNELS}"
    ))
    .unwrap();
    let app = Gateway::new(config, MemoryStore::new())
        .fake_upstream(fake.base_url())
        .router()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(portcullis_proxy::serve::serve(
        listener,
        app,
        Duration::from_millis(300),
        std::future::pending(),
    ));
    (addr, server)
}

/// How long until the server closes `conn` (reading and dropping whatever it sends).
async fn until_closed(mut conn: TcpStream) -> Duration {
    let started = Instant::now();
    bounded(WAIT, "the server to close the connection", async {
        let mut chunk = [0u8; 1024];
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_a_silent_connection_or_half_a_preface_is_closed_within_header_read_timeout() {
    let fake = FakeUpstream::start().await;
    let (addr, server) = served(&fake).await;
    // Nothing at all.
    let silent = TcpStream::connect(addr).await.unwrap();
    let waited = until_closed(silent).await;
    assert!(
        waited < Duration::from_millis(1_300),
        "silent: closed after {waited:?}"
    );
    // Half of the HTTP/2 preface, then nothing.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let waited = until_closed(half).await;
    assert!(
        waited < Duration::from_millis(1_300),
        "half a preface: closed after {waited:?}"
    );
    // One byte of a request line, then nothing: HTTP/1's head timeout.
    let mut one = TcpStream::connect(addr).await.unwrap();
    one.write_all(b"P").await.unwrap();
    let waited = until_closed(one).await;
    assert!(
        waited < Duration::from_millis(1_300),
        "one byte: closed after {waited:?}"
    );
    // A whole request is served as before.
    let r = send(addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_http2_with_prior_knowledge_is_still_served() {
    let fake = FakeUpstream::start().await;
    let (addr, server) = served(&fake).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send_req, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    let res = bounded(
        WAIT,
        "an HTTP/2 answer",
        send_req.send_request(
            http::Request::get(format!("http://{addr}/healthz"))
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap(),
        ),
    )
    .await
    .expect("h2 request");
    assert_eq!(res.status(), 200);
    server.abort();
}

/// A gateway served by `serve_with` on 127.0.0.1 with `options`.
async fn served_with(
    fake: &FakeUpstream,
    options: portcullis_proxy::serve::ServeOptions,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let config = Config::parse(&format!(
        "[policies.open]\n[keys.a]\nkey = \"sk-a\"\npolicy = \"open\"\n{CHANNELS}"
    ))
    .unwrap();
    let app = Gateway::new(config, MemoryStore::new())
        .fake_upstream(fake.base_url())
        .router()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(portcullis_proxy::serve::serve_with(
        listener,
        app,
        options,
        std::future::pending(),
    ));
    (addr, server)
}

/// Reads from `conn` until what came holds `needle`, for at most `within`; what came.
async fn read_for(conn: &mut TcpStream, needle: &str, within: Duration) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(within, async {
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&buf).contains(needle) {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// The value of the metric line `name{…labels…}`.
fn metric(text: &str, name: &str, label: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// `h2_idle_timeout` of the idle-connection test: above the server's 1 s
/// `H2_CLOSE_GRACE`, so the test proves that grace runs from the GOAWAY (counted from
/// the start of the idle time, it was over at the GOAWAY: the server dropped the
/// connection at once and the client saw a broken pipe instead of a clean close).
const H2_IDLE: Duration = Duration::from_millis(1_200);

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_beyond_max_connections_a_connection_waits_and_the_metrics_say_so() {
    let fake = FakeUpstream::start().await;
    let options = portcullis_proxy::serve::ServeOptions {
        header_read_timeout: Duration::from_secs(5),
        max_connections: 2,
        ..Default::default()
    };
    let (addr, server) = served_with(&fake, options).await;
    let label = format!("listener=\"{addr}\"");
    // Two keep-alive connections, each served once and left open.
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    for c in [&mut a, &mut b] {
        c.write_all(HEALTHZ).await.unwrap();
        let got = read_for(c, "\r\n\r\nok", WAIT).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    }
    // The third is not served while both are open.
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(HEALTHZ).await.unwrap();
    let got = read_for(&mut third, "ok", Duration::from_millis(500)).await;
    assert!(got.is_empty(), "served beyond the cap: {got}");
    // The metrics, read on a served connection (which then closes): two open, one
    // connection waited.
    a.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    bounded(WAIT, "the metrics", a.read_to_string(&mut text))
        .await
        .unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(
        metric(&text, "portcullis_connections_open", &label),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "portcullis_connections_waited_total", &label),
        Some(1.0),
        "{text}"
    );
    // With one closed, the waiting connection is served.
    let got = read_for(&mut third, "\r\n\r\nok", WAIT).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_an_idle_http2_connection_is_closed_after_h2_idle_timeout() {
    let fake = FakeUpstream::start().await;
    let options = portcullis_proxy::serve::ServeOptions {
        header_read_timeout: Duration::from_secs(5),
        h2_idle_timeout: H2_IDLE,
        ..Default::default()
    };
    let (addr, server) = served_with(&fake, options).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send_req, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("h2 handshake");
    let mut conn = tokio::spawn(conn);
    // A stream open for longer than the idle timeout (15 chunks, 100 ms apart) is not
    // cut: the connection is not idle while it lasts.
    let body =
        r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    let req = http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("authorization", "Bearer sk-a")
        .header("content-type", "application/json")
        .header("x-fake-chunks", 15)
        .header("x-fake-chunk-interval-ms", 100)
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let res = bounded(WAIT, "an HTTP/2 answer", send_req.send_request(req))
        .await
        .expect("h2 request");
    assert_eq!(res.status(), 200);
    let all = bounded(WAIT, "the whole stream", async {
        http_body_util::BodyExt::collect(res.into_body()).await
    })
    .await
    .expect("the stream completes")
    .to_bytes();
    assert!(String::from_utf8_lossy(&all).contains("data: [DONE]"));
    // Now nothing is open: closed after the idle timeout, not much before or after.
    // The server's idle time starts when it ends the stream, before the client has read
    // it: the check that it stays open waits 250 ms from the client's view, so a client
    // that a loaded host runs up to 250 ms late still passes; a connection closed at
    // once (not waiting for the idle timeout) fails it.
    let idle_from = Instant::now();
    let closed = tokio::time::timeout(Duration::from_millis(250), &mut conn).await;
    assert!(closed.is_err(), "closed before h2_idle_timeout");
    bounded(WAIT, "the idle HTTP/2 connection to be closed", &mut conn)
        .await
        .expect("connection task")
        .expect("closed cleanly (GOAWAY)");
    let idle = idle_from.elapsed();
    // Not much after: 3 × the idle timeout (as before), short of the 5 s header
    // timeout and of a connection that is never closed.
    assert!(idle < H2_IDLE * 3, "closed after {idle:?}");
    server.abort();
}
