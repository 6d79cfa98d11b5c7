//! The responses, chat completions and video jobs the fake made, kept as a provider
//! keeps them (the last [`STORED_MAX`]) and answered by id: `GET /v1/responses/{id}`,
//! `GET /v1/chat/completions/{id}`, `GET /v1/videos/{id}`. As OpenAI does, a chat
//! completion is kept only when its request said `"store": true`, a response unless it
//! said `"store": false`; every video job is kept.
//!
//! An answer is stored when it is planned, whole, whatever becomes of its stream — a
//! client (or a gateway) that goes away mid-stream does not stop a provider from
//! finishing and storing it. Until the time its stream would have ended, a response is
//! `in_progress` (no usage) and a chat completion is not found yet. A video job is
//! `in_progress` until its run time (`x-fake-job-ms`) has passed, then `completed` (or
//! `failed`, `x-fake-job-fails`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

/// The most objects kept; the oldest goes first.
pub const STORED_MAX: usize = 10_000;

/// What kind of object, for the 404's wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Response,
    ChatCompletion,
    Video,
}

struct Entry {
    /// The whole object, as a retrieval answers it once it is done.
    done: String,
    /// What a retrieval answers before `ready` (a response `in_progress`); `None`: not
    /// found before then.
    before: Option<String>,
    ready: Instant,
}

/// The stored objects by id.
#[derive(Default)]
pub(crate) struct Stored {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<(Kind, String), Entry>,
    order: VecDeque<(Kind, String)>,
}

impl Stored {
    /// Keeps `done` under `id`, answered from `ready` on (`before` until then).
    pub(crate) fn put(
        &self,
        kind: Kind,
        id: String,
        done: String,
        before: Option<String>,
        ready: Instant,
    ) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (kind, id);
        if s.by_id.contains_key(&key) {
            s.order.retain(|k| k != &key);
        }
        s.order.push_back(key.clone());
        s.by_id.insert(
            key,
            Entry {
                done,
                before,
                ready,
            },
        );
        while s.order.len() > STORED_MAX {
            if let Some(old) = s.order.pop_front() {
                s.by_id.remove(&old);
            }
        }
    }

    /// The object as a retrieval at `now` answers it; `None`: not found.
    pub(crate) fn get(&self, kind: Kind, id: &str, now: Instant) -> Option<String> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = s.by_id.get(&(kind, id.to_owned()))?;
        if now >= e.ready {
            Some(e.done.clone())
        } else {
            e.before.clone()
        }
    }

    /// Forgets the object (a deletion); whether it was there.
    pub(crate) fn remove(&self, kind: Kind, id: &str) -> bool {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (kind, id.to_owned());
        let had = s.by_id.remove(&key).is_some();
        if had {
            s.order.retain(|k| k != &key);
        }
        had
    }

    /// How many are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .len()
    }
}

/// The 404 of an id the provider does not know, in OpenAI's shape.
pub(crate) fn not_found(kind: Kind, id: &str) -> String {
    let what = match kind {
        Kind::Response => "Response",
        Kind::ChatCompletion => "Chat completion",
        Kind::Video => "Video",
    };
    format!(
        r#"{{"error":{{"message":{},"type":"invalid_request_error","param":null,"code":null}}}}"#,
        crate::render::js(&format!("{what} with id '{id}' not found."))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn b7_kept_by_id_answered_once_ready_and_bounded() {
        let s = Stored::default();
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        s.put(
            Kind::Response,
            "resp_1".into(),
            "done".into(),
            Some("in progress".into()),
            later,
        );
        s.put(
            Kind::ChatCompletion,
            "c1".into(),
            "chat".into(),
            None,
            later,
        );
        assert_eq!(
            s.get(Kind::Response, "resp_1", now).as_deref(),
            Some("in progress")
        );
        assert_eq!(
            s.get(Kind::Response, "resp_1", later).as_deref(),
            Some("done")
        );
        assert_eq!(s.get(Kind::ChatCompletion, "c1", now), None);
        assert_eq!(
            s.get(Kind::ChatCompletion, "c1", later).as_deref(),
            Some("chat")
        );
        assert_eq!(s.get(Kind::Response, "c1", later), None, "kinds apart");
        assert!(s.remove(Kind::Response, "resp_1"));
        assert_eq!(s.get(Kind::Response, "resp_1", later), None);
        for i in 0..STORED_MAX + 5 {
            s.put(Kind::Response, format!("r{i}"), "x".into(), None, now);
        }
        assert_eq!(s.len(), STORED_MAX);
        assert_eq!(
            s.get(Kind::Response, "r0", now),
            None,
            "the oldest went first"
        );
        assert!(
            s.get(Kind::Response, &format!("r{}", STORED_MAX + 4), now)
                .is_some()
        );
    }
}
