//! The helpers of the Redis store's tests: the shared ones from
//! `portcullis-test-support` (one copy for the workspace), and store options of this
//! crate's own.

#![allow(dead_code)]

#[allow(unused_imports)] // not every test file parses `INFO commandstats`
pub use portcullis_test_support::redis::{RedisServer, command_calls};
use std::time::Duration;

/// Store options for a test that is not about a silent Redis: its calls wait for Redis
/// up to 2 s instead of the default 20 ms, so a host whose two cores are busy with
/// other tests cannot fail them (the 20 ms default is what the stall and give-up tests
/// use).
pub fn patient() -> portcullis_redis::RedisStoreOptions {
    portcullis_redis::RedisStoreOptions::default().deadline(Duration::from_secs(2))
}
