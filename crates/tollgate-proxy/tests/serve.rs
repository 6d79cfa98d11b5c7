//! Slow clients are bounded (issue "operations", item 6): a request head trickled
//! slower than `header_read_timeout` loses its connection; a normal request on the
//! same server is served.

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
