//! End-to-end tests of the ready proxy through real sockets:
//! client (hyper, one HTTP/1.1 connection per request) → the gateway
//! (`Gateway::router()` served by `axum::serve` on `127.0.0.1:0`) → the bundled
//! `FakeUpstream`. Each test writes its own small TOML. Test names carry the rule id.

mod common;

use common::*;
use portcullis_fake_upstream::{FakeUpstream, Route};
use portcullis_proxy::Config;
use serde_json::json;
use std::time::{Duration, Instant};

/// The client key most tests use, on a policy that never binds.
const CLIENT: &str = "sk-client-e2e-7f3a";

/// One key (`CLIENT`) on a policy that never binds.
const OPEN: &str = r#"
[policies.open]
concurrency = 16
requests = [{ window = "1h", limit = 100000 }]
tokens = [{ window = "1h", limit = 100000000 }]

[keys.client]
key = "sk-client-e2e-7f3a"
policy = "open"
"#;

/// The arrival time of the first frame containing `marker`.
fn arrival(frames: &[(Instant, bytes::Bytes)], marker: &str) -> (usize, Instant) {
    frames
        .iter()
        .enumerate()
        .find(|(_, (_, b))| String::from_utf8_lossy(b).contains(marker))
        .map(|(i, (t, _))| (i, *t))
        .unwrap_or_else(|| panic!("no frame contains {marker}: {frames:?}"))
}

/// The stream came chunk by chunk: the first content chunk (`"This "`) reached the
/// client in an earlier frame than the fourth (`"fake "`), and at least `gap` earlier
/// — a proxy that buffered the answer would deliver both at once.
fn assert_incremental(frames: &[(Instant, bytes::Bytes)], gap: Duration) {
    let (i0, t0) = arrival(frames, "\"This \"");
    let (i3, t3) = arrival(frames, "\"fake \"");
    assert!(i0 < i3, "chunks 0 and 3 arrived in one frame: {frames:?}");
    assert!(
        t3.duration_since(t0) >= gap,
        "chunks 0 and 3 arrived {:?} apart (< {gap:?}): the stream was buffered",
        t3.duration_since(t0)
    );
}

