//! What the fake upstream does with one call: [`Behavior`], [`ErrorKind`],
//! [`RateLimitInfo`] and the `x-fake-*` request headers that carry them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::Dialect;

/// Control header: delay before the response head (milliseconds).
pub const H_LATENCY_MS: &str = "x-fake-latency-ms";
/// Control header: delay before the first content chunk of a stream (milliseconds).
/// For a non-streamed answer it is added to the latency.
pub const H_TTFB_MS: &str = "x-fake-ttfb-ms";
/// Control header: delay between two stream events after the first content chunk (milliseconds).
pub const H_CHUNK_INTERVAL_MS: &str = "x-fake-chunk-interval-ms";
/// Control header: HTTP status of the answer. A 2xx status means success whatever
/// [`H_ERROR`] says; any other status renders an error.
pub const H_STATUS: &str = "x-fake-status";
/// Control header: the provider error to render, by its real name (see [`ErrorKind`]).
pub const H_ERROR: &str = "x-fake-error";
/// Control header: value of the `retry-after` response header (whole seconds).
pub const H_RETRY_AFTER: &str = "x-fake-retry-after";
/// Control header: a stream sends this many content chunks, then fails (an in-stream
/// error event in the provider's format, or a cut connection with [`H_CUT`]).
pub const H_FAIL_AFTER_CHUNKS: &str = "x-fake-fail-after-chunks";
/// Control header (`true`/`false`): abort the connection instead of ending cleanly.
pub const H_CUT: &str = "x-fake-cut";
/// Control header (`true`/`false`): never answer (non-stream) / never send the first
/// content chunk (stream).
pub const H_HANG: &str = "x-fake-hang";
/// Control header: number of content chunks (default 4).
pub const H_CHUNKS: &str = "x-fake-chunks";
/// Header: the client will leave before the answer ends (any value). Such a call is
/// left out of [`Stats::max_in_flight_stayed_per_credential`](crate::Stats): once its
/// client has gone, the gateway in front no longer holds it, but the fake only notices
/// the closed connection a moment later — a moment in which the gateway may rightly
/// have sent the next call.
pub const H_CLIENT_LEAVES: &str = "x-fake-client-leaves";
/// Control header: the prompt size in tokens, replacing the estimate from the body.
pub const H_INPUT_TOKENS: &str = "x-fake-input-tokens";
/// Control header: output tokens (default 16), capped by the request's max tokens.
pub const H_OUTPUT_TOKENS: &str = "x-fake-output-tokens";
/// Control header: the part of the output tokens spent on reasoning (OpenAI
/// `reasoning_tokens` in chat completions and the Responses API; capped by the output
/// tokens; default 0).
pub const H_REASONING_TOKENS: &str = "x-fake-reasoning-tokens";
/// Control header: prompt tokens served from the provider's cache (cache reads).
pub const H_CACHED_TOKENS: &str = "x-fake-cached-tokens";
/// Control header: prompt tokens written to the cache (Anthropic cache creation).
pub const H_CACHE_CREATION_TOKENS: &str = "x-fake-cache-creation-tokens";
/// Control header: the answer carries this many tool calls (0–8, default 0) of the
/// function named by [`H_TOOL_NAME`], with arguments `{"city":"c<i>"}` for call `i`
/// (OpenAI chat, Anthropic messages and Gemini generateContent; ignored by the other
/// routes). The tool calls replace the text unless [`H_CHUNKS`] is set too (the text
/// then comes first), and the finish reason becomes `tool_calls` / `tool_use` (Gemini
/// keeps `STOP`) unless the output was cut by the max tokens. See
/// [the crate docs](crate#tool-calls-and-thinking) for the exact shapes.
pub const H_TOOL_CALLS: &str = "x-fake-tool-calls";
/// Control header: the name of the function the tool calls call (default
/// [`DEFAULT_TOOL_NAME`]; must not be empty).
pub const H_TOOL_NAME: &str = "x-fake-tool-name";
/// Control header (Anthropic messages and Gemini generateContent; ignored elsewhere):
/// the answer starts with a thinking block (Anthropic) or a thought part
/// `{"text":…,"thought":true}` (Gemini) carrying this text, signed
/// `sig_fake_<16 hex digits>` ([`thinking_signature`](crate::thinking_signature)):
/// Anthropic's block carries the signature, Gemini's first `functionCall` part (when
/// [`H_TOOL_CALLS`] asks for calls) carries it as `thoughtSignature`, and Gemini's
/// usage reports `thoughtsTokenCount = max(1, text bytes / 4)` on top of the output
/// tokens. The value is taken as sent (visible ASCII, trimmed). See
/// [the crate docs](crate#tool-calls-and-thinking).
pub const H_THINKING: &str = "x-fake-thinking";
/// Control header (`POST /v1/videos`): the job's run time (milliseconds, default 0):
/// `GET /v1/videos/{id}` answers it `in_progress` until then, then its end.
pub const H_JOB_MS: &str = "x-fake-job-ms";
/// Control header (`true`/`false`, `POST /v1/videos`): the job ends `failed` (no
/// content) instead of `completed`.
pub const H_JOB_FAILS: &str = "x-fake-job-fails";
/// Control header: request limit reported in rate-limit headers.
pub const H_RL_LIMIT_REQUESTS: &str = "x-fake-ratelimit-limit-requests";
/// Control header: remaining requests reported in rate-limit headers.
pub const H_RL_REMAINING_REQUESTS: &str = "x-fake-ratelimit-remaining-requests";
/// Control header: token limit reported in rate-limit headers.
pub const H_RL_LIMIT_TOKENS: &str = "x-fake-ratelimit-limit-tokens";
/// Control header: remaining tokens reported in rate-limit headers.
pub const H_RL_REMAINING_TOKENS: &str = "x-fake-ratelimit-remaining-tokens";
/// Control header: time until the reported rate limits reset (milliseconds).
pub const H_RL_RESET_MS: &str = "x-fake-ratelimit-reset-ms";

