//! A fast, deterministic fake model provider for portcullis's demo, end-to-end tests and
//! benchmarks (P5).
//!
//! It speaks the real request/response shapes of three providers on `127.0.0.1`:
//!
//! | route | dialect |
//! |---|---|
//! | `POST /v1/chat/completions` (`"stream": true` → SSE `chat.completion.chunk`s, a usage chunk when `stream_options.include_usage`, then `data: [DONE]`) | OpenAI |
//! | `GET /v1/chat/completions/{id}` (a [stored](#stored-objects) chat completion) | OpenAI |
//! | `GET /v1/models` (Anthropic's shape when `anthropic-version` is sent) | OpenAI / Anthropic |
//! | `POST /v1/messages` (`"stream": true` → `message_start` … `message_stop` SSE with `event:` lines) | Anthropic |
//! | `POST /v1beta/models/{model}:generateContent` | Gemini |
//! | `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` (without `alt=sse`: a streamed JSON array) | Gemini |
//! | `GET /v1beta/models` | Gemini |
//! | `POST /v1/responses` (`"stream": true` → `response.created` … `response.completed` SSE with `event:` lines) | OpenAI Responses |
//! | `GET /v1/responses/{id}` (a [stored](#stored-objects) response), `DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items` | OpenAI Responses |
//! | `POST /v1/embeddings` (`dimensions`, default [`DEFAULT_EMBEDDING_DIMENSIONS`]; `encoding_format` `float` or `base64`) | OpenAI |
//! | `POST /v1beta/models/{model}:embedContent`, `…:batchEmbedContents` (no usage, as Gemini) | Gemini |
//! | `POST /v1/messages/count_tokens` → `{"input_tokens":P}` | Anthropic |
//! | `POST /v1beta/models/{model}:countTokens` → `{"totalTokens":P,…}` | Gemini |
//! | `POST /v1/images/generations`, `POST /v1/images/edits` (multipart) → `n` tiny PNGs | OpenAI |
//! | `POST /v1/videos` (a [stored](#stored-objects) job: `x-fake-job-ms`, `x-fake-job-fails`), `GET /v1/videos/{id}` (the job's status), `GET /v1/videos/{id}/content` (once completed), `DELETE /v1/videos/{id}` | OpenAI |
//!
//! Every Gemini method is also served under `/v1/models/…`.
//!
//! # Usage numbers (deterministic)
//!
//! - prompt tokens `P` = `x-fake-input-tokens`, else `max(1, text bytes / 4)` where the
//!   text bytes are those of the prompt strings ([`prompt_text_bytes`]); `P` is raised to
//!   at least cached + cache-creation tokens;
//! - cached tokens `C` = `x-fake-cached-tokens` (default 0), cache writes `W` =
//!   `x-fake-cache-creation-tokens` (default 0), both part of `P`;
//! - output tokens `O` = `x-fake-output-tokens` (default 16), capped by the request's
//!   `max_completion_tokens`/`max_tokens`/`generationConfig.maxOutputTokens` (the finish
//!   reason is then `length`/`max_tokens`/`MAX_TOKENS`);
//! - the answer is `x-fake-chunks` (default 4) chunks of [`chunk_text`];
//! - reasoning tokens `R` = `x-fake-reasoning-tokens` (default 0), part of `O` (capped
//!   by it), reported by OpenAI chat (`completion_tokens_details.reasoning_tokens`)
//!   and the Responses API.
//!
//! The text bytes of `P` are those of the chat messages, of the Responses API's `input`
//! and `instructions`, of the embedding inputs (token-id arrays count one token per id),
//! of the Gemini contents, or of the image or video `prompt` ([`prompt_text_bytes`]).
//!
//! Reported as: OpenAI `prompt_tokens = P`, `prompt_tokens_details.cached_tokens = C`,
//! `completion_tokens = O`; Anthropic `input_tokens = P − C − W`,
//! `cache_read_input_tokens = C`, `cache_creation_input_tokens = W`, `output_tokens = O`
//! (`message_start` carries the input side and `output_tokens: 1`, `message_delta` the
//! final `output_tokens`); Gemini `promptTokenCount = P`, `cachedContentTokenCount = C`
//! (omitted when 0, as Gemini does), `candidatesTokenCount = O`, `totalTokenCount = P + O`
//! (plus `thoughtsTokenCount` with `x-fake-thinking`, [below](#tool-calls-and-thinking);
//! intermediate stream chunks carry only the prompt side).
//!
//! The other routes report: Responses API `input_tokens = P`,
//! `input_tokens_details.cached_tokens = C`, `output_tokens = O` (capped by
//! `max_output_tokens`; the response is then `incomplete` with
//! `incomplete_details.reason = "max_output_tokens"` and its stream ends with
//! `response.incomplete` instead of `response.completed`),
//! `output_tokens_details.reasoning_tokens = R`, `total_tokens = P + O`; OpenAI
//! embeddings `prompt_tokens = total_tokens = P`; Anthropic count_tokens
//! `input_tokens = P`; Gemini countTokens `totalTokens = P`; images (gpt-image style,
//! none for `dall-e*` models) `input_tokens = input_tokens_details.text_tokens = P`,
//! `image_tokens = 0`, `output_tokens = n × O`; a retrieved response or chat completion
//! the usage it was created with. Gemini embeddings and video jobs report no usage.
//!
//! Embedding vectors are unit length and deterministic: the same input text (or token
//! ids) always gets the same vector.
//!
//! # Tool calls and thinking
//!
//! With `x-fake-tool-calls: N` (0–8, default 0) a chat answer (OpenAI chat, Anthropic
//! messages, Gemini generateContent; not the Responses API) carries `N` calls of the
//! function named by `x-fake-tool-name` (default `get_weather`; below `NAME`), call `i`
//! with arguments `{"city":"c<i>"}`. The calls replace the text, unless `x-fake-chunks`
//! is set too: the text then comes first. The usage numbers do not change.
//!
//! - OpenAI: `message.tool_calls: [{"id":"call_fake_<i>","type":"function",
//!   "function":{"name":NAME,"arguments":"{"city":"c<i>"}"}}]`, `content: null`
//!   (or the text), `finish_reason: "tool_calls"`. Streamed: the role chunk (with
//!   `content: null` when there is no text), the text chunks, one chunk per call
//!   `delta.tool_calls: [{"index":i,"id":"call_fake_<i>","type":"function",
//!   "function":{"name":NAME,"arguments":""}}]`, then the arguments in two pieces per
//!   call (`{"city":` and `"c<i>"}`) as `delta.tool_calls: [{"index":i,
//!   "function":{"arguments":piece}}]`, interleaved: call 0 piece 1, call 1 piece 1, …,
//!   call 0 piece 2, call 1 piece 2, …; the finish chunk says `tool_calls`.
//! - Anthropic: `content` blocks `{"type":"tool_use","id":"toolu_fake_<i>",
//!   "name":NAME,"input":{"city":"c<i>"}}` (after the text block, if any),
//!   `stop_reason: "tool_use"`. Streamed: per call, `content_block_start` with
//!   `{"type":"tool_use","id":…,"name":NAME,"input":{}}`, two `content_block_delta`s
//!   `{"type":"input_json_delta","partial_json":piece}`, `content_block_stop`, each call
//!   its own block index; `message_delta` says `tool_use`.
//! - Gemini: `parts: [{"functionCall":{"name":NAME,"args":{"city":"c<i>"}}}]` (after
//!   the text part, if any; the first call signed with thinking, below),
//!   `finishReason: "STOP"`. Streamed: one chunk per call with its whole
//!   `functionCall` part, then the usual final chunk.
//!
//! A max-tokens cut keeps its finish reason (`length`, `max_tokens`, `MAX_TOKENS`).
//! Each of these frames counts as one content chunk for `x-fake-fail-after-chunks`
//! and the chunk interval.
//!
//! With `x-fake-thinking: TEXT` (Anthropic and Gemini; ignored by the others) the
//! answer starts with the thinking text, signed `SIG` = [`thinking_signature`]`(TEXT)`
//! (`sig_fake_` + 16 hex digits of the text's FNV-1a hash):
//!
//! | dialect | answer | streamed | usage |
//! |---|---|---|---|
//! | Anthropic | content starts with `{"type":"thinking","thinking":TEXT,"signature":SIG}` | one content frame at index 0 — `content_block_start` `{"type":"thinking","thinking":""}`, a `thinking_delta`, a `signature_delta`, `content_block_stop` — the other blocks' indices shifted by one | unchanged |
//! | Gemini | parts start with `{"text":TEXT,"thought":true}`; with `x-fake-tool-calls`, the first `functionCall` part carries `"thoughtSignature":SIG` | one chunk with the thought part first (one content frame), then the usual chunks | `thoughtsTokenCount` = `T` = `max(1, TEXT bytes / 4)` (counted like prompt text) on top of `candidatesTokenCount = O`; `totalTokenCount = P + O + T` (final chunk) |
//!
//! # Ids
//!
//! Response, output message and video ids are minted as `resp_fake_i{n}_{seq:08}`,
//! `msg_fake_i{n}_{seq:08}` and `video_fake_i{n}_{seq:08}`, where `n` is the fake's
//! [`FakeControl::instance_id`] and `seq` its call counter, so a test can tell which
//! fake made an id ([`FakeControl::made_id`]). Chat completion ids are
//! `chatcmpl-fake{seq:08}`. Cancelling a response answers for any id.
//!
//! # Stored objects
//!
//! Every successful response (`POST /v1/responses`, unless its request says
//! `"store": false`) and chat completion (`POST /v1/chat/completions` whose request says
//! `"store": true`, as OpenAI keeps them) is kept whole, the last [`STORED_MAX`], as a
//! provider stores them — streamed or not, and whatever became of the stream: a client (or a
//! gateway) that went away mid-stream does not keep the provider from finishing it.
//! `GET /v1/responses/{id}` answers the response as created, with its usage; until the
//! time its stream would have ended (time to first byte + the chunk interval for each
//! chunk) it is `in_progress` with `usage: null`. `GET /v1/chat/completions/{id}` answers
//! the `chat.completion` object, with its usage, from that time on. An id not kept
//! (never made, deleted with `DELETE /v1/responses/{id}`, or pushed out) is a 404 in
//! OpenAI's shape (`invalid_request_error`, `… with id '{id}' not found.`). Answers that
//! failed (`x-fake-error`, `x-fake-fail-after-chunks`) are not kept. The `x-fake-*`
//! failure controls still apply to a retrieval; its usage controls do not.
//!
//! A video job (`POST /v1/videos`, answered `queued`) is kept from its creation with a
//! lifecycle: `GET /v1/videos/{id}` answers it `in_progress` (`progress: 50`) for its
//! run time — `x-fake-job-ms` on the creation (default 0: done at once) — then
//! `completed` (`progress: 100`, `completed_at`, `expires_at`), or, with
//! `x-fake-job-fails: true`, `failed` with an `error` object
//! (`video_generation_failed`). `GET /v1/videos/{id}/content` answers the MP4 once the
//! job completed, else 404; `DELETE /v1/videos/{id}` forgets it (`deleted: true`). An
//! id not kept is a 404 in OpenAI's shape (`Video with id '{id}' not found.`).
//!
//! # Headers
//!
//! Every answer carries `server: portcullis-fake-upstream` and a `set-cookie`, as the
//! providers' front ends send them; OpenAI answers carry `x-request-id` and
//! `openai-organization`, Anthropic answers `request-id` and `anthropic-organization-id`
//! (the fake's account). A gateway in front must not pass the cookie, the server or
//! the account headers on to its clients.
//!
//! # Control
//!
//! Per request with `x-fake-*` headers (a proxy forwards them, so tests drive the fake
//! end to end) and per instance with [`Behavior`]s: see [`Behavior`] for the layering
//! and the outcome rules, [`ErrorKind`] for the provider errors and [`behavior`] for
//! every header name.
//!
//! # Observation
//!
//! [`FakeUpstream::stats`] returns exact counters: calls per route and per credential,
//! current and maximum in-flight requests overall and per credential, answers per
//! status, every credential seen, the last requests (method, path and query, every
//! header as received) and the last [`RECENT_BODIES`] request bodies (each cut to
//! [`BODY_CAP`] bytes; [`Stats::last_body_for`] / [`Stats::last_json_for`] read the
//! last one sent to a path prefix — e.g. to check the second turn of a tool-call
//! conversation).
//!
//! ```no_run
//! use std::time::Duration;
//! use portcullis_fake_upstream::{Behavior, ErrorKind, FakeUpstream};
//!
//! # async fn demo() {
//! let fake = FakeUpstream::start().await;
//! // The next two calls are overloaded, then the default (success) applies.
//! fake.push_script(Behavior::error(ErrorKind::Overloaded));
//! fake.push_script(Behavior::error(ErrorKind::Overloaded));
//! fake.set_default(Behavior::new().with_latency(Duration::from_millis(5)));
//! let url = format!("{}/v1/messages", fake.base_url());
//! // ... drive the system under test against `url` ...
//! let stats = fake.stats();
//! assert!(stats.max_in_flight_for("sk-channel-a") <= 4);
//! assert!(!stats.saw_anywhere("sk-client-key"));
//! fake.shutdown().await;
//! # }
//! ```
#![warn(missing_docs)]
#![deny(unreachable_pub)]

