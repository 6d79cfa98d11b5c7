//! The store conformance suite (filled in below).
