//! Finding and building the `proxy` example binary for tests that run it as a
//! separate process (as a newcomer would).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

/// The workspace root (this package lives in `<root>/tests`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// The newest modification time of the sources the example is built from: `.rs` and
/// `.toml` files under `examples/` and every crate's `src/`, the manifests and the lock
/// file (a bounded walk).
pub fn newest_source() -> SystemTime {
    fn walk(dir: &Path, depth: u32, budget: &mut u32, newest: &mut SystemTime) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let path = e.path();
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                let name = e.file_name();
                if depth > 0 && name != "target" && !name.to_string_lossy().starts_with('.') {
                    walk(&path, depth - 1, budget, newest);
                }
            } else if let Some(m) = path
                .extension()
                .filter(|x| *x == "rs" || *x == "toml" || *x == "lock")
                .and_then(|_| meta.modified().ok())
            {
                *newest = (*newest).max(m);
            }
        }
    }
    let root = workspace_root();
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut budget = 20_000;
    for f in ["Cargo.toml", "Cargo.lock"] {
        if let Ok(m) = std::fs::metadata(root.join(f)).and_then(|m| m.modified()) {
            newest = newest.max(m);
        }
    }
    walk(&root.join("examples"), 2, &mut budget, &mut newest);
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        for c in crates.flatten() {
            let dir = c.path();
            if let Ok(m) = std::fs::metadata(dir.join("Cargo.toml")).and_then(|m| m.modified()) {
                newest = newest.max(m);
            }
            walk(&dir.join("src"), 6, &mut budget, &mut newest);
        }
    }
    newest
}

/// `target/<profile>/examples/proxy`, next to this test's own `target/<profile>/deps/`.
/// `cargo test --workspace` (and `cargo nextest run --workspace`) builds it before the
/// tests; when it is missing or older than the sources (this test run alone), the
/// README's build runs first:
/// `cargo build -p portcullis-examples --example proxy`, same target directory and
/// profile, bounded to 10 minutes. (Cargo does not hold the build lock while tests
/// run, so this does not wait on the outer `cargo test`.)
pub fn proxy_example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let bin = profile_dir
        .join("examples")
        .join(format!("proxy{}", std::env::consts::EXE_SUFFIX));
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    if built.is_some_and(|t| t >= newest_source()) {
        return bin;
    }
    let target_dir = profile_dir.parent().expect("target dir");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "-p", "portcullis-examples", "--example", "proxy"])
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(Stdio::null());
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let mut child = cmd.spawn().expect("run cargo build");
    for _ in 0..6000 {
        match child.try_wait().expect("wait for cargo build") {
            Some(status) => {
                assert!(status.success(), "cargo build of the proxy example failed");
                assert!(bin.exists(), "{} not built", bin.display());
                return bin;
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("cargo build of the proxy example took over 10 minutes")
}

/// What the proxy example prints once it listens: `portcullis listening on http://ADDR
/// (…)`.
const LISTENING: &str = "portcullis listening on http://";

/// The address the proxy example bound, read from the line it prints on its standard
/// output, which the file `stdout` receives: read every 20 ms until the line shows, for
/// `within` at most; `Err` with the reason when the example exits first or never
/// prints it. Started with `--listen 127.0.0.1:0`, the example binds a port of the
/// kernel's choosing: no port is chosen beforehand, so none can be taken by another
/// test in between (one was, once: "Address already in use").
pub async fn listening_addr(
    stdout: &Path,
    child: &mut tokio::process::Child,
    within: Duration,
) -> Result<std::net::SocketAddr, String> {
    let start = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(stdout).unwrap_or_default();
        let addr = text
            .lines()
            .find_map(|l| l.strip_prefix(LISTENING))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok());
        if let Some(addr) = addr {
            return Ok(addr);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the example exited with {status} before it listened"
            ));
        }
        if start.elapsed() > within {
            return Err(format!("the example printed no address within {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