mod apis;
pub mod behavior;
mod body;
mod errors;
mod render;
mod request;
mod server;
mod stats;
mod stored;
mod time;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use behavior::{BadControlHeader, Behavior, ErrorKind, RateLimitInfo};
pub use render::thinking_signature;
pub use request::{
    DEFAULT_EMBEDDING_DIMENSIONS, chunk_text, estimate_input_tokens, expected_text,
    prompt_text_bytes,
};
pub use stats::{BODY_CAP, RECENT_BODIES, RecordedRequest, Route, Stats};
pub use stored::STORED_MAX;

use server::Shared;

/// The API format of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI chat completions (and the other OpenAI routes: Responses, embeddings,
    /// images, videos).
    OpenAi,
    /// Anthropic messages (and count_tokens).
    Anthropic,
    /// Gemini generateContent (and the other Gemini methods).
    Gemini,
}

/// The models listed by the list-models routes unless the builder sets others.
pub const DEFAULT_MODELS: [&str; 6] = [
    "gpt-4o-mini",
    "gpt-4o",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "gemini-2.0-flash",
    "gemini-2.5-pro",
];

/// Configures a [`FakeUpstream`] before it starts.
#[derive(Debug, Clone)]
pub struct FakeUpstreamBuilder {
    addr: SocketAddr,
    recent_capacity: usize,
    default: Behavior,
    models: Vec<String>,
}

