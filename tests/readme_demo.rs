//! The README's quickstart, run as a newcomer would (P1): start the gateway
//! with the README's command, then run the README's curl lines and check that each
//! answers as the comment above it says — 200, then 42901, 42902, 42905, 42906, 50202
//! and 42911.
//!
//! The curl lines are read from `README.md` itself (the ```sh block after "Then, from
//! another terminal"), so the README and this test cannot drift apart. Each line runs
//! with `curl` when it is installed, else the same request is made with a hyper client
//! (`PORTCULLIS_README_NO_CURL=1` forces that path).
//!
//! Deviations from typing the README by hand, all for running unattended:
//! - The README starts the gateway with `cargo run -p portcullis-examples --example
//!   proxy`. Inside `cargo test` another cargo would wait on the build-directory lock,
//!   so the test runs the binary that command builds, `target/<profile>/examples/proxy`
//!   (`cargo test --workspace` and `cargo nextest run --workspace` build it before
//!   running tests); if it is missing or older than the sources it first runs
//!   `cargo build -p portcullis-examples --example proxy`.
//! - The README's command listens on the default `127.0.0.1:8080`; the test passes
//!   `--listen 127.0.0.1:<free port>` (a flag of the example) so it never collides
//!   with a gateway already running there, and points the curl lines at that port
//!   (`localhost:8080` → `127.0.0.1:<port>`).
//! - Each curl gets `-w` to print its HTTP status after the body (observation only).
//! - After a line sent to the background (`&`) the test waits until the gateway counts
//!   that request in flight (a person types the next line later), and at the end of
//!   its section until it has finished (as the next section assumes a free slot).
//!
//! The gateway child is killed when the test ends, also on panic (a guard's `Drop`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use portcullis_tests::example::{listening_addr, proxy_example_binary, workspace_root};
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout};

/// Bound of one request or one curl run.
const STEP: Duration = Duration::from_secs(15);

/// Kills the gateway when the test ends, however it ends.
struct Gateway {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Starts the example on a port of the kernel's choosing and waits (bounded) until
/// `/healthz` answers.
async fn start_gateway() -> Gateway {
    let bin = tokio::task::spawn_blocking(proxy_example_binary)
        .await
        .expect("find or build the proxy example");
    let out = std::env::temp_dir().join(format!("portcullis-readme-{}.out", std::process::id()));
    let mut child = Command::new(&bin)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("a file for its output"))
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let addr = listening_addr(&out, &mut child, Duration::from_secs(15)).await;
    let _ = std::fs::remove_file(&out);
    let addr = addr.unwrap_or_else(|e| panic!("the gateway did not start: {e}"));
    let mut gw = Gateway { child, addr };
    for _ in 0..200 {
        let health = request(addr, "GET", "/healthz", &[], None).await;
        if health.is_ok_and(|r| r.status == 200) {
            return gw;
        }
        if let Ok(Some(status)) = gw.child.try_wait() {
            panic!("the gateway exited with {status}");
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("the gateway did not answer /healthz within 10 s")
}

// ------------------------------------------------------------------ HTTP

/// One answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// `HTTP/1.1 <status>` + headers, when asked for (`-i`).
    head: String,
    body: String,
}

/// One HTTP/1.1 request on a new connection, read to the end.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<&str>,
) -> Result<Answer, String> {
    let work = async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        let conn = tokio::spawn(conn);
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string())
            .header("user-agent", "curl/8 (portcullis readme_demo)")
            .header("accept", "*/*");
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let req = b
            .body(Full::new(Bytes::from(body.unwrap_or("").to_owned())))
            .map_err(|e| e.to_string())?;
        let res = send.send_request(req).await.map_err(|e| e.to_string())?;
        let mut head = format!("HTTP/1.1 {}\r\n", res.status());
        for (k, v) in res.headers() {
            head.push_str(&format!("{k}: {}\r\n", v.to_str().unwrap_or("")));
        }
        head.push_str("\r\n");
        let status = res.status().as_u16();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        conn.abort();
        Ok(Answer {
            status,
            head,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    };
    timeout(STEP, work)
        .await
        .unwrap_or_else(|_| Err(format!("{method} {path}: no answer within {STEP:?}")))
}

// ------------------------------------------------------------------ the README's lines

/// A curl command line, split into words.
#[derive(Clone, Debug)]
struct Curl {
    words: Vec<String>,
    background: bool,
}

/// One step of a section.
#[derive(Clone, Debug)]
enum Step {
    Curl(Curl),
    /// `for i in 1 2 …; do <steps>; done`
    Repeat(usize, Vec<Step>),
    /// `echo` (prints a newline: nothing to check)
    Echo,
}

/// A `# …` comment and the commands under it.
#[derive(Debug)]
struct Section {
    title: String,
    steps: Vec<Step>,
}

