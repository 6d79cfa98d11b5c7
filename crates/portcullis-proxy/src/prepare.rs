//! Reads the request body (bounded), learns the model and the demand, and refuses bad
//! input with a clear error before anything is counted against the windows.
//!
//! Imports go one way: this module reads [`crate::catalog`], [`crate::config`] and
//! [`crate::homes`]; the forwarder and the telemetry read the [`Facts`] it leaves on the
//! request, and nothing here reads them.

use crate::catalog::{Catalog, Reach};
use crate::config::KeyEntry;
use crate::homes::Homes;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full, Limited};
use portcullis::BoxError;
use portcullis::core::homes::Home;
use portcullis::failover::{FallbackRequest, ModelFallback};
use portcullis_core::{
    Demand, Dialect, GatewayCode, LayerKind, MAX_STORABLE_MONEY, Price, Rejection,
};
use portcullis_dialects::estimate::FALLBACK_MAX_OUTPUT_TOKENS;
use portcullis_dialects::multipart::inspect_image_edit;
use portcullis_dialects::translate::Wire;
use portcullis_dialects::{Operation, RequestFacts, inspect_request, object_path};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// What the proxy learned about a request, for the layers and the forwarder.
#[derive(Clone, Debug)]
pub struct Facts(pub Arc<RequestFacts>);

/// The response future of [`Prepare`]. Boxed on purpose: the body is read to its
/// end (bounded, awaited) before the inner service is called, and that read is an
/// `async` block whose type has no name; the box is one allocation per request, next
/// to the buffered body it awaits.
pub type PrepareFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// Applies [`Prepare`].
#[derive(Clone)]
pub struct PrepareLayer {
    catalog: Arc<Catalog>,
    homes: Arc<Homes>,
}

impl PrepareLayer {
    /// A layer on `catalog`, sending requests about provider-side objects to the homes
    /// `homes` knows (P6).
    pub fn new(catalog: Arc<Catalog>, homes: Arc<Homes>) -> Self {
        Self { catalog, homes }
    }
}

impl<S> Layer<S> for PrepareLayer {
    type Service = Prepare<S>;
    fn layer(&self, inner: S) -> Prepare<S> {
        Prepare {
            inner,
            catalog: self.catalog.clone(),
            homes: self.homes.clone(),
        }
    }
}

/// Buffers the body within `max_body_bytes` (413 beyond: the body is needed whole
/// to estimate the demand and, later, to replay an attempt), inspects it in the
/// client's dialect (400 malformed, 404 unknown model, 403 model not allowed), and
/// puts [`Facts`], the [`Demand`] and the [`Dialect`] in the
/// request's extensions.
#[derive(Clone)]
pub struct Prepare<S> {
    inner: S,
    catalog: Arc<Catalog>,
    homes: Arc<Homes>,
}

fn reject(code: GatewayCode, message: impl Into<String>) -> BoxError {
    Box::new(Rejection::new(code, LayerKind::Request).with_message(message.into()))
}

