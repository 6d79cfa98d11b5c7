//! Serving the gateway on a TCP listener with hyper's server directly (axum's `serve`
//! has no header timeout): every connection gets `TCP_NODELAY` (small stream chunks
//! must not wait for delayed ACKs) and a bound on how long a request head may take to
//! arrive, so a client trickling its headers (slow loris) cannot hold a connection
//! task forever. Request bodies are bounded by `server.body_read_timeout` (408).

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;

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
        let svc = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut b = auto::Builder::new(TokioExecutor::new());
            b.http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            if let Err(e) = b
                .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
                .await
            {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