/// The ```sh block after "Then, from another terminal".
fn readme_block() -> String {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let at = readme
        .find("Then, from another terminal")
        .expect("README: 'Then, from another terminal'");
    let rest = &readme[at..];
    let start = rest.find("```sh\n").expect("a ```sh block") + "```sh\n".len();
    let end = rest[start..].find("```").expect("end of the block");
    rest[start..start + end].to_owned()
}

/// Shell words and the operators `;` `&` (single and double quotes, `\` escapes).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                has = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    cur.push(c);
                }
            }
            '"' => {
                has = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        c => cur.push(c),
                    }
                }
            }
            '\\' => {
                has = true;
                cur.extend(chars.next());
            }
            ';' | '&' => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
                out.push(c.to_string());
            }
            c if c.is_whitespace() => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                has = true;
                cur.push(c);
            }
        }
    }
    if has {
        out.push(cur);
    }
    out
}

/// Parses a list of simple commands separated by `;` / `&` (a trailing `&` sends the
/// command to the background); `for … do … done` nests.
fn steps(tokens: &[String]) -> Vec<Step> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i].as_str() {
            ";" => i += 1,
            "for" => {
                // for VAR in ITEMS ; do BODY ; done
                let do_at = tokens[i..]
                    .iter()
                    .position(|t| t == "do")
                    .map(|p| p + i)
                    .expect("for … do");
                let done_at = tokens[i..]
                    .iter()
                    .rposition(|t| t == "done")
                    .map(|p| p + i)
                    .expect("for … done");
                let items = tokens[i + 3..do_at].iter().filter(|t| *t != ";").count();
                out.push(Step::Repeat(items, steps(&tokens[do_at + 1..done_at])));
                i = done_at + 1;
            }
            _ => {
                let end = tokens[i..]
                    .iter()
                    .position(|t| t == ";" || t == "&")
                    .map_or(tokens.len(), |p| p + i);
                let cmd = &tokens[i..end];
                let background = tokens.get(end).is_some_and(|t| t == "&");
                match cmd[0].as_str() {
                    "curl" => out.push(Step::Curl(Curl {
                        words: cmd[1..].to_vec(),
                        background,
                    })),
                    "echo" => out.push(Step::Echo),
                    other => panic!("README: unexpected command {other:?} in {cmd:?}"),
                }
                i = end + 1;
            }
        }
    }
    out
}

/// The block's sections, one per `# ` comment.
fn sections(block: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut command = String::new();
    for line in block.lines() {
        if let Some(title) = line.strip_prefix("# ") {
            match out.last_mut() {
                // A comment continued on the next line.
                Some(s) if s.steps.is_empty() => {
                    s.title.push(' ');
                    s.title.push_str(title);
                }
                _ => out.push(Section {
                    title: title.to_owned(),
                    steps: Vec::new(),
                }),
            }
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            command.push_str(cont);
            command.push(' ');
            continue;
        }
        command.push_str(line);
        if command.trim().is_empty() {
            command.clear();
            continue;
        }
        let s = out.last_mut().expect("a command before the first comment");
        s.steps.extend(steps(&words(&command)));
        command.clear();
    }
    out
}

// ------------------------------------------------------------------ running a curl line

/// What one curl printed, and the status it saw.
#[derive(Debug)]
struct Printed {
    status: u16,
    /// The head (with `-i`) and the body.
    text: String,
}

