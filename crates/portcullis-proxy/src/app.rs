//! The gateway: the layer stack (P2, P4) assembled from a configuration, the
//! routes of the `routes` modules on it, and the layers around the whole router (request
//! ids, tracing, panics).

use crate::auth::KeyTable;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::forward::{AllowLists, Forward, HttpClient, http_client};
use crate::prepare::PrepareLayer;
use crate::routes::api::{native_for_key, wire_dialect};
use crate::routes::ops::Ops;
pub use crate::routes::ops::ScrapeHook;
use crate::running::{Current, Live, Running, Stack};
use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use portcullis::core::capacity::QueueLimits;
use portcullis::core::{BillingStore, CapacityStore, Dialect};
use portcullis::error_map::render;
use portcullis::{
    AnchoredWindowLayer, BillingGateLayer, CapacityQueueLayer, ConcurrencySlotLayer,
    ErrorMappingLayer, FailoverLayer, UpstreamLimitLayer,
};
use std::sync::Arc;
use tower::ServiceBuilder;
use tower::filter::FilterLayer;
use tower::util::MapRequestLayer;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

/// The gateway's router, built from a configuration and a store.
#[derive(Clone)]
pub struct Gateway<St> {
    config: Config,
    store: St,
    client: HttpClient,
    fake_base: Option<String>,
    limits: bool,
    on_registry: Option<RegistryHook>,
    on_scrape: Option<ScrapeHook>,
    /// Rejections by code over the last minutes (kept across reloads).
    rejections: crate::pages::RejectionLog,
    /// Where provider-side objects live (kept across reloads, P6).
    homes: Arc<crate::homes::Homes>,
    /// The job statuses clients' polls saw, for the resolver (kept across reloads, B7).
    polls: Arc<crate::resolve_pending::Polls>,
    /// The records database's keys, tenants and tokens (kept across reloads).
    directory: Option<Arc<crate::keys::Directory>>,
    /// The ledger's writer (with a records database and `[database] ledger`), started
    /// once and kept across reloads.
    ledger: Option<Arc<crate::ledger::LedgerSink>>,
}

/// Called with every channel registry the gateway builds (at start and on each
/// reload), e.g. to share its cooldowns with other instances.
pub type RegistryHook =
    Arc<dyn Fn(&Arc<portcullis::core::upstream::UpstreamRegistry>) + Send + Sync>;

