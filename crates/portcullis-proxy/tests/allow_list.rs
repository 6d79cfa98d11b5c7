//! P2: what reaches the provider and what comes back, both ways
//! from an allow-list, through real sockets: client → gateway → the bundled fake
//! upstream, every check on the fake's side made from what it recorded.

mod common;

use common::*;
use portcullis_fake_upstream::{RecordedRequest, Route};
use portcullis_proxy::Config;
use std::collections::BTreeSet;

/// One key on a policy that never binds.
const OPEN: &str = r#"
[policies.open]
concurrency = 16

[keys.client]
key = "sk-client-allow-9d2e"
policy = "open"
"#;
const CLIENT: &str = "sk-client-allow-9d2e";

/// The header names a recorded upstream request carried, without the two the
/// gateway's HTTP client writes itself (`host`, `content-length`).
fn names(rec: &RecordedRequest) -> BTreeSet<String> {
    rec.headers
        .keys()
        .map(|n| n.as_str().to_owned())
        .filter(|n| n != "host" && n != "content-length")
        .collect()
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// Gemini methods the gateway does not price: each answered 404 in Gemini's shape
/// (with or without a key), none reaching the fake; the priced ones still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_unpriced_gemini_method_never_reaches_upstream() {
    let p = Proxy::start(OPEN).await;
    let model = Dialect::Gemini.model();
    let body = gen_for(Dialect::Gemini, model, false, None).body;
    let forbidden = [
        format!("/v1beta/models/{model}:batchGenerateContent"),
        format!("/v1beta/models/{model}:predictLongRunning"),
        format!("/v1beta/models/{model}:predict"),
        format!("/v1beta/models/{model}:generateAnswer"),
        format!("/v1/models/{model}:batchGenerateContent"),
        format!("/v1/models/{model}:predictLongRunning"),
        // Embeddings and token counting are served (P6), but not after another method.
        format!("/v1beta/models/{model}:generateContent:embedContent"),
        // The method is what follows the last colon.
        format!("/v1beta/models/{model}:generateContent:batchGenerateContent"),
        // Case matters: Google's methods are camelCase.
        format!("/v1beta/models/{model}:GenerateContent"),
        // A colon written as %3A is no method at all.
        format!("/v1beta/models/{model}%3AgenerateContent"),
        format!("/v1beta/models/{model}"),
        format!("/v1beta/models/{model}:batchGenerateContent?alt=sse"),
    ];
    for path in &forbidden {
        for with_key in [true, false] {
            let mut req = Req::post(path.clone(), body.clone());
            if with_key {
                req = req.key(KeyAt::XGoogApiKey, CLIENT);
            }
            let r = send(p.addr, &req).await;
            let msg = rejection(&r, Dialect::Gemini, 40401);
            assert!(msg.contains("No route"), "{path}: {msg}");
        }
    }
    let s = p.fake.stats();
    assert_eq!(
        s.total_calls, 0,
        "forbidden methods reached the fake: {:?}",
        s.recent_requests
    );

    // The generation methods pass, on the same model and key.
    for stream in [false, true] {
        let r = send(p.addr, &ask(Dialect::Gemini, CLIENT, stream)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let s = p.fake.stats();
    assert_eq!(s.total_calls, 2);
    assert_eq!(s.calls(Route::GenerateContent), 1);
    assert_eq!(s.calls(Route::StreamGenerateContent), 1);
    assert_eq!(s.calls(Route::Other), 0);
}

/// Every place a client may put a credential, its cookies, the headers that pick an
/// organisation or project on the operator's account, forwarding and hop-by-hop
/// headers: none reaches the fake, in any dialect, streamed or not. What arrives is
/// exactly the built-in list, the vendor's configured headers and the channel's
/// credential; of the query only Gemini's `alt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_forbidden_request_headers_never_reach_upstream() {
    let p = Proxy::start(OPEN).await;
    let secrets = [
        "sk-client-allow-9d2e",
        "sk-azure-style-client-key",
        "session=client-cookie-value",
        "org-client-chosen",
        "proj-client-chosen",
        "10.9.8.7",
        "client-goog-project",
        "Basic cHJveHk6c2VjcmV0",
        "access-token-from-client",
        "quota-user-from-client",
        "client-agent/1.0",
    ];
    let mut sent = 0;
    for d in DIALECTS {
        for stream in [false, true] {
            let mut req = ask(d, CLIENT, stream)
                .header("api-key", "sk-azure-style-client-key")
                .header("cookie", "session=client-cookie-value")
                .header("openai-organization", "org-client-chosen")
                .header("openai-project", "proj-client-chosen")
                .header("x-forwarded-for", "10.9.8.7")
                .header("forwarded", "for=10.9.8.7")
                .header("x-real-ip", "10.9.8.7")
                .header("x-goog-user-project", "client-goog-project")
                .header("proxy-authorization", "Basic cHJveHk6c2VjcmV0")
                .header("user-agent", "client-agent/1.0")
                .header("accept", "application/json")
                .header("idempotency-key", format!("idem-{d:?}-{stream}"))
                .header("anthropic-version", "2023-06-01")
                .header("anthropic-beta", "tools-2024-04-04");
            if d == Dialect::Gemini {
                let sep = if req.path.contains('?') { '&' } else { '?' };
                req.path = format!(
                    "{}{sep}key={CLIENT}&access_token=access-token-from-client&quotaUser=quota-user-from-client",
                    req.path
                );
            }
            let r = send(p.addr, &req).await;
            assert_eq!(r.status, 200, "{d:?} stream={stream}: {}", r.text());
            sent += 1;
        }
    }
    let s = p.fake.stats();
    assert_eq!(s.total_calls, sent);
    for secret in secrets {
        assert!(!s.saw_anywhere(secret), "the fake saw {secret:?}");
    }
    let built_in = ["content-type", "accept", "x-request-id", "idempotency-key"];
    for rec in &s.recent_requests {
        let (credential, extra): (&str, &[&str]) = match rec.route {
            Route::ChatCompletions => ("authorization", &[]),
            Route::Messages => ("x-api-key", &["anthropic-version", "anthropic-beta"]),
            Route::GenerateContent | Route::StreamGenerateContent => ("x-goog-api-key", &[]),
            other => panic!("unexpected route {other:?}"),
        };
        let mut want = set(&built_in);
        want.insert(credential.to_owned());
        want.extend(extra.iter().map(|s| (*s).to_owned()));
        assert_eq!(names(rec), want, "{:?} {}", rec.route, rec.path_and_query);
        let id = rec.headers["x-request-id"].to_str().unwrap();
        assert!(id.starts_with("pc-"), "the gateway's request id: {id}");
        if matches!(rec.route, Route::StreamGenerateContent) {
            assert!(
                rec.path_and_query
                    .ends_with(":streamGenerateContent?alt=sse"),
                "only alt is kept: {}",
                rec.path_and_query
            );
        } else {
            assert!(!rec.path_and_query.contains('?'), "{}", rec.path_and_query);
        }
    }
}

/// The vendor lists are the operator's: `openai-beta` reaches an OpenAI channel only
/// when `[forwarding] openai_headers` names it, and an empty Anthropic list keeps
/// `anthropic-beta` back (the gateway still sends its own `anthropic-version`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_vendor_header_lists_come_from_config() {
    let send_both = |p: &Proxy| {
        let addr = p.addr;
        async move {
            let o = send(
                addr,
                &ask(Dialect::OpenAi, CLIENT, false).header("openai-beta", "assistants=v2"),
            )
            .await;
            assert_eq!(o.status, 200, "{}", o.text());
            let a = send(
                addr,
                &ask(Dialect::Anthropic, CLIENT, false)
                    .header("anthropic-beta", "prompt-caching-2024-07-31"),
            )
            .await;
            assert_eq!(a.status, 200, "{}", a.text());
        }
    };
    let header_of = |p: &Proxy, route: Route, name: &str| -> Option<String> {
        p.fake
            .stats()
            .recent_requests
            .iter()
            .find(|r| r.route == route)
            .and_then(|r| r.headers.get(name))
            .map(|v| v.to_str().unwrap().to_owned())
    };

    let default = Proxy::start(OPEN).await;
    send_both(&default).await;
    assert_eq!(
        header_of(&default, Route::ChatCompletions, "openai-beta"),
        None
    );
    assert_eq!(
        header_of(&default, Route::Messages, "anthropic-beta").as_deref(),
        Some("prompt-caching-2024-07-31")
    );

    let configured = Proxy::start(&format!(
        "[forwarding]\nopenai_headers = [\"OpenAI-Beta\"]\nanthropic_headers = []\n{OPEN}"
    ))
    .await;
    send_both(&configured).await;
    assert_eq!(
        header_of(&configured, Route::ChatCompletions, "openai-beta").as_deref(),
        Some("assistants=v2")
    );
    assert_eq!(
        header_of(&configured, Route::Messages, "anthropic-beta"),
        None
    );
    assert_eq!(
        header_of(&configured, Route::Messages, "anthropic-version").as_deref(),
        Some("2023-06-01")
    );
}

