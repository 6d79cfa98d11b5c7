use super::ErrorMapping;
use tollgate_core::Dialect;
use tower_layer::Layer;

/// Applies [`ErrorMapping`] to a service: every rejection and error of the stack below
/// becomes a response in the client's dialect (E1–E3).
///
/// Configuration only; cheap to clone (`Copy`). See the [module docs](super) for an
/// example.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorMappingLayer {
    dialect: Option<Dialect>,
}

impl ErrorMappingLayer {
    /// A layer that chooses the dialect per request: a [`Dialect`] in the request
    /// extensions, else [`Dialect::from_path`] of the request path.
    pub fn new() -> Self {
        Self { dialect: None }
    }

    /// Forces a dialect for requests that carry no [`Dialect`] extension (the
    /// extension still wins), instead of choosing it from the path.
    pub fn dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = Some(dialect);
        self
    }

    /// The forced dialect, if any.
    pub fn forced_dialect(&self) -> Option<Dialect> {
        self.dialect
    }
}

impl<S> Layer<S> for ErrorMappingLayer {
    type Service = ErrorMapping<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorMapping::with_dialect(inner, self.dialect)
    }
}
