//! Provider limits through the proxy (U1–U4, S1) against the fake
//! upstream.

mod common;

use common::*;

fn config(channel_limits: &str) -> String {
    format!(
        r#"
[policies.open]

[keys.a]
key = "sk-a"
policy = "open"

[channels.one]
vendor = "openai"
base_url = "fake://"
credential = "cred-one"
models = ["gpt-4o-mini"]
{channel_limits}

[channels.two]
vendor = "openai"
base_url = "fake://"
credential = "cred-two"
models = ["gpt-4o-mini"]
{channel_limits}

[models.gpt-4o-mini]
price = {{ input_per_mtok = 1, output_per_mtok = 1 }}
max_output_tokens = 16
"#
    )
}

#[tokio::test]
async fn s1_rpm_room_tpm_none_is_refused_at_admission_and_the_provider_sees_nothing() {
    let p = Proxy::start(&config("limits = { rpm = 100, tpm = 50 }")).await;
    // 64 output tokens asked: more than either channel's TPM.
    let req = gen_for(Dialect::OpenAi, "gpt-4o-mini", false, Some(64)).key(KeyAt::Bearer, "sk-a");
    let r = send(p.addr, &req).await;
    rejection(&r, Dialect::OpenAi, 42905);
    assert_eq!(p.fake.stats().total_calls, 0, "the provider saw a call");
}

#[tokio::test]
async fn u1_u4_channels_over_rpm_are_skipped_then_42902_with_retry_after() {
    let p = Proxy::start(&config("limits = { rpm = 2 }")).await;
    for _ in 0..4 {
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let s = p.fake.stats();
    assert_eq!((s.calls_for("cred-one"), s.calls_for("cred-two")), (2, 2));
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", true)).await;
    rejection(&r, Dialect::OpenAi, 42902);
    let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&after), "{after}");
    assert_eq!(p.fake.stats().total_calls, 4);
}

#[tokio::test]
async fn u2_a_shared_credential_shares_its_limit_across_channels() {
    let cfg = config("limits = { rpm = 3 }").replace("cred-two", "cred-one");
    let p = Proxy::start(&cfg).await;
    let mut codes = vec![];
    for _ in 0..5 {
        codes.push(
            send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(codes, [200, 200, 200, 429, 429]);
    assert_eq!(p.fake.stats().total_calls, 3);
}

#[tokio::test]
async fn u3_provider_says_remaining_zero_so_that_channel_rests_until_reset() {
    let p = Proxy::start(&config("")).await;
    // The first answer (on channel one, the round-robin's first pick) reports its
    // request limit exhausted for 30 s.
    let req = ask(Dialect::OpenAi, "sk-a", false)
        .header("x-fake-ratelimit-remaining-requests", 0)
        .header("x-fake-ratelimit-reset-ms", 30_000);
    let r = send(p.addr, &req).await;
    assert_eq!(r.status, 200);
    let first = if p.fake.stats().calls_for("cred-one") == 1 {
        "cred-one"
    } else {
        "cred-two"
    };
    let other = if first == "cred-one" {
        "cred-two"
    } else {
        "cred-one"
    };
    for _ in 0..6 {
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
        assert_eq!(r.status, 200);
    }
    let s = p.fake.stats();
    assert_eq!(s.calls_for(first), 1, "{s:?}");
    assert_eq!(s.calls_for(other), 6, "{s:?}");
}

#[tokio::test]
async fn u3_provider_429_cools_the_channel_and_the_other_one_serves() {
    use portcullis_fake_upstream::{Behavior, ErrorKind};
    let p = Proxy::start(&config("")).await;
    // Channel one's provider answers 429 with Retry-After 30 s, every time.
    p.fake.set_default_for(
        "cred-one",
        Behavior::error(ErrorKind::RateLimit).with_retry_after(30),
    );
    for _ in 0..5 {
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
        // Failover sends a request refused by one to the other (F2).
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let s = p.fake.stats();
    // The provider's 429 cooled channel one: nothing more was sent there (U3, F6).
    assert_eq!(s.calls_for("cred-one"), 1, "{s:?}");
    assert_eq!(s.calls_for("cred-two"), 5, "{s:?}");
}
