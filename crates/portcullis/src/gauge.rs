//! Requests each layer holds something for right now (P4, "in-flight per layer"):
//! a token every guard carries, counted up when the guard is made and down when it
//! is dropped. Without the `metrics` feature it is zero-sized and does nothing.
//!
//! The per-request metrics of the layers (these gauges and the attempts histogram)
//! are looked up in the recorder on every use unless [`bind_metrics`] bound them
//! once: a lookup hashes the name and labels and takes the registry's lock, a dozen
//! times per request through the whole stack.

use portcullis_core::LayerKind;

#[cfg(feature = "metrics")]
mod bound {
    use super::LayerKind;
    use metrics::Gauge;
    #[cfg(feature = "failover")]
    use metrics::Histogram;
    use std::sync::OnceLock;

    /// The layers whose in-flight gauge is counted, in index order.
    const LAYERS: [LayerKind; 6] = [
        LayerKind::ConcurrencySlot,
        LayerKind::AnchoredWindow,
        LayerKind::BillingGate,
        LayerKind::UpstreamLimit,
        LayerKind::CapacityQueue,
        LayerKind::Failover,
    ];

    pub(crate) struct Handles {
        in_flight: [Gauge; 6],
        #[cfg(feature = "failover")]
        pub(crate) attempts: Histogram,
    }

    static BOUND: OnceLock<Handles> = OnceLock::new();

    pub(crate) fn bind() {
        BOUND.get_or_init(|| Handles {
            in_flight: LAYERS
                .map(|l| metrics::gauge!("portcullis_in_flight", "layer" => l.as_str())),
            #[cfg(feature = "failover")]
            attempts: metrics::histogram!("portcullis_attempts_per_request"),
        });
    }

    pub(crate) fn get() -> Option<&'static Handles> {
        BOUND.get()
    }

    /// Adds `delta` to the in-flight gauge of `layer`.
    pub(crate) fn in_flight(layer: LayerKind, delta: f64) {
        let bound = get().and_then(|h| {
            let i = LAYERS.iter().position(|l| *l == layer)?;
            Some(&h.in_flight[i])
        });
        match bound {
            Some(g) => g.increment(delta),
            None => {
                metrics::gauge!("portcullis_in_flight", "layer" => layer.as_str()).increment(delta)
            }
        }
    }
}

/// Binds the layers' per-request metric handles to the recorder installed now, so
/// that a request no longer looks each one up in the recorder's registry. Call it
/// once, after installing the recorder and before serving; handles bound before a
/// recorder is installed record nothing. Without it every use looks the handle up
/// (always correct, slower).
///
/// The layers record histograms on every request. A recorder that buffers samples
/// until it is scraped (`metrics-exporter-prometheus` made with `build_recorder`)
/// must have its upkeep run periodically, or memory grows with every request served.
#[cfg(feature = "metrics")]
pub fn bind_metrics() {
    bound::bind();
}

/// Records the attempts one request took (retry amplification, P4).
#[cfg(all(feature = "metrics", feature = "failover"))]
pub(crate) fn record_attempts(attempts: u32) {
    match bound::get() {
        Some(h) => h.attempts.record(f64::from(attempts)),
        None => metrics::histogram!("portcullis_attempts_per_request").record(f64::from(attempts)),
    }
}

/// Counts one request in flight in a layer for as long as it lives.
#[derive(Debug)]
pub(crate) struct InFlight {
    #[cfg(feature = "metrics")]
    layer: LayerKind,
}

impl InFlight {
    /// One more request in flight in `layer`.
    pub(crate) fn enter(_layer: LayerKind) -> Self {
        #[cfg(feature = "metrics")]
        {
            bound::in_flight(_layer, 1.0);
            Self { layer: _layer }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        bound::in_flight(self.layer, -1.0);
    }
}
