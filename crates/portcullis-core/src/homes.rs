//! Where provider-side objects live (P6).
//!
//! Some provider APIs keep state between requests: an OpenAI Responses API response
//! (continued with `previous_response_id`, read with `GET /v1/responses/{id}`), a video
//! generation job (polled, downloaded). Such an object exists only under the credential
//! that created it: asking another channel for it can only be a 404. The gateway
//! remembers, for each object id an answer created, its *home* — the channel and the
//! model — and sends every later request about that object there, never elsewhere.
//!
//! A [`HomeBook`] keeps that mapping. [`MemoryHomes`] is the one instance's book,
//! bounded in entries and in time; a shared store (Redis) implements the same trait so
//! every instance finds the homes any instance learned. Homes are kept for a time
//! (the providers keep their objects for days to weeks), never for good.

use crate::store::StoreResult;
use crate::{Clock, Millis, SystemClock};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// The channel that created an object, and the model it was created with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    /// The channel (its credential holds the object).
    pub channel: Arc<str>,
    /// The model the object was made with; requests about the object are limited under
    /// it.
    pub model: Arc<str>,
}

/// The future of a [`HomeBook`] call. Boxed: homes are read and written only by
/// requests about provider-side objects, not on every request.
pub type HomeFuture<T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send>>;

/// A book of object homes.
pub trait HomeBook: Send + Sync + 'static {
    /// Remembers that object `id` lives at `home`, for `ttl_ms` from now (a later call
    /// for the same id replaces it).
    fn remember(&self, id: &str, home: Home, ttl_ms: Millis) -> HomeFuture<()>;
    /// The home of object `id`, if it is known and not expired.
    fn find(&self, id: &str) -> HomeFuture<Option<Home>>;
}

/// Default bound on the entries of a [`MemoryHomes`].
pub const DEFAULT_HOMES: usize = 100_000;

/// One instance's book of homes: at most `capacity` entries; an entry is forgotten at
/// its expiry, and when the book is full the expired entries go first, then the
/// eighth that would expire soonest.
pub struct MemoryHomes<C = SystemClock> {
    clock: C,
    capacity: usize,
    map: Mutex<HashMap<Box<str>, (Home, Millis), foldhash::fast::RandomState>>,
}

impl MemoryHomes<SystemClock> {
    /// A book on the system clock holding at most `capacity` homes.
    pub fn new(capacity: usize) -> Self {
        Self::with_clock(SystemClock::new(), capacity)
    }
}

impl<C: Clock> MemoryHomes<C> {
    /// A book on `clock` holding at most `capacity` homes (at least 8).
    pub fn with_clock(clock: C, capacity: usize) -> Self {
        Self {
            clock,
            capacity: capacity.max(8),
            map: Mutex::default(),
        }
    }

    /// Remembers `id` at `home` until `ttl_ms` from now (synchronous).
    pub fn put(&self, id: &str, home: Home, ttl_ms: Millis) {
        let now = self.clock.now();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.capacity && !map.contains_key(id) {
            map.retain(|_, (_, until)| *until > now);
            if map.len() >= self.capacity {
                let mut untils: Vec<Millis> = map.values().map(|(_, u)| *u).collect();
                let n = (untils.len() / 8).max(1);
                let (_, cut, _) = untils.select_nth_unstable(n - 1);
                let cut = *cut;
                let mut budget = n;
                map.retain(|_, (_, until)| {
                    let drop = budget > 0 && *until <= cut;
                    budget -= usize::from(drop);
                    !drop
                });
            }
        }
        map.insert(id.into(), (home, now.saturating_add(ttl_ms)));
    }

