//! Exact observation of what reached the fake: [`Stats`], [`Route`], [`RecordedRequest`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderMap, Method};

/// How many request bodies [`Stats::last_bodies`] keeps.
pub const RECENT_BODIES: usize = 16;
/// The most bytes of one request body [`Stats::last_bodies`] keeps (64 KiB).
pub const BODY_CAP: usize = 64 * 1024;

/// The route a call hit.
///
/// Gemini methods are served under both `/v1beta/models/{model}:…` and
/// `/v1/models/{model}:…`; both count under the same route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Route {
    /// OpenAI `POST /v1/chat/completions`.
    ChatCompletions,
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Gemini `POST /v1beta/models/{model}:generateContent`.
    GenerateContent,
    /// Gemini `POST /v1beta/models/{model}:streamGenerateContent`.
    StreamGenerateContent,
    /// `GET /v1/models` (OpenAI, or Anthropic when `anthropic-version` is sent) and
    /// `GET /v1beta/models` (Gemini).
    ListModels,
    /// OpenAI Responses API `POST /v1/responses` (streamed with `"stream": true`).
    Responses,
    /// OpenAI `GET /v1/responses/{id}`.
    ResponseRetrieve,
    /// OpenAI `DELETE /v1/responses/{id}`.
    ResponseDelete,
    /// OpenAI `POST /v1/responses/{id}/cancel`.
    ResponseCancel,
    /// OpenAI `GET /v1/responses/{id}/input_items`.
    ResponseInputItems,
    /// OpenAI `POST /v1/embeddings`.
    Embeddings,
    /// Gemini `POST /v1beta/models/{model}:embedContent`.
    EmbedContent,
    /// Gemini `POST /v1beta/models/{model}:batchEmbedContents`.
    BatchEmbedContents,
    /// Anthropic `POST /v1/messages/count_tokens`.
    MessagesCountTokens,
    /// Gemini `POST /v1beta/models/{model}:countTokens`.
    CountTokens,
    /// OpenAI `POST /v1/images/generations`.
    ImageGenerations,
    /// OpenAI `POST /v1/images/edits` (multipart/form-data).
    ImageEdits,
    /// OpenAI `POST /v1/videos` (creates a video job).
    VideoCreate,
    /// OpenAI `GET /v1/videos/{id}`.
    VideoRetrieve,
    /// OpenAI `GET /v1/videos/{id}/content`.
    VideoContent,
    /// OpenAI `DELETE /v1/videos/{id}`.
    VideoDelete,
    /// OpenAI `GET /v1/chat/completions/{id}` (a stored chat completion).
    ChatCompletionRetrieve,
    /// Anything else (answered 404).
    Other,
}

impl Route {
    /// Every route, in declaration order (`ALL[r as usize] == r`).
    const ALL: [Route; 23] = [
        Route::ChatCompletions,
        Route::Messages,
        Route::GenerateContent,
        Route::StreamGenerateContent,
        Route::ListModels,
        Route::Responses,
        Route::ResponseRetrieve,
        Route::ResponseDelete,
        Route::ResponseCancel,
        Route::ResponseInputItems,
        Route::Embeddings,
        Route::EmbedContent,
        Route::BatchEmbedContents,
        Route::MessagesCountTokens,
        Route::CountTokens,
        Route::ImageGenerations,
        Route::ImageEdits,
        Route::VideoCreate,
        Route::VideoRetrieve,
        Route::VideoContent,
        Route::VideoDelete,
        Route::ChatCompletionRetrieve,
        Route::Other,
    ];

    const COUNT: usize = Route::ALL.len();

    fn index(self) -> usize {
        self as usize
    }

    /// True for the routes that generate text: chat completions, messages,
    /// generateContent, streamGenerateContent and Responses create.
    pub fn is_generation(self) -> bool {
        matches!(
            self,
            Route::ChatCompletions
                | Route::Messages
                | Route::GenerateContent
                | Route::StreamGenerateContent
                | Route::Responses
        )
    }

    /// True for the routes that do model work: the generation routes, embeddings
    /// (OpenAI and Gemini), token counting (Anthropic and Gemini), image generations and
    /// edits, and video job creation. Every behaviour layer applies to them, and each
    /// call consumes one scripted behaviour.
    pub fn is_model_call(self) -> bool {
        self.is_generation()
            || matches!(
                self,
                Route::Embeddings
                    | Route::EmbedContent
                    | Route::BatchEmbedContents
                    | Route::MessagesCountTokens
                    | Route::CountTokens
                    | Route::ImageGenerations
                    | Route::ImageEdits
                    | Route::VideoCreate
            )
    }

