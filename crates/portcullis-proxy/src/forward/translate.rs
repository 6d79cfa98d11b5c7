//! An attempt to a channel of another vendor than the client's (X1–X3): the request
//! written in the channel's dialect, the answer written back in the client's. The
//! translations are `portcullis_dialects::translate`'s; this file only applies them to
//! the request and to the answer's frames.

use super::error::upstream_failed;
use bytes::Bytes;
use http::{HeaderValue, Uri, header};
use http_body_util::{BodyExt, Full};
use portcullis::BoxError;
use portcullis_core::{Dialect, GatewayCode, LayerKind, ProviderError, Rejection, UpstreamFailure};
use portcullis_dialects::translate::{self, StreamTranslator, TranslateError, Wire};
use std::sync::Arc;
use std::time::Duration;

/// The most of a provider's error body read to translate it: error bodies are a few
/// hundred bytes; a longer one is cut here and translated from what was read.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A translated attempt: the two APIs and the model names.
#[derive(Clone, Debug)]
pub(super) struct Translation {
    pub(super) client: Wire,
    pub(super) vendor: Wire,
    /// The model the client asked for (its answers name it).
    pub(super) public_model: Arc<str>,
    /// The client asked for a stream.
    pub(super) stream: bool,
    /// A Gemini client's stream is framed as one JSON array (it did not ask for
    /// `?alt=sse`).
    array: bool,
}

impl Translation {
    /// The translation of an attempt of a `client` request at `path` to a channel of
    /// `vendor`, when they speak different generation APIs.
    pub(super) fn between(
        client: Dialect,
        uri: &Uri,
        vendor: Dialect,
        public_model: &str,
        stream: bool,
    ) -> Option<Self> {
        let client = Wire::of(client, uri.path())?;
        let vendor = Wire::served_by(vendor)?;
        let sse = uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
        (client.dialect() != vendor.dialect()).then(|| Self {
            client,
            vendor,
            public_model: Arc::from(public_model),
            stream,
            array: client == Wire::Gemini && stream && !sse,
        })
    }

    /// The request body written for the channel, and the path it goes to.
    pub(super) async fn request(
        &self,
        parts: &mut http::request::Parts,
        body: Full<Bytes>,
        upstream_model: &str,
        default_max_tokens: u64,
    ) -> Result<Full<Bytes>, BoxError> {
        let bytes = body.collect().await.map_err(|e| match e {})?.to_bytes();
        let out = translate::request(
            self.client,
            self.vendor,
            &bytes,
            upstream_model,
            default_max_tokens,
            self.stream,
        )
        .map_err(refusal)?;
        parts.uri = match self.vendor {
            Wire::Messages => Uri::from_static("/v1/messages"),
            Wire::Gemini => {
                let method = if self.stream {
                    "streamGenerateContent?alt=sse"
                } else {
                    "generateContent"
                };
                Uri::try_from(format!("/v1beta/models/{upstream_model}:{method}"))
                    .map_err(|_| upstream_failed(UpstreamFailure::Unsendable, "invalid model id"))?
            }
            _ => Uri::from_static("/v1/chat/completions"),
        };
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(Full::new(Bytes::from(out)))
    }

    /// The provider's error answer read (bounded, within `idle`) and written in the
    /// client's dialect; the provider's own status and body stay in the extensions for
    /// the classifier (F5).
    pub(super) async fn error(
        &self,
        rparts: &mut http::response::Parts,
        body: hyper::body::Incoming,
        idle: Duration,
    ) -> Full<Bytes> {
        let read = tokio::time::timeout(
            idle,
            http_body_util::Limited::new(body, ERROR_BODY_LIMIT).collect(),
        )
        .await;
        let bytes = match read {
            Ok(Ok(c)) => c.to_bytes(),
            _ => Bytes::new(),
        };
        let status = rparts.status.as_u16();
        let t = translate::error(self.vendor, self.client, status, &bytes);
        rparts.extensions.insert(ProviderError {
            dialect: self.vendor.dialect(),
            status,
            body: Arc::from(&bytes[..]),
        });
        if let Ok(s) = http::StatusCode::from_u16(t.status) {
            rparts.status = s;
        }
        rparts.headers.remove(header::CONTENT_LENGTH);
        rparts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Full::new(Bytes::from(t.body))
    }

