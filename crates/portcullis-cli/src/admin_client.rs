//! The client of a running gateway's JSON admin API (`/admin/keys…`, `/admin/tenants…`)
//! that `portcullis keys` and `portcullis tenants` use: one request, bounded by a
//! timeout, its answer as JSON or the gateway's error.
//!
//! Plain `http://` and `https://` (rustls with the webpki roots, as the gateway's own
//! upstream client), HTTP/1.1.

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// Why a call did not succeed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The gateway answered, with an error.
    Refused {
        status: StatusCode,
        message: String,
        /// The field a 400 names.
        field: Option<String>,
    },
    /// No answer: no connection, a timeout, a broken or unreadable answer.
    Transport(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused {
                status,
                message,
                field,
            } => {
                write!(f, "the gateway answered {status}: {message}")?;
                if let Some(field) = field {
                    write!(f, " (field `{field}`)")?;
                }
                Ok(())
            }
            Self::Transport(why) => f.write_str(why),
        }
    }
}

/// A gateway's admin API, called with one bearer token.
pub(crate) struct AdminClient {
    /// `scheme://authority[/prefix]`, no trailing slash.
    base: String,
    /// `Bearer …`, marked sensitive.
    authorization: HeaderValue,
    /// Where the token came from (`$VAR`), for the messages of a refused token.
    token_source: String,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl AdminClient {
    /// A client of the gateway at `gateway` (`http://host:port`, `https://…`, with an
    /// optional path prefix), sending `token`, which came from `token_source`; each call
    /// (connection included) bounded by `timeout`.
    pub(crate) fn new(
        gateway: &str,
        token: &str,
        token_source: &str,
        timeout: Duration,
    ) -> Result<Self, String> {
        let base = base_url(gateway)?;
        let mut authorization = HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|_| format!("the token in {token_source} is not a valid header value"))?;
        authorization.set_sensitive(true);
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            base,
            authorization,
            token_source: token_source.to_owned(),
            client: Client::builder(TokioExecutor::new()).build(https),
            timeout,
        })
    }

    /// `method path` with `body` as JSON: the answer's JSON (`null` for an empty one).
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(&url)
            .header(AUTHORIZATION, self.authorization.clone())
            .header(ACCEPT, "application/json");
        let body = match body {
            Some(b) => {
                req = req.header(CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(b.to_string()))
            }
            None => Full::new(Bytes::new()),
        };
        let req = req
            .body(body)
            .map_err(|e| Failure::Transport(format!("{method} {url}: {e}")))?;
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| {
                if e.is_connect() {
                    Failure::Transport(format!(
                        "cannot connect to the gateway at {}: {} (is `portcullis serve` \
                         running there? --gateway or PORTCULLIS_URL names it)",
                        self.base,
                        chain(&e)
                    ))
                } else {
                    Failure::Transport(format!("{method} {url}: {}", chain(&e)))
                }
            })?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| {
                    Failure::Transport(format!("{method} {url}: reading the answer: {}", chain(&e)))
                })?
                .to_bytes();
            Ok::<_, Failure>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                Failure::Transport(format!(
                    "{method} {url}: the gateway at {} did not answer within {} s",
                    self.base,
                    self.timeout.as_secs()
                ))
            })??;
        let json = if bytes.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_slice::<Value>(&bytes)
        };
        if status.is_success() {
            return json.map_err(|e| {
                Failure::Transport(format!(
                    "{method} {url}: the answer ({status}) is not JSON: {e}"
                ))
            });
        }
        // The admin routes answer `{"error": {"message", "field"}}`; anything else (the
        // model routes' fallback, a proxy in front) is shown as it came.
        let routed = json
            .as_ref()
            .ok()
            .and_then(|v| v["error"]["message"].as_str())
            .map(str::to_owned);
        let field = json
            .as_ref()
            .ok()
            .and_then(|v| v["error"]["field"].as_str())
            .map(str::to_owned);
        let message = routed.clone().unwrap_or_else(|| match &json {
            Ok(v) => v["message"]
                .as_str()
                .map_or_else(|| v.to_string(), str::to_owned),
            Err(_) => String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
                .trim()
                .to_owned(),
        });
        let message = match status {
            StatusCode::NOT_FOUND
                if routed.is_none() || routed.as_deref() == Some("No such route.") =>
            {
                let route = path.split('?').next().unwrap_or(path);
                format!(
                    "{message} (this gateway serves no admin route {route}: it needs \
                     `[server] admin_token` and a records database)"
                )
            }
            StatusCode::UNAUTHORIZED => {
                format!("{message} (the token in {} was refused)", self.token_source)
            }
            _ => message,
        };
        Err(Failure::Refused {
            status,
            message,
            field,
        })
    }
}

/// `gateway` checked and without its trailing slash.
fn base_url(gateway: &str) -> Result<String, String> {
    let bad = |why: &str| format!("--gateway {gateway:?}: {why}");
    let uri: Uri = gateway
        .trim()
        .parse()
        .map_err(|e| bad(&format!("not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(bad("must start with http:// or https://")),
    }
    if uri.authority().is_none() {
        return Err(bad("names no host"));
    }
    if uri.query().is_some() {
        return Err(bad("must have no query"));
    }
    Ok(gateway.trim().trim_end_matches('/').to_owned())
}

/// An error and its sources, `: `-separated (hyper's own says only "client error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let m = s.to_string();
        if !text.contains(&m) {
            text.push_str(": ");
            text.push_str(&m);
        }
        source = s.source();
    }
    text
}

/// `s` as one path segment or query value (RFC 3986 unreserved characters kept, every
/// other byte percent-encoded).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k10_gateway_urls_are_checked_and_segments_encoded() {
        assert_eq!(
            base_url("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            base_url("https://gw.example/prefix/").unwrap(),
            "https://gw.example/prefix"
        );
        for bad in ["127.0.0.1:8080", "ftp://x", "http://x/?a=b", "not a url"] {
            assert!(base_url(bad).is_err(), "{bad}");
        }
        assert_eq!(encode("key_01-a.b~c"), "key_01-a.b~c");
        assert_eq!(encode("a b/c?d&é"), "a%20b%2Fc%3Fd%26%C3%A9");
    }
}