    /// True for the routes about a stored response, chat completion or video job
    /// (retrieve, delete, cancel, input items, video content). The instance and credential defaults and the
    /// request's `x-fake-*` headers apply to them, but they consume no scripted
    /// behaviour.
    pub fn is_resource(self) -> bool {
        matches!(
            self,
            Route::ResponseRetrieve
                | Route::ResponseDelete
                | Route::ResponseCancel
                | Route::ResponseInputItems
                | Route::VideoRetrieve
                | Route::VideoContent
                | Route::VideoDelete
                | Route::ChatCompletionRetrieve
        )
    }
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// Arrival order, from 1, over the instance's life (not reset by `reset_stats`).
    pub seq: u64,
    /// HTTP method.
    pub method: Method,
    /// Path and query as received.
    pub path_and_query: String,
    /// The route.
    pub route: Route,
    /// The credential the call was counted under (see [`Stats::credentials_seen`]).
    pub credential: Option<String>,
    /// Every request header, as received.
    pub headers: HeaderMap,
}

/// A snapshot of the fake's counters ([`FakeUpstream::stats`](crate::FakeUpstream::stats)).
///
/// A call is counted when its request head arrives. It is in flight from then until
/// its response body has been handed over completely (the last byte is produced before
/// the counter drops, so a client that has read a whole answer always sees the
/// decrement), the connection is cut by the fake, or the client goes away.
///
/// The credential of a call is the first of: `Authorization: Bearer <v>` (the whole
/// value if it is not a bearer token), `x-api-key`, `x-goog-api-key`, the `key` query
/// parameter.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Calls received (every route).
    pub total_calls: u64,
    /// Calls per route.
    pub calls_per_route: BTreeMap<Route, u64>,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Highest number of requests in flight at once since start / the last reset.
    pub max_in_flight: u64,
    /// Calls whose answer ended: body fully produced, or cut on purpose by the fake.
    pub completed: u64,
    /// Calls that ended early: the client went away (or the fake shut down) first.
    pub cancelled: u64,
    /// Answers per HTTP status (counted when the response head is built).
    pub responses_by_status: BTreeMap<u16, u64>,
    /// Calls per credential.
    pub calls_per_credential: BTreeMap<String, u64>,
    /// In-flight requests per credential now (only non-zero entries).
    pub in_flight_per_credential: BTreeMap<String, u64>,
    /// Highest in-flight count per credential since start / the last reset.
    pub max_in_flight_per_credential: BTreeMap<String, u64>,
    /// The same, counting only calls whose client did not announce it would leave
    /// (header [`H_CLIENT_LEAVES`](crate::behavior::H_CLIENT_LEAVES)): counted exactly
    /// while the fake serves them, with no lag at their end.
    pub max_in_flight_stayed_per_credential: BTreeMap<String, u64>,
    /// Every credential value seen in any of the four places (`Authorization`,
    /// `x-api-key`, `x-goog-api-key`, `?key=`), even when a call carried several.
    pub credentials_seen: BTreeSet<String>,
    /// The last requests received, oldest first (bounded, see
    /// [`FakeUpstreamBuilder::recent_capacity`](crate::FakeUpstreamBuilder::recent_capacity)).
    pub recent_requests: Vec<RecordedRequest>,
    /// The bodies of the last [`RECENT_BODIES`] requests that had their body read
    /// (every route but list-models and unknown paths), oldest first, each as
    /// `(path without the query, body)` and cut to its first [`BODY_CAP`] bytes. Kept
    /// unless [`recent_capacity`](crate::FakeUpstreamBuilder::recent_capacity) is 0;
    /// cleared by `reset_stats`.
    pub last_bodies: Vec<(String, Vec<u8>)>,
}

impl Stats {
    /// Calls to `route`.
    pub fn calls(&self, route: Route) -> u64 {
        self.calls_per_route.get(&route).copied().unwrap_or(0)
    }
    /// Calls made with `credential`.
    pub fn calls_for(&self, credential: &str) -> u64 {
        self.calls_per_credential
            .get(credential)
            .copied()
            .unwrap_or(0)
    }
    /// Highest in-flight count for `credential`.
    pub fn max_in_flight_for(&self, credential: &str) -> u64 {
        self.max_in_flight_per_credential
            .get(credential)
            .copied()
            .unwrap_or(0)
    }
    /// Highest in-flight count for `credential` among calls whose client stayed (see
    /// [`max_in_flight_stayed_per_credential`](Self::max_in_flight_stayed_per_credential)).
    pub fn max_in_flight_stayed_for(&self, credential: &str) -> u64 {
        self.max_in_flight_stayed_per_credential
            .get(credential)
            .copied()
            .unwrap_or(0)
    }
    /// Answers sent with `status`.
    pub fn responses_with(&self, status: u16) -> u64 {
        self.responses_by_status.get(&status).copied().unwrap_or(0)
    }
    /// The body of the last request whose path starts with `path_prefix` (see
    /// [`last_bodies`](Self::last_bodies)), e.g. `"/v1/messages"`.
    pub fn last_body_for(&self, path_prefix: &str) -> Option<&[u8]> {
        self.last_bodies
            .iter()
            .rev()
            .find(|(p, _)| p.starts_with(path_prefix))
            .map(|(_, b)| b.as_slice())
    }

