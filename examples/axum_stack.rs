//! Stack the portcullis layers in axum.
//!
//! ErrorMappingLayer (outermost: the stack becomes `Infallible`) → an auth step that
//! turns `Authorization: Bearer <key>` into a `Subject` → ConcurrencySlotLayer →
//! AnchoredWindowLayer → your handlers, mounted once with `Router::layer` and sharing
//! ONE `MemoryStore`, so every route draws on the same limits.
//!
//! ```sh
//! cargo run -p portcullis-examples --example axum_stack   # PORT=8080 to change the port
//! ```
#![deny(unreachable_pub)]

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header::AUTHORIZATION;
use axum::routing::{get, post};
use portcullis::core::{GatewayCode, LayerKind, MemoryStore, Policy, Rejection, Subject, Tier};
use portcullis::{AnchoredWindowLayer, ConcurrencySlotLayer, ErrorMappingLayer};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceBuilder;
use tower::filter::FilterLayer;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // API keys and their limits; a real gateway loads these from its database.
    let free = Policy::default()
        .with_concurrency(1)
        .with_requests(Tier::per_minute(5));
    let pro = Policy::default()
        .with_concurrency(8)
        .with_requests(Tier::per_minute(600));
    let keys: Arc<HashMap<&str, Subject>> = Arc::new(HashMap::from([
        ("sk-free", Subject::new("sk-free").with_policy(free)),
        ("sk-pro", Subject::new("sk-pro").with_policy(pro)),
    ]));

    // Auth: put the key's Subject in the request extensions for the layers below. An
    // unknown key is a typed Rejection (40101) that ErrorMappingLayer renders as a 401.
    let auth = move |mut req: Request| {
        let subject = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .and_then(|key| keys.get(key).cloned())
            .ok_or_else(|| Rejection::new(GatewayCode::Unauthenticated, LayerKind::Identity))?;
        req.extensions_mut().insert(subject);
        Ok::<_, Rejection>(req)
    };

    // Build the store once: axum runs `layer()` once per route, and every route's
    // layers must count in the same place.
    let store = MemoryStore::new();
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/stream", get(stream))
        .layer(
            ServiceBuilder::new()
                .layer(ErrorMappingLayer::new())
                .layer(FilterLayer::new(auth))
                .layer(ConcurrencySlotLayer::new(store.clone()))
                .layer(AnchoredWindowLayer::new(store)),
        );

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("listening on {url}; try:");
    println!("  curl -i {url}/v1/chat/completions -H 'Authorization: Bearer sk-free' -d '{{}}'");
    println!(
        "  curl -i {url}/v1/chat/completions -H 'Authorization: Bearer sk-nope' -d '{{}}'   # 401, 40101"
    );
    println!(
        "  curl -N {url}/stream -H 'Authorization: Bearer sk-free' &   # holds sk-free's only slot for 5 s"
    );
    println!(
        "  curl -i {url}/stream -H 'Authorization: Bearer sk-free'     # meanwhile: 429, 42901"
    );
    println!(
        "  for i in 1 2 3 4 5 6; do curl -s {url}/v1/chat/completions -H 'Authorization: Bearer sk-free' -d '{{}}'; echo; done   # over 5 a minute: 429, 42902"
    );
    axum::serve(listener, app).await
}

/// A canned chat completion.
async fn chat() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "object": "chat.completion",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "Hello!" } }],
    }))
}

/// Five server-sent events, one a second: the request keeps its slot until the last.
async fn stream() -> Body {
    let events = futures_util::stream::unfold(0, |i| async move {
        if i == 5 {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some((Ok::<_, std::io::Error>(format!("data: {i}\n\n")), i + 1))
    });
    Body::from_stream(events)
}
