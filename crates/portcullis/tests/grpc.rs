//! A tonic service behind ConcurrencySlotLayer + AnchoredWindowLayer + ErrorMappingLayer,
//! through real sockets (E1–E4, L1, L3, C5).
//!
//! A rejection must reach a tonic client as a gRPC status — HTTP 200,
//! `content-type: application/grpc`, `grpc-status` / `grpc-message` in a trailers-only
//! response, the gateway code in `google.rpc.ErrorInfo` and the delay in
//! `google.rpc.RetryInfo` — and a server-streaming call keeps its slot until the
//! stream ends.
//!
//! Run with `cargo test -p portcullis --features grpc --test grpc` (the workspace test run
//! enables the feature through the examples crate).

mod common;

use bytes::Bytes;
use chat::{COMPLETE, Chat, ChatServer};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use portcullis::core::{
    GatewayCode, LayerKind, MemoryStore, Policy, Rejection, SlotStore, Subject, Tier, WindowStore,
};
use portcullis::{
    AnchoredWindowLayer, BoxError, ConcurrencySlotLayer, ErrorMappingLayer, FailureMode,
    SubjectExtractor,
};
use prost::Message;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tonic::Code;
use tonic::transport::{Channel, Endpoint, Server, server::TcpIncoming};
use tonic_types::StatusExt;
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// The hand-written service (no protoc): `portcullis.test.v1.Chat` with a unary
/// `Complete` and a server-streaming `Stream`, its messages written as prost structs.
mod chat {
    use super::*;
    use std::pin::Pin;
    use tonic::codec::ProstCodec;
    use tonic::server::{Grpc, NamedService};

    pub const COMPLETE: &str = "/portcullis.test.v1.Chat/Complete";
    pub const STREAM: &str = "/portcullis.test.v1.Chat/Stream";

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Prompt {
        #[prost(string, tag = "1")]
        pub text: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Chunk {
        #[prost(string, tag = "1")]
        pub text: String,
    }

    type ChunkStream =
        Pin<Box<dyn futures_util::Stream<Item = Result<Chunk, tonic::Status>> + Send>>;

    /// The server. `Stream` answers one chunk at once, then waits for `gate` before
    /// its last chunk and the end of the stream.
    #[derive(Clone)]
    pub struct ChatServer {
        pub gate: Arc<Notify>,
    }

    impl NamedService for ChatServer {
        const NAME: &'static str = "portcullis.test.v1.Chat";
    }

    impl<B> tower::Service<Request<B>> for ChatServer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError> + Send + 'static,
    {
        type Response = Response<tonic::body::Body>;
        type Error = Infallible;
        type Future =
            Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(
            &mut self,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Infallible>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<B>) -> Self::Future {
            let gate = self.gate.clone();
            Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::<Chunk, Prompt>::default());
                Ok(match req.uri().path() {
                    COMPLETE => {
                        let svc = service_fn(|r: tonic::Request<Prompt>| async move {
                            let text = format!("echo: {}", r.into_inner().text);
                            Ok::<_, tonic::Status>(tonic::Response::new(Chunk { text }))
                        });
                        grpc.unary(svc, req).await
                    }
                    STREAM => {
                        let svc = service_fn(move |_r: tonic::Request<Prompt>| {
                            let gate = gate.clone();
                            async move {
                                let chunks = futures_util::stream::unfold(0, move |i| {
                                    let gate = gate.clone();
                                    async move {
                                        let text = match i {
                                            0 => "first",
                                            1 => {
                                                gate.notified().await;
                                                "last"
                                            }
                                            _ => return None,
                                        };
                                        Some((Ok(Chunk { text: text.into() }), i + 1))
                                    }
                                });
                                let chunks: ChunkStream = Box::pin(chunks);
                                Ok::<_, tonic::Status>(tonic::Response::new(chunks))
                            }
                        });
                        grpc.server_streaming(svc, req).await
                    }
                    _ => tonic::Status::unimplemented("no such method").into_http(),
                })
            })
        }
    }

    /// A tonic client of the service.
    #[derive(Clone)]
    pub struct Chat(pub tonic::client::Grpc<Channel>);

    impl Chat {
        fn request(key: Option<&str>, text: &str) -> tonic::Request<Prompt> {
            let mut r = tonic::Request::new(Prompt { text: text.into() });
            if let Some(key) = key {
                r.metadata_mut()
                    .insert("authorization", key.parse().expect("ascii metadata"));
            }
            r
        }

        /// `Complete` with `authorization: <key>` (if any).
        pub async fn complete(
            &mut self,
            key: Option<&str>,
            text: &str,
        ) -> Result<String, tonic::Status> {
            self.0.ready().await.expect("channel ready");
            let res = self
                .0
                .unary(
                    Self::request(key, text),
                    http::uri::PathAndQuery::from_static(COMPLETE),
                    ProstCodec::<Prompt, Chunk>::default(),
                )
                .await?;
            Ok(res.into_inner().text)
        }

        /// `Stream` with `authorization: <key>`.
        pub async fn stream(
            &mut self,
            key: &str,
        ) -> Result<tonic::Streaming<Chunk>, tonic::Status> {
            self.0.ready().await.expect("channel ready");
            let res = self
                .0
                .server_streaming(
                    Self::request(Some(key), "stream"),
                    http::uri::PathAndQuery::from_static(STREAM),
                    ProstCodec::<Prompt, Chunk>::default(),
                )
                .await?;
            Ok(res.into_inner())
        }
    }

    /// A gRPC request body holding one `Prompt` (the 5-byte length prefix + protobuf).
    pub fn framed(text: &str) -> tonic::body::Body {
        let msg = Prompt { text: text.into() }.encode_to_vec();
        let mut buf = Vec::with_capacity(5 + msg.len());
        buf.push(0);
        buf.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        buf.extend_from_slice(&msg);
        tonic::body::Body::new(Full::new(Bytes::from(buf)))
    }
}