impl<St> Gateway<St>
where
    St: portcullis::core::JointStore
        + portcullis::core::ChannelStore
        + BillingStore
        + CapacityStore,
{
    /// A gateway on `config` whose limits live in `store`.
    pub fn new(config: Config, store: St) -> Self {
        Self {
            config,
            store,
            client: http_client(),
            fake_base: None,
            limits: true,
            on_registry: None,
            on_scrape: None,
            rejections: crate::pages::RejectionLog::default(),
            homes: Arc::default(),
            polls: Arc::default(),
            directory: None,
            ledger: None,
        }
    }

    /// Serves the keys of the records database beside the file's, and the key and
    /// tenant admin routes (`/admin/keys…`, `/admin/tenants…`) on it. Open it with
    /// [`crate::keys::Directory::open`].
    pub fn directory(mut self, directory: Arc<crate::keys::Directory>) -> Self {
        self.directory = Some(directory);
        self
    }

    /// Shares the homes of provider-side objects (Responses API responses, video jobs)
    /// through `book` — the Redis store, so every instance sends a request about an
    /// object to the channel that created it (P6). Without it they are kept in this
    /// instance only.
    pub fn homes(mut self, book: Arc<dyn portcullis::core::homes::HomeBook>) -> Self {
        self.homes = Arc::new(crate::homes::Homes::new(Some(book)));
        self
    }

    /// Calls `hook` with every channel registry built (at start and on each reload):
    /// the place to share cooldowns between instances (`portcullis_redis::CooldownSync`).
    pub fn on_registry(mut self, hook: RegistryHook) -> Self {
        self.on_registry = Some(hook);
        self
    }

    /// Calls `hook` before every `/metrics` answer.
    pub fn on_scrape(mut self, hook: ScrapeHook) -> Self {
        self.on_scrape = Some(hook);
        self
    }

    /// Points `fake://` channels at the bundled fake upstream at `base_url`.
    pub fn fake_upstream(mut self, base_url: impl Into<String>) -> Self {
        self.fake_base = Some(base_url.into());
        self
    }

    /// With `false`, a bare forwarder: authentication, body inspection and forwarding
    /// only — no slots, windows or billing. The baseline the benchmarks compare the
    /// full stack against (T2).
    pub fn limits(mut self, on: bool) -> Self {
        self.limits = on;
        self
    }

    /// Seeds tenant balances (a tenant that already has a balance keeps it) — from the
    /// books with a records database (B6), else from the configuration — and, with the
    /// books, every key's spend the store has no record of; then builds the router.
    /// A seeding write that fails transiently (no answer yet, replicas not acknowledging
    /// yet) is tried again for 10 s at most; then, or on a protocol error, the start
    /// fails with the store's error.
    pub async fn build(self) -> Result<Router, String> {
        let within = crate::seed::START_WRITES_WITHIN;
        for (name, balance) in self.opening_balances().await {
            let what = format!("seeding the balance of tenant {name:?}");
            let seeded =
                crate::seed::retrying(&what, within, || self.store.seed_balance(&name, balance))
                    .await
                    .map_err(|e| format!("{what}: {e}"))?;
            log_seed(&name, balance, seeded);
        }
        let mut keys = 0;
        for (books, key, spent) in self.opening_spends().await {
            let what = format!("seeding the spend of key {key}");
            keys += usize::from(
                crate::seed::retrying(&what, within, || {
                    self.store.seed_key_spend(&books, &key, spent)
                })
                .await
                .map_err(|e| format!("{what}: {e}"))?,
            );
        }
        if keys > 0 {
            tracing::info!(
                keys,
                "key spends the store had no record of seeded from the books"
            );
        }
        // Seeded above: one line per tenant, not a second "kept" for each.
        self.serve_router()
    }

    /// The balance each tenant starts with where its store has none: with a records
    /// database, what its books leave it (B6: opening balance and top-ups less what the
    /// ledger says was charged and is held — a restarted in-memory store forgets
    /// nothing), its tenants included; else the configuration's.
    async fn opening_balances(&self) -> Vec<(String, portcullis_core::Money)> {
        let filed = || {
            self.config
                .tenants()
                .iter()
                .map(|(n, &b)| (n.clone(), b))
                .collect()
        };
        let Some(d) = self
            .directory
            .as_ref()
            .filter(|_| self.config.database().ledger)
        else {
            return filed();
        };
        match crate::books::ledgered(d.records(), &self.config).await {
            Ok(books) => books
                .iter()
                .map(|b| (b.tenant.clone(), b.balance()))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "the records database did not answer the books: tenants without a balance in the store start from the configuration's");
                filed()
            }
        }
    }

    /// Every key's spend as the books tell it, with a records database keeping the
    /// ledger (B6); none without one, or when it does not answer (logged).
    async fn opening_spends(
        &self,
    ) -> Vec<(
        portcullis_core::Books,
        portcullis_core::SubjectKey,
        portcullis_core::Money,
    )> {
        let Some(d) = self
            .directory
            .as_ref()
            .filter(|_| self.config.database().ledger)
        else {
            return Vec::new();
        };
        crate::books::key_spends(d.records())
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the records database did not answer the books: key spends the store has no record of start from zero");
                Vec::new()
            })
    }

    /// The router. Balances are seeded here when the store answers at once (the
    /// in-memory store); with a remote store use [`Gateway::build`]. Fails if the
    /// configuration cannot be served (e.g. a `fake://` channel with no fake
    /// upstream, or a usage log that cannot be opened).
    pub fn router(self) -> Result<Router, String> {
        self.seed_balances();
        self.serve_router()
    }

    /// The router, the balances seeded already.
    fn serve_router(mut self) -> Result<Router, String> {
        self.start_ledger()?;
        let running = self.assemble()?;
        let token = self.config.admin_token.clone();
        let directory = self.directory.clone();
        let accept_traceparent = self.config.telemetry().accept_traceparent;
        let resolver = self.resolver();
        let polls = self.polls.clone();
        let stack = Arc::new(Stack::new(
            running,
            Box::new(move |config| self.reassemble(config)),
        ));
        if let Some((records, client)) = resolver {
            crate::resolve_pending::start(Arc::downgrade(&stack), records, client, polls);
        }
        // Admin and page routes, then everything else on the running (reloadable) stack.
        let mut app = crate::routes::admin::routes(token.clone(), stack.clone());
        if let Some(d) = directory {
            app = app.merge(crate::routes::keys::routes(token, d, stack.clone()));
        }
        let app = app
            .merge(crate::pages::routes())
            .fallback_service(Current(stack));
        Ok(app.layer(
            ServiceBuilder::new()
                // The gateway always makes its own request id (E3): the
                // client's is taken off first and kept apart, capped.
                .layer(MapRequestLayer::new(
                    take_client_request_id::<axum::body::Body> as fn(Request) -> Request,
                ))
                .layer(SetRequestIdLayer::x_request_id(NextId::default()))
                .layer(PropagateRequestIdLayer::x_request_id())
                // The span names the path only: a query string may hold an API key
                // (Gemini's `?key=`), and no log line may carry a secret.
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(move |req: &Request| request_span(req, accept_traceparent))
                        .on_response(crate::telemetry::RecordStatus::default())
                        // A 5xx the gateway answers (a store outage's 503s, a provider's
                        // errors) is counted in the metrics; at error level here it
                        // would be one line per request through an outage (D11).
                        .on_failure(
                            tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG),
                        ),
                )
                .layer(CatchPanicLayer::custom(panic_response)),
        ))
    }

    /// Seeds tenant balances where the store answers at once; spawns the rest.
    pub(crate) fn seed_balances(&self) {
        for (name, &balance) in self.config.tenants() {
            let mut seed = self.store.seed_balance(name, balance);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let name = name.clone();
            match std::pin::Pin::new(&mut seed).poll(&mut cx) {
                std::task::Poll::Ready(Ok(seeded)) => log_seed(&name, balance, seeded),
                std::task::Poll::Ready(Err(e)) => {
                    tracing::error!(tenant = %name, error = %e, "seeding a tenant balance failed")
                }
                std::task::Poll::Pending => {
                    tokio::spawn(async move {
                        match seed.await {
                            Ok(seeded) => log_seed(&name, balance, seeded),
                            Err(e) => tracing::error!(
                                tenant = %name,
                                error = %e,
                                "seeding a tenant balance failed"
                            ),
                        }
                    });
                }
            }
        }
    }

    /// The configuration served.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The stack of another configuration (same store, client and fake upstream), its
    /// tenant balances seeded: what a reload swaps in.
    fn reassemble(&self, config: Config) -> Result<Running<St>, String> {
        let next = Self {
            config,
            ..self.clone()
        };
        let running = next.assemble()?;
        if let Some(d) = &next.directory {
            d.set_config(&next.config);
        }
        next.seed_balances();
        Ok(running)
    }

    /// Starts the ledger's writer on the records database (B6), once.
    fn start_ledger(&mut self) -> Result<(), String> {
        let (Some(d), None) = (&self.directory, &self.ledger) else {
            return Ok(());
        };
        if !self.config.database().ledger || !self.limits {
            return Ok(());
        }
        let url = self.config.database().url.clone().unwrap_or_default();
        let spool = crate::ledger::spool_path(&self.config, &url);
        let sink = crate::ledger::LedgerSink::start(d.records().clone(), spool.clone())
            .map_err(|e| format!("ledger spool {}: {e}", spool.display()))?;
        self.ledger = Some(Arc::new(sink));
        Ok(())
    }

    /// What the resolver of pending attempts with an unknown outcome needs (B7): the
    /// ledger's database and the upstream client — only with a ledger. Without one,
    /// says once that such attempts wait for an operator.
    fn resolver(&self) -> Option<(Arc<portcullis_records::Records>, HttpClient)> {
        if !self.limits {
            return None;
        }
        match (&self.ledger, &self.directory) {
            (Some(_), Some(d)) => Some((d.records().clone(), self.client.clone())),
            _ => {
                tracing::info!(
                    "no records database ledger: attempts pending with an unknown outcome \
                     are resolved by an operator only (GET /admin/pending) (B7)"
                );
                None
            }
        }
    }

    /// Where usage records go: the ledger and the configured JSON-lines log (either,
    /// both or nowhere), counted for the metrics.
    fn usage_sink(&self) -> Result<Arc<dyn portcullis::UsageSink>, String> {
        let mut sinks: Vec<Arc<dyn portcullis::UsageSink>> = Vec::new();
        if let Some(ledger) = &self.ledger {
            sinks.push(ledger.clone());
        }
        if let Some(path) = &self.config.server().usage_log {
            sinks.push(Arc::new(
                crate::sink::JsonLines::open(path)
                    .map_err(|e| format!("usage log {}: {e}", path.display()))?,
            ));
        }
        let sink: Arc<dyn portcullis::UsageSink> = match sinks.len() {
            0 => Arc::new(()),
            1 => sinks.remove(0),
            _ => Arc::new(crate::sink::Tee(sinks)),
        };
        Ok(Arc::new(crate::metrics::Counting::new(sink)))
    }

    /// Failover across the registry's channels, with the vendors' first-chunk rules.
    fn failover_layer(
        &self,
        registry: Arc<portcullis::core::upstream::UpstreamRegistry>,
    ) -> FailoverLayer {
        FailoverLayer::new(registry)
            .config(self.config.failover().clone())
            .chunk_classifier(portcullis_dialects::chunk_kind)
    }

    /// The provider limits. On a store across the network, the channel's capacity lease
    /// is taken with its provider windows in one round trip (the capacity layer below
    /// holds it).
    fn upstream_layer(
        &self,
        registry: Arc<portcullis::core::upstream::UpstreamRegistry>,
    ) -> UpstreamLimitLayer<St> {
        let mut config = portcullis::upstream::UpstreamConfig::default();
        config.failure_mode = self.config.store().windows_failure.into();
        let upstream = UpstreamLimitLayer::new(self.store.clone(), registry).config(config);
        if <St as portcullis::core::ChannelStore>::SAVES_ROUND_TRIPS {
            // Channel capacity leases live as long as slot leases (`[limits] lease_ttl`):
            // both heal within the same time after a crash.
            upstream.join_capacity(self.config.limits().lease_ttl)
        } else {
            upstream
        }
    }

    /// The concurrency slots. On a store across the network, the slot is decided with
    /// the windows in one round trip (the window layer sits right below the slot layer
    /// for that).
    fn slot_layer(&self) -> ConcurrencySlotLayer<St> {
        let limits = self.config.limits();
        let slots = ConcurrencySlotLayer::new(self.store.clone())
            .lease_ttl(limits.lease_ttl)
            .max_wait(limits.slot_max_wait)
            .failure_mode(self.config.store().slots_failure.into());
        if <St as portcullis::core::JointStore>::SAVES_ROUND_TRIPS {
            slots.join_windows()
        } else {
            slots
        }
    }

    /// The rolling windows (W10: waits for room up to `[limits] rolling_max_wait`).
    fn window_layer(&self) -> AnchoredWindowLayer<St> {
        AnchoredWindowLayer::new(self.store.clone())
            .max_wait(self.config.limits().rolling_max_wait)
            .failure_mode(self.config.store().windows_failure.into())
    }

    /// The capacity queue (Q1–Q5): its leases live as long as slot leases.
    fn capacity_layer(&self) -> CapacityQueueLayer<St> {
        let queue = self.config.queue();
        CapacityQueueLayer::new(self.store.clone())
            .lease_ttl(self.config.limits().lease_ttl)
            .failure_mode(self.config.store().capacity_failure.into())
            .max_wait(queue.max_wait)
            .default_deadline(queue.default_deadline)
            .abort_grace(queue.abort_grace)
            .queue_limits(QueueLimits::new(queue.max_depth, queue.max_per_tenant))
    }

    /// Billing, its usage records going to `sink`.
    fn billing_layer(&self, sink: Arc<dyn portcullis::UsageSink>) -> BillingGateLayer<St> {
        BillingGateLayer::new(self.store.clone())
            .sink(move |r| sink.record(r))
            .failure_mode(self.config.store().billing_failure.into())
            .cut_streams(self.config.billing().cut_streams.into())
    }

    /// The stall and lifetime bounds of every proxied response (L3).
    fn stall_layer(&self) -> crate::stall::StallLayer {
        let server = self.config.server();
        crate::stall::StallLayer::new(crate::stall::StallLimits {
            stall: server.stall_timeout,
            lifetime: server.max_response_lifetime,
        })
    }

    /// The model and operational routes of the current configuration (no request-id,
    /// tracing or panic layers, no admin routes), and the live state the admin
    /// endpoints read.
    pub(crate) fn assemble(&self) -> Result<Running<St>, String> {
        // The recorder first: the catalog's channels and the layers bind their metric
        // handles to it.
        crate::metrics::handle();
        let catalog = Arc::new(Catalog::new(&self.config, self.fake_base.as_deref())?);
        let tasks = self
            .config
            .tasks()
            .iter()
            .map(|(n, t)| (n.clone(), t.budget.clone(), t.owners.clone()));
        let keys = KeyTable::serving(self.config.keys.clone(), tasks, self.directory.clone());
        let sink = self.usage_sink()?;
        let auth_keys = keys.clone();
        let native_keys = keys.clone();
        let native = move |r| native_for_key(&native_keys, r);
        // ErrorMapping (outermost: Infallible, dialect bodies) → identify the key →
        // read and inspect the body → slot (C2: before routing and billing; after the
        // body, so that it sits right above the windows and can be decided with them in
        // one store call, see `portcullis::ConcurrencySlotLayer::join_windows`) →
        // windows (need the demand) → failover (attempts across channels; each attempt
        // passes the layers below on its own, F1) → upstream limits (skip channels over a provider
        // limit or cooling down; count the request on the first that fits, U1) →
        // capacity queue (picks the channel among those left; queued
        // requests hold no money, Q5/B3) → billing (needs to know whether the
        // subscription covered the request, W8) → forward.
        let allow = Arc::new(AllowLists::new(self.config.forwarding()));
        let forward = Forward::new(
            self.client.clone(),
            catalog.clone(),
            allow.clone(),
            self.homes.clone(),
            self.polls.clone(),
        );
        let response_headers = crate::forward::ResponseHeadersLayer::new(allow);
        let live_catalog = catalog.clone();
        let registry = Arc::new(crate::catalog::upstream_registry(&self.config));
        if let Some(hook) = &self.on_registry {
            hook(&registry);
        }
        let failover = self.failover_layer(registry.clone());
        let upstream = self.upstream_layer(registry);
        let prepare = PrepareLayer::new(catalog.clone(), self.homes.clone());
        let slots = self.slot_layer();
        let auth = FilterLayer::new(move |req| auth_keys.authenticate(req));
        // Outermost: a response the client stops reading is cut on a timer (L3).
        let stall = self.stall_layer();
        // Identify, inspect and trace the request, in the client's dialect, before any
        // limit (the bare gateway has only this in front of the forwarder).
        let front = ServiceBuilder::new()
            .layer(stall)
            .map_request(native)
            .layer(ErrorMappingLayer::new())
            .map_err(self.rejections.observer())
            .map_request(wire_dialect)
            .layer(crate::telemetry::RequestTraceLayer)
            .layer(response_headers)
            .layer(auth)
            .layer(prepare)
            .map_request(crate::telemetry::record_request);
        let api = if self.limits {
            crate::routes::api::routes(
                front
                    .layer(slots)
                    .layer(self.window_layer())
                    .layer(failover.clone())
                    .layer(upstream.clone())
                    .layer(self.capacity_layer())
                    .layer(self.billing_layer(sink.clone()))
                    .service(forward),
            )
        } else {
            crate::routes::api::routes(front.service(forward))
        };

        let live = Arc::new(Live {
            failover,
            catalog: live_catalog,
            channels: self.config.channels.clone(),
            store: self.store.clone(),
            sink: sink.clone(),
            rejections: self.rejections.clone(),
        });
        let ops = Arc::new(Ops {
            store: self.store.clone(),
            keys,
            catalog,
            on_scrape: self.on_scrape.clone(),
            metrics_token: self.config.metrics_token.clone(),
            ledger: self
                .ledger
                .as_ref()
                .and(self.directory.as_ref())
                .map(|d| d.records().clone()),
        });
        let routes = crate::routes::ops::routes(api, ops);
        Ok(Running {
            config: self.config.clone(),
            routes,
            live,
        })
    }
}