impl<S, B> Service<Request<B>> for Prepare<S>
where
    S: Service<Request<Full<Bytes>>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = PrepareFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let catalog = self.catalog.clone();
        let homes = self.homes.clone();
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let dialect = parts
                .extensions
                .get::<Dialect>()
                .copied()
                .unwrap_or_else(|| Dialect::from_path(parts.uri.path()));
            let bytes = read_body(body, &catalog).await?;
            let (mut facts, home) = inspect(&parts, dialect, &bytes, &catalog, &homes).await?;
            let Some(model) = catalog.model(&facts.model) else {
                return Err(reject(
                    GatewayCode::NotFound,
                    format!("The model `{}` does not exist.", facts.model),
                ));
            };
            if let Some(key) = parts.extensions.get::<Arc<KeyEntry>>() {
                if !key.models.is_empty() && !key.models.iter().any(|m| m == &facts.model) {
                    return Err(reject(
                        GatewayCode::Forbidden,
                        format!("This API key may not use the model `{}`.", facts.model),
                    ));
                }
            }
            let generate = facts.operation == Operation::Generate;
            if generate && facts.max_output_tokens == 0 {
                facts.max_output_tokens = FALLBACK_MAX_OUTPUT_TOKENS;
            }
            // Per choice: the fallback contract (context window, output limit) applies to
            // each choice; the reservation multiplies it by the choices (W5).
            let max_output = facts.max_output_tokens;
            let demand = demand_within_store_limits(
                &facts,
                catalog.reserve_price(model, &facts.model),
                &catalog.reservation,
            )?;
            // An OpenAI stream reports usage only when asked to: ask, so the stream can
            // be settled at its real cost instead of staying pending (B4). The client
            // then also receives the final usage chunk (`choices: []`), which OpenAI's
            // SDKs accept.
            let bytes = match portcullis_dialects::providers::ask_for_stream_usage(
                dialect,
                facts.stream,
                facts.usage_reported,
                &bytes,
            ) {
                Some(asked) => Bytes::from(asked),
                None => bytes,
            };
            parts.extensions.insert(dialect);
            if matches!(facts.operation, Operation::CountTokens | Operation::Object) {
                parts.extensions.insert(portcullis::NotBilled);
            }
            let key = parts.extensions.get::<Arc<KeyEntry>>().cloned();
            // A continuation may name another model than the one its object was made
            // with: the home channel must serve the model asked for.
            let asked = home.is_some().then(|| facts.model.clone());
            let facts = Arc::new(facts);
            // A fallback model answers generation only: an embedding's vectors are
            // specific to the model that made them, a token count to its tokenizer.
            // A request bound to its object's home takes no other model either.
            let offer = (generate && home.is_none())
                .then(|| {
                    fallback(
                        &catalog,
                        key.as_deref(),
                        dialect,
                        &parts.uri,
                        &bytes,
                        &facts,
                        max_output,
                    )
                })
                .flatten();
            if let Some(fb) = offer {
                parts.extensions.insert(fb);
            }
            let reach = Reach::of(
                dialect,
                facts.operation,
                parts.uri.path(),
                facts.continues.is_some(),
            );
            if let Some(refusal) = continuation_without_home(&catalog, reach, &facts, &parts.uri) {
                return Err(refusal);
            }
            let boundary = key.as_ref().and_then(|k| k.allowed_vendors.as_deref());
            // A reference count, not a copy of the name: it is read only on refusal.
            let asked_for = facts.clone();
            if !model_extensions(
                &mut parts.extensions,
                &catalog,
                reach,
                boundary,
                facts,
                demand,
            ) {
                return Err(reject(
                    GatewayCode::Forbidden,
                    format!(
                        "No channel of `{}` is among the vendors this API key's \
                         requests may be sent to.",
                        asked_for.model
                    ),
                ));
            }
            if let (Some(home), Some(asked)) = (&home, &asked) {
                let only = home_only(&catalog, home, asked, dialect)?;
                parts.extensions.insert(only);
            }
            inner
                .call(Request::from_parts(parts, Full::new(bytes)))
                .await
                .map_err(Into::into)
        })
    }
}

/// The request body, whole: bounded in size and in time, so a client trickling its
/// body (slow loris) gets 408 instead of holding its slot. Not tower-http's
/// `RequestBodyLimitLayer` / `TimeoutLayer`: those answer 413 / 408 with a body of their
/// own (plain text, or empty), where the client must get the gateway's rejection in its
/// own dialect (E1) with the reason; and the limit is needed here anyway, where the body
/// is collected to be read.
async fn read_body<B>(body: B, catalog: &Catalog) -> Result<Bytes, BoxError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let read = tokio::time::timeout(
        catalog.body_read_timeout,
        Limited::new(body, catalog.max_body_bytes).collect(),
    )
    .await
    .map_err(|_| {
        reject(
            GatewayCode::RequestTimeout,
            format!(
                "The request body was not received within {} s.",
                catalog.body_read_timeout.as_secs()
            ),
        )
    })?;
    match read {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(reject(
            GatewayCode::PayloadTooLarge,
            format!(
                "The request body is larger than {} bytes.",
                catalog.max_body_bytes
            ),
        )),
        Err(_) => Err(reject(
            GatewayCode::InvalidRequest,
            "The request body could not be read.",
        )),
    }
}

