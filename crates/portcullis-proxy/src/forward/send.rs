//! The forwarder ([`Forward`]): the innermost service of the proxy. It sends one
//! attempt to its channel within `upstream_timeout` and hands back the answer's head
//! as the client gets it, with a body that records the usage (`body.rs`, `usage.rs`).

use super::body::ForwardBody;
use super::client::HttpClient;
use super::error::{not_answered, timed_out};
use super::headers::{AllowLists, answer_headers};
use super::request::{
    creates_object, gemini_method_served, rename_model, unserved_gemini_method, upstream_request,
};
use super::translate::Translation;
use super::usage::{JobPoll, Sent, Unreported, Watch};
use crate::catalog::{Catalog, Reach, Route};
use crate::homes::Homes;
use crate::prepare::Facts;
use crate::resolve_pending::Polls;
use crate::telemetry::AttemptTrace;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Either;
use http_body_util::Full;
use portcullis::BoxError;
use portcullis::core::homes::Home;
use portcullis_core::{Dialect, GatewayCode, LayerKind, Rejection, UsageRecorder};
use portcullis_dialects::UsageWatcher;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;

/// The innermost service of the proxy: forwards to a channel.
///
/// One `Arc` inside: the layers above clone their inner service for every request (the
/// router once, each layer whose future calls later once more), and the pooled
/// client alone holds several reference counts that both cores would bounce.
#[derive(Clone)]
pub struct Forward(Arc<Shared>);

struct Shared {
    client: HttpClient,
    catalog: Arc<Catalog>,
    allow: Arc<AllowLists>,
    homes: Arc<Homes>,
    polls: Arc<Polls>,
}

impl Forward {
    /// A forwarder on `client` and `catalog`, sending on the request headers `allow`
    /// lets through and remembering in `homes` the channel of every provider-side
    /// object an answer creates (P6), and handing to `polls` the final status of a video
    /// job a client polls (B7).
    pub fn new(
        client: HttpClient,
        catalog: Arc<Catalog>,
        allow: Arc<AllowLists>,
        homes: Arc<Homes>,
        polls: Arc<Polls>,
    ) -> Self {
        Self(Arc::new(Shared {
            client,
            catalog,
            allow,
            homes,
            polls,
        }))
    }
}

/// The response future of [`Forward`]: one attempt upstream. Boxed on purpose: the
/// attempt is an `async fn` (connect, send, await the head, with timeouts), whose type
/// has no name; the box is one allocation per attempt, beside a network round trip.
pub type ForwardFuture =
    Pin<Box<dyn Future<Output = Result<Response<ForwardBody>, BoxError>> + Send>>;

impl Service<Request<Full<Bytes>>> for Forward {
    type Response = Response<ForwardBody>;
    type Error = BoxError;
    type Future = ForwardFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The pooled client is always ready; connections are made per request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let shared = self.0.clone();
        // Taken here, inside the attempt span (the future runs in it too).
        let trace = AttemptTrace::of(&req);
        Box::pin(async move { shared.attempt(req, trace).await })
    }
}

