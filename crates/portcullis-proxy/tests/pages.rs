//! The usage and operator pages (P4) and the keys page (K9) in a real headless browser:
//! Debian's `chromium`, driven through `chromedriver` (WebDriver, `fantoccini`). Each
//! browser test starts the proxy in front of the fake upstream (for the keys page and the
//! recent requests of the usage and operator pages, B6, on a SQLite records database in
//! a temporary directory), loads a page, types the key or the token, and asserts on the
//! rendered DOM against the gateway's JSON for the same key. A screenshot of each page
//! is kept under `$CARGO_TARGET_TMPDIR/pages/` (`target/tmp/pages/*.png`); those of the
//! docs are `usage-requests.png` and `admin-requests.png` (`assets/screenshots/usage.png`
//! and `admin.png`) and `keys.png`.
//!
//! Without `chromium` or `chromedriver` on the PATH the browser tests fail and name the
//! packages to install (`apt-get install -y chromium chromium-driver`).

mod common;

use common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use portcullis::core::GatewayCode;
use portcullis_fake_upstream::{Behavior, ErrorKind};
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TOKEN: &str = "admin-token-0123456789";

/// Starting chromium on a busy 2-core host can take a while; every other browser step
/// is bounded by [`WAIT`].
const BROWSER_START: Duration = Duration::from_secs(60);

/// One browser at a time in this binary: two chromiums on a 2-core host slow each other
/// past the bounds. (Under `cargo nextest`, where each test is its own process, the
/// `browser` group of `.config/nextest.toml` does the same.)
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ------------------------------------------------------------------ the browser

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn need(names: &[&str], package: &str) -> PathBuf {
    names.iter().find_map(|n| on_path(n)).unwrap_or_else(|| {
        panic!(
            "the page tests need {} on the PATH: install Debian's `{package}` \
             (apt-get install -y chromium chromium-driver)",
            names.join(" or ")
        )
    })
}

#[test]
#[should_panic(
    expected = "install Debian's `chromium-driver` (apt-get install -y chromium chromium-driver)"
)]
fn a_missing_browser_fails_naming_the_package_to_install() {
    need(&["portcullis-no-such-chromedriver"], "chromium-driver");
}

fn shots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pages");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

/// chromedriver on a free loopback port and a WebDriver session on headless chromium.
///
/// [`Browser::quit`] ends the session (chromedriver then quits chromium). On drop —
/// after a panic too — chromedriver is asked to shut down (`GET /shutdown`, which quits
/// the browsers of its sessions), then its process group (chromedriver was started as
/// the leader of its own group; chromium inherits it) is killed if anything is left.
struct Browser {
    client: Client,
    driver: Child,
    port: u16,
}

