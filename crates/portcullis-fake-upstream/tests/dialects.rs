//! P5: each dialect's non-streamed and streamed shapes, with the documented usage.

mod common;

use std::time::{Duration, Instant};

use common::*;
use http::Method;
use portcullis_fake_upstream::{FakeUpstream, Route, expected_text};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_openai_non_stream_shape_and_usage() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-output-tokens", "5"), ("x-fake-cached-tokens", "4")],
        &openai_body(false, false),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("x-request-id").unwrap().starts_with("req_"));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], expected_text(4));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(u["prompt_tokens"], 10);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 4);
    assert_eq!(u["completion_tokens"], 5);
    assert_eq!(u["total_tokens"], 15);
    // No rate-limit headers unless asked for.
    assert!(r.header("x-ratelimit-remaining-requests").is_none());
    assert_eq!(fake.stats().calls(Route::ChatCompletions), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_openai_output_capped_by_max_tokens() {
    let fake = FakeUpstream::start().await;
    let body = serde_json::json!({"model":"gpt-4o","max_completion_tokens":3,"messages":[{"role":"user","content":"hi"}]});
    let r = post(&fake, OPENAI, &[], &body.to_string()).await;
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["usage"]["prompt_tokens"], 1, "at least one prompt token");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_openai_stream_with_and_without_usage_chunk() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-chunks", "3"), ("x-fake-output-tokens", "7")],
        &openai_body(true, true),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = parse_sse(&r.text());
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(Event::json).collect();
    // role chunk, 3 content chunks, finish chunk, usage chunk
    assert_eq!(chunks.len(), 6, "{chunks:#?}");
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "gpt-4o-mini");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks[1..4]
        .iter()
        .map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(text, expected_text(3));
    assert!(
        chunks[1]["usage"].is_null(),
        "usage is null on content chunks"
    );
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[5]["choices"].as_array().unwrap().len(), 0);
    assert_eq!(chunks[5]["usage"]["prompt_tokens"], 10);
    assert_eq!(chunks[5]["usage"]["completion_tokens"], 7);
    assert_eq!(chunks[5]["usage"]["total_tokens"], 17);

    let r = post(&fake, OPENAI, &[], &openai_body(true, false)).await;
    let events = parse_sse(&r.text());
    assert_eq!(
        events.len(),
        1 + 4 + 1 + 1,
        "role, 4 chunks, finish, [DONE]"
    );
    assert!(
        !r.text().contains("\"usage\""),
        "no usage without include_usage"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_anthropic_non_stream_shape_and_usage() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        ANTHROPIC,
        &[
            ("x-api-key", "sk-ant-test"),
            ("anthropic-version", "2023-06-01"),
            ("x-fake-input-tokens", "100"),
            ("x-fake-cached-tokens", "60"),
            ("x-fake-cache-creation-tokens", "30"),
            ("x-fake-output-tokens", "9"),
        ],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.header("request-id").unwrap().starts_with("req_"));
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-sonnet-4-5");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["content"][0]["text"], expected_text(4));
    assert_eq!(v["stop_reason"], "end_turn");
    let u = &v["usage"];
    assert_eq!(u["input_tokens"], 10, "prompt minus cache reads and writes");
    assert_eq!(u["cache_read_input_tokens"], 60);
    assert_eq!(u["cache_creation_input_tokens"], 30);
    assert_eq!(u["output_tokens"], 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_anthropic_stream_event_sequence() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        ANTHROPIC,
        &[
            ("x-fake-cached-tokens", "4"),
            ("x-fake-output-tokens", "11"),
            ("x-fake-chunks", "2"),
        ],
        &anthropic_body(true),
    )
    .await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = parse_sse(&r.text());
    let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for e in &events {
        assert_eq!(
            e.json()["type"],
            e.event.as_deref().unwrap(),
            "event name matches data.type"
        );
    }
    let start = events[0].json();
    let u = &start["message"]["usage"];
    assert_eq!(u["input_tokens"], 6);
    assert_eq!(u["cache_read_input_tokens"], 4);
    assert_eq!(u["cache_creation_input_tokens"], 0);
    let text: String = events[3..5]
        .iter()
        .map(|e| e.json()["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, expected_text(2));
    assert_eq!(events[3].json()["delta"]["type"], "text_delta");
    let delta = events[6].json();
    assert_eq!(delta["usage"]["output_tokens"], 11);
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_gemini_non_stream_shape_and_usage() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        &format!("{GEMINI}?key=AIza-test"),
        &[("x-fake-cached-tokens", "3"), ("x-fake-output-tokens", "8")],
        &gemini_body(),
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["candidates"][0]["content"]["role"], "model");
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        expected_text(4)
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(v["modelVersion"], "gemini-2.0-flash");
    let u = &v["usageMetadata"];
    assert_eq!(u["promptTokenCount"], 10);
    assert_eq!(u["cachedContentTokenCount"], 3);
    assert_eq!(u["candidatesTokenCount"], 8);
    assert_eq!(u["totalTokenCount"], 18);
    assert_eq!(
        fake.stats().calls_for("AIza-test"),
        1,
        "?key= is the credential"
    );

    // cachedContentTokenCount is omitted when zero, as Gemini does.
    let r = post(&fake, GEMINI, &[], &gemini_body()).await;
    assert!(
        r.json()["usageMetadata"]
            .get("cachedContentTokenCount")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_gemini_stream_sse_and_json_array() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        GEMINI_SSE,
        &[("x-goog-api-key", "AIza-g"), ("x-fake-chunks", "3")],
        &gemini_body(),
    )
    .await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(
        r.text().contains("\r\n\r\n"),
        "Gemini separates events with CRLF"
    );
    let events = parse_sse(&r.text());
    assert_eq!(events.len(), 4, "3 content chunks + final chunk");
    let text: String = events
        .iter()
        .map(|e| {
            e.json()["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(text, expected_text(3));
    for e in &events[..3] {
        let v = e.json();
        assert!(v["candidates"][0].get("finishReason").is_none());
        assert_eq!(v["usageMetadata"]["promptTokenCount"], 10);
    }
    let last = events[3].json();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 16);
    assert_eq!(last["usageMetadata"]["totalTokenCount"], 26);
    assert_eq!(fake.stats().calls(Route::StreamGenerateContent), 1);
    assert_eq!(fake.stats().calls_for("AIza-g"), 1);

    // Without alt=sse Gemini streams one JSON array.
    let r = post(
        &fake,
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
        &[("x-fake-chunks", "2")],
        &gemini_body(),
    )
    .await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    let arr = r.json();
    let arr = arr.as_array().unwrap();
    assert_eq!(arr.len(), 3);
    assert_eq!(arr[2]["modelVersion"], "gemini-2.5-pro");
    assert_eq!(arr[2]["usageMetadata"]["candidatesTokenCount"], 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_list_models_in_each_shape() {
    let fake = FakeUpstream::start().await;
    let r = send(&fake, Method::GET, "/v1/models", &[], "").await;
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["object"], "model");
    let r = send(
        &fake,
        Method::GET,
        "/v1/models",
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await;
    let v = r.json();
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["has_more"], false);
    let r = send(&fake, Method::GET, "/v1beta/models", &[], "").await;
    assert!(
        r.json()["models"][0]["name"]
            .as_str()
            .unwrap()
            .starts_with("models/")
    );
    assert_eq!(fake.stats().calls(Route::ListModels), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_recorded_headers() {
    let fake = FakeUpstream::start().await;
    post(
        &fake,
        OPENAI,
        &[("authorization", "Bearer sk-chan-1")],
        &openai_body(false, false),
    )
    .await;
    post(
        &fake,
        OPENAI,
        &[("authorization", "Bearer sk-chan-1")],
        &openai_body(false, false),
    )
    .await;
    post(
        &fake,
        ANTHROPIC,
        &[("x-api-key", "sk-ant-2")],
        &anthropic_body(false),
    )
    .await;
    // A request carrying two credentials counts under the first, but both are seen.
    post(
        &fake,
        ANTHROPIC,
        &[
            ("authorization", "Bearer sk-chan-1"),
            ("x-api-key", "sk-client-leak"),
        ],
        &anthropic_body(false),
    )
    .await;
    let s = fake.stats();
    assert_eq!(s.total_calls, 4);
    assert_eq!(s.calls_for("sk-chan-1"), 3);
    assert_eq!(s.calls_for("sk-ant-2"), 1);
    assert!(s.credentials_seen.contains("sk-client-leak"));
    assert!(s.saw_anywhere("sk-client-leak"));
    assert!(!s.saw_anywhere("sk-never-sent"));
    assert_eq!(s.recent_requests.len(), 4);
    let last = s.recent_requests.last().unwrap();
    assert_eq!(last.path_and_query, ANTHROPIC);
    assert_eq!(last.credential.as_deref(), Some("sk-chan-1"));
    assert_eq!(last.headers.get("x-api-key").unwrap(), "sk-client-leak");
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.completed, 4);

    fake.reset_stats();
    let s = fake.stats();
    assert_eq!(
        (s.total_calls, s.max_in_flight, s.recent_requests.len()),
        (0, 0, 0)
    );
    assert!(s.credentials_seen.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_answered_in_dialect() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-latency-ms", "soon")],
        &openai_body(false, false),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-fake-latency-ms")
    );
    let r = post(&fake, ANTHROPIC, &[], "{not json").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = post(&fake, GEMINI, &[], "[]").await;
    assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT");
    let r = post(&fake, "/v2/nothing", &[], "{}").await;
    assert_eq!(r.status, 404);
    let s = fake.stats();
    assert_eq!(s.calls(Route::Other), 1);
    assert_eq!(s.responses_with(400), 3);
    assert_eq!(s.responses_with(404), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_ttfb_and_chunk_interval_are_applied() {
    let fake = FakeUpstream::start().await;
    let t = Instant::now();
    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-latency-ms", "120")],
        &openai_body(false, false),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(120));

    // Stream: the head and preamble come at once; the first content chunk after the
    // TTFB; then one event per interval (2 more chunks + the final events). A TTFB of
    // 2 s, so that a loaded host still sends the head well before it (what this bounds:
    // the head is not held for the TTFB).
    let t = Instant::now();
    let (res, _g) = open(
        &fake,
        Method::POST,
        ANTHROPIC,
        &[
            ("x-fake-ttfb-ms", "2000"),
            ("x-fake-chunk-interval-ms", "40"),
            ("x-fake-chunks", "3"),
        ],
        &anthropic_body(true),
    )
    .await;
    let head = t.elapsed();
    assert!(
        head < Duration::from_millis(2000),
        "head before TTFB: {head:?}"
    );
    let mut body = res.into_body();
    let pre = next_frame(&mut body, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&pre).contains("message_start"));
    let first = next_frame(&mut body, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("content_block_delta"));
    assert!(t.elapsed() >= Duration::from_millis(2000));
    while let Some(f) = next_frame(&mut body, Duration::from_secs(2)).await {
        f.unwrap();
    }
    assert!(t.elapsed() >= Duration::from_millis(2000 + 3 * 40));
}
