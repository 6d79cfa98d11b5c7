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
//!
//! Connections are bounded (P2): at most `max_connections` are served at
//! once; beyond it the accept loop **waits** (the next connection is accepted and held
//! unserved, later ones stay in the kernel's listen backlog) until one closes. The
//! gauge `portcullis_connections_open` and the counter `portcullis_connections_waited_total`
//! (both labelled with the listener's address) say so. An HTTP/2 connection with no
//! open stream for `h2_idle_timeout` is sent a GOAWAY and closed; an idle HTTP/1
//! connection is closed by `header_read_timeout` (hyper runs it while waiting for the
//! next request head).
//!
//! A response cut by [`crate::stall`] while its client reads nothing ends its
//! connection from here: an HTTP/1 connection is closed at once; on HTTP/2 the stream
//! stops counting as open, so the connection is closed when nothing else is open for
//! `h2_idle_timeout` (the streams left after its GOAWAY get [`H2_CLOSE_GRACE`]).
//!
//! [`serve_graceful`] shuts down gracefully: when its `shutdown` future completes the
//! listener is closed (new connections are refused), every connection is asked to
//! finish — an HTTP/1 connection closes after the response in progress (an idle one at
//! once), an HTTP/2 connection is sent a GOAWAY and its open streams go on — and it
//! waits up to the drain timeout for them to end.

use crate::config::ServerSettings;
use crate::stall::{CutNotice, OnCut};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use pin_project_lite::pin_project;
use portcullis::body::{Hold, HoldBody};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tower::ServiceExt;
use tower::util::Oneshot;

/// HTTP/2 keep-alive: ping interval, and how long a ping may go unanswered.
pub const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// After an idle HTTP/2 connection's GOAWAY, how long the streams still there (only
/// responses cut while unread, or one that raced the GOAWAY) may keep it once nothing
/// counts as open.
pub const H2_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// TCP keepalive: idle time before the first probe.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// The HTTP/2 connection preface, which hyper's version sniffing waits for in full.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How connections are served (from `[server]`, see [`ServeOptions::from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// Longest wait for a request head (and for the first bytes of a connection).
    pub header_read_timeout: Duration,
    /// Most connections served at once; the accept loop waits beyond it.
    pub max_connections: usize,
    /// An HTTP/2 connection with no open stream this long is closed.
    pub h2_idle_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self::from(&ServerSettings::default())
    }
}

impl From<&ServerSettings> for ServeOptions {
    fn from(c: &ServerSettings) -> Self {
        Self {
            header_read_timeout: c.header_read_timeout,
            max_connections: c.max_connections,
            h2_idle_timeout: c.h2_idle_timeout,
        }
    }
}

/// What a connection speaks, as told by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Http1,
    Http2,
}

/// Waits until the connection has sent enough for hyper to tell HTTP/1 from HTTP/2 —
/// any byte that is not the start of the HTTP/2 preface, or the whole preface — for at
/// most `limit`. `None`: silent (or closed) that long.
async fn first_bytes(tcp: &TcpStream, limit: Duration) -> Option<Proto> {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 24];
    loop {
        match tokio::time::timeout_at(deadline, tcp.peek(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) if n >= H2_PREFACE.len() && buf[..] == *H2_PREFACE => {
                return Some(Proto::Http2);
            }
            Ok(Ok(n)) if n >= H2_PREFACE.len() || !H2_PREFACE.starts_with(&buf[..n]) => {
                return Some(Proto::Http1);
            }
            // Part of the preface: `peek` would return it again at once; look again
            // shortly (bounded by the deadline).
            Ok(Ok(_)) => {
                if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(5)))
                    .await
                    .is_err()
                {
                    return None;
                }
            }
        }
    }
}

/// One connection's open streams: requests whose response has not ended (an HTTP/1
/// connection has at most one).
struct Conn {
    http2: bool,
    open: Mutex<Open>,
    /// Told when the last open stream ends.
    changed: Notify,
    /// Told when an HTTP/1 response was cut while its client read nothing.
    kill: Notify,
}

struct Open {
    streams: usize,
    idle_since: Instant,
}

impl Conn {
    fn new(proto: Proto) -> Arc<Self> {
        Arc::new(Self {
            http2: proto == Proto::Http2,
            open: Mutex::new(Open {
                streams: 0,
                idle_since: Instant::now(),
            }),
            changed: Notify::new(),
            kill: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_stream(self: &Arc<Self>) -> Arc<Stream> {
        self.lock().streams += 1;
        Arc::new(Stream {
            conn: self.clone(),
            ended: AtomicBool::new(false),
        })
    }

    fn stream_ended(&self) {
        let mut o = self.lock();
        o.streams = o.streams.saturating_sub(1);
        if o.streams == 0 {
            o.idle_since = Instant::now();
            drop(o);
            self.changed.notify_one();
        }
    }

    /// Counts the connection's idle time afresh from now (when no stream is open): the
    /// grace after a GOAWAY runs from the GOAWAY, not from the start of the idle time
    /// that caused it.
    fn restart_idle(&self) {
        let mut o = self.lock();
        if o.streams == 0 {
            o.idle_since = Instant::now();
        }
    }

    /// Resolves once the connection has had no open stream for `d`.
    async fn idle_for(&self, d: Duration) {
        loop {
            let since = {
                let o = self.lock();
                (o.streams == 0).then_some(o.idle_since)
            };
            match since {
                Some(t) if Instant::now() >= t + d => return,
                Some(t) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(t + d) => {}
                        () = self.changed.notified() => {}
                    }
                }
                None => self.changed.notified().await,
            }
        }
    }
}

/// One request on a connection, open until its response body ends (or is cut).
struct Stream {
    conn: Arc<Conn>,
    ended: AtomicBool,
}

impl Stream {
    fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.conn.stream_ended();
        }
    }
}

