//! Translation between the generation dialects: a client speaking one vendor's API
//! served by a channel of another (X1–X4 in the contract's translation page).
//!
//! Plain, I/O-free functions over bytes, usable without the proxy:
//!
//! - [`request`]: a client's generation request, parsed once into typed structures
//!   and written in the channel's dialect, under the channel's upstream model id.
//!   A field the target cannot express is refused ([`TranslateError::Unsupported`],
//!   the client's 400 naming the field), never dropped.
//! - [`response`]: a buffered (non-streamed) successful answer, written back in the
//!   client's dialect under the public model name.
//! - [`StreamTranslator`]: a streamed (SSE) answer, translated event by event in
//!   constant memory per event; an upstream stream that ends without its final event
//!   ends as an error in the client's dialect, never as a clean finish.
//! - [`error`]: a provider's error answer rendered in the client's dialect (status,
//!   type, message; the classifier reads the provider's own body, F5).
//!
//! Pairs translated today: OpenAI chat completions ↔ Anthropic messages
//! ([`translates`]). Gemini and the Responses API are served by channels of their own
//! vendor only, as before.
//!
//! The wire types are written here rather than taken from a crate: the maintained
//! client crates (`async-openai`, the Anthropic and Gemini community crates) model a
//! *client's* view — they drop unknown fields, make every field optional in different
//! ways per release, and pull in an HTTP client — where a gateway must see every field
//! it cannot translate (to refuse it) and nothing else.

mod error;
mod request;
mod response;
mod stream;

pub use error::{TranslatedError, error};
pub use request::request;
pub use response::response;
pub use stream::StreamTranslator;

use portcullis_core::Dialect;

/// Why a request or answer could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranslateError {
    /// The body is not a valid request or answer of its dialect.
    Malformed(String),
    /// A field the target dialect cannot express (its JSON path, e.g. `n` or
    /// `messages[2].content[0].type`) and why.
    Unsupported {
        /// The field, as the client named it.
        field: String,
        /// Why it cannot be translated.
        why: String,
    },
}

impl std::fmt::Display for TranslateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(m) => write!(f, "{m}"),
            Self::Unsupported { field, why } => {
                write!(
                    f,
                    "`{field}` cannot be sent to this model's provider: {why}"
                )
            }
        }
    }
}

impl std::error::Error for TranslateError {}

/// Whether a generation request of a `client` dialect can be served by a channel of
/// `vendor`: the same dialect (no translation), or a pair [`request`] translates.
pub fn translates(client: Dialect, vendor: Dialect) -> bool {
    client == vendor
        || matches!(
            (client, vendor),
            (Dialect::OpenAi, Dialect::Anthropic) | (Dialect::Anthropic, Dialect::OpenAi)
        )
}
