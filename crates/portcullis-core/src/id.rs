//! Unique ids: the one generator behind every id the workspace makes.
//!
//! An id is a prefix that tells processes (or stores) apart and a counter that tells
//! the ids of one process apart:
//!
//! - [`random_u64`]: 64 random bits, for instance ids and random counter starts;
//! - [`process_tag`]: 64 random bits drawn once per process, the same on every call;
//! - [`Sequence`]: a counter shared by clones of its owner, from a chosen start;
//! - [`with_counter`]: `prefix` followed by a counter in decimal, as one `Arc<str>`.
//!
//! Users: billing's attempt ids (`att-<process tag, 16 hex>-<n>`), the proxy's request
//! ids (`pc-<process tag, 8 hex>-<n>`), the Redis store's instance id (16 hex digits)
//! and lease counters (a random start), and the in-memory store's lease counter.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// 64 random bits: std's per-process random hasher keys (seeded from the operating
/// system), mixed with the wall time and the process id.
///
/// Hand-written rather than a random-number crate: ids need bits that differ between
/// processes and calls, not cryptographic quality, and std already holds OS-seeded
/// keys; this keeps the core free of another dependency.
pub fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// 64 random bits drawn once per process: the part of an id that tells two processes
/// (two gateway instances, a restart) apart.
pub fn process_tag() -> u64 {
    static TAG: OnceLock<u64> = OnceLock::new();
    *TAG.get_or_init(random_u64)
}

/// A counter of ids: each [`next`](Sequence::next) returns the previous value plus one.
/// The default starts at 0.
#[derive(Debug, Default)]
pub struct Sequence(AtomicU64);

impl Sequence {
    /// A sequence whose first id is `first`.
    pub const fn starting_at(first: u64) -> Self {
        Self(AtomicU64::new(first))
    }

    /// A sequence from a random start in `[1, 2^62)`: two of them (two stores, two
    /// processes) practically never hand out the same id, and the counter cannot wrap.
    pub fn random() -> Self {
        Self::starting_at((random_u64() >> 2).max(1))
    }

    /// The next id.
    #[inline]
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// `prefix` followed by `n` in decimal, in one allocation (the id's own).
///
/// On the billing hot path: the id is put together on the stack and copied once into
/// its `Arc` (`format!` would build a `String` first, and its machinery costs more
/// than the rest of a billing decision).
pub fn with_counter(prefix: &str, n: u64) -> Arc<str> {
    let mut digits = itoa::Buffer::new();
    let d = digits.format(n);
    let len = prefix.len() + d.len();
    let mut buf = [0u8; 64];
    if len > buf.len() {
        return Arc::from([prefix, d].concat());
    }
    buf[..prefix.len()].copy_from_slice(prefix.as_bytes());
    buf[prefix.len()..len].copy_from_slice(d.as_bytes());
    // Both parts are whole UTF-8 strings, so their concatenation is one.
    Arc::from(std::str::from_utf8(&buf[..len]).expect("two str joined"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_counter_is_prefix_then_decimal() {
        assert_eq!(&*with_counter("att-ab-", 0), "att-ab-0");
        assert_eq!(&*with_counter("", u64::MAX), u64::MAX.to_string().as_str());
        let long = "p".repeat(60);
        assert_eq!(&*with_counter(&long, 12345), format!("{long}12345"));
    }

    #[test]
    fn sequence_counts_from_its_start() {
        let s = Sequence::starting_at(7);
        assert_eq!((s.next(), s.next(), s.next()), (7, 8, 9));
        let r = Sequence::random().next();
        assert!((1..1 << 62).contains(&r), "{r}");
    }

    #[test]
    fn process_tag_is_stable_and_random_bits_vary() {
        assert_eq!(process_tag(), process_tag());
        let draws: std::collections::HashSet<u64> = (0..100).map(|_| random_u64()).collect();
        assert_eq!(draws.len(), 100);
    }
}
