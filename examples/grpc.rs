//! The portcullis layers in front of a tonic service.
//!
//! `Server::builder().layer(…)` takes the same stack as axum: ErrorMappingLayer
//! (outermost) → ConcurrencySlotLayer → AnchoredWindowLayer → the service. The key comes
//! from the `authorization` metadata (gRPC metadata are HTTP/2 headers, so any
//! [`SubjectExtractor`] reads them). A rejection reaches the client as a gRPC status —
//! `RESOURCE_EXHAUSTED` for 429s, `UNAVAILABLE` for 503s, `UNAUTHENTICATED` /
//! `PERMISSION_DENIED` / `INVALID_ARGUMENT` for 401 / 403 / 400 — with the gateway code
//! in `google.rpc.ErrorInfo` and the delay in `google.rpc.RetryInfo`; a server-streaming
//! call keeps its slot until its stream ends.
//!
//! The service is written by hand (two prost messages, a router over
//! `tonic::server::Grpc`), so nothing needs `protoc`; a tonic-build service is stacked
//! the same way.
//!
//! ```sh
//! cargo run -p portcullis-examples --example grpc              # serve, run the demo client, exit
//! cargo run -p portcullis-examples --example grpc -- --serve   # then keep serving (PORT, default 50051)
//! ```
#![deny(unreachable_pub)]

use bytes::Bytes;
use portcullis::core::{GatewayCode, LayerKind, MemoryStore, Policy, Rejection, Subject, Tier};
use portcullis::{AnchoredWindowLayer, ConcurrencySlotLayer, ErrorMappingLayer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tonic::codec::ProstCodec;
use tonic::server::{Grpc, NamedService};
use tonic::transport::{Channel, Server, server::TcpIncoming};
use tonic_types::StatusExt;
use tower::{ServiceBuilder, service_fn};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve_on = std::env::args().any(|a| a == "--serve");
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(if serve_on { 50051 } else { 0 });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;

    // API keys and their limits; a real service loads these from its database.
    let free = Policy::default()
        .with_concurrency(1)
        .with_requests(Tier::per_minute(5));
    let keys: Arc<HashMap<&str, Subject>> = Arc::new(HashMap::from([(
        "sk-free",
        Subject::new("sk-free").with_policy(free),
    )]));
    // `authorization: Bearer <key>` metadata → the key's Subject; none or an unknown
    // key is 40101, which the client reads as UNAUTHENTICATED.
    let keys = move |req: &http::Request<tonic::body::Body>| {
        req.headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .and_then(|key| keys.get(key).cloned())
            .ok_or_else(|| Rejection::new(GatewayCode::Unauthenticated, LayerKind::Identity))
    };

    // One store for both layers and every service of the server.
    let store = MemoryStore::new();
    let server = Server::builder()
        .layer(
            ServiceBuilder::new()
                // `.grpc()`: every error as a gRPC status. Without it, requests with
                // `content-type: application/grpc…` get one and others their dialect.
                .layer(ErrorMappingLayer::new().grpc())
                .layer(ConcurrencySlotLayer::new(store.clone()).extractor(keys.clone()))
                .layer(AnchoredWindowLayer::new(store).extractor(keys))
                .into_inner(),
        )
        .add_service(Generate);
    let serving = tokio::spawn(server.serve_with_incoming(TcpIncoming::from(listener)));
    println!("serving portcullis.example.v1.Generate on {addr}");

    demo(addr).await?;

    if serve_on {
        println!("serving until Ctrl-C");
        tokio::select! {
            r = serving => r??,
            r = tokio::signal::ctrl_c() => r?,
        }
    }
    Ok(())
}

/// What a tonic client sees.
async fn demo(addr: std::net::SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = Client(tonic::client::Grpc::new(channel));

    println!("\n1. sk-free has one slot; a stream holds it until its last token:");
    let mut stream = client.stream("Bearer sk-free").await?;
    if let Some(t) = stream.message().await? {
        println!("   stream: {}", t.text);
    }
    match client.complete(Some("Bearer sk-free")).await {
        Ok(text) => println!("   meanwhile: admitted ({text})?!"),
        Err(status) => println!("   meanwhile: {}", describe(&status)),
    }
    while let Some(t) = stream.message().await? {
        println!("   stream: {}", t.text);
    }
    // The server gives the slot back as its response body ends, an instant after the
    // client has read that end.
    tokio::time::sleep(Duration::from_millis(50)).await;
    match client.complete(Some("Bearer sk-free")).await {
        Ok(text) => println!("   stream ended; complete: {text}"),
        Err(status) => println!("   stream ended; complete: {}", describe(&status)),
    }

    println!("\n2. five requests a minute (two used above):");
    for i in 3..=6 {
        match client.complete(Some("Bearer sk-free")).await {
            Ok(text) => println!("   #{i}: {text}"),
            Err(status) => println!("   #{i}: {}", describe(&status)),
        }
    }

    println!("\n3. no key:");
    if let Err(status) = client.complete(None).await {
        println!("   {}", describe(&status));
    }
    Ok(())
}