/// The fake answers with `set-cookie`, `server` and its account's organisation header
/// (checked directly); through the gateway none of them reaches the client, in any
/// dialect, streamed or not, while `content-type`, the gateway's `x-request-id` and
/// the provider's request id (as `x-upstream-request-id`) do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_provider_cookie_and_server_headers_never_reach_the_client() {
    let p = Proxy::start(OPEN).await;
    let never = [
        "set-cookie",
        "server",
        "openai-organization",
        "anthropic-organization-id",
        "request-id",
    ];
    // The fake does send them: the check below can fail.
    let direct = send(
        p.fake.addr(),
        &gen_for(Dialect::OpenAi, Dialect::OpenAi.model(), false, None)
            .key(KeyAt::Bearer, CRED_OPENAI),
    )
    .await;
    assert_eq!(direct.status, 200);
    for h in [
        "set-cookie",
        "server",
        "openai-organization",
        "x-request-id",
    ] {
        assert!(direct.header(h).is_some(), "the fake sends {h}: {direct:?}");
    }
    let direct = send(
        p.fake.addr(),
        &gen_for(Dialect::Anthropic, Dialect::Anthropic.model(), false, None)
            .key(KeyAt::XApiKey, CRED_ANTHROPIC),
    )
    .await;
    assert!(direct.header("anthropic-organization-id").is_some());
    assert!(direct.header("request-id").is_some());

    for d in DIALECTS {
        for stream in [false, true] {
            let r = send(p.addr, &ask(d, CLIENT, stream)).await;
            assert_eq!(r.status, 200, "{d:?}: {}", r.text());
            for h in never {
                assert!(
                    r.header(h).is_none(),
                    "{d:?} stream={stream}: {h} reached the client: {:?}",
                    r.headers
                );
            }
            assert!(r.header("content-type").is_some());
            let id = r.header("x-request-id").unwrap_or_default();
            assert!(id.starts_with("pc-"), "{d:?}: {id:?}");
            if d != Dialect::Gemini {
                let up = r.header("x-upstream-request-id").unwrap_or_default();
                assert!(up.starts_with("req_fake"), "{d:?}: {:?}", r.headers);
            }
        }
    }
}

