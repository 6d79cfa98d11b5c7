//! P5 / F2–F5: every provider error kind with its real status, body and headers;
//! scripted behaviours; fail-after-k, cuts and hangs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use http::Method;
use portcullis_fake_upstream::{Behavior, ErrorKind, FakeUpstream, RateLimitInfo};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_openai_errors() {
    let fake = FakeUpstream::start().await;
    let body = openai_body(false, false);

    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-error", "rate_limit_exceeded")],
        &body,
    )
    .await;
    assert_eq!(r.status, 429);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert_eq!(e["type"], "requests");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("Rate limit reached for gpt-4o-mini")
    );
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(r.header("x-ratelimit-reset-requests"), Some("1s"));
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("150000"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("150000"));
    assert!(r.header("x-ratelimit-reset-tokens").is_some());
    assert!(
        r.header("retry-after").is_none(),
        "OpenAI sends no retry-after unless asked"
    );
    assert!(r.header("x-request-id").is_some());

    // Token-limit variant, explicit numbers and a retry-after.
    let r = post(
        &fake,
        OPENAI,
        &[
            ("x-fake-status", "429"),
            ("x-fake-ratelimit-limit-tokens", "30000"),
            ("x-fake-ratelimit-remaining-tokens", "0"),
            ("x-fake-ratelimit-reset-ms", "90000"),
            ("x-fake-retry-after", "7"),
        ],
        &body,
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "tokens");
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("0"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("60"));
    assert_eq!(r.header("x-ratelimit-reset-tokens"), Some("1m30s"));
    assert_eq!(r.header("retry-after"), Some("7"));

    let r = post(&fake, OPENAI, &[("x-fake-error", "slow_down")], &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (429, Some("slow_down"))
    );

    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-error", "insufficient_quota")],
        &body,
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "insufficient_quota");
    assert_eq!(r.json()["error"]["code"], "insufficient_quota");

    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-error", "server_is_overloaded")],
        &body,
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_is_overloaded");

    let r = post(&fake, OPENAI, &[("x-fake-status", "500")], &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["type"].as_str()),
        (500, Some("server_error"))
    );

    let r = post(&fake, OPENAI, &[("x-fake-status", "408")], &body).await;
    assert_eq!(r.status, 408);
    assert_eq!(r.json()["error"]["code"], "timeout");

    let r = post(&fake, OPENAI, &[("x-fake-error", "invalid_api_key")], &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (401, Some("invalid_api_key"))
    );

    // Unknown names are rendered as unknown errors carrying the name.
    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-error", "mystery_error"), ("x-fake-status", "418")],
        &body,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (418, Some("mystery_error"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_anthropic_errors() {
    let fake = FakeUpstream::start().await;
    let body = anthropic_body(false);

    let r = post(
        &fake,
        ANTHROPIC,
        &[("x-fake-error", "rate_limit_error")],
        &body,
    )
    .await;
    assert_eq!(r.status, 429);
    let v = r.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["request_id"].as_str().unwrap().starts_with("req_"));
    assert_eq!(r.header("request-id"), v["request_id"].as_str());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.header("anthropic-ratelimit-requests-remaining"),
        Some("0")
    );
    assert_eq!(r.header("anthropic-ratelimit-requests-limit"), Some("60"));
    let reset = r.header("anthropic-ratelimit-requests-reset").unwrap();
    assert!(
        reset.ends_with('Z') && reset.len() == 20,
        "RFC 3339: {reset}"
    );
    for h in ["tokens", "input-tokens", "output-tokens"] {
        assert!(
            r.header(&format!("anthropic-ratelimit-{h}-remaining"))
                .is_some()
        );
    }

    let r = post(
        &fake,
        ANTHROPIC,
        &[
            ("x-fake-error", "rate_limit_error"),
            ("x-fake-retry-after", "30"),
        ],
        &body,
    )
    .await;
    assert_eq!(r.header("retry-after"), Some("30"));

    let r = post(
        &fake,
        ANTHROPIC,
        &[("x-fake-error", "overloaded_error")],
        &body,
    )
    .await;
    assert_eq!(r.status, 529);
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert_eq!(r.json()["error"]["message"], "Overloaded");

    // Spend cap as 429: a rate_limit_error naming enforced_spend_limit_reached, no retry-after.
    let r = post(
        &fake,
        ANTHROPIC,
        &[("x-fake-error", "enforced_spend_limit_reached")],
        &body,
    )
    .await;
    assert_eq!(r.status, 429);
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(
        v["error"]["details"]["error_code"],
        "enforced_spend_limit_reached"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("API usage limits")
    );
    assert!(r.header("retry-after").is_none());

    // ... and as 400.
    let r = post(
        &fake,
        ANTHROPIC,
        &[
            ("x-fake-error", "enforced_spend_limit_reached"),
            ("x-fake-status", "400"),
        ],
        &body,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("specified API usage limits")
    );

    let r = post(
        &fake,
        ANTHROPIC,
        &[("x-fake-error", "invalid_request_error")],
        &body,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["type"].as_str()),
        (400, Some("invalid_request_error"))
    );

    let r = post(&fake, ANTHROPIC, &[("x-fake-status", "500")], &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["type"].as_str()),
        (500, Some("api_error"))
    );

    let r = post(
        &fake,
        ANTHROPIC,
        &[("x-fake-error", "authentication_error")],
        &body,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["type"].as_str()),
        (401, Some("authentication_error"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_gemini_and_generic_errors() {
    let fake = FakeUpstream::start().await;
    let body = gemini_body();

    let r = post(
        &fake,
        GEMINI,
        &[
            ("x-fake-error", "RESOURCE_EXHAUSTED"),
            ("x-fake-retry-after", "19"),
        ],
        &body,
    )
    .await;
    assert_eq!(r.status, 429);
    let e = &r.json()["error"];
    assert_eq!(e["code"], 429);
    assert_eq!(e["status"], "RESOURCE_EXHAUSTED");
    let details = e["details"].as_array().unwrap();
    let retry = details
        .iter()
        .find(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo")
        .unwrap();
    assert_eq!(retry["retryDelay"], "19s");
    assert_eq!(r.header("retry-after"), Some("19"));
    assert!(
        r.header("x-ratelimit-remaining-requests").is_none(),
        "Gemini sends no rate-limit headers"
    );

    let r = post(&fake, GEMINI, &[("x-fake-error", "UNAVAILABLE")], &body).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["status"], "UNAVAILABLE");
    assert_eq!(r.json()["error"]["code"], 503);

    let r = post(&fake, GEMINI, &[("x-fake-status", "500")], &body).await;
    assert_eq!(r.json()["error"]["status"], "INTERNAL");

    // 502 comes from the provider's edge as HTML, in every dialect.
    for path in [OPENAI, ANTHROPIC, GEMINI] {
        let r = post(&fake, path, &[("x-fake-status", "502")], &body).await;
        assert_eq!(r.status, 502);
        assert_eq!(r.header("content-type"), Some("text/html"));
        assert!(r.text().contains("502 Bad Gateway"));
    }

    let r = post(&fake, GEMINI, &[("x-fake-status", "408")], &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["status"].as_str()),
        (408, Some("DEADLINE_EXCEEDED"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u3_rate_limit_headers_on_success_when_asked() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        OPENAI,
        &[
            ("x-fake-ratelimit-remaining-requests", "0"),
            ("x-fake-ratelimit-limit-requests", "500"),
        ],
        &openai_body(false, false),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("500"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("150000"));

    fake.set_default(Behavior::new().with_rate_limit(RateLimitInfo::new().tokens(1000, 10)));
    let r = post(&fake, ANTHROPIC, &[], &anthropic_body(false)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("anthropic-ratelimit-tokens-remaining"), Some("10"));
    assert_eq!(
        r.header("anthropic-ratelimit-requests-remaining"),
        Some("60")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_defaults_and_header_precedence() {
    let fake = FakeUpstream::start().await;
    let body = anthropic_body(false);
    // "next 2 calls return 529, then succeed"
    fake.push_scripts([Behavior::status(529), Behavior::status(529)]);
    assert_eq!(fake.scripts_remaining(), 2);
    let mut got = vec![];
    for _ in 0..3 {
        got.push(post(&fake, ANTHROPIC, &[], &body).await.status);
    }
    assert_eq!(got, [529, 529, 200]);
    assert_eq!(fake.scripts_remaining(), 0);
    let s = fake.stats();
    assert_eq!((s.responses_with(529), s.responses_with(200)), (2, 1));

    // Per-credential defaults and scripts; headers override everything.
    fake.set_default(Behavior::error(ErrorKind::Overloaded));
    fake.set_default_for("sk-good", Behavior::ok());
    fake.push_script_for("sk-good", Behavior::error(ErrorKind::RateLimit));
    let good = [("x-api-key", "sk-good")];
    assert_eq!(
        post(&fake, ANTHROPIC, &good, &body).await.status,
        429,
        "credential script first"
    );
    assert_eq!(
        post(&fake, ANTHROPIC, &good, &body).await.status,
        200,
        "credential default"
    );
    assert_eq!(
        post(&fake, ANTHROPIC, &[("x-api-key", "sk-other")], &body)
            .await
            .status,
        529
    );
    assert_eq!(
        post(&fake, ANTHROPIC, &[("x-fake-status", "200")], &body)
            .await
            .status,
        200
    );
    fake.clear_behaviors();
    assert_eq!(post(&fake, ANTHROPIC, &[], &body).await.status, 200);
    // The list-models route consumes no script.
    fake.push_script(Behavior::status(500));
    assert_eq!(
        send(&fake, Method::GET, "/v1/models", &[], "").await.status,
        200
    );
    assert_eq!(fake.scripts_remaining(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_fail_after_k_chunks_in_each_dialect() {
    let fake = FakeUpstream::start().await;
    let fail2 = [("x-fake-fail-after-chunks", "2"), ("x-fake-chunks", "5")];

    let r = post(&fake, OPENAI, &fail2, &openai_body(true, true)).await;
    assert_eq!(r.status, 200, "the head was already committed");
    let ev = parse_sse(&r.text());
    assert_eq!(ev.len(), 1 + 2 + 1, "role, 2 chunks, error");
    let err = ev.last().unwrap().json();
    assert_eq!(err["error"]["type"], "server_error");
    assert!(!r.text().contains("[DONE]"));

    let r = post(
        &fake,
        ANTHROPIC,
        &[
            ("x-fake-fail-after-chunks", "2"),
            ("x-fake-error", "overloaded_error"),
        ],
        &anthropic_body(true),
    )
    .await;
    let ev = parse_sse(&r.text());
    let names: Vec<&str> = ev.iter().map(|e| e.event.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "error"
        ]
    );
    assert_eq!(ev[5].json()["error"]["type"], "overloaded_error");

    // k = 0: a stream that fails before its first content chunk (F2).
    let r = post(
        &fake,
        ANTHROPIC,
        &[("x-fake-fail-after-chunks", "0")],
        &anthropic_body(true),
    )
    .await;
    let names: Vec<String> = parse_sse(&r.text())
        .into_iter()
        .map(|e| e.event.unwrap())
        .collect();
    assert_eq!(
        names,
        ["message_start", "content_block_start", "ping", "error"]
    );

    let r = post(
        &fake,
        GEMINI_SSE,
        &[
            ("x-fake-fail-after-chunks", "1"),
            ("x-fake-error", "UNAVAILABLE"),
        ],
        &gemini_body(),
    )
    .await;
    let ev = parse_sse(&r.text());
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[1].json()["error"]["status"], "UNAVAILABLE");

    let s = fake.stats();
    assert_eq!((s.completed, s.cancelled, s.in_flight), (4, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_cut_connection_mid_stream_and_mid_body() {
    let fake = FakeUpstream::start().await;
    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-fail-after-chunks", "2"), ("x-fake-cut", "true")],
        &openai_body(true, false),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_err(), "the client sees a broken body");

    // Read frame by frame: exactly the role chunk and 2 content chunks, then the cut.
    let (res, _g) = open(
        &fake,
        Method::POST,
        ANTHROPIC,
        // No interval: the bytes before the cut must still be flushed.
        &[("x-fake-fail-after-chunks", "2"), ("x-fake-cut", "1")],
        &anthropic_body(true),
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
    assert_eq!(text.matches("content_block_delta\ndata").count(), 2);
    assert!(!text.contains("message_stop"));

    // Cut without fail-after: all content, but never the final usage events.
    let r = post(
        &fake,
        OPENAI,
        &[("x-fake-cut", "true")],
        &openai_body(true, true),
    )
    .await;
    assert!(r.body.is_err());

    // A non-streamed answer cut after half its body.
    let r = post(&fake, GEMINI, &[("x-fake-cut", "true")], &gemini_body()).await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_err());

    assert!(fake.wait_idle(Duration::from_secs(2)).await);
    let s = fake.stats();
    assert_eq!(s.completed, 4, "a cut on purpose is a completed call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_hang_is_bounded_by_the_client_timeout() {
    let fake = FakeUpstream::start().await;
    // Non-stream: no head ever. The client gives up after 2 s: long enough for a loaded
    // host to get the call to the fake (counted below), far short of never.
    let t = Instant::now();
    let res = tokio::time::timeout(
        Duration::from_secs(2),
        post(
            &fake,
            OPENAI,
            &[("x-fake-hang", "true"), ("authorization", "Bearer sk-h")],
            &openai_body(false, false),
        ),
    )
    .await;
    assert!(res.is_err(), "no answer");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        fake.wait_idle(Duration::from_secs(2)).await,
        "the dropped client ends the call"
    );
    let s = fake.stats();
    assert_eq!((s.cancelled, s.completed), (1, 0));
    assert_eq!(s.max_in_flight_for("sk-h"), 1);
    assert!(s.in_flight_per_credential.is_empty());

    // Stream: head and preamble, but never a content chunk.
    fake.push_script(Behavior::hang());
    let (res, g) = open(&fake, Method::POST, OPENAI, &[], &openai_body(true, true)).await;
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let pre = next_frame(&mut body, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&pre).contains("\"role\":\"assistant\""));
    assert!(
        next_frame(&mut body, Duration::from_millis(250))
            .await
            .is_none(),
        "first chunk never comes"
    );
    assert_eq!(fake.in_flight(), 1);
    drop(body);
    drop(g);
    assert!(fake.wait_idle(Duration::from_secs(2)).await);
    assert_eq!(fake.stats().cancelled, 2);
}
