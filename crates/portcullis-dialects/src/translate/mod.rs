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
//! Every generation API is translated to every vendor ([`translates`], [`Wire`]), with
//! OpenAI chat completions as the hub: `request` and `response` (OpenAI chat ↔
//! Anthropic messages), `gemini` (↔ Gemini generateContent) and `responses` (the
//! Responses API, a client's API only) each translate to and from chat, and a pair
//! without chat on either side runs both legs — a stream through two [`StreamTranslator`]
//! stages. Each module's docs list what it refuses and approximates.
//!
//! The wire types are written here rather than taken from a crate: the maintained
//! client crates (`async-openai`, the Anthropic and Gemini community crates) model a
//! *client's* view — they drop unknown fields, make every field optional in different
//! ways per release, and pull in an HTTP client — where a gateway must see every field
//! it cannot translate (to refuse it) and nothing else.

mod error;
mod gemini;
mod request;
mod response;
mod responses;
mod stream;

pub use error::TranslatedError;
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

/// The generation API a body is written in. OpenAI chat completions is the hub:
/// every other pair is translated through it (two legs, each a plain function),
/// so each API needs one translator to and one from chat, not one per pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    /// OpenAI chat completions (`/v1/chat/completions`).
    Chat,
    /// The OpenAI Responses API (`/v1/responses`): a client's API only; a channel
    /// of OpenAI serves it as itself.
    Responses,
    /// Anthropic messages (`/v1/messages`).
    Messages,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

impl Wire {
    /// The generation API of a request of `dialect` at `path` (query excluded), when
    /// it is one the translators read.
    pub fn of(dialect: Dialect, path: &str) -> Option<Self> {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        match dialect {
            Dialect::OpenAi if path.ends_with("/chat/completions") => Some(Self::Chat),
            Dialect::OpenAi if path.ends_with("/responses") => Some(Self::Responses),
            Dialect::Anthropic if path.ends_with("/messages") => Some(Self::Messages),
            Dialect::Gemini
                if path.ends_with(":generateContent")
                    || path.ends_with(":streamGenerateContent") =>
            {
                Some(Self::Gemini)
            }
            _ => None,
        }
    }

    /// The API a translated request is sent to a channel of `vendor` in.
    pub fn served_by(vendor: Dialect) -> Option<Self> {
        match vendor {
            Dialect::OpenAi => Some(Self::Chat),
            Dialect::Anthropic => Some(Self::Messages),
            Dialect::Gemini => Some(Self::Gemini),
            Dialect::Native => None,
        }
    }

    /// The vendor whose API this is.
    pub fn dialect(self) -> Dialect {
        match self {
            Self::Chat | Self::Responses => Dialect::OpenAi,
            Self::Messages => Dialect::Anthropic,
            Self::Gemini => Dialect::Gemini,
        }
    }
}

/// Whether a generation request of a `client` dialect can be served by a channel of
/// `vendor`: every generation API reaches every vendor (the same vendor without
/// translation).
pub fn translates(client: Dialect, vendor: Dialect) -> bool {
    client == vendor || (client != Dialect::Native && vendor != Dialect::Native)
}

fn unsupported_pair(what: &str, from: Wire, to: Wire) -> TranslateError {
    TranslateError::Unsupported {
        field: "model".into(),
        why: format!("{what} of {from:?} are not translated to {to:?}"),
    }
}

/// `body`, a generation request in `from`, written in `to` for model
/// `upstream_model`; `default_max_tokens` where `to` requires a maximum the client
/// did not give. `stream`: the client asked for a stream (read from a Gemini
/// client's path; the other APIs say it in the body, which is what is read there).
pub fn request(
    from: Wire,
    to: Wire,
    body: &[u8],
    upstream_model: &str,
    default_max_tokens: u64,
    stream: bool,
) -> Result<Vec<u8>, TranslateError> {
    let to_chat = |body: &[u8]| match from {
        Wire::Chat => Ok(body.to_vec()),
        Wire::Messages => request::messages_to_chat(body, upstream_model),
        Wire::Gemini => gemini::request_to_chat(body, upstream_model, stream),
        Wire::Responses => responses::request_to_chat(body, upstream_model),
    };
    let from_chat = |chat: &[u8]| match to {
        Wire::Chat => Ok(chat.to_vec()),
        Wire::Messages => request::chat_to_messages(chat, upstream_model, default_max_tokens),
        Wire::Gemini => gemini::request_from_chat(chat),
        Wire::Responses => Err(unsupported_pair("requests", from, to)),
    };
    match (from, to) {
        _ if from == to => Ok(body.to_vec()),
        (Wire::Chat, _) => from_chat(body),
        (_, Wire::Chat) => to_chat(body),
        _ => from_chat(&to_chat(body)?).map_err(|e| match e {
            // The second leg names a field of the chat request it read: the client
            // is told the field of its own request.
            TranslateError::Unsupported { field, why } => TranslateError::Unsupported {
                field: client_field(from, body, &field),
                why,
            },
            e => e,
        }),
    }
}

