//! `portcullis keys …` and `portcullis tenants …` (K10) as an operator runs them: the
//! built binary against a `portcullis serve` it starts on a temporary configuration
//! with a SQLite records database, and real model requests with the keys it makes.
//! Every wait is bounded.
//!
//! - The commands create, list, show, update, rotate and revoke keys and manage tenants
//!   through the admin API, and each change shows in how the gateway answers the key.
//! - `keys create --config FILE` writes the first key with no gateway running.
//! - A tenant's management token, named by `--token-env`, sees its tenant's keys only.
//! - Errors: the gateway's message and field on stderr, exit 1; no token, no gateway, a
//!   silent gateway, one without key routes: a clear message, exit 1; usage errors:
//!   exit 2.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");

/// Longest wait for the gateway to start, or for one command to finish (a debug build
/// on a busy two-core machine).
const START: Duration = Duration::from_secs(60);
/// Longest wait for one HTTP exchange, and for a change to show in the gateway's
/// answers (it reaches the instance's view within a second).
const IO: Duration = Duration::from_secs(20);

/// The gateway's admin token (in the file: a test's configuration).
const ADMIN: &str = "admin-token-cli-k10-0123456789";
/// Where the commands read the token by default.
const TOKEN_VAR: &str = "PORTCULLIS_ADMIN_TOKEN";
/// `[database] hash_secret_env`, never set: the secret file beside the database is used
/// by `serve` and `keys create --config` alike.
const HASH_VAR: &str = "PCX_CLI_K10_HASH_SECRET_UNSET";

/// A fresh directory under the test target's tmp dir.
fn dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "manage-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A configuration with an admin token, a SQLite records database beside the file, a
/// named policy and one `fake://` channel; no keys of its own.
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("portcullis.toml");
    std::fs::write(
        &path,
        format!(
            r#"[server]
listen = "127.0.0.1:0"
admin_token = "{ADMIN}"

[database]
url = "sqlite://records.db"
hash_secret_env = "{HASH_VAR}"

[policies.basic]
concurrency = 4

[channels.fake-a]
vendor = "openai"
base_url = "fake://"
credential = "sk-upstream-a"
models = ["gpt-4o-mini"]
capacity = 8

[models.gpt-4o-mini]
price = {{ input_per_mtok = 150_000, output_per_mtok = 600_000 }}
max_output_tokens = 256
"#
        ),
    )
    .unwrap();
    path
}

/// What a finished command left: its status, stdout and stderr.
struct Run {
    status: ExitStatus,
    out: String,
    err: String,
}

impl Run {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Its stdout as JSON, after asserting it succeeded.
    fn ok(&self) -> Value {
        assert_eq!(
            self.code(),
            Some(0),
            "stdout: {}\nstderr: {}",
            self.out,
            self.err
        );
        serde_json::from_str(&self.out)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.out))
    }
}

/// Runs `portcullis args…` to its end (bounded), with no `PORTCULLIS_*` variable of the
/// test's environment but those of `env`.
fn portcullis(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove(TOKEN_VAR)
        .env_remove("PORTCULLIS_URL")
        .env_remove(HASH_VAR)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run portcullis");
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let status = wait(&mut child, START).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("portcullis {args:?} did not finish within {START:?}")
    });
    Run {
        status,
        out: out.join().unwrap(),
        err: err.join().unwrap(),
    }
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

/// A running `portcullis serve`, killed when the test ends.
struct Gateway {
    child: Child,
    addr: SocketAddr,
    stderr: PathBuf,
}