/// P2 for one dialect: a JSON answer and a streamed answer (plus, for Gemini, the JSON
/// array stream without `alt=sse`; for OpenAI, a stream without `stream_options`,
/// which the gateway sends with `include_usage`) arrive with status 200 and exactly the
/// bytes the upstream sends — compared with the same call made directly to a second
/// fake, which sees the same sequence of calls and so renders the same ids (only
/// `"created"`, a wall-clock second, is masked) — and the stream arrives chunk by chunk.
async fn passes_through(d: Dialect) {
    let p = Proxy::start(OPEN).await;
    let direct = FakeUpstream::start().await;
    let as_channel = |r: Req| r.key(d.key_at(), d.channel_credential());

    // JSON.
    let req = gen_for(d, d.model(), false, None);
    let via = send(p.addr, &req.clone().key(d.key_at(), CLIENT)).await;
    let want = send(direct.addr(), &as_channel(req)).await;
    assert_eq!(via.status, 200, "{d:?}: {}", via.text());
    assert_eq!(want.status, 200, "{d:?} direct: {}", want.text());
    assert_eq!(via.header("content-type"), want.header("content-type"));
    assert_eq!(
        mask_created(&via.body),
        mask_created(&want.body),
        "{d:?} JSON"
    );

    // Streams: 4 content chunks 150 ms apart. Each case: (what, the client's request,
    // the same request as the gateway should send it). Chunks 0 and 3 leave the fake
    // 450 ms apart; a buffered stream delivers them together, and a client that a
    // loaded host does not run for a while still reads them more than the 60 ms of
    // [`assert_incremental`] apart, unless it stalls for 390 ms.
    let stream = gen_for(d, d.model(), true, None)
        .header("x-fake-chunk-interval-ms", 150)
        .header("x-fake-chunks", 4);
    let mut cases = vec![("stream", stream.clone(), stream.clone())];
    if d == Dialect::Gemini {
        let mut array = stream.clone();
        array.path = array.path.replace("?alt=sse", "");
        cases.push(("JSON-array stream", array.clone(), array));
    }
    if d == Dialect::OpenAi {
        // Without `stream_options` the gateway asks for the usage chunk itself (the configuration
        // reference, "Billing in the proxy"): the client gets what the upstream sends for that.
        let mut v: serde_json::Value = serde_json::from_slice(&stream.body).unwrap();
        v.as_object_mut().unwrap().remove("stream_options");
        let bare = stream.clone().body(v.to_string());
        cases.push(("stream without stream_options", bare, stream.clone()));
    }
    for (what, client, upstream) in cases {
        let (via_req, want_req) = (client.key(d.key_at(), CLIENT), as_channel(upstream));
        let (via, want) = tokio::join!(open(p.addr, &via_req), open(direct.addr(), &want_req));
        assert_eq!(via.status, 200, "{d:?} {what}");
        assert_eq!(want.status, 200);
        assert_eq!(
            via.headers.get("content-type"),
            want.headers.get("content-type")
        );
        let (via, want) = tokio::join!(via.frames(), want.frames());
        assert_incremental(&via, Duration::from_millis(60));
        assert_eq!(
            mask_created(&concat(&via)),
            mask_created(&concat(&want)),
            "{d:?} {what}"
        );
    }
    let s = p.fake.stats();
    assert_eq!(
        s.total_calls,
        direct.stats().total_calls,
        "one call per request"
    );
    assert_eq!(s.calls_for(d.channel_credential()), s.total_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_openai_json_and_stream() {
    passes_through(Dialect::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_anthropic_json_and_stream() {
    passes_through(Dialect::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_gemini_json_and_stream() {
    passes_through(Dialect::Gemini).await;
}

/// W5: after the body ends, the token tier's `used` is exactly what the upstream
/// reported (input incl. cache reads and writes + output), not the reservation
/// (estimate + max output 500) — for JSON answers and for every stream that reports
/// usage (OpenAI with `include_usage`, and without it since the gateway asks for it;
/// Anthropic; Gemini SSE and JSON array). The numbers are made distinctive with the
/// fake's `x-fake-input-tokens` / `-cached-tokens` / `-cache-creation-tokens` /
/// `-output-tokens`, and the expected total is read from the answer the client got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w5_tokens_settled_equal_what_the_upstream_reported() {
    // (dialect, streamed, variant): "" as the SDK sends it; "array" Gemini's stream
    // without `alt=sse`; "no-usage-asked" an OpenAI stream without `stream_options`
    // (the gateway asks for the usage chunk itself: configuration reference, billing).
    let cases = [
        (Dialect::OpenAi, false, ""),
        (Dialect::OpenAi, true, ""),
        (Dialect::OpenAi, true, "no-usage-asked"),
        (Dialect::Anthropic, false, ""),
        (Dialect::Anthropic, true, ""),
        (Dialect::Gemini, false, ""),
        (Dialect::Gemini, true, ""),
        (Dialect::Gemini, true, "array"),
    ];
    let mut toml = String::from(
        "[policies.metered]\nrequests = [{ window = \"1h\", limit = 1000 }]\n\
         tokens = [{ window = \"1h\", limit = 10000000 }]\n",
    );
    for i in 0..cases.len() {
        toml.push_str(&format!(
            "[keys.w5-{i}]\nkey = \"sk-w5-{i}\"\npolicy = \"metered\"\n"
        ));
    }
    let p = Proxy::start(&toml).await;
    for (i, (d, stream, variant)) in cases.into_iter().enumerate() {
        let key = format!("sk-w5-{i}");
        let input = 1200 + 10 * i as u64;
        let (cached, writes, output) = (300, 45, 77);
        let mut req = gen_for(d, d.model(), stream, Some(500))
            .key(d.key_at(), &key)
            .header("x-fake-input-tokens", input)
            .header("x-fake-cached-tokens", cached)
            .header("x-fake-cache-creation-tokens", writes)
            .header("x-fake-output-tokens", output);
        match variant {
            "array" => req.path = req.path.replace("?alt=sse", ""),
            "no-usage-asked" => {
                let mut v: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
                v.as_object_mut().unwrap().remove("stream_options");
                req.body = v.to_string().into_bytes();
            }
            _ => {}
        }
        let r = send(p.addr, &req).await;
        assert_eq!(r.status, 200, "{d:?} stream={stream}: {}", r.text());
        let reported = reported_tokens(d, &r.body);
        assert_eq!(
            reported,
            input + output,
            "{d:?} stream={stream}: {}",
            r.text()
        );
        let (settled, view) = usage_until(p.addr, &key, Duration::from_secs(2), |v| {
            used(v, "key", "tokens", 3600) == reported
        })
        .await;
        assert!(
            settled,
            "{d:?} stream={stream} {variant}: upstream reported {reported} tokens, the gateway counts {view}"
        );
        let view = usage(p.addr, &key).await;
        assert_eq!(used(&view, "key", "requests", 3600), 1, "{view}");
        assert_eq!(in_flight(&view), 0, "{view}");
    }
}

/// P2: whichever place the client puts its key in (Authorization Bearer, x-api-key,
/// x-goog-api-key, `?key=`), on every dialect's route, the upstream never sees the
/// client's key — not in a header, not in the query — and sees exactly the channel's
/// credential, in the channel's own header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_client_key_never_reaches_the_upstream() {
    let secret = |at: KeyAt| format!("sk-client-secret-{at:?}-51c9").to_lowercase();
    let mut toml = String::from("[policies.open]\nconcurrency = 16\n");
    for at in KEY_PLACES {
        toml.push_str(&format!(
            "[keys.{at:?}]\nkey = \"{}\"\npolicy = \"open\"\n",
            secret(at)
        ));
    }
    let p = Proxy::start(&toml).await;
    let mut sent = 0;
    for d in DIALECTS {
        for at in KEY_PLACES {
            for stream in [false, true] {
                let r = send(
                    p.addr,
                    &gen_for(d, d.model(), stream, None).key(at, &secret(at)),
                )
                .await;
                assert_eq!(r.status, 200, "{d:?} {at:?}: {}", r.text());
                sent += 1;
            }
        }
    }
    // The Gemini key in the middle of the query, before `alt=sse`.
    let mut r = gen_for(Dialect::Gemini, "gemini-2.5-flash", true, None);
    r.path = format!(
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?key={}&alt=sse",
        secret(KeyAt::Query)
    );
    let res = send(p.addr, &r).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(
        res.text().starts_with("data: "),
        "alt=sse kept: {}",
        res.text()
    );
    sent += 1;

    let s = p.fake.stats();
    assert_eq!(s.total_calls, sent);
    for at in KEY_PLACES {
        assert!(
            !s.saw_anywhere(&secret(at)),
            "the upstream saw the client key sent in {at:?}"
        );
    }
    assert!(!s.saw_anywhere("sk-client-secret"));
    let expected: std::collections::BTreeSet<String> = [CRED_OPENAI, CRED_ANTHROPIC, CRED_GEMINI]
        .map(String::from)
        .into();
    assert_eq!(s.credentials_seen, expected);
    assert_eq!(s.recent_requests.len() as u64, sent);
    for rec in &s.recent_requests {
        let (d, header, value) = match rec.route {
            Route::ChatCompletions => (
                Dialect::OpenAi,
                "authorization",
                format!("Bearer {CRED_OPENAI}"),
            ),
            Route::Messages => (Dialect::Anthropic, "x-api-key", CRED_ANTHROPIC.to_owned()),
            Route::GenerateContent | Route::StreamGenerateContent => {
                (Dialect::Gemini, "x-goog-api-key", CRED_GEMINI.to_owned())
            }
            other => panic!("unexpected route {other:?}"),
        };
        assert_eq!(rec.credential.as_deref(), Some(d.channel_credential()));
        assert_eq!(
            rec.headers.get(header).and_then(|v| v.to_str().ok()),
            Some(value.as_str()),
            "{rec:?}"
        );
        for h in ["authorization", "x-api-key", "x-goog-api-key"] {
            assert!(
                h == header || !rec.headers.contains_key(h),
                "{h} sent to a {d:?} upstream: {rec:?}"
            );
        }
        assert!(
            !rec.path_and_query.contains("key="),
            "a key in the upstream query: {}",
            rec.path_and_query
        );
    }
}

// ------------------------------------------------------------------ E4 / U4: refusals

/// Two keys of one tenant with a balance and a budget: `CLIENT` (all models, a spend
/// cap) and `sk-narrow` (only gpt-4o-mini).
const E4: &str = r#"
[policies.open]
concurrency = 4
requests = [{ window = "1h", limit = 1000 }]
tokens = [{ window = "1h", limit = 10000000 }]

[tenants.acme]
balance = 1_000_000_000
budgets = [{ name = "monthly", limit = 1_000_000_000, period = "30d" }]

[keys.client]
key = "sk-client-e2e-7f3a"
tenant = "acme"
policy = "open"
spend_cap = 1_000_000_000

[keys.narrow]
key = "sk-narrow"
tenant = "acme"
policy = "open"
models = ["gpt-4o-mini"]
"#;

/// Runs `refusals` and checks that they consumed nothing: the `/usage` views of the
/// keys are unchanged (no slot, no window count, no token, no money: balance, spend,
/// pending, budget reservations) and the upstream saw no call (L5, W4, B3).
async fn consumes_nothing<F, Fut>(p: &Proxy, keys: &[&str], refusals: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut before = Vec::new();
    for k in keys {
        before.push(usage(p.addr, k).await);
    }
    refusals().await;
    // A refund runs when the refused request ends; give it a bounded moment.
    for (k, b) in keys.iter().zip(&before) {
        let b = &without_budget_anchor(b);
        let (same, now) = usage_until(p.addr, k, Duration::from_secs(1), |v| {
            &without_budget_anchor(v) == b
        })
        .await;
        assert!(
            same,
            "{k}: refusals consumed something:\nbefore {b}\nafter  {now}"
        );
    }
    assert_eq!(p.fake.stats().total_calls, 0, "the upstream saw a call");
}

/// The view without the budgets' `resets_at`: a request refused after the billing
/// layer admitted it (50201) starts the budget's period — a known bug, covered by the
/// ignored `l5_refused_request_does_not_start_a_budget_period`; everything else must
/// be unchanged.
fn without_budget_anchor(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    if let Some(bs) = v["money"]["budgets"].as_array_mut() {
        for b in bs {
            if let Some(o) = b.as_object_mut() {
                o.remove("resets_at");
            }
        }
    }
    v
}

/// L5 / B3: a request refused after the billing layer admitted it (here 50201, no
/// channel for the model) leaves the tenant's budget exactly as it was — including its
/// period, which starts at the first *use* (B3: periods are anchored at first
/// use).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l5_refused_request_does_not_start_a_budget_period() {
    let p = Proxy::start(E4).await;
    let before = usage(p.addr, CLIENT).await;
    assert_eq!(
        before["money"]["budgets"][0]["resets_at"],
        serde_json::Value::Null
    );
    let r = send(
        p.addr,
        &gen_for(Dialect::OpenAi, "orphan-model", false, None).key(KeyAt::Bearer, CLIENT),
    )
    .await;
    rejection(&r, Dialect::OpenAi, 50201);
    let (same, after) = usage_until(p.addr, CLIENT, Duration::from_secs(1), |v| v == &before).await;
    assert!(same, "before {before}\nafter  {after}");
}

/// A 4xx refusal must tell SDKs not to retry (E2; the gateway codes guide, "Headers").
fn assert_no_retry(r: &Resp) {
    assert_eq!(r.header("x-should-retry"), Some("false"), "{:?}", r.headers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_unknown_model_is_404() {
    let p = Proxy::start(E4).await;
    consumes_nothing(&p, &[CLIENT], || async {
        for d in DIALECTS {
            for stream in [false, true] {
                let req = gen_for(d, "no-such-model", stream, None).key(d.key_at(), CLIENT);
                let r = send(p.addr, &req).await;
                let msg = rejection(&r, d, 40401);
                assert!(msg.contains("no-such-model"), "{d:?}: {msg}");
                assert_no_retry(&r);
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_malformed_json_is_400() {
    let p = Proxy::start(E4).await;
    consumes_nothing(&p, &[CLIENT], || async {
        let bodies = [
            (
                Dialect::OpenAi,
                "{\"model\": \"gpt-4o-mini\",\n  \"messages\": [}",
                "line 2, column 16",
            ),
            (
                Dialect::Anthropic,
                "{\"model\": \"claude-sonnet-4-5\", \"max_tokens\": 5,\n\n \"messages\": [{\"role\": \"user\", \"content\": \"hi\"},]}",
                "line 3, column 49",
            ),
            (
                Dialect::Gemini,
                "{\"contents\": [{\"parts\": [{\"text\": \"hi\"}]}]\n,}",
                "line 2, column 2",
            ),
        ];
        for (d, body, position) in bodies {
            let req = gen_for(d, d.model(), false, None)
                .key(d.key_at(), CLIENT)
                .body(body);
            let r = send(p.addr, &req).await;
            let msg = rejection(&r, d, 40001);
            assert!(msg.contains(position), "{d:?}: {msg:?} should name {position}");
            assert_no_retry(&r);
        }
        // Valid JSON of the wrong type names the field and its position.
        let req = gen_for(Dialect::OpenAi, "gpt-4o-mini", false, None)
            .key(KeyAt::Bearer, CLIENT)
            .body("{\"model\": 42, \"messages\": []}");
        let r = send(p.addr, &req).await;
        let msg = rejection(&r, Dialect::OpenAi, 40001);
        assert!(msg.contains("model") && msg.contains("line 1"), "{msg}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_oversized_body_is_413() {
    let p = Proxy::start(&format!("[server]\nmax_body_bytes = 512\n{E4}")).await;
    consumes_nothing(&p, &[CLIENT], || async {
        for d in DIALECTS {
            let big = "x".repeat(2000);
            let mut req = gen_for(d, d.model(), false, None).key(d.key_at(), CLIENT);
            let mut v: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
            v["padding"] = json!(big);
            req = req.body(v.to_string());
            let r = send(p.addr, &req).await;
            let msg = rejection(&r, d, 41301);
            assert!(msg.contains("512"), "{d:?}: {msg}");
            assert_no_retry(&r);
        }
    })
    .await;
    // Just under the limit passes.
    let r = send(p.addr, &ask(Dialect::OpenAi, CLIENT, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_unknown_key_is_401() {
    let p = Proxy::start(E4).await;
    consumes_nothing(&p, &[CLIENT], || async {
        for d in DIALECTS {
            for req in [
                ask(d, "sk-not-a-key", false),
                gen_for(d, d.model(), false, None),
                gen_for(d, d.model(), false, None).key(KeyAt::Query, ""),
                gen_for(d, d.model(), false, None).header("authorization", "Basic Zm9vOmJhcg=="),
            ] {
                let r = send(p.addr, &req).await;
                let msg = rejection(&r, d, 40101);
                assert_eq!(msg, "Missing or invalid API key.", "{d:?}");
                assert_no_retry(&r);
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_model_not_allowed_for_key_is_403() {
    let p = Proxy::start(E4).await;
    consumes_nothing(&p, &["sk-narrow"], || async {
        for d in [Dialect::Anthropic, Dialect::Gemini] {
            let r = send(p.addr, &ask(d, "sk-narrow", false)).await;
            let msg = rejection(&r, d, 40301);
            assert!(msg.contains(d.model()), "{d:?}: {msg}");
            assert_no_retry(&r);
        }
        let r = send(
            p.addr,
            &gen_for(Dialect::OpenAi, "claude-sonnet-4-5", false, None)
                .key(KeyAt::Bearer, "sk-narrow"),
        )
        .await;
        rejection(&r, Dialect::OpenAi, 40301);
    })
    .await;
    // The allowed model passes.
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-narrow", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u4_model_without_channel_is_50201() {
    let p = Proxy::start(E4).await;
    consumes_nothing(&p, &[CLIENT], || async {
        for d in DIALECTS {
            for stream in [false, true] {
                let req = gen_for(d, "orphan-model", stream, None).key(d.key_at(), CLIENT);
                let r = send(p.addr, &req).await;
                let msg = rejection(&r, d, 50201);
                assert_eq!(msg, "no available upstream for this model", "{d:?}");
            }
        }
    })
    .await;
}

// ------------------------------------------------------------------ C2, W7, W8, L3

/// C2 through the proxy: with one slot, a slow stream holds it; every dialect's next
/// request is refused at once with 42901, without reaching the upstream; when the
/// stream ends the slot is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c2_concurrency_42901_through_the_proxy() {
    let p = Proxy::start(
        r#"
[policies.one]
concurrency = 1
requests = [{ window = "1h", limit = 1000 }]

[keys.one]
key = "sk-one-slot"
policy = "one"
"#,
    )
    .await;
    // Held for 20 × 250 ms: longer than every refusal below may take.
    let held = ask(Dialect::OpenAi, "sk-one-slot", true)
        .header("x-fake-chunk-interval-ms", 250)
        .header("x-fake-chunks", 20);
    let mut stream = open(p.addr, &held).await;
    assert_eq!(stream.status, 200);
    assert!(stream.next_data().await.is_some());
    assert_eq!(in_flight(&usage(p.addr, "sk-one-slot").await), 1);
    for d in DIALECTS {
        let started = Instant::now();
        let r = send(p.addr, &ask(d, "sk-one-slot", false)).await;
        let msg = rejection(&r, d, 42901);
        assert_eq!(msg, "concurrency limit exceeded", "{d:?}");
        // "At once": a refusal that waited for the slot would wait for the stream's
        // end, seconds away; 1 s is the slack of a loaded 2-core host.
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once, not after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        p.fake.stats().total_calls,
        1,
        "refusals reached the upstream"
    );
    let view = usage(p.addr, "sk-one-slot").await;
    assert_eq!(
        used(&view, "key", "requests", 3600),
        1,
        "refusals were counted: {view}"
    );
    let rest = stream.rest().await;
    assert!(String::from_utf8_lossy(&rest).contains("[DONE]"));
    let (freed, view) = usage_until(p.addr, "sk-one-slot", WAIT, |v| in_flight(v) == 0).await;
    assert!(
        freed,
        "the slot was not released at the end of the stream: {view}"
    );
    let r = send(p.addr, &ask(Dialect::Anthropic, "sk-one-slot", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// W7 through the proxy: a token estimate that does not fit → 42905 `tpm limit
/// exceeded` (with the token X-RateLimit headers); the third request of a 2-a-minute
/// tier → 42902 `rpm limit exceeded` with Retry-After ≤ 60 and the request
/// X-RateLimit headers; in every dialect; refused requests reach no upstream and count
/// nothing (W4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w7_42902_and_42905_through_the_proxy() {
    let p = Proxy::start(
        r#"
[policies.small]
requests = [{ window = "1m", limit = 2 }]
tokens = [{ window = "1m", limit = 1000 }]

[tenants.t]
balance = 1_000_000_000

[keys.small]
key = "sk-small"
tenant = "t"
policy = "small"
"#,
    )
    .await;
    let k = "sk-small";
    let addr = p.addr;
    let tokens_used = move || async move { used(&usage(addr, k).await, "key", "tokens", 60) };
    let requests_used = move || async move { used(&usage(addr, k).await, "key", "requests", 60) };

    let money = move || async move { usage(addr, k).await["money"].clone() };
    let before = money().await;
    assert!(
        before["balance"].is_i64() || before["balance"].is_u64(),
        "{before}"
    );

    // A demand larger than the whole tier: 42905, waiting cannot help.
    for d in DIALECTS {
        let r = send(
            p.addr,
            &gen_for(d, d.model(), false, Some(5000)).key(d.key_at(), k),
        )
        .await;
        assert_eq!(rejection(&r, d, 42905), "tpm limit exceeded", "{d:?}");
        assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("1000"));
        assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("0"));
        assert_eq!(r.header("x-should-retry"), Some("false"), "{:?}", r.headers);
    }
    assert_eq!(requests_used().await, 0, "a 42905 counted a request");
    assert_eq!(money().await, before, "a 42905 cost money");
    assert_eq!(tokens_used().await, 0);

    // One request (17 tokens: 1 prompt + 16 output), settled.
    let ok = send(
        p.addr,
        &gen_for(Dialect::Anthropic, "claude-sonnet-4-5", false, Some(64)).key(KeyAt::XApiKey, k),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let reported = reported_tokens(Dialect::Anthropic, &ok.body);
    let (settled, view) = usage_until(addr, k, Duration::from_secs(2), |v| {
        used(v, "key", "tokens", 60) == reported
    })
    .await;
    assert!(settled, "tokens not settled to {reported}: {view}");

    // A demand that fits the tier but not what is left of it: 42905 with a Retry-After.
    let before = money().await;
    for d in DIALECTS {
        let r = send(
            p.addr,
            &gen_for(d, d.model(), false, Some(990)).key(d.key_at(), k),
        )
        .await;
        assert_eq!(rejection(&r, d, 42905), "tpm limit exceeded", "{d:?}");
        let ra: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!((1..=60).contains(&ra), "Retry-After {ra}");
        assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("1000"));
    }
    assert_eq!(requests_used().await, 1);
    assert_eq!(money().await, before, "a 42905 cost money");

    let ok = send(
        p.addr,
        &gen_for(Dialect::Gemini, "gemini-2.5-flash", false, Some(64)).key(KeyAt::XGoogApiKey, k),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(requests_used().await, 2);

    // The third request of the minute.
    let before = money().await;
    for d in DIALECTS {
        let r = send(
            p.addr,
            &gen_for(d, d.model(), false, Some(8)).key(d.key_at(), k),
        )
        .await;
        assert_eq!(rejection(&r, d, 42902), "rpm limit exceeded", "{d:?}");
        let ra: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!((1..=60).contains(&ra), "Retry-After {ra}");
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("2"));
        assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    }
    assert_eq!(requests_used().await, 2, "a 42902 counted a request");
    assert_eq!(money().await, before, "a 42902 cost money");
    assert_eq!(
        p.fake.stats().total_calls,
        2,
        "refusals reached the upstream"
    );
}

/// W8 through the proxy: a subscription without pay-as-you-go whose plan is used up is
/// refused with 42906 and the exact Chinese text (dimension, tier, recovery = the
/// Retry-After), in each dialect; the token dimension without a possible recovery gets
/// the text without a time; with pay-as-you-go the same plan falls through to the key's
/// own policy and the request passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w8_42906_through_the_proxy_in_each_dialect() {
    let p = Proxy::start(
        r#"
[policies.plan]
requests = [{ window = "1h", limit = 1 }]

[policies.plan-tokens]
tokens = [{ window = "1m", limit = 500 }]

[policies.own]
requests = [{ window = "1h", limit = 100 }]

[keys.sub-OpenAi]
key = "sk-sub-OpenAi"
subscription = { policy = "plan", pay_as_you_go = false }

[keys.sub-Anthropic]
key = "sk-sub-Anthropic"
subscription = { policy = "plan", pay_as_you_go = false }

[keys.sub-Gemini]
key = "sk-sub-Gemini"
subscription = { policy = "plan", pay_as_you_go = false }

[keys.sub-tokens]
key = "sk-sub-tokens"
subscription = { policy = "plan-tokens", pay_as_you_go = false }

[keys.payg]
key = "sk-payg"
policy = "own"
subscription = { policy = "plan", pay_as_you_go = true }
"#,
    )
    .await;
    for d in DIALECTS {
        let key = format!("sk-sub-{d:?}");
        let r = send(p.addr, &ask(d, &key, false)).await;
        assert_eq!(r.status, 200, "{d:?}: {}", r.text());
        let r = send(p.addr, &ask(d, &key, false)).await;
        let msg = rejection(&r, d, 42906);
        let ra: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!((3590..=3600).contains(&ra), "Retry-After {ra}");
        assert_eq!(
            msg,
            format!(
                "已达套餐请求次数上限（每 1 小时 1 次），约 {ra} 秒后自动恢复；如需立即继续可开启API扣费访问"
            ),
            "{d:?}"
        );
        assert_eq!(r.header("x-should-retry"), Some("false"), "wait > 60 s");
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("1"));
    }
    // Tokens: a demand larger than the tier; no recovery time in the text.
    let r = send(
        p.addr,
        &gen_for(Dialect::OpenAi, "gpt-4o-mini", false, Some(600))
            .key(KeyAt::Bearer, "sk-sub-tokens"),
    )
    .await;
    assert_eq!(
        rejection(&r, Dialect::OpenAi, 42906),
        "已达套餐Token 用量上限（每 1 分钟 500 Token）；如需立即继续可开启API扣费访问"
    );
    // Pay-as-you-go: the used-up plan falls through to the key's own policy.
    for i in 0..2 {
        let r = send(p.addr, &ask(Dialect::Gemini, "sk-payg", false)).await;
        assert_eq!(r.status, 200, "payg request {i}: {}", r.text());
    }
    let view = usage(p.addr, "sk-payg").await;
    assert_eq!(used(&view, "subscription", "requests", 3600), 1, "{view}");
    assert_eq!(used(&view, "key", "requests", 3600), 1, "{view}");
    assert_eq!(p.fake.stats().total_calls, 5);
}

/// L3 through the proxy: a client that goes away mid-stream frees its slot (the
/// gateway's in-flight count returns to 0) and the upstream request (the fake's
/// in-flight count returns to 0, the call counted as cancelled) within a bounded time,
/// in each dialect; the key can then be used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_client_disconnect_mid_stream_frees_slot_and_upstream() {
    let p = Proxy::start(
        r#"
[policies.one]
concurrency = 1

[keys.one]
key = "sk-one-slot"
policy = "one"
"#,
    )
    .await;
    let k = "sk-one-slot";
    for (i, d) in DIALECTS.into_iter().enumerate() {
        let req = ask(d, k, true)
            .header("x-fake-chunk-interval-ms", 100)
            .header("x-fake-chunks", 50);
        let mut s = open(p.addr, &req).await;
        assert_eq!(s.status, 200, "{d:?}");
        assert!(s.next_data().await.is_some());
        assert_eq!(in_flight(&usage(p.addr, k).await), 1, "{d:?}");
        assert_eq!(p.fake.in_flight(), 1, "{d:?}");
        let gone = Instant::now();
        s.disconnect();
        let (slot_freed, view) =
            usage_until(p.addr, k, Duration::from_secs(3), |v| in_flight(v) == 0).await;
        assert!(
            slot_freed,
            "{d:?}: the slot outlived the client by 3 s: {view}"
        );
        assert!(
            p.fake.wait_idle(Duration::from_secs(3)).await,
            "{d:?}: the upstream request outlived the client by 3 s"
        );
        let s = p.fake.stats();
        assert_eq!(s.cancelled, i as u64 + 1, "{d:?}: {s:?}");
        assert!(gone.elapsed() < Duration::from_secs(3));
    }
    let r = send(p.addr, &ask(Dialect::OpenAi, k, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// L3 before the response head: a client that goes away while the upstream is still
/// thinking (5 s latency) frees its slot and the upstream request within a bounded
/// time — the request future is dropped, nothing keeps running for a gone client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_client_disconnect_before_the_answer_frees_slot_and_upstream() {
    let p = Proxy::start(
        r#"
[policies.one]
concurrency = 1

[keys.one]
key = "sk-one-slot"
policy = "one"
"#,
    )
    .await;
    let k = "sk-one-slot";
    for (i, d) in DIALECTS.into_iter().enumerate() {
        let req = ask(d, k, i % 2 == 0).header("x-fake-latency-ms", 5000);
        let addr = p.addr;
        let pending = tokio::spawn(async move { open(addr, &req).await });
        let reached = eventually(WAIT, || async { p.fake.in_flight() == 1 }).await;
        assert!(reached, "{d:?}: the request never reached the upstream");
        assert_eq!(in_flight(&usage(p.addr, k).await), 1, "{d:?}");
        pending.abort(); // drops the connection with the request in flight
        let (slot_freed, view) =
            usage_until(p.addr, k, Duration::from_secs(3), |v| in_flight(v) == 0).await;
        assert!(
            slot_freed,
            "{d:?}: the slot outlived the client by 3 s: {view}"
        );
        assert!(
            p.fake.wait_idle(Duration::from_secs(3)).await,
            "{d:?}: the upstream request outlived the client by 3 s"
        );
        assert_eq!(p.fake.stats().cancelled, i as u64 + 1);
    }
    let r = send(p.addr, &ask(Dialect::Gemini, k, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// An upstream that does not answer within `server.upstream_timeout` → 50202 in the
/// client's dialect, quickly; the slot and the upstream request are released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_upstream_timeout_is_50202_and_frees_everything() {
    let p = Proxy::start(
        r#"
[server]
upstream_timeout = "300ms"

[policies.one]
concurrency = 1

[keys.one]
key = "sk-one-slot"
policy = "one"
"#,
    )
    .await;
    let k = "sk-one-slot";
    for d in DIALECTS {
        let started = Instant::now();
        let r = send(p.addr, &ask(d, k, false).header("x-fake-hang", "true")).await;
        assert_eq!(
            rejection(&r, d, 50202),
            "The model provider returned an error. Please retry.",
            "{d:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let (slot_freed, view) =
            usage_until(p.addr, k, Duration::from_secs(2), |v| in_flight(v) == 0).await;
        assert!(slot_freed, "{d:?}: {view}");
        assert!(
            p.fake.wait_idle(Duration::from_secs(2)).await,
            "{d:?}: upstream still busy"
        );
    }
}

// ------------------------------------------------------------------ E3 (known bugs)

/// E3: a forwarded answer carries the gateway's request id, in every dialect — not the
/// provider's, and not the client's own `x-request-id` either (the gateway
/// always makes its own; the client's is kept apart in the usage record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e3_forwarded_answers_carry_the_gateways_request_id() {
    let p = Proxy::start(OPEN).await;
    for d in DIALECTS {
        let r = send(p.addr, &ask(d, CLIENT, false)).await;
        assert_eq!(r.status, 200);
        let id = r.header("x-request-id").unwrap_or_default();
        assert!(
            id.starts_with("pc-"),
            "{d:?}: x-request-id {id:?} is not the gateway's"
        );
        let mine = format!("e2e-rid-{d:?}");
        let r = send(p.addr, &ask(d, CLIENT, false).header("x-request-id", &mine)).await;
        let id = r.header("x-request-id").unwrap_or_default();
        assert!(id.starts_with("pc-") && id != mine, "{d:?}: {id:?}");
    }
}

/// E3: the gateway's own answers outside the layer stack (unknown route, `/usage`
/// without a key) carry a request id too — not an empty header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e3_gateway_answers_outside_the_stack_carry_a_request_id() {
    let p = Proxy::start(OPEN).await;
    for req in [
        Req::get("/no/such/route"),
        Req::post("/v1/nothing", "{}"),
        Req::get("/usage"),
    ] {
        let r = send(p.addr, &req).await;
        assert!(r.status.is_client_error(), "{} {}", req.path, r.status);
        let id = r.header("x-request-id").unwrap_or_default();
        assert!(
            !id.is_empty(),
            "{} {}: empty x-request-id",
            req.method,
            req.path
        );
    }
}

// ------------------------------------------------------------------ P3

/// P3: a bad file fails with `path:line: reason`, for syntax/type errors (from the
/// parser), unknown fields, and references that do not resolve.
#[test]
fn p3_bad_config_fails_with_file_line_reason() {
    let good = format!("{OPEN}\n{CHANNELS}");
    assert!(Config::parse(&good).is_ok());
    let line_of = |text: &str, needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} not in the file"))
            + 1
    };
    let dir = std::env::temp_dir().join(format!("portcullis-e2e-p3-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        // (change, the line's marker, words of the reason)
        (
            "concurrency = 16",
            "concurrency = \"sixteen\"",
            "invalid type",
        ),
        ("concurrency = 16", "concurency = 16", "unknown field"),
        (
            "policy = \"open\"",
            "policy = \"gold\"",
            "unknown policy \"gold\"",
        ),
        (
            "requests = [{ window = \"1h\", limit = 100000 }]",
            "requests = [{ window = \"1 fortnight\", limit = 100000 }]",
            "invalid duration",
        ),
        (
            "models = [\"gpt-4o-mini\"]",
            "models = [\"gpt-5-nonexistent\"]",
            "gpt-5-nonexistent",
        ),
    ];
    for (i, (from, to, reason)) in cases.into_iter().enumerate() {
        assert!(good.contains(from), "{from}");
        let bad = good.replacen(from, to, 1);
        let path = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, &bad).unwrap();
        let e = Config::load(&path).expect_err(to);
        let shown = e.to_string();
        let line = line_of(&bad, to);
        let prefix = format!("{}:{line}: ", path.display());
        assert!(
            shown.starts_with(&prefix),
            "{shown:?} should start with {prefix:?}"
        );
        assert!(shown.contains(reason), "{shown:?} should say {reason:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_a_body_trickled_slower_than_body_read_timeout_gets_408_and_frees_the_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let toml = format!("[server]\nbody_read_timeout = \"300ms\"\n{E4}");
    let p = Proxy::start(&toml).await;
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {CLIENT}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{{\"model\":",
        p.addr,
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let mut buf = Vec::new();
    let read = bounded(WAIT, "the 408", async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(5).any(|w| w == b"40801") {
                break;
            }
        }
    });
    read.await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("40801"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(p.fake.stats().total_calls, 0);
    // The key's slot was given back (the connection is still open).
    let freed = eventually(WAIT, || async {
        in_flight(&usage(p.addr, CLIENT).await) == 0
    })
    .await;
    assert!(freed, "the slot of the slow request is free");
    drop(s);
    let r = send(p.addr, &ask(Dialect::OpenAi, CLIENT, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}
