//! Nothing secret leaves the gateway (E3, P4): the proxy
//! example runs as its own process with debug logging, takes successful, failing,
//! failed-over and streamed requests in all three dialects plus the operational and
//! admin endpoints, and afterwards neither its logs, nor any response (bodies and
//! headers), nor `/metrics` contain an upstream credential, the admin token or a
//! client API key.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use portcullis_tests::example::{listening_addr, proxy_example_binary, workspace_root};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

const OPENAI: &str = "sk-secret-upstream-openai-7f3a9c";
const ANTHROPIC: &str = "sk-ant-secret-upstream-41be07";
const GEMINI: &str = "AIzaSecretUpstreamGemini5d21";
const ADMIN: &str = "admin-secret-token-9c8d7e6f";
const CLIENT: &str = "sk-client-secret-key-5566";

const CONFIG: &str = r#"
[server]
admin_token_env = "PORTCULLIS_TEST_ADMIN"

[policies.open]

[tenants.t]
balance = 1_000_000_000_000

[keys.client]
key_env = "PORTCULLIS_TEST_CLIENT"
policy = "open"
tenant = "t"

[channels.openai-a]
vendor = "openai"
base_url = "fake://"
credential_env = "PORTCULLIS_TEST_OPENAI"
models = ["gpt-4o-mini"]

[channels.openai-b]
vendor = "openai"
base_url = "fake://"
credential = "sk-second-openai-channel-credential"
models = ["gpt-4o-mini"]

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential_env = "PORTCULLIS_TEST_ANTHROPIC"
models = ["claude-sonnet-4-5"]

[channels.gemini-a]
vendor = "gemini"
base_url = "fake://"
credential_env = "PORTCULLIS_TEST_GEMINI"
models = ["gemini-2.5-flash"]

[models.gpt-4o-mini]
price = { input_per_mtok = 150_000, output_per_mtok = 600_000 }
max_output_tokens = 64

[models.claude-sonnet-4-5]
price = { input_per_mtok = 3_000_000, output_per_mtok = 15_000_000 }
max_output_tokens = 64

[models."gemini-2.5-flash"]
price = { input_per_mtok = 300_000, output_per_mtok = 2_500_000 }
max_output_tokens = 64
"#;

struct Running {
    child: Child,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn fetch(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let work = async {
        let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .ok()?;
        tokio::spawn(conn);
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string());
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let res = send
            .send_request(b.body(Full::new(Bytes::from(body.to_owned()))).ok()?)
            .await
            .ok()?;
        let mut text = format!("{}\n", res.status());
        for (k, v) in res.headers() {
            text.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
        }
        let body = res.into_body().collect().await.ok()?.to_bytes();
        text.push_str(&String::from_utf8_lossy(&body));
        Some(text)
    };
    tokio::time::timeout(Duration::from_secs(15), work)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("{method} {path}: no answer"))
}

