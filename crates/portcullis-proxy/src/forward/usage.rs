//! What an answer used (W5, B4): recorded once, at the end of the body or when it is
//! dropped before its end, priced with the model's price; and the home of the object a
//! successful answer created (P6).

use crate::homes::Homes;
use crate::resolve_pending::{Polls, answer_of};
use crate::telemetry::AttemptTrace;
use portcullis::core::homes::Home;
use portcullis_core::{Price, Usage, UsageRecorder};
use portcullis_dialects::{Operation, RequestFacts, UsageWatcher};
use std::sync::Arc;

/// What an answer the provider reported no usage in is recorded at.
#[derive(Clone, Copy, Debug)]
pub(super) enum Unreported {
    /// Unknown: pending reconciliation (B4).
    Unknown,
    /// Free whatever happened (token counting): nothing to reconcile.
    Free,
    /// The gateway's own estimate at the end of a successful answer: embeddings, whose
    /// only tokens are the input (Gemini's embeddings report no usage).
    Estimate(Usage),
    /// A job the provider runs after answering (a video): its result, not its creation,
    /// decides its cost, so the answer leaves it pending at its hold with the job's
    /// object to ask about (B7).
    Job,
}

impl Unreported {
    pub(super) fn of(facts: &RequestFacts) -> Self {
        match facts.operation {
            // A request about an object is free, whatever usage its answer shows (a
            // retrieved response repeats the usage it was billed for).
            Operation::CountTokens | Operation::Object => Unreported::Free,
            // A video job is billed by its result (B7): created, it holds its price
            // pending until its end is known.
            Operation::Video => Unreported::Job,
            Operation::Embed => Unreported::Estimate(Usage {
                input_tokens: facts.input_tokens,
                ..Usage::default()
            }),
            _ => Unreported::Unknown,
        }
    }
}

/// What the gateway knows of a request it sent, for charging a cut stream (B7).
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    /// The input estimate ([`RequestFacts::input_tokens`]).
    pub(super) input_tokens: u64,
    /// The most output it may produce ([`RequestFacts::output_upper_bound`]).
    pub(super) most_output: u64,
}

impl Sent {
    pub(super) fn of(facts: &RequestFacts) -> Self {
        Sent {
            input_tokens: facts.input_tokens,
            most_output: facts.output_upper_bound(),
        }
    }
}

/// Watches one answer for its usage and records it once.
pub(super) struct Watch {
    /// `None` for a provider error answer.
    pub(super) watcher: Option<UsageWatcher>,
    pub(super) unreported: Unreported,
    /// Where to remember the object the answer creates, and its home (P6).
    pub(super) home: Option<(Arc<Homes>, Home)>,
    pub(super) recorder: UsageRecorder,
    pub(super) price: Price,
    /// The request's input estimate and the most output it may produce: what a stream
    /// cut after its content went out is charged from (B7).
    pub(super) sent: Sent,
    pub(super) done: bool,
    /// The attempt's span attributes (time to first chunk, tokens), when traced.
    pub(super) trace: Option<AttemptTrace>,
    /// Where the provider keeps the object the answer names, under the channel's base
    /// URL (`/v1/responses`, `/v1/chat/completions`): an OpenAI channel's generation,
    /// which can be asked for later if its outcome stays unknown (B7).
    pub(super) retrieval: Option<&'static str>,
}

/// Where an OpenAI channel keeps the object a generation request or a video job sent to
/// `path` creates, and can be asked for it (B7): `/v1/responses/{id}`,
/// `/v1/chat/completions/{id}`, `/v1/videos/{id}`.
pub(super) fn retrieval_of(path: &str) -> Option<&'static str> {
    ["/v1/responses", "/v1/chat/completions", "/v1/videos"]
        .into_iter()
        .find(|p| path == *p)
}

/// The object's path, if `id` is one a path may hold as it is.
fn object_path(prefix: &str, id: &str) -> Option<Arc<str>> {
    id.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        .then(|| Arc::from(format!("{prefix}/{id}")))
}

impl Watch {
    /// Records what is known once, at the end of the body or when it is dropped
    /// before its end (client gone, stream cut).
    pub(super) fn record(&mut self, at_end: bool) {
        if self.done {
            return;
        }
        self.done = true;
        if let (Some((homes, home)), Some(id)) = (
            self.home.take(),
            self.watcher.as_ref().and_then(UsageWatcher::object_id),
        ) {
            homes.remember(id, home);
        }
        // The object the answer named — often before any content (`response.created`,
        // the role chunk's `id`) — is what an unknown outcome is later resolved from.
        if let (Some(prefix), Some(id)) = (
            self.retrieval,
            self.watcher.as_ref().and_then(UsageWatcher::object_id),
        ) {
            if let Some(path) = object_path(prefix, id) {
                self.recorder.set_provider_object(Some(path));
            }
        }
        if let Unreported::Free = self.unreported {
            self.recorder.record(Usage {
                cost: Some(0),
                ..Usage::default()
            });
            return;
        }
        let Some(w) = self.watcher.as_mut() else {
            if at_end {
                self.recorder.record(Usage {
                    cost: Some(0),
                    ..Usage::default()
                });
            } else {
                self.recorder.mark_unknown();
            }
            return;
        };
        let priced = |mut u: Usage| {
            u.cost = Some(self.price.cost(&u));
            u
        };
        // Cut — by the client, or by the upstream before its end marker — after content
        // went out: charged what the gateway saw streamed (B7).
        let streamed = |w: &UsageWatcher| {
            (w.saw_content() && !w.saw_end())
                .then(|| w.streamed_usage(self.sent.input_tokens, self.sent.most_output))
        };
        let seen = match (at_end, at_end.then(|| w.finish()).flatten()) {
            (true, Some(u)) => {
                self.recorder.record(priced(u));
                Some(u)
            }
            (_, None) if let Some(u) = streamed(w) => {
                let u = priced(u);
                self.recorder.record_streamed(u);
                Some(u)
            }
            // Ended, but the provider reported no usage: the gateway's estimate where
            // the operation has one, else the cost is unknown (a job's until its end).
            (true, None) => match self.unreported {
                Unreported::Estimate(u) => {
                    self.recorder.record(priced(u));
                    Some(u)
                }
                _ => {
                    self.recorder.mark_unknown();
                    None
                }
            },
            (false, _) => match w.usage_so_far() {
                Some(u) => {
                    self.recorder.record_partial(priced(u));
                    Some(u)
                }
                None => {
                    self.recorder.mark_unknown();
                    None
                }
            },
        };
        if let (Some(t), Some(u)) = (self.trace.as_mut(), seen) {
            t.usage(&u);
        }
    }
}

