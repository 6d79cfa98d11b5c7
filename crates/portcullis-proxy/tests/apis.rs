//! The other APIs clients call (P6), through real sockets and every layer:
//! embeddings (OpenAI and Gemini), token counting (Anthropic and Gemini), and Gemini's
//! methods under both `/v1beta/models/…` and `/v1/models/…`.

mod common;
#[path = "../../portcullis-redis/tests/common/mod.rs"]
mod redis_server;

use common::*;
use portcullis_fake_upstream::{Behavior, ErrorKind, Route};
use serde_json::Value;
use std::time::Duration;

const KEY: &str = "sk-apis";
const GEMINI_KEY: &str = "g-apis";

/// One key with request and token tiers and a tenant balance, an OpenAI embedding
/// model and the Gemini models on the fake upstream.
fn config(balance: i64) -> String {
    format!(
        r#"
[policies.p]
concurrency = 8
requests = [{{ window = "1h", limit = 1000 }}]
tokens = [{{ window = "1h", limit = 10000000 }}]

[tenants.acme]
balance = {balance}

[keys.k]
key = "{KEY}"
tenant = "acme"
policy = "p"

[keys.g]
key = "{GEMINI_KEY}"
tenant = "acme"
policy = "p"

[channels.openai-a]
vendor = "openai"
base_url = "fake://"
credential = "sk-upstream-openai"
models = ["gpt-4o-mini", "text-embedding-3-small"]

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential = "sk-upstream-anthropic"
models = ["claude-sonnet-4-5"]

[channels.gemini-a]
vendor = "gemini"
base_url = "fake://"
credential = "upstream-gemini"
models = ["gemini-2.5-flash", "text-embedding-004"]

[models.gpt-4o-mini]
price = {{ input_per_mtok = 150_000, output_per_mtok = 600_000 }}
max_output_tokens = 64

[models.text-embedding-3-small]
price = {{ input_per_mtok = 20_000_000 }}

[models.claude-sonnet-4-5]
price = {{ input_per_mtok = 3_000_000, output_per_mtok = 15_000_000 }}
max_output_tokens = 64

[models."gemini-2.5-flash"]
price = {{ input_per_mtok = 300_000, output_per_mtok = 2_500_000 }}
max_output_tokens = 64

[models.text-embedding-004]
price = {{ input_per_mtok = 10_000_000 }}
"#
    )
}

fn balance(view: &Value) -> i64 {
    view["money"]["balance"].as_i64().expect("balance")
}

fn gemini(path: &str, body: &str) -> Req {
    Req::post(path, body.to_owned()).header("x-goog-api-key", GEMINI_KEY)
}

/// Waits (bounded) until the key's request tier counts `n` requests and returns the view.
async fn after_requests(p: &Proxy, key: &str, n: u64) -> Value {
    let (ok, view) = usage_until(p.addr, key, Duration::from_secs(2), |v| {
        used(v, "key", "requests", 3600) == n && in_flight(v) == 0
    })
    .await;
    assert!(ok, "{n} requests never counted: {view}");
    view
}

/// P6: an OpenAI embeddings request (string and list input) is answered, counted in
/// the token tier at the input tokens the provider reported (no output reserved or
/// counted), and billed at the input price.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_openai_embeddings_count_input_tokens_in_the_token_tier_and_bill_them() {
    let p = Proxy::start(&config(1_000_000_000)).await;
    let before = balance(&usage(p.addr, KEY).await);
    let mut reported = 0;
    for input in [
        r#""The food was delicious and the waiter was kind.""#,
        r#"["first passage to embed", "second passage to embed", "third"]"#,
    ] {
        let body = format!(
            r#"{{"model":"text-embedding-3-small","input":{input},"encoding_format":"float"}}"#
        );
        let r = send(
            p.addr,
            &Req::post("/v1/embeddings", body).key(KeyAt::Bearer, KEY),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["object"], "list", "{v}");
        assert!(!v["data"].as_array().expect("data").is_empty(), "{v}");
        let tokens = v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens");
        assert!(tokens > 0);
        reported += tokens;
    }
    assert_eq!(p.fake.stats().calls(Route::Embeddings), 2);
    let view = after_requests(&p, KEY, 2).await;
    assert_eq!(used(&view, "key", "tokens", 3600), reported, "{view}");
    // 20 minor units per input token (20,000,000 per million), rounded up per request.
    let charged = before - balance(&view);
    assert!(
        charged >= (reported * 20) as i64 && charged <= (reported * 20 + 2) as i64,
        "charged {charged} for {reported} input tokens"
    );
}

