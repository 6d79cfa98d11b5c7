//! Successful answers of the routes beyond chat: the OpenAI Responses API (whole and
//! streamed), embeddings (OpenAI and Gemini), token counting (Anthropic and Gemini),
//! images and video jobs.
//!
//! Built with `format!` over pre-escaped pieces, as in [`render`](crate::render).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;

use crate::behavior::ErrorKind;
use crate::body::End;
use crate::errors::{Ctx, responses_stream_error};
use crate::render::{Framer, StreamPlan, full_text, js, run};
use crate::request::{Call, Parsed, Usage, chunk_text};
use crate::stats::Route;
use crate::time::unix_secs;

/// An id minted by fake instance `instance` for call `seq`:
/// `{prefix}_fake_i{instance}_{seq:08}` (e.g. `resp_fake_i3_00000012`).
pub(crate) fn minted_id(prefix: &str, instance: u64, seq: u64) -> String {
    format!("{prefix}_fake_i{instance}_{seq:08}")
}

/// The mark every id minted by fake instance `instance` contains.
pub(crate) fn instance_mark(instance: u64) -> String {
    format!("_fake_i{instance}_")
}

/// A 1×1 transparent PNG, base64: the image of every images answer.
pub(crate) const TINY_PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The bytes of every video's content: an MP4 `ftyp` box, a `free` box naming the fake
/// and an empty `mdat` box.
pub(crate) const TINY_MP4: &[u8] = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2\
\x00\x00\x00\x20freeportcullis-fake-upstream\x00\x00\x00\x08mdat";