// ---------------------------------------------------------------- the stack

/// API keys from the `authorization` metadata (gRPC metadata are HTTP/2 headers).
#[derive(Clone)]
struct Keys(Arc<HashMap<&'static str, Subject>>);

impl Keys {
    fn new() -> Self {
        let one_slot = Policy::default()
            .with_concurrency(1)
            .with_requests(Tier::per_minute(1000));
        let two_a_minute = Policy::default().with_requests(Tier::per_minute(2));
        Self(Arc::new(HashMap::from([
            ("sk-one", Subject::new("sk-one").with_policy(one_slot)),
            ("sk-two", Subject::new("sk-two").with_policy(two_a_minute)),
        ])))
    }
}

impl<B> SubjectExtractor<B> for Keys {
    fn extract(&self, req: &Request<B>) -> Result<Subject, Rejection> {
        let Some(v) = req.headers().get(http::header::AUTHORIZATION) else {
            return Err(Rejection::new(
                GatewayCode::Unauthenticated,
                LayerKind::Identity,
            ));
        };
        let key = v
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Rejection::new(GatewayCode::InvalidRequest, LayerKind::Identity)
                    .with_message("authorization must be `Bearer <key>`")
            })?;
        if key == "sk-revoked" {
            return Err(Rejection::new(GatewayCode::Forbidden, LayerKind::Identity));
        }
        self.0
            .get(key)
            .cloned()
            .ok_or_else(|| Rejection::new(GatewayCode::Unauthenticated, LayerKind::Identity))
    }
}

/// Serves the chat service behind the stack on a loopback port, on `slots` and
/// `windows` (each layer failing closed so a dead store answers 503).
async fn serve<A, B>(slots: A, windows: B) -> (SocketAddr, Arc<Notify>)
where
    A: SlotStore + Clone + Send + Sync + 'static,
    B: WindowStore + Clone + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gate = Arc::new(Notify::new());
    let stack = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .layer(
            ConcurrencySlotLayer::new(slots)
                .extractor(Keys::new())
                .failure_mode(FailureMode::Closed),
        )
        .layer(
            AnchoredWindowLayer::new(windows)
                .extractor(Keys::new())
                .failure_mode(FailureMode::Closed),
        )
        .into_inner();
    let router = Server::builder()
        .layer(stack)
        .add_service(ChatServer { gate: gate.clone() });
    tokio::spawn(async move {
        router
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .expect("grpc server");
    });
    (addr, gate)
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect")
}

