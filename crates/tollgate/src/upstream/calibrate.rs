//! Provider rate signals (U3): the vendors' rate-limit headers and `retry-after`, read
//! into one [`RateSignal`], and the cooldown they call for. The headers and their
//! formats are known in `tollgate-dialects` (`tollgate_dialects::vendor`), on which
//! this crate depends: a user of `tollgate` alone reads them by default, and
//! [`UpstreamLimitLayer::with_rate_reader`] injects another reader.
//!
//! [`UpstreamLimitLayer::with_rate_reader`]: super::UpstreamLimitLayer::with_rate_reader

pub use tollgate_dialects::{MAX_SIGNAL_MS, RateReader, RateSignal};