impl Default for FakeUpstreamBuilder {
    fn default() -> Self {
        FakeUpstreamBuilder {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            recent_capacity: 64,
            default: Behavior::default(),
            models: DEFAULT_MODELS.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

impl FakeUpstreamBuilder {
    /// Listens on `addr`, which must be a loopback address (default `127.0.0.1:0`,
    /// a free port).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Listens on `127.0.0.1:port`.
    pub fn port(mut self, port: u16) -> Self {
        self.addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        self
    }

    /// How many recent requests [`Stats::recent_requests`] keeps (default 64; 0 turns
    /// recording off, e.g. for benchmarks).
    pub fn recent_capacity(mut self, n: usize) -> Self {
        self.recent_capacity = n;
        self
    }

    /// The initial default behaviour.
    pub fn default_behavior(mut self, b: Behavior) -> Self {
        self.default = b;
        self
    }

    /// The models the list-models routes report.
    pub fn models<I, S>(mut self, models: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.models = models.into_iter().map(Into::into).collect();
        self
    }

    /// Binds and starts serving on the current tokio runtime.
    pub async fn start(self) -> io::Result<FakeUpstream> {
        if !self.addr.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("fake upstream binds loopback only, not {}", self.addr),
            ));
        }
        let listener = TcpListener::bind(self.addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(self.recent_capacity, self.default, self.models));
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(server::serve(listener, shared.clone(), rx));
        Ok(FakeUpstream {
            control: FakeControl { shared },
            addr,
            shutdown: Some(tx),
            task: Some(task),
        })
    }
}

