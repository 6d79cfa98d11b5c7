//! Reading a provider's error answer into [`ErrorFacts`](tollgate_core::failover::ErrorFacts)
//! for the classifier (F5). The vendors' error bodies are known in `tollgate-dialects`
//! (`tollgate_dialects::vendor`), on which this crate depends: a user of `tollgate`
//! alone gets them by default, and [`FailoverLayer::with_error_reader`] injects another
//! reader.
//!
//! [`FailoverLayer::with_error_reader`]: super::FailoverLayer::with_error_reader

pub use tollgate_dialects::{ErrorReader, error_facts};

#[cfg(test)]
mod tests {
    use crate::failover::{FailoverConfig, FailoverLayer};
    use crate::time::TokioClock;
    use crate::upstream::UpstreamConfig;
    use crate::{BoxError, UpstreamLimitLayer};
    use bytes::Bytes;
    use http::{HeaderMap, Request, Response};
    use http_body_util::Full;
    use std::sync::Arc;
    use tollgate_core::failover::ErrorFacts;
    use tollgate_core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
    use tollgate_core::{
        Candidates, ChannelRef, Chosen, Dialect, MemoryStore, ModelId, UsageRecorder,
    };
    use tower::{ServiceBuilder, ServiceExt};

    /// A vendor whose 400 with `{"fault":"busy"}` means "overloaded, try elsewhere".
    fn other_vendor(_: Dialect, status: u16, _: &HeaderMap, body: &[u8]) -> ErrorFacts {
        let busy = body == br#"{"fault":"busy"}"#;
        ErrorFacts {
            status: if busy { 503 } else { status },
            ..ErrorFacts::default()
        }
    }

    /// The status the client gets when channel `a` answers 400 `{"fault":"busy"}` and
    /// `b` answers 200.
    async fn status_with(reader: Option<super::ErrorReader>) -> u16 {
        let mut reg = UpstreamRegistry::new();
        for c in ["a", "b"] {
            reg = reg.with_channel(UpstreamChannel {
                name: c.into(),
                dialect: Dialect::OpenAi,
                vendor: "other".into(),
                credential: format!("k-{c}").into(),
                limits: RateLimits::default(),
                model_limits: vec![],
            });
        }
        let reg = Arc::new(reg);
        let clock = TokioClock::new(1_700_000_000_000);
        let mut failover =
            FailoverLayer::with_clock(reg.clone(), clock.clone(), FailoverConfig::default(), None);
        if let Some(reader) = reader {
            failover = failover.with_error_reader(reader);
        }
        let forwarder = tower::service_fn(|r: Request<()>| async move {
            let ch = r.extensions().get::<Chosen>().unwrap().0.name.to_string();
            let rec = r.extensions().get::<UsageRecorder>().unwrap().clone();
            rec.set_channel(ch.clone().into());
            let (status, body): (u16, &'static [u8]) = if ch == "a" {
                (400, br#"{"fault":"busy"}"#)
            } else {
                rec.record(Default::default());
                (200, b"{}")
            };
            let mut res = Response::new(Full::new(Bytes::from_static(body)));
            *res.status_mut() = http::StatusCode::from_u16(status).unwrap();
            Ok::<_, BoxError>(res)
        });
        let svc = ServiceBuilder::new()
            .layer(failover)
            .layer(UpstreamLimitLayer::with_clock(
                MemoryStore::with_clock(clock.clone()),
                reg,
                clock,
                UpstreamConfig::default(),
            ))
            .service(forwarder);
        let mut r = Request::new(());
        r.extensions_mut().insert(Candidates::new(
            ["a", "b"].into_iter().map(|c| ChannelRef::new(c, 0)),
        ));
        r.extensions_mut().insert(ModelId("m".into()));
        r.extensions_mut().insert(Dialect::OpenAi);
        svc.oneshot(r).await.unwrap().status().as_u16()
    }

    #[tokio::test(start_paused = true)]
    async fn f5_the_error_reader_is_injected_and_defaults_to_the_vendors_bodies() {
        // By default the body is read as OpenAI's: a 400 goes to the client as it is.
        assert_eq!(status_with(None).await, 400);
        // An injected reader knows the other vendor's overload: failed over to `b`.
        assert_eq!(status_with(Some(other_vendor)).await, 200);
    }
}