/// Default number of content chunks.
pub const DEFAULT_CHUNKS: u32 = 4;
/// Default number of output tokens (before the request's max-tokens cap).
pub const DEFAULT_OUTPUT_TOKENS: u64 = 16;
/// Default name of the function the tool calls call.
pub const DEFAULT_TOOL_NAME: &str = "get_weather";
/// Most tool calls one answer can carry.
pub const MAX_TOOL_CALLS: u32 = 8;

/// A provider error the fake can render, in each dialect's real body and headers.
///
/// Parsed from the `x-fake-error` header by any of its real names (case-insensitive);
/// an unknown name becomes [`ErrorKind::Other`] and is rendered as an unknown error
/// carrying that name as its type/code.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A rate limit: OpenAI 429 `rate_limit_exceeded` (with `x-ratelimit-*` headers),
    /// Anthropic 429 `rate_limit_error` (with `anthropic-ratelimit-*` and `retry-after`),
    /// Gemini 429 `RESOURCE_EXHAUSTED` (QuotaFailure + RetryInfo details).
    /// Names: `rate_limit_exceeded`, `rate_limit_error`, `rate_limit`, `RESOURCE_EXHAUSTED`.
    RateLimit,
    /// OpenAI 429 `slow_down` (a sudden rise in request rate). Rendered as the rate-limit
    /// error in the other dialects. Name: `slow_down`.
    SlowDown,
    /// The paying account's spend cap: OpenAI 429 `insufficient_quota`; Anthropic
    /// `enforced_spend_limit_reached` (429 `rate_limit_error` with
    /// `details.error_code`, no `retry-after`; or, with status 400, the
    /// `invalid_request_error` "You have reached your specified API usage limits"; with
    /// 402, `billing_error`); Gemini 429 `RESOURCE_EXHAUSTED` without RetryInfo.
    /// Names: `insufficient_quota`, `enforced_spend_limit_reached`, `spend_limit`.
    SpendLimit,
    /// Provider overload: OpenAI 503 `server_is_overloaded`, Anthropic 529
    /// `overloaded_error`, Gemini 503 `UNAVAILABLE`.
    /// Names: `server_is_overloaded`, `overloaded_error`, `overloaded`, `UNAVAILABLE`.
    Overloaded,
    /// 400 invalid request (`invalid_request_error`, Gemini `INVALID_ARGUMENT`).
    /// Names: `invalid_request_error`, `invalid_request`, `INVALID_ARGUMENT`.
    InvalidRequest,
    /// A bad or revoked provider credential: OpenAI 401 `invalid_api_key`, Anthropic 401
    /// `authentication_error`, Gemini 400 `INVALID_ARGUMENT` / `API_KEY_INVALID`.
    /// Names: `invalid_api_key`, `authentication_error`, `API_KEY_INVALID`, `UNAUTHENTICATED`.
    InvalidApiKey,
    /// 404 unknown model (`model_not_found`, `not_found_error`, `NOT_FOUND`).
    NotFound,
    /// 500 internal error (OpenAI `server_error`, Anthropic `api_error`, Gemini `INTERNAL`).
    /// Names: `server_error`, `api_error`, `INTERNAL`.
    ServerError,
    /// 502 from the provider's edge: a Cloudflare-style HTML page, not JSON (as real
    /// 502s usually are). Name: `bad_gateway`.
    BadGateway,
    /// 408 request timeout (OpenAI `timeout`, Anthropic `timeout_error`, Gemini
    /// `DEADLINE_EXCEEDED`). Names: `timeout`, `timeout_error`, `DEADLINE_EXCEEDED`.
    Timeout,
    /// Any other name: rendered as an unknown error whose type/code/status is the name.
    Other(String),
}

