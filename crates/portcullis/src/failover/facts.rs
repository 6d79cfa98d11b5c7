//! Reading a provider's error answer into [`ErrorFacts`](portcullis_core::failover::ErrorFacts)
//! for the classifier (F5). The vendors' error bodies are known in `portcullis-dialects`
//! (`portcullis_dialects::vendor`), on which this crate depends: a user of `portcullis`
//! alone gets them by default, and [`FailoverLayer::error_reader`] injects another
//! reader.
//!
//! [`FailoverLayer::error_reader`]: super::FailoverLayer::error_reader

pub use portcullis_dialects::{ErrorReader, error_facts};
