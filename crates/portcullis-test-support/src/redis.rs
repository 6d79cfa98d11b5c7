//! A private `redis-server` per test: started on a free 127.0.0.1 port with no
//! persistence, killed when dropped (also on panic).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` process owned by a test.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("no free port on 127.0.0.1")
        .port()
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> Self {
        // A port chosen free can be taken by a parallel test's server before ours binds
        // it; then PING is answered by the other server. Retry on a new port until the
        // server answering is ours.
        for _ in 0..5 {
            let mut s = Self {
                port: free_port(),
                child: None,
            };
            s.spawn();
            let ours = s.child.as_ref().map(|c| c.id());
            if ours.is_some() && server_pid(s.port) == ours {
                return s;
            }
            drop(s);
        }
        panic!("could not start a redis-server of our own on a free port (5 attempts)")
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `redis-server` ({e}): the portcullis-redis tests need it on \
                     PATH; install it (Debian/Ubuntu: `apt-get install redis-server`)"
                )
            });
        self.child = Some(child);
        let start = Instant::now();
        while !self.answers_ping() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not answer PING within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut c) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        c.write_all(b"PING\r\n").is_ok() && c.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// A free port reserved for a server that is not started yet: start it with
    /// [`restart`](Self::restart).
    pub fn not_started() -> Self {
        Self {
            port: free_port(),
            child: None,
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server not running").id()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {} failed", self.pid());
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn stop(&self) {
        self.signal("-STOP");
    }

    /// Resumes a frozen server (SIGCONT).
    pub fn cont(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// (Re)starts the server on the same port and waits until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs one command through `redis-cli` and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "redis-cli {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A stopped process dies from SIGKILL too; CONT first anyway so nothing lingers.
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid().to_string()])
                .status();
        }
        self.kill();
    }
}

/// `calls` of every command in `INFO commandstats`, by command name.
pub fn command_calls(info: &str) -> Vec<(String, u64, f64)> {
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let field = |f: &str| {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
                    .map(str::to_owned)
            };
            let calls = field("calls")?.parse().ok()?;
            let usec_per_call = field("usec_per_call")?.parse().ok()?;
            Some((name.to_owned(), calls, usec_per_call))
        })
        .collect()
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
