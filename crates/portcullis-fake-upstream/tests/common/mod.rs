//! A raw hyper 1 client over real loopback sockets, and SSE parsing.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use portcullis_fake_upstream::FakeUpstream;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Aborts the connection task (closing the socket) when dropped: dropping a request
/// future that holds it is a client disconnect.
pub struct ConnGuard(JoinHandle<()>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends one request on a fresh connection; returns the response head and the guard
/// that keeps the connection open.
pub async fn open(
    fake: &FakeUpstream,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (Response<Incoming>, ConnGuard) {
    let stream = TcpStream::connect(fake.addr()).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    let guard = ConnGuard(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", fake.addr().to_string());
    // JSON unless the caller sets another content type (multipart forms).
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    let res = sender.send_request(req).await.expect("response head");
    (res, guard)
}

/// A whole answer.
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    /// The body, or the error that ended it early (a cut connection).
    pub body: Result<Bytes, String>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone().expect("complete body").to_vec()).expect("utf-8")
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub async fn send(
    fake: &FakeUpstream,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let (res, _guard) = open(fake, method, path, headers, body).await;
    let (parts, body) = res.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| e.to_string());
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

pub async fn post(fake: &FakeUpstream, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    send(fake, Method::POST, path, headers, body).await
}

/// Reads the next data frame, with a timeout (`None` on timeout or end).
pub async fn next_frame(body: &mut Incoming, timeout: Duration) -> Option<Result<Bytes, String>> {
    match tokio::time::timeout(timeout, body.frame()).await {
        Err(_) => None,
        Ok(None) => None,
        Ok(Some(Err(e))) => Some(Err(e.to_string())),
        Ok(Some(Ok(f))) => f.into_data().ok().map(Ok),
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Event {
    pub event: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data not JSON ({e}): {}", self.data))
    }
}

/// Parses an SSE stream (`\n\n` or `\r\n\r\n` separated); every event must have data.
pub fn parse_sse(text: &str) -> Vec<Event> {
    let norm = text.replace("\r\n", "\n");
    assert!(
        norm.ends_with("\n\n"),
        "stream must end with a blank line: {text:?}"
    );
    norm.split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|block| {
            let mut ev = Event {
                event: None,
                data: String::new(),
            };
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    ev.event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    ev.data.push_str(v);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            assert!(!ev.data.is_empty(), "event without data: {block:?}");
            ev
        })
        .collect()
}

pub const OPENAI: &str = "/v1/chat/completions";
pub const ANTHROPIC: &str = "/v1/messages";
pub const GEMINI: &str = "/v1beta/models/gemini-2.0-flash:generateContent";
pub const GEMINI_SSE: &str = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse";

/// 40 bytes of prompt text → 10 prompt tokens.
pub const TEXT40: &str = "0123456789012345678901234567890123456789";

pub fn openai_body(stream: bool, include_usage: bool) -> String {
    let mut v =
        serde_json::json!({"model":"gpt-4o-mini","messages":[{"role":"user","content":TEXT40}]});
    if stream {
        v["stream"] = true.into();
    }
    if include_usage {
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    v.to_string()
}

pub fn anthropic_body(stream: bool) -> String {
    serde_json::json!({"model":"claude-sonnet-4-5","max_tokens":1024,"stream":stream,
        "messages":[{"role":"user","content":[{"type":"text","text":TEXT40}]}]})
    .to_string()
}

pub fn gemini_body() -> String {
    serde_json::json!({"contents":[{"role":"user","parts":[{"text":TEXT40}]}]}).to_string()
}
