//! What the first frames of a provider's successful answer are, for the failover
//! layer's first-chunk gate (F4). Each vendor's events are known in
//! `portcullis_dialects::vendor`; this module keeps the proxy's name for the classifier
//! the application plugs into its failover layer.

pub use portcullis_dialects::chunk_kind;