/// P6: Gemini embeddings under the stable `/v1/models/…` and `/v1beta/models/…` paths;
/// Gemini reports no usage for them, so the gateway settles at its own input estimate
/// (never pending) and counts it in the token tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_gemini_embeddings_under_both_versions_settle_at_the_input_estimate() {
    let p = Proxy::start(&config(1_000_000_000)).await;
    let before = balance(&usage(p.addr, GEMINI_KEY).await);
    let text = "a passage of some length to embed ".repeat(10);
    let single = format!(r#"{{"content":{{"parts":[{{"text":"{text}"}}]}}}}"#);
    let r = send(
        p.addr,
        &gemini("/v1/models/text-embedding-004:embedContent", &single),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["embedding"]["values"].is_array(), "{}", r.text());
    let batch = format!(
        r#"{{"requests":[{{"model":"models/text-embedding-004","content":{{"parts":[{{"text":"{text}"}}]}}}},
            {{"model":"models/text-embedding-004","content":{{"parts":[{{"text":"{text}"}}]}}}}]}}"#
    );
    let r = send(
        p.addr,
        &gemini(
            "/v1beta/models/text-embedding-004:batchEmbedContents",
            &batch,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["embeddings"].as_array().map(Vec::len), Some(2));
    let view = after_requests(&p, GEMINI_KEY, 2).await;
    let tokens = used(&view, "key", "tokens", 3600);
    // The text is 340 bytes a copy: at least 340 / 4 tokens each, three copies in all.
    assert!(tokens >= 3 * 85, "{tokens} tokens counted: {view}");
    assert_eq!(
        view["money"]["key_pending_reconciliation"].as_i64(),
        Some(0),
        "{view}"
    );
    assert_eq!(before - balance(&view), tokens as i64 * 10, "{view}");
}

/// P6: token counting is free and counted as a request only: no token in any tier, no
/// money — it is answered even with an empty balance, where generation is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_count_tokens_is_counted_as_a_request_never_billed_nor_in_token_tiers() {
    let p = Proxy::start(&config(0)).await;
    let r = send(
        p.addr,
        &Req::post(
            "/v1/messages/count_tokens",
            r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"Count me, please."}]}"#,
        )
        .key(KeyAt::XApiKey, KEY),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.json()["input_tokens"].as_u64().is_some_and(|n| n > 0),
        "{}",
        r.text()
    );
    for path in [
        "/v1beta/models/gemini-2.5-flash:countTokens",
        "/v1/models/gemini-2.5-flash:countTokens",
    ] {
        let r = send(
            p.addr,
            &gemini(
                path,
                r#"{"contents":[{"parts":[{"text":"Count me, please."}]}]}"#,
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(
            r.json()["totalTokens"].as_u64().is_some_and(|n| n > 0),
            "{}",
            r.text()
        );
    }
    for (key, n) in [(KEY, 1), (GEMINI_KEY, 2)] {
        let view = after_requests(&p, key, n).await;
        assert_eq!(used(&view, "key", "tokens", 3600), 0, "{view}");
        assert_eq!(balance(&view), 0, "{view}");
        assert_eq!(
            view["money"]["key_pending_reconciliation"].as_i64(),
            Some(0),
            "{view}"
        );
    }
    // Generation with the same empty balance is refused (402, B1), unsent.
    let calls = p.fake.stats().total_calls;
    let r = send(p.addr, &ask(Dialect::Anthropic, KEY, false)).await;
    rejection(&r, Dialect::Anthropic, 40201);
    assert_eq!(p.fake.stats().total_calls, calls);
}

/// P6 / P2: Gemini's generation is served under the stable `/v1/models/…` path the
/// official SDK calls by default, as under `/v1beta`; methods the gateway does not
/// price stay 404 under both, and are never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_gemini_v1_path_is_served_and_unpriced_methods_stay_404_unsent() {
    let p = Proxy::start(&config(1_000_000_000)).await;
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"Hello"}]}]}"#;
    for path in [
        "/v1/models/gemini-2.5-flash:generateContent",
        "/v1beta/models/gemini-2.5-flash:generateContent",
    ] {
        let r = send(p.addr, &gemini(path, body)).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(r.json()["usageMetadata"].is_object(), "{}", r.text());
    }
    let calls = p.fake.stats().total_calls;
    for path in [
        "/v1/models/gemini-2.5-flash:batchGenerateContent",
        "/v1beta/models/gemini-2.5-flash:predictLongRunning",
        "/v1/models/gemini-2.5-flash:generateAnswer",
        "/v1/images/variations",
        "/v1/audio/speech",
        "/v1/completions",
        "/v1/responses/resp_1/unknown",
    ] {
        let r = send(p.addr, &gemini(path, body).key(KeyAt::Bearer, KEY)).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }
    assert_eq!(
        p.fake.stats().total_calls,
        calls,
        "an unpriced method was sent"
    );
}

