//! The provider APIs beyond chat: the OpenAI Responses API, embeddings (OpenAI and
//! Gemini), token counting (Anthropic and Gemini), images and video jobs — their shapes,
//! usage, streams, injected errors, latency, rate-limit headers and call statistics.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use http::Method;
use portcullis_fake_upstream::{Behavior, ErrorKind, FakeUpstream, Route, expected_text};
use serde_json::{Value, json};

const RESPONSES: &str = "/v1/responses";
const EMBEDDINGS: &str = "/v1/embeddings";
const COUNT_TOKENS: &str = "/v1/messages/count_tokens";
const IMAGES: &str = "/v1/images/generations";
const IMAGE_EDITS: &str = "/v1/images/edits";
const VIDEOS: &str = "/v1/videos";

/// 40 bytes of input and 8 bytes of instructions → 12 prompt tokens.
fn responses_body(stream: bool) -> String {
    json!({"model":"gpt-4.1-mini","input":TEXT40,"instructions":"12345678","stream":stream})
        .to_string()
}

fn texts(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v}"))
        .to_owned()
}

/// Standard base64 (with padding) → bytes.
fn decode_b64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for quad in s.as_bytes().chunks(4) {
        let pad = quad.iter().filter(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in quad {
            n = (n << 6) | u32::from(if c == b'=' { 0 } else { val(c) });
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    out
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// A multipart/form-data body with text fields and one file part.
fn multipart(boundary: &str, fields: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (k, v) in fields {
        s.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
        ));
    }
    s.push_str(&format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"image[]\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n\u{1}PNG n=7 fake bytes\r\n--{boundary}--\r\n"
    ));
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_non_stream_shape_and_usage() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        RESPONSES,
        &[
            ("authorization", "Bearer sk-resp"),
            ("x-fake-output-tokens", "9"),
            ("x-fake-reasoning-tokens", "4"),
            ("x-fake-cached-tokens", "2"),
        ],
        &responses_body(false),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("x-request-id").unwrap().starts_with("req_"));
    let v = r.json();
    let id = texts(&v, "/id");
    assert!(id.starts_with("resp_fake"), "{id}");
    assert!(fake.made_id(&id));
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "gpt-4.1-mini");
    assert!(v["created_at"].as_u64().unwrap() > 1_700_000_000);
    let out = &v["output"][0];
    assert_eq!(out["type"], "message");
    assert!(texts(out, "/id").starts_with("msg_fake"));
    assert_eq!(out["status"], "completed");
    assert_eq!(out["role"], "assistant");
    assert_eq!(out["content"][0]["type"], "output_text");
    assert_eq!(out["content"][0]["text"], expected_text(4));
    assert_eq!(out["content"][0]["annotations"], json!([]));
    assert_eq!(
        v["usage"],
        json!({"input_tokens":12,"input_tokens_details":{"cached_tokens":2},
               "output_tokens":9,"output_tokens_details":{"reasoning_tokens":4},
               "total_tokens":21})
    );
    let s = fake.stats();
    assert_eq!(s.calls(Route::Responses), 1);
    assert_eq!(s.calls_for("sk-resp"), 1);
    assert_eq!((s.in_flight, s.completed), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_input_items_are_counted_like_chat_messages() {
    let fake = FakeUpstream::start().await;
    // 8 bytes of string content + 12 of input_text parts + 4 of instructions = 24 → 6.
    let body = json!({
        "model": "gpt-4o",
        "instructions": "1234",
        "input": [
            {"role": "user", "content": "12345678"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "1234"},
                {"type": "input_text", "text": "12345678"}
            ]}
        ]
    });
    let r = post(&fake, RESPONSES, &[], &body.to_string()).await;
    assert_eq!(r.json()["usage"]["input_tokens"], 6);
    // The same text as chat messages counts the same.
    let chat = json!({"model":"gpt-4o","messages":[
        {"role":"system","content":"1234"},
        {"role":"user","content":"12345678"},
        {"role":"user","content":[{"type":"text","text":"1234"},{"type":"text","text":"12345678"}]}
    ]});
    let r = post(&fake, OPENAI, &[], &chat.to_string()).await;
    assert_eq!(r.json()["usage"]["prompt_tokens"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_output_capped_by_max_output_tokens() {
    let fake = FakeUpstream::start().await;
    let body = json!({"model":"gpt-4o","input":"hi","max_output_tokens":3});
    let r = post(
        &fake,
        RESPONSES,
        &[("x-fake-reasoning-tokens", "10")],
        &body.to_string(),
    )
    .await;
    let v = r.json();
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(v["max_output_tokens"], 3);
    assert_eq!(v["usage"]["output_tokens"], 3);
    assert_eq!(
        v["usage"]["output_tokens_details"]["reasoning_tokens"], 3,
        "reasoning is part of the output"
    );
    assert_eq!(v["usage"]["input_tokens"], 1, "at least one prompt token");

    // Streamed, the last event is response.incomplete with the same usage.
    let body = json!({"model":"gpt-4o","input":"hi","max_output_tokens":3,"stream":true});
    let r = post(&fake, RESPONSES, &[], &body.to_string()).await;
    let events = parse_sse(&r.text());
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("response.incomplete"));
    assert_eq!(last.json()["response"]["usage"]["output_tokens"], 3);
    assert_eq!(last.json()["response"]["status"], "incomplete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_stream_ends_with_completed_usage() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        RESPONSES,
        &[("x-fake-chunks", "3"), ("x-fake-output-tokens", "7")],
        &responses_body(true),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = parse_sse(&r.text());
    let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, e) in events.iter().enumerate() {
        let v = e.json();
        assert_eq!(
            v["type"],
            e.event.as_deref().unwrap(),
            "event name = data.type"
        );
        assert_eq!(v["sequence_number"], i as u64, "sequence numbers count up");
    }
    let created = events[0].json();
    assert_eq!(created["response"]["status"], "in_progress");
    assert!(created["response"]["usage"].is_null());
    let id = texts(&created, "/response/id");
    assert!(fake.made_id(&id));
    let item_id = texts(&events[2].json(), "/item/id");
    let deltas: String = events[4..7]
        .iter()
        .map(|e| {
            let v = e.json();
            assert_eq!(v["item_id"], item_id.as_str());
            assert_eq!(
                (v["output_index"].as_u64(), v["content_index"].as_u64()),
                (Some(0), Some(0))
            );
            texts(&v, "/delta")
        })
        .collect();
    assert_eq!(deltas, expected_text(3));
    assert_eq!(events[7].json()["text"], expected_text(3));
    assert_eq!(events[8].json()["part"]["text"], expected_text(3));
    assert_eq!(events[9].json()["item"]["status"], "completed");
    let done = events[10].json();
    let resp = &done["response"];
    assert_eq!(resp["id"], id.as_str());
    assert_eq!(resp["status"], "completed");
    assert_eq!(resp["output"][0]["content"][0]["text"], expected_text(3));
    assert_eq!(resp["usage"]["input_tokens"], 12);
    assert_eq!(resp["usage"]["output_tokens"], 7);
    assert_eq!(resp["usage"]["total_tokens"], 19);
    assert_eq!(resp["usage"]["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(
        resp["usage"]["output_tokens_details"]["reasoning_tokens"],
        0
    );
    let s = fake.stats();
    assert_eq!(s.calls(Route::Responses), 1);
    assert_eq!((s.in_flight, s.completed), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_mid_stream_failure_ends_with_error_event_or_cut() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        RESPONSES,
        &[("x-fake-fail-after-chunks", "2"), ("x-fake-chunks", "5")],
        &responses_body(true),
    )
    .await;
    assert_eq!(r.status, 200, "the head was already committed");
    let events = parse_sse(&r.text());
    assert_eq!(events.len(), 4 + 2 + 1, "preamble, 2 deltas, error");
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    let e = last.json();
    assert_eq!(e["type"], "error");
    assert_eq!(e["code"], "server_error");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("The server had an error")
    );
    assert_eq!(e["sequence_number"], 6);
    assert!(!r.text().contains("response.completed"));

    // The injected error names the code.
    let r = post(
        &fake,
        RESPONSES,
        &[
            ("x-fake-fail-after-chunks", "0"),
            ("x-fake-error", "rate_limit_exceeded"),
        ],
        &responses_body(true),
    )
    .await;
    let events = parse_sse(&r.text());
    assert_eq!(events.len(), 5);
    assert_eq!(events[4].json()["code"], "rate_limit_exceeded");

    // With a cut, the connection drops after the deltas: no error event, no completion.
    let (res, _g) = open(
        &fake,
        Method::POST,
        RESPONSES,
        &[("x-fake-fail-after-chunks", "2"), ("x-fake-cut", "true")],
        &responses_body(true),
    )
    .await;
    let mut body = res.into_body();
    let mut text = String::new();
    let mut ended_with_error = false;
    while let Some(f) = next_frame(&mut body, Duration::from_secs(2)).await {
        match f {
            Ok(b) => text.push_str(&String::from_utf8_lossy(&b)),
            Err(_) => {
                ended_with_error = true;
                break;
            }
        }
    }
    assert!(ended_with_error);
    assert_eq!(
        text.matches("event: response.output_text.delta\n").count(),
        2
    );
    assert!(!text.contains("event: error"));
    assert!(!text.contains("response.completed"));

    assert!(fake.wait_idle(Duration::from_secs(2)).await);
    let s = fake.stats();
    assert_eq!((s.completed, s.cancelled), (3, 0));
    assert_eq!(s.calls(Route::Responses), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_stored_routes_answer_by_id() {
    let fake = FakeUpstream::start().await;
    let id = texts(
        &post(&fake, RESPONSES, &[], &responses_body(false))
            .await
            .json(),
        "/id",
    );

    // The stored response: the one created, its usage as created (the retrieval's own
    // `x-fake-*` usage headers change nothing).
    let r = send(
        &fake,
        Method::GET,
        &format!("/v1/responses/{id}"),
        &[("x-fake-output-tokens", "5")],
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["content"][0]["text"], expected_text(4));
    assert_eq!(v["usage"]["input_tokens"], 12);
    assert_eq!(v["usage"]["output_tokens"], 16);
    assert_eq!(v["usage"]["total_tokens"], 28);

    let r = send(
        &fake,
        Method::GET,
        &format!("/v1/responses/{id}/input_items"),
        &[],
        "",
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false})
    );

    let r = post(&fake, &format!("/v1/responses/{id}/cancel"), &[], "").await;
    let v = r.json();
    assert_eq!(
        (v["id"].as_str(), v["status"].as_str()),
        (Some(id.as_str()), Some("cancelled"))
    );
    assert_eq!(v["object"], "response");

    let r = send(
        &fake,
        Method::DELETE,
        &format!("/v1/responses/{id}"),
        &[],
        "",
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"id": id, "object": "response", "deleted": true})
    );

    // An unknown verb on a response is not a route.
    let r = send(&fake, Method::PUT, &format!("/v1/responses/{id}"), &[], "").await;
    assert_eq!(r.status, 404);

    let s = fake.stats();
    for route in [
        Route::Responses,
        Route::ResponseRetrieve,
        Route::ResponseInputItems,
        Route::ResponseCancel,
        Route::ResponseDelete,
        Route::Other,
    ] {
        assert_eq!(s.calls(route), 1, "{route:?}");
    }
    assert_eq!(s.total_calls, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_ids_tell_which_fake_made_them() {
    let a = FakeUpstream::start().await;
    let b = FakeUpstream::start().await;
    assert_ne!(a.instance_id(), b.instance_id());
    let id_a = texts(
        &post(&a, RESPONSES, &[], &responses_body(false))
            .await
            .json(),
        "/id",
    );
    let id_b = texts(
        &post(&b, RESPONSES, &[], &responses_body(false))
            .await
            .json(),
        "/id",
    );
    let id_a2 = texts(
        &post(&a, RESPONSES, &[], &responses_body(false))
            .await
            .json(),
        "/id",
    );
    assert_ne!(id_a, id_b);
    assert_ne!(id_a, id_a2, "ids differ per call");
    assert!(a.made_id(&id_a) && a.made_id(&id_a2) && !a.made_id(&id_b));
    assert!(b.made_id(&id_b) && !b.made_id(&id_a));
    let video = texts(
        &post(&b, VIDEOS, &[], r#"{"model":"sora-2","prompt":"a cat"}"#)
            .await
            .json(),
        "/id",
    );
    assert!(video.starts_with("video_fake"));
    assert!(b.made_id(&video) && !a.made_id(&video));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_report_prompt_tokens() {
    let fake = FakeUpstream::start().await;
    // 40 + 8 bytes → 12 tokens.
    let body = json!({"model":"text-embedding-3-small","input":[TEXT40,"12345678"]});
    let r = post(
        &fake,
        EMBEDDINGS,
        &[("authorization", "Bearer sk-emb")],
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "text-embedding-3-small");
    assert_eq!(v["usage"], json!({"prompt_tokens":12,"total_tokens":12}));
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i as u64);
        let e = floats(&d["embedding"]);
        assert_eq!(e.len(), 8, "8 dimensions by default");
        assert!((norm(&e) - 1.0).abs() < 1e-4, "unit length");
    }
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);

    // The same text gets the same vector; a single string is one input.
    let r = post(
        &fake,
        EMBEDDINGS,
        &[],
        &json!({"input":TEXT40,"dimensions":3}).to_string(),
    )
    .await;
    let v = r.json();
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert_eq!(v["model"], "text-embedding-3-small");
    assert_eq!(v["usage"]["prompt_tokens"], 10);
    let three = floats(&v["data"][0]["embedding"]);
    assert_eq!(three.len(), 3);
    let again = post(
        &fake,
        EMBEDDINGS,
        &[],
        &json!({"input":[TEXT40],"dimensions":3}).to_string(),
    )
    .await;
    assert_eq!(floats(&again.json()["data"][0]["embedding"]), three);

    // Token-id arrays count one token per id.
    let r = post(
        &fake,
        EMBEDDINGS,
        &[],
        &json!({"input":[[1,2,3,4,5],[6,7]]}).to_string(),
    )
    .await;
    let v = r.json();
    assert_eq!(v["usage"]["prompt_tokens"], 7);
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    let r = post(
        &fake,
        EMBEDDINGS,
        &[],
        &json!({"input":[1,2,3]}).to_string(),
    )
    .await;
    assert_eq!(r.json()["usage"]["prompt_tokens"], 3);
    assert_eq!(
        r.json()["data"].as_array().unwrap().len(),
        1,
        "one token array is one input"
    );

    // base64: the little-endian f32s of the float vector.
    let float = post(
        &fake,
        EMBEDDINGS,
        &[],
        &json!({"input":"hello","dimensions":5}).to_string(),
    )
    .await;
    let b64 = post(
        &fake,
        EMBEDDINGS,
        &[],
        &json!({"input":"hello","dimensions":5,"encoding_format":"base64"}).to_string(),
    )
    .await;
    let bytes = decode_b64(&texts(&b64.json(), "/data/0/embedding"));
    assert_eq!(bytes.len(), 5 * 4);
    let decoded: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(decoded, floats(&float.json()["data"][0]["embedding"]));
    assert_eq!(b64.json()["usage"]["prompt_tokens"], 1);

    let s = fake.stats();
    assert_eq!(s.calls(Route::Embeddings), 7);
    assert_eq!(s.calls_for("sk-emb"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_bad_input_is_a_400_in_openai_shape() {
    let fake = FakeUpstream::start().await;
    for body in [
        "{not json",
        r#"{"model":"text-embedding-3-small"}"#,
        r#"{"input":""}"#,
        r#"{"input":[]}"#,
        r#"{"input":[{"text":"x"}]}"#,
        r#"{"input":"x","dimensions":0}"#,
        r#"{"input":"x","encoding_format":"hex"}"#,
    ] {
        let r = post(&fake, EMBEDDINGS, &[], body).await;
        assert_eq!(r.status, 400, "{body}");
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{body}");
        assert!(!e["message"].as_str().unwrap().is_empty());
    }
    let r = post(&fake, EMBEDDINGS, &[], r#"{"model":"m"}"#).await;
    assert_eq!(
        r.json()["error"]["message"],
        "'input' is a required property"
    );
    assert_eq!(fake.stats().responses_with(400), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_embeddings_have_no_usage() {
    let fake = FakeUpstream::start().await;
    let one = json!({"model":"models/text-embedding-004","content":{"parts":[{"text":"hello"}]}});
    let r = post(
        &fake,
        "/v1beta/models/text-embedding-004:embedContent?key=AIza-e",
        &[],
        &one.to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let obj = v.as_object().unwrap();
    assert_eq!(
        obj.keys().collect::<Vec<_>>(),
        ["embedding"],
        "no usage, as Gemini"
    );
    let hello = floats(&v["embedding"]["values"]);
    assert_eq!(hello.len(), 8);
    assert!((norm(&hello) - 1.0).abs() < 1e-4);

    let batch = json!({"requests":[
        {"model":"models/text-embedding-004","content":{"parts":[{"text":"hello"}]}},
        {"model":"models/text-embedding-004","content":{"parts":[{"text":"world"}]},"outputDimensionality":4},
        {"model":"models/text-embedding-004","content":{"parts":[{"text":"again"}]}}
    ]});
    let r = post(
        &fake,
        "/v1beta/models/text-embedding-004:batchEmbedContents",
        &[("x-goog-api-key", "AIza-e")],
        &batch.to_string(),
    )
    .await;
    let v = r.json();
    assert_eq!(v.as_object().unwrap().len(), 1, "only embeddings: {v}");
    let e = v["embeddings"].as_array().unwrap();
    assert_eq!(e.len(), 3);
    assert_eq!(floats(&e[0]["values"]), hello, "same text, same vector");
    assert_eq!(floats(&e[1]["values"]).len(), 4);
    assert_ne!(e[0]["values"], e[2]["values"]);

    let r = post(
        &fake,
        "/v1beta/models/text-embedding-004:embedContent",
        &[],
        "{}",
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT");
    let r = post(
        &fake,
        "/v1beta/models/text-embedding-004:batchEmbedContents",
        &[],
        r#"{"requests":[]}"#,
    )
    .await;
    assert_eq!(r.json()["error"]["code"], 400);

    let s = fake.stats();
    assert_eq!(s.calls(Route::EmbedContent), 2);
    assert_eq!(s.calls(Route::BatchEmbedContents), 2);
    assert_eq!(s.calls_for("AIza-e"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_methods_served_under_v1_and_v1beta() {
    let fake = FakeUpstream::start().await;
    let embed = json!({"content":{"parts":[{"text":TEXT40}]}}).to_string();
    let batch = json!({"requests":[{"content":{"parts":[{"text":TEXT40}]}}]}).to_string();
    let cases: [(&str, String, Route); 5] = [
        ("generateContent", gemini_body(), Route::GenerateContent),
        (
            "streamGenerateContent?alt=sse",
            gemini_body(),
            Route::StreamGenerateContent,
        ),
        ("embedContent", embed, Route::EmbedContent),
        ("batchEmbedContents", batch, Route::BatchEmbedContents),
        ("countTokens", gemini_body(), Route::CountTokens),
    ];
    for (verb, body, route) in &cases {
        let mut answers = Vec::new();
        for version in ["v1beta", "v1"] {
            let path = format!("/{version}/models/gemini-2.0-flash:{verb}");
            let r = post(&fake, &path, &[], body).await;
            assert_eq!(r.status, 200, "{path}");
            answers.push(r.text());
        }
        match route {
            Route::StreamGenerateContent => {
                for a in &answers {
                    let ev = parse_sse(a);
                    assert_eq!(
                        ev.last().unwrap().json()["usageMetadata"]["promptTokenCount"],
                        10
                    );
                }
            }
            Route::GenerateContent => {
                for a in &answers {
                    let v: Value = serde_json::from_str(a).unwrap();
                    assert_eq!(v["usageMetadata"]["promptTokenCount"], 10);
                    assert_eq!(v["modelVersion"], "gemini-2.0-flash");
                }
            }
            // Deterministic answers: both versions give the same body.
            _ => assert_eq!(answers[0], answers[1], "{verb}"),
        }
        assert_eq!(fake.stats().calls(*route), 2, "{route:?}");
    }
    // An unknown method is no route under either version.
    for version in ["v1beta", "v1"] {
        let r = post(
            &fake,
            &format!("/{version}/models/gemini-2.0-flash:fly"),
            &[],
            "{}",
        )
        .await;
        assert_eq!(r.status, 404);
    }
    assert_eq!(fake.stats().calls(Route::Other), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_answers_input_tokens() {
    let fake = FakeUpstream::start().await;
    // Same body as messages, no max_tokens: the prompt the messages call would report.
    let body = json!({"model":"claude-sonnet-4-5","system":"12345678",
        "messages":[{"role":"user","content":[{"type":"text","text":TEXT40}]}]});
    let r = post(
        &fake,
        COUNT_TOKENS,
        &[
            ("x-api-key", "sk-ant-c"),
            ("anthropic-version", "2023-06-01"),
        ],
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.header("request-id").unwrap().starts_with("req_"));
    assert_eq!(r.json(), json!({"input_tokens": 12}));
    let r = post(&fake, ANTHROPIC, &[], &anthropic_body(false)).await;
    assert_eq!(r.json()["usage"]["input_tokens"], 10);
    let r = post(&fake, COUNT_TOKENS, &[], &anthropic_body(false)).await;
    assert_eq!(
        r.json()["input_tokens"],
        10,
        "count_tokens agrees with messages"
    );
    let r = post(
        &fake,
        COUNT_TOKENS,
        &[("x-fake-input-tokens", "321")],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(r.json()["input_tokens"], 321);
    let r = post(&fake, COUNT_TOKENS, &[], "{oops").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");

    let r = post(
        &fake,
        "/v1beta/models/gemini-2.5-pro:countTokens",
        &[],
        &gemini_body(),
    )
    .await;
    let v = r.json();
    assert_eq!(v["totalTokens"], 10);
    assert_eq!(v["promptTokensDetails"][0]["tokenCount"], 10);
    // The generateContentRequest form counts the same text.
    let wrapped = json!({"generateContentRequest":{"model":"models/gemini-2.5-pro",
        "contents":[{"role":"user","parts":[{"text":TEXT40}]}]}});
    let r = post(
        &fake,
        "/v1beta/models/gemini-2.5-pro:countTokens",
        &[],
        &wrapped.to_string(),
    )
    .await;
    assert_eq!(r.json()["totalTokens"], 10);

    let s = fake.stats();
    assert_eq!(s.calls(Route::MessagesCountTokens), 4);
    assert_eq!(s.calls(Route::CountTokens), 2);
    assert_eq!(s.calls(Route::Messages), 1);
    assert_eq!(s.calls_for("sk-ant-c"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_return_n_items() {
    let fake = FakeUpstream::start().await;
    // 40 bytes of prompt → 10 input tokens; 3 images × 16 output tokens.
    let body = json!({"model":"gpt-image-1","prompt":TEXT40,"n":3,"size":"1024x1024"});
    let r = post(&fake, IMAGES, &[], &body.to_string()).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for d in data {
        let png = decode_b64(d["b64_json"].as_str().unwrap());
        assert_eq!(&png[1..4], b"PNG", "a real (tiny) PNG");
    }
    assert_eq!(v["size"], "1024x1024");
    assert_eq!(
        v["usage"],
        json!({"input_tokens":10,"output_tokens":48,"total_tokens":58,
               "input_tokens_details":{"text_tokens":10,"image_tokens":0}})
    );

    // n defaults to 1; DALL·E answers carry no usage.
    let r = post(
        &fake,
        IMAGES,
        &[],
        r#"{"model":"dall-e-3","prompt":"a fox"}"#,
    )
    .await;
    let v = r.json();
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert!(v.get("usage").is_none());

    // Edits: multipart/form-data, n read from the form.
    let boundary = "----fakeboundary7MA4YWxk";
    let form = multipart(
        boundary,
        &[("model", "gpt-image-1"), ("prompt", TEXT40), ("n", "2")],
    );
    let ct = format!("multipart/form-data; boundary={boundary}");
    let r = post(
        &fake,
        IMAGE_EDITS,
        &[("content-type", &ct), ("x-fake-output-tokens", "100")],
        &form,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["usage"]["input_tokens"], 10);
    assert_eq!(v["usage"]["output_tokens"], 200);

    // Without n in the form: one image.
    let form = multipart(boundary, &[("prompt", "edit it")]);
    let r = post(&fake, IMAGE_EDITS, &[("content-type", &ct)], &form).await;
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 1);

    for bad in [
        r#"{"prompt":"x","n":11}"#,
        r#"{"prompt":"x","n":0}"#,
        r#"{"n":1}"#,
    ] {
        let r = post(&fake, IMAGES, &[], bad).await;
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    }

    let s = fake.stats();
    assert_eq!(s.calls(Route::ImageGenerations), 5);
    assert_eq!(s.calls(Route::ImageEdits), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn video_job_lifecycle() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        VIDEOS,
        &[("authorization", "Bearer sk-vid")],
        r#"{"model":"sora-2","prompt":"a calm sea","seconds":"8","size":"1280x720"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let id = texts(&v, "/id");
    assert!(id.starts_with("video_fake") && fake.made_id(&id));
    assert_eq!(v["object"], "video");
    assert_eq!(v["status"], "queued");
    assert_eq!(v["model"], "sora-2");
    assert_eq!(v["progress"], 0);
    assert_eq!(
        (v["seconds"].as_str(), v["size"].as_str()),
        (Some("8"), Some("1280x720"))
    );
    assert!(v["created_at"].as_u64().unwrap() > 1_700_000_000);

    let r = send(
        &fake,
        Method::GET,
        &format!("/v1/videos/{id}"),
        &[("authorization", "Bearer sk-vid")],
        "",
    )
    .await;
    let v = r.json();
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["status"], "completed");
    assert_eq!(v["progress"], 100);

    let r = send(
        &fake,
        Method::GET,
        &format!("/v1/videos/{id}/content"),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("video/mp4"));
    let bytes = r.body.unwrap();
    assert_eq!(&bytes[4..8], b"ftyp");
    assert_eq!(
        r.headers.get("content-length").unwrap(),
        &bytes.len().to_string()
    );

    let r = send(&fake, Method::DELETE, &format!("/v1/videos/{id}"), &[], "").await;
    assert_eq!(
        r.json(),
        json!({"id": id, "object": "video", "deleted": true})
    );

    let r = post(&fake, VIDEOS, &[], r#"{"model":"sora-2"}"#).await;
    assert_eq!(r.status, 400, "a prompt is required");

    let s = fake.stats();
    assert_eq!(s.calls(Route::VideoCreate), 2);
    assert_eq!(s.calls(Route::VideoRetrieve), 1);
    assert_eq!(s.calls(Route::VideoContent), 1);
    assert_eq!(s.calls(Route::VideoDelete), 1);
    assert_eq!(s.calls_for("sk-vid"), 2);
    assert_eq!((s.in_flight, s.completed), (0, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_error_applies_to_embeddings() {
    let fake = FakeUpstream::start().await;
    let body = json!({"input":"hello"}).to_string();
    // By header: OpenAI's rate-limit body and headers.
    let r = post(
        &fake,
        EMBEDDINGS,
        &[("x-fake-error", "rate_limit_exceeded")],
        &body,
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert!(r.header("x-request-id").is_some());

    // By script: consumed by the embeddings call, then success.
    fake.push_script(Behavior::error(ErrorKind::Overloaded));
    let r = post(&fake, EMBEDDINGS, &[], &body).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_is_overloaded");
    assert_eq!(fake.scripts_remaining(), 0);
    assert_eq!(post(&fake, EMBEDDINGS, &[], &body).await.status, 200);

    // Gemini and Anthropic routes answer in their own formats.
    fake.push_script(Behavior::error(ErrorKind::Overloaded));
    let r = post(
        &fake,
        "/v1/models/text-embedding-004:embedContent",
        &[],
        &json!({"content":{"parts":[{"text":"x"}]}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["status"], "UNAVAILABLE");
    fake.push_script(Behavior::error(ErrorKind::Overloaded));
    let r = post(&fake, COUNT_TOKENS, &[], &anthropic_body(false)).await;
    assert_eq!(r.status, 529);
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert!(r.header("request-id").is_some());

    // Per-credential default: a 500 for one key only.
    fake.set_default_for("sk-bad", Behavior::status(500));
    let r = post(
        &fake,
        IMAGES,
        &[("authorization", "Bearer sk-bad")],
        r#"{"prompt":"x"}"#,
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["type"], "server_error");
    let r = post(
        &fake,
        IMAGES,
        &[("authorization", "Bearer sk-good")],
        r#"{"prompt":"x"}"#,
    )
    .await;
    assert_eq!(r.status, 200);

    let s = fake.stats();
    assert_eq!(s.responses_with(429), 1);
    assert_eq!(s.responses_with(503), 2);
    assert_eq!(s.responses_with(529), 1);
    assert_eq!(s.responses_with(500), 1);
    assert_eq!(s.calls(Route::Embeddings), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_errors_reach_every_new_post_route() {
    let fake = FakeUpstream::start().await;
    let form_ct = "multipart/form-data; boundary=b0undary";
    let form = multipart("b0undary", &[("prompt", "x")]);
    let cases: [(&str, &str, &str, u16); 10] = [
        (RESPONSES, "application/json", r#"{"input":"x"}"#, 503),
        (EMBEDDINGS, "application/json", r#"{"input":"x"}"#, 503),
        (
            "/v1beta/models/m:embedContent",
            "application/json",
            r#"{"content":{"parts":[]}}"#,
            503,
        ),
        (
            "/v1beta/models/m:batchEmbedContents",
            "application/json",
            r#"{"requests":[{"content":{}}]}"#,
            503,
        ),
        (COUNT_TOKENS, "application/json", "{}", 529),
        (
            "/v1beta/models/m:countTokens",
            "application/json",
            "{}",
            503,
        ),
        (IMAGES, "application/json", r#"{"prompt":"x"}"#, 503),
        (IMAGE_EDITS, form_ct, &form, 503),
        (VIDEOS, "application/json", r#"{"prompt":"x"}"#, 503),
        ("/v1/responses/resp_1/cancel", "application/json", "", 503),
    ];
    for (path, ct, body, status) in cases {
        let r = post(
            &fake,
            path,
            &[("content-type", ct), ("x-fake-error", "overloaded")],
            body,
        )
        .await;
        assert_eq!(r.status, status, "{path}");
        let v = r.json();
        assert!(v.get("error").is_some(), "{path}: {v}");
    }
    assert_eq!(
        fake.stats().responses_with(503) + fake.stats().responses_with(529),
        10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_routes_use_defaults_but_not_scripts() {
    let fake = FakeUpstream::start().await;
    fake.push_script(Behavior::error(ErrorKind::RateLimit));
    // Polling a video or reading a response leaves the script for the next model call.
    // (An id the fake never made is not found.)
    assert_eq!(
        send(&fake, Method::GET, "/v1/videos/video_x", &[], "")
            .await
            .status,
        404
    );
    assert_eq!(
        send(&fake, Method::GET, "/v1/responses/resp_x", &[], "")
            .await
            .status,
        404
    );
    assert_eq!(fake.scripts_remaining(), 1);
    let r = post(&fake, VIDEOS, &[], r#"{"prompt":"x"}"#).await;
    assert_eq!(r.status, 429);
    assert_eq!(fake.scripts_remaining(), 0);

    // An instance default (the provider is down) and headers do apply.
    fake.set_default(Behavior::error(ErrorKind::ServerError));
    let r = send(&fake, Method::GET, "/v1/videos/video_x", &[], "").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["type"], "server_error");
    fake.clear_behaviors();
    let r = send(
        &fake,
        Method::DELETE,
        "/v1/responses/resp_x",
        &[("x-fake-status", "404")],
        "",
    )
    .await;
    assert_eq!(r.status, 404);
    // The list-models routes stay untouched by behaviours.
    fake.set_default(Behavior::error(ErrorKind::ServerError));
    assert_eq!(
        send(&fake, Method::GET, "/v1/models", &[], "").await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_and_rate_limit_headers_apply_to_new_routes() {
    let fake = FakeUpstream::start().await;
    let t = Instant::now();
    let r = post(
        &fake,
        EMBEDDINGS,
        &[
            ("x-fake-latency-ms", "120"),
            ("x-fake-ratelimit-limit-requests", "100"),
            ("x-fake-ratelimit-remaining-requests", "42"),
        ],
        r#"{"input":"x"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(120));
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("100"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("42"));

    let r = post(
        &fake,
        COUNT_TOKENS,
        &[("x-fake-ratelimit-remaining-tokens", "7")],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(r.header("anthropic-ratelimit-tokens-remaining"), Some("7"));

    // Responses stream: the head at once, the first delta after the TTFB. A TTFB of
    // 2 s: a head held for the TTFB would come after it, and a loaded host still opens
    // the connection and sends the head well within it (what this bounds: the head is
    // not held for the TTFB).
    let t = Instant::now();
    let (res, _g) = open(
        &fake,
        Method::POST,
        RESPONSES,
        &[("x-fake-ttfb-ms", "2000"), ("x-fake-chunks", "2")],
        &responses_body(true),
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_millis(2000),
        "{:?}",
        t.elapsed()
    );
    let mut body = res.into_body();
    let pre = next_frame(&mut body, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&pre).contains("response.created"));
    let first = next_frame(&mut body, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("response.output_text.delta"));
    assert!(t.elapsed() >= Duration::from_millis(2000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_is_exact_across_new_routes() {
    let fake = Arc::new(FakeUpstream::start().await);
    // Each call held for 2 s: the six overlap however late a loaded host sends them.
    fake.set_default(Behavior::new().with_latency(Duration::from_secs(2)));
    let calls: [(&str, &str); 6] = [
        (RESPONSES, r#"{"input":"x"}"#),
        (EMBEDDINGS, r#"{"input":"x"}"#),
        (
            "/v1beta/models/m:embedContent",
            r#"{"content":{"parts":[{"text":"x"}]}}"#,
        ),
        (COUNT_TOKENS, "{}"),
        (IMAGES, r#"{"prompt":"x"}"#),
        (VIDEOS, r#"{"prompt":"x"}"#),
    ];
    let mut tasks = Vec::new();
    for (path, body) in calls {
        let fake = fake.clone();
        tasks.push(tokio::spawn(async move {
            post(&fake, path, &[("authorization", "Bearer sk-par")], body)
                .await
                .status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let s = fake.stats();
    assert_eq!(s.max_in_flight, 6);
    assert_eq!(s.max_in_flight_for("sk-par"), 6);
    assert_eq!((s.in_flight, s.completed, s.cancelled), (0, 6, 0));
    assert_eq!(s.calls_per_route.len(), 6, "{:?}", s.calls_per_route);
}

/// B7: the fake keeps every response and chat completion it generated — a stream the
/// client abandoned included, as a provider finishes and stores it — and answers them by
/// id with their usage: a response `in_progress` until its stream would have ended, a
/// chat completion not found until then; an unknown id is a 404 in OpenAI's shape; a
/// deleted response is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_responses_and_chat_completions_are_stored_and_retrieved_by_id() {
    /// `body` with `"store": true`.
    fn stored(body: &str) -> String {
        let mut v: Value = serde_json::from_str(body).unwrap();
        v["store"] = true.into();
        v.to_string()
    }
    let fake = FakeUpstream::start().await;
    // A chat completion is kept only when its request asks for it, as OpenAI does.
    let unkept = post(&fake, OPENAI, &[], &openai_body(false, false))
        .await
        .json();
    let r = send(
        &fake,
        Method::GET,
        &format!("{OPENAI}/{}", texts(&unkept, "/id")),
        &[],
        "",
    )
    .await;
    assert_eq!(
        r.status, 404,
        "a chat completion without store: true is not kept"
    );
    let chat = post(
        &fake,
        OPENAI,
        &[("x-fake-output-tokens", "7")],
        &stored(&openai_body(false, false)),
    )
    .await
    .json();
    let chat_id = texts(&chat, "/id");
    let r = send(&fake, Method::GET, &format!("{OPENAI}/{chat_id}"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), chat, "the stored completion is the one answered");
    assert_eq!(r.json()["usage"]["completion_tokens"], 7);

    // A streamed response abandoned after `response.created`, its content 300 ms away.
    let (res, guard) = open(
        &fake,
        Method::POST,
        RESPONSES,
        &[
            ("x-fake-ttfb-ms", "300"),
            ("x-fake-chunks", "1"),
            ("x-fake-output-tokens", "9"),
        ],
        &responses_body(true),
    )
    .await;
    let mut body = res.into_body();
    let first = next_frame(&mut body, Duration::from_secs(2))
        .await
        .expect("the preamble")
        .expect("data");
    let first = String::from_utf8(first.to_vec()).unwrap();
    let created = parse_sse(&first)
        .into_iter()
        .find(|e| e.json()["type"] == "response.created")
        .expect("response.created");
    let id = texts(&created.json(), "/response/id");
    drop(body);
    drop(guard);
    let r = send(&fake, Method::GET, &format!("{RESPONSES}/{id}"), &[], "").await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(
        (v["status"].as_str(), &v["usage"]),
        (Some("in_progress"), &Value::Null)
    );
    // Finished (and stored) as if the client had stayed.
    let start = Instant::now();
    let done = loop {
        let v = send(&fake, Method::GET, &format!("{RESPONSES}/{id}"), &[], "")
            .await
            .json();
        if v["status"] == "completed" {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never completed: {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done["id"], id.as_str());
    assert_eq!(done["usage"]["input_tokens"], 12);
    assert_eq!(done["usage"]["output_tokens"], 9);

    // A streamed chat completion: not found until its stream would have ended.
    let (res, guard) = open(
        &fake,
        Method::POST,
        OPENAI,
        &[("x-fake-ttfb-ms", "300"), ("x-fake-chunks", "1")],
        &stored(&openai_body(true, true)),
    )
    .await;
    let mut body = res.into_body();
    let role = next_frame(&mut body, Duration::from_secs(2))
        .await
        .expect("the role chunk")
        .expect("data");
    let role = String::from_utf8(role.to_vec()).unwrap();
    let chunk_id = texts(&parse_sse(&role)[0].json(), "/id");
    drop(body);
    drop(guard);
    let path = format!("{OPENAI}/{chunk_id}");
    let start = Instant::now();
    loop {
        let r = send(&fake, Method::GET, &path, &[], "").await;
        if r.status == 200 {
            assert_eq!(r.json()["id"], chunk_id.as_str());
            assert_eq!(r.json()["usage"]["prompt_tokens"], 10);
            break;
        }
        assert_eq!(r.status, 404, "{}", r.text());
        assert!(start.elapsed() < Duration::from_secs(5), "never stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Unknown ids: 404s in OpenAI's shape.
    for path in [
        "/v1/responses/resp_nope",
        "/v1/chat/completions/chatcmpl-nope",
    ] {
        let r = send(&fake, Method::GET, path, &[], "").await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.json()["error"]["type"], "invalid_request_error", "{path}");
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("nope")
        );
    }
    // Deleted: gone.
    let r = send(&fake, Method::DELETE, &format!("{RESPONSES}/{id}"), &[], "").await;
    assert_eq!(r.status, 200);
    let r = send(&fake, Method::GET, &format!("{RESPONSES}/{id}"), &[], "").await;
    assert_eq!(r.status, 404);
    let s = fake.stats();
    assert!(s.calls(Route::ChatCompletionRetrieve) >= 2);
}

/// A video job is kept from its creation: in progress for its run time
/// (`x-fake-job-ms`), then completed (its content then downloadable) or, with
/// `x-fake-job-fails`, failed; deleted, or never made, it is not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_video_jobs_run_then_complete_or_fail_and_unknown_ids_are_not_found() {
    let fake = FakeUpstream::start().await;
    let create = |headers: &'static [(&'static str, &'static str)]| {
        let fake = &fake;
        async move {
            let r = post(
                fake,
                VIDEOS,
                headers,
                r#"{"model":"sora-2","prompt":"a cat"}"#,
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.text());
            let v = r.json();
            assert_eq!(v["status"], "queued");
            texts(&v, "/id")
        }
    };
    let poll = |id: String| {
        let fake = &fake;
        async move {
            let r = send(fake, Method::GET, &format!("{VIDEOS}/{id}"), &[], "").await;
            (r.status, r.json())
        }
    };
    let content = |id: String| {
        let fake = &fake;
        async move {
            send(
                fake,
                Method::GET,
                &format!("{VIDEOS}/{id}/content"),
                &[],
                "",
            )
            .await
            .status
        }
    };

    // Runs for 300 ms, then completes.
    let started = Instant::now();
    let id = create(&[("x-fake-job-ms", "300")]).await;
    let (status, v) = poll(id.clone()).await;
    if started.elapsed() < Duration::from_millis(300) {
        assert_eq!(
            (status, v["status"].as_str()),
            (200, Some("in_progress")),
            "{v}"
        );
        assert_eq!(v["id"], id.as_str());
        assert_eq!(content(id.clone()).await, 404, "no content before the end");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let done = loop {
        let (status, v) = poll(id.clone()).await;
        assert_eq!(status, 200, "{v}");
        if v["status"] != "in_progress" {
            break v;
        }
        assert!(Instant::now() < deadline, "the job never ended: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["progress"], 100);
    assert!(done["error"].is_null());
    assert_eq!(content(id.clone()).await, 200);

    // Fails at once.
    let failed = create(&[("x-fake-job-fails", "true")]).await;
    let (status, v) = poll(failed.clone()).await;
    assert_eq!((status, v["status"].as_str()), (200, Some("failed")), "{v}");
    assert_eq!(v["error"]["code"], "video_generation_failed");
    assert_eq!(
        content(failed.clone()).await,
        404,
        "a failed job has no content"
    );

    // Deleted, it is gone; an id never made is not found.
    let r = send(&fake, Method::DELETE, &format!("{VIDEOS}/{id}"), &[], "").await;
    assert_eq!(
        r.json(),
        json!({"id": id, "object": "video", "deleted": true})
    );
    for gone in [id.clone(), "video_never".to_owned()] {
        let (status, v) = poll(gone.clone()).await;
        assert_eq!(status, 404, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(
            v["error"]["message"],
            format!("Video with id '{gone}' not found.")
        );
        let r = send(&fake, Method::DELETE, &format!("{VIDEOS}/{gone}"), &[], "").await;
        assert_eq!(r.status, 404);
    }
}
