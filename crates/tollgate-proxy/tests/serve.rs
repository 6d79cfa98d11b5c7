//! Slow clients are bounded (issue "operations", item 6): a request head trickled
//! slower than `header_read_timeout` loses its connection; a normal request on the
//! same server is served. A connection that sends nothing, or half the HTTP/2 preface,
//! is closed within `header_read_timeout` too, and HTTP/2 with prior knowledge is
//! still served.

mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::core::MemoryStore;
use tollgate_fake_upstream::FakeUpstream;
use tollgate_proxy::{Config, Gateway};

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
    let server = tokio::spawn(tollgate_proxy::serve::serve(
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
