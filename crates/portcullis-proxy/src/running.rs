//! The running stack: the routes requests are served by and the live state the admin
//! routes read, built together from one configuration and swapped whole by a reload
//! (`POST /admin/reload`, or `SIGHUP` through [`crate::admin::Reloader`]).
//!
//! The gateway's assembly ([`crate::app`]) builds a [`Stack`]; the admin routes
//! ([`crate::routes::admin`]) read it and reload it; neither knows the other. A request
//! reaches the running routes through one [`ArcSwap::load`] ([`Current`]): no lock, so a
//! reload never waits for requests nor they for it. A reload builds the complete new
//! stack first and swaps it in only once it is whole; a request already in flight
//! finishes on the stack it started on.

use crate::catalog::Catalog;
use crate::config::{Channel, Config};
use arc_swap::{ArcSwap, Guard};
use axum::Router;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::future::RouteFuture;
use portcullis::FailoverLayer;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

/// What the admin endpoints read and act on, for one configuration.
pub struct Live<St> {
    /// The failover layer (health, registry and its cooldowns).
    pub failover: FailoverLayer,
    /// Models and channels.
    pub catalog: Arc<Catalog>,
    /// The configured channels.
    pub channels: Vec<Channel>,
    /// The store (capacity leases, reconciliation).
    pub store: St,
    /// Where usage records go (the billing layer's sink): reconciliations are recorded
    /// there too.
    pub sink: Arc<dyn portcullis::UsageSink>,
    /// Rejections by code over the last minutes (`GET /admin/rejections`).
    pub rejections: crate::pages::RejectionLog,
}

/// One configuration's stack.
pub(crate) struct Running<St> {
    /// The configuration it was built from.
    pub(crate) config: Config,
    /// The model and operational routes (no admin routes, no request-id, tracing or
    /// panic layers: those stay around the whole router).
    pub(crate) routes: Router,
    /// What the admin endpoints read.
    pub(crate) live: Arc<Live<St>>,
}

/// Builds the stack of a configuration (the gateway's assembly, handed to the stack so
/// that a reload can call it without knowing the gateway).
pub(crate) type Assemble<St> =
    Box<dyn Fn(Config) -> Result<Running<St>, String> + Send + Sync + 'static>;

/// The swapped cell: the running stack, and how to build the next one.
pub(crate) struct Stack<St> {
    current: ArcSwap<Running<St>>,
    assemble: Assemble<St>,
}

impl<St> Stack<St> {
    /// A cell running `running`, whose reloads build with `assemble`.
    pub(crate) fn new(running: Running<St>, assemble: Assemble<St>) -> Self {
        Self {
            current: ArcSwap::from_pointee(running),
            assemble,
        }
    }

    /// The running stack, for a short look: not to be held across an `await` (take an
    /// `Arc` out of it for that, as the admin handlers do with `live`).
    pub(crate) fn load(&self) -> Guard<Arc<Running<St>>> {
        self.current.load()
    }

    /// The running stack, to hold across an `await` (a background task's look at it).
    pub(crate) fn load_full(&self) -> Arc<Running<St>> {
        self.current.load_full()
    }

    /// Builds a complete stack on `config` and swaps it in for new requests; on an error
    /// the running stack stays as it is. Requests in flight keep what they hold of the
    /// stack they started on.
    pub(crate) fn replace(&self, config: Config) -> Result<(), String> {
        let next = (self.assemble)(config)?;
        self.current.store(Arc::new(next));
        Ok(())
    }
}

/// The service behind the admin and page routes: every other request goes to the
/// routes of the running stack.
pub(crate) struct Current<St>(pub(crate) Arc<Stack<St>>);

