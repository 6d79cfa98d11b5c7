//! Runnable examples of portcullis (see `[[example]]` in this crate's manifest).
//!
//! This library holds no code of its own: it compiles and runs the Rust snippets of the
//! workspace's README as doctests (`cargo test -p portcullis-examples --doc`), the way
//! axum keeps its guides in markdown pulled in with `#[doc = include_str!]`. A snippet
//! that stops compiling, or whose assertions stop holding, fails the suite.

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeSnippets;