impl Printed {
    /// The body (after the head with `-i`).
    fn body(&self) -> &str {
        match self.text.find("\r\n\r\n") {
            Some(i) if self.text.starts_with("HTTP/") => &self.text[i + 4..],
            _ => &self.text,
        }
    }
    /// The body as JSON.
    fn json(&self) -> Value {
        serde_json::from_str(self.body().trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

const STATUS_MARK: &str = "\n<<<readme-demo status ";

/// The README's `localhost:8080` → the test's gateway.
fn retarget(word: &str, addr: SocketAddr) -> String {
    word.replace("localhost:8080", &addr.to_string())
}

/// Runs one curl line with curl.
async fn run_curl(c: &Curl, addr: SocketAddr) -> Printed {
    let mut args: Vec<String> = c.words.iter().map(|w| retarget(w, addr)).collect();
    let quiet = args.iter().any(|w| w == ">/dev/null");
    args.retain(|w| w != ">/dev/null");
    args.push("-w".into());
    args.push(format!("{STATUS_MARK}%{{http_code}}>>>"));
    let out = timeout(
        STEP,
        Command::new("curl")
            .args(&args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("curl {args:?}: no end within {STEP:?}"))
    .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (text, status) = text
        .rsplit_once(STATUS_MARK)
        .map(|(t, s)| (t.to_owned(), s.trim_end_matches(">>>").parse().unwrap_or(0)))
        .unwrap_or((text.clone(), 0));
    Printed {
        status,
        text: if quiet { String::new() } else { text },
    }
}

/// Runs one curl line with a hyper client: the same method, URL, headers and body
/// (curl's `-d` makes a POST with `application/x-www-form-urlencoded`).
async fn run_hyper(c: &Curl, addr: SocketAddr) -> Printed {
    let (mut headers, mut data, mut url, mut include) = (Vec::new(), None, None, false);
    let mut it = c.words.iter().map(|w| retarget(w, addr));
    while let Some(w) = it.next() {
        match w.as_str() {
            "-H" => {
                let h = it.next().expect("-H value");
                let (k, v) = h.split_once(':').expect("Name: value");
                headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            "-d" => data = Some(it.next().expect("-d value")),
            ">/dev/null" => {}
            f if f.starts_with('-') => include |= f.contains('i'),
            u => url = Some(u.to_owned()),
        }
    }
    let url = url.expect("a URL");
    let path = url
        .trim_start_matches("http://")
        .trim_start_matches(&addr.to_string())
        .to_owned();
    let method = if data.is_some() { "POST" } else { "GET" };
    if data.is_some() {
        headers.push((
            "content-type".into(),
            "application/x-www-form-urlencoded".into(),
        ));
    }
    let a = request(addr, method, &path, &headers, data.as_deref())
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    Printed {
        status: a.status,
        text: if include { a.head + &a.body } else { a.body },
    }
}

fn use_curl() -> bool {
    if std::env::var_os("PORTCULLIS_README_NO_CURL").is_some() {
        return false;
    }
    std::process::Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The key a curl line sends (`Authorization: Bearer`, `x-api-key`, `x-goog-api-key`).
fn key_of(c: &Curl) -> Option<String> {
    c.words.iter().find_map(|w| {
        let (k, v) = w.split_once(':')?;
        let v = v.trim();
        match k.trim().to_ascii_lowercase().as_str() {
            "authorization" => v.strip_prefix("Bearer ").map(str::to_owned),
            "x-api-key" | "x-goog-api-key" => Some(v.to_owned()),
            _ => None,
        }
    })
}

/// The gateway's in-flight count for `key`.
async fn in_flight(addr: SocketAddr, key: &str) -> u64 {
    let h = [("authorization".to_owned(), format!("Bearer {key}"))];
    match request(addr, "GET", "/usage", &h, None).await {
        Ok(a) if a.status == 200 => serde_json::from_str::<Value>(&a.body)
            .ok()
            .and_then(|v| v["in_flight"].as_u64())
            .unwrap_or(0),
        _ => 0,
    }
}

/// Waits (bounded) until the gateway's in-flight count for `key` satisfies `ok`.
async fn wait_in_flight(addr: SocketAddr, key: &str, ok: impl Fn(u64) -> bool, what: &str) {
    for _ in 0..1500 {
        if ok(in_flight(addr, key).await) {
            return;
        }
        sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 15 s");
}

/// Runs a section's steps; returns what each foreground curl printed, in order.
async fn run(steps: &[Step], addr: SocketAddr, curl: bool, out: &mut Vec<Printed>) {
    for step in steps {
        match step {
            Step::Echo => {}
            Step::Repeat(n, body) => {
                for _ in 0..*n {
                    Box::pin(run(body, addr, curl, out)).await;
                }
            }
            Step::Curl(c) if c.background => {
                let key = key_of(c).expect("a key on the background line");
                let before = in_flight(addr, &key).await;
                let c = c.clone();
                tokio::spawn(async move {
                    if curl {
                        run_curl(&c, addr).await
                    } else {
                        run_hyper(&c, addr).await
                    }
                });
                // A person types the next line after this one has started.
                wait_in_flight(addr, &key, |n| n > before, "the background request").await;
            }
            Step::Curl(c) => {
                let p = if curl {
                    run_curl(c, addr).await
                } else {
                    run_hyper(c, addr).await
                };
                out.push(p);
            }
        }
    }
}

/// Every key a section's lines use.
fn keys(steps: &[Step], out: &mut Vec<String>) {
    for s in steps {
        match s {
            Step::Curl(c) => out.extend(key_of(c)),
            Step::Repeat(_, b) => keys(b, out),
            Step::Echo => {}
        }
    }
}

// ------------------------------------------------------------------ the checks

/// The error object of a rejection body in any dialect: (code if shown, message).
fn error_of(v: &Value) -> (Option<String>, String) {
    let e = &v["error"];
    let code = e["code"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| v["code"].as_u64().map(|c| c.to_string()));
    let msg = e["message"]
        .as_str()
        .or_else(|| v["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    (code, msg)
}

fn assert_ok(p: &Printed, what: &str) {
    assert_eq!(p.status, 200, "{what}: {}", p.text);
    let v = p.json();
    // A Responses API answer carries `"error": null`.
    assert!(v.get("error").is_none_or(Value::is_null), "{what}: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1_readme_quickstart_curl_lines_answer_as_documented() {
    let block = readme_block();
    let sections = sections(&block);
    assert!(sections.len() >= 6, "README sections: {sections:?}");
    let gw = start_gateway().await;
    let curl = use_curl();
    eprintln!(
        "gateway on {}; running the README's lines with {}",
        gw.addr,
        if curl { "curl" } else { "a hyper client" }
    );
    let mut seen = Vec::new();
    for s in &sections {
        let mut out = Vec::new();
        run(&s.steps, gw.addr, curl, &mut out).await;
        let code = s.title.split_whitespace().next().unwrap_or_default();
        let what = format!("README `# {}`", s.title);
        match code {
            "200" => {
                assert!(!out.is_empty(), "{what}");
                for p in &out {
                    assert_ok(p, &what);
                }
            }
            "42901" => {
                let p = out.last().expect("the second request");
                assert_eq!(p.status, 429, "{what}: {}", p.text);
                assert!(p.text.starts_with("HTTP/"), "-i shows the head: {}", p.text);
                let (code, msg) = error_of(&p.json());
                assert_eq!(code.as_deref(), Some("42901"), "{what}: {}", p.text);
                assert_eq!(msg, "concurrency limit exceeded");
            }
            "42902" => {
                assert_eq!(out.len(), 6, "{what}");
                let refused = out.iter().position(|p| p.status != 200).expect("a refusal");
                for p in &out[..refused] {
                    assert_ok(p, &what);
                }
                for p in &out[refused..] {
                    assert_eq!(p.status, 429, "{what}: {}", p.text);
                    let (code, msg) = error_of(&p.json());
                    assert_eq!(code.as_deref(), Some("42902"), "{what}: {}", p.text);
                    assert_eq!(msg, "rpm limit exceeded");
                }
                eprintln!("{what}: {refused} answered, then 42902");
            }
            "42905" => {
                let p = out.last().expect("the request");
                assert_eq!(p.status, 429, "{what}: {}", p.text);
                let v = p.json();
                assert_eq!(v["type"], "error", "Anthropic dialect: {v}");
                assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
                assert_eq!(v["error"]["message"], "tpm limit exceeded", "{v}");
            }
            "42906" => {
                assert_eq!(out.len(), 4, "{what}");
                for p in &out[..3] {
                    assert_ok(p, &what);
                }
                let p = &out[3];
                assert_eq!(p.status, 429, "{what}: {}", p.text);
                let v = p.json();
                assert_eq!(
                    v["error"]["status"], "RESOURCE_EXHAUSTED",
                    "Gemini dialect: {v}"
                );
                let msg = v["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    msg.starts_with("已达套餐请求次数上限（每 1 小时 3 次），约 ")
                        && msg.ends_with(" 秒后自动恢复；如需立即继续可开启API扣费访问"),
                    "{what}: {msg}"
                );
            }
            "50202" => {
                let p = out.last().expect("the request");
                assert_eq!(p.status, 502, "{what}: {}", p.text);
                let (code, msg) = error_of(&p.json());
                assert_eq!(code.as_deref(), Some("50202"), "{what}: {}", p.text);
                assert_eq!(msg, "The model provider returned an error. Please retry.");
            }
            "42911" => {
                let p = out.last().expect("the request");
                assert_eq!(p.status, 429, "{what}: {}", p.text);
                let (code, msg) = error_of(&p.json());
                assert_eq!(code.as_deref(), Some("42911"), "{what}: {}", p.text);
                assert_eq!(
                    msg,
                    "Upstream capacity for this model is busy. Retry shortly."
                );
                let head = p.text.to_ascii_lowercase();
                assert!(
                    head.contains("retry-after: 60") || head.contains("retry-after: 59"),
                    "{what}: {}",
                    p.text
                );
            }
            "what" => {
                let p = out.last().expect("the /usage request");
                assert_eq!(p.status, 200, "{what}: {}", p.text);
                let v = p.json();
                assert_eq!(v["key"], "free", "{v}");
                assert!(v["policies"][0]["limits"].is_array(), "{v}");
            }
            other => panic!("{what}: no check for a README section starting {other:?}"),
        }
        // The next section starts when this one's background requests have finished.
        let mut ks = Vec::new();
        keys(&s.steps, &mut ks);
        for k in ks {
            wait_in_flight(gw.addr, &k, |n| n == 0, "background requests to finish").await;
        }
        seen.push(code.to_owned());
    }
    for code in ["200", "42901", "42902", "42905", "42906", "50202", "42911"] {
        assert!(
            seen.iter().any(|c| c == code),
            "README shows no {code}: {seen:?}"
        );
    }
}
