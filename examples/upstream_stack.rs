//! Stack the upstream-side portcullis layers in axum: failover across channels, provider
//! limits per channel, per-channel capacity — over a stand-in "provider" whose first
//! channel is overloaded half the time.
//!
//! ErrorMappingLayer → FailoverLayer → UpstreamLimitLayer → CapacityQueueLayer → the
//! forwarder. What the layers read is put on the request by a small step in front:
//! the buffered body (failover replays it), the candidate channels, the model and
//! the client's dialect.
//!
//! ```sh
//! cargo run -p portcullis-examples --example upstream_stack   # PORT=8080 to change the port
//! ```
#![deny(unreachable_pub)]

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use portcullis::core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
use portcullis::core::{
    Candidates, ChannelRef, Chosen, Dialect, MemoryStore, ModelId, UsageRecorder,
};
use portcullis::{CapacityQueueLayer, ErrorMappingLayer, FailoverLayer, UpstreamLimitLayer};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tower::{ServiceBuilder, ServiceExt};

/// The two channels serving the one model: `flaky` is preferred but overloaded on
/// every other call it gets; `steady` has an RPM of 30.
fn registry() -> UpstreamRegistry {
    let channel = |name: &str, rpm| UpstreamChannel {
        name: name.into(),
        dialect: Dialect::OpenAi,
        vendor: "openai".into(),
        credential: format!("org-{name}").into(),
        limits: RateLimits {
            rpm,
            ..RateLimits::default()
        },
        model_limits: vec![],
    };
    UpstreamRegistry::new()
        .with_channel(channel("flaky", None))
        .with_channel(channel("steady", Some(30)))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let store = MemoryStore::new();
    let registry = Arc::new(registry());
    let calls = Arc::new(AtomicU64::new(0));

    // The stand-in provider: answers as the channel the layers chose. A real gateway
    // forwards to the channel's base URL here (see portcullis-proxy's forwarder).
    let provider = tower::service_fn(move |req: http::Request<Full<Bytes>>| {
        let channel = req.extensions().get::<Chosen>().map(|c| c.0.name.clone());
        let flaky = channel.as_deref() == Some("flaky");
        let n = if flaky {
            calls.fetch_add(1, Ordering::Relaxed)
        } else {
            1
        };
        if let (Some(ch), Some(rec)) = (&channel, req.extensions().get::<UsageRecorder>()) {
            rec.set_channel(ch.clone());
        }
        async move {
            let channel = channel.as_deref().unwrap_or("none").to_owned();
            let (status, body) = if flaky && n % 2 == 0 {
                (503, r#"{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","code":"server_is_overloaded"}}"#.to_owned())
            } else {
                (
                    200,
                    format!(
                        r#"{{"object":"chat.completion","channel":"{channel}","choices":[{{"index":0,"message":{{"role":"assistant","content":"Hello!"}}}}]}}"#
                    ),
                )
            };
            let mut res = http::Response::new(Full::new(Bytes::from(body)));
            *res.status_mut() = http::StatusCode::from_u16(status).expect("a status");
            res.headers_mut().insert(
                "content-type",
                "application/json".parse().expect("a header"),
            );
            Ok::<_, Infallible>(res)
        }
    });

    // Failover outside the upstream limits and capacity: each attempt gets its own
    // admission. All three share the registry's cooldowns.
    let stack = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .layer(FailoverLayer::new(registry.clone()))
        .layer(UpstreamLimitLayer::new(store.clone(), registry))
        .layer(CapacityQueueLayer::new(store))
        .service(provider);

    // In front: buffer the body (bounded: failover must be able to replay it) and say
    // which channels may serve, for which model, in which dialect.
    let front = tower::service_fn(move |req: Request| {
        let stack = stack.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            let bytes = match Limited::new(body, 1 << 20).collect().await {
                Ok(c) => c.to_bytes(),
                Err(_) => {
                    let mut res = http::Response::new(Body::from("request body too large"));
                    *res.status_mut() = http::StatusCode::PAYLOAD_TOO_LARGE;
                    return Ok::<_, Infallible>(res);
                }
            };
            parts.extensions.insert(Candidates::new([
                ChannelRef::new("flaky", 4),
                ChannelRef::new("steady", 4),
            ]));
            parts.extensions.insert(ModelId("gpt-4o-mini".into()));
            parts.extensions.insert(Dialect::OpenAi);
            let res = stack
                .oneshot(http::Request::from_parts(parts, Full::new(bytes)))
                .await?;
            Ok(res.map(Body::new))
        }
    });

    let app = Router::new().route_service("/v1/chat/completions", front);
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3001);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("listening on {url}; try:");
    println!("  for i in $(seq 40); do curl -s {url}/v1/chat/completions -d '{{}}'; echo; done");
    println!(
        "every other call to `flaky` is overloaded and fails over to `steady`; at half its \
         calls failing, `flaky`'s circuit opens and `steady` serves alone until its RPM of \
         30 is spent (then 429, 42902)"
    );
    axum::serve(listener, app).await
}