impl ErrorKind {
    /// Parses a real provider error name (see each variant), case-insensitive.
    pub fn parse(name: &str) -> ErrorKind {
        let n = name.trim();
        let is = |s: &str| n.eq_ignore_ascii_case(s);
        if is("rate_limit_exceeded")
            || is("rate_limit_error")
            || is("rate_limit")
            || is("resource_exhausted")
        {
            ErrorKind::RateLimit
        } else if is("slow_down") {
            ErrorKind::SlowDown
        } else if is("insufficient_quota")
            || is("enforced_spend_limit_reached")
            || is("spend_limit")
        {
            ErrorKind::SpendLimit
        } else if is("server_is_overloaded")
            || is("overloaded_error")
            || is("overloaded")
            || is("unavailable")
        {
            ErrorKind::Overloaded
        } else if is("invalid_request_error") || is("invalid_request") || is("invalid_argument") {
            ErrorKind::InvalidRequest
        } else if is("invalid_api_key")
            || is("authentication_error")
            || is("api_key_invalid")
            || is("unauthenticated")
        {
            ErrorKind::InvalidApiKey
        } else if is("model_not_found") || is("not_found_error") || is("not_found") {
            ErrorKind::NotFound
        } else if is("server_error") || is("api_error") || is("internal") {
            ErrorKind::ServerError
        } else if is("bad_gateway") {
            ErrorKind::BadGateway
        } else if is("timeout") || is("timeout_error") || is("deadline_exceeded") {
            ErrorKind::Timeout
        } else {
            ErrorKind::Other(n.to_owned())
        }
    }

    /// The canonical header name of this kind (what [`Behavior::to_headers`] sends).
    pub fn name(&self) -> &str {
        match self {
            ErrorKind::RateLimit => "rate_limit",
            ErrorKind::SlowDown => "slow_down",
            ErrorKind::SpendLimit => "spend_limit",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::InvalidApiKey => "invalid_api_key",
            ErrorKind::NotFound => "not_found",
            ErrorKind::ServerError => "server_error",
            ErrorKind::BadGateway => "bad_gateway",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Other(s) => s,
        }
    }

    /// The HTTP status the provider uses for this error in `dialect`.
    pub fn default_status(&self, dialect: Dialect) -> u16 {
        match self {
            ErrorKind::RateLimit | ErrorKind::SlowDown | ErrorKind::SpendLimit => 429,
            ErrorKind::Overloaded => match dialect {
                Dialect::Anthropic => 529,
                Dialect::OpenAi | Dialect::Gemini => 503,
            },
            ErrorKind::InvalidRequest => 400,
            ErrorKind::InvalidApiKey => match dialect {
                Dialect::Gemini => 400,
                Dialect::OpenAi | Dialect::Anthropic => 401,
            },
            ErrorKind::NotFound => 404,
            ErrorKind::ServerError | ErrorKind::Other(_) => 500,
            ErrorKind::BadGateway => 502,
            ErrorKind::Timeout => 408,
        }
    }

    /// The error a provider typically sends with a bare `status` (used when only
    /// `x-fake-status` is given).
    pub fn from_status(status: u16) -> ErrorKind {
        match status {
            400 => ErrorKind::InvalidRequest,
            401 | 403 => ErrorKind::InvalidApiKey,
            402 => ErrorKind::SpendLimit,
            404 => ErrorKind::NotFound,
            408 | 504 => ErrorKind::Timeout,
            429 => ErrorKind::RateLimit,
            502 => ErrorKind::BadGateway,
            503 | 529 => ErrorKind::Overloaded,
            405..=499 => ErrorKind::InvalidRequest,
            _ => ErrorKind::ServerError,
        }
    }
}