    /// [`last_body_for`](Self::last_body_for) parsed as JSON (`None` when there is no
    /// such body or it is not JSON, e.g. cut by [`BODY_CAP`]).
    pub fn last_json_for(&self, path_prefix: &str) -> Option<serde_json::Value> {
        serde_json::from_slice(self.last_body_for(path_prefix)?).ok()
    }

    /// True when `value` appeared anywhere in any recorded request header (name or
    /// value, case-sensitive substring) or as a credential — to prove a secret never
    /// reached the upstream.
    pub fn saw_anywhere(&self, value: &str) -> bool {
        self.credentials_seen.iter().any(|c| c.contains(value))
            || self.recent_requests.iter().any(|r| {
                r.path_and_query.contains(value)
                    || r.headers.iter().any(|(k, v)| {
                        k.as_str().contains(value)
                            || String::from_utf8_lossy(v.as_bytes()).contains(value)
                    })
            })
    }
}

#[derive(Default)]
struct CredEntry {
    calls: u64,
    in_flight: u64,
    max_in_flight: u64,
    /// In flight / highest, among calls whose client stays.
    stayed: u64,
    max_stayed: u64,
}

#[derive(Default)]
struct CredState {
    per: HashMap<Arc<str>, CredEntry>,
    seen: BTreeSet<String>,
}

pub(crate) struct Counters {
    seq: AtomicU64,
    total: AtomicU64,
    per_route: [AtomicU64; Route::COUNT],
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    statuses: Box<[AtomicU64]>,
    creds: Mutex<CredState>,
    recent: Mutex<VecDeque<RecordedRequest>>,
    recent_capacity: usize,
    bodies: Mutex<VecDeque<(String, Bytes)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What identifies the caller of one request.
pub(crate) struct Credentials<'a> {
    pub(crate) primary: Option<&'a str>,
    pub(crate) all: [Option<&'a str>; 4],
}

impl<'a> Credentials<'a> {
    pub(crate) fn of(headers: &'a HeaderMap, query: Option<&'a str>) -> Self {
        let h = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        let bearer = h("authorization").map(|v| match v.get(..7) {
            Some(p) if p.eq_ignore_ascii_case("bearer ") => v[7..].trim(),
            _ => v,
        });
        let key = query.and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("key="))
                .filter(|s| !s.is_empty())
        });
        let all = [bearer, h("x-api-key"), h("x-goog-api-key"), key];
        let primary = all.iter().flatten().next().copied();
        Credentials { primary, all }
    }
}

impl Counters {
    pub(crate) fn new(recent_capacity: usize) -> Self {
        Counters {
            seq: AtomicU64::new(0),
            total: AtomicU64::new(0),
            per_route: Default::default(),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            statuses: (0..600).map(|_| AtomicU64::new(0)).collect(),
            creds: Mutex::new(CredState::default()),
            recent: Mutex::new(VecDeque::with_capacity(recent_capacity.min(1024))),
            recent_capacity,
            bodies: Mutex::new(VecDeque::with_capacity(RECENT_BODIES)),
        }
    }

    /// Keeps the (capped) body of a request to `path` (unless recording is off).
    pub(crate) fn record_body(&self, path: &str, body: &Bytes) {
        if self.recent_capacity == 0 {
            return;
        }
        let kept = body.slice(..body.len().min(BODY_CAP));
        let mut b = lock(&self.bodies);
        if b.len() >= RECENT_BODIES {
            b.pop_front();
        }
        b.push_back((path.to_owned(), kept));
    }

    /// Counts a call and marks it in flight; the returned guard ends it.
    pub(crate) fn begin(
        self: &Arc<Self>,
        route: Route,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        creds: &Credentials<'_>,
    ) -> (u64, InFlightGuard) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        self.per_route[route.index()].fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        // `now` is a value the counter really held; fetch_max is one atomic
        // compare-and-swap loop, so the recorded maximum is exact.
        self.max_in_flight.fetch_max(now, Ordering::AcqRel);