impl Drop for Browser {
    fn drop(&mut self) {
        use std::io::{Read, Write};
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = write!(
                s,
                "GET /shutdown HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                self.port
            );
            let _ = s.read(&mut [0u8; 256]);
        }
        for _ in 0..100 {
            if matches!(self.driver.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The group of the driver's pid: chromium and its helpers, if any outlived it.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start(name: &str) -> Browser {
        let chromium = need(&["chromium", "chromium-browser"], "chromium");
        let chromedriver = need(&["chromedriver"], "chromium-driver");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = shots_dir().join(format!("chromedriver-{name}.log"));
        let mut driver = Command::new(&chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromedriver.display()));
        let up = eventually(Duration::from_secs(20), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        if !up {
            let _ = driver.kill();
            panic!(
                "chromedriver did not listen on {port} within 20 s; see {}",
                log.display()
            );
        }
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-extensions",
                    "--no-first-run",
                    "--window-size=1280,1000",
                ],
            },
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let connect = async {
            ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps)
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
        };
        let client = match tokio::time::timeout(BROWSER_START, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                let _ = driver.kill();
                panic!(
                    "no WebDriver session on chromium: {e}; see {}",
                    log.display()
                )
            }
            Err(_) => {
                let _ = driver.kill();
                panic!(
                    "chromium did not start within {BROWSER_START:?}; see {}",
                    log.display()
                )
            }
        };
        Browser {
            client,
            driver,
            port,
        }
    }

    /// Ends the WebDriver session: chromedriver quits chromium.
    async fn quit(self) {
        let _ = bounded(WAIT, "closing the session", self.client.clone().close()).await;
    }

    async fn goto(&self, url: &str) {
        bounded(WAIT, "page load", self.client.goto(url))
            .await
            .unwrap_or_else(|e| panic!("loading {url}: {e}"));
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = bounded(WAIT, "find input", self.client.find(Locator::Css(css)))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        bounded(WAIT, "clear input", e.clear())
            .await
            .expect("clear");
        bounded(WAIT, "type", e.send_keys(text))
            .await
            .expect("type");
    }

    /// Empties an input, as a person selecting its text and deleting it.
    async fn clear(&self, css: &str) {
        let e = bounded(WAIT, "find input", self.client.find(Locator::Css(css)))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        bounded(WAIT, "clear input", e.clear())
            .await
            .expect("clear");
    }

    /// Picks the option of value `value` of the `<select>` at `css`.
    async fn select(&self, css: &str, value: &str) {
        let e = bounded(WAIT, "find select", self.client.find(Locator::Css(css)))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        bounded(WAIT, "select", e.select_by_value(value))
            .await
            .unwrap_or_else(|e| panic!("{css} = {value}: {e}"));
    }

    /// Lets the loaded page's origin write to and read from the clipboard (WebDriver's
    /// Set Permission, sent to chromedriver directly: `fantoccini` has no call for it).
    async fn allow_clipboard(&self) {
        let session = bounded(WAIT, "session id", self.client.session_id())
            .await
            .expect("session id")
            .expect("a session");
        let driver = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        for name in ["clipboard-read", "clipboard-write"] {
            let body = json!({"descriptor": {"name": name}, "state": "granted"});
            let r = send(
                driver,
                &Req::post(format!("/session/{session}/permissions"), body.to_string()),
            )
            .await;
            assert_eq!(r.status, 200, "{name}: {}", r.text());
        }
    }

    /// What the clipboard holds, read by the page.
    async fn clipboard(&self) -> Value {
        bounded(
            WAIT,
            "clipboard",
            self.client.execute_async(
                "const done = arguments[arguments.length - 1];
                 navigator.clipboard.readText().then(done, (e) => done({error: String(e)}));",
                Vec::new(),
            ),
        )
        .await
        .expect("reading the clipboard")
    }

    async fn click(&self, css: &str) {
        let e = bounded(WAIT, "find button", self.client.find(Locator::Css(css)))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        bounded(WAIT, "click", e.click()).await.expect("click");
    }

    /// Runs `script` (a function body) in the page and returns its value.
    async fn js(&self, script: &str) -> Value {
        bounded(WAIT, "script", self.client.execute(script, Vec::new()))
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Polls `script` every 50 ms until it returns something other than `null` or
    /// `false`, for at most `within` (a bounded number of polls).
    async fn until(&self, within: Duration, what: &str, script: &str) -> Value {
        let step = Duration::from_millis(50);
        let polls = (within.as_millis() / step.as_millis()).max(1);
        let mut last = Value::Null;
        for _ in 0..polls {
            last = self.js(script).await;
            if !(last.is_null() || last == json!(false)) {
                return last;
            }
            tokio::time::sleep(step).await;
        }
        let status = self
            .js("return document.getElementById('status')?.textContent ?? null")
            .await;
        panic!("{what}: not seen within {within:?} (last {last}; page status {status})")
    }

    async fn text(&self, css: &str) -> String {
        let e = bounded(WAIT, "find", self.client.find(Locator::Css(css)))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        bounded(WAIT, "text", e.text()).await.expect("text")
    }

    /// A screenshot of the whole page (the window grown to the page's height).
    async fn screenshot(&self, name: &str) -> PathBuf {
        self.js("window.scrollTo(0, 0); return null").await;
        let h = self
            .js("return Math.ceil(document.documentElement.scrollHeight)")
            .await
            .as_u64()
            .unwrap_or(1000)
            .clamp(600, 6000);
        bounded(
            WAIT,
            "resize",
            self.client.set_window_size(1280, h as u32 + 120),
        )
        .await
        .expect("resize");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let png = bounded(WAIT, "screenshot", self.client.screenshot())
            .await
            .expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = shots_dir().join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

// ------------------------------------------------------------------ helpers

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// "1 h 02 m 05 s" / "59 s" / "now" → seconds.
fn parse_duration(text: &str) -> Option<u64> {
    if text.trim() == "now" {
        return Some(0);
    }
    let mut total = 0;
    let mut parts = text.split_whitespace();
    while let Some(n) = parts.next() {
        let n: u64 = n.parse().ok()?;
        total += n * match parts.next()? {
            "d" => 86_400,
            "h" => 3_600,
            "m" => 60,
            "s" => 1,
            _ => return None,
        };
    }
    Some(total)
}

/// A number as the pages print it ("1,000", "—" for none).
fn shown(v: &Value) -> String {
    match v.as_i64() {
        Some(n) => {
            let digits = n.unsigned_abs().to_string();
            let mut out = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            if n < 0 { format!("-{out}") } else { out }
        }
        None => "—".into(),
    }
}

/// `/usage` once it stopped changing (settlements of finished requests landed).
async fn settled_usage(addr: std::net::SocketAddr, key: &str) -> Value {
    let mut last = usage(addr, key).await;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let next = usage(addr, key).await;
        if next == last && in_flight(&next) == 0 {
            return next;
        }
        last = next;
    }
    panic!("/usage kept changing: {last}")
}

// ------------------------------------------------------------------ usage page

const USAGE_CONFIG: &str = r#"
[server]
admin_token = "admin-token-0123456789"

[policies.plan]
concurrency = 3
requests = [{ window = "1m", limit = 3 }, { window = "1d", limit = 1000 }]
tokens = [{ window = "1m", limit = 100000 }]
amount_cap = 40_000_000

[policies.sub]
concurrency = 2
requests = [{ window = "1h", limit = 2 }]

[tenants.acme]
balance = 50_000_000
budgets = [{ name = "monthly", limit = 30_000_000, period = "30d" }]

[keys.holder]
key = "sk-holder-0001"
tenant = "acme"
policy = "plan"
spend_cap = 20_000_000
subscription = { policy = "sub", pay_as_you_go = true }
"#;

/// The policies of a `/usage` answer as the page should show them: scope → tiers of
/// (dimension, window, used, limit, remaining) as printed.
fn expected_tiers(view: &Value) -> Value {
    let policies = view["policies"].as_array().expect("policies");
    Value::Array(
        policies
            .iter()
            .map(|p| {
                let tiers: Vec<Value> = p["limits"]
                    .as_array()
                    .expect("limits")
                    .iter()
                    .map(|l| {
                        json!({
                            "dimension": l["dimension"],
                            "window": l["window_secs"].as_u64().map_or("none".to_owned(), |w| w.to_string()),
                            "used": shown(&l["used"]),
                            "limit": shown(&l["limit"]),
                            "remaining": shown(&l["remaining"]),
                        })
                    })
                    .collect();
                json!({"scope": p["scope"], "tiers": tiers})
            })
            .collect(),
    )
}

const READ_TIERS: &str = r#"
return [...document.querySelectorAll('#policies section.policy[data-scope]')].map(s => ({
  scope: s.dataset.scope,
  tiers: [...s.querySelectorAll('tr.tier')].map(r => ({
    dimension: r.dataset.dimension,
    window: r.dataset.window,
    used: r.querySelector('[data-field=used]').textContent,
    limit: r.querySelector('[data-field=limit]').textContent,
    remaining: r.querySelector('[data-field=remaining]').textContent,
  })),
}));
"#;

const READ_RESETS: &str = r#"
return [...document.querySelectorAll('#policies tr.tier')].map(r => {
  const c = r.querySelector('[data-field=resets] .countdown');
  return {
    dimension: r.dataset.dimension,
    window: r.dataset.window,
    deadline_ms: c ? Number(c.dataset.deadlineMs) : null,
    text: c ? c.textContent : r.querySelector('[data-field=resets]').textContent,
  };
});
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_usage_page_shows_every_tier_and_number_that_usage_reports_for_the_key() {
    let _one = ONE_BROWSER.lock().await;
    let p = Proxy::start(USAGE_CONFIG).await;
    let key = "sk-holder-0001";
    // Two requests under the subscription (2 an hour), three under the key's own
    // policy (pay-as-you-go), then the key's 3-a-minute tier refuses the sixth.
    for i in 0..5 {
        let r = send(p.addr, &ask(Dialect::OpenAi, key, false)).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    let r = send(p.addr, &ask(Dialect::OpenAi, key, false)).await;
    rejection(&r, Dialect::OpenAi, 42902);
    let view = settled_usage(p.addr, key).await;
    assert_eq!(used(&view, "subscription", "requests", 3600), 2, "{view}");
    assert_eq!(used(&view, "key", "requests", 60), 3, "{view}");

    let b = Browser::start("usage").await;
    let page = format!("http://{}/usage/page", p.addr);
    b.goto(&page).await;
    // The code table needs no key: every code of the core's table, in its order.
    let codes = b
        .until(
            WAIT,
            "the code table",
            r#"const rows = [...document.querySelectorAll('#codes tbody tr[data-code]')];
               return rows.length ? rows.map(r => [r.dataset.code,
                 r.querySelector('[data-field=status]').textContent,
                 r.querySelector('[data-field=message]').textContent,
                 r.querySelector('[data-field=meaning]').textContent]) : null;"#,
        )
        .await;
    let codes = codes.as_array().expect("rows");
    assert_eq!(codes.len(), GatewayCode::ALL.len());
    for (row, c) in codes.iter().zip(GatewayCode::ALL) {
        assert_eq!(row[0], json!(c.code().to_string()));
        assert_eq!(row[1], json!(c.http_status().to_string()));
        assert_eq!(row[2], json!(c.default_message()));
        assert!(row[3].as_str().is_some_and(|m| m.len() > 10), "{row}");
    }

    // The key field is never submitted: no name, and the page stays where it is.
    assert_eq!(
        b.js("return document.getElementById('key').getAttribute('name')")
            .await,
        Value::Null
    );
    b.type_into("#key", "sk-not-a-key").await;
    b.click("#load").await;
    b.until(
        WAIT,
        "the unknown key's message",
        "return document.getElementById('status').dataset.kind === 'error' \
         && document.getElementById('status').textContent",
    )
    .await;
    assert!(b.text("#status").await.contains("40101"));
    assert_eq!(
        b.js("return document.getElementById('view').hidden").await,
        json!(true)
    );

    b.type_into("#key", key).await;
    b.click("#load").await;
    b.until(
        WAIT,
        "the key's usage",
        "return document.getElementById('status').dataset.kind === 'ok' \
         && document.querySelectorAll('#policies tr.tier').length > 0",
    )
    .await;
    let url = bounded(WAIT, "url", b.client.current_url())
        .await
        .expect("url");
    assert_eq!(url.as_str(), page, "the key stays out of the URL");

    // Every tier of every policy, with the numbers /usage gives for the same key.
    let tiers = b.js(READ_TIERS).await;
    assert_eq!(tiers, expected_tiers(&view), "page vs /usage {view}");
    let scopes: Vec<&str> = tiers
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["scope"].as_str())
        .collect();
    assert_eq!(scopes, ["subscription", "key"]);

    // Resets: a countdown to each reset /usage gives, live.
    let resets = b.js(READ_RESETS).await;
    let mut counted = 0;
    for (shown_reset, policy_tier) in resets.as_array().unwrap().iter().zip(
        view["policies"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["limits"].as_array().unwrap().iter()),
    ) {
        match policy_tier["resets_at"].as_u64() {
            Some(at) => {
                assert_eq!(
                    shown_reset["deadline_ms"],
                    json!(at * 1000),
                    "{shown_reset}"
                );
                let secs = parse_duration(shown_reset["text"].as_str().unwrap())
                    .unwrap_or_else(|| panic!("a countdown: {shown_reset}"));
                let expect = at as f64 - now_secs();
                assert!(
                    (secs as f64 - expect).abs() <= 3.0,
                    "countdown {secs} s vs {expect:.1} s: {shown_reset}"
                );
                counted += 1;
            }
            None => assert_eq!(shown_reset["deadline_ms"], Value::Null, "{shown_reset}"),
        }
    }
    assert!(
        counted >= 3,
        "requests, day and hour tiers have resets: {resets}"
    );
    let first_text = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|r| r["dimension"] == "requests" && r["window"] == "60")
            .and_then(|r| r["text"].as_str())
            .and_then(parse_duration)
            .expect("the minute tier's countdown")
    };
    let before = first_text(&resets);
    let t0 = Instant::now();
    let later = b
        .until(
            Duration::from_secs(4),
            "the countdown to tick",
            &format!(
                "const c = document.querySelector('#policies tr.tier[data-dimension=requests][data-window=\"60\"] .countdown');
                 return c && c.textContent !== {:?} ? c.textContent : null;",
                resets.as_array().unwrap().iter()
                    .find(|r| r["dimension"] == "requests" && r["window"] == "60")
                    .and_then(|r| r["text"].as_str()).unwrap()
            ),
        )
        .await;
    let after = parse_duration(later.as_str().unwrap()).expect("a countdown");
    assert!(
        after < before,
        "{before} → {after} after {:?}",
        t0.elapsed()
    );

    // Slots, balance, spend against the cap, pending money, budgets.
    let read =
        |f: &str| format!("return document.querySelector('[data-field=\"{f}\"]').textContent");
    let money = &view["money"];
    assert_eq!(b.js(&read("key")).await, json!("holder"));
    assert_eq!(b.js(&read("tenant")).await, json!("acme"));
    assert_eq!(
        b.js(&read("in-flight")).await,
        json!(shown(&view["in_flight"]))
    );
    assert_eq!(
        b.js(&read("concurrency-limit")).await,
        json!(shown(&view["concurrency_limit"]))
    );
    assert_eq!(
        b.js(&read("balance")).await,
        json!(shown(&money["balance"]))
    );
    assert_eq!(
        b.js(&read("key-spent")).await,
        json!(shown(&money["key_spent"]))
    );
    assert_eq!(
        b.js(&read("spend-cap")).await,
        json!(shown(&money["spend_cap"]))
    );
    assert_eq!(
        b.js(&read("tenant-pending")).await,
        json!(shown(&money["tenant_pending_reconciliation"]))
    );
    assert_eq!(
        b.js(&read("key-pending")).await,
        json!(shown(&money["key_pending_reconciliation"]))
    );
    assert!(
        money["balance"].as_i64().unwrap() < 50_000_000,
        "requests were billed: {view}"
    );
    let budgets = b
        .js(
            r#"return [...document.querySelectorAll('#budgets tbody tr[data-budget]')].map(r => ({
              id: r.dataset.budget,
              spent: r.querySelector('[data-field=spent]').textContent,
              reserved: r.querySelector('[data-field=reserved]').textContent,
              limit: r.querySelector('[data-field=limit]').textContent }));"#,
        )
        .await;
    let expected: Vec<Value> = money["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            json!({"id": x["id"], "spent": shown(&x["spent"]), "reserved": shown(&x["reserved"]), "limit": shown(&x["limit"])})
        })
        .collect();
    assert_eq!(budgets, Value::Array(expected));
    assert_eq!(budgets.as_array().map(Vec::len), Some(1), "{view}");

    let shot = b.screenshot("usage").await;
    eprintln!("usage page: {}", shot.display());
    b.quit().await;
}

// ------------------------------------------------------------------ operator page

const ADMIN_CONFIG: &str = r#"
[server]
admin_token = "admin-token-0123456789"

[policies.open]

[policies.one-a-minute]
requests = [{ window = "1m", limit = 1 }]

[keys.a]
key = "sk-a"
policy = "open"

[keys.limited]
key = "sk-limited"
policy = "one-a-minute"

[channels.one]
vendor = "openai"
base_url = "fake://"
credential = "cred-one"
models = ["gpt-4o-mini"]
capacity = 4