impl FromStr for ErrorKind {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ErrorKind::parse(s))
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rate-limit numbers reported in the provider's rate-limit headers
/// (`x-ratelimit-*` for OpenAI, `anthropic-ratelimit-*` for Anthropic; Gemini sends none).
///
/// On a success the headers are sent only when at least one field is set; on a
/// rate-limit error they are always sent. Unset numbers default to 60 requests /
/// 150 000 tokens with everything remaining (a rate-limit error defaults to 0 remaining
/// requests), and the reset to the retry-after or 1 s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimitInfo {
    /// Request limit of the window.
    pub limit_requests: Option<u64>,
    /// Requests left in the window.
    pub remaining_requests: Option<u64>,
    /// Token limit of the window.
    pub limit_tokens: Option<u64>,
    /// Tokens left in the window.
    pub remaining_tokens: Option<u64>,
    /// Time until the window resets.
    pub reset: Option<Duration>,
}

impl RateLimitInfo {
    /// Nothing set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the request limit and remaining requests.
    pub fn requests(mut self, limit: u64, remaining: u64) -> Self {
        self.limit_requests = Some(limit);
        self.remaining_requests = Some(remaining);
        self
    }
    /// Sets the token limit and remaining tokens.
    pub fn tokens(mut self, limit: u64, remaining: u64) -> Self {
        self.limit_tokens = Some(limit);
        self.remaining_tokens = Some(remaining);
        self
    }
    /// Sets the time until reset.
    pub fn reset(mut self, reset: Duration) -> Self {
        self.reset = Some(reset);
        self
    }
    /// True when any field is set.
    pub fn is_set(&self) -> bool {
        *self != RateLimitInfo::default()
    }
    fn overlay(&self, top: &RateLimitInfo) -> RateLimitInfo {
        RateLimitInfo {
            limit_requests: top.limit_requests.or(self.limit_requests),
            remaining_requests: top.remaining_requests.or(self.remaining_requests),
            limit_tokens: top.limit_tokens.or(self.limit_tokens),
            remaining_tokens: top.remaining_tokens.or(self.remaining_tokens),
            reset: top.reset.or(self.reset),
        }
    }
}

/// How the fake answers one call. Every field is optional; unset fields fall back to
/// the layer below.
///
/// Resolution for each model call (generation, embeddings, token counting, images,
/// video job creation: [`Route::is_model_call`](crate::Route::is_model_call)):
/// the instance default ([`FakeUpstream::set_default`](crate::FakeUpstream::set_default)),
/// overlaid by the default for the call's credential
/// ([`set_default_for`](crate::FakeUpstream::set_default_for)), overlaid by the next
/// scripted behaviour (the credential's own queue first, else the global queue; one
/// entry consumed per call), overlaid by the request's `x-fake-*` headers. "Overlaid"
/// means: a field set in the upper layer wins; `status` and `error` form one outcome,
/// so a layer that sets either replaces both (a scripted `error(RateLimit)` is not
/// masked by a default `ok()`, and `x-fake-status: 200` clears a scripted error).
/// The routes about a stored response or video job
/// ([`Route::is_resource`](crate::Route::is_resource)) use the same layers without the
/// scripted one; the list-models routes use none.
///
/// Outcome rules: a 2xx `status` is a success whatever `error` says; otherwise a set
/// `status` or `error` renders that error (`error` names the body, `status` the HTTP
/// status; each defaults from the other). On a streamed call with
/// `fail_after_chunks`, the head is `200` and `status`/`error` choose the in-stream
/// error event instead (default: the dialect's internal server error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Behavior {
    /// Delay before the response head.
    pub latency: Option<Duration>,
    /// Delay before the first content chunk of a stream (added to latency otherwise).
    pub ttfb: Option<Duration>,
    /// Delay between stream events after the first content chunk.
    pub chunk_interval: Option<Duration>,
    /// HTTP status.
    pub status: Option<u16>,
    /// Provider error to render.
    pub error: Option<ErrorKind>,
    /// `retry-after` header (whole seconds) on the answer.
    pub retry_after: Option<u64>,
    /// Streams: content chunks sent before failing.
    pub fail_after_chunks: Option<u32>,
    /// Abort the connection instead of a clean end. Streams: at the failure point (or
    /// after all content chunks, before the final usage events); non-streamed answers:
    /// after half the body.
    pub cut: Option<bool>,
    /// Never answer (non-stream) / never send the first content chunk (stream).
    pub hang: Option<bool>,
    /// Content chunks (default [`DEFAULT_CHUNKS`]).
    pub chunks: Option<u32>,
    /// Prompt tokens, replacing the estimate from the body.
    pub input_tokens: Option<u64>,
    /// Output tokens before the max-tokens cap (default [`DEFAULT_OUTPUT_TOKENS`]).
    pub output_tokens: Option<u64>,
    /// The part of the output tokens spent on reasoning (OpenAI `reasoning_tokens`;
    /// capped by the output tokens; default 0).
    pub reasoning_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    pub cached_tokens: Option<u64>,
    /// Prompt tokens written to the cache (Anthropic).
    pub cache_creation_tokens: Option<u64>,
    /// Tool calls in the answer (0–[`MAX_TOOL_CALLS`], default 0; see [`H_TOOL_CALLS`]).
    pub tool_calls: Option<u32>,
    /// The function the tool calls call (default [`DEFAULT_TOOL_NAME`]).
    pub tool_name: Option<String>,
    /// Anthropic and Gemini: a thinking block (a thought part) with this text opens the
    /// answer (see [`H_THINKING`]).
    pub thinking: Option<String>,
    /// A video job's run time before its end (default zero; see [`H_JOB_MS`]).
    pub job_time: Option<Duration>,
    /// A video job ends `failed` instead of `completed` (see [`H_JOB_FAILS`]).
    pub job_fails: Option<bool>,
    /// Rate-limit header numbers.
    pub rate_limit: RateLimitInfo,
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident => $field:ident : $ty:ty),* $(,)?) => {
        $(
            $(#[$m])*
            pub fn $name(mut self, v: $ty) -> Self {
                self.$field = Some(v);
                self
            }
        )*
    };
}