/// Most bytes of a job poll's answer read for its status: a job object is small; a
/// larger answer is passed on unread.
const MOST_POLL_BYTES: usize = 64 << 10;

/// A client's poll of a video job through the gateway (`GET /v1/videos/{id}`),
/// answered by the job's channel: its answer is read at its end, and a final status
/// (`completed`, `failed`, `cancelled`) goes to the resolver, which closes the job's
/// pending attempt at once (B7).
pub(super) struct JobPoll {
    object: String,
    channel: Arc<str>,
    polls: Arc<Polls>,
    read: Vec<u8>,
    done: bool,
}

impl JobPoll {
    /// The poll of a request `method path` answered `status` by `channel`, if it is a
    /// job's and a resolver takes what polls see.
    pub(super) fn of(
        polls: &Arc<Polls>,
        method: &http::Method,
        path: &str,
        status: http::StatusCode,
        channel: &Arc<str>,
    ) -> Option<Box<Self>> {
        let id = portcullis_dialects::request::object_path(path)?;
        let object = format!("/v1/videos/{id}");
        (polls.wanted()
            && method == http::Method::GET
            && status == http::StatusCode::OK
            && path == object)
            .then(|| {
                Box::new(JobPoll {
                    object,
                    channel: channel.clone(),
                    polls: polls.clone(),
                    read: Vec::new(),
                    done: false,
                })
            })
    }

    /// A piece of the answer.
    pub(super) fn push(&mut self, d: &[u8]) {
        if self.done {
            return;
        }
        if self.read.len() + d.len() > MOST_POLL_BYTES {
            self.done = true;
            self.read = Vec::new();
            return;
        }
        self.read.extend_from_slice(d);
    }

    /// The answer's end: what it says goes to the resolver.
    pub(super) fn finish(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let asked = answer_of(200, &self.read);
        self.polls.saw(
            std::mem::take(&mut self.object),
            self.channel.clone(),
            asked,
        );
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A body dropped before its end (client gone, stream cut): what was seen.
        self.record(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b7_only_openai_generation_paths_keep_the_object_and_only_plain_ids() {
        assert_eq!(retrieval_of("/v1/responses"), Some("/v1/responses"));
        assert_eq!(
            retrieval_of("/v1/chat/completions"),
            Some("/v1/chat/completions")
        );
        assert_eq!(retrieval_of("/v1/videos"), Some("/v1/videos"));
        assert_eq!(retrieval_of("/v1/embeddings"), None);
        assert_eq!(retrieval_of("/v1/responses/resp_1/cancel"), None);
        assert_eq!(
            object_path("/v1/responses", "resp_1-a.b").as_deref(),
            Some("/v1/responses/resp_1-a.b")
        );
        assert_eq!(object_path("/v1/responses", "../admin"), None);
        assert_eq!(
            object_path("/v1/videos", "video_1").as_deref(),
            Some("/v1/videos/video_1")
        );
        assert_eq!(object_path("/v1/responses", "a?b"), None);
    }

    #[test]
    fn b7_only_a_jobs_own_get_answered_200_is_read_as_a_poll() {
        let polls = Arc::new(Polls::default());
        let ch: Arc<str> = Arc::from("one");
        let ok = http::StatusCode::OK;
        let get = http::Method::GET;
        // No resolver: nothing is read.
        assert!(JobPoll::of(&polls, &get, "/v1/videos/video_1", ok, &ch).is_none());
        polls.start_for_tests();
        let p = JobPoll::of(&polls, &get, "/v1/videos/video_1", ok, &ch).expect("a poll");
        assert_eq!(p.object, "/v1/videos/video_1");
        for (method, path, status) in [
            (http::Method::DELETE, "/v1/videos/video_1", ok),
            (get.clone(), "/v1/videos/video_1/content", ok),
            (
                get.clone(),
                "/v1/videos/video_1",
                http::StatusCode::NOT_FOUND,
            ),
            (get.clone(), "/v1/responses/resp_1", ok),
            (get.clone(), "/v1/videos", ok),
        ] {
            assert!(
                JobPoll::of(&polls, &method, path, status, &ch).is_none(),
                "{method} {path} {status}"
            );
        }
    }
}