impl Gateway {
    fn start(config: &Path, extra: &[&str]) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let stderr =
            config.with_extension(format!("serve-{}.log", N.fetch_add(1, Ordering::Relaxed)));
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .env_remove(HASH_VAR)
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
                    let _ = tx.send(rest.split(' ').next().unwrap_or_default().to_owned());
                }
            }
        });
        match rx.recv_timeout(START) {
            Ok(addr) => Self {
                child,
                addr: addr.parse().expect("listening address"),
                stderr,
            },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "portcullis serve did not start: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// `portcullis args… --gateway URL` with the token `token` in `$PORTCULLIS_ADMIN_TOKEN`.
    fn cli(&self, token: &str, args: &[&str]) -> Run {
        let url = self.url();
        portcullis(
            &[args, &["--gateway", &url]].concat(),
            &[(TOKEN_VAR, token)],
        )
    }

    /// The status a chat request with `key` answers.
    fn chat(&self, key: &str) -> u16 {
        let body = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
        http(self.addr, "POST", "/v1/chat/completions", key, body)
            .map(|(status, _)| status)
            .unwrap_or(0)
    }

    /// Waits (bounded) until a chat request with `key` answers `status`.
    fn until_chat(&self, key: &str, status: u16) {
        let until = Instant::now() + IO;
        let mut last = 0;
        while Instant::now() < until {
            last = self.chat(key);
            if last == status {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{key:.12}… answered {last}, not {status}, for {IO:?}\n{}",
            self.log()
        );
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

/// One HTTP/1.1 exchange on a new connection (`Connection: close`) with `bearer`:
/// status and body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    bearer: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut tcp = TcpStream::connect_timeout(&addr, IO)?;
    tcp.set_read_timeout(Some(IO))?;
    tcp.set_write_timeout(Some(IO))?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {bearer}\r\n\
         Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
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

/// The ids of a `keys list` answer.
fn ids(list: &Value) -> Vec<String> {
    list["keys"]
        .as_array()
        .unwrap_or_else(|| panic!("no keys in {list}"))
        .iter()
        .map(|k| k["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts the secret in `field` of a command's answer was printed once on stdout and
/// the stderr note says it will not be shown again; returns it.
fn secret_of(run: &Run, field: &str, prefix: &str) -> String {
    let v = run.ok();
    let secret = v[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {v}"));
    assert!(secret.starts_with(prefix), "{secret}");
    assert_eq!(run.out.matches(secret).count(), 1, "{}", run.out);
    assert!(
        run.err.contains("will not be shown again"),
        "no note on stderr: {}",
        run.err
    );
    assert!(
        !run.err.contains(secret),
        "the secret on stderr: {}",
        run.err
    );
    secret.to_owned()
}

#[test]
fn k10_keys_commands_create_list_update_rotate_revoke_against_a_running_gateway() {
    let d = dir("remote");
    let gw = Gateway::start(&config(&d), &[]);

    // A tenant, then a key of it: the secret once on stdout, a note on stderr.
    let t = gw
        .cli(
            ADMIN,
            &[
                "tenants",
                "create",
                "acme",
                "--balance",
                "10000000",
                "--weight",
                "2",
            ],
        )
        .ok();
    assert_eq!(
        (t["name"].as_str(), t["balance"].as_i64()),
        (Some("acme"), Some(10_000_000)),
        "{t}"
    );
    let created = gw.cli(
        ADMIN,
        &["keys", "create", "--label", "ci", "--tenant", "acme"],
    );
    let key = secret_of(&created, "key", "sk-pcx-");
    let v = created.ok();
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (v["label"].as_str(), v["tenant"].as_str()),
        (Some("ci"), Some("acme")),
        "{v}"
    );
    gw.until_chat(&key, 200);

    // list (pretty by default, one line with --json), list of a tenant, show.
    let all = gw.cli(ADMIN, &["keys", "list"]);
    assert!(
        all.out.lines().count() > 1,
        "not pretty-printed: {}",
        all.out
    );
    assert!(ids(&all.ok()).contains(&id));
    let other = gw
        .cli(ADMIN, &["keys", "create", "--label", "no-tenant"])
        .ok();
    let acme = gw.cli(ADMIN, &["keys", "list", "--tenant", "acme", "--json"]);
    assert_eq!(
        acme.out.trim().lines().count(),
        1,
        "not one line: {}",
        acme.out
    );
    assert_eq!(ids(&acme.ok()), [id.as_str()]);
    // --all-pages follows the cursor: pages of one key, every key in one answer.
    let paged = gw
        .cli(ADMIN, &["keys", "list", "--limit", "1", "--all-pages"])
        .ok();
    let mut got = ids(&paged);
    got.sort();
    let mut want = vec![id.clone(), other["id"].as_str().unwrap().to_owned()];
    want.sort();
    assert_eq!(got, want, "{paged}");
    assert!(paged["next_cursor"].is_null(), "{paged}");
    let one = gw.cli(ADMIN, &["keys", "list", "--limit", "1"]).ok();
    assert_eq!(ids(&one).len(), 1, "{one}");
    assert!(one["next_cursor"].is_string(), "{one}");
    let shown = gw.cli(ADMIN, &["keys", "show", &id]).ok();
    assert_eq!(
        (shown["id"].as_str(), shown["state"].as_str()),
        (Some(&*id), Some("active"))
    );
    assert!(shown.get("key").is_none(), "a secret in show: {shown}");

    // update --rpm 1: the key's own limit applies (a 429, and the next call too).
    let u = gw.cli(ADMIN, &["keys", "update", &id, "--rpm", "1"]).ok();
    assert_eq!(u["rpm"], 1, "{u}");
    gw.until_chat(&key, 429);
    assert_eq!(gw.chat(&key), 429, "the second request within the minute");
    // --clear sends null: the limit is gone.
    let u = gw
        .cli(ADMIN, &["keys", "update", &id, "--clear", "rpm"])
        .ok();
    assert!(u["rpm"].is_null(), "{u}");
    gw.until_chat(&key, 200);

    // Every setting as a flag, then cleared again.
    let u = gw
        .cli(
            ADMIN,
            &[
                "keys",
                "update",
                &id,
                "--label",
                "ci-2",
                "--concurrency",
                "2",
                "--spend-cap",
                "5000000",
                "--model",
                "gpt-4o-mini",
                "--expires-at",
                "2099-01-01T00:00:00Z",
                "--errors",
                "native",
                "--subscription-policy",
                "basic",
                "--subscription-expires",
                "2098-01-01T00:00:00Z",
                "--pay-as-you-go",
            ],
        )
        .ok();
    assert_eq!(u["label"], "ci-2", "{u}");
    assert_eq!(u["concurrency"], 2, "{u}");
    assert_eq!(u["spend_cap"], 5_000_000, "{u}");
    assert_eq!(u["models"], serde_json::json!(["gpt-4o-mini"]), "{u}");
    assert_eq!(u["expires_at"], "2099-01-01T00:00:00Z", "{u}");
    assert_eq!(u["errors"], "native", "{u}");
    assert_eq!(
        u["subscription"],
        serde_json::json!({"policy": "basic", "expires_at": "2098-01-01T00:00:00Z", "pay_as_you_go": true}),
        "{u}"
    );
    let u = gw
        .cli(
            ADMIN,
            &[
                "keys",
                "update",
                &id,
                "--clear",
                "concurrency,spend_cap,models,expires_at,errors,subscription",
            ],
        )
        .ok();
    for field in [
        "concurrency",
        "spend_cap",
        "expires_at",
        "errors",
        "subscription",
    ] {
        assert!(u[field].is_null(), "{field}: {u}");
    }
    assert_eq!(u["models"], serde_json::json!([]), "{u}");
    gw.until_chat(&key, 200);

    // rotate: the new secret works, the old one (no grace) stops.
    let rotated = gw.cli(ADMIN, &["keys", "rotate", &id]);
    let new_key = secret_of(&rotated, "key", "sk-pcx-");
    assert_ne!(new_key, key);
    assert_eq!(rotated.ok()["old_key_valid_for_seconds"], 0);
    gw.until_chat(&new_key, 200);
    gw.until_chat(&key, 401);

    // revoke: refused from then on.
    let r = gw.cli(ADMIN, &["keys", "revoke", &id]).ok();
    assert_eq!(r["state"], "revoked", "{r}");
    gw.until_chat(&new_key, 401);

    // The gateway's refusals: its message and the field on stderr, exit 1.
    for (args, field, needle) in [
        (
            &["keys", "create", "--label", "x", "--policy", "gold"][..],
            "policy",
            "gold",
        ),
        (
            &["keys", "create", "--label", "x", "--model", "gpt-9"],
            "models",
            "gpt-9",
        ),
        (
            &["keys", "create", "--label", "x", "--tenant", "nobody"],
            "tenant",
            "nobody",
        ),
        (
            &["keys", "create", "--label", "x", "--rpm", "0"],
            "rpm",
            "at least 1",
        ),
        (
            &["keys", "create", "--label", "x", "--expires-at", "soon"],
            "expires_at",
            "soon",
        ),
        (
            &["keys", "create", "--label", "x", "--errors", "loud"],
            "errors",
            "native",
        ),
    ] {
        let r = gw.cli(ADMIN, args);
        assert_eq!(r.code(), Some(1), "{args:?}: {}{}", r.out, r.err);
        assert!(r.out.is_empty(), "{args:?}: {}", r.out);
        assert!(
            r.err.contains("400")
                && r.err.contains(&format!("(field `{field}`)"))
                && r.err.contains(needle),
            "{args:?}: {}",
            r.err
        );
    }
    let r = gw.cli(ADMIN, &["keys", "show", "key_nosuch"]);
    assert_eq!(r.code(), Some(1));
    assert!(r.err.contains("404"), "{}", r.err);

    // Tenants: top-up, update, list, token.
    let v = gw
        .cli(ADMIN, &["tenants", "top-up", "acme", "--amount", "500"])
        .ok();
    assert_eq!(
        (v["tenant"].as_str(), v["amount"].as_i64()),
        (Some("acme"), Some(500)),
        "{v}"
    );
    assert!(v["balance"].as_i64().is_some_and(|b| b > 0), "{v}");
    let r = gw.cli(ADMIN, &["tenants", "top-up", "acme", "--amount", "-5"]);
    assert_eq!(r.code(), Some(1), "{}", r.err);
    assert!(r.err.contains("(field `amount`)"), "{}", r.err);
    let v = gw
        .cli(ADMIN, &["tenants", "update", "acme", "--weight", "3"])
        .ok();
    assert_eq!(v["weight"], 3, "{v}");
    let v = gw.cli(ADMIN, &["tenants", "list"]).ok();
    assert!(
        v["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "acme"),
        "{v}"
    );
    let token = gw.cli(ADMIN, &["tenants", "token", "acme"]);
    secret_of(&token, "token", "");
    assert_eq!(token.ok()["tenant"], "acme");

    // The token: not on the command line; a missing or wrong one is a clear error.
    let url = gw.url();
    let r = portcullis(&["keys", "list", "--gateway", &url], &[]);
    assert_eq!(r.code(), Some(1));
    assert!(
        r.err.contains("$PORTCULLIS_ADMIN_TOKEN") && r.err.contains("--token-env"),
        "{}",
        r.err
    );
    let r = portcullis(
        &[
            "tenants",
            "list",
            "--gateway",
            &url,
            "--token-env",
            "PCX_K10_NOT_SET",
        ],
        &[],
    );
    assert_eq!(r.code(), Some(1));
    assert!(r.err.contains("$PCX_K10_NOT_SET"), "{}", r.err);
    let r = gw.cli("wrong-token-0123456789", &["keys", "list"]);
    assert_eq!(r.code(), Some(1));
    assert!(
        r.err.contains("401") && r.err.contains("$PORTCULLIS_ADMIN_TOKEN"),
        "{}",
        r.err
    );
    // The gateway from $PORTCULLIS_URL when there is no --gateway.
    let v = portcullis(
        &["keys", "show", &id],
        &[(TOKEN_VAR, ADMIN), ("PORTCULLIS_URL", &url)],
    )
    .ok();
    assert_eq!(v["state"], "revoked");

    // Usage errors exit 2, before anything is sent.
    for args in [
        &["keys", "create"][..],
        &["keys", "update", &id],
        &["keys", "update", &id, "--rpm", "2", "--clear", "rpm"],
        &["keys", "update", &id, "--clear", "label"],
        &[
            "keys",
            "create",
            "--label",
            "x",
            "--config",
            "f.toml",
            "--gateway",
            &url,
        ],
        &["keys", "rotate", &id, "--grace-seconds", "soon"],
        &["tenants", "update", "acme"],
        &["tenants", "top-up", "acme"],
        &["keys", "list", "--token", "secret"],
    ] {
        let r = gw.cli(ADMIN, args);
        assert_eq!(r.code(), Some(2), "{args:?}: {}", r.err);
    }
    // The revoked key is still revoked: no usage error changed anything.
    let v = gw.cli(ADMIN, &["keys", "show", &id]).ok();
    assert_eq!(
        (v["state"].as_str(), v["label"].as_str()),
        (Some("revoked"), Some("ci-2"))
    );
}

#[test]
fn k10_keys_create_writes_the_first_key_to_the_database_directly() {
    let d = dir("direct");
    let path = config(&d);
    let file = path.to_str().unwrap();

    // No gateway runs: the key goes straight into records.db beside the file.
    let first = portcullis(
        &[
            "keys", "create", "--config", file, "--label", "first", "--rpm", "100",
        ],
        &[],
    );
    let key = secret_of(&first, "key", "sk-pcx-");
    let v = first.ok();
    assert_eq!(
        (v["label"].as_str(), v["rpm"].as_u64(), v["state"].as_str()),
        (Some("first"), Some(100), Some("active")),
        "{v}"
    );
    assert!(d.join("records.db").exists());
    // --database overrides `[database] url` as `serve --database` does.
    let other = portcullis(
        &[
            "keys",
            "create",
            "--config",
            file,
            "--database",
            "sqlite://other.db",
            "--label",
            "other",
            "--json",
        ],
        &[],
    );
    let other_key = secret_of(&other, "key", "sk-pcx-");
    assert_eq!(other.out.trim().lines().count(), 1, "{}", other.out);
    assert!(d.join("other.db").exists());

    // Checked against the file as the gateway checks it: exit 1, the field named.
    let r = portcullis(
        &[
            "keys", "create", "--config", file, "--label", "x", "--policy", "gold",
        ],
        &[],
    );
    assert_eq!(r.code(), Some(1), "{}{}", r.out, r.err);
    assert!(
        r.err.contains("(field `policy`)") && r.err.contains("gold"),
        "{}",
        r.err
    );
    assert!(r.out.is_empty(), "{}", r.out);
    // No database, no file: a clear error, exit 1.
    let r = portcullis(
        &[
            "keys",
            "create",
            "--config",
            file,
            "--database",
            "none",
            "--label",
            "x",
        ],
        &[],
    );
    assert_eq!(r.code(), Some(1), "{}{}", r.out, r.err);
    assert!(r.err.contains("no records database"), "{}", r.err);
    let missing = d.join("missing.toml");
    let r = portcullis(
        &[
            "keys",
            "create",
            "--config",
            missing.to_str().unwrap(),
            "--label",
            "x",
        ],
        &[],
    );
    assert_eq!(r.code(), Some(1), "{}", r.err);
    assert!(
        r.err.contains("missing.toml") && r.err.contains("cannot read"),
        "{}",
        r.err
    );

    // The gateway started on the file serves the key (and not the other database's).
    let gw = Gateway::start(&path, &[]);
    gw.until_chat(&key, 200);
    assert_eq!(gw.chat(&other_key), 401);
    // The audit trail names the command line as the writer.
    let (status, audit) = http(gw.addr, "GET", "/admin/audit", ADMIN, "").unwrap();
    assert_eq!(status, 200, "{audit}");
    let audit: Value = serde_json::from_str(&audit).unwrap();
    assert!(
        audit["audit"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["actor"] == "cli" && r["action"] == "key.create" && r["target"] == v["id"]),
        "{audit}"
    );
    drop(gw);
    let gw = Gateway::start(&path, &["--database", "sqlite://other.db"]);
    gw.until_chat(&other_key, 200);
    assert_eq!(gw.chat(&key), 401);
}

#[test]
fn k10_a_tenant_token_via_token_env_lists_only_its_tenants_keys() {
    let d = dir("tenant-token");
    let gw = Gateway::start(&config(&d), &[]);
    let mut keys = Vec::new();
    for tenant in ["acme", "other"] {
        gw.cli(
            ADMIN,
            &["tenants", "create", tenant, "--balance", "1000000"],
        )
        .ok();
        let k = gw
            .cli(
                ADMIN,
                &["keys", "create", "--label", tenant, "--tenant", tenant],
            )
            .ok();
        keys.push(k["id"].as_str().unwrap().to_owned());
    }
    let token = secret_of(&gw.cli(ADMIN, &["tenants", "token", "acme"]), "token", "");
    let url = gw.url();
    let as_acme = |args: &[&str]| {
        portcullis(
            &[args, &["--gateway", &url, "--token-env", "ACME_TOKEN"]].concat(),
            &[("ACME_TOKEN", &token)],
        )
    };
    // The token reaches the gateway's view within a second: wait for it (bounded).
    let until = Instant::now() + IO;
    let listed = loop {
        let r = as_acme(&["keys", "list"]);
        if r.code() == Some(0) {
            break r.ok();
        }
        assert!(Instant::now() < until, "the token never worked: {}", r.err);
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ids(&listed), [keys[0].as_str()], "{listed}");
    assert!(listed.get("static_keys").is_none(), "{listed}");
    // Asking for the other tenant changes nothing; its key is unknown to this token.
    let v = as_acme(&["keys", "list", "--tenant", "other"]).ok();
    assert_eq!(ids(&v), [keys[0].as_str()], "{v}");
    let r = as_acme(&["keys", "show", &keys[1]]);
    assert_eq!(r.code(), Some(1));
    assert!(r.err.contains("404"), "{}", r.err);
    // A key it creates is of its tenant; the tenant commands are not for it.
    let k = as_acme(&["keys", "create", "--label", "mine"]);
    secret_of(&k, "key", "sk-pcx-");
    assert_eq!(k.ok()["tenant"], "acme");
    let r = as_acme(&["tenants", "list"]);
    assert_eq!(r.code(), Some(1));
    assert!(r.err.contains("403"), "{}", r.err);
}

#[test]
fn k10_an_unreachable_silent_or_keyless_gateway_is_a_clear_error_exit_1() {
    // Nothing listens: the message names the URL.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let r = portcullis(&["keys", "list", "--gateway", &url], &[(TOKEN_VAR, ADMIN)]);
    assert_eq!(r.code(), Some(1), "{}", r.err);
    assert!(
        r.err
            .contains(&format!("cannot connect to the gateway at {url}")),
        "{}",
        r.err
    );

    // A listener that never answers: the call ends at --timeout, and says so.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let r = portcullis(
        &["tenants", "list", "--gateway", &url, "--timeout", "1"],
        &[(TOKEN_VAR, ADMIN)],
    );
    assert_eq!(r.code(), Some(1), "{}", r.err);
    assert!(
        r.err
            .contains(&format!("the gateway at {url} did not answer within 1 s")),
        "{}",
        r.err
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // A gateway with no records database serves no key routes: said so.
    let d = dir("keyless");
    let gw = Gateway::start(&config(&d), &["--database", "none"]);
    let r = gw.cli(ADMIN, &["keys", "list"]);
    assert_eq!(r.code(), Some(1), "{}", r.err);
    assert!(
        r.err.contains("404") && r.err.contains("no admin route /admin/keys: it needs"),
        "{}",
        r.err
    );

    // A URL that is not one.
    let r = portcullis(
        &["keys", "list", "--gateway", "127.0.0.1:8080"],
        &[(TOKEN_VAR, ADMIN)],
    );
    assert_eq!(r.code(), Some(1), "{}", r.err);
    assert!(r.err.contains("http://"), "{}", r.err);
}

/// The ledger has `n` attempts of `tenant` (polled, bounded: it is written off the
/// request path).
fn until_ledger(gw: &Gateway, tenant: &str, n: u64) {
    let until = Instant::now() + IO;
    loop {
        let (status, body) = http(
            gw.addr,
            "GET",
            &format!("/admin/usage?tenant={tenant}"),
            ADMIN,
            "",
        )
        .unwrap();
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        if status == 200 && v["totals"]["attempts"].as_u64() == Some(n) {
            return;
        }
        assert!(
            Instant::now() < until,
            "the ledger never held {n} attempts: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// B6: `portcullis books check` proves the books of a running gateway (`--gateway`) and,
/// after the gateway was killed, of its records database and Redis store read directly
/// (`--config`): exit 0 when exact, 1 with the difference when a balance moved outside
/// them; an in-memory store cannot be read from outside and says so.
#[test]
fn b6_books_check_of_a_running_gateway_and_after_a_crash() {
    let redis = portcullis_test_support::redis::RedisServer::start();
    let d = dir("books");
    let cfg = config(&d);
    let path = cfg.to_str().unwrap();
    let store = ["--store", &redis.url()];
    let mut gw = Gateway::start(&cfg, &store);
    gw.cli(
        ADMIN,
        &["tenants", "create", "acme", "--balance", "1000000"],
    )
    .ok();
    let run = gw.cli(
        ADMIN,
        &["keys", "create", "--label", "a", "--tenant", "acme"],
    );
    let key = secret_of(&run, "key", "sk-pcx-");
    gw.until_chat(&key, 200);
    for _ in 0..3 {
        assert_eq!(gw.chat(&key), 200);
    }
    until_ledger(&gw, "acme", 4);
    let live = gw.cli(ADMIN, &["books", "check"]).ok();
    assert_eq!(live["exact"], true, "{live}");
    let acme = live["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == "acme")
        .unwrap()
        .clone();
    assert!(acme["settled"].as_i64().unwrap() > 0, "{acme}");
    // Killed: the database and Redis tell the same books with no gateway.
    let _ = gw.child.kill();
    let _ = gw.child.wait();
    let direct = portcullis(
        &["books", "check", "--config", path, "--store", &redis.url()],
        &[],
    )
    .ok();
    assert_eq!(
        direct["tenants"], live["tenants"],
        "the same books read directly"
    );
    // A balance moved outside the books: not exact, exit 1, both ways.
    gw = Gateway::start(&cfg, &store);
    let (status, _) = http(
        gw.addr,
        "PUT",
        "/admin/tenants/acme/balance",
        ADMIN,
        r#"{"balance": 7}"#,
    )
    .unwrap();
    assert_eq!(status, 200);
    let run = gw.cli(ADMIN, &["books", "check", "--json"]);
    assert_eq!(run.code(), Some(1), "{} {}", run.out, run.err);
    assert!(run.err.contains("not exact"), "{}", run.err);
    let v: Value = serde_json::from_str(&run.out).unwrap();
    let acme = v["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == "acme")
        .unwrap()
        .clone();
    assert_eq!(acme["exact"], false);
    assert_ne!(acme["difference"], 0, "{acme}");
    drop(gw);
    let run = portcullis(
        &["books", "check", "--config", path, "--store", &redis.url()],
        &[],
    );
    assert_eq!(run.code(), Some(1), "{} {}", run.out, run.err);
    let run = portcullis(
        &["books", "check", "--config", path, "--store", "memory"],
        &[],
    );
    assert_eq!(run.code(), Some(1));
    assert!(run.err.contains("in memory"), "{}", run.err);
}