impl Behavior {
    /// A behaviour with nothing set (a plain success unless a lower layer says otherwise).
    pub fn new() -> Self {
        Self::default()
    }

    /// An explicit success (status 200): overrides an error set in a lower layer.
    pub fn ok() -> Self {
        Self::new().with_status(200)
    }

    /// An answer with this HTTP status (the error body follows from the status).
    pub fn status(status: u16) -> Self {
        Self::new().with_status(status)
    }

    /// An answer with this provider error at its usual status.
    pub fn error(kind: ErrorKind) -> Self {
        Self::new().with_error(kind)
    }

    /// Never answer (non-stream) / never send the first content chunk (stream).
    pub fn hang() -> Self {
        Self::new().with_hang(true)
    }

    setters! {
        /// Sets [`Behavior::latency`].
        with_latency => latency: Duration,
        /// Sets [`Behavior::ttfb`].
        with_ttfb => ttfb: Duration,
        /// Sets [`Behavior::chunk_interval`].
        with_chunk_interval => chunk_interval: Duration,
        /// Sets [`Behavior::status`].
        with_status => status: u16,
        /// Sets [`Behavior::error`].
        with_error => error: ErrorKind,
        /// Sets [`Behavior::retry_after`] (seconds).
        with_retry_after => retry_after: u64,
        /// Sets [`Behavior::fail_after_chunks`].
        with_fail_after_chunks => fail_after_chunks: u32,
        /// Sets [`Behavior::cut`].
        with_cut => cut: bool,
        /// Sets [`Behavior::hang`].
        with_hang => hang: bool,
        /// Sets [`Behavior::chunks`].
        with_chunks => chunks: u32,
        /// Sets [`Behavior::input_tokens`].
        with_input_tokens => input_tokens: u64,
        /// Sets [`Behavior::output_tokens`].
        with_output_tokens => output_tokens: u64,
        /// Sets [`Behavior::reasoning_tokens`].
        with_reasoning_tokens => reasoning_tokens: u64,
        /// Sets [`Behavior::cached_tokens`].
        with_cached_tokens => cached_tokens: u64,
        /// Sets [`Behavior::cache_creation_tokens`].
        with_cache_creation_tokens => cache_creation_tokens: u64,
        /// Sets [`Behavior::job_time`].
        with_job_time => job_time: Duration,
        /// Sets [`Behavior::job_fails`].
        with_job_fails => job_fails: bool,
    }

    /// Sets [`Behavior::tool_calls`] (at most [`MAX_TOOL_CALLS`]; more are clamped).
    pub fn with_tool_calls(mut self, n: u32) -> Self {
        self.tool_calls = Some(n.min(MAX_TOOL_CALLS));
        self
    }