/// `RESOURCE_EXHAUSTED 42901 "concurrency limit exceeded", retry in 1s`.
fn describe(status: &tonic::Status) -> String {
    let details = status.get_error_details();
    let code = details
        .error_info()
        .and_then(|i| i.metadata.get("code").cloned())
        .unwrap_or_default();
    let retry = details
        .retry_info()
        .and_then(|r| r.retry_delay)
        .map(|d| format!(", retry in {:.1}s", d.as_secs_f64()))
        .unwrap_or_default();
    format!("{:?} {code} {:?}{retry}", status.code(), status.message())
}

// ---------------------------------------------------------------- the service

const COMPLETE: &str = "/portcullis.example.v1.Generate/Complete";
const STREAM: &str = "/portcullis.example.v1.Generate/Stream";

/// `message Prompt { string text = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
struct Prompt {
    #[prost(string, tag = "1")]
    text: String,
}

/// `message Token { string text = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
struct Token {
    #[prost(string, tag = "1")]
    text: String,
}

type Tokens = Pin<Box<dyn futures_util::Stream<Item = Result<Token, tonic::Status>> + Send>>;

/// `service Generate { rpc Complete(Prompt) returns (Token); rpc Stream(Prompt)
/// returns (stream Token); }`: what tonic-build would generate, by hand.
#[derive(Clone)]
struct Generate;

impl NamedService for Generate {
    const NAME: &'static str = "portcullis.example.v1.Generate";
}

impl<B> tower::Service<http::Request<B>> for Generate
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<portcullis::BoxError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<Token, Prompt>::default());
            Ok(match req.uri().path() {
                COMPLETE => {
                    let complete = service_fn(|_: tonic::Request<Prompt>| async {
                        let text = "Hello!".to_owned();
                        Ok::<_, tonic::Status>(tonic::Response::new(Token { text }))
                    });
                    grpc.unary(complete, req).await
                }
                STREAM => {
                    // Four tokens, 300 ms apart.
                    let stream = service_fn(|_: tonic::Request<Prompt>| async {
                        let tokens = futures_util::stream::unfold(0, |i| async move {
                            if i == 4 {
                                return None;
                            }
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            Some((
                                Ok(Token {
                                    text: format!("token {i}"),
                                }),
                                i + 1,
                            ))
                        });
                        let tokens: Tokens = Box::pin(tokens);
                        Ok::<_, tonic::Status>(tonic::Response::new(tokens))
                    });
                    grpc.server_streaming(stream, req).await
                }
                _ => tonic::Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

/// A client of the service.
struct Client(tonic::client::Grpc<Channel>);

impl Client {
    /// A prompt with `authorization: <key>` metadata (if any).
    fn request(key: Option<&'static str>) -> tonic::Request<Prompt> {
        let mut r = tonic::Request::new(Prompt { text: "Hi".into() });
        if let Some(key) = key {
            // The demo's keys are ASCII literals.
            let v = tonic::metadata::MetadataValue::from_static(key);
            r.metadata_mut().insert("authorization", v);
        }
        r
    }

    async fn complete(&mut self, key: Option<&'static str>) -> Result<String, tonic::Status> {
        self.0
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = http::uri::PathAndQuery::from_static(COMPLETE);
        let codec = ProstCodec::<Prompt, Token>::default();
        let res = self.0.unary(Self::request(key), path, codec).await?;
        Ok(res.into_inner().text)
    }

    async fn stream(
        &mut self,
        key: &'static str,
    ) -> Result<tonic::Streaming<Token>, tonic::Status> {
        self.0
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = http::uri::PathAndQuery::from_static(STREAM);
        let codec = ProstCodec::<Prompt, Token>::default();
        let res = self
            .0
            .server_streaming(Self::request(Some(key)), path, codec)
            .await?;
        Ok(res.into_inner())
    }
}