    /// How a successful answer's body is translated: event by event when streamed,
    /// whole otherwise.
    pub(super) fn answer(&self, rparts: &mut http::response::Parts, stream: bool) -> Answer {
        rparts.headers.remove(header::CONTENT_LENGTH);
        if stream {
            let array = self.array.then(|| {
                rparts.headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                JsonArray::default()
            });
            let t = StreamTranslator::new(self.vendor, self.client, &self.public_model, true);
            Answer::Stream(Box::new(t), array)
        } else {
            Answer::Whole {
                t: self.clone(),
                buf: Vec::new(),
            }
        }
    }
}

/// A successful answer's body on its way back to the client's dialect.
#[derive(Debug)]
pub(super) enum Answer {
    /// A streamed answer, translated as its events arrive (and framed as a JSON
    /// array for a Gemini client that asked for that framing).
    Stream(Box<StreamTranslator>, Option<JsonArray>),
    /// A buffered answer, translated at its end (bounded by the provider's answer,
    /// which the gateway asked for without streaming).
    Whole { t: Translation, buf: Vec<u8> },
}

impl Answer {
    /// The client's bytes for the provider's next `data` (possibly none yet).
    pub(super) fn push(&mut self, data: &[u8]) -> Bytes {
        match self {
            Self::Stream(s, array) => {
                let mut out = Vec::new();
                s.push(data, &mut out);
                if let Some(a) = array {
                    out = a.frame(&out);
                }
                Bytes::from(out)
            }
            Self::Whole { buf, .. } => {
                buf.extend_from_slice(data);
                Bytes::new()
            }
        }
    }

    /// The client's last bytes, at the end of the provider's body; an error when the
    /// answer cannot be given in the client's dialect (the stream's translator writes
    /// its own in-stream error for a cut stream and ends).
    pub(super) fn finish(&mut self) -> Result<Bytes, BoxError> {
        match self {
            Self::Stream(s, array) => {
                let mut out = Vec::new();
                s.finish(&mut out);
                if let Some(a) = array {
                    out = a.frame(&out);
                    out.push(b']');
                }
                Ok(Bytes::from(out))
            }
            Self::Whole { t, buf } => translate::response(t.vendor, t.client, buf, &t.public_model)
                .map(Bytes::from)
                .map_err(|e| {
                    tracing::warn!(error = %e, "a provider's answer could not be translated");
                    upstream_failed(UpstreamFailure::Cut, "untranslatable answer")
                }),
        }
    }
}

/// Gemini's stream framing without `?alt=sse`: one JSON array whose elements arrive as
/// the answer goes (`[{…},\r\n{…}` … `]`). The translator writes each of its events
/// whole (`data: {…}` and a blank line) in the output of the push that completes it, so
/// every `data:` line of an output is one element.
#[derive(Debug, Default)]
pub(super) struct JsonArray {
    opened: bool,
    elements: bool,
}

impl JsonArray {
    /// The elements of the events in `sse`, the array opened before the first.
    fn frame(&mut self, sse: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(sse.len() + 4);
        if !std::mem::replace(&mut self.opened, true) {
            out.push(b'[');
        }
        for line in sse.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(data) = line.strip_prefix(b"data: ") {
                if std::mem::replace(&mut self.elements, true) {
                    out.extend_from_slice(b",\r\n");
                }
                out.extend_from_slice(data);
            }
        }
        out
    }
}

/// A request the channel's dialect cannot express: the client's 400, naming the field.
fn refusal(e: TranslateError) -> BoxError {
    Box::new(
        Rejection::new(GatewayCode::InvalidRequest, LayerKind::Request).with_message(e.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::JsonArray;

    #[test]
    fn x1_a_gemini_array_stream_frames_every_event_as_one_element() {
        let mut a = JsonArray::default();
        let mut out = a.frame(b"data: {\"a\":1}\r\n\r\ndata: {\"b\":2}\r\n\r\n");
        out.extend(a.frame(b""));
        out.extend(a.frame(b"data: {\"c\":3}\n\n"));
        out.extend(a.frame(b""));
        out.push(b']');
        let v: serde_json::Value = serde_json::from_slice(&out).expect("one JSON array");
        assert_eq!(v, serde_json::json!([{"a": 1}, {"b": 2}, {"c": 3}]));
        // An answer with no event at all is still an array.
        let mut empty = JsonArray::default().frame(b"");
        empty.push(b']');
        assert_eq!(empty, b"[]");
    }
}