/// A cheap, cloneable handle to a running fake's behaviour and counters (for use from
/// other tasks while the [`FakeUpstream`] itself stays with the test).
#[derive(Clone)]
pub struct FakeControl {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FakeControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeControl")
            .field("in_flight", &self.shared.counters.in_flight())
            .finish()
    }
}

impl FakeControl {
    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// This fake's number in the process (from 1; every started fake gets the next),
    /// part of the ids it mints (see [the crate docs](crate#ids)).
    pub fn instance_id(&self) -> u64 {
        self.shared.instance
    }

    /// True when `id` (a response, output message or video id) was minted by this fake:
    /// it contains `_fake_i{instance_id}_`.
    pub fn made_id(&self, id: &str) -> bool {
        id.contains(&apis::instance_mark(self.shared.instance))
    }

    /// Zeroes the counters, the credentials seen and the recorded requests. Requests
    /// still in flight stay in flight; maxima restart from the current counts.
    /// Behaviours and scripts are kept.
    pub fn reset_stats(&self) {
        self.shared.counters.reset()
    }

    /// Sets the instance default behaviour (the bottom layer).
    pub fn set_default(&self, b: Behavior) {
        self.shared.set_default(b)
    }

    /// Sets the default behaviour for calls made with `credential` (overlays the
    /// instance default).
    pub fn set_default_for(&self, credential: &str, b: Behavior) {
        self.shared.set_default_for(credential, b)
    }

