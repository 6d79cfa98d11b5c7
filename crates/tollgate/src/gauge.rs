//! Requests each layer holds something for right now (SPEC P4 "in-flight per layer"):
//! a token every guard carries, counted up when the guard is made and down when it
//! is dropped. Without the `metrics` feature it is zero-sized and does nothing.

use tollgate_core::LayerKind;

/// Counts one request in flight in a layer for as long as it lives.
#[derive(Debug)]
pub(crate) struct InFlight {
    #[cfg(feature = "metrics")]
    layer: &'static str,
}

impl InFlight {
    /// One more request in flight in `layer`.
    pub(crate) fn enter(_layer: LayerKind) -> Self {
        #[cfg(feature = "metrics")]
        {
            let layer = _layer.as_str();
            metrics::gauge!("tollgate_in_flight", "layer" => layer).increment(1.0);
            Self { layer }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("tollgate_in_flight", "layer" => self.layer).decrement(1.0);
    }
}