impl OnCut for Stream {
    fn cut(&self) {
        // The stream no longer counts as open (on HTTP/2 the idle timeout can close
        // the connection); an HTTP/1 connection has nothing else: close it now.
        self.end();
        if !self.conn.http2 {
            self.conn.kill.notify_one();
        }
    }
}

/// Held by the response body: the stream ends with it.
struct StreamGuard(Arc<Stream>);

impl Hold for StreamGuard {}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The router as hyper calls it on one connection: each request counts as an open
/// stream until its response body ends, and carries the connection's [`CutNotice`].
#[derive(Clone)]
struct ConnService {
    app: Router,
    conn: Arc<Conn>,
}

impl hyper::service::Service<http::Request<Incoming>> for ConnService {
    type Response = http::Response<HoldBody<axum::body::Body, StreamGuard>>;
    type Error = Infallible;
    type Future = ConnFuture;

    fn call(&self, mut req: http::Request<Incoming>) -> ConnFuture {
        let stream = self.conn.open_stream();
        req.extensions_mut().insert(CutNotice(stream.clone()));
        ConnFuture {
            inner: self.app.clone().oneshot(req),
            guard: Some(StreamGuard(stream)),
        }
    }
}

pin_project! {
    struct ConnFuture {
        #[pin]
        inner: Oneshot<Router, http::Request<Incoming>>,
        guard: Option<StreamGuard>,
    }
}

impl Future for ConnFuture {
    type Output = Result<http::Response<HoldBody<axum::body::Body, StreamGuard>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx))?;
        let guard = this.guard.take();
        Poll::Ready(Ok(res.map(|b| HoldBody::holding(b, guard))))
    }
}

/// A served connection: its place under `max_connections`, counted in the gauge.
struct Served {
    _permit: OwnedSemaphorePermit,
    open: metrics::Gauge,
}

impl Served {
    fn new(permit: OwnedSemaphorePermit, open: metrics::Gauge) -> Self {
        open.increment(1.0);
        Self {
            _permit: permit,
            open,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.open.decrement(1.0);
    }
}

/// Accepts connections on `listener` and serves `app` on each (HTTP/1.1 and HTTP/2),
/// until `shutdown` completes. A request head must arrive within
/// `header_read_timeout`, else the connection is closed. The other bounds are
/// [`ServeOptions`]' defaults; see [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let options = ServeOptions {
        header_read_timeout,
        ..ServeOptions::default()
    };
    serve_with(listener, app, options, shutdown).await;
}

/// [`serve`] with every bound given (see the module docs). When `shutdown` completes
/// it stops accepting and returns; connections already open go on being served.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    accept_loop(listener, app, options, shutdown, None).await;
}

/// How a graceful shutdown ended ([`serve_graceful`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    /// Connections open when the shutdown began.
    pub open_at_shutdown: usize,
    /// Connections still open when the drain timeout passed (0: every one finished).
    pub still_open: usize,
}

/// [`serve_with`], shutting down gracefully: when `shutdown` completes the listener is
/// closed, every open connection is asked to end after the requests it has in flight
/// (HTTP/1: after the response in progress; HTTP/2: GOAWAY, open streams go on), and
/// this waits up to `drain` for them. Connections still open then are left to the
/// caller (they end when the runtime does).
pub async fn serve_graceful(
    listener: TcpListener,
    app: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> Drained {
    // Every connection task holds a receiver: the sender tells them to drain, counts
    // them, and sees the last one go.
    let (tx, rx) = watch::channel(false);
    accept_loop(listener, app, options, shutdown, Some(rx)).await;
    tx.send_replace(true);
    let open_at_shutdown = tx.receiver_count();
    tracing::info!(
        connections = open_at_shutdown,
        drain_timeout = ?drain,
        "stopped accepting; draining the connections in flight"
    );
    let still_open = match tokio::time::timeout(drain, tx.closed()).await {
        Ok(()) => 0,
        Err(_) => tx.receiver_count(),
    };
    Drained {
        open_at_shutdown,
        still_open,
    }
}

/// Resolves once a drain began (never without a drain signal).
async fn draining(drain: &mut Option<watch::Receiver<bool>>) {
    match drain {
        // An error means the sender is gone: nothing will tell us more, drain too.
        Some(rx) => {
            let _ = rx.wait_for(|d| *d).await;
        }
        None => std::future::pending().await,
    }
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
    drain: Option<watch::Receiver<bool>>,
) {
    crate::metrics::handle();
    let label = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let open = metrics::gauge!("portcullis_connections_open", "listener" => label.clone());
    let waited = metrics::counter!("portcullis_connections_waited_total", "listener" => label);
    let places = Arc::new(Semaphore::new(
        options.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
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
        let permit = match places.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // At the cap: this connection waits unserved, later ones wait in the
                // listen backlog, until a served one closes.
                waited.increment(1);
                tracing::debug!(
                    max_connections = options.max_connections,
                    "connection cap reached: accepting waits"
                );
                tokio::select! {
                    p = places.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => return, // never closed
                    },
                    () = &mut shutdown => return,
                }
            }
        };
        let served = Served::new(permit, open.clone());
        let _ = tcp.set_nodelay(true);
        let keepalive = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
        let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive);
        let app = app.clone();
        let drain = drain.clone();
        tokio::spawn(async move {
            let _served = served;
            serve_connection(tcp, app, options, drain).await;
        });
    }
}

