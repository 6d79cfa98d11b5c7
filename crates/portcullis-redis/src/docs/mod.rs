//! Running the Redis store: one node or a Cluster, what each fault costs, and the
//! settings that keep a deployment serving (a Markdown page in
//! `crates/portcullis-redis/src/docs/`, its Rust compiled as doctests).
#![doc = include_str!("operations.md")]