/// The request id header.
const X_REQUEST_ID: http::header::HeaderName =
    http::header::HeaderName::from_static("x-request-id");

/// The longest client request id kept (bytes); a longer one is cut to this.
pub const CLIENT_REQUEST_ID_MAX: usize = 128;

/// The client's `x-request-id`, as the usage record and the log keep it: trimmed,
/// printable ASCII only (`None` otherwise, or when empty), cut to
/// [`CLIENT_REQUEST_ID_MAX`] bytes.
pub fn client_request_id(value: &http::HeaderValue) -> Option<Arc<str>> {
    let v = value.as_bytes().trim_ascii();
    if v.is_empty() || !v.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return None;
    }
    let v = &v[..v.len().min(CLIENT_REQUEST_ID_MAX)];
    std::str::from_utf8(v).ok().map(Arc::from)
}

/// Takes every `x-request-id` the client sent off the request, so that the gateway
/// makes its own (the one it answers with, sends upstream and records as the
/// idempotency key), and keeps the first, capped, as [`portcullis::billing::ClientRequestId`].
fn take_client_request_id<B>(mut req: http::Request<B>) -> http::Request<B> {
    if let http::header::Entry::Occupied(e) = req.headers_mut().entry(X_REQUEST_ID) {
        let (_, mut values) = e.remove_entry_mult();
        let kept = values.next().as_ref().and_then(client_request_id);
        drop(values);
        if let Some(id) = kept {
            req.extensions_mut()
                .insert(portcullis::billing::ClientRequestId(id));
        }
    }
    req
}