/// The text without terminal colour codes (`ESC [ … m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_in_logs_responses_or_metrics() {
    let dir = std::env::temp_dir().join(format!("portcullis-secrets-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let (out_path, err_path) = (dir.join("stdout.log"), dir.join("stderr.log"));
    let bin = tokio::task::spawn_blocking(proxy_example_binary)
        .await
        .unwrap();
    let child = Command::new(&bin)
        .args([
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .current_dir(workspace_root())
        .env("RUST_LOG", "debug,portcullis=trace,portcullis_proxy=trace")
        .env("PORTCULLIS_TEST_OPENAI", OPENAI)
        .env("PORTCULLIS_TEST_ANTHROPIC", ANTHROPIC)
        .env("PORTCULLIS_TEST_GEMINI", GEMINI)
        .env("PORTCULLIS_TEST_ADMIN", ADMIN)
        .env("PORTCULLIS_TEST_CLIENT", CLIENT)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut gw = Running { child };
    let addr: SocketAddr = listening_addr(&out_path, &mut gw.child, Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the gateway did not start: {e}: {}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            )
        });

    let bearer = format!("Bearer {CLIENT}");
    let openai = |extra: &'static [(&'static str, &'static str)], stream: bool| {
        let mut h: Vec<(&str, &str)> = vec![
            ("authorization", bearer.as_str()),
            ("content-type", "application/json"),
        ];
        h.extend_from_slice(extra);
        let body = format!(
            r#"{{"model":"gpt-4o-mini","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
        );
        (h, body)
    };
    let mut answers = Vec::new();
    for (extra, stream) in [
        (&[][..], false),
        (&[][..], true),
        (&[("x-fake-error", "invalid_api_key")][..], false),
        (&[("x-fake-error", "server_error")][..], false),
        (&[("x-fake-error", "insufficient_quota")][..], false),
        (
            &[
                ("x-fake-error", "rate_limit_exceeded"),
                ("x-fake-retry-after", "1"),
            ][..],
            false,
        ),
        (&[("x-fake-fail-after-chunks", "1")][..], true),
    ] {
        let (h, body) = openai(extra, stream);
        answers.push(fetch(addr, "POST", "/v1/chat/completions", &h, &body).await);
    }
    let anth = [("x-api-key", CLIENT), ("content-type", "application/json")];
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"hi"}]}"#;
    answers.push(fetch(addr, "POST", "/v1/messages", &anth, body).await);
    let gem = [
        ("x-goog-api-key", CLIENT),
        ("content-type", "application/json"),
    ];
    let body = r#"{"contents":[{"parts":[{"text":"hi"}]}]}"#;
    answers.push(
        fetch(
            addr,
            "POST",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            &gem,
            body,
        )
        .await,
    );
    answers.push(
        fetch(
            addr,
            "POST",
            &format!("/v1beta/models/gemini-2.5-flash:generateContent?key={CLIENT}"),
            &[("content-type", "application/json")],
            body,
        )
        .await,
    );
    // A wrong key, a malformed body, the key's usage and the model list.
    for (method, path, auth, body) in [
        ("POST", "/v1/chat/completions", "Bearer sk-nope", "{}"),
        ("POST", "/v1/chat/completions", bearer.as_str(), "{not json"),
        ("GET", "/usage", bearer.as_str(), ""),
        ("GET", "/v1/models", bearer.as_str(), ""),
    ] {
        answers.push(fetch(addr, method, path, &[("authorization", auth)], body).await);
    }
    let admin = format!("Bearer {ADMIN}");
    let channels = fetch(
        addr,
        "GET",
        "/admin/channels",
        &[("authorization", admin.as_str())],
        "",
    )
    .await;
    assert!(channels.starts_with("200"), "{channels}");
    answers.push(channels);
    answers.push(
        fetch(
            addr,
            "POST",
            "/admin/reload",
            &[("authorization", admin.as_str())],
            "",
        )
        .await,
    );
    let metrics = fetch(addr, "GET", "/metrics", &[], "").await;
    assert!(
        metrics.contains("portcullis_upstream_responses_total"),
        "{metrics}"
    );
    answers.push(metrics);
    // The run did exercise the paths: a success, a failover, a disabled credential.
    assert!(answers[0].starts_with("200"), "{}", answers[0]);

    let _ = gw.child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), gw.child.wait()).await;
    let logs =
        std::fs::read_to_string(&out_path).unwrap() + &std::fs::read_to_string(&err_path).unwrap();
    assert!(
        logs.contains("upstream attempt failed"),
        "debug logs were captured"
    );
    // Spans per request and per attempt: request id, attempt number, billing attempt id.
    let plain = strip_ansi(&logs);
    let attempt_line = plain
        .lines()
        .find(|l| l.contains("billing attempt opened"))
        .expect("a billing attempt was logged");
    assert!(
        attempt_line.contains("request{method=POST path=\"/v1/")
            && attempt_line.contains("id=\"pc-")
            && attempt_line.contains("attempt{n=1 attempt_id=\"att-"),
        "{attempt_line}"
    );
    assert!(
        logs.contains("credential disabled"),
        "the disabled credential was logged (by name only)"
    );
    for secret in [
        OPENAI,
        ANTHROPIC,
        GEMINI,
        "sk-second-openai-channel-credential",
        ADMIN,
        CLIENT,
    ] {
        assert!(!logs.contains(secret), "a secret in the logs: {secret}");
        for a in &answers {
            assert!(!a.contains(secret), "a secret in an answer: {secret}\n{a}");
        }
    }
}
