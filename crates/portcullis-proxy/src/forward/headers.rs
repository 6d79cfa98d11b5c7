//! Which headers pass, both ways (P2): the built-in allow-lists and those of
//! `[forwarding]` ([`AllowLists`]), the hop-by-hop headers never copied, and the
//! provider's request id kept under a name of its own.

use crate::catalog::{Route, dialect_index};
use crate::config::{ForwardedHeader, ForwardingSettings};
use http::header::{self, HeaderMap, HeaderName};

/// Hop-by-hop headers, and what the client library recomputes: never copied from a
/// provider's answer (nor, being outside every allow-list, from a client's request).
const STRIP: [HeaderName; 14] = [
    header::AUTHORIZATION,
    // The answer is read for its usage on the way through: ask for it uncompressed
    // (a compressed body would leave every SDK request unsettled).
    header::ACCEPT_ENCODING,
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("x-goog-api-key"),
    header::HOST,
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// The request id header: the gateway's own on the way up (the client's is taken off
/// before the gateway makes one, see `crate::app`); the provider's, on the way back, is
/// kept for support as `x-upstream-request-id`.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Anthropic's name for its request id.
const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");
const X_UPSTREAM_REQUEST_ID: HeaderName = HeaderName::from_static("x-upstream-request-id");

fn strip_hop_by_hop(h: &mut HeaderMap) {
    for name in STRIP.iter() {
        h.remove(name);
    }
}

/// Request headers every channel receives when the client sent them (besides the
/// vendor's own list in `[forwarding]`): nothing that carries a credential, picks an
/// account, or says who the client is.
const REQUEST_BUILT_IN: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::ACCEPT,
    X_REQUEST_ID,
    HeaderName::from_static("idempotency-key"),
];

/// Response headers every client receives when the answer has them (besides
/// `[forwarding] response_headers`). Not among them: `set-cookie`, `server`, the
/// provider's organisation and project headers, and (unless
/// `provider_rate_limit_headers`) its rate-limit headers.
const RESPONSE_BUILT_IN: [HeaderName; 7] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CACHE_CONTROL,
    header::RETRY_AFTER,
    X_REQUEST_ID,
    X_UPSTREAM_REQUEST_ID,
];

/// The gateway's own headers (`x-portcullis-queued-ms`, …): passed to the client, never
/// taken from a provider.
const GATEWAY_PREFIX: &str = "x-portcullis-";
/// The bundled fake upstream's control headers: forwarded only to channels on
/// `fake://` or a loopback address, where the fake runs (it binds loopback only).
const FAKE_PREFIX: &str = "x-fake-";
/// The providers' rate-limit headers: the operator's account, not the client's.
use portcullis_dialects::providers::RATE_LIMIT_HEADER_PREFIXES as RATE_LIMIT_PREFIXES;

/// The header allow-lists of both directions (P2), built once from the
/// configuration's `[forwarding]` section.
#[derive(Debug)]
pub struct AllowLists {
    /// Extra request headers per channel dialect (in `dialect_index` order).
    request: [Vec<HeaderName>; 4],
    /// Extra response headers.
    response: Vec<HeaderName>,
    /// Pass the providers' rate-limit headers.
    rate_limit_headers: bool,
}

impl AllowLists {
    /// The lists of `[forwarding]`.
    pub fn new(c: &ForwardingSettings) -> Self {
        let names =
            |v: &[ForwardedHeader]| -> Vec<HeaderName> { v.iter().map(|h| h.0.clone()).collect() };
        Self {
            request: [
                names(&c.openai_headers),
                names(&c.anthropic_headers),
                names(&c.gemini_headers),
                names(&c.openai_headers),
            ],
            response: names(&c.response_headers),
            rate_limit_headers: c.provider_rate_limit_headers,
        }
    }

    /// Whether a client's request header goes to `route`.
    pub fn request_allowed(&self, route: &Route, name: &HeaderName) -> bool {
        REQUEST_BUILT_IN.contains(name)
            || self.request[dialect_index(route.dialect)].contains(name)
            || (route.fake_controls && name.as_str().starts_with(FAKE_PREFIX))
    }

    /// Whether a response header reaches the client.
    pub fn response_allowed(&self, name: &HeaderName) -> bool {
        let n = name.as_str();
        RESPONSE_BUILT_IN.contains(name)
            || n.starts_with(GATEWAY_PREFIX)
            || self.response.contains(name)
            || (self.rate_limit_headers && RATE_LIMIT_PREFIXES.iter().any(|p| n.starts_with(p)))
    }
}

/// Keeps the headers (every value of each) whose name `keep` accepts.
pub(super) fn retain(h: &mut HeaderMap, mut keep: impl FnMut(&HeaderName) -> bool) {
    if h.keys().all(&mut keep) {
        return;
    }
    let old = std::mem::take(h);
    let mut current: Option<(HeaderName, bool)> = None;
    for (name, value) in old {
        if let Some(name) = name {
            let k = keep(&name);
            current = Some((name, k));
        }
        if let Some((name, true)) = &current {
            h.append(name.clone(), value);
        }
    }
}

/// The provider's answer headers as the client gets them: no hop-by-hop headers, none
/// of the gateway's own (a provider cannot set them), and the provider's request id
/// (OpenAI's `x-request-id`, Anthropic's `request-id`) kept for support under its own
/// name, since the answer carries the gateway's (E3).
pub(super) fn answer_headers(h: &mut HeaderMap) {
    strip_hop_by_hop(h);
    retain(h, |n| !n.as_str().starts_with(GATEWAY_PREFIX));
    let theirs = h.remove(X_REQUEST_ID);
    let anthropic = h.remove(REQUEST_ID);
    if let Some(theirs) = theirs.or(anthropic) {
        h.insert(X_UPSTREAM_REQUEST_ID, theirs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn p2_retain_keeps_every_value_of_a_kept_header_and_nothing_else() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("set-cookie", "a=1"),
            ("cache-control", "no-cache"),
            ("set-cookie", "b=2"),
            ("x-keep", "1"),
            ("x-keep", "2"),
            ("server", "s"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        retain(&mut h, |n| {
            n.as_str() != "set-cookie" && n.as_str() != "server"
        });
        let kept: Vec<(&str, &str)> = h
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            kept,
            [
                ("cache-control", "no-cache"),
                ("x-keep", "1"),
                ("x-keep", "2")
            ]
        );
    }

    #[test]
    fn p2_client_credentials_and_hop_by_hop_headers_never_reach_the_provider() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer sk-client"),
            ("x-api-key", "sk-client"),
            ("x-goog-api-key", "sk-client"),
            ("proxy-authorization", "Basic Zm9v"),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("connection", "keep-alive"),
            ("te", "trailers"),
            ("accept-encoding", "gzip"),
            ("content-length", "12"),
            ("host", "gateway.example"),
            ("content-type", "application/json"),
            ("anthropic-version", "2023-06-01"),
            ("x-request-id", "pc-1"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["anthropic-version", "content-type", "x-request-id"]);
    }
}