// ------------------------------------------------------------------ Responses, images, videos

const OBJ_KEY: &str = "sk-objects";

/// Two OpenAI channels of one model (two credentials), an image model and a video
/// model; one key with request, token, image and video tiers and a tenant balance.
fn objects_config() -> String {
    format!(
        r#"
[policies.p]
concurrency = 8
requests = [{{ window = "1h", limit = 1000 }}]
tokens = [{{ window = "1h", limit = 10000000 }}]
images = [{{ window = "1h", limit = 2 }}]
videos = [{{ window = "1h", limit = 5 }}]

[tenants.acme]
balance = 1_000_000_000

[keys.k]
key = "{OBJ_KEY}"
tenant = "acme"
policy = "p"

[failover]
backoff_base = "1ms"
backoff_cap = "2ms"

[channels.one]
vendor = "openai"
base_url = "fake://"
credential = "cred-one"
models = ["gpt-4o-mini", "gpt-image-1", "sora-2"]

[channels.two]
vendor = "openai"
base_url = "fake://"
credential = "cred-two"
models = ["gpt-4o-mini", "gpt-image-1", "sora-2"]

[models.gpt-4o-mini]
price = {{ input_per_mtok = 1_000_000, output_per_mtok = 1_000_000 }}
max_output_tokens = 64

[models.gpt-image-1]
price = {{ per_image = 40_000 }}

[models.sora-2]
price = {{ per_video = 500_000 }}
"#
    )
}

fn responses(body: &str) -> Req {
    Req::post("/v1/responses", body.to_owned()).key(KeyAt::Bearer, OBJ_KEY)
}

fn get(path: &str) -> Req {
    Req::get(path).key(KeyAt::Bearer, OBJ_KEY)
}

fn delete(path: &str) -> Req {
    let mut r = get(path);
    r.method = hyper::Method::DELETE;
    r
}

/// The `data:` JSON documents of an SSE body.
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).expect("event JSON"))
        .collect()
}