async fn client(addr: SocketAddr) -> Chat {
    Chat(tonic::client::Grpc::new(channel(addr).await))
}

async fn memory_server() -> (SocketAddr, Arc<Notify>) {
    let store = MemoryStore::new();
    serve(store.clone(), store).await
}

/// Asserts the gRPC form of a gateway rejection and returns its ErrorInfo metadata.
fn assert_gateway_status(
    st: &tonic::Status,
    code: Code,
    gateway_code: u32,
    message: &str,
) -> HashMap<String, String> {
    assert_eq!(st.code(), code, "{st:?}");
    assert_eq!(st.message(), message);
    let details = st.get_error_details();
    let info = details.error_info().expect("google.rpc.ErrorInfo");
    assert_eq!(info.domain, "portcullis");
    assert_eq!(info.metadata["code"], gateway_code.to_string());
    let id = details.request_info().expect("google.rpc.RequestInfo");
    assert!(!id.request_id.is_empty());
    assert_eq!(
        st.metadata().get("x-request-id").unwrap().to_str().unwrap(),
        id.request_id
    );
    info.metadata.clone()
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn l1_admitted_call_reaches_the_tonic_service() {
    let (addr, _) = memory_server().await;
    let mut c = client(addr).await;
    assert_eq!(
        c.complete(Some("Bearer sk-one"), "hi").await.unwrap(),
        "echo: hi"
    );
}

#[tokio::test]
async fn e4_client_errors_are_unauthenticated_permission_denied_invalid_argument() {
    let (addr, _) = memory_server().await;
    let mut c = client(addr).await;

    let st = c.complete(None, "x").await.unwrap_err();
    let meta = assert_gateway_status(
        &st,
        Code::Unauthenticated,
        40101,
        GatewayCode::Unauthenticated.default_message(),
    );
    assert_eq!(meta["should_retry"], "false");
    assert!(st.get_error_details().retry_info().is_none());

    let st = c.complete(Some("Bearer sk-nope"), "x").await.unwrap_err();
    assert_gateway_status(
        &st,
        Code::Unauthenticated,
        40101,
        GatewayCode::Unauthenticated.default_message(),
    );

    let st = c
        .complete(Some("Bearer sk-revoked"), "x")
        .await
        .unwrap_err();
    assert_gateway_status(
        &st,
        Code::PermissionDenied,
        40301,
        GatewayCode::Forbidden.default_message(),
    );

    let st = c.complete(Some("Basic abc"), "x").await.unwrap_err();
    assert_gateway_status(
        &st,
        Code::InvalidArgument,
        40001,
        "authorization must be `Bearer <key>`",
    );
}

#[tokio::test]
async fn w7_window_rejection_is_resource_exhausted_with_retry_info() {
    let (addr, _) = memory_server().await;
    let mut c = client(addr).await;
    for _ in 0..2 {
        c.complete(Some("Bearer sk-two"), "x").await.unwrap();
    }
    let st = c.complete(Some("Bearer sk-two"), "x").await.unwrap_err();
    let meta = assert_gateway_status(&st, Code::ResourceExhausted, 42902, "rpm limit exceeded");
    assert_eq!(meta["layer"], "anchored_window");
    assert_eq!(meta["should_retry"], "true");
    let details = st.get_error_details();
    // W9: the delay until the minute window has room again.
    let delay = details
        .retry_info()
        .and_then(|r| r.retry_delay)
        .expect("google.rpc.RetryInfo");
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(60),
        "{delay:?}"
    );
    let quota = details.quota_failure().expect("google.rpc.QuotaFailure");
    assert_eq!(quota.violations[0].subject, "requests");
    assert_eq!(quota.violations[0].description, "2 requests per 60000 ms");
}

