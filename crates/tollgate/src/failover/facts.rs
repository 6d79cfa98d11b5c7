//! Reading a provider's error answer into [`ErrorFacts`](tollgate_core::failover::ErrorFacts)
//! for the classifier (F5). The vendors' error bodies are known in `tollgate-dialects`
//! (`tollgate_dialects::vendor`), on which this crate depends: a user of `tollgate`
//! alone gets them by default, and [`FailoverLayer::error_reader`] injects another
//! reader.
//!
//! [`FailoverLayer::error_reader`]: super::FailoverLayer::error_reader

pub use tollgate_dialects::{ErrorReader, error_facts};
