//! Test helpers shared by the workspace's test files, compiled once instead of once per
//! test binary that used to include them with `#[path = "…"] mod …;`.
//!
//! - [`redis`]: a private `redis-server` per test ([`redis::RedisServer`]), with the
//!   faults of T5 (stop, continue, kill, restart) and `INFO commandstats` parsing;
//! - [`cluster`]: a private Redis Cluster per test ([`cluster::RedisCluster`]), with its
//!   faults (failover, kill, freeze, slot migration);
//! - [`link`]: a TCP link to a server that a test can cut and mend ([`link::Link`]):
//!   the network gone, where a stopped server would still run what waited for it;
//! - [`postgres`]: a private PostgreSQL server per test ([`postgres::PostgresServer`],
//!   also re-exported as [`PostgresServer`]), with its faults (kill, stall, restart).
//!
//! Only `std` is used. A dev-dependency of the crates whose tests use it
//! (`portcullis-test-support = { path = "../portcullis-test-support" }`).
//!
//! Why a crate and still one `#[path]`: [`cluster`] is the file `tests/support/cluster.rs`,
//! which the black-box tests of the workspace's `tests/` crate also build as a module of
//! their own support library; it is included from there until that crate depends on
//! this one (then the file moves here and the `#[path]` goes). A crate is the right tool
//! for what the includes gave — one copy of each helper — and also compiles it once and
//! needs no `#![allow(dead_code)]` in every test binary that uses a part of it.

#[path = "../../../tests/support/cluster.rs"]
pub mod cluster;
pub mod link;
pub mod logs;
pub mod postgres;
pub mod redis;

pub use postgres::PostgresServer;