/// Serves one connection to its end.
async fn serve_connection(
    tcp: TcpStream,
    app: Router,
    options: ServeOptions,
    mut drain: Option<watch::Receiver<bool>>,
) {
    let proto = tokio::select! {
        p = first_bytes(&tcp, options.header_read_timeout) => p,
        () = draining(&mut drain) => {
            tracing::debug!("connection closed before its first request: draining");
            return;
        }
    };
    let Some(proto) = proto else {
        tracing::debug!("connection closed: nothing to serve within header_read_timeout");
        return;
    };
    let conn = Conn::new(proto);
    let svc = ConnService {
        app,
        conn: conn.clone(),
    };
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(H2_KEEP_ALIVE))
        .keep_alive_timeout(H2_KEEP_ALIVE);
    let served = b.serve_connection_with_upgrades(TokioIo::new(tcp), svc);
    let mut served = std::pin::pin!(served);
    // A drain (graceful shutdown) asks the connection to finish, once, and it goes on
    // being served as before until it does.
    let mut drained = false;
    let ended = loop {
        match proto {
            Proto::Http1 => tokio::select! {
                r = served.as_mut() => break Some(r),
                () = conn.kill.notified() => {
                    tracing::debug!("connection closed: its response was cut unread");
                    break None;
                }
                () = draining(&mut drain), if !drained => {
                    drained = true;
                    served.as_mut().graceful_shutdown();
                }
            },
            Proto::Http2 => {
                tokio::select! {
                    r = served.as_mut() => break Some(r),
                    () = conn.idle_for(options.h2_idle_timeout) => {
                        tracing::debug!("HTTP/2 connection idle for h2_idle_timeout: GOAWAY");
                        served.as_mut().graceful_shutdown();
                        // The client gets the whole grace to read the GOAWAY and close
                        // (else, with an idle timeout above the grace, the connection
                        // was dropped at once and the client saw a broken pipe).
                        conn.restart_idle();
                        break tokio::select! {
                            r = served.as_mut() => Some(r),
                            () = conn.idle_for(H2_CLOSE_GRACE) => None,
                        };
                    }
                    () = draining(&mut drain), if !drained => {
                        drained = true;
                        served.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    };
    if let Some(Err(e)) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P2: an idle HTTP/2 connection's GOAWAY is followed by the whole
    /// [`H2_CLOSE_GRACE`] before the server drops it, however long the idle time
    /// before the GOAWAY was (counted from the start of that idle time, the grace
    /// was already over at the GOAWAY of any idle timeout above it).
    #[tokio::test(start_paused = true)]
    async fn p2_the_close_grace_after_a_goaway_runs_from_the_goaway() {
        let conn = Conn::new(Proto::Http2);
        let idle_timeout = H2_CLOSE_GRACE * 3;
        let start = Instant::now();
        conn.idle_for(idle_timeout).await;
        assert_eq!(start.elapsed(), idle_timeout);
        // The GOAWAY goes out here.
        conn.restart_idle();
        let goaway = Instant::now();
        conn.idle_for(H2_CLOSE_GRACE).await;
        assert_eq!(goaway.elapsed(), H2_CLOSE_GRACE);
        // A stream still open after the GOAWAY holds the connection until it ends,
        // and the grace then runs from its end.
        conn.restart_idle();
        let stream = conn.open_stream();
        let waiting = tokio::spawn({
            let conn = conn.clone();
            async move { conn.idle_for(H2_CLOSE_GRACE).await }
        });
        tokio::time::sleep(H2_CLOSE_GRACE * 2).await;
        assert!(!waiting.is_finished(), "closed under an open stream");
        let ended = Instant::now();
        stream.end();
        waiting.await.unwrap();
        assert_eq!(ended.elapsed(), H2_CLOSE_GRACE);
    }
}
