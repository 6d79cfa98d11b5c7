//! A private `redis-server` per test, for the distributed (Redis store) tests.
//!
//! [`RedisServer::start`] runs `redis-server` on a free `127.0.0.1` port with no
//! persistence (`--save "" --appendonly no`) and waits until it answers `PING`; the
//! process is killed when the value is dropped (also on panic). A test can then play
//! the faults of T5 on it: [`kill`](RedisServer::kill) (SIGKILL: every connection
//! drops, all state is lost), [`restart`](RedisServer::restart) (a new, empty server on
//! the same port), [`freeze`](RedisServer::freeze) / [`thaw`](RedisServer::thaw)
//! (SIGSTOP / SIGCONT: connections stay open, nothing is answered).
//!
//! Every wait is bounded ([`READY_WAIT`]). When `redis-server` is not installed the
//! start fails with a message saying how to install it.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a start or restart may take before it counts as failed.
pub const READY_WAIT: Duration = Duration::from_secs(10);

/// The longest [`RedisServer::command`] waits for a connection and its reply: a
/// loaded host may take a while to run the server, and no caller is timing it (a
/// server that is down refuses the connection at once).
pub const REPLY_WAIT: Duration = Duration::from_secs(2);

/// How to get `redis-server` when it is missing.
const INSTALL_HINT: &str = "the Redis store tests need `redis-server` on PATH; install it \
    (Debian/Ubuntu: `apt-get install redis-server`)";

/// One `redis-server` process owned by a test; killed on drop.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    frozen: bool,
    log: PathBuf,
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("no free port on 127.0.0.1")
        .port()
}

impl RedisServer {
    /// Starts a server on a free port and waits (bounded) until it answers PING.
    ///
    /// # Panics
    /// When `redis-server` is missing (with an install hint) or does not come up.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`start`](Self::start), returning the reason instead of panicking. A port taken
    /// between choosing it and the server binding it is retried (3 attempts).
    pub fn try_start() -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port();
            let mut s = Self {
                port,
                child: None,
                frozen: false,
                log: std::env::temp_dir().join(format!(
                    "portcullis-redis-{}-{port}.log",
                    std::process::id()
                )),
            };
            match s.spawn() {
                // The server answering must be ours, not a parallel test's that took
                // the port first.
                Ok(()) if server_pid(port) == s.child.as_ref().map(|c| c.id()) => return Ok(s),
                Ok(()) => last = format!("port {port} was taken by another redis-server"),
                Err(e) if e.contains(INSTALL_HINT) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--loglevel", "warning"])
            .arg("--logfile")
            .arg(&self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start `redis-server` ({e}): {INSTALL_HINT}"))?;
        self.child = Some(child);
        self.frozen = false;
        let start = Instant::now();
        // Bounded: at most READY_WAIT / 5 ms polls.
        for _ in 0..(READY_WAIT.as_millis() / 5) {
            if self.ping() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "redis-server on port {} exited with {status} at start: {}",
                    self.port,
                    self.log_tail()
                ));
            }
            if start.elapsed() > READY_WAIT {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill();
        Err(format!(
            "redis-server on port {} did not answer PING within {READY_WAIT:?}: {}",
            self.port,
            self.log_tail()
        ))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether a server process is running (possibly frozen).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the server answers `PING` now (within [`REPLY_WAIT`]).
    pub fn ping(&self) -> bool {
        self.command(&["PING"]).is_ok_and(|r| r == "+PONG")
    }

    /// Sends one command and returns the first line of the reply (`+OK`, `:3`, `-ERR …`,
    /// `$5` …), within [`REPLY_WAIT`]. Enough for PING, FLUSHALL, DBSIZE, ZCARD and the
    /// like.
    pub fn command(&self, args: &[&str]) -> Result<String, String> {
        let limit = REPLY_WAIT;
        let mut c = TcpStream::connect_timeout(&self.addr(), limit).map_err(|e| e.to_string())?;
        c.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
        c.set_write_timeout(Some(limit))
            .map_err(|e| e.to_string())?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        c.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(c)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.is_empty() {
            return Err("connection closed".into());
        }
        Ok(line.trim_end().to_owned())
    }

    /// An integer reply (`ZCARD key`, `DBSIZE`).
    pub fn integer(&self, args: &[&str]) -> Result<i64, String> {
        let r = self.command(args)?;
        r.strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("{args:?}: not an integer reply: {r}"))
    }

    fn signal(&self, sig: &str) {
        let Some(pid) = self.pid() else {
            panic!("redis-server is not running");
        };
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid} failed");
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered, so
    /// every call runs into its deadline.
    pub fn freeze(&mut self) {
        self.signal("-STOP");
        self.frozen = true;
    }

    /// Resumes a frozen server (SIGCONT); it then answers everything queued meanwhile.
    pub fn thaw(&mut self) {
        self.signal("-CONT");
        self.frozen = false;
    }

    /// Kills the server (SIGKILL) and reaps it: every connection drops, all state is
    /// lost (no persistence).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.frozen {
                // A stopped process dies from SIGKILL too; CONT anyway so nothing lingers.
                let _ = Command::new("kill")
                    .args(["-CONT", &c.id().to_string()])
                    .status();
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.frozen = false;
    }

    /// Kills the server if it runs, then starts an empty one on the same port and waits
    /// (bounded) until it answers PING.
    ///
    /// # Panics
    /// When the server does not come back (e.g. the port was taken meanwhile).
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn() {
            panic!("restart: {e}");
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The pid of the redis-server answering on `port` (from `INFO server`), to tell our
/// server from another test's that happens to hold the same port.
fn server_pid(port: u16) -> Option<u32> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .ok()?;
    c.write_all(b"INFO server\r\n").ok()?;
    let mut buf = vec![0u8; 8192];
    let mut got = 0;
    while got < buf.len() {
        match c.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
        let text = String::from_utf8_lossy(&buf[..got]);
        if let Some(i) = text.find("process_id:") {
            let rest = &text[i + "process_id:".len()..];
            if let Some(end) = rest.find("\r\n") {
                return rest[..end].trim().parse().ok();
            }
        }
    }
    None
}