    /// Sets [`Behavior::tool_name`].
    pub fn with_tool_name(mut self, name: impl Into<String>) -> Self {
        self.tool_name = Some(name.into());
        self
    }

    /// Sets [`Behavior::thinking`].
    pub fn with_thinking(mut self, text: impl Into<String>) -> Self {
        self.thinking = Some(text.into());
        self
    }

    /// Sets [`Behavior::rate_limit`].
    pub fn with_rate_limit(mut self, rl: RateLimitInfo) -> Self {
        self.rate_limit = rl;
        self
    }

    fn has_outcome(&self) -> bool {
        self.status.is_some() || self.error.is_some()
    }

    /// `self` with every field that `top` sets replaced by `top`'s value. `status` and
    /// `error` travel together: if `top` sets either, both come from `top`.
    pub fn overlay(&self, top: &Behavior) -> Behavior {
        Behavior {
            latency: top.latency.or(self.latency),
            ttfb: top.ttfb.or(self.ttfb),
            chunk_interval: top.chunk_interval.or(self.chunk_interval),
            // The outcome (status, error) is one unit: a layer that sets either
            // replaces both, so a scripted error is not masked by a lower `ok()`.
            status: if top.has_outcome() {
                top.status
            } else {
                self.status
            },
            error: if top.has_outcome() {
                top.error.clone()
            } else {
                self.error.clone()
            },
            retry_after: top.retry_after.or(self.retry_after),
            fail_after_chunks: top.fail_after_chunks.or(self.fail_after_chunks),
            cut: top.cut.or(self.cut),
            hang: top.hang.or(self.hang),
            chunks: top.chunks.or(self.chunks),
            input_tokens: top.input_tokens.or(self.input_tokens),
            output_tokens: top.output_tokens.or(self.output_tokens),
            reasoning_tokens: top.reasoning_tokens.or(self.reasoning_tokens),
            cached_tokens: top.cached_tokens.or(self.cached_tokens),
            cache_creation_tokens: top.cache_creation_tokens.or(self.cache_creation_tokens),
            tool_calls: top.tool_calls.or(self.tool_calls),
            tool_name: top.tool_name.clone().or_else(|| self.tool_name.clone()),
            thinking: top.thinking.clone().or_else(|| self.thinking.clone()),
            job_time: top.job_time.or(self.job_time),
            job_fails: top.job_fails.or(self.job_fails),
            rate_limit: self.rate_limit.overlay(&top.rate_limit),
        }
    }