#[tokio::test]
async fn d4_dead_store_failing_closed_is_unavailable() {
    let (addr, _) = serve(common::DeadStore, common::DeadStore).await;
    let mut c = client(addr).await;
    let st = c.complete(Some("Bearer sk-one"), "x").await.unwrap_err();
    let meta = assert_gateway_status(
        &st,
        Code::Unavailable,
        50301,
        GatewayCode::StoreUnavailable.default_message(),
    );
    assert_eq!(meta["should_retry"], "true");
    let delay = st
        .get_error_details()
        .retry_info()
        .and_then(|r| r.retry_delay);
    assert_eq!(delay, Some(Duration::from_secs(1)));
}

/// On the wire: HTTP 200, `content-type: application/grpc`, the status in the headers
/// and nothing after them (trailers-only) — where an admitted call has a message and
/// then trailers.
#[tokio::test]
async fn e1_rejection_is_a_trailers_only_grpc_response() {
    let (addr, _) = memory_server().await;
    let ch = channel(addr).await;
    let raw = |key: &'static str| {
        Request::post(format!("http://{addr}{COMPLETE}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("authorization", key)
            .body(chat::framed("hello"))
            .unwrap()
    };

    let res = ch.clone().oneshot(raw("Bearer sk-revoked")).await.unwrap();
    assert_eq!(res.status(), 200);
    let h = res.headers();
    assert_eq!(h["content-type"], "application/grpc");
    assert_eq!(
        h["grpc-status"],
        HeaderValue::from(Code::PermissionDenied as i32)
    );
    assert_eq!(
        h["grpc-message"],
        "This%20API%20key%20may%20not%20be%20used%20for%20this%20request."
    );
    assert!(h.contains_key("grpc-status-details-bin"));
    assert!(h.contains_key("x-request-id"));
    assert!(!h.contains_key("retry-after"), "no HTTP rate-limit headers");
    let body = res.into_body().collect().await.unwrap();
    assert!(
        body.trailers().is_none(),
        "the status is in the headers only"
    );
    assert!(body.to_bytes().is_empty(), "no message");

    // The control: an admitted call has no status in its headers; it comes in the
    // trailers after the message.
    let res = ch.oneshot(raw("Bearer sk-one")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(!res.headers().contains_key("grpc-status"));
    let body = res.into_body().collect().await.unwrap();
    assert_eq!(body.trailers().unwrap()["grpc-status"], "0");
    let bytes = body.to_bytes();
    assert_eq!(
        chat::Chunk::decode(&bytes[5..]).unwrap().text,
        "echo: hello"
    );
}

/// L3, C5: the open stream holds sk-one's only slot; a second call is refused with
/// 42901 as RESOURCE_EXHAUSTED; once the stream has ended, the next call is admitted.
#[tokio::test]
async fn l3_server_stream_keeps_its_slot_until_it_ends() {
    let (addr, gate) = memory_server().await;
    let mut c = client(addr).await;

    let mut stream = c.stream("Bearer sk-one").await.unwrap();
    assert_eq!(stream.message().await.unwrap().unwrap().text, "first");

    // While it is open: refused, unary and streaming alike (another connection too).
    let st = c.complete(Some("Bearer sk-one"), "x").await.unwrap_err();
    let meta = assert_gateway_status(
        &st,
        Code::ResourceExhausted,
        42901,
        "concurrency limit exceeded",
    );
    assert_eq!(meta["layer"], "concurrency_slot");
    assert_eq!(
        st.get_error_details().retry_info().unwrap().retry_delay,
        Some(Duration::from_secs(1))
    );
    let mut other = client(addr).await;
    let st = other.stream("Bearer sk-one").await.unwrap_err();
    assert_gateway_status(
        &st,
        Code::ResourceExhausted,
        42901,
        "concurrency limit exceeded",
    );
    // Another key is not affected.
    other.complete(Some("Bearer sk-two"), "x").await.unwrap();

    // Still refused after a while: the slot is held by the stream, not by a timer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        c.complete(Some("Bearer sk-one"), "x")
            .await
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );

    // End the stream and read it to its OK end.
    gate.notify_one();
    assert_eq!(stream.message().await.unwrap().unwrap().text, "last");
    assert!(stream.message().await.unwrap().is_none());

    // The slot is given back when the server's body ends, which the client may see a
    // moment before the release lands: admitted within a bounded wait.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match c.complete(Some("Bearer sk-one"), "again").await {
            Ok(text) => {
                assert_eq!(text, "echo: again");
                break;
            }
            Err(st) if st.code() == Code::ResourceExhausted => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "slot not released after the stream ended"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(st) => panic!("unexpected {st:?}"),
        }
    }
}