/// The tracing span of one request: method, path (never the query), the gateway's
/// request id and the client's own (capped), and the fields `crate::telemetry` records
/// (OpenTelemetry's GenAI and HTTP attributes, the gateway's decision), a child of the
/// client's `traceparent` when `accept_traceparent`. Nothing is looked up when debug
/// spans are off.
fn request_span<B>(req: &http::Request<B>, accept_traceparent: bool) -> tracing::Span {
    if tracing::level_filters::LevelFilter::current() < tracing::Level::DEBUG {
        return tracing::Span::none();
    }
    // Health probes and metrics scrapes come every few seconds and tell nothing: no
    // span (nor an exported trace) for them.
    if matches!(req.uri().path(), "/healthz" | "/metrics") {
        return tracing::Span::none();
    }
    let id = req
        .headers()
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let client_id = req
        .extensions()
        .get::<portcullis::billing::ClientRequestId>()
        .map_or("", |c| &*c.0);
    use tracing::field::Empty;
    let span = tracing::debug_span!(
        "request",
        method = %req.method(),
        path = req.uri().path(),
        id,
        client_id,
        otel.name = Empty,
        otel.kind = Empty,
        otel.status_code = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        gen_ai.operation.name = Empty,
        gen_ai.provider.name = Empty,
        gen_ai.request.model = Empty,
        gen_ai.request.stream = Empty,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.time_to_first_chunk = Empty,
        portcullis.key = Empty,
        portcullis.tenant = Empty,
        portcullis.channel = Empty,
        portcullis.attempts = Empty,
        portcullis.rejection.code = Empty,
        portcullis.rejection.layer = Empty,
    );
    crate::telemetry::open_request_span(&span, req.method(), req.headers(), accept_traceparent);
    span
}

/// Request ids: a per-process random prefix and a counter.
#[derive(Clone, Default)]
struct NextId(Arc<portcullis::core::id::Sequence>);

impl MakeRequestId for NextId {
    fn make_request_id<B>(&mut self, _: &http::Request<B>) -> Option<RequestId> {
        let p = portcullis::core::id::process_tag() as u32;
        let n = self.0.next();
        http::HeaderValue::try_from(format!("pc-{p:08x}-{n}"))
            .ok()
            .map(RequestId::new)
    }
}

pub(crate) fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let r = portcullis::core::Rejection::new(
        portcullis::core::GatewayCode::Internal,
        portcullis::core::LayerKind::Gateway,
    );
    render(&r, Dialect::Native, "").into_response()
}

/// Says what seeding a tenant's balance did: written (the tenant had no record) or kept
/// (a running balance is never reset).
fn log_seed(tenant: &str, balance: portcullis::core::Money, seeded: bool) {
    if seeded {
        tracing::info!(
            tenant,
            balance,
            "tenant balance seeded from the configuration"
        );
    } else {
        tracing::info!(
            tenant,
            configured = balance,
            "tenant balance kept: the store already holds its record"
        );
    }
}