/// The non-streamed answer of a route other than the four chat routes: its content
/// type and body.
pub(crate) fn answer(
    route: Route,
    ctx: &Ctx<'_>,
    seq: u64,
    u: &Usage,
    p: &Parsed,
) -> (&'static str, Bytes) {
    const JSON: &str = "application/json";
    let created = unix_secs(ctx.now);
    let model = js(ctx.model);
    let id_of = |call: &Call| match call {
        Call::Resource { id } => js(id),
        _ => "\"\"".to_owned(),
    };
    let body = match (route, &p.call) {
        (Route::Responses, _) | (Route::ResponseRetrieve, _) => {
            let id = match &p.call {
                Call::Resource { id } => id.clone(),
                _ => minted_id("resp", ctx.instance, seq),
            };
            let item = minted_id("msg", ctx.instance, seq);
            let status = status_of(u);
            let output = format!(
                "[{}]",
                message_item(&item, status, Some(&js(&full_text(u.chunks))))
            );
            response_object(
                &js(&id),
                created,
                &model,
                status,
                &output,
                &responses_usage(u),
                p.max_tokens,
                u.truncated,
            )
        }
        (Route::ResponseCancel, call) => response_object(
            &id_of(call),
            created,
            &model,
            "cancelled",
            "[]",
            "null",
            None,
            false,
        ),
        (Route::ResponseDelete, call) => format!(
            r#"{{"id":{},"object":"response","deleted":true}}"#,
            id_of(call)
        ),
        (Route::ResponseInputItems, _) => {
            r#"{"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false}"#
                .to_owned()
        }
        (Route::Embeddings, Call::Embed { inputs, base64 }) => {
            let mut s = String::from(r#"{"object":"list","data":["#);
            for (i, (seed, dims)) in inputs.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(s, r#"{{"object":"embedding","index":{i},"embedding":"#);
                if *base64 {
                    s.push('"');
                    base64_f32s(&embedding(*seed, *dims), &mut s);
                    s.push('"');
                } else {
                    float_array(&embedding(*seed, *dims), &mut s);
                }
                s.push('}');
            }
            let _ = write!(
                s,
                r#"],"model":{model},"usage":{{"prompt_tokens":{p},"total_tokens":{p}}}}}"#,
                p = u.prompt
            );
            s
        }
        (Route::EmbedContent, Call::Embed { inputs, .. }) => {
            let mut s = String::from(r#"{"embedding":{"values":"#);
            if let Some((seed, dims)) = inputs.first() {
                float_array(&embedding(*seed, *dims), &mut s);
            } else {
                s.push_str("[]");
            }
            s.push_str("}}");
            s
        }
        (Route::BatchEmbedContents, Call::Embed { inputs, .. }) => {
            let mut s = String::from(r#"{"embeddings":["#);
            for (i, (seed, dims)) in inputs.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(r#"{"values":"#);
                float_array(&embedding(*seed, *dims), &mut s);
                s.push('}');
            }
            s.push_str("]}");
            s
        }
        (Route::MessagesCountTokens, _) => format!(r#"{{"input_tokens":{}}}"#, u.prompt),
        (Route::CountTokens, _) => format!(
            r#"{{"totalTokens":{p},"promptTokensDetails":[{{"modality":"TEXT","tokenCount":{p}}}]}}"#,
            p = u.prompt
        ),
        (Route::ImageGenerations | Route::ImageEdits, Call::Images { n, size }) => {
            let mut s = format!(r#"{{"created":{created},"data":["#);
            for i in 0..*n {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(s, r#"{{"b64_json":"{TINY_PNG_B64}"}}"#);
            }
            let _ = write!(s, r#"],"output_format":"png","size":{}"#, js(size));
            // DALL·E answers carry no usage; gpt-image models report tokens.
            if !ctx.model.starts_with("dall-e") {
                let out = u.output.saturating_mul(*n);
                let _ = write!(
                    s,
                    r#","usage":{{"input_tokens":{p},"output_tokens":{out},"total_tokens":{t},"input_tokens_details":{{"text_tokens":{p},"image_tokens":0}}}}"#,
                    p = u.prompt,
                    t = u.prompt.saturating_add(out),
                );
            }
            s.push('}');
            s
        }
        (Route::VideoCreate, Call::Video { seconds, size }) => format!(
            r#"{{"id":"{id}","object":"video","created_at":{created},"status":"queued","model":{model},"progress":0,"seconds":{seconds},"size":{size},"quality":"standard"}}"#,
            id = minted_id("video", ctx.instance, seq),
            seconds = js(seconds),
            size = js(size),
        ),
        // A known job's content (the server answers the others: a 404).
        (Route::VideoContent, _) => return ("video/mp4", Bytes::from_static(TINY_MP4)),
        (Route::VideoDelete, call) => format!(
            r#"{{"id":{},"object":"video","deleted":true}}"#,
            id_of(call)
        ),
        // Not reached: the server sends only the routes above here, each with its call.
        _ => "{}".to_owned(),
    };
    (JSON, Bytes::from(body))
}

/// A response created by call `seq` as a retrieval answers it, stored when it is
/// planned: its id, the whole object, and the object while it is still `in_progress`.
pub(crate) fn stored_response(
    ctx: &Ctx<'_>,
    seq: u64,
    u: &Usage,
    max_output_tokens: Option<u64>,
) -> (String, String, String) {
    let id = minted_id("resp", ctx.instance, seq);
    let (created, model) = (unix_secs(ctx.now), js(ctx.model));
    let item = minted_id("msg", ctx.instance, seq);
    let status = status_of(u);
    let output = format!(
        "[{}]",
        message_item(&item, status, Some(&js(&full_text(u.chunks))))
    );
    let done = response_object(
        &js(&id),
        created,
        &model,
        status,
        &output,
        &responses_usage(u),
        max_output_tokens,
        u.truncated,
    );
    let pending = response_object(
        &js(&id),
        created,
        &model,
        "in_progress",
        "[]",
        "null",
        max_output_tokens,
        false,
    );
    (id, done, pending)
}

/// A video job created by call `seq` as a retrieval answers it, stored at creation: its
/// id, the job at its end (`completed`, or `failed` when `fails`) and while it runs
/// (`in_progress`).
pub(crate) fn stored_video(
    ctx: &Ctx<'_>,
    seq: u64,
    p: &Parsed,
    fails: bool,
) -> (String, String, String) {
    let id = minted_id("video", ctx.instance, seq);
    let (created, model) = (unix_secs(ctx.now), js(ctx.model));
    let (seconds, size) = match &p.call {
        Call::Video { seconds, size } => (js(seconds), js(size)),
        _ => (js("4"), js("720x1280")),
    };
    let job = |status: &str, progress: u32, end: &str| {
        format!(
            r#"{{"id":"{id}","object":"video","created_at":{created},{end}"status":"{status}","model":{model},"progress":{progress},"seconds":{seconds},"size":{size},"quality":"standard""#
        )
    };
    let done = if fails {
        job("failed", 0, "")
            + r#","error":{"code":"video_generation_failed","message":"The video could not be generated."}}"#
    } else {
        job(
            "completed",
            100,
            &format!(
                r#""completed_at":{created},"expires_at":{},"#,
                created + 86_400
            ),
        ) + r#","error":null}"#
    };
    let running = job("in_progress", 50, "") + r#","error":null}"#;
    (id, done, running)
}

/// `completed`, or `incomplete` when the output was cut by `max_output_tokens`.
fn status_of(u: &Usage) -> &'static str {
    if u.truncated {
        "incomplete"
    } else {
        "completed"
    }
}

/// The Responses API usage object.
fn responses_usage(u: &Usage) -> String {
    format!(
        r#"{{"input_tokens":{p},"input_tokens_details":{{"cached_tokens":{c}}},"output_tokens":{o},"output_tokens_details":{{"reasoning_tokens":{r}}},"total_tokens":{t}}}"#,
        p = u.prompt,
        c = u.cached,
        o = u.output,
        r = u.reasoning,
        t = u.prompt + u.output,
    )
}

/// An output message item; `text` is a JSON string literal, `None` for no content yet.
fn message_item(id: &str, status: &str, text: Option<&str>) -> String {
    let content = text
        .map(|t| format!(r#"{{"type":"output_text","text":{t},"annotations":[]}}"#))
        .unwrap_or_default();
    format!(
        r#"{{"type":"message","id":"{id}","status":"{status}","role":"assistant","content":[{content}]}}"#
    )
}

/// A Responses API response object. `id` and `model` are JSON string literals,
/// `output` a JSON array and `usage` a JSON object or `null`.
#[allow(clippy::too_many_arguments)]
fn response_object(
    id: &str,
    created: u64,
    model: &str,
    status: &str,
    output: &str,
    usage: &str,
    max_output_tokens: Option<u64>,
    incomplete: bool,
) -> String {
    let incomplete_details = if incomplete {
        r#"{"reason":"max_output_tokens"}"#
    } else {
        "null"
    };
    let max = max_output_tokens.map_or("null".to_owned(), |m| m.to_string());
    format!(
        r#"{{"id":{id},"object":"response","created_at":{created},"status":"{status}","error":null,"incomplete_details":{incomplete_details},"instructions":null,"max_output_tokens":{max},"model":{model},"output":{output},"parallel_tool_calls":true,"previous_response_id":null,"store":true,"temperature":1.0,"text":{{"format":{{"type":"text"}}}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{usage},"metadata":{{}}}}"#
    )
}

/// The frames of a streamed Responses API answer, each with the delay before it, and
/// how it ends.
pub(crate) fn stream(
    ctx: &Ctx<'_>,
    seq: u64,
    u: &Usage,
    plan: &StreamPlan,
) -> (VecDeque<(Duration, Bytes)>, End) {
    run(
        &mut ResponsesFrames::new(ctx, seq, u, plan.max_tokens),
        plan,
    )
}

/// The frames of a streamed Responses API answer: `event: <type>` SSE events, each
/// with its `sequence_number`.
struct ResponsesFrames<'a> {
    ctx: &'a Ctx<'a>,
    u: &'a Usage,
    id: String,
    item: String,
    model: String,
    created: u64,
    max_output_tokens: Option<u64>,
    /// The next event's sequence number.
    next: u64,
}

impl<'a> ResponsesFrames<'a> {
    fn new(ctx: &'a Ctx<'a>, seq: u64, u: &'a Usage, max: Option<u64>) -> Self {
        ResponsesFrames {
            ctx,
            u,
            id: js(&minted_id("resp", ctx.instance, seq)),
            item: minted_id("msg", ctx.instance, seq),
            model: js(ctx.model),
            created: unix_secs(ctx.now),
            max_output_tokens: max,
            next: 0,
        }
    }

    /// One event; `fields` follow `type` and `sequence_number` (with a leading comma).
    fn event(&mut self, ty: &str, fields: &str) -> String {
        let n = self.next;
        self.next += 1;
        format!("event: {ty}\ndata: {{\"type\":\"{ty}\",\"sequence_number\":{n}{fields}}}\n\n")
    }

    fn response(&self, status: &str, output: &str, usage: &str, incomplete: bool) -> String {
        response_object(
            &self.id,
            self.created,
            &self.model,
            status,
            output,
            usage,
            self.max_output_tokens,
            incomplete,
        )
    }
}

impl Framer for ResponsesFrames<'_> {
    fn preamble(&mut self) -> Option<String> {
        let pending = self.response("in_progress", "[]", "null", false);
        let mut s = self.event("response.created", &format!(r#","response":{pending}"#));
        s += &self.event("response.in_progress", &format!(r#","response":{pending}"#));
        let item = message_item(&self.item, "in_progress", None);
        s += &self.event(
            "response.output_item.added",
            &format!(r#","output_index":0,"item":{item}"#),
        );
        let part = format!(
            r#","item_id":"{}","output_index":0,"content_index":0,"part":{{"type":"output_text","text":"","annotations":[]}}"#,
            self.item
        );
        s += &self.event("response.content_part.added", &part);
        Some(s)
    }

    fn content_len(&self, fail_after: Option<u32>) -> usize {
        fail_after.unwrap_or(self.u.chunks) as usize
    }

    fn content(&mut self, i: usize) -> String {
        let fields = format!(
            r#","item_id":"{}","output_index":0,"content_index":0,"delta":{},"logprobs":[]"#,
            self.item,
            js(chunk_text(i))
        );
        self.event("response.output_text.delta", &fields)
    }

    fn error(&mut self, kind: &ErrorKind, _status: u16) -> String {
        let n = self.next;
        self.next += 1;
        format!(
            "event: error\ndata: {}\n\n",
            responses_stream_error(self.ctx, kind, n)
        )
    }

    fn trailer(&mut self) -> String {
        let u = self.u;
        let text = js(&full_text(u.chunks));
        let status = status_of(u);
        let head = format!(
            r#","item_id":"{}","output_index":0,"content_index":0"#,
            self.item
        );
        let mut s = self.event(
            "response.output_text.done",
            &format!(r#"{head},"text":{text},"logprobs":[]"#),
        );
        s += &self.event(
            "response.content_part.done",
            &format!(r#"{head},"part":{{"type":"output_text","text":{text},"annotations":[]}}"#),
        );
        let item = message_item(&self.item, status, Some(&text));
        s += &self.event(
            "response.output_item.done",
            &format!(r#","output_index":0,"item":{item}"#),
        );
        let done = self.response(
            status,
            &format!("[{item}]"),
            &responses_usage(u),
            u.truncated,
        );
        let last = if u.truncated {
            "response.incomplete"
        } else {
            "response.completed"
        };
        s += &self.event(last, &format!(r#","response":{done}"#));
        s
    }
}

/// SplitMix64: the fake's deterministic number source.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The unit-length vector of an input: the same input always gets the same vector.
pub(crate) fn embedding(seed: u64, dims: u32) -> Vec<f32> {
    let mut v: Vec<f32> = (0..u64::from(dims))
        .map(|j| {
            let x = splitmix64(seed ^ j.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            // 24 random bits → [-1, 1).
            (x >> 40) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    } else if let Some(first) = v.first_mut() {
        *first = 1.0;
    }
    v
}

fn float_array(v: &[f32], out: &mut String) {
    out.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(x).unwrap_or_else(|_| "0.0".into()));
    }
    out.push(']');
}

/// Standard base64 (with padding) of the little-endian bytes of `v`.
fn base64_f32s(v: &[f32], out: &mut String) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64(&bytes, out);
}

/// Standard base64 with padding.
pub(crate) fn base64(bytes: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut s = String::new();
            base64(input.as_bytes(), &mut s);
            assert_eq!(s, want, "{input:?}");
        }
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let a = embedding(42, 8);
        assert_eq!(a, embedding(42, 8));
        assert_ne!(a, embedding(43, 8));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        assert!(a.iter().all(|x| (-1.0..=1.0).contains(x)));
    }

    #[test]
    fn tiny_mp4_boxes_add_up() {
        // Each box: a 4-byte big-endian size (header included), then its type. The
        // sizes must tile the file exactly: ftyp, free, mdat.
        let mut at = 0;
        let mut kinds = Vec::new();
        while at < TINY_MP4.len() {
            let size = u32::from_be_bytes(TINY_MP4[at..at + 4].try_into().unwrap()) as usize;
            assert!(size >= 8, "box at {at} has size {size}");
            kinds.push(&TINY_MP4[at + 4..at + 8]);
            at += size;
        }
        assert_eq!(at, TINY_MP4.len(), "the boxes overrun the file");
        assert_eq!(kinds, [&b"ftyp"[..], b"free", b"mdat"]);
    }
}
