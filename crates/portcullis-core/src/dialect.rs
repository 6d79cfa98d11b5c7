//! The API format a client speaks; errors are rendered in it (E1).

/// A client dialect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI chat completions.
    OpenAi,
    /// Anthropic messages.
    Anthropic,
    /// Gemini generateContent.
    Gemini,
    /// The gateway's own format (the default).
    #[default]
    Native,
}

impl Dialect {
    /// The dialect a request path implies: `/v1/chat/completions` (and OpenAI's
    /// other model APIs: embeddings, Responses, images, videos) → OpenAI,
    /// `/v1/messages` → Anthropic, `/v1beta/models/...` → Gemini, else native.
    ///
    /// ```
    /// use portcullis_core::Dialect;
    /// assert_eq!(Dialect::from_path("/v1beta/models/gemini-2.5-pro:generateContent"), Dialect::Gemini);
    /// assert_eq!(Dialect::from_path("/v1/messages"), Dialect::Anthropic);
    /// assert_eq!(Dialect::from_path("/usage"), Dialect::Native);
    /// ```
    pub fn from_path(path: &str) -> Self {
        if path.starts_with("/v1/chat/completions")
            || path.starts_with("/v1/completions")
            || path.starts_with("/v1/embeddings")
            || path.starts_with("/v1/responses")
            || path.starts_with("/v1/images/")
            || path.starts_with("/v1/videos")
        {
            Dialect::OpenAi
        } else if path.starts_with("/v1/messages") {
            Dialect::Anthropic
        } else if path.starts_with("/v1beta/")
            || path.starts_with("/v1/models/") && path.contains(':')
        {
            Dialect::Gemini
        } else {
            Dialect::Native
        }
    }
}

/// A provider's error answer as the provider wrote it, carried in the extensions of a
/// response whose body was translated into the client's dialect (X3): the failover
/// classifier reads the provider's own status and body in the provider's own dialect
/// (F5), the client gets the translation.
#[derive(Clone, Debug)]
pub struct ProviderError {
    /// The dialect the provider answered in.
    pub dialect: Dialect,
    /// The provider's status.
    pub status: u16,
    /// The provider's body (bounded by the forwarder).
    pub body: std::sync::Arc<[u8]>,
}
