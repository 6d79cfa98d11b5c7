//! Serving the gateway on a TCP listener with hyper's server directly (axum's `serve`
//! has no header timeout): every connection gets `TCP_NODELAY` (small stream chunks
//! must not wait for delayed ACKs) and a bound on how long a request head may take to
//! arrive, so a client trickling its headers (slow loris) cannot hold a connection
//! task forever. Request bodies are bounded by `server.body_read_timeout` (408).
//!
//! The same bound covers the first bytes: a connection that sends nothing, or only part
//! of the HTTP/2 preface, within `header_read_timeout` is closed (hyper's version
//! sniffing has no timeout of its own). HTTP/2 connections are pinged every
//! [`H2_KEEP_ALIVE`] and closed when a ping goes unanswered as long, and every
//! connection has TCP keepalive on, so a peer that vanished is noticed.

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// HTTP/2 keep-alive: ping interval, and how long a ping may go unanswered.
pub const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// TCP keepalive: idle time before the first probe.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// The HTTP/2 connection preface, which hyper's version sniffing waits for in full.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Waits until the connection has sent enough for hyper to tell HTTP/1 from HTTP/2 —
/// any byte that is not the start of the HTTP/2 preface, or the whole preface — for at
/// most `limit`. False: silent (or closed) that long.
async fn first_bytes(tcp: &TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 24];
    loop {
        match tokio::time::timeout_at(deadline, tcp.peek(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return false,
            Ok(Ok(n)) if n >= H2_PREFACE.len() || !H2_PREFACE.starts_with(&buf[..n]) => {
                return true;
            }
            // Part of the preface: `peek` would return it again at once; look again
            // shortly (bounded by the deadline).
            Ok(Ok(_)) => {
                if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(5)))
                    .await
                    .is_err()
                {
                    return false;
                }
            }
        }
    }
}

/// Accepts connections on `listener` and serves `app` on each (HTTP/1.1 and HTTP/2),
/// until `shutdown` completes. A request head must arrive within
/// `header_read_timeout`, else the connection is closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => return,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let keepalive = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
        let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive);
        let svc = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            if !first_bytes(&tcp, header_read_timeout).await {
                tracing::debug!("connection closed: nothing to serve within header_read_timeout");
                return;
            }
            let mut b = auto::Builder::new(TokioExecutor::new());
            b.http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            b.http2()
                .timer(TokioTimer::new())
                .keep_alive_interval(Some(H2_KEEP_ALIVE))
                .keep_alive_timeout(H2_KEEP_ALIVE);
            if let Err(e) = b
                .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
                .await
            {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