    /// The home of `id`, if known and not expired (synchronous); an expired entry is
    /// dropped.
    pub fn get(&self, id: &str) -> Option<Home> {
        let now = self.clock.now();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(id) {
            Some((home, until)) if *until > now => Some(home.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// Entries held now (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the book holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<C: Clock + Send + Sync + 'static> HomeBook for MemoryHomes<C> {
    fn remember(&self, id: &str, home: Home, ttl_ms: Millis) -> HomeFuture<()> {
        self.put(id, home, ttl_ms);
        Box::pin(std::future::ready(Ok(())))
    }

    fn find(&self, id: &str) -> HomeFuture<Option<Home>> {
        Box::pin(std::future::ready(Ok(self.get(id))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    fn home(channel: &str) -> Home {
        Home {
            channel: channel.into(),
            model: "m".into(),
        }
    }

    #[test]
    fn p6_a_home_is_found_until_it_expires() {
        let clock = ManualClock::new(1_000);
        let book = MemoryHomes::with_clock(clock.clone(), 16);
        assert!(book.is_empty());
        book.put("resp_1", home("a"), 500);
        assert!(!book.is_empty());
        assert_eq!(book.get("resp_1"), Some(home("a")));
        assert_eq!(book.get("resp_2"), None);
        clock.advance(std::time::Duration::from_millis(499));
        assert_eq!(book.get("resp_1"), Some(home("a")));
        clock.advance(std::time::Duration::from_millis(1));
        assert_eq!(book.get("resp_1"), None);
        assert!(book.is_empty(), "an expired entry is dropped when read");
    }

    #[test]
    fn p6_a_later_home_replaces_the_earlier() {
        let book = MemoryHomes::with_clock(ManualClock::new(0), 16);
        book.put("x", home("a"), 100);
        book.put("x", home("b"), 100);
        assert_eq!(book.get("x"), Some(home("b")));
        assert_eq!(book.len(), 1);
    }

    #[test]
    fn d7_the_book_never_holds_more_than_its_capacity() {
        let clock = ManualClock::new(0);
        let book = MemoryHomes::with_clock(clock.clone(), 64);
        for i in 0..10_000u64 {
            clock.advance(std::time::Duration::from_millis(1));
            book.put(&format!("resp_{i}"), home("a"), 1_000_000);
            assert!(book.len() <= 64, "{} entries after {i}", book.len());
        }
        // The newest are kept: the soonest to expire go first.
        assert_eq!(book.get("resp_9999"), Some(home("a")));
        assert_eq!(book.get("resp_0"), None);
    }

    #[test]
    fn d7_a_full_book_evicts_exactly_the_eighth_that_expires_soonest() {
        let clock = ManualClock::new(0);
        let book = MemoryHomes::with_clock(clock.clone(), 64);
        // Distinct expiries: resp_0 expires first, resp_63 last.
        for i in 0..64u64 {
            book.put(&format!("resp_{i}"), home("a"), 1_000 + i);
        }
        // Replacing a known id in a full book evicts nothing.
        book.put("resp_63", home("b"), 2_000);
        assert_eq!(book.len(), 64);
        assert_eq!(book.get("resp_0"), Some(home("a")));
        // A new id: the 8 soonest to expire go, nothing else.
        book.put("new", home("a"), 5_000);
        assert_eq!(book.len(), 64 - 8 + 1);
        for i in 0..8 {
            assert_eq!(book.get(&format!("resp_{i}")), None, "resp_{i}");
        }
        for i in 8..64 {
            assert!(book.get(&format!("resp_{i}")).is_some(), "resp_{i}");
        }
        // Equal expiries: still exactly an eighth.
        let tied = MemoryHomes::with_clock(clock, 64);
        for i in 0..64u64 {
            tied.put(&format!("t_{i}"), home("a"), 1_000);
        }
        tied.put("new", home("a"), 1_000);
        assert_eq!(tied.len(), 64 - 8 + 1);
    }

    #[test]
    fn d7_expired_homes_make_room_before_live_ones() {
        let clock = ManualClock::new(0);
        let book = MemoryHomes::with_clock(clock.clone(), 8);
        book.put("live", home("a"), 1_000_000);
        for i in 0..7 {
            book.put(&format!("short_{i}"), home("a"), 10);
        }
        clock.advance(std::time::Duration::from_millis(10));
        book.put("new", home("b"), 100);
        assert_eq!(book.len(), 2, "the seven expired entries were dropped");
        assert_eq!(book.get("live"), Some(home("a")));
        assert_eq!(book.get("new"), Some(home("b")));
    }

    #[test]
    fn p6_the_trait_answers_at_once() {
        let book = MemoryHomes::with_clock(ManualClock::new(0), 8);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut put = book.remember("r", home("a"), 10);
        assert!(matches!(
            put.as_mut().poll(&mut cx),
            std::task::Poll::Ready(Ok(()))
        ));
        let mut got = book.find("r");
        match got.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(h)) => assert_eq!(h, Some(home("a"))),
            other => panic!("{other:?}"),
        }
    }
}
