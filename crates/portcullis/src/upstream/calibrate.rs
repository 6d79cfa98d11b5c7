//! Provider rate signals (U3): the vendors' rate-limit headers and `retry-after`, read
//! into one [`RateSignal`], and the cooldown they call for, set here on the scope of
//! the channel that answered. The headers and their
//! formats are known in `portcullis-dialects` (its `providers` modules), on which
//! this crate depends: a user of `portcullis` alone reads them by default, and
//! [`UpstreamLimitLayer::rate_reader`] injects another reader.
//!
//! [`UpstreamLimitLayer::rate_reader`]: super::UpstreamLimitLayer::rate_reader

pub use portcullis_dialects::{MAX_SIGNAL_MS, RateReader, RateSignal};

use super::layer::Shared;
use http::Response;
use portcullis_core::Clock;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

impl<St, C: Clock> Shared<St, C> {
    /// U3: the provider's answer on `channel` updates the cooldown table.
    pub(crate) fn calibrate<B>(&self, channel: &str, model: Option<&str>, res: &Response<B>) {
        let shared = self;
        let signal =
            (shared.config.rate_reader)(res.status().as_u16(), res.headers(), SystemTime::now());
        let Some(cool_ms) =
            signal.cooldown_ms(shared.config.settings.default_cooldown.as_millis() as u64)
        else {
            return;
        };
        let Some(key) = shared.config.registry.signal_key(channel, model) else {
            return;
        };
        let now = shared.config.clock.now();
        shared
            .config
            .registry
            .cooldowns()
            .cool(&key, now.saturating_add(cool_ms), now);
        shared
            .state
            .counters
            .cooldowns
            .fetch_add(1, Ordering::Relaxed);
        if signal.status == 429 {
            shared
                .state
                .counters
                .deviations
                .fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
        metrics::counter!("portcullis_upstream_deviations_total", "channel" => channel.to_owned())
            .increment(1);
        }
        tracing::info!(
            channel,
            status = signal.status,
            cool_ms,
            "provider rate signal: channel scope cools down"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UpstreamLimitLayer;
    use crate::time::TokioClock;
    use http::{HeaderMap, Request, Response};
    use portcullis_core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry, model_key};
    use portcullis_core::{Candidates, ChannelRef, Dialect, MemoryStore, ModelId};
    use std::sync::Arc;
    use std::time::SystemTime;
    use tower::{ServiceBuilder, ServiceExt};

    /// A vendor the dialect crate does not know: its limit header is `x-other-wait-ms`.
    fn other_vendor(status: u16, headers: &HeaderMap, _: SystemTime) -> RateSignal {
        RateSignal {
            status,
            retry_after_ms: None,
            exhausted_until_ms: headers
                .get("x-other-wait-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok()),
        }
    }

    async fn cooldown_after(reader: Option<RateReader>) -> Option<u64> {
        const T0: u64 = 1_700_000_000_000;
        let st = MemoryStore::with_clock(TokioClock::new(T0));
        let reg = UpstreamRegistry::new().with_channel(UpstreamChannel {
            name: "a".into(),
            dialect: Dialect::OpenAi,
            vendor: "other".into(),
            credential: "k".into(),
            limits: RateLimits {
                rpm: Some(1_000),
                ..RateLimits::default()
            },
            model_limits: vec![],
        });
        let mut layer =
            UpstreamLimitLayer::new(st.clone(), Arc::new(reg)).clock(st.clock().clone());
        if let Some(reader) = reader {
            layer = layer.rate_reader(reader);
        }
        let mut r = Request::new(());
        r.extensions_mut()
            .insert(Candidates::new([ChannelRef::new("a", 0)]));
        r.extensions_mut().insert(ModelId("m".into()));
        let upstream = tower::service_fn(|_: Request<()>| async {
            let res = Response::builder()
                .header("x-other-wait-ms", "7000")
                .header("x-ratelimit-remaining-requests", "0")
                .header("x-ratelimit-reset-requests", "2s")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            Ok::<_, std::convert::Infallible>(res)
        });
        let res = ServiceBuilder::new()
            .layer(layer.clone())
            .service(upstream)
            .oneshot(r)
            .await
            .unwrap();
        drop(res);
        layer
            .registry()
            .cooldowns()
            .until(&model_key("k", "m"), T0 + 1)
            .map(|until| until - T0)
    }

    #[tokio::test(start_paused = true)]
    async fn u3_the_rate_reader_is_injected_and_defaults_to_the_vendors_headers() {
        // By default OpenAI's headers are read: requests exhausted, reset in 2 s.
        assert_eq!(cooldown_after(None).await, Some(2_000));
        // An injected reader reads its own vendor's header instead.
        assert_eq!(cooldown_after(Some(other_vendor)).await, Some(7_000));
    }
}
