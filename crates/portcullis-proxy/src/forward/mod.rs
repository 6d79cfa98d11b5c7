//! Sends a prepared request to a channel and streams the answer back, watching it for
//! usage (P2, W5). One file per concern:
//!
//! | file | what |
//! | --- | --- |
//! | `client.rs` | the pooled upstream client ([`HttpClient`], [`http_client`]) |
//! | `send.rs` | the forwarder ([`Forward`]): picks the channel, sends the attempt within `upstream_timeout`, hands back the answer |
//! | `request.rs` | the request to the provider: its URI and query, the channel's credential, the Gemini methods served ([`gemini_method_served`]) |
//! | `headers.rs` | which headers pass, both ways ([`AllowLists`]), hop-by-hop headers, the provider's request id |
//! | `body.rs` | the answer's body ([`ForwardBody`]): frame by frame, cut after `upstream_idle_timeout` of silence |
//! | `usage.rs` | what the answer used, recorded once, and the home of the object it created (P6) |
//! | `translate.rs` | an attempt to a channel of another vendor (X1–X3): the request in the channel's dialect, the answer back in the client's |
//! | `error.rs` | the typed failures of an attempt (`portcullis_core::UpstreamError`) |
//! | `response_headers.rs` | the layer that applies the response allow-list ([`ResponseHeadersLayer`]) |
//!
//! Imports go one way: the forwarder reads [`crate::prepare`] (the request's facts),
//! [`crate::catalog`] (the channels), [`crate::homes`], [`crate::telemetry`] and
//! [`crate::config`] (the `[forwarding]` lists); none of those reads the forwarder.

mod body;
mod client;
mod error;
mod headers;
mod request;
mod response_headers;
mod send;
mod translate;
mod usage;

pub use body::ForwardBody;
pub use client::{HttpClient, http_client};
pub use headers::AllowLists;
pub use request::{GEMINI_METHODS, gemini_method_served};
pub use response_headers::{ResponseHeaders, ResponseHeadersFuture, ResponseHeadersLayer};
pub use send::{Forward, ForwardFuture};