/// L3: a client that drops an open stream gives its slot back too.
#[tokio::test]
async fn l3_dropped_stream_releases_its_slot() {
    let (addr, _gate) = memory_server().await;
    let mut c = client(addr).await;
    let mut stream = c.stream("Bearer sk-one").await.unwrap();
    assert_eq!(stream.message().await.unwrap().unwrap().text, "first");
    assert_eq!(
        c.complete(Some("Bearer sk-one"), "x")
            .await
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while c.complete(Some("Bearer sk-one"), "x").await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "slot not released after the client dropped the stream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------- choosing the form

fn failing_stack(
    layer: ErrorMappingLayer,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<portcullis::error_map::MappedBody<Full<Bytes>>>,
    Error = Infallible,
> {
    ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|req: Request<Full<Bytes>>| async move {
            let err: BoxError = match req.uri().path() {
                "/internal" => "connection to db.internal:5432 refused (password=hunter2)".into(),
                _ => Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow)
                    .with_retry_after(Some(Duration::from_millis(1_500)))
                    .into(),
            };
            Err::<Response<Full<Bytes>>, _>(err)
        }))
}

fn request(path: &str, content_type: Option<&str>) -> Request<Full<Bytes>> {
    let mut b = Request::post(path);
    if let Some(ct) = content_type {
        b = b.header("content-type", ct);
    }
    b.body(Full::default()).unwrap()
}

#[tokio::test]
async fn e1_grpc_form_is_chosen_by_content_type_or_by_configuration() {
    let auto = ErrorMappingLayer::new();

    // A gRPC request: a gRPC status even on an OpenAI path.
    for ct in ["application/grpc", "application/grpc+proto"] {
        let res = failing_stack(auto)
            .oneshot(request("/v1/chat/completions", Some(ct)))
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{ct}");
        assert_eq!(res.headers()["grpc-status"], "8");
        assert_eq!(res.headers()["content-type"], "application/grpc");
    }

    // Anything else: the dialect's JSON, unchanged.
    let res = failing_stack(auto)
        .oneshot(request("/v1/chat/completions", Some("application/json")))
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "2");
    assert!(!res.headers().contains_key("grpc-status"));
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["error"]["code"], "42902");

    // Configured for gRPC: every request, whatever it sends.
    let grpc = ErrorMappingLayer::new().grpc();
    assert!(grpc.is_grpc_only());
    for ct in [None, Some("application/json")] {
        let res = failing_stack(grpc)
            .oneshot(request("/v1/chat/completions", ct))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let st = tonic::Status::from_header_map(res.headers()).unwrap();
        assert_eq!(st.code(), Code::ResourceExhausted);
        assert_eq!(
            st.get_error_details().retry_info().unwrap().retry_delay,
            Some(Duration::from_millis(1_500))
        );
    }
}

#[tokio::test]
async fn e3_unexpected_error_is_internal_and_hides_the_error() {
    let res = failing_stack(ErrorMappingLayer::new())
        .oneshot(request("/internal", Some("application/grpc")))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let st = tonic::Status::from_header_map(res.headers()).unwrap();
    assert_eq!(st.code(), Code::Internal);
    assert_eq!(
        st.message(),
        format!("unexpected gateway error (request id {id})")
    );
    let details = st.get_error_details();
    assert_eq!(details.error_info().unwrap().metadata["code"], "50001");
    assert_eq!(details.request_info().unwrap().request_id, id);
    let all = format!("{:?}", res.headers());
    assert!(!all.contains("hunter2") && !all.contains("db.internal"));
}