        let mut credential = None;
        let stays = !headers.contains_key(crate::behavior::H_CLIENT_LEAVES);
        if creds.all.iter().any(Option::is_some) {
            let mut st = lock(&self.creds);
            for c in creds.all.iter().flatten() {
                if !st.seen.contains(*c) {
                    st.seen.insert((*c).to_owned());
                }
            }
            if let Some(p) = creds.primary {
                let key: Arc<str> = match st.per.get_key_value(p) {
                    Some((k, _)) => k.clone(),
                    None => Arc::from(p),
                };
                let e = st.per.entry(key.clone()).or_default();
                e.calls += 1;
                e.in_flight += 1;
                e.max_in_flight = e.max_in_flight.max(e.in_flight);
                if stays {
                    e.stayed += 1;
                    e.max_stayed = e.max_stayed.max(e.stayed);
                }
                credential = Some(key);
            }
        }

        if self.recent_capacity > 0 {
            let rec = RecordedRequest {
                seq,
                method: method.clone(),
                path_and_query: path_and_query.to_owned(),
                route,
                credential: credential.as_deref().map(str::to_owned),
                headers: headers.clone(),
            };
            let mut r = lock(&self.recent);
            if r.len() >= self.recent_capacity {
                r.pop_front();
            }
            r.push_back(rec);
        }

        (
            seq,
            InFlightGuard {
                counters: self.clone(),
                credential,
                stays,
                done: false,
            },
        )
    }

    pub(crate) fn count_status(&self, status: u16) {
        if let Some(c) = self.statuses.get(status as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn end(&self, credential: Option<&Arc<str>>, stays: bool, completed: bool) {
        if let Some(c) = credential {
            let mut st = lock(&self.creds);
            if let Some(e) = st.per.get_mut(&**c) {
                e.in_flight = e.in_flight.saturating_sub(1);
                if stays {
                    e.stayed = e.stayed.saturating_sub(1);
                }
            }
        }
        if completed {
            self.completed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let mut s = Stats {
            total_calls: self.total.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Acquire),
            max_in_flight: self.max_in_flight.load(Ordering::Acquire),
            completed: self.completed.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            ..Stats::default()
        };
        for r in Route::ALL {
            let n = self.per_route[r.index()].load(Ordering::Relaxed);
            if n > 0 {
                s.calls_per_route.insert(r, n);
            }
        }
        for (code, c) in self.statuses.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                s.responses_by_status.insert(code as u16, n);
            }
        }
        {
            let st = lock(&self.creds);
            for (k, e) in &st.per {
                if e.calls > 0 {
                    s.calls_per_credential.insert(k.to_string(), e.calls);
                }
                if e.in_flight > 0 {
                    s.in_flight_per_credential
                        .insert(k.to_string(), e.in_flight);
                }
                if e.max_in_flight > 0 {
                    s.max_in_flight_per_credential
                        .insert(k.to_string(), e.max_in_flight);
                }
                if e.max_stayed > 0 {
                    s.max_in_flight_stayed_per_credential
                        .insert(k.to_string(), e.max_stayed);
                }
            }
            s.credentials_seen = st.seen.clone();
        }
        s.recent_requests = lock(&self.recent).iter().cloned().collect();
        s.last_bodies = lock(&self.bodies)
            .iter()
            .map(|(p, b)| (p.clone(), b.to_vec()))
            .collect();
        s
    }

    /// Zeroes the counters. Requests still in flight stay counted as in flight, and the
    /// maxima restart from the current in-flight counts.
    pub(crate) fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        for c in &self.per_route {
            c.store(0, Ordering::Relaxed);
        }
        for c in self.statuses.iter() {
            c.store(0, Ordering::Relaxed);
        }
        self.completed.store(0, Ordering::Relaxed);
        self.cancelled.store(0, Ordering::Relaxed);
        self.max_in_flight
            .store(self.in_flight.load(Ordering::Acquire), Ordering::Release);
        {
            let mut st = lock(&self.creds);
            st.seen.clear();
            st.per.retain(|_, e| e.in_flight > 0);
            for e in st.per.values_mut() {
                e.calls = 0;
                e.max_in_flight = e.in_flight;
                e.max_stayed = e.stayed;
            }
        }
        lock(&self.recent).clear();
        lock(&self.bodies).clear();
    }
}

/// Marks one call in flight until dropped (cancelled) or finished (completed).
pub(crate) struct InFlightGuard {
    counters: Arc<Counters>,
    credential: Option<Arc<str>>,
    /// Its client did not announce it would leave.
    stays: bool,
    done: bool,
}

impl InFlightGuard {
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The answer ended as the fake meant it to.
    pub(crate) fn complete(mut self) {
        self.done = true;
        self.counters
            .end(self.credential.as_ref(), self.stays, true);
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if !self.done {
            self.counters
                .end(self.credential.as_ref(), self.stays, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_indexes_follow_declaration_order() {
        for (i, r) in Route::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
        assert_eq!(Route::ALL[Route::COUNT - 1], Route::Other);
    }
}
