//! Why a request body cannot be inspected (E4), and the bounds that name it. Apart from
//! the walk and the vendors' rules, which both answer with it.

use std::fmt;

/// Why a request body cannot be inspected; its `Display` is a client-facing reason
/// (E4: answered with 400 in the client's dialect).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The body is not valid JSON (or not UTF-8, or empty).
    Malformed {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error (0 for an empty body).
        column: usize,
        /// The parser's reason.
        reason: String,
    },
    /// The body is valid JSON but not an object.
    NotAnObject,
    /// The body has no `model` (OpenAI, Anthropic).
    MissingModel,
    /// The model is empty or too long.
    InvalidModel {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A field has the wrong type.
    WrongType {
        /// JSON path of the field, e.g. `messages[1].content`.
        field: String,
        /// What it must be, e.g. `a boolean`.
        expected: &'static str,
        /// 1-based line where the bad value was detected.
        line: usize,
        /// 1-based column where the bad value was detected.
        column: usize,
    },
    /// A field the dialect requires is missing (Anthropic `max_tokens`).
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A multipart body (image edits) cannot be read.
    Multipart {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A Gemini path does not name a model and method.
    BadPath {
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl RequestError {
    /// The request field the error is about, for OpenAI's `error.param`.
    pub fn param(&self) -> Option<&str> {
        match self {
            RequestError::WrongType { field, .. } => Some(field),
            RequestError::MissingField { field } => Some(field),
            RequestError::MissingModel | RequestError::InvalidModel { .. } => Some("model"),
            _ => None,
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Malformed {
                line,
                column,
                reason,
            } => write!(
                f,
                "the request body is not valid JSON: {reason} (line {line}, column {column})"
            ),
            RequestError::NotAnObject => f.write_str("the request body must be a JSON object"),
            RequestError::MissingModel => f.write_str("`model` is required"),
            RequestError::InvalidModel { reason } => write!(f, "`model` {reason}"),
            RequestError::WrongType {
                field,
                expected,
                line,
                column,
            } => write!(
                f,
                "`{field}` must be {expected} (line {line}, column {column})"
            ),
            RequestError::MissingField { field } => write!(f, "`{field}` is required"),
            RequestError::Multipart { reason } => write!(
                f,
                "the request body is not valid multipart/form-data: {reason}"
            ),
            RequestError::BadPath { reason } => write!(
                f,
                "the request path {reason}; expected /v1beta/models/{{model}}:generateContent \
                 or :streamGenerateContent"
            ),
        }
    }
}

impl std::error::Error for RequestError {}

pub(crate) const MODEL_TOO_LONG: &str = "must be at most 256 bytes long";

/// Longest provider object id kept ([`RequestFacts::continues`](super::RequestFacts::continues)).
pub const MAX_OBJECT_ID_LEN: usize = 128;
