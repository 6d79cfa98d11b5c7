//! The proxy's book of object homes (P6): which channel created a Responses API
//! response or a video job, so that a request continuing it (`previous_response_id`)
//! or about it (`GET /v1/responses/{id}`, `GET /v1/videos/{id}/content`, …) goes to
//! that channel's credential and nowhere else.
//!
//! Every home is kept in this instance's bounded [`MemoryHomes`] and, with a shared
//! store, in the store too ([`HomeBook`] of the Redis store), so another instance finds
//! it. A lookup reads the local book first: the instance that served the answer finds
//! the home at once, even before the store's write has landed.

use portcullis::core::homes::{DEFAULT_HOMES, Home, HomeBook, MemoryHomes};
use portcullis::core::{Millis, StoreResult};
use std::sync::Arc;
use std::time::Duration;

/// How long a home is kept: the providers keep stored responses for 30 days.
pub const HOME_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// This instance's book and, optionally, the shared one.
pub struct Homes {
    local: MemoryHomes,
    shared: Option<Arc<dyn HomeBook>>,
    ttl_ms: Millis,
}

impl Default for Homes {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Homes {
    /// A book kept in this instance, and in `shared` when given.
    pub fn new(shared: Option<Arc<dyn HomeBook>>) -> Self {
        Self {
            local: MemoryHomes::new(DEFAULT_HOMES),
            shared,
            ttl_ms: HOME_TTL.as_millis() as Millis,
        }
    }

    /// Remembers that object `id` lives at `home`: at once in this instance, and in the
    /// shared book off the response path. A failed shared write is logged; other
    /// instances then answer 404 for requests about the object, and send a
    /// continuation of it where any request of its model goes.
    pub fn remember(&self, id: &str, home: Home) {
        self.local.put(id, home.clone(), self.ttl_ms);
        let Some(shared) = &self.shared else {
            return;
        };
        let write = shared.remember(id, home, self.ttl_ms);
        let id = id.to_owned();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = write.await {
                        tracing::warn!(object = %id, error = %e, "object home not shared");
                    }
                });
            }
            Err(_) => tracing::warn!(object = %id, "object home not shared: no runtime"),
        }
    }

    /// The home of object `id`: this instance's book, then the shared one.
    pub async fn find(&self, id: &str) -> StoreResult<Option<Home>> {
        if let Some(h) = self.local.get(id) {
            return Ok(Some(h));
        }
        match &self.shared {
            Some(shared) => shared.find(id).await,
            None => Ok(None),
        }
    }
}