/// What the request asks for, read in the client's dialect (400 when malformed), and
/// the home of the provider-side object it is about or continues, if any (P6).
async fn inspect(
    parts: &http::request::Parts,
    dialect: Dialect,
    bytes: &Bytes,
    catalog: &Catalog,
    homes: &Homes,
) -> Result<(RequestFacts, Option<Home>), BoxError> {
    let object = matches!(dialect, Dialect::OpenAi | Dialect::Native)
        .then(|| object_path(parts.uri.path()))
        .flatten();
    // A request about a provider-side object: no body to read, the model and the only
    // channel it may go to are the object's home (P6).
    if let Some(id) = object {
        let home = home_of(homes, catalog, id).await?;
        return Ok((object_facts(&home), Some(home)));
    }
    let default_max = |m: &str| catalog.model(m).and_then(|c| c.max_output_tokens);
    let facts = if parts.uri.path().ends_with("/images/edits") {
        // The one multipart route: images to edit are files (P6).
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        inspect_image_edit(content_type, bytes, &default_max)
    } else {
        inspect_request(dialect, parts.uri.path(), bytes, &default_max)
    }
    .map_err(|e| reject(GatewayCode::InvalidRequest, e.to_string()))?;
    let home = match &facts.continues {
        Some(id) => homes.find(id).await.map_err(home_unreadable)?,
        None => None,
    };
    Ok((facts, home))
}

/// The one candidate a request bound to its object's `home` may go to: the home channel
/// only, never another credential, where the object does not exist (no failover across
/// channels, no fallback model); 502 when that channel does not serve `asked`.
fn home_only(
    catalog: &Catalog,
    home: &Home,
    asked: &str,
    dialect: Dialect,
) -> Result<portcullis_core::Candidates, BoxError> {
    catalog
        .home_candidates(asked, &home.channel, dialect)
        .ok_or_else(|| {
            reject(
                GatewayCode::NoUpstream,
                format!(
                    "The channel that holds this object (`{}`) does not serve `{asked}`.",
                    home.channel
                ),
            )
        })
}

/// The home of object `id`, or the client's 404: an object this gateway did not see
/// created is not sent anywhere (any channel but its creator's could only 404 it).
async fn home_of(homes: &Homes, catalog: &Catalog, id: &str) -> Result<Home, BoxError> {
    let home = homes.find(id).await.map_err(home_unreadable)?;
    match home {
        Some(h) if catalog.model(&h.model).is_some() => Ok(h),
        _ => Err(reject(
            GatewayCode::NotFound,
            format!("No object with id `{id}` was created through this gateway."),
        )),
    }
}

/// A store failure while reading a home: 503, retryable.
fn home_unreadable(e: portcullis::core::StoreError) -> BoxError {
    tracing::warn!(error = %e, "object home lookup failed");
    reject(
        GatewayCode::StoreUnavailable,
        "The gateway cannot find where this object lives right now. Retry shortly.",
    )
}

/// What a request about an object at `home` asks for: a request under the object's
/// model, nothing else.
fn object_facts(home: &Home) -> RequestFacts {
    RequestFacts {
        operation: Operation::Object,
        model: home.model.to_string(),
        continues: None,
        stream: false,
        input_tokens: 0,
        max_output_tokens: 0,
        choices: 1,
        images: 0,
        videos: 0,
        has_tools: false,
        structured_output: false,
        usage_reported: false,
    }
}

/// The request's demand under `model`'s price, through the dialect crate's own rule
/// ([`RequestFacts::demand`]: output tokens and the money upper bound are multiplied
/// by the choices the request asks for, saturating). A money upper bound above
/// [`MAX_STORABLE_MONEY`] (what every store can hold exactly) is a 400 here, before any
/// store is asked, instead of a store failure later.
///
/// Its money is then the hold `reservation` gives (B8): the upper bound by default,
/// else the estimate and at most the cap. Only the money: the tokens, images and videos
/// the windows and provider limits count keep the upper bound (W5, U1).
fn demand_within_store_limits(
    facts: &RequestFacts,
    price: &Price,
    reservation: &crate::reserve::Reservation,
) -> Result<Demand, BoxError> {
    let mut demand = facts.demand(price);
    if demand.money > MAX_STORABLE_MONEY {
        return Err(reject(
            GatewayCode::InvalidRequest,
            format!(
                "The most this request could cost ({} output tokens × {} choice(s) of `{}`) \
                 is more than the gateway can reserve ({} minor units). Lower the maximum \
                 output tokens or the number of choices.",
                facts.max_output_tokens,
                facts.choices.max(1),
                facts.model,
                MAX_STORABLE_MONEY
            ),
        ));
    }
    demand.money = reservation.hold(facts, price);
    Ok(demand)
}