[channels.two]
vendor = "openai"
base_url = "fake://"
credential = "cred-two"
models = ["gpt-4o-mini"]

[channels.three]
vendor = "openai"
base_url = "fake://"
credential = "cred-three"
models = ["gpt-solo"]

[models.gpt-4o-mini]
price = { input_per_mtok = 1, output_per_mtok = 1 }

[models.gpt-solo]
price = { input_per_mtok = 1, output_per_mtok = 1 }

[failover]
circuit_min_requests = 2
circuit_open = "10m"
"#;

async fn admin_get(addr: std::net::SocketAddr, path: &str) -> Value {
    let r = send(
        addr,
        &Req::get(path).header("authorization", format!("Bearer {TOKEN}")),
    )
    .await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

/// Provokes a 42902 (twice), a 40101 (once) and a 50202 (twice: channel three, the only
/// one of `gpt-solo`, keeps failing, and its circuit opens, F8), and gets channel one
/// disabled (its credential refused by the provider, F5).
async fn provoke(p: &Proxy) {
    assert_eq!(
        send(p.addr, &ask(Dialect::OpenAi, "sk-limited", false))
            .await
            .status,
        200
    );
    for _ in 0..2 {
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-limited", false)).await;
        rejection(&r, Dialect::OpenAi, 42902);
    }
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-unknown", false)).await;
    rejection(&r, Dialect::OpenAi, 40101);
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::InvalidApiKey));
    for _ in 0..3 {
        assert_eq!(
            send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
                .await
                .status,
            200
        );
    }
    p.fake
        .set_default_for("cred-three", Behavior::error(ErrorKind::ServerError));
    for _ in 0..2 {
        let r = send(
            p.addr,
            &gen_for(Dialect::OpenAi, "gpt-solo", false, None).key(KeyAt::Bearer, "sk-a"),
        )
        .await;
        rejection(&r, Dialect::OpenAi, 50202);
    }
    p.fake.clear_behaviors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_admin_rejections_count_by_code_behind_the_admin_token() {
    let p = Proxy::start(ADMIN_CONFIG).await;
    let r = send(p.addr, &Req::get("/admin/rejections")).await;
    assert_eq!(r.status, 401);
    let empty = admin_get(p.addr, "/admin/rejections").await;
    assert_eq!(empty["totals"], json!({}));
    assert_eq!(empty["buckets"].as_array().map(Vec::len), Some(15));
    provoke(&p).await;
    let v = admin_get(p.addr, "/admin/rejections").await;
    assert_eq!(
        v["totals"],
        json!({"40101": 1, "42902": 2, "50202": 2}),
        "{v}"
    );
    let buckets = v["buckets"].as_array().unwrap();
    let last_two: u64 = buckets[13..]
        .iter()
        .map(|b| b["counts"]["42902"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        last_two, 2,
        "in the current minute (or the one before): {v}"
    );
    // Channel one's refused credential was failed over and answered 200: not a rejection.
    assert!(v["totals"].get("40101").is_some_and(|n| n == 1));
    // The pages themselves are public and hold nothing secret.
    for (path, kind) in [
        ("/usage/page", "text/html"),
        ("/admin/page", "text/html"),
        ("/pages/style.css", "text/css"),
        ("/pages/pages.js", "text/javascript"),
        ("/pages/usage.js", "text/javascript"),
        ("/pages/admin.js", "text/javascript"),
        ("/keys/page", "text/html"),
        ("/pages/keys.css", "text/css"),
        ("/pages/keys.js", "text/javascript"),
        ("/pages/codes.json", "application/json"),
    ] {
        let r = send(p.addr, &Req::get(path)).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with(kind)),
            "{path}"
        );
        assert!(
            !r.text().contains("sk-a") && !r.text().contains(TOKEN),
            "{path}"
        );
    }
    let page = send(p.addr, &Req::get("/usage/page")).await;
    let csp = page.header("content-security-policy").unwrap_or("");
    assert!(
        csp.contains("form-action 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    // `/usage` is still the JSON it was.
    assert_eq!(usage(p.addr, "sk-a").await["key"], "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_operator_page_shows_channels_and_rejections_and_enables_a_disabled_channel() {
    let _one = ONE_BROWSER.lock().await;
    let p = Proxy::start(ADMIN_CONFIG).await;
    provoke(&p).await;
    let channels = admin_get(p.addr, "/admin/channels").await;
    let rejections = admin_get(p.addr, "/admin/rejections").await;
    let one = channels["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "one")
        .cloned()
        .expect("channel one");
    assert_eq!(one["disabled"], true, "{channels}");

    let b = Browser::start("admin").await;
    let page = format!("http://{}/admin/page", p.addr);
    b.goto(&page).await;
    assert_eq!(
        b.js("return document.getElementById('token').getAttribute('name')")
            .await,
        Value::Null
    );
    b.type_into("#token", "admin-token-wrong-0000").await;
    b.click("#connect").await;
    b.until(
        WAIT,
        "the refused token's message",
        "return document.getElementById('status').dataset.kind === 'error'",
    )
    .await;
    assert!(b.text("#status").await.contains("401"));

    b.type_into("#token", TOKEN).await;
    b.click("#connect").await;
    b.until(
        WAIT,
        "the channels",
        "return document.querySelectorAll('#channels tbody tr[data-channel]').length === 3",
    )
    .await;
    let url = bounded(WAIT, "url", b.client.current_url())
        .await
        .expect("url");
    assert_eq!(url.as_str(), page, "the token stays out of the URL");

    // Rejections by code: the codes and counts /admin/rejections gives, in the minute
    // they happened.
    let shown_rejections = b
        .until(
            WAIT,
            "the rejections table",
            r#"const rows = [...document.querySelectorAll('#rejections tbody tr[data-code]')];
               return rows.length ? Object.fromEntries(rows.map(r => [r.dataset.code,
                 Number(r.querySelector('[data-field=total]').textContent)])) : null;"#,
        )
        .await;
    assert_eq!(shown_rejections, rejections["totals"], "{rejections}");
    assert_eq!(
        shown_rejections,
        json!({"40101": 1, "42902": 2, "50202": 2})
    );
    let per_minute = b
        .js(r#"const r = document.querySelector('#rejections tr[data-code="42902"]');
               return [...r.querySelectorAll('td.minute')].map(c => [Number(c.dataset.minute), c.textContent]);"#)
        .await;
    let per_minute = per_minute.as_array().unwrap();
    assert_eq!(per_minute.len(), 15);
    let hits: Vec<(u64, u64)> = per_minute
        .iter()
        .filter(|m| m[1] != "·")
        .map(|m| {
            (
                m[0].as_u64().unwrap(),
                m[1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(u64, u64)> = rejections["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| Some((b["start_ms"].as_u64()?, b["counts"]["42902"].as_u64()?)))
        .collect();
    assert_eq!(hits, expected);

    // Channels: in flight against capacity, health, the disabled credential.
    let row = |name: &str, field: &str| {
        format!(
            "return document.querySelector('#channels tr[data-channel=\"{name}\"] [data-field=\"{field}\"]').textContent"
        )
    };
    assert_eq!(b.js(&row("one", "in-flight")).await, json!("0 / 4"));
    assert_eq!(b.js(&row("two", "in-flight")).await, json!("0 / ∞"));
    assert_eq!(
        b.js("return document.querySelector('#channels tr[data-channel=\"one\"] [data-field=cooldown]').dataset.state")
            .await,
        json!("disabled")
    );
    assert_eq!(
        b.js("return document.querySelector('#channels tr[data-channel=\"two\"] [data-field=health]').dataset.state")
            .await,
        json!("healthy")
    );
    assert_eq!(
        b.js("return document.querySelector('#channels tr[data-channel=\"two\"] button.enable')")
            .await,
        Value::Null,
        "a healthy channel needs no hand"
    );
    // Channel three's circuit is open: until when, counting down, as /admin/channels says.
    let three = channels["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "three")
        .cloned()
        .expect("channel three");
    let until = three["health"]["open_until_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("channel three's circuit is open: {three}"));
    let health = b
        .js("const c = document.querySelector('#channels tr[data-channel=\"three\"] [data-field=health]');
             return {state: c.dataset.state, deadline: Number(c.querySelector('.countdown').dataset.deadlineMs), text: c.textContent};")
        .await;
    assert_eq!(health["state"], "open", "{health}");
    assert_eq!(health["deadline"], json!(until), "{health}");
    assert!(
        health["text"].as_str().unwrap().starts_with("open until "),
        "{health}"
    );
    let shot = b.screenshot("admin").await;
    eprintln!("operator page: {}", shot.display());

    // The enable button puts the channel back.
    b.click("#channels tr[data-channel=\"one\"] button.enable")
        .await;
    b.until(
        WAIT,
        "channel one enabled",
        "const c = document.querySelector('#channels tr[data-channel=\"one\"] [data-field=cooldown]');
         return c && c.dataset.state === 'none' && document.getElementById('status').textContent.includes('enabled');",
    )
    .await;
    let after = admin_get(p.addr, "/admin/channels").await;
    assert!(
        after["channels"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["disabled"] == false),
        "{after}"
    );
    let calls = p.fake.stats().calls_for("cred-one");
    for _ in 0..4 {
        assert_eq!(
            send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
                .await
                .status,
            200
        );
    }
    assert!(
        p.fake.stats().calls_for("cred-one") > calls,
        "back in rotation"
    );
    b.screenshot("admin-enabled").await;
    b.quit().await;
}

// ------------------------------------------------------------------ keys page

/// A gateway on a SQLite records database of its own, in a temporary directory both
/// removed on drop.
struct Records {
    addr: std::net::SocketAddr,
    _fake: portcullis_fake_upstream::FakeUpstream,
    _directory: std::sync::Arc<portcullis_proxy::keys::Directory>,
    server: tokio::task::JoinHandle<()>,
    dir: PathBuf,
}

impl Drop for Records {
    fn drop(&mut self) {
        self.server.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The file's side of the keys page's gateway: a policy keys may name, a tenant and a
/// key of the file (listed read-only), the channels of the fake upstream.
const KEYS_CONFIG: &str = r#"
[policies.plan]
concurrency = 4

[tenants.filed]
balance = 1_000_000

[keys.filed-key]
key = "sk-filed-key-0001"
tenant = "filed"
"#;

async fn records_gateway() -> Records {
    records_gateway_on(KEYS_CONFIG).await
}

/// A gateway on a SQLite records database of its own (the ledger on, as by default),
/// `config` its file's policies, tenants and keys (the channels of the fake upstream
/// added).
async fn records_gateway_on(config: &str) -> Records {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pcx-pages-keys-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let text = format!(
        "[server]\nadmin_token = \"{TOKEN}\"\n\n[database]\nurl = \"sqlite://{}\"\nhash_secret_env = \"PCX_TEST_UNSET_HASH_SECRET\"\n{config}{CHANNELS}",
        dir.join("records.db").display()
    );
    let config = portcullis_proxy::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let directory = portcullis_proxy::keys::Directory::open(&config)
        .await
        .expect("the records database")
        .expect("configured");
    let fake = portcullis_fake_upstream::FakeUpstream::start().await;
    let (addr, server) =
        serve_with_directory(config, fake.base_url(), Some(directory.clone())).await;
    Records {
        addr,
        _fake: fake,
        _directory: directory,
        server,
        dir,
    }
}

/// An admin API call with `bearer`: its status and JSON body.
async fn api(
    addr: std::net::SocketAddr,
    bearer: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = match body {
        Some(b) => Req::post(path, b.to_string()),
        None => Req::get(path),
    };
    req.method = method.parse().expect("a method");
    let r = send(
        addr,
        &req.header("authorization", format!("Bearer {bearer}")),
    )
    .await;
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status.as_u16(), v)
}

/// An admin API call expected to answer `status`.
async fn api_ok(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Value {
    let (got, v) = api(addr, TOKEN, method, path, body).await;
    assert_eq!(got, status, "{method} {path}: {v}");
    v
}

/// The status of one model request with `key`.
async fn answer(addr: std::net::SocketAddr, key: &str) -> u16 {
    send(addr, &ask(Dialect::OpenAi, key, false))
        .await
        .status
        .as_u16()
}

/// Sends model requests with `key` until one answers `status` (the gateway follows a
/// change at once; a bounded number of tries).
async fn until_answer(addr: std::net::SocketAddr, key: &str, status: u16) {
    let start = Instant::now();
    loop {
        let got = answer(addr, key).await;
        if got == status {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "{:.10}… answered {got}, never {status}",
            key
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key of `GET /admin/keys` as the keys page should show it (`keys.js`' `keyRow`).
fn expected_row(k: &Value) -> Value {
    let mut limits = Vec::new();
    if let Some(p) = k["policy"].as_str() {
        limits.push(format!("policy {p}"));
    }
    for (field, name) in [
        ("rpm", "rpm"),
        ("concurrency", "concurrency"),
        ("spend_cap", "spend cap"),
    ] {
        if !k[field].is_null() {
            limits.push(format!("{name} {}", shown(&k[field])));
        }
    }
    if let Some(m) = k["models"].as_array().filter(|m| !m.is_empty()) {
        let names: Vec<&str> = m.iter().filter_map(Value::as_str).collect();
        limits.push(format!("models {}", names.join(", ")));
    }
    if let Some(s) = k["subscription"].as_object() {
        let mut t = format!("subscription {}", s["policy"].as_str().unwrap_or(""));
        if let Some(at) = s.get("expires_at").and_then(Value::as_str) {
            t.push_str(&format!(" until {at}"));
        }
        if s.get("pay_as_you_go") == Some(&json!(true)) {
            t.push_str(" (pay-as-you-go)");
        }
        limits.push(t);
    }
    if let Some(e) = k["errors"].as_str() {
        limits.push(format!("errors {e}"));
    }
    if limits.is_empty() {
        limits.push("none of its own".into());
    }
    json!({
        "id": k["id"],
        "label": k["label"],
        "tenant": k["tenant"].as_str().unwrap_or("—"),
        "state": k["state"],
        "limits": limits,
        "expires": k["expires_at"].as_str().unwrap_or("never"),
    })
}

const READ_KEY_ROWS: &str = r#"
return [...document.querySelectorAll('#keys tbody tr[data-key-id]')].map(r => ({
  id: r.dataset.keyId,
  label: r.querySelector('[data-field=label]').textContent,
  tenant: r.querySelector('[data-field=tenant]').textContent,
  state: r.querySelector('[data-field=state]').textContent,
  limits: [...r.querySelectorAll('[data-field=limits] [data-limit]')].map(s => s.textContent),
  expires: r.querySelector('[data-field=expires]').textContent,
}));
"#;

const READ_TENANTS: &str = r#"
return Object.fromEntries([...document.querySelectorAll('#tenants tbody tr[data-tenant]')]
  .map(r => [r.dataset.tenant, r.querySelector('[data-field=balance]').textContent]));
"#;

/// The rows the page shows, by id.
async fn key_rows(b: &Browser) -> std::collections::BTreeMap<String, Value> {
    b.js(READ_KEY_ROWS)
        .await
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["id"].as_str().expect("id").to_owned(), r.clone()))
        .collect()
}

/// `GET /admin/keys` with `bearer`, every page, by id.
async fn listed_keys(
    addr: std::net::SocketAddr,
    bearer: &str,
) -> std::collections::BTreeMap<String, Value> {
    let (status, v) = api(addr, bearer, "GET", "/admin/keys?limit=500", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["next_cursor"], Value::Null, "one page: {v}");
    v["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| (k["id"].as_str().expect("id").to_owned(), expected_row(k)))
        .collect()
}

/// The balances `GET /admin/tenants` gives, as the page prints them.
async fn listed_balances(addr: std::net::SocketAddr) -> Value {
    let v = api_ok(addr, "GET", "/admin/tenants", None, 200).await;
    Value::Object(
        v["tenants"]
            .as_array()
            .expect("tenants")
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().expect("name").to_owned(),
                    json!(shown(&t["balance"])),
                )
            })
            .collect(),
    )
}

/// Types `token` into the page and connects; waits until the page has chosen its view.
async fn connect(b: &Browser, token: &str, mode: &str) {
    b.type_into("#token", token).await;
    b.click("#connect").await;
    b.until(
        WAIT,
        &format!("the {mode} view"),
        &format!(
            "return document.body.dataset.mode === {mode:?} && !document.getElementById('view').hidden"
        ),
    )
    .await;
}

/// Whether `text` is anywhere in the page's DOM (text, attributes, input values).
async fn in_dom(b: &Browser, text: &str) -> bool {
    b.js(&format!(
        "const t = {text:?};
         return document.documentElement.outerHTML.includes(t)
           || [...document.querySelectorAll('input')].some(i => i.value.includes(t));"
    ))
    .await
        == json!(true)
}

/// The secret shown in the box `#{id}` (waits for one other than `not`).
async fn shown_secret(b: &Browser, id: &str, not: &str) -> String {
    b.until(
        WAIT,
        &format!("a secret in #{id}"),
        &format!(
            "const c = document.querySelector('#{id}:not([hidden]) [data-field=secret]');
             return c && c.textContent !== {not:?} ? c.textContent : null;"
        ),
    )
    .await
    .as_str()
    .expect("a secret")
    .to_owned()
}

/// The error shown next to a form: its text and the field it names.
async fn form_error(b: &Browser, id: &str) -> (String, String) {
    let v = b
        .until(
            WAIT,
            &format!("the error in #{id}"),
            &format!(
                "const e = document.getElementById({id:?});
                 return e.hidden ? null : [e.textContent, e.dataset.errorField || ''];"
            ),
        )
        .await;
    (
        v[0].as_str().expect("text").to_owned(),
        v[1].as_str().expect("field").to_owned(),
    )
}

/// K9: through the keys page only (typing, clicking), the operator creates a tenant and
/// tops it up, creates a key whose secret is shown once and copied, limits it to one
/// request a minute and sees the gateway refuse the second, clears the limit and sets
/// others, rotates it and revokes it; the page shows what `GET /admin/keys` and `GET
/// /admin/tenants` say, and the gateway's 400 next to the form with the field it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k9_keys_page_creates_edits_rotates_and_revokes_a_key() {
    let _one = ONE_BROWSER.lock().await;
    let gw = records_gateway().await;
    let addr = gw.addr;
    let b = Browser::start("keys").await;
    let page = format!("http://{addr}/keys/page");
    b.goto(&page).await;
    b.allow_clipboard().await;
    assert_eq!(
        b.js("return document.getElementById('token').getAttribute('name')")
            .await,
        Value::Null
    );

    // A wrong token: refused, nothing shown.
    b.type_into("#token", "admin-token-wrong-0000").await;
    b.click("#connect").await;
    b.until(
        WAIT,
        "the refused token's message",
        "return document.getElementById('status').dataset.kind === 'error'",
    )
    .await;
    assert!(b.text("#status").await.contains("401"));
    assert_eq!(
        b.js("return document.getElementById('view').hidden").await,
        json!(true)
    );

    // The admin token: the operator's view, the file's key read-only, the tenants.
    connect(&b, TOKEN, "operator").await;
    for shown in ["tenants-section", "filter", "create-tenant"] {
        assert_eq!(
            b.js(&format!(
                "return document.getElementById({shown:?}).checkVisibility()"
            ))
            .await,
            json!(true),
            "#{shown} is shown"
        );
    }
    let listed = api_ok(addr, "GET", "/admin/keys", None, 200).await;
    assert_eq!(
        listed["static_keys"],
        json!([{"label": "filed-key", "tenant": "filed", "static": true}])
    );
    let statics = b
        .js(
            r#"return [...document.querySelectorAll('#static-keys tbody tr')].map(r => ({
              label: r.querySelector('[data-field=label]').textContent,
              tenant: r.querySelector('[data-field=tenant]').textContent,
              buttons: r.querySelectorAll('button, input').length }));"#,
        )
        .await;
    assert_eq!(
        statics,
        json!([{"label": "filed-key", "tenant": "filed", "buttons": 0}])
    );
    assert_eq!(key_rows(&b).await.len(), 0);
    assert_eq!(b.js(READ_TENANTS).await, listed_balances(addr).await);

    // A tenant, made and topped up in the page.
    b.type_into("#tenant-form [data-key-field=name]", "acme")
        .await;
    b.type_into("#tenant-form [data-key-field=balance]", "1000000")
        .await;
    b.click("#create-tenant-button").await;
    b.until(
        WAIT,
        "tenant acme listed",
        "return document.querySelector('#tenants tr[data-tenant=acme] [data-field=balance]')?.textContent === '1,000,000'",
    )
    .await;
    assert_eq!(b.js(READ_TENANTS).await, listed_balances(addr).await);
    b.type_into("#tenants tr[data-tenant=acme] form.top-up input", "250000")
        .await;
    b.click("#tenants tr[data-tenant=acme] form.top-up button")
        .await;
    b.until(
        WAIT,
        "acme's new balance",
        "return document.querySelector('#tenants tr[data-tenant=acme] [data-field=balance]').textContent === '1,250,000'",
    )
    .await;
    let balances = listed_balances(addr).await;
    assert_eq!(balances["acme"], json!("1,250,000"), "{balances}");
    assert_eq!(b.js(READ_TENANTS).await, balances);
    assert!(b.text("#status").await.contains("topped up by 250,000"));

    // A key the rules refuse: the gateway's 400, next to the form, naming the field.
    b.type_into("#create-form [data-key-field=label]", "browser-key")
        .await;
    b.select("#create-form [data-key-field=tenant]", "acme")
        .await;
    b.type_into("#create-form [data-key-field=rpm]", "0").await;
    b.click("#create").await;
    let (message, field) = form_error(&b, "create-error").await;
    assert_eq!(field, "rpm", "{message}");
    assert!(message.starts_with("400: rpm"), "{message}");
    assert_eq!(
        b.js("return document.querySelector('#create-form [data-key-field=rpm]').getAttribute('aria-invalid')")
            .await,
        json!("true")
    );
    assert_eq!(listed_keys(addr, TOKEN).await.len(), 0, "nothing written");

    // The key: its secret shown once, with a Copy button and the warning.
    b.type_into("#create-form [data-key-field=rpm]", "100")
        .await;
    b.click("#create").await;
    let secret = shown_secret(&b, "create-secret", "").await;
    assert!(secret.starts_with("sk-pcx-"), "{secret}");
    assert_eq!(
        b.js("return document.getElementById('create-error').hidden")
            .await,
        json!(true)
    );
    assert!(
        b.text("#create-secret .warn")
            .await
            .contains("shown this once and never again")
    );
    b.click("#create-secret button.copy").await;
    b.until(
        WAIT,
        "the secret copied",
        "return document.querySelector('#create-secret button.copy').dataset.copied === 'true'",
    )
    .await;
    assert_eq!(b.clipboard().await, json!(secret));

    let listed = listed_keys(addr, TOKEN).await;
    assert_eq!(listed.len(), 1);
    let (id, row) = listed.iter().next().expect("the key");
    let id = id.clone();
    assert_eq!(row["tenant"], "acme");
    assert_eq!(row["limits"], json!(["rpm 100"]));
    assert_eq!(key_rows(&b).await, listed);
    let (_, raw) = api(addr, TOKEN, "GET", "/admin/keys", None).await;
    assert!(!raw.to_string().contains(&secret[7..]), "no secret: {raw}");
    until_answer(addr, &secret, 200).await;

    // The form used again: the first secret leaves the page. A label is text, never
    // markup.
    b.type_into("#create-form [data-key-field=label]", "<b>second</b>")
        .await;
    b.click("#create").await;
    let second = shown_secret(&b, "create-secret", &secret).await;
    assert!(!in_dom(&b, &secret).await, "the first secret left the page");
    let labels = b
        .js("return [...document.querySelectorAll('#keys tbody [data-field=label]')].map(c => c.textContent).sort()")
        .await;
    assert_eq!(labels, json!(["<b>second</b>", "browser-key"]));
    assert_eq!(
        b.js("return document.querySelectorAll('#keys b').length")
            .await,
        json!(0)
    );
    b.click("#create-secret button.done").await;
    assert!(!in_dom(&b, &second).await, "dismissed, the secret is gone");
    assert_eq!(key_rows(&b).await, listed_keys(addr, TOKEN).await);

    // One request a minute: the second within the minute is refused.
    b.click(&format!("#keys tr[data-key-id={id:?}] button.manage"))
        .await;
    b.until(
        WAIT,
        "the manage panel",
        &format!(
            "const m = document.getElementById('manage'); return !m.hidden && m.dataset.keyId === {id:?}"
        ),
    )
    .await;
    assert_eq!(
        b.js("return document.querySelector('#edit-form [data-key-field=rpm]').value")
            .await,
        json!("100")
    );
    b.type_into("#edit-form [data-key-field=rpm]", "1").await;
    b.click("#save").await;
    b.until(
        WAIT,
        "rpm 1 shown",
        &format!(
            "return document.querySelector('#keys tr[data-key-id={id:?}] [data-limit=rpm]')?.textContent === 'rpm 1'"
        ),
    )
    .await;
    let stored = api_ok(addr, "GET", &format!("/admin/keys/{id}"), None, 200).await;
    assert_eq!(stored["rpm"], 1, "{stored}");
    let (applied, view) = usage_until(addr, &secret, WAIT, |v| {
        v["policies"].as_array().is_some_and(|ps| {
            ps.iter().any(|p| {
                p["limits"].as_array().is_some_and(|ls| {
                    ls.iter()
                        .any(|l| l["dimension"] == "rolling_requests" && l["limit"] == 1)
                })
            })
        })
    })
    .await;
    assert!(applied, "the gateway follows the change: {view}");
    // The request that answered 200 above was this minute's one.
    let r = send(addr, &ask(Dialect::OpenAi, &secret, false)).await;
    assert_eq!(r.status, 429, "{}", r.text());

    // Cleared (an empty field is null) and other limits set, through the same form.
    b.clear("#edit-form [data-key-field=rpm]").await;
    b.type_into("#edit-form [data-key-field=spend_cap]", "5000000")
        .await;
    b.type_into("#edit-form [data-key-field=models]", "gpt-4o-mini")
        .await;
    b.type_into(
        "#edit-form [data-key-field=expires_at]",
        "2099-01-01T00:00:00Z",
    )
    .await;
    b.type_into("#edit-form [data-key-field=subscription]", "plan")
        .await;
    b.click("#edit-form [data-key-field=pay_as_you_go]").await;
    b.click("#save").await;
    b.until(
        WAIT,
        "the new limits shown",
        &format!(
            "const r = document.querySelector('#keys tr[data-key-id={id:?}]');
             return r.querySelector('[data-limit=spend_cap]') && !r.querySelector('[data-limit=rpm]');"
        ),
    )
    .await;
    let stored = api_ok(addr, "GET", &format!("/admin/keys/{id}"), None, 200).await;
    assert_eq!(stored["rpm"], Value::Null, "{stored}");
    assert_eq!(stored["spend_cap"], 5_000_000, "{stored}");
    assert_eq!(stored["models"], json!(["gpt-4o-mini"]), "{stored}");
    assert_eq!(stored["expires_at"], "2099-01-01T00:00:00Z", "{stored}");
    assert_eq!(
        stored["subscription"],
        json!({"policy": "plan", "expires_at": null, "pay_as_you_go": true}),
        "{stored}"
    );
    assert_eq!(key_rows(&b).await, listed_keys(addr, TOKEN).await);
    until_answer(addr, &secret, 200).await;

    // A change the rules refuse: the 400 next to the edit form; nothing changed.
    b.type_into("#edit-form [data-key-field=policy]", "no-such-policy")
        .await;
    b.click("#save").await;
    let (message, field) = form_error(&b, "edit-error").await;
    assert_eq!(field, "policy", "{message}");
    assert!(message.contains("no-such-policy"), "{message}");
    let unchanged = api_ok(addr, "GET", &format!("/admin/keys/{id}"), None, 200).await;
    assert_eq!(unchanged["policy"], Value::Null, "{unchanged}");
    assert_eq!(unchanged["revision"], stored["revision"], "{unchanged}");
    b.clear("#edit-form [data-key-field=policy]").await;
    b.until(
        WAIT,
        "the error gone once the field is changed",
        "return document.getElementById('edit-error').hidden
           && !document.querySelector('#edit-form .invalid')",
    )
    .await;

    // Rotated without a grace: the new secret, shown once with its Copy button, answers;
    // the old one is refused at once.
    b.type_into("#grace", "0").await;
    b.click("#rotate").await;
    let rotated = shown_secret(&b, "rotate-secret", "").await;
    assert_ne!(rotated, secret);
    assert!(rotated.starts_with("sk-pcx-"), "{rotated}");
    assert!(
        b.text("#rotate-secret")
            .await
            .contains("refused from now on"),
        "{}",
        b.text("#rotate-secret").await
    );
    b.click("#rotate-secret button.copy").await;
    b.until(
        WAIT,
        "the rotated secret copied",
        "return document.querySelector('#rotate-secret button.copy').dataset.copied === 'true'",
    )
    .await;
    assert_eq!(b.clipboard().await, json!(rotated));
    until_answer(addr, &rotated, 200).await;
    until_answer(addr, &secret, 401).await;
    let shot = b.screenshot("keys").await;
    eprintln!("keys page: {}", shot.display());

    // Revoked after a confirmation inside the page (no window.confirm): Cancel first.
    b.click("#revoke").await;
    assert_eq!(
        b.js("return document.getElementById('revoke-confirm').hidden")
            .await,
        json!(false)
    );
    b.click("#revoke-no").await;
    assert_eq!(
        b.js("return document.getElementById('revoke-confirm').hidden")
            .await,
        json!(true)
    );
    let still = api_ok(addr, "GET", &format!("/admin/keys/{id}"), None, 200).await;
    assert_eq!(still["state"], "active");
    b.click("#revoke").await;
    b.click("#revoke-yes").await;
    b.until(
        WAIT,
        "the key shown revoked",
        &format!(
            "return document.querySelector('#keys tr[data-key-id={id:?}]').dataset.state === 'revoked'
               && document.getElementById('manage').hidden"
        ),
    )
    .await;
    let revoked = api_ok(addr, "GET", &format!("/admin/keys/{id}"), None, 200).await;
    assert_eq!(revoked["state"], "revoked");
    assert_eq!(key_rows(&b).await, listed_keys(addr, TOKEN).await);
    until_answer(addr, &rotated, 401).await;

    // No secret or token in the URL, in storage, or (once dismissed) in the DOM.
    let url = bounded(WAIT, "url", b.client.current_url())
        .await
        .expect("url");
    assert_eq!(url.as_str(), page);
    assert_eq!(
        b.js("return localStorage.length + sessionStorage.length + document.cookie.length")
            .await,
        json!(0)
    );
    assert!(!in_dom(&b, &rotated).await, "the panel closed with it");
    b.quit().await;
}

/// K9: a tenant's management token, made on the page by the operator (shown once), logs
/// into the same page and sees its tenant's keys only — page after page, another
/// tenant's key never, no tenants — and a key it creates there is its tenant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k9_keys_page_tenant_token_sees_only_its_tenant() {
    let _one = ONE_BROWSER.lock().await;
    let gw = records_gateway().await;
    let addr = gw.addr;
    for (name, balance) in [("acme", 1_000_000), ("other", 1_000_000)] {
        api_ok(
            addr,
            "POST",
            "/admin/tenants",
            Some(json!({"name": name, "balance": balance})),
            201,
        )
        .await;
    }
    // More than the page's 50 a page for acme; one key of another tenant, one of none.
    for i in 0..55 {
        api_ok(
            addr,
            "POST",
            "/admin/keys",
            Some(json!({"label": format!("acme-{i:02}"), "tenant": "acme", "rpm": 60})),
            201,
        )
        .await;
    }
    let other = api_ok(
        addr,
        "POST",
        "/admin/keys",
        Some(json!({"label": "other-key", "tenant": "other"})),
        201,
    )
    .await;
    let other_id = other["id"].as_str().expect("id").to_owned();
    api_ok(
        addr,
        "POST",
        "/admin/keys",
        Some(json!({"label": "loose"})),
        201,
    )
    .await;

    let b = Browser::start("keys-tenant").await;
    let page = format!("http://{addr}/keys/page");
    b.goto(&page).await;
    connect(&b, TOKEN, "operator").await;
    // The operator pages through every key.
    assert_eq!(key_rows(&b).await.len(), 50);
    assert_eq!(
        b.js("return document.getElementById('more').hidden").await,
        json!(false)
    );
    b.click("#more").await;
    b.until(
        WAIT,
        "the second page",
        "return document.querySelectorAll('#keys tbody tr[data-key-id]').length === 57",
    )
    .await;
    assert_eq!(
        b.js("return document.getElementById('more').hidden").await,
        json!(true)
    );
    assert_eq!(key_rows(&b).await, listed_keys(addr, TOKEN).await);
    // The tenant filter: other's key alone.
    b.select("#tenant-filter", "other").await;
    b.until(
        WAIT,
        "other's keys",
        "return document.querySelectorAll('#keys tbody tr[data-key-id]').length === 1",
    )
    .await;
    assert!(key_rows(&b).await.contains_key(&other_id));

    // A token for acme, shown once, then dismissed.
    b.click("#tenants tr[data-tenant=acme] button.make-token")
        .await;
    let token = shown_secret(&b, "token-secret", "").await;
    assert!(
        b.text("#token-secret").await.contains("“acme”"),
        "{}",
        b.text("#token-secret").await
    );
    let (status, _) = api(addr, &token, "GET", "/admin/tenants", None).await;
    assert_eq!(status, 403, "the tenant routes are the operator's");
    b.click("#token-secret button.done").await;
    assert!(!in_dom(&b, &token).await, "dismissed, the token is gone");

    // Logged in with it: acme's keys only, page after page; no tenants.
    connect(&b, &token, "tenant").await;
    for hidden in [
        "tenants-section",
        "filter",
        "create-tenant",
        "static-section",
    ] {
        assert_eq!(
            b.js(&format!(
                "return document.getElementById({hidden:?}).checkVisibility()"
            ))
            .await,
            json!(false),
            "#{hidden} is not shown"
        );
    }
    assert_eq!(
        b.js("return document.getElementById('keys-section').checkVisibility()")
            .await,
        json!(true)
    );
    assert_eq!(
        b.js("return document.querySelectorAll('#tenants tbody tr').length")
            .await,
        json!(0)
    );
    assert_eq!(key_rows(&b).await.len(), 50);
    b.click("#more").await;
    b.until(
        WAIT,
        "acme's second page",
        "return document.querySelectorAll('#keys tbody tr[data-key-id]').length === 55",
    )
    .await;
    let rows = key_rows(&b).await;
    assert_eq!(rows, listed_keys(addr, &token).await);
    assert!(rows.values().all(|r| r["tenant"] == "acme"), "{rows:?}");
    assert!(!rows.contains_key(&other_id));
    assert!(!b.text("#keys").await.contains("other-key"));

    // A key made there is acme's, and answers.
    b.type_into("#create-form [data-key-field=label]", "made-by-acme")
        .await;
    b.type_into("#create-form [data-key-field=concurrency]", "2")
        .await;
    b.click("#create").await;
    let secret = shown_secret(&b, "create-secret", "").await;
    let made = b
        .until(
            WAIT,
            "the new key listed",
            r#"const r = [...document.querySelectorAll('#keys tbody tr[data-key-id]')]
                 .find(r => r.querySelector('[data-field=label]').textContent === 'made-by-acme');
               return r ? r.dataset.keyId : null;"#,
        )
        .await;
    let made = made.as_str().expect("id").to_owned();
    let stored = api_ok(addr, "GET", &format!("/admin/keys/{made}"), None, 200).await;
    assert_eq!(stored["tenant"], "acme", "{stored}");
    assert_eq!(stored["concurrency"], 2, "{stored}");
    assert_eq!(key_rows(&b).await[&made], expected_row(&stored));
    until_answer(addr, &secret, 200).await;

    // Its own limits, changed there; the operator's plans (policy, subscription) not
    // offered; a spend cap above what its tenant has, the 400 naming the field (K6).
    assert_eq!(
        b.js("return document.querySelector('#create-form [data-key-field=policy]').checkVisibility()")
            .await,
        json!(false)
    );
    b.click(&format!("#keys tr[data-key-id={made:?}] button.manage"))
        .await;
    b.until(
        WAIT,
        "the manage panel",
        &format!("return document.getElementById('manage').dataset.keyId === {made:?}"),
    )
    .await;
    assert_eq!(
        b.js("return ['policy', 'subscription'].map(f => document.querySelector(`#edit-form [data-key-field=${f}]`).disabled)")
            .await,
        json!([true, true])
    );
    b.type_into("#edit-form [data-key-field=rpm]", "30").await;
    b.click("#save").await;
    b.until(
        WAIT,
        "rpm 30 shown",
        &format!(
            "return document.querySelector('#keys tr[data-key-id={made:?}] [data-limit=rpm]')?.textContent === 'rpm 30'"
        ),
    )
    .await;
    let stored = api_ok(addr, "GET", &format!("/admin/keys/{made}"), None, 200).await;
    assert_eq!(
        (&stored["rpm"], &stored["concurrency"]),
        (&json!(30), &json!(2))
    );
    b.type_into("#edit-form [data-key-field=spend_cap]", "2000000")
        .await;
    b.click("#save").await;
    let (message, field) = form_error(&b, "edit-error").await;
    assert_eq!(field, "spend_cap", "{message}");
    assert!(message.starts_with("400: spend_cap"), "{message}");
    let unchanged = api_ok(addr, "GET", &format!("/admin/keys/{made}"), None, 200).await;
    assert_eq!(unchanged["spend_cap"], Value::Null, "{unchanged}");
    assert_eq!(key_rows(&b).await[&made], expected_row(&unchanged));
    b.clear("#edit-form [data-key-field=spend_cap]").await;
    let shot = b.screenshot("keys-tenant").await;
    eprintln!("keys page, tenant view: {}", shot.display());

    // A gateway keeping no keys in a database: the page says so to the admin token.
    let plain = Proxy::start("[server]\nadmin_token = \"admin-token-0123456789\"\n").await;
    b.goto(&format!("http://{}/keys/page", plain.addr)).await;
    b.type_into("#token", TOKEN).await;
    b.click("#connect").await;
    b.until(
        WAIT,
        "the no-database message",
        "return document.getElementById('status').dataset.kind === 'error'",
    )
    .await;
    assert!(
        b.text("#status")
            .await
            .contains("keeps no keys in a database"),
        "{}",
        b.text("#status").await
    );
    b.quit().await;
}

// ------------------------------------------------------------------ recent requests (B6)

/// The ledger's gateway: a key holder with limits and a budget (the usage page has all
/// its parts), a neighbour in the same tenant, a key that sends nothing, and a key of
/// another tenant.
const LEDGER_CONFIG: &str = r#"
[policies.plan]
concurrency = 4
requests = [{ window = "1m", limit = 1000 }, { window = "1d", limit = 100000 }]
tokens = [{ window = "1m", limit = 10000000 }]

[tenants.acme]
balance = 50_000_000
budgets = [{ name = "monthly", limit = 30_000_000, period = "30d" }]

[tenants.other]
balance = 50_000_000

[keys.holder]
key = "sk-holder-0001"
tenant = "acme"
policy = "plan"
spend_cap = 20_000_000

[keys.neighbour]
key = "sk-neighbour-0001"
tenant = "acme"

[keys.quiet]
key = "sk-quiet-0001"
tenant = "acme"

[keys.elsewhere]
key = "sk-elsewhere-0001"
tenant = "other"
"#;

const HOLDER: &str = "sk-holder-0001";
const NEIGHBOUR: &str = "sk-neighbour-0001";
const QUIET: &str = "sk-quiet-0001";
const ELSEWHERE: &str = "sk-elsewhere-0001";

/// `n` model requests with `key`, every one answered 200, over the three dialects (so
/// three models), one in four streamed; their request ids.
async fn requests(addr: std::net::SocketAddr, key: &str, n: usize) -> Vec<String> {
    let dialects = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini];
    let mut ids = Vec::new();
    for i in 0..n {
        let r = send(addr, &ask(dialects[i % 3], key, i % 4 == 1)).await;
        assert_eq!(r.status, 200, "request {i} with {key:.9}…: {}", r.text());
        ids.push(r.header("x-request-id").expect("a request id").to_owned());
    }
    ids
}

/// A database key of `tenant` labelled `label` (a file key's label: the ledger's `key`
/// of a database key is its id, never its label), live; its id and secret.
async fn database_key(addr: std::net::SocketAddr, label: &str, tenant: &str) -> (String, String) {
    let k = api_ok(
        addr,
        "POST",
        "/admin/keys",
        Some(json!({"label": label, "tenant": tenant})),
        201,
    )
    .await;
    let secret = k["key"].as_str().expect("a secret").to_owned();
    until_answer(addr, &secret, 200).await;
    (k["id"].as_str().expect("id").to_owned(), secret)
}

/// Polls `GET /admin/usage?{query}` until its totals count `n` attempts (the ledger is
/// written off the request path); the rows, oldest first (one page, from the snapshot
/// the totals were counted in).
async fn ledger_until(addr: std::net::SocketAddr, query: &str, n: u64) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let (status, v) = api(
            addr,
            TOKEN,
            "GET",
            &format!("/admin/usage?{query}&limit=1000"),
            None,
        )
        .await;
        if status == 200 && v["totals"]["attempts"].as_u64() == Some(n) {
            assert_eq!(v["next_cursor"], Value::Null, "one page: {v}");
            let rows = v["records"].as_array().expect("records").clone();
            assert_eq!(rows.len() as u64, n, "{v}");
            return rows;
        }
        assert!(
            start.elapsed() < WAIT * 4,
            "the ledger never held {n} attempts for {query:?}: {status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /usage/requests{query}` with `key`: its status and JSON body.
async fn recent(addr: std::net::SocketAddr, key: &str, query: &str) -> (u16, Value) {
    let r = send(
        addr,
        &Req::get(format!("/usage/requests{query}")).key(KeyAt::Bearer, key),
    )
    .await;
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status.as_u16(), v)
}

/// Every page of `GET /usage/requests?limit={limit}` with `key`, following the cursor:
/// the rows, and the size of each page.
async fn all_recent(
    addr: std::net::SocketAddr,
    key: &str,
    limit: usize,
) -> (Vec<Value>, Vec<usize>) {
    let (mut rows, mut sizes, mut cursor) = (Vec::new(), Vec::new(), String::new());
    for _ in 0..100 {
        let (status, v) = recent(addr, key, &format!("?limit={limit}{cursor}")).await;
        assert_eq!(status, 200, "{v}");
        let page = v["records"].as_array().expect("records");
        sizes.push(page.len());
        rows.extend(page.iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return (rows, sizes),
        }
    }
    panic!("more than 100 pages of /usage/requests for {key:.9}…")
}

/// A row of `GET /admin/usage` as `GET /usage/requests` shows it to the key's holder.
fn as_holder_sees(r: &Value) -> Value {
    json!({
        "at": r["at"],
        "at_ms": r["at_ms"],
        "request_id": r["request_id"],
        "client_request_id": r["client_request_id"],
        "model": r["model"],
        "usage": r["usage"],
        "amount": r["amount"],
        "outcome": r["outcome"],
    })
}

/// `rows` of `GET /admin/usage` (oldest first) newest first, as the holder sees them.
fn newest_first_as_holder_sees(rows: &[Value]) -> Vec<Value> {
    rows.iter().rev().map(as_holder_sees).collect()
}

/// A ledger row as the pages' request table prints it (`usage.js`' and `admin.js`'
/// `requestRow`; the operator's table adds the key and the channel).
fn expected_request_row(r: &Value, operator: bool) -> Value {
    let u = &r["usage"];
    let tokens = |f: &str| {
        if u.is_null() {
            "—".to_owned()
        } else {
            shown(&u[f])
        }
    };
    let at = r["at"].as_str().expect("at");
    let mut row = json!({
        "at_ms": r["at_ms"].to_string(),
        "time": at.replacen('T', " ", 1).trim_end_matches('Z'),
        "model": r["model"].as_str().unwrap_or("—"),
        "input": tokens("input_tokens"),
        "cached": tokens("cached_input_tokens"),
        "output": tokens("output_tokens"),
        "cost": shown(&r["amount"]),
        "outcome": r["outcome"].as_str().expect("outcome").replace('_', " "),
        "request_id": r["request_id"].as_str().unwrap_or("—"),
    });
    if operator {
        row["key"] = r["key"].clone();
        row["channel"] = json!(r["channel"].as_str().unwrap_or("—"));
    }
    row
}

/// The rows of the request table `#{table}`, as printed.
async fn request_rows(b: &Browser, table: &str, operator: bool) -> Vec<Value> {
    let v = b
        .js(&format!(
            r#"return [...document.querySelectorAll('#{table} tbody tr.request')].map(r => {{
                 const f = (n) => r.querySelector(`[data-field=${{n}}]`).textContent;
                 const row = {{ at_ms: r.dataset.atMs, time: f('time'), model: f('model'),
                   input: f('input'), cached: f('cached'), output: f('output'), cost: f('cost'),
                   outcome: f('outcome'), request_id: f('request-id') }};
                 if ({operator}) {{ row.key = f('key'); row.channel = f('channel'); }}
                 return row;
               }});"#
        ))
        .await;
    v.as_array().expect("rows").clone()
}

/// The request ids the table `#{table}` shows (each cell whole).
async fn request_ids(b: &Browser, table: &str) -> std::collections::BTreeSet<String> {
    b.js(&format!(
        "return [...document.querySelectorAll('#{table} tbody [data-field=request-id]')]
           .map(c => c.textContent);"
    ))
    .await
    .as_array()
    .expect("ids")
    .iter()
    .map(|v| v.as_str().expect("an id").to_owned())
    .collect()
}

/// B6: `GET /usage/requests` answers the calling key its own attempts from the ledger,
/// newest first, paged by its cursor — never another key's: not a neighbour's of the same
/// tenant, not a database key's labelled like it, not another tenant's — the same rows
/// `GET /admin/usage` has for the key; a key that sent nothing gets none; a gateway
/// keeping no ledger answers 404 naming it; an unknown key 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b6_usage_requests_answers_a_key_its_own_attempts_only() {
    let gw = records_gateway_on(LEDGER_CONFIG).await;
    let addr = gw.addr;
    // A database key labelled "holder", as the file key is: one attempt live already.
    let (twin_id, twin) = database_key(addr, "holder", "acme").await;
    let holder_ids = requests(addr, HOLDER, 7).await;
    requests(addr, NEIGHBOUR, 3).await;
    requests(addr, &twin, 1).await;
    requests(addr, ELSEWHERE, 2).await;
    let acme = ledger_until(addr, "tenant=acme", 7 + 3 + 2).await;
    ledger_until(addr, "tenant=other", 2).await;
    let of =
        |key: &str| -> Vec<Value> { acme.iter().filter(|r| r["key"] == key).cloned().collect() };
    assert_eq!(of("holder").len(), 7);
    assert_eq!(of(&twin_id).len(), 2);

    // The holder: its seven, newest first, in pages of 3 (3, 3, 1), the request ids of
    // its responses.
    let (rows, sizes) = all_recent(addr, HOLDER, 3).await;
    assert_eq!(sizes, [3, 3, 1]);
    assert_eq!(rows, newest_first_as_holder_sees(&of("holder")));
    let mut ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    ids.reverse();
    assert_eq!(ids, holder_ids, "its own requests, newest first");
    assert!(rows.iter().all(|r| r.get("key").is_none()
        && r.get("channel").is_none()
        && r.get("attempt").is_none()));
    assert!(
        rows.iter()
            .all(|r| r["usage"]["output_tokens"].as_u64() > Some(0)),
        "{rows:?}"
    );
    let (one_page, _) = all_recent(addr, HOLDER, 20).await;
    assert_eq!(one_page, rows, "20 a page: one page");
    let (status, v) = recent(addr, HOLDER, "").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["records"].as_array().map(Vec::len),
        Some(7),
        "20 unless given"
    );
    assert_eq!(v["next_cursor"], Value::Null);

    // The others: each its own, never the holder's — the database key labelled "holder"
    // included, and the holder never its.
    for (key, id) in [(NEIGHBOUR, "neighbour"), (twin.as_str(), twin_id.as_str())] {
        let (rows, _) = all_recent(addr, key, 2).await;
        assert_eq!(rows, newest_first_as_holder_sees(&of(id)), "{id}");
    }
    let (rows, _) = all_recent(addr, ELSEWHERE, 20).await;
    assert_eq!(rows.len(), 2);
    let (status, v) = recent(addr, QUIET, "").await;
    assert_eq!(
        (status, &v),
        (200, &json!({"records": [], "next_cursor": null}))
    );

    // The operator's route gives the same rows newest first with `order=newest`.
    let admin_newest = api_ok(
        addr,
        "GET",
        "/admin/usage?tenant=acme&order=newest",
        None,
        200,
    )
    .await;
    let mut reversed = acme.clone();
    reversed.reverse();
    assert_eq!(admin_newest["records"], Value::Array(reversed));
    let (status, e) = api(addr, TOKEN, "GET", "/admin/usage?order=sideways", None).await;
    assert_eq!(
        (status, e["error"]["field"].as_str()),
        (400, Some("order")),
        "{e}"
    );

    // A cursor it did not give: 400 naming it; no key or an unknown one: 401.
    let (status, v) = recent(addr, HOLDER, "?cursor=nope").await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (400, Some("cursor")),
        "{v}"
    );
    let r = send(addr, &Req::get("/usage/requests")).await;
    assert_eq!(r.status, 401, "{}", r.text());
    let (status, _) = recent(addr, "sk-not-a-key", "").await;
    assert_eq!(status, 401);

    // No records database, so no ledger: 404 saying so.
    let plain = Proxy::start(USAGE_CONFIG).await;
    assert_eq!(answer(plain.addr, HOLDER).await, 200);
    let (status, v) = recent(plain.addr, HOLDER, "").await;
    assert_eq!(status, 404, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no ledger")),
        "{v}"
    );
}

/// B6: the usage page lists the key's recent requests under its counters — time, model,
/// tokens in / cached / out, cost, outcome, request id — newest first, 20 and a **More**
/// button for the rest, exactly the rows `GET /usage/requests` and `GET /admin/usage`
/// have for the key; a neighbour's and a database key's labelled like it never appear; a
/// request made since is first after **Refresh**; a key with none and a gateway keeping
/// no ledger show their empty state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b6_usage_page_lists_the_keys_recent_requests() {
    let _one = ONE_BROWSER.lock().await;
    let gw = records_gateway_on(LEDGER_CONFIG).await;
    let addr = gw.addr;
    let (twin_id, twin) = database_key(addr, "holder", "acme").await;
    requests(addr, HOLDER, 23).await;
    let others = [
        requests(addr, NEIGHBOUR, 3).await,
        requests(addr, &twin, 2).await,
    ]
    .concat();
    let acme = ledger_until(addr, "tenant=acme", 23 + 3 + 3).await;
    let holder: Vec<Value> = acme
        .iter()
        .filter(|r| r["key"] == "holder")
        .cloned()
        .collect();
    assert_eq!(holder.len(), 23);
    assert_eq!(
        acme.iter().filter(|r| r["key"] == twin_id.as_str()).count(),
        3
    );
    let (api_rows, _) = all_recent(addr, HOLDER, 20).await;
    assert_eq!(
        api_rows,
        newest_first_as_holder_sees(&holder),
        "API vs ledger"
    );
    let expected: Vec<Value> = holder
        .iter()
        .rev()
        .map(|r| expected_request_row(r, false))
        .collect();

    let b = Browser::start("usage-requests").await;
    let page = format!("http://{addr}/usage/page");
    b.goto(&page).await;
    b.type_into("#key", HOLDER).await;
    b.click("#load").await;
    b.until(
        WAIT,
        "the first 20 requests",
        "return document.getElementById('requests-section').dataset.state === 'rows' \
         && document.querySelectorAll('#requests tbody tr.request').length === 20",
    )
    .await;
    assert_eq!(request_rows(&b, "requests", false).await, expected[..20]);
    assert_eq!(
        b.js("return document.getElementById('requests-more').checkVisibility()")
            .await,
        json!(true)
    );
    let shot = b.screenshot("usage-requests").await;
    eprintln!("usage page with recent requests: {}", shot.display());
    b.click("#requests-more").await;
    b.until(
        WAIT,
        "all 23 requests",
        "return document.querySelectorAll('#requests tbody tr.request').length === 23 \
         && document.getElementById('requests-more').hidden",
    )
    .await;
    let shown_rows = request_rows(&b, "requests", false).await;
    assert_eq!(shown_rows, expected, "page vs /admin/usage");
    let shown_ids: Vec<&str> = shown_rows
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    let api_ids: Vec<&str> = api_rows
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    assert_eq!(shown_ids, api_ids, "page vs /usage/requests");
    let every_id = request_ids(&b, "requests").await;
    for id in &others {
        assert!(
            !every_id.contains(id),
            "another key's request {id} is shown"
        );
    }
    // Under the counters: after the budgets, in the key's view.
    assert_eq!(
        b.js("const s = document.getElementById('requests-section');
              return s.parentElement.id === 'view'
                && !!(document.getElementById('budgets-section').compareDocumentPosition(s)
                      & Node.DOCUMENT_POSITION_FOLLOWING);")
            .await,
        json!(true)
    );

    // A request made since: first after Refresh, 20 again.
    let newest = requests(addr, HOLDER, 1).await.remove(0);
    ledger_until(addr, "tenant=acme", 23 + 3 + 3 + 1).await;
    b.click("#refresh").await;
    b.until(
        WAIT,
        "the new request first",
        &format!(
            "const r = document.querySelectorAll('#requests tbody tr.request');
             return r.length === 20
               && r[0].querySelector('[data-field=request-id]').textContent === {newest:?};"
        ),
    )
    .await;

    // A key with none, then a gateway keeping no ledger: the empty states.
    b.type_into("#key", QUIET).await;
    b.click("#load").await;
    b.until(
        WAIT,
        "the quiet key's empty list",
        "return document.getElementById('requests-section').dataset.state === 'empty' \
         && !document.getElementById('no-requests').hidden",
    )
    .await;
    assert!(
        b.text("#no-requests")
            .await
            .contains("No requests recorded")
    );
    assert_eq!(
        b.js("return [document.getElementById('requests').hidden, \
                      document.querySelectorAll('#requests tbody tr').length, \
                      document.getElementById('requests-more').hidden]")
            .await,
        json!([true, 0, true])
    );
    let plain = Proxy::start(USAGE_CONFIG).await;
    b.goto(&format!("http://{}/usage/page", plain.addr)).await;
    b.type_into("#key", HOLDER).await;
    b.click("#load").await;
    b.until(
        WAIT,
        "the no-ledger state",
        "return document.getElementById('requests-section').dataset.state === 'no-ledger'",
    )
    .await;
    assert!(b.text("#no-requests").await.contains("no ledger"));
    assert_eq!(
        b.js("return document.querySelectorAll('#requests tbody tr').length")
            .await,
        json!(0)
    );
    b.quit().await;
}

/// B6: the operator page lists a tenant's recent requests — a selector of the tenants
/// `GET /admin/tenants` gives, the rows of `GET /admin/usage?tenant=` newest first, 20
/// and **More** — with each row's key and channel; another tenant's never; and hides the
/// section on a gateway without a records database (`/admin/tenants` answers 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b6_operator_page_lists_a_tenants_recent_requests() {
    let _one = ONE_BROWSER.lock().await;
    let gw = records_gateway_on(LEDGER_CONFIG).await;
    let addr = gw.addr;
    requests(addr, HOLDER, 14).await;
    requests(addr, NEIGHBOUR, 9).await;
    let other_ids = requests(addr, ELSEWHERE, 2).await;
    // Two refusals, for the rejections above the section: no attempt, no ledger row.
    for _ in 0..2 {
        assert_eq!(answer(addr, "sk-not-a-key").await, 401);
    }
    let acme = ledger_until(addr, "tenant=acme", 23).await;
    let other = ledger_until(addr, "tenant=other", 2).await;
    let newest = |rows: &[Value]| -> Vec<Value> {
        rows.iter()
            .rev()
            .map(|r| expected_request_row(r, true))
            .collect()
    };
    let (acme_rows, other_rows) = (newest(&acme), newest(&other));
    // The route the page reads, newest first, 20 a page.
    let first = api_ok(
        addr,
        "GET",
        "/admin/usage?tenant=acme&order=newest&limit=20",
        None,
        200,
    )
    .await;
    let first: Vec<Value> = first["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| expected_request_row(r, true))
        .collect();
    assert_eq!(first, acme_rows[..20]);
    let tenants = api_ok(addr, "GET", "/admin/tenants", None, 200).await;
    let mut names: Vec<&str> = tenants["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort();
    names.dedup();

    let b = Browser::start("admin-requests").await;
    b.goto(&format!("http://{addr}/admin/page")).await;
    b.click("#auto").await; // no refresh on a timer while the test reads
    b.type_into("#token", TOKEN).await;
    b.click("#connect").await;
    b.until(
        WAIT,
        "acme's first 20 requests",
        "const s = document.getElementById('tenant-requests-section');
         return !s.hidden && s.dataset.state === 'rows' && s.dataset.tenant === 'acme'
           && document.querySelectorAll('#tenant-requests tbody tr.request').length === 20",
    )
    .await;
    assert_eq!(
        b.js("return [...document.querySelectorAll('#tenant-select option')].map(o => o.value)")
            .await,
        json!(names)
    );
    assert_eq!(
        request_rows(&b, "tenant-requests", true).await,
        acme_rows[..20]
    );
    let shot = b.screenshot("admin-requests").await;
    eprintln!("operator page with recent requests: {}", shot.display());
    b.click("#tenant-more").await;
    b.until(
        WAIT,
        "all 23 of acme's requests",
        "return document.querySelectorAll('#tenant-requests tbody tr.request').length === 23 \
         && document.getElementById('tenant-more').hidden",
    )
    .await;
    assert_eq!(request_rows(&b, "tenant-requests", true).await, acme_rows);
    let shown_ids = request_ids(&b, "tenant-requests").await;
    for id in &other_ids {
        assert!(!shown_ids.contains(id), "other's request {id} under acme");
    }

    b.select("#tenant-select", "other").await;
    b.until(
        WAIT,
        "other's requests",
        "const s = document.getElementById('tenant-requests-section');
         return s.dataset.state === 'rows' && s.dataset.tenant === 'other'
           && document.querySelectorAll('#tenant-requests tbody tr.request').length === 2",
    )
    .await;
    assert_eq!(request_rows(&b, "tenant-requests", true).await, other_rows);
    let shown_ids = request_ids(&b, "tenant-requests").await;
    for id in acme.iter().filter_map(|r| r["request_id"].as_str()) {
        assert!(!shown_ids.contains(id), "acme's request {id} under other");
    }

    // No records database: no tenant routes, no section.
    let plain = Proxy::start(ADMIN_CONFIG).await;
    b.goto(&format!("http://{}/admin/page", plain.addr)).await;
    b.type_into("#token", TOKEN).await;
    b.click("#connect").await;
    b.until(
        WAIT,
        "the section hidden",
        "const s = document.getElementById('tenant-requests-section');
         return s.dataset.state === 'off' && s.hidden
           && document.querySelectorAll('#channels tbody tr[data-channel]').length === 3",
    )
    .await;
    b.quit().await;
}