/// The field of a `from` client's request `body` that a path `field` of the hub's
/// chat request was written from. Responses requests map item by item; for the other
/// APIs the settings map one to one and a path into the conversation names the
/// conversation (its turns are merged and reordered on the way, so an index would
/// mislead).
fn client_field(from: Wire, body: &[u8], field: &str) -> String {
    const MESSAGES: [(&str, &str); 9] = [
        ("max_completion_tokens", "max_tokens"),
        ("stop", "stop_sequences"),
        ("reasoning_effort", "thinking"),
        (
            "parallel_tool_calls",
            "tool_choice.disable_parallel_tool_use",
        ),
        ("user", "metadata.user_id"),
        ("messages", "messages"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("tools", "tools"),
    ];
    const GEMINI: [(&str, &str); 14] = [
        ("max_completion_tokens", "generationConfig.maxOutputTokens"),
        ("max_tokens", "generationConfig.maxOutputTokens"),
        ("temperature", "generationConfig.temperature"),
        ("top_p", "generationConfig.topP"),
        ("stop", "generationConfig.stopSequences"),
        ("seed", "generationConfig.seed"),
        ("presence_penalty", "generationConfig.presencePenalty"),
        ("frequency_penalty", "generationConfig.frequencyPenalty"),
        ("n", "generationConfig.candidateCount"),
        ("response_format", "generationConfig.responseMimeType"),
        ("reasoning_effort", "generationConfig.thinkingConfig"),
        ("tool_choice", "toolConfig.functionCallingConfig"),
        ("messages", "contents"),
        ("tools", "tools"),
    ];
    let table: &[(&str, &str)] = match from {
        Wire::Responses => return responses::client_field(body, field),
        Wire::Chat => return field.to_owned(),
        Wire::Messages => &MESSAGES,
        Wire::Gemini => &GEMINI,
    };
    let head = field.split(['.', '[']).next().unwrap_or(field);
    match table.iter().find(|(chat, _)| *chat == head) {
        // A path into the conversation or the tools names it whole.
        Some((_, client)) if head == "messages" || head == "tools" => (*client).to_owned(),
        Some((_, client)) => format!("{client}{}", &field[head.len()..]),
        None => field.to_owned(),
    }
}

/// `body`, a successful non-streamed answer in `from`, written in `to` under the
/// public model name `public_model`.
pub fn response(
    from: Wire,
    to: Wire,
    body: &[u8],
    public_model: &str,
) -> Result<Vec<u8>, TranslateError> {
    let to_chat = |body: &[u8]| match from {
        Wire::Chat => Ok(body.to_vec()),
        Wire::Messages => response::messages_to_chat(body, public_model),
        Wire::Gemini => gemini::response_to_chat(body, public_model),
        Wire::Responses => Err(unsupported_pair("answers", from, to)),
    };
    let from_chat = |chat: &[u8]| match to {
        Wire::Chat => Ok(chat.to_vec()),
        Wire::Messages => response::chat_to_messages(chat, public_model),
        Wire::Gemini => gemini::response_from_chat(chat, public_model),
        Wire::Responses => responses::response_from_chat(chat, public_model),
    };
    match (from, to) {
        _ if from == to => Ok(body.to_vec()),
        (Wire::Chat, _) => from_chat(body),
        (_, Wire::Chat) => to_chat(body),
        _ => from_chat(&to_chat(body)?),
    }
}

/// A provider's error answer (`status`, `body` in `from`'s vendor format) written
/// for a client of `to`. The Responses API's errors are OpenAI's.
pub fn error(from: Wire, to: Wire, status: u16, body: &[u8]) -> TranslatedError {
    let (from, to) = (from.dialect(), to.dialect());
    let via = |from: Dialect, to: Dialect, status: u16, body: &[u8]| match (from, to) {
        (Dialect::Gemini, Dialect::OpenAi) => gemini::error_to_chat(status, body),
        (Dialect::OpenAi, Dialect::Gemini) => gemini::error_from_chat(status, body),
        _ => error::error(from, to, status, body),
    };
    if from == to || from == Dialect::OpenAi || to == Dialect::OpenAi {
        via(from, to, status, body)
    } else {
        let chat = via(from, Dialect::OpenAi, status, body);
        via(Dialect::OpenAi, to, chat.status, &chat.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x2_a_refusal_of_the_hubs_second_leg_names_the_responses_clients_field() {
        // A format with thinking: Anthropic cannot force its format tool while thinking.
        let body = br#"{"model": "m", "input": "hi", "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}}}}"#;
        let e = request(Wire::Responses, Wire::Messages, body, "claude", 64, false).unwrap_err();
        assert!(
            matches!(&e, TranslateError::Unsupported { field, .. } if field == "text.format"),
            "{e:?}"
        );
    }

    #[test]
    fn x2_a_refusal_of_the_hubs_second_leg_names_the_anthropic_or_gemini_clients_field() {
        // A Gemini client's seed and candidate count, which Anthropic has no room for.
        let gemini = br#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"seed": 7}}"#;
        let field = |from, body: &[u8], to| match request(from, to, body, "m", 64, false) {
            Err(TranslateError::Unsupported { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(Wire::Gemini, gemini, Wire::Messages),
            "generationConfig.seed"
        );
        let gemini = br#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"candidateCount": 1, "temperature": 1.5}}"#;
        assert_eq!(
            field(Wire::Gemini, gemini, Wire::Messages),
            "generationConfig.temperature"
        );
        // An Anthropic client's image by URL, which Gemini does not fetch: the
        // conversation is named, not the hub's index into it.
        let anthropic = br#"{"model": "m", "max_tokens": 10, "messages": [{"role": "user",
            "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]}"#;
        assert_eq!(field(Wire::Messages, anthropic, Wire::Gemini), "messages");
        // A field with no counterpart is passed on as the hub named it.
        assert_eq!(client_field(Wire::Messages, b"{}", "logprobs"), "logprobs");
        assert_eq!(
            client_field(Wire::Gemini, b"{}", "stop[1]"),
            "generationConfig.stopSequences[1]"
        );
    }

    #[test]
    fn x1_every_generation_api_is_read_from_its_path() {
        for (d, path, want) in [
            (Dialect::OpenAi, "/v1/chat/completions", Some(Wire::Chat)),
            (Dialect::OpenAi, "/v1/responses", Some(Wire::Responses)),
            (Dialect::OpenAi, "/v1/embeddings", None),
            (Dialect::Anthropic, "/v1/messages", Some(Wire::Messages)),
            (Dialect::Anthropic, "/v1/messages/count_tokens", None),
            (
                Dialect::Gemini,
                "/v1beta/models/m:generateContent",
                Some(Wire::Gemini),
            ),
            (
                Dialect::Gemini,
                "/v1beta/models/m:streamGenerateContent?alt=sse",
                Some(Wire::Gemini),
            ),
            (Dialect::Gemini, "/v1beta/models/m:countTokens", None),
            (Dialect::Native, "/v1/chat/completions", None),
        ] {
            assert_eq!(Wire::of(d, path), want, "{path}");
        }
        for d in [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini] {
            assert_eq!(Wire::served_by(d).map(Wire::dialect), Some(d));
        }
        assert_eq!(Wire::served_by(Dialect::Native), None);
        assert!(translates(Dialect::Gemini, Dialect::Anthropic));
        assert!(!translates(Dialect::Native, Dialect::OpenAi));
        assert!(!translates(Dialect::OpenAi, Dialect::Native));
    }
}
