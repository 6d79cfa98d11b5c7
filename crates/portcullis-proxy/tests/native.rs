//! Native errors on request (E1): `/native/<vendor route>` serves the same
//! requests as the vendor route, through real sockets, and answers every rejection in
//! the native body (`{"code":42906,"message":…}`) with the gateway's 429xx/4xx/5xx
//! codes, Retry-After and X-RateLimit headers.

mod common;

use common::*;
use serde_json::json;

const CONFIG: &str = r#"
[policies.one]
requests = [{ window = "1h", limit = 1 }]

[keys.a]
key = "sk-native-a"
policy = "one"

[keys.b]
key = "sk-native-b"
policy = "one"

[keys.c]
key = "sk-native-c"
policy = "one"
"#;

/// The native body of a rejection: its code, and its message.
fn native(r: &Resp, code: u32) -> String {
    assert_eq!(r.status.as_u16(), (code / 100) as u16, "{}", r.text());
    assert!(r.header("x-request-id").is_some(), "{:?}", r.headers);
    let v = r.json();
    assert_eq!(v["code"], json!(code), "{v}");
    assert_eq!(v["error"]["code"], json!(code.to_string()), "{v}");
    v["message"].as_str().expect("message").to_owned()
}

fn natively(mut req: Req) -> Req {
    req.path = format!("/native{}", req.path);
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e1_native_routes_serve_vendor_requests_and_answer_rejections_natively() {
    let p = Proxy::start(CONFIG).await;
    for (d, key) in [
        (Dialect::OpenAi, "sk-native-a"),
        (Dialect::Anthropic, "sk-native-b"),
        (Dialect::Gemini, "sk-native-c"),
    ] {
        // Served as the vendor route serves it: the vendor's answer, streamed or not.
        let r = send(p.addr, &natively(ask(d, key, false))).await;
        assert_eq!(r.status, 200, "{d:?}: {}", r.text());
        // The second request of the hour: 42902 in the native body, with its headers.
        let r = send(p.addr, &natively(ask(d, key, false))).await;
        let msg = native(&r, 42902);
        assert!(!msg.is_empty(), "{d:?}");
        let ra: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!((3590..=3600).contains(&ra), "{d:?}: Retry-After {ra}");
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("1"), "{d:?}");
        // The vendor route answers the same rejection in the vendor's dialect.
        let r = send(p.addr, &ask(d, key, false)).await;
        rejection(&r, d, 42902);
    }
    // A rejection before any limit (an unknown key) is native too.
    let r = send(p.addr, &natively(ask(Dialect::OpenAi, "sk-nobody", false))).await;
    native(&r, 40101);
    // Gemini's unpriced methods are not served under /native either.
    let r = send(
        p.addr,
        &Req::post(
            "/native/v1beta/models/gemini-2.5-flash:batchGenerateContent",
            "{}",
        )
        .key(KeyAt::XGoogApiKey, "sk-native-c"),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(
        p.fake.stats().total_calls,
        3,
        "only the admitted requests went upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e1_a_key_set_to_native_errors_gets_them_on_every_route() {
    let p = Proxy::start(
        r#"
[policies.one]
requests = [{ window = "1h", limit = 1 }]

[keys.native]
key = "sk-native-everywhere"
policy = "one"
errors = "native"

[keys.vendor]
key = "sk-vendor-errors"
policy = "one"
"#,
    )
    .await;
    for d in [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini] {
        let r = send(p.addr, &ask(d, "sk-native-everywhere", false)).await;
        let code = if d == Dialect::OpenAi { 200 } else { 429 };
        assert_eq!(r.status.as_u16(), code, "{d:?}: {}", r.text());
        if code == 429 {
            native(&r, 42902);
        }
    }
    // Another key on the same routes keeps the route's dialect.
    let r = send(p.addr, &ask(Dialect::Anthropic, "sk-vendor-errors", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(p.addr, &ask(Dialect::Anthropic, "sk-vendor-errors", false)).await;
    rejection(&r, Dialect::Anthropic, 42902);
}
