//! Clocks for the layers.

use portcullis_core::{Clock, Millis};
use std::time::Duration;
use tokio::time::Instant;

/// A [`Clock`] on tokio's time: it follows `tokio::time::pause` / `advance`, so layer
/// tests with paused time and an in-memory store see one consistent "now".
#[derive(Clone, Debug)]
pub struct TokioClock {
    origin: Instant,
    base: Millis,
}

impl TokioClock {
    /// A clock reading `base` now.
    pub fn new(base: Millis) -> Self {
        Self {
            origin: Instant::now(),
            base,
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new(portcullis_core::SystemClock::new().now())
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Millis {
        self.base + portcullis_core::clock::millis(self.origin.elapsed())
    }
}

/// Converts milliseconds to a [`Duration`].
pub(crate) fn ms(m: Millis) -> Duration {
    Duration::from_millis(m)
}
