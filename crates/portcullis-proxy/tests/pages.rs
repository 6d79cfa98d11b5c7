//! The usage and operator pages (P4) in a real headless browser: Debian's
//! `chromium`, driven through `chromedriver` (WebDriver, `fantoccini`). Each browser
//! test starts the proxy in front of the fake upstream, loads a page, types the key or
//! the admin token, and asserts on the rendered DOM against the gateway's JSON for the
//! same key. A screenshot of each page is kept under
//! `$CARGO_TARGET_TMPDIR/pages/` (`target/tmp/pages/*.png`).
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
/// past the bounds.
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