/// What the layers and the forwarder read about a request for `facts.model`: its
/// demand under the model's price, its estimate toward provider limits (under the
/// rules of the vendor of each channel it may reach, U2; output counted for every
/// choice), its candidates, the model id and the facts.
///
/// With a data `boundary` (X4), only channels of its vendors are candidates; false when
/// the model has channels but none within the boundary.
fn model_extensions(
    x: &mut http::Extensions,
    catalog: &Catalog,
    reach: Reach,
    boundary: Option<&[Dialect]>,
    facts: Arc<RequestFacts>,
    demand: Demand,
) -> bool {
    x.insert(demand);
    match reach {
        // The candidates speak the client's dialect: its vendor's rules (U2).
        Reach::Own(d) => {
            x.insert(portcullis_dialects::rate_estimate(d, &facts));
        }
        // Any vendor's channel may serve it: each is charged by its own rules.
        Reach::Translated(_) => {
            x.insert(portcullis_dialects::rate_estimates(&facts));
        }
    }
    let mut within = true;
    if let Some(candidates) = catalog.candidates_in(&facts.model, reach) {
        let candidates = match boundary {
            None => candidates,
            Some(allowed) => within_boundary(catalog, &facts.model, candidates, allowed),
        };
        within = !candidates.channels().is_empty();
        if within {
            x.insert(candidates);
        }
    }
    x.insert(reach);
    x.insert(portcullis_core::ModelId(facts.model.as_str().into()));
    x.insert(Facts(facts));
    within
}

/// The `candidates` of `model` whose vendor is `allowed` (X4).
fn within_boundary(
    catalog: &Catalog,
    model: &str,
    candidates: portcullis_core::Candidates,
    allowed: &[Dialect],
) -> portcullis_core::Candidates {
    let inside = |c: &portcullis_core::capacity::ChannelRef| {
        catalog
            .route(model, &c.name)
            .is_some_and(|r| allowed.contains(&r.dialect))
    };
    if candidates.channels().iter().all(inside) {
        return candidates;
    }
    portcullis_core::Candidates::new(candidates.channels().iter().filter(|c| inside(c)).cloned())
}

/// Why a fallback model does not meet a request's contract (F11), or `None` if it
/// does: tools, structured output, image and video input, context window, output
/// limit, the key's allowed models, and a channel speaking the client's dialect.
pub fn fallback_refusal(
    catalog: &Catalog,
    key: Option<&KeyEntry>,
    dialect: Dialect,
    facts: &RequestFacts,
    max_output: u64,
    to: &str,
) -> Option<&'static str> {
    let Some(m) = catalog.model(to) else {
        return Some("unknown model");
    };
    let has = |cap: &str| m.capabilities.iter().any(|c| c == cap);
    if facts.has_tools && !has("tools") {
        return Some("tools");
    }
    if facts.structured_output && !has("structured_output") {
        return Some("structured output");
    }
    if facts.images > 0 && !has("vision") {
        return Some("image input");
    }
    if facts.videos > 0 && !has("video") {
        return Some("video input");
    }
    if m.context_window
        .is_some_and(|w| facts.input_tokens.saturating_add(max_output) > w)
    {
        return Some("context window");
    }
    if m.output_limit.is_some_and(|l| max_output > l) {
        return Some("max output");
    }
    if key.is_some_and(|k| !k.models.is_empty() && !k.models.iter().any(|x| x == to)) {
        return Some("not allowed for the key");
    }
    // A fallback model is reached as the request is: generation requests through every
    // vendor they translate to (X1, F11).
    if !catalog.serves_in(to, Reach::Translated(dialect)) {
        return Some("no channel that can serve the client's dialect");
    }
    // X4: the data boundary holds for a fallback as for the first attempt.
    if let Some(allowed) = key.and_then(|k| k.allowed_vendors.as_deref()) {
        let inside = catalog
            .candidates_in(to, Reach::Translated(dialect))
            .map(|c| within_boundary(catalog, to, c, allowed))
            .is_some_and(|c| !c.channels().is_empty());
        if !inside {
            return Some("no channel within the key's data boundary");
        }
    }
    None
}