/// The providers' rate-limit headers describe the operator's account: off by
/// default, passed with `provider_rate_limit_headers = true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_provider_rate_limit_headers_only_with_the_switch() {
    let ask_rl = |d: Dialect| {
        ask(d, CLIENT, false)
            .header("x-fake-ratelimit-limit-requests", 5000)
            .header("x-fake-ratelimit-remaining-requests", 4321)
            .header("x-fake-ratelimit-limit-tokens", 900_000)
            .header("x-fake-ratelimit-remaining-tokens", 800_000)
    };
    let rate_headers = |r: &Resp| -> Vec<(String, String)> {
        r.headers
            .iter()
            .filter(|(n, _)| {
                n.as_str().starts_with("x-ratelimit-")
                    || n.as_str().starts_with("anthropic-ratelimit-")
            })
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    };

    let off = Proxy::start(OPEN).await;
    for d in [Dialect::OpenAi, Dialect::Anthropic] {
        let r = send(off.addr, &ask_rl(d)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(rate_headers(&r), vec![], "{d:?}: {:?}", r.headers);
    }

    let on = Proxy::start(&format!(
        "[forwarding]\nprovider_rate_limit_headers = true\n{OPEN}"
    ))
    .await;
    let r = send(on.addr, &ask_rl(Dialect::OpenAi)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("4321"));
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("900000"));
    let r = send(on.addr, &ask_rl(Dialect::Anthropic)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("anthropic-ratelimit-requests-remaining"),
        Some("4321")
    );
    // The switch passes rate-limit headers only: the cookie still stays back.
    assert!(r.header("set-cookie").is_none());
}

/// An allow-list that names a header which may never pass is refused when the file
/// is read, with the line and the reason; header names are read case-insensitively.
#[test]
fn p2_forwarding_config_refuses_headers_that_may_never_pass() {
    for (key, name, why) in [
        ("openai_headers", "api-key", "credential"),
        ("openai_headers", "Authorization", "credential"),
        ("gemini_headers", "x-goog-api-key", "credential"),
        ("anthropic_headers", "cookie", "cookie"),
        ("openai_headers", "OpenAI-Organization", "organisation"),
        ("openai_headers", "openai-project", "project"),
        ("gemini_headers", "x-forwarded-for", "forwarding"),
        ("response_headers", "set-cookie", "cookie"),
        ("response_headers", "transfer-encoding", "hop-by-hop"),
        ("anthropic_headers", "x-portcullis-task", "gateway control"),
        ("openai_headers", "not a header", "not a valid header name"),
    ] {
        let text =
            format!("[server]\nlisten = \"127.0.0.1:0\"\n\n[forwarding]\n{key} = [\"{name}\"]\n");
        let err = Config::parse(&text).expect_err(name);
        assert_eq!(err.line, Some(5), "{name}: {err}");
        assert!(err.reason.contains(why), "{name}: {err}");
    }
    let ok = Config::parse("[forwarding]\nopenai_headers = [\"OpenAI-Beta\"]\n").unwrap();
    assert_eq!(ok.forwarding().openai_headers[0].0.as_str(), "openai-beta");
    assert!(!ok.forwarding().provider_rate_limit_headers);
}