    /// Reads the `x-fake-*` headers of a request. Other headers are ignored; a control
    /// header with a malformed value is an error (the fake answers it with a 400 that
    /// names the header).
    pub fn from_headers(headers: &HeaderMap) -> Result<Behavior, BadControlHeader> {
        let mut b = Behavior::default();
        for (name, value) in headers {
            let Some(rest) = name.as_str().strip_prefix("x-fake-") else {
                continue;
            };
            let bad = || BadControlHeader {
                header: name.as_str().to_owned(),
            };
            let text = value.to_str().map_err(|_| bad())?.trim();
            let num = || text.parse::<u64>().map_err(|_| bad());
            let ms = || num().map(Duration::from_millis);
            let flag = || match text.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(bad()),
            };
            let small = || u32::try_from(num()?).map_err(|_| bad());
            match rest {
                "latency-ms" => b.latency = Some(ms()?),
                "ttfb-ms" => b.ttfb = Some(ms()?),
                "chunk-interval-ms" => b.chunk_interval = Some(ms()?),
                "status" => {
                    let s = u16::try_from(num()?).map_err(|_| bad())?;
                    if !(200..=599).contains(&s) {
                        return Err(bad());
                    }
                    b.status = Some(s)
                }
                "error" => {
                    if text.is_empty() {
                        return Err(bad());
                    }
                    b.error = Some(ErrorKind::parse(text))
                }
                "retry-after" => b.retry_after = Some(num()?),
                "fail-after-chunks" => b.fail_after_chunks = Some(small()?),
                "cut" => b.cut = Some(flag()?),
                "hang" => b.hang = Some(flag()?),
                "chunks" => b.chunks = Some(small()?),
                "input-tokens" => b.input_tokens = Some(num()?),
                "output-tokens" => b.output_tokens = Some(num()?),
                "reasoning-tokens" => b.reasoning_tokens = Some(num()?),
                "cached-tokens" => b.cached_tokens = Some(num()?),
                "cache-creation-tokens" => b.cache_creation_tokens = Some(num()?),
                "tool-calls" => {
                    let n = small()?;
                    if n > MAX_TOOL_CALLS {
                        return Err(bad());
                    }
                    b.tool_calls = Some(n)
                }
                "tool-name" => {
                    if text.is_empty() {
                        return Err(bad());
                    }
                    b.tool_name = Some(text.to_owned())
                }
                "thinking" => b.thinking = Some(text.to_owned()),
                "job-ms" => b.job_time = Some(ms()?),
                "job-fails" => b.job_fails = Some(flag()?),
                "ratelimit-limit-requests" => b.rate_limit.limit_requests = Some(num()?),
                "ratelimit-remaining-requests" => b.rate_limit.remaining_requests = Some(num()?),
                "ratelimit-limit-tokens" => b.rate_limit.limit_tokens = Some(num()?),
                "ratelimit-remaining-tokens" => b.rate_limit.remaining_tokens = Some(num()?),
                "ratelimit-reset-ms" => b.rate_limit.reset = Some(ms()?),
                // Unknown x-fake-* headers are ignored so newer tests keep working
                // against an older fake.
                _ => {}
            }
        }
        Ok(b)
    }

    /// The `x-fake-*` request headers that make the fake behave like `self` — for tests
    /// that drive the fake end to end through a proxy.
    pub fn to_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = Vec::new();
        let mut push = |name: &'static str, v: String| {
            out.push((
                HeaderName::from_static(name),
                HeaderValue::try_from(v).expect("header value"),
            ));
        };
        let ms = |d: Duration| d.as_millis().to_string();
        if let Some(v) = self.latency {
            push(H_LATENCY_MS, ms(v));
        }
        if let Some(v) = self.ttfb {
            push(H_TTFB_MS, ms(v));
        }
        if let Some(v) = self.chunk_interval {
            push(H_CHUNK_INTERVAL_MS, ms(v));
        }
        if let Some(v) = self.status {
            push(H_STATUS, v.to_string());
        }
        if let Some(v) = &self.error {
            push(H_ERROR, v.name().to_owned());
        }
        if let Some(v) = self.retry_after {
            push(H_RETRY_AFTER, v.to_string());
        }
        if let Some(v) = self.fail_after_chunks {
            push(H_FAIL_AFTER_CHUNKS, v.to_string());
        }
        if let Some(v) = self.cut {
            push(H_CUT, v.to_string());
        }
        if let Some(v) = self.hang {
            push(H_HANG, v.to_string());
        }
        if let Some(v) = self.chunks {
            push(H_CHUNKS, v.to_string());
        }
        if let Some(v) = self.input_tokens {
            push(H_INPUT_TOKENS, v.to_string());
        }
        if let Some(v) = self.output_tokens {
            push(H_OUTPUT_TOKENS, v.to_string());
        }
        if let Some(v) = self.reasoning_tokens {
            push(H_REASONING_TOKENS, v.to_string());
        }
        if let Some(v) = self.cached_tokens {
            push(H_CACHED_TOKENS, v.to_string());
        }
        if let Some(v) = self.cache_creation_tokens {
            push(H_CACHE_CREATION_TOKENS, v.to_string());
        }
        if let Some(v) = self.tool_calls {
            push(H_TOOL_CALLS, v.to_string());
        }
        if let Some(v) = &self.tool_name {
            push(H_TOOL_NAME, v.clone());
        }
        if let Some(v) = &self.thinking {
            push(H_THINKING, v.clone());
        }
        if let Some(v) = self.job_time {
            push(H_JOB_MS, ms(v));
        }
        if let Some(v) = self.job_fails {
            push(H_JOB_FAILS, v.to_string());
        }
        let rl = &self.rate_limit;
        if let Some(v) = rl.limit_requests {
            push(H_RL_LIMIT_REQUESTS, v.to_string());
        }
        if let Some(v) = rl.remaining_requests {
            push(H_RL_REMAINING_REQUESTS, v.to_string());
        }
        if let Some(v) = rl.limit_tokens {
            push(H_RL_LIMIT_TOKENS, v.to_string());
        }
        if let Some(v) = rl.remaining_tokens {
            push(H_RL_REMAINING_TOKENS, v.to_string());
        }
        if let Some(v) = rl.reset {
            push(H_RL_RESET_MS, ms(v));
        }
        out
    }

    /// The error to render, if this behaviour is not a success: `(kind, status)`.
    pub(crate) fn failure(&self, dialect: Dialect) -> Option<(ErrorKind, u16)> {
        match (self.status, &self.error) {
            (Some(s), _) if (200..300).contains(&s) => None,
            (Some(s), Some(k)) => Some((k.clone(), s)),
            (Some(s), None) => Some((ErrorKind::from_status(s), s)),
            (None, Some(k)) => Some((k.clone(), k.default_status(dialect))),
            (None, None) => None,
        }
    }
}