/// A Responses request continuing provider-side state (`previous_response_id`) for
/// a model no OpenAI channel serves: the client's 400, naming the field (X1). With
/// an OpenAI channel it goes there (its home when the gateway knows it, P6).
fn continuation_without_home(
    catalog: &Catalog,
    reach: Reach,
    facts: &RequestFacts,
    uri: &http::Uri,
) -> Option<BoxError> {
    let continues =
        facts.continues.is_some() && Wire::of(reach.client(), uri.path()) == Some(Wire::Responses);
    (continues && !catalog.serves_in(&facts.model, Reach::Own(Dialect::OpenAi))).then(|| {
        reject(
            GatewayCode::InvalidRequest,
            format!(
                "`previous_response_id` continues a response held by OpenAI, and no OpenAI \
                 channel serves `{}`: send the whole conversation as `input` instead.",
                facts.model
            ),
        )
    })
}

/// The offer of the configured fallback model, when it meets the contract (F11). The
/// contract is checked now (it is cheap); the request is rewritten only if failover
/// takes the offer.
fn fallback(
    catalog: &Arc<Catalog>,
    key: Option<&KeyEntry>,
    dialect: Dialect,
    uri: &http::Uri,
    body: &Bytes,
    facts: &Arc<RequestFacts>,
    max_output: u64,
) -> Option<ModelFallback<Full<Bytes>>> {
    let to = catalog.model(&facts.model)?.fallback.as_deref()?;
    if let Some(why) = fallback_refusal(catalog, key, dialect, facts, max_output, to) {
        tracing::debug!(from = %facts.model, to, why, "fallback model does not meet the request's contract");
        return None;
    }
    let (catalog, uri, body, facts) = (catalog.clone(), uri.clone(), body.clone(), facts.clone());
    let boundary = key.and_then(|k| k.allowed_vendors.clone());
    let target: Arc<str> = Arc::from(to);
    let to = target.clone();
    Some(ModelFallback::new(target, move || {
        rewrite_for(
            &catalog,
            dialect,
            &uri,
            &body,
            &facts,
            &to,
            boundary.as_deref(),
        )
    }))
}

/// The request rewritten for model `to`: the model named in the body (or, for Gemini,
/// the path), and the extensions of that model.
fn rewrite_for(
    catalog: &Catalog,
    dialect: Dialect,
    uri: &http::Uri,
    body: &Bytes,
    facts: &RequestFacts,
    to: &str,
    boundary: Option<&[Dialect]>,
) -> Option<FallbackRequest<Full<Bytes>>> {
    let model = catalog.model(to)?;
    let (uri, body) = match dialect {
        Dialect::Gemini => {
            let path = uri.path().replacen(
                &format!("/models/{}:", facts.model),
                &format!("/models/{to}:"),
                1,
            );
            let pq = match uri.query() {
                Some(q) => format!("{path}?{q}"),
                None => path,
            };
            (http::Uri::try_from(pq).ok()?, body.clone())
        }
        _ => {
            let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
            v.as_object_mut()?
                .insert("model".into(), serde_json::Value::String(to.to_owned()));
            (uri.clone(), Bytes::from(serde_json::to_vec(&v).ok()?))
        }
    };
    let mut facts = facts.clone();
    facts.model = to.to_owned();
    // A fallback whose money upper bound no store can hold is not offered.
    let demand = demand_within_store_limits(
        &facts,
        catalog.reserve_price(model, to),
        &catalog.reservation,
    )
    .ok()?;
    let reach = Reach::of(
        dialect,
        facts.operation,
        uri.path(),
        facts.continues.is_some(),
    );
    Some(FallbackRequest {
        uri,
        body: Full::new(body),
        extensions: {
            let mut x = http::Extensions::new();
            model_extensions(&mut x, catalog, reach, boundary, Arc::new(facts), demand);
            x
        },
    })
}
