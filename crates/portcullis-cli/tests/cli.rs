//! The `portcullis` binary as an operator runs it (P1, P3): real processes,
//! real sockets, real signals. Every wait is bounded.
//!
//! - `portcullis check`: exit 0 on a good file; `file:line: reason` and exit 1 on a bad
//!   one; exit 2 on a usage error.
//! - `portcullis serve`: answers `/healthz` and `/usage` on the configured key.
//! - `SIGHUP`: a changed limit applies; a broken file is refused (logged with its
//!   `file:line: reason`) and the old configuration keeps serving.
//! - `SIGTERM`: new connections are refused, a stream in flight finishes and is
//!   settled, the process exits 0 within `[server] drain_timeout`; a stream longer
//!   than the drain timeout is cut at the timeout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// The workspace's private `redis-server` per test (std only).
#[allow(dead_code)]
#[path = "../../../tests/support/redis.rs"]
mod redis;

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");

/// Longest wait for the gateway to start (a debug build on a busy machine).
const START: Duration = Duration::from_secs(60);
/// Longest wait for one HTTP exchange.
const IO: Duration = Duration::from_secs(20);

/// A fresh directory under the test target's tmp dir.
fn dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "cli-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A complete configuration: one key (`sk-cli-test`, `limit` requests a minute), one
/// `fake://` channel, a usage log in `dir`.
fn config(dir: &Path, limit: u64, drain: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
drain_timeout = "{drain}"
usage_log = "{log}"

[policies.basic]
concurrency = 4
requests = [{{ window = "1m", limit = {limit} }}]

[tenants.acme]
balance = 10_000_000

[keys.cli]
key = "sk-cli-test"
tenant = "acme"
policy = "basic"

[channels.fake-a]
vendor = "openai"
base_url = "fake://"
credential = "sk-upstream-a"
models = ["gpt-4o-mini"]
capacity = 4

[models.gpt-4o-mini]
price = {{ input_per_mtok = 150_000, output_per_mtok = 600_000 }}
max_output_tokens = 256
"#,
        log = dir.join("usage.jsonl").display()
    )
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Runs `portcullis args…` to its end (bounded): status, stdout, stderr.
fn run(args: &[&str]) -> (ExitStatus, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run portcullis");
    let status = wait(&mut child, START).expect("portcullis did not finish");
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err)
}