impl<St> Clone for Current<St> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<St> tower::Service<Request> for Current<St> {
    type Response = Response;
    type Error = Infallible;
    type Future = RouteFuture<Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The request's one look at the cell: an `ArcSwap::load`, no lock. `Router` is an
        // `Arc` handle and tower's `call` takes `&mut self`, so the handle is taken out of
        // the guard (a reference count, as axum's own `Route` does with the service it
        // calls); the guard is gone before this returns, and the future owns what it
        // needs of the stack it started on, whatever a reload swaps in meanwhile.
        let mut routes = self.0.load().routes.clone();
        tower::Service::call(&mut routes, req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Gateway;
    use axum::routing::get;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::{Notify, oneshot};
    use tower::ServiceExt;

    /// A router whose `/which` names it; `/held` also names it, once `release` is
    /// notified (after saying on `entered` that the request got in).
    fn named(
        name: &'static str,
        entered: Option<oneshot::Sender<()>>,
        release: Arc<Notify>,
    ) -> Router {
        let entered = Arc::new(std::sync::Mutex::new(entered));
        let held = move || {
            let tx = entered.lock().unwrap().take();
            let release = release.clone();
            async move {
                if let Some(tx) = tx {
                    let _ = tx.send(());
                }
                release.notified().await;
                name
            }
        };
        Router::new()
            .route("/which", get(move || async move { name }))
            .route("/held", get(held))
    }

    async fn answer(
        svc: impl tower::Service<Request, Response = Response, Error = Infallible>,
        path: &str,
    ) -> String {
        let req = Request::builder()
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    /// A stack running `old`, whose first reload builds `new` and later ones fail.
    fn stack(old: Router) -> Arc<Stack<portcullis::core::MemoryStore>> {
        let config = Config::parse("").unwrap();
        let gateway = Gateway::new(config.clone(), portcullis::core::MemoryStore::new());
        let base = gateway.assemble().unwrap();
        let live = base.live.clone();
        let builds = AtomicUsize::new(0);
        let assemble: Assemble<_> = Box::new(move |config| {
            if builds.fetch_add(1, Ordering::SeqCst) > 0 {
                return Err("refused: the second build fails".into());
            }
            Ok(Running {
                config,
                routes: named("new", None, Arc::new(Notify::new())),
                live: live.clone(),
            })
        });
        Arc::new(Stack::new(
            Running {
                config,
                routes: old,
                live: base.live,
            },
            assemble,
        ))
    }

    /// P4 (reload): new requests see the new stack at once; a request in flight and a
    /// guard taken before the swap go on with the old one; a build that fails leaves
    /// the running stack in place.
    #[tokio::test]
    async fn p4_reload_swaps_the_stack_and_what_started_before_stays_on_the_old_one() {
        let release = Arc::new(Notify::new());
        let (entered_tx, entered) = oneshot::channel();
        let stack = stack(named("old", Some(entered_tx), release.clone()));
        let current = Current(stack.clone());
        assert_eq!(answer(current.clone(), "/which").await, "old");

        let in_flight = tokio::spawn(answer(current.clone(), "/held"));
        tokio::time::timeout(std::time::Duration::from_secs(5), entered)
            .await
            .expect("the held request got in")
            .unwrap();
        let before = stack.load();
        let old = Arc::downgrade(&*before);

        stack.replace(Config::parse("").unwrap()).unwrap();
        assert_eq!(answer(current.clone(), "/which").await, "new");
        assert_eq!(
            answer(before.routes.clone(), "/which").await,
            "old",
            "a guard taken before the swap keeps the old stack"
        );
        drop(before);
        assert!(
            old.upgrade().is_none(),
            "the old stack is freed once nothing looks at it (the request in flight \
             holds only its own route)"
        );
        release.notify_one();
        let held = tokio::time::timeout(std::time::Duration::from_secs(5), in_flight)
            .await
            .expect("the held request finished")
            .unwrap();
        assert_eq!(held, "old", "a request in flight finishes on its stack");

        let err = stack.replace(Config::parse("").unwrap()).unwrap_err();
        assert!(err.contains("second build"), "{err}");
        assert_eq!(
            answer(current, "/which").await,
            "new",
            "a failed build swaps nothing"
        );
    }
}