    /// Queues a behaviour for the next model call (one entry per call, in order; see
    /// [`Route::is_model_call`]).
    pub fn push_script(&self, b: Behavior) {
        self.shared.push_script(b)
    }

    /// Queues several behaviours, in order.
    pub fn push_scripts(&self, bs: impl IntoIterator<Item = Behavior>) {
        for b in bs {
            self.shared.push_script(b)
        }
    }

    /// Queues a behaviour for the next model call made with `credential`; such entries
    /// are used before the global queue.
    pub fn push_script_for(&self, credential: &str, b: Behavior) {
        self.shared.push_script_for(credential, b)
    }

    /// Drops every queued behaviour.
    pub fn clear_scripts(&self) {
        self.shared.clear_scripts()
    }

    /// Drops every behaviour: defaults, per-credential defaults and scripts.
    pub fn clear_behaviors(&self) {
        self.shared.clear_behaviors()
    }

    /// Scripted behaviours not yet consumed (all queues).
    pub fn scripts_remaining(&self) -> usize {
        self.shared.scripts_remaining()
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u64 {
        self.shared.counters.in_flight()
    }

    /// Waits until no request is in flight, up to `timeout`; returns whether it got there.
    /// (A client that drops a connection is noticed by the server asynchronously.)
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if self.in_flight() == 0 {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// A running fake upstream on `127.0.0.1`. Dropping it stops the server and aborts
/// its connections.
#[derive(Debug)]
pub struct FakeUpstream {
    control: FakeControl,
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FakeUpstream {
    /// Starts a fake on `127.0.0.1` with a free port.
    ///
    /// # Panics
    /// When binding a loopback port fails (it practically never does).
    pub async fn start() -> FakeUpstream {
        FakeUpstreamBuilder::default()
            .start()
            .await
            .expect("bind 127.0.0.1:0 for the fake upstream")
    }

    /// Starts a fake on `addr` (loopback only).
    pub async fn start_on(addr: SocketAddr) -> io::Result<FakeUpstream> {
        FakeUpstreamBuilder::default().addr(addr).start().await
    }

    /// A builder for more settings.
    pub fn builder() -> FakeUpstreamBuilder {
        FakeUpstreamBuilder::default()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `base_url() + path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A cloneable handle to the behaviour and counters.
    pub fn control(&self) -> FakeControl {
        self.control.clone()
    }

    /// See [`FakeControl::stats`].
    pub fn stats(&self) -> Stats {
        self.control.stats()
    }

    /// See [`FakeControl::instance_id`].
    pub fn instance_id(&self) -> u64 {
        self.control.instance_id()
    }

    /// See [`FakeControl::made_id`].
    pub fn made_id(&self, id: &str) -> bool {
        self.control.made_id(id)
    }

    /// See [`FakeControl::reset_stats`].
    pub fn reset_stats(&self) {
        self.control.reset_stats()
    }

    /// See [`FakeControl::set_default`].
    pub fn set_default(&self, b: Behavior) {
        self.control.set_default(b)
    }

    /// See [`FakeControl::set_default_for`].
    pub fn set_default_for(&self, credential: &str, b: Behavior) {
        self.control.set_default_for(credential, b)
    }

    /// See [`FakeControl::push_script`].
    pub fn push_script(&self, b: Behavior) {
        self.control.push_script(b)
    }

    /// See [`FakeControl::push_scripts`].
    pub fn push_scripts(&self, bs: impl IntoIterator<Item = Behavior>) {
        self.control.push_scripts(bs)
    }

    /// See [`FakeControl::push_script_for`].
    pub fn push_script_for(&self, credential: &str, b: Behavior) {
        self.control.push_script_for(credential, b)
    }

    /// See [`FakeControl::clear_scripts`].
    pub fn clear_scripts(&self) {
        self.control.clear_scripts()
    }

    /// See [`FakeControl::clear_behaviors`].
    pub fn clear_behaviors(&self) {
        self.control.clear_behaviors()
    }

    /// See [`FakeControl::scripts_remaining`].
    pub fn scripts_remaining(&self) -> usize {
        self.control.scripts_remaining()
    }

    /// See [`FakeControl::in_flight`].
    pub fn in_flight(&self) -> u64 {
        self.control.in_flight()
    }

    /// See [`FakeControl::wait_idle`].
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        self.control.wait_idle(timeout).await
    }

    /// Stops accepting, aborts every open connection (hung requests included) and
    /// waits for the server task to end.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