/// A control header (`x-fake-*`) with a value the fake cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadControlHeader {
    /// The header's name.
    pub header: String,
}

impl fmt::Display for BadControlHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fake-upstream: bad value for control header {}",
            self.header
        )
    }
}

impl std::error::Error for BadControlHeader {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_parse_to_kinds() {
        assert_eq!(ErrorKind::parse("RESOURCE_EXHAUSTED"), ErrorKind::RateLimit);
        assert_eq!(ErrorKind::parse("rate_limit_error"), ErrorKind::RateLimit);
        assert_eq!(
            ErrorKind::parse("enforced_spend_limit_reached"),
            ErrorKind::SpendLimit
        );
        assert_eq!(
            ErrorKind::parse("insufficient_quota"),
            ErrorKind::SpendLimit
        );
        assert_eq!(ErrorKind::parse("overloaded_error"), ErrorKind::Overloaded);
        assert_eq!(ErrorKind::parse("UNAVAILABLE"), ErrorKind::Overloaded);
        assert_eq!(ErrorKind::parse("weird"), ErrorKind::Other("weird".into()));
        assert_eq!(
            ErrorKind::Overloaded.default_status(Dialect::Anthropic),
            529
        );
        assert_eq!(ErrorKind::Overloaded.default_status(Dialect::OpenAi), 503);
    }

    #[test]
    fn headers_round_trip() {
        let b = Behavior::new()
            .with_latency(Duration::from_millis(5))
            .with_status(529)
            .with_error(ErrorKind::SpendLimit)
            .with_fail_after_chunks(2)
            .with_cut(true)
            .with_cached_tokens(7)
            .with_reasoning_tokens(3)
            .with_tool_calls(2)
            .with_tool_name("lookup")
            .with_thinking("let me think")
            .with_rate_limit(
                RateLimitInfo::new()
                    .requests(10, 0)
                    .reset(Duration::from_millis(1500)),
            );
        let mut map = HeaderMap::new();
        for (k, v) in b.to_headers() {
            map.insert(k, v);
        }
        assert_eq!(Behavior::from_headers(&map).unwrap(), b);
    }

    #[test]
    fn bad_header_is_reported() {
        let mut map = HeaderMap::new();
        map.insert(H_LATENCY_MS, HeaderValue::from_static("soon"));
        assert_eq!(
            Behavior::from_headers(&map).unwrap_err().header,
            H_LATENCY_MS
        );
    }

    #[test]
    fn tool_call_headers_are_checked() {
        let read = |k: &'static str, v: &'static str| {
            let mut map = HeaderMap::new();
            map.insert(k, HeaderValue::from_static(v));
            Behavior::from_headers(&map)
        };
        assert_eq!(read(H_TOOL_CALLS, "8").unwrap().tool_calls, Some(8));
        assert_eq!(read(H_TOOL_CALLS, "9").unwrap_err().header, H_TOOL_CALLS);
        assert_eq!(read(H_TOOL_CALLS, "x").unwrap_err().header, H_TOOL_CALLS);
        assert_eq!(read(H_TOOL_NAME, " ").unwrap_err().header, H_TOOL_NAME);
        assert_eq!(
            read(H_THINKING, "hmm").unwrap().thinking.as_deref(),
            Some("hmm")
        );
    }

    #[test]
    fn overlay_and_outcome() {
        let base = Behavior::error(ErrorKind::Overloaded).with_latency(Duration::from_millis(3));
        let top = Behavior::ok();
        let b = base.overlay(&top);
        assert_eq!(b.latency, Some(Duration::from_millis(3)));
        assert_eq!(b.failure(Dialect::Anthropic), None);
        assert_eq!(
            base.failure(Dialect::Anthropic),
            Some((ErrorKind::Overloaded, 529))
        );
        let spend400 = Behavior::error(ErrorKind::SpendLimit).with_status(400);
        assert_eq!(
            spend400.failure(Dialect::Anthropic),
            Some((ErrorKind::SpendLimit, 400))
        );
        assert_eq!(
            Behavior::status(502).failure(Dialect::OpenAi),
            Some((ErrorKind::BadGateway, 502))
        );
    }
}
