use super::ErrorMapping;
use portcullis_core::Dialect;
use tower_layer::Layer;

/// Applies [`ErrorMapping`] to a service: every rejection and error of the stack below
/// becomes a response in the client's dialect (E1–E3).
///
/// Configuration only; cheap to clone (`Copy`). See the [module docs](super) for an
/// example.
///
/// With the `grpc` feature, a gRPC request (`content-type: application/grpc…`, see
/// `error_map::is_grpc`) is answered with a gRPC status instead
/// (`error_map::render_grpc`); `ErrorMappingLayer::grpc` answers every request that
/// way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorMappingLayer {
    dialect: Option<Dialect>,
    #[cfg(feature = "grpc")]
    grpc: bool,
}

impl ErrorMappingLayer {
    /// A layer that chooses the dialect per request: a [`Dialect`] in the request
    /// extensions, else [`Dialect::from_path`] of the request path.
    pub fn new() -> Self {
        Self::default()
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

    /// Answers **every** request with a gRPC status, whatever its `content-type`: for
    /// a stack that serves only gRPC (a tonic server), so that even a client that
    /// sends no or an odd `content-type` gets an answer it can read. Without it, only
    /// requests that [`is_grpc`](super::is_grpc) are answered the gRPC way and the
    /// rest in their dialect.
    #[cfg(feature = "grpc")]
    pub fn grpc(mut self) -> Self {
        self.grpc = true;
        self
    }

    /// Whether [`grpc`](Self::grpc) is set.
    #[cfg(feature = "grpc")]
    pub fn is_grpc_only(&self) -> bool {
        self.grpc
    }

    /// How an error of `req` is answered.
    pub(super) fn form_for<B>(&self, req: &http::Request<B>) -> super::Form {
        #[cfg(feature = "grpc")]
        if self.grpc || super::is_grpc(req.headers()) {
            return super::Form::Grpc;
        }
        // A Dialect extension, else the forced dialect, else the path.
        super::Form::Http(
            req.extensions()
                .get::<Dialect>()
                .copied()
                .or(self.dialect)
                .unwrap_or_else(|| Dialect::from_path(req.uri().path())),
        )
    }
}

impl<S> Layer<S> for ErrorMappingLayer {
    type Service = ErrorMapping<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorMapping::with_config(inner, *self)
    }
}