/// Waits up to `limit` for the child to exit.
fn wait(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` every 50 ms for up to `limit`.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running `portcullis serve`, killed if the test ends while it runs.
struct Gateway {
    child: Child,
    addr: SocketAddr,
    stderr: PathBuf,
    /// What the listening line says of the store: `(in-memory store)`, `(Redis store)`.
    store: String,
}

impl Gateway {
    fn start(config: &Path) -> Self {
        Self::start_with(config, &[])
    }

    fn start_with(config: &Path, extra: &[&str]) -> Self {
        let stderr = config.with_extension("stderr.log");
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("run portcullis serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(rest) = line.strip_prefix("portcullis listening on http://") {
                    let _ = tx.send(rest.to_owned());
                }
            }
        });
        let (addr, store) = match rx.recv_timeout(START) {
            Ok(line) => {
                let (addr, store) = line.split_once(' ').unwrap_or((&line, ""));
                (addr.parse().expect("listening address"), store.to_owned())
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "portcullis serve did not start: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
        };
        Self {
            child,
            addr,
            stderr,
            store,
        }
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: `kill` with a pid this test spawned and still holds (not reaped).
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// `/usage` for the test key: the first request tier's limit.
    fn request_limit(&self) -> Option<u64> {
        let (status, body) = http(self.addr, "GET", "/usage", &[], "").ok()?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["policies"][0]["limits"]
            .as_array()?
            .iter()
            .find(|l| l["dimension"] == "requests")?["limit"]
            .as_u64()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One HTTP/1.1 exchange on a new connection (`Connection: close`), the test key
/// attached: status and body (raw; chunked bodies keep their framing).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut tcp = TcpStream::connect_timeout(&addr, IO)?;
    tcp.set_read_timeout(Some(IO))?;
    tcp.set_write_timeout(Some(IO))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer sk-cli-test\r\n\
         Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    tcp.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_owned());
    Ok((status, body))
}

const STREAM_BODY: &str =
    r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello there"}]}"#;

/// A streaming chat request on a keep-alive connection (no `Connection: close`: the
/// gateway itself must end the connection after the response when it drains), with
/// `chunks` content chunks `interval_ms` apart. Returns the stream once its head and
/// first bytes arrived.
fn open_stream(addr: SocketAddr, chunks: u32, interval_ms: u32) -> (TcpStream, Vec<u8>) {
    let mut tcp = TcpStream::connect_timeout(&addr, IO).unwrap();
    tcp.set_read_timeout(Some(IO)).unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer sk-cli-test\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nx-fake-chunks: {chunks}\r\n\
         x-fake-chunk-interval-ms: {interval_ms}\r\nx-request-id: drain-stream\r\n\r\n{STREAM_BODY}",
        STREAM_BODY.len()
    );
    tcp.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: ") {
        let n = tcp.read(&mut buf).expect("stream head");
        assert!(n > 0, "stream closed before its first chunk");
        got.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&got).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "stream answer: {head}");
    (tcp, got)
}

/// Reads the rest of a stream to EOF (bounded by the read timeout): everything read,
/// or the bytes so far and the error.
fn read_rest(tcp: &mut TcpStream, mut got: Vec<u8>) -> (String, Option<std::io::Error>) {
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), None),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return (String::from_utf8_lossy(&got).into_owned(), Some(e)),
        }
    }
}

fn refused(addr: SocketAddr) -> bool {
    matches!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// The 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in text")
        + 1
}

#[test]
fn p3_check_accepts_a_good_file_and_exits_0() {
    let d = dir("check-ok");
    let path = d.join("portcullis.toml");
    write(&path, &config(&d, 5, "30s"));
    for args in [
        vec!["check", "--config", path.to_str().unwrap()],
        vec!["check", path.to_str().unwrap()],
    ] {
        let (status, out, err) = run(&args);
        assert_eq!(status.code(), Some(0), "{args:?}: {out}{err}");
        assert!(
            out.starts_with("ok: 1 keys, 1 channels, 1 models, 1 policies, 1 tenants"),
            "{out}"
        );
        assert!(out.contains(path.to_str().unwrap()), "{out}");
    }
    // Checking starts nothing: no usage log is created.
    assert!(
        !d.join("usage.jsonl").exists(),
        "check opened the usage log"
    );
}

#[test]
fn p3_check_reports_file_and_line_of_an_error_and_exits_1() {
    let d = dir("check-bad");
    let good = config(&d, 5, "30s");

    // A reference that does not resolve: reported at the line of the reference.
    let path = d.join("unknown-policy.toml");
    let text = good.replace(r#"policy = "basic""#, r#"policy = "platinum""#);
    write(&path, &text);
    let (status, out, err) = run(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(status.code(), Some(1), "{out}{err}");
    let want = format!(
        "{}:{}: ",
        path.display(),
        line_of(&text, r#"policy = "platinum""#)
    );
    assert!(err.starts_with(&want), "want {want:?} in {err:?}");
    assert!(err.contains("platinum"), "{err}");
    assert!(out.is_empty(), "{out}");

    // A type error, from the TOML parser: its line.
    let path = d.join("type-error.toml");
    let text = good.replace("limit = 5 }", "limit = \"five\" }");
    write(&path, &text);
    let (status, _, err) = run(&["check", path.to_str().unwrap()]);
    assert_eq!(status.code(), Some(1), "{err}");
    let want = format!("{}:{}: ", path.display(), line_of(&text, "\"five\""));
    assert!(err.starts_with(&want), "want {want:?} in {err:?}");

    // A bad serving bound (the new drain_timeout key): its line.
    let path = d.join("drain.toml");
    let text = config(&d, 5, "48h");
    write(&path, &text);
    let (status, _, err) = run(&["check", path.to_str().unwrap()]);
    assert_eq!(status.code(), Some(1), "{err}");
    let want = format!("{}:{}: ", path.display(), line_of(&text, "drain_timeout"));
    assert!(err.starts_with(&want), "want {want:?} in {err:?}");
    assert!(
        err.contains("server.drain_timeout must be at most 24h"),
        "{err}"
    );

    // A store the gateway cannot open, found without connecting anywhere.
    let path = d.join("store.toml");
    write(
        &path,
        &format!("{good}\n[store]\nurl = \"memcached://127.0.0.1:1\"\n"),
    );
    let (status, _, err) = run(&["check", path.to_str().unwrap()]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("unknown store"), "{err}");

    // A file that is not there.
    let missing = d.join("missing.toml");
    let (status, _, err) = run(&["check", missing.to_str().unwrap()]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!("{}: cannot read", missing.display())),
        "{err}"
    );
}

#[test]
fn p1_usage_errors_exit_2_help_and_version_exit_0() {
    for args in [&["check"][..], &["serve"], &["frobnicate"], &[]] {
        let (status, _, err) = run(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
    }
    let (status, out, _) = run(&["--version"]);
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        out.trim(),
        format!("portcullis {}", env!("CARGO_PKG_VERSION"))
    );
    let (status, out, _) = run(&["--help"]);
    assert_eq!(status.code(), Some(0));
    assert!(out.contains("serve") && out.contains("check"), "{out}");
    let (status, out, _) = run(&["serve", "--help"]);
    assert_eq!(status.code(), Some(0));
    for flag in ["--config", "--listen", "--store"] {
        assert!(out.contains(flag), "{flag} missing from {out}");
    }
}

#[test]
fn p1_serve_refuses_a_bad_worker_thread_count_with_a_clear_error() {
    let d = dir("workers");
    let path = d.join("portcullis.toml");
    write(&path, &config(&d, 5, "30s"));
    for bad in ["0", "two", ""] {
        let out = Command::new(BIN)
            .args(["serve", "--config", path.to_str().unwrap()])
            .env("TOKIO_WORKER_THREADS", bad)
            .stdin(Stdio::null())
            .output()
            .expect("run portcullis");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {err}");
        assert!(
            err.contains("TOKIO_WORKER_THREADS") && !err.contains("panicked"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn p1_serve_answers_healthz_and_usage() {
    let d = dir("serve");
    let path = d.join("portcullis.toml");
    write(&path, &config(&d, 5, "30s"));
    let gw = Gateway::start(&path);
    assert_eq!(gw.store, "(in-memory store)");
    let (status, body) = http(gw.addr, "GET", "/healthz", &[], "").unwrap();
    assert_eq!((status, body.trim()), (200, "ok"));
    assert_eq!(gw.request_limit(), Some(5));
    // A proxied call through the fake upstream (started for the fake:// channel).
    let (status, body) = chat(gw.addr);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("chat.completion"), "{body}");
}

#[test]
fn p3_sighup_applies_a_changed_limit_and_keeps_serving_on_a_broken_file() {
    let d = dir("sighup");
    let path = d.join("portcullis.toml");
    write(&path, &config(&d, 5, "30s"));
    let gw = Gateway::start(&path);
    assert_eq!(gw.request_limit(), Some(5));

    // A changed limit applies after SIGHUP.
    write(&path, &config(&d, 7, "30s"));
    gw.signal(libc::SIGHUP);
    assert!(
        eventually(IO, || gw.request_limit() == Some(7)),
        "the new limit did not apply: {:?}\n{}",
        gw.request_limit(),
        gw.log()
    );

    // A broken file is refused, logged with its file and line; the old one serves on.
    let broken = config(&d, 7, "30s").replace(r#"policy = "basic""#, r#"policy = "gold""#);
    write(&path, &broken);
    gw.signal(libc::SIGHUP);
    let want = format!("{}:{}: ", path.display(), line_of(&broken, "\"gold\""));
    assert!(
        eventually(IO, || {
            let log = gw.log();
            log.contains("reload refused") && log.contains(&want)
        }),
        "no refusal naming {want:?} in the log:\n{}",
        gw.log()
    );
    assert_eq!(gw.request_limit(), Some(7));
    let (status, _) = http(gw.addr, "GET", "/healthz", &[], "").unwrap();
    assert_eq!(status, 200);

    // And a good file after the broken one applies again.
    write(&path, &config(&d, 3, "30s"));
    gw.signal(libc::SIGHUP);
    assert!(
        eventually(IO, || gw.request_limit() == Some(3)),
        "{}",
        gw.log()
    );
    // The new limit is enforced, not only shown: 3 calls pass, the 4th is refused.
    for i in 0..4 {
        let (status, body) = chat(gw.addr);
        let want = if i < 3 { 200 } else { 429 };
        assert_eq!(status, want, "call {i}: {body}");
    }
}

#[test]
fn p1_sigterm_drains_an_inflight_stream_then_exits_0_and_refuses_new_connections() {
    let d = dir("sigterm");
    let path = d.join("portcullis.toml");
    write(&path, &config(&d, 100, "20s"));
    let mut gw = Gateway::start(&path);
    let addr = gw.addr;
    // 10 chunks 300 ms apart: about 3 s of stream, well inside the 20 s drain.
    let (mut stream, got) = open_stream(addr, 10, 300);
    let signalled = Instant::now();
    gw.signal(libc::SIGTERM);

    // The listener closes at once...
    assert!(
        eventually(Duration::from_secs(5), || refused(addr)),
        "new connections still accepted after SIGTERM"
    );
    // ...while the process waits for the stream.
    assert!(
        gw.child.try_wait().unwrap().is_none(),
        "exited with a stream in flight"
    );
    let (text, err) = read_rest(&mut stream, got);
    assert!(err.is_none(), "stream broken: {err:?}\n{text}");
    assert!(text.contains("data: [DONE]"), "stream incomplete:\n{text}");
    assert!(
        text.ends_with("0\r\n\r\n"),
        "chunked body not ended:\n{text}"
    );
    let chunks = text.matches("\"content\":").count();
    assert!(chunks >= 10, "{chunks} content chunks:\n{text}");

    let status = wait(&mut gw.child, Duration::from_secs(20)).expect("no exit after drain");
    assert_eq!(status.code(), Some(0), "{}", gw.log());
    assert!(signalled.elapsed() < Duration::from_secs(20));
    assert!(
        gw.log().contains("every connection finished"),
        "{}",
        gw.log()
    );

    // The stream was settled: its usage record reached the log before the exit.
    let usage = std::fs::read_to_string(d.join("usage.jsonl")).unwrap_or_default();
    let record = usage
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["client_request_id"] == "drain-stream")
        .unwrap_or_else(|| panic!("no usage record for the stream:\n{usage}"));
    assert_eq!(record["outcome"], "settled", "{record}");
    assert!(
        record["output_tokens"].as_u64().unwrap_or(0) > 0,
        "{record}"
    );
}

#[test]
fn p1_sigterm_cuts_a_stream_longer_than_the_drain_timeout() {
    let d = dir("drain-timeout");
    let path = d.join("portcullis.toml");
    write(&path, &config(&d, 100, "1s"));
    let mut gw = Gateway::start(&path);
    // 40 chunks 500 ms apart: 20 s of stream against a 1 s drain.
    let (mut stream, got) = open_stream(gw.addr, 40, 500);
    let signalled = Instant::now();
    gw.signal(libc::SIGTERM);
    let status = wait(&mut gw.child, Duration::from_secs(10)).expect("no exit after drain");
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "{}", gw.log());
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "exited after {took:?} with a 1 s drain"
    );
    assert!(gw.log().contains("drain timeout passed"), "{}", gw.log());
    let (text, _) = read_rest(&mut stream, got);
    assert!(
        !text.contains("data: [DONE]"),
        "the stream was not cut:\n{text}"
    );
}

fn chat(addr: SocketAddr) -> (u16, String) {
    http(
        addr,
        "POST",
        "/v1/chat/completions",
        &[],
        r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .unwrap()
}

#[test]
fn p1_serve_on_redis_keeps_limits_there_and_drains_on_sigterm() {
    let redis = redis::RedisServer::start();
    let d = dir("redis");
    let path = d.join("portcullis.toml");
    // The file says memory; `--store` puts the state in Redis.
    write(&path, &config(&d, 3, "20s"));
    let mut gw = Gateway::start_with(&path, &["--store", &redis.url()]);
    assert_eq!(gw.store, "(Redis store)");
    assert!(
        eventually(IO, || gw.log().contains("connected to the Redis store")),
        "{}",
        gw.log()
    );
    // The window lives in Redis: its keys appear there, and the limit holds.
    for i in 0..3 {
        let (status, body) = chat(gw.addr);
        assert_eq!(status, 200, "call {i}: {body}");
    }
    let (status, body) = chat(gw.addr);
    assert_eq!(status, 429, "{body}");
    assert!(
        redis.integer(&["DBSIZE"]).unwrap() > 0,
        "nothing was written to Redis"
    );

    // A new gateway on the same Redis sees the same window (the limit is spent).
    let other = Gateway::start_with(&path, &["--store", &redis.url()]);
    let (status, body) = chat(other.addr);
    assert_eq!(
        status, 429,
        "a second instance did not share the window: {body}"
    );
    drop(other);

    // SIGTERM: raise the limit first (SIGHUP) so a stream is admitted, then drain it.
    write(&path, &config(&d, 100, "20s"));
    gw.signal(libc::SIGHUP);
    assert!(
        eventually(IO, || gw.request_limit() == Some(100)),
        "{}",
        gw.log()
    );
    let (mut stream, got) = open_stream(gw.addr, 6, 300);
    gw.signal(libc::SIGTERM);
    assert!(
        eventually(Duration::from_secs(5), || refused(gw.addr)),
        "new connections still accepted after SIGTERM"
    );
    let (text, err) = read_rest(&mut stream, got);
    assert!(err.is_none(), "stream broken: {err:?}\n{text}");
    assert!(text.contains("data: [DONE]"), "stream incomplete:\n{text}");
    let status = wait(&mut gw.child, Duration::from_secs(20)).expect("no exit after drain");
    assert_eq!(status.code(), Some(0), "{}", gw.log());
    let usage = std::fs::read_to_string(d.join("usage.jsonl")).unwrap_or_default();
    let record = usage
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["client_request_id"] == "drain-stream")
        .unwrap_or_else(|| panic!("no usage record for the stream:\n{usage}"));
    assert_eq!(record["outcome"], "settled", "{record}");
}