impl Shared {
    /// One attempt: the request rewritten for its channel and sent, and the answer as
    /// the client gets it.
    async fn attempt(
        &self,
        req: Request<Full<Bytes>>,
        trace: Option<AttemptTrace>,
    ) -> Result<Response<ForwardBody>, BoxError> {
        let (mut parts, body) = req.into_parts();
        let facts = parts
            .extensions
            .get::<Facts>()
            .cloned()
            .ok_or("forwarder called without prepared facts")?;
        let dialect = parts
            .extensions
            .get::<Dialect>()
            .copied()
            .unwrap_or(Dialect::Native);
        let model = &facts.0.model;
        let reach = parts
            .extensions
            .get::<Reach>()
            .copied()
            .unwrap_or(Reach::Own(dialect));
        let route = self.route(&parts.extensions, model, reach)?;
        // X1: a channel of another vendor gets the request in its own dialect.
        let translation = matches!(reach, Reach::Translated(_))
            .then(|| {
                Translation::between(dialect, &parts.uri, route.dialect, model, facts.0.stream)
            })
            .flatten();
        // Settled at the price of the model the channel serves it as (X1).
        let price = self.catalog.served_price(model, &route);
        let recorder = parts.extensions.get::<UsageRecorder>().cloned();
        // The last guard of "only what is priced is sent" (the route table refuses
        // other Gemini methods first).
        if translation.is_none()
            && route.dialect == Dialect::Gemini
            && !gemini_method_served(parts.uri.path())
        {
            return Err(unserved_gemini_method());
        }
        // A translated Responses answer is written by the gateway: no provider keeps
        // an object a later request could continue.
        let creates = translation.is_none() && creates_object(facts.0.operation, parts.uri.path());
        // X1: the channel may know the model by another id.
        let upstream = route.upstream_model(model).cloned();
        let sent_model = upstream.as_deref().unwrap_or(model);
        let body = match (&translation, &upstream) {
            (Some(t), _) => {
                let default_max = self
                    .catalog
                    .model(model)
                    .and_then(|m| m.max_output_tokens)
                    .unwrap_or(facts.0.max_output_tokens)
                    .max(1);
                t.request(&mut parts, body, sent_model, default_max).await?
            }
            (None, Some(id)) => rename_model(route.dialect, &mut parts, body, model, id).await?,
            (None, None) => body,
        };
        // B7: an OpenAI channel can be asked later for the object its answer names (a
        // generation's, a video job's).
        let retrieval = (route.dialect == Dialect::OpenAi
            && matches!(
                facts.0.operation,
                portcullis_dialects::Operation::Generate | portcullis_dialects::Operation::Video
            ))
        .then(|| super::usage::retrieval_of(parts.uri.path()))
        .flatten();
        let mut up = upstream_request(&self.allow, &route, &mut parts, body)?;
        if let Some(t) = &trace {
            let uri = up.uri().clone();
            t.sending(&route, sent_model, &uri, up.headers_mut());
        }
        if let Some(r) = &recorder {
            r.set_channel(route.name.clone());
            r.set_upstream_model(upstream.clone());
            // From here on the provider may see the request (B4).
            r.mark_unknown();
        }
        // Not tower-http's timeout layer: a timed-out attempt must come back as the
        // typed `UpstreamFailure::Timeout` (failover classifies it, F2), not as a
        // 408 answer a provider could have sent.
        let sent = self.client.request(up);
        let res = match tokio::time::timeout(self.catalog.upstream_timeout, sent).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(not_answered(&e, &route, trace, recorder)),
            Err(_) => return Err(timed_out(&route, trace)),
        };
        route.responses.answered(res.status().as_u16());
        let (mut rparts, incoming) = res.into_parts();
        answer_headers(&mut rparts.headers);
        let success = rparts.status.is_success();
        if let Some(t) = &trace {
            // The model as the provider served it: the request span names the public
            // one it was asked for, the attempt's and the answer's the channel's id.
            t.answered(
                &route,
                &upstream
                    .clone()
                    .unwrap_or_else(|| Arc::from(model.as_str())),
                rparts.status,
                &mut rparts.extensions,
            );
        }
        let watch = recorder.map(|recorder| {
            Box::new(Watch {
                // A provider error answer is not billed and uses no tokens.
                // The provider's usage, read in the provider's own dialect (X2).
                watcher: success.then(|| UsageWatcher::new(route.dialect, facts.0.stream)),
                unreported: Unreported::of(&facts.0),
                home: (success && creates).then(|| self.home(&route, model)),
                recorder,
                price,
                sent: Sent::of(&facts.0),
                done: false,
                trace,
                retrieval,
            })
        });
        // B7: a client's poll of a video job on an OpenAI channel, read for its end.
        let poll = (route.dialect == Dialect::OpenAi
            && facts.0.operation == portcullis_dialects::Operation::Object)
            .then(|| {
                JobPoll::of(
                    &self.polls,
                    &parts.method,
                    parts.uri.path(),
                    rparts.status,
                    &route.name,
                )
            })
            .flatten();
        let idle = self.catalog.upstream_idle_timeout;
        let body = match &translation {
            None => ForwardBody::new(Either::Left(incoming), idle, watch, None),
            Some(t) if success => {
                let answer = t.answer(&mut rparts, facts.0.stream);
                ForwardBody::new(Either::Left(incoming), idle, watch, Some(Box::new(answer)))
            }
            Some(t) => {
                let translated = t.error(&mut rparts, incoming, idle).await;
                ForwardBody::new(Either::Right(translated), idle, watch, None)
            }
        };
        Ok(Response::from_parts(rparts, body.polled(poll)))
    }

    /// The channel of the attempt: the one the capacity queue chose (Q2).
    fn route(
        &self,
        extensions: &http::Extensions,
        model: &str,
        reach: Reach,
    ) -> Result<Arc<Route>, BoxError> {
        let chosen = extensions
            .get::<portcullis_core::capacity::Chosen>()
            .and_then(|c| self.catalog.route(model, &c.0.name));
        // Without a capacity layer, the first of the request's candidates (the weighted
        // pick, within the key's data boundary, X4), or one picked here.
        let first = || {
            extensions
                .get::<portcullis_core::Candidates>()
                .and_then(|c| c.channels().first())
                .and_then(|c| self.catalog.route(model, &c.name))
        };
        chosen
            .or_else(first)
            .or_else(|| self.catalog.pick_in(model, reach))
            .ok_or_else(|| {
                Box::new(Rejection::new(
                    GatewayCode::NoUpstream,
                    LayerKind::UpstreamLimit,
                )) as BoxError
            })
    }

    /// Where the object an answer from `route` creates is remembered, and its home.
    fn home(&self, route: &Route, model: &str) -> (Arc<Homes>, Home) {
        (
            self.homes.clone(),
            Home {
                channel: route.name.clone(),
                model: Arc::from(model),
            },
        )
    }
}