/// P6: the Responses API answered whole and streamed; each is counted in the token
/// tier at the usage the provider reported (the stream's in `response.completed`) and
/// billed from it, nothing left pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_responses_are_answered_streamed_and_billed_from_reported_usage() {
    let p = Proxy::start(&objects_config()).await;
    let before = balance(&usage(p.addr, OBJ_KEY).await);
    let r = send(
        p.addr,
        &responses(r#"{"model":"gpt-4o-mini","input":"Say hi","max_output_tokens":32}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "response", "{v}");
    let whole = v["usage"]["total_tokens"].as_u64().expect("usage");
    let r = send(
        p.addr,
        &responses(
            r#"{"model":"gpt-4o-mini","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"Say hi"}]}]}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let evs = events(&r.text());
    assert!(
        evs.iter()
            .any(|e| e["type"] == "response.output_text.delta")
    );
    let done = evs.last().expect("events");
    assert_eq!(done["type"], "response.completed", "{done}");
    let streamed = done["response"]["usage"]["total_tokens"]
        .as_u64()
        .expect("usage");
    let view = after_requests(&p, OBJ_KEY, 2).await;
    assert_eq!(
        used(&view, "key", "tokens", 3600),
        whole + streamed,
        "{view}"
    );
    assert_eq!(before - balance(&view), (whole + streamed) as i64, "{view}");
    assert_eq!(view["money"]["key_pending_reconciliation"], 0, "{view}");
}

/// P6 / F4: a Responses stream that fails before its first delta is retried on the
/// other channel and the client never sees the failure; one that fails after it is
/// not replayed — the client gets what was sent and the error event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_responses_stream_cut_before_its_first_delta_fails_over_after_it_never() {
    let p = Proxy::start(&objects_config()).await;
    let stream = r#"{"model":"gpt-4o-mini","stream":true,"input":"Tell a story"}"#;
    p.fake
        .push_script(Behavior::error(ErrorKind::ServerError).with_fail_after_chunks(0));
    let r = send(p.addr, &responses(stream)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(
        !text.contains("event: error"),
        "the client never sees it: {text}"
    );
    assert_eq!(events(&text).last().unwrap()["type"], "response.completed");
    assert_eq!(p.fake.stats().total_calls, 2, "failed over once");

    p.fake
        .push_script(Behavior::error(ErrorKind::ServerError).with_fail_after_chunks(2));
    let r = send(p.addr, &responses(stream)).await;
    assert_eq!(r.status, 200);
    let evs = events(&r.text());
    let deltas = evs
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .count();
    assert_eq!(deltas, 2, "{evs:?}");
    assert_eq!(evs.last().unwrap()["type"], "error", "{evs:?}");
    assert_eq!(
        p.fake.stats().total_calls,
        3,
        "no replay after the first delta"
    );
}

/// P6: a response is continued (`previous_response_id`), read, listed, cancelled and
/// deleted only on the channel whose credential created it — even while that channel
/// fails and the other is healthy — and a response the gateway never saw is a 404,
/// never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_previous_response_id_goes_to_the_creating_channel_never_elsewhere() {
    let p = Proxy::start(&objects_config()).await;
    let r = send(
        p.addr,
        &responses(r#"{"model":"gpt-4o-mini","input":"Remember the number 7."}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let (creator, other) = if p.fake.stats().calls_for("cred-one") == 1 {
        ("cred-one", "cred-two")
    } else {
        ("cred-two", "cred-one")
    };
    let other_calls = p.fake.stats().calls_for(other);
    // The creator fails; the other channel is healthy. The continuation is not moved.
    p.fake
        .set_default_for(creator, Behavior::error(ErrorKind::ServerError));
    let next = format!(
        r#"{{"model":"gpt-4o-mini","previous_response_id":"{id}","input":"Which number?"}}"#
    );
    let r = send(p.addr, &responses(&next)).await;
    assert!(r.status.is_server_error(), "{} {}", r.status, r.text());
    assert_eq!(
        p.fake.stats().calls_for(other),
        other_calls,
        "sent elsewhere"
    );
    p.fake.set_default_for(creator, Behavior::ok());
    let r = send(p.addr, &responses(&next)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let created = p.fake.stats().calls_for(creator);
    for req in [
        get(&format!("/v1/responses/{id}")),
        get(&format!("/v1/responses/{id}/input_items")),
        Req::post(format!("/v1/responses/{id}/cancel"), Vec::new()).key(KeyAt::Bearer, OBJ_KEY),
        delete(&format!("/v1/responses/{id}")),
    ] {
        let r = send(p.addr, &req).await;
        assert_eq!(r.status, 200, "{} {}: {}", req.method, req.path, r.text());
    }
    assert_eq!(p.fake.stats().calls_for(creator), created + 4);
    assert_eq!(
        p.fake.stats().calls_for(other),
        other_calls,
        "sent elsewhere"
    );
    let calls = p.fake.stats().total_calls;
    let r = send(p.addr, &get("/v1/responses/resp_never_seen")).await;
    rejection(&r, Dialect::OpenAi, 40401);
    assert_eq!(
        p.fake.stats().total_calls,
        calls,
        "an unknown object was sent"
    );
}

/// P6: image generation counts `n` images against the image tiers and bills the
/// `per_image` price per image returned; a request for more images than a tier allows
/// is refused before it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_images_count_n_against_the_image_tier_and_too_many_are_refused_unsent() {
    let p = Proxy::start(&objects_config()).await;
    let before = balance(&usage(p.addr, OBJ_KEY).await);
    let calls = p.fake.stats().total_calls;
    let generate = |n: u32| {
        Req::post(
            "/v1/images/generations",
            format!(r#"{{"model":"gpt-image-1","prompt":"a lighthouse","n":{n}}}"#),
        )
        .key(KeyAt::Bearer, OBJ_KEY)
    };
    let r = send(p.addr, &generate(3)).await;
    // 42902 for images as for requests (W7: the message says rpm); the usage view
    // names the image tier, untouched by the refusal.
    rejection(&r, Dialect::OpenAi, 42902);
    assert_eq!(
        p.fake.stats().total_calls,
        calls,
        "refused before it was sent"
    );
    let view = usage(p.addr, OBJ_KEY).await;
    assert_eq!(used(&view, "key", "images", 3600), 0, "{view}");
    assert_eq!(used(&view, "key", "requests", 3600), 0, "{view}");
    let r = send(p.addr, &generate(2)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"].as_array().map(Vec::len), Some(2));
    let view = after_requests(&p, OBJ_KEY, 1).await;
    assert_eq!(used(&view, "key", "images", 3600), 2, "{view}");
    assert_eq!(before - balance(&view), 2 * 40_000, "{view}");
}

/// P6 / B7: a video job counts one video and holds `per_video` at creation, pending
/// until its end is known (here, with no records database ledger, nothing resolves it
/// automatically: it stays held); polling it, downloading it and deleting it go to the
/// creating channel and count as requests only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_video_jobs_hold_one_video_at_creation_and_polls_go_home_uncounted() {
    let p = Proxy::start(&objects_config()).await;
    let before = balance(&usage(p.addr, OBJ_KEY).await);
    let r = send(
        p.addr,
        &Req::post(
            "/v1/videos",
            r#"{"model":"sora-2","prompt":"waves at dusk","seconds":"4"}"#,
        )
        .key(KeyAt::Bearer, OBJ_KEY),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let creator = if p.fake.stats().calls_for("cred-one") == 1 {
        "cred-one"
    } else {
        "cred-two"
    };
    for req in [
        get(&format!("/v1/videos/{id}")),
        get(&format!("/v1/videos/{id}/content")),
        delete(&format!("/v1/videos/{id}")),
    ] {
        let r = send(p.addr, &req).await;
        assert_eq!(r.status, 200, "{}: {}", req.path, r.text());
    }
    assert_eq!(p.fake.stats().calls_for(creator), 4, "every poll went home");
    let view = after_requests(&p, OBJ_KEY, 4).await;
    assert_eq!(used(&view, "key", "videos", 3600), 1, "{view}");
    assert_eq!(used(&view, "key", "tokens", 3600), 0, "{view}");
    // B7: held, not charged: the job's price is pending reconciliation.
    assert_eq!(before - balance(&view), 0, "{view}");
    assert_eq!(
        view["money"]["tenant_pending_reconciliation"].as_i64(),
        Some(500_000),
        "{view}"
    );
    let r = send(p.addr, &get("/v1/videos/video_unknown/content")).await;
    rejection(&r, Dialect::OpenAi, 40401);
}

/// P6 / D1: two gateway instances on one Redis: a response created through one is
/// continued and read through the other on the channel that created it (the homes are
/// in Redis, not only in the instance that saw the answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_object_homes_are_shared_by_every_instance_on_redis() {
    let redis = redis_server::RedisServer::start();
    let fake = portcullis_fake_upstream::FakeUpstream::start().await;
    let mut addrs = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let mut config = portcullis_proxy::Config::parse(&objects_config()).expect("config");
        config.set_store_url(redis.url());
        let (addr, server) = serve_opened(config, fake.base_url()).await;
        addrs.push(addr);
        servers.push(server);
    }
    let r = send(
        addrs[0],
        &responses(r#"{"model":"gpt-4o-mini","input":"Remember 7."}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let (creator, other) = if fake.stats().calls_for("cred-one") == 1 {
        ("cred-one", "cred-two")
    } else {
        ("cred-two", "cred-one")
    };
    // The write to Redis is off the response path: give it a bounded moment.
    let found = eventually(WAIT, || async {
        send(addrs[1], &get(&format!("/v1/responses/{id}")))
            .await
            .status
            == 200
    })
    .await;
    assert!(found, "the other instance never found the response's home");
    for _ in 0..4 {
        let next =
            format!(r#"{{"model":"gpt-4o-mini","previous_response_id":"{id}","input":"Which?"}}"#);
        let r = send(addrs[1], &responses(&next)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(
        fake.stats().calls_for(other),
        0,
        "sent to another credential"
    );
    assert!(fake.stats().calls_for(creator) >= 6);
    for s in servers {
        s.abort();
    }
}

/// P6: an image edit (multipart: the images are files) counts `n` images against the
/// image tier and bills `per_image` per image returned, like a generation; a body that
/// is not multipart is a 400, unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_image_edits_are_read_from_multipart_and_count_n_images() {
    let p = Proxy::start(&objects_config()).await;
    let before = balance(&usage(p.addr, OBJ_KEY).await);
    let mut body = Vec::new();
    let field = |name: &str, value: &str| {
        format!("--XbOuNdX\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
    };
    body.extend_from_slice(field("model", "gpt-image-1").as_bytes());
    body.extend_from_slice(field("prompt", "add a red boat").as_bytes());
    body.extend_from_slice(field("n", "2").as_bytes());
    body.extend_from_slice(
        b"--XbOuNdX\r\nContent-Disposition: form-data; name=\"image[]\"; filename=\"in.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n\0\0\0\rIHDR\r\n--XbOuNdX--\r\n",
    );
    let mut edit = Req::post("/v1/images/edits", body).key(KeyAt::Bearer, OBJ_KEY);
    edit.headers.retain(|(k, _)| k != "content-type");
    let edit = edit.header("content-type", "multipart/form-data; boundary=XbOuNdX");
    let r = send(p.addr, &edit).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["data"].as_array().map(Vec::len),
        Some(2),
        "{}",
        r.text()
    );
    assert_eq!(p.fake.stats().calls(Route::ImageEdits), 1);
    let view = after_requests(&p, OBJ_KEY, 1).await;
    assert_eq!(used(&view, "key", "images", 3600), 2, "{view}");
    assert_eq!(before - balance(&view), 2 * 40_000, "{view}");
    let calls = p.fake.stats().total_calls;
    let r = send(
        p.addr,
        &Req::post(
            "/v1/images/edits",
            r#"{"model":"gpt-image-1","prompt":"x"}"#,
        )
        .key(KeyAt::Bearer, OBJ_KEY),
    )
    .await;
    let msg = rejection(&r, Dialect::OpenAi, 40001);
    assert!(msg.contains("multipart"), "{msg}");
    assert_eq!(p.fake.stats().total_calls, calls);
}
