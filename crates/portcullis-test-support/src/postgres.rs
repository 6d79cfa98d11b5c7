//! A private PostgreSQL server per test: `initdb`'d into a temp dir of its own, started on
//! a free 127.0.0.1 port, killed and its temp dir removed when dropped (also on panic).
//!
//! The binaries come from the highest `/usr/lib/postgresql/<version>/bin` (Debian's
//! layout, where `initdb` and `postgres` are not on PATH), else from PATH. PostgreSQL
//! refuses to run as root, so a test running as root runs `initdb` and `postgres` as the
//! unprivileged system user [`PG_USER`], created on first use with `useradd`.
//!
//! The server runs with trust authentication for the superuser `portcullis`, a database
//! `portcullis`, and no durability work (`fsync=off`, `full_page_writes=off`): safe
//! against the faults a test makes ([`kill`](PostgresServer::kill) kills processes, not
//! the machine: what was written reached the kernel). `synchronous_commit` keeps its
//! default `on` (cheap without fsync): with `off` a commit returns before its WAL is
//! written, and a SIGKILL right after it would lose data that [`PostgresServer::restart`]
//! promises is still there.
//!
//! The faults: [`kill`](PostgresServer::kill) (SIGKILL, a database that dies),
//! [`stall`](PostgresServer::stall) / [`resume`](PostgresServer::resume) (SIGSTOP /
//! SIGCONT of the postmaster and its children) and [`restart`](PostgresServer::restart).
//! Every wait is bounded.
//!
//! PostgreSQL's children call `setsid()`, so they are not in the postmaster's process
//! group: the faults signal the group *and* every descendant found in `/proc`.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cluster::free_port;

/// The unprivileged user `initdb` and `postgres` run as when the test runs as root.
pub const PG_USER: &str = "portcullis-pg";

/// How long a server may take to accept connections after being spawned.
const READY_WAIT: Duration = Duration::from_secs(30);

/// How long `initdb` may run.
const INITDB_WAIT: Duration = Duration::from_secs(120);

/// How long one client tool (`pg_isready`, `createdb`, …) may run.
const TOOL_WAIT: Duration = Duration::from_secs(15);

/// How long the processes of a killed server may take to go away (and its port to close).
const DEATH_WAIT: Duration = Duration::from_secs(10);

/// How to get PostgreSQL when it is missing.
const INSTALL_HINT: &str = "the PostgreSQL tests need PostgreSQL's server binaries \
    (`initdb`, `postgres`) in /usr/lib/postgresql/<version>/bin or on PATH; install them \
    (Debian/Ubuntu: `apt-get install postgresql`)";

/// Distinguishes the temp dirs of several servers started by one test process.
static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A PostgreSQL server of the test's own: initdb'd into a temp dir, on a free loopback
/// port, run as an unprivileged user (postgres refuses to run as root).
pub struct PostgresServer {
    port: u16,
    /// The temp dir: `data/` (the cluster), `log` (the server's output), the socket.
    dir: PathBuf,
    /// Where `initdb`, `postgres` and the client tools are; `None`: on PATH.
    bin: Option<PathBuf>,
    /// The uid and gid the server runs as; `None`: the current user's.
    user: Option<(u32, u32)>,
    /// The postmaster; `None` after [`kill`](Self::kill).
    child: Option<Child>,
}

impl PostgresServer {
    /// Starts one; panics with a clear message naming what is missing (initdb/postgres
    /// binaries, `useradd`) or what failed (initdb output, server log tail).
    pub fn start() -> Self {
        let bin = server_bin_dir();
        let user = if effective_uid() == 0 {
            Some(pg_user())
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!(
            "portcullis-pg-{}-{}-{:x}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        ));
        fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot create the temp dir {}: {e}", dir.display()));
        // From here on the value exists, so a panic removes the temp dir (and the server).
        let mut s = Self {
            port: 0,
            dir,
            bin,
            user,
            child: None,
        };
        if let Some((uid, gid)) = s.user {
            let out = run_bounded(
                Command::new("chown")
                    .arg("-R")
                    .arg(format!("{uid}:{gid}"))
                    .arg(&s.dir),
                TOOL_WAIT,
            );
            match out {
                Ok(o) if o.status.success() => {}
                other => panic!(
                    "cannot give the temp dir {} to {PG_USER} with `chown -R`: {}",
                    s.dir.display(),
                    describe(&other)
                ),
            }
        }
        s.initdb();
        // A port chosen free can be taken by a parallel test's server before ours binds
        // it; then our postmaster exits. Retry on a new port.
        for attempt in 1..=5 {
            s.port = free_port();
            let log_len = s.log_len();
            s.spawn();
            match s.wait_ready() {
                Ok(()) => {
                    s.create_database();
                    return s;
                }
                Err(status) => {
                    let new = s.log_since(log_len);
                    let port_taken = new.contains("already in use")
                        || new.contains("could not create any TCP/IP sockets");
                    if !port_taken || attempt == 5 {
                        panic!(
                            "postgres on port {} exited ({status}) before accepting \
                             connections; log tail:\n{}",
                            s.port,
                            s.log_tail()
                        );
                    }
                }
            }
        }
        unreachable!("the last attempt panics")
    }

    /// `postgres://portcullis@127.0.0.1:{port}/portcullis` (trust auth; the database `portcullis` exists).
    pub fn url(&self) -> String {
        format!("postgres://portcullis@127.0.0.1:{}/portcullis", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILL the postmaster (and wait for the port to close): a database that dies.
    ///
    /// Its children are killed too (they would exit on their own once they notice, but a
    /// stalled one would not, and a restart refuses to start while any of them lives).
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        // Freeze it first so that it forks nothing after its descendants are listed.
        signal("-STOP", &group_and(pid, &[]));
        wait_until(Duration::from_secs(2), || {
            matches!(proc_state(pid), Some('T' | 't' | 'Z') | None)
        });
        let kids = descendants(pid);
        signal("-KILL", &group_and(pid, &kids));
        let _ = child.wait();
        let gone = wait_until(DEATH_WAIT, || kids.iter().all(|&k| !alive(k)));
        assert!(
            gone,
            "the children of the killed postgres (pid {pid}) still live after {DEATH_WAIT:?}"
        );
        let closed = wait_until(DEATH_WAIT, || !accepts_tcp(self.port));
        assert!(
            closed,
            "port {} still accepts connections {DEATH_WAIT:?} after postgres (pid {pid}) was \
             killed",
            self.port
        );
        self.remove_shared_memory();
    }

    /// SIGSTOP / SIGCONT the postmaster and its children (a stalled database).
    pub fn stall(&self) {
        let pid = self.pid();
        // The postmaster first, so that it forks nothing after its descendants are listed.
        signal("-STOP", &group_and(pid, &[]));
        wait_until(Duration::from_secs(2), || {
            matches!(proc_state(pid), Some('T' | 't'))
        });
        let kids = descendants(pid);
        signal(
            "-STOP",
            &kids.iter().map(u32::to_string).collect::<Vec<_>>(),
        );
    }

    /// SIGCONT the postmaster and its children: undoes [`stall`](Self::stall).
    pub fn resume(&self) {
        let pid = self.pid();
        signal("-CONT", &group_and(pid, &descendants(pid)));
    }

    /// Starts it again on the same port and data directory (after `kill`), waiting until it accepts connections; data written before is still there.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        if let Err(status) = self.wait_ready() {
            panic!(
                "restarted postgres on port {} exited ({status}) before accepting connections \
                 (port taken by another process since?); log tail:\n{}",
                self.port,
                self.log_tail()
            );
        }
    }

    fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .expect("the postgres server is not running (killed and not restarted)")
            .id()
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// A PostgreSQL program: from the server's bin dir when it is there, else from PATH.
    fn tool(&self, name: &str) -> Option<PathBuf> {
        self.bin
            .as_ref()
            .map(|b| b.join(name))
            .filter(|p| p.is_file())
            .or_else(|| on_path(name))
    }

    /// A command for a server program, run as [`PG_USER`] when the test runs as root.
    fn server_command(&self, name: &str) -> Command {
        let program = self.tool(name).unwrap_or_else(|| {
            panic!("cannot find PostgreSQL's `{name}` next to initdb nor on PATH: {INSTALL_HINT}")
        });
        let mut cmd = Command::new(program);
        // The test's cwd may not be readable by the unprivileged user.
        cmd.current_dir(&self.dir);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn initdb(&self) {
        let out = run_bounded(
            self.server_command("initdb")
                .arg("-D")
                .arg(self.data())
                .args(["-A", "trust", "-U", "portcullis", "--no-sync", "-E", "UTF8"])
                // -E UTF8 needs a compatible locale; C is always there.
                .arg("--locale=C"),
            INITDB_WAIT,
        );
        match out {
            Ok(o) if o.status.success() => {}
            other => {
                let hint = match self.user {
                    Some(_) => format!(
                        " (it runs as {PG_USER}: every directory above {} must be searchable \
                         by that user)",
                        self.dir.display()
                    ),
                    None => String::new(),
                };
                panic!(
                    "initdb into {} failed{hint}: {}",
                    self.data().display(),
                    describe(&other)
                )
            }
        }
    }

    fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.log_path().display()));
        let log2 = log.try_clone().expect("clone the log file handle");
        let child = self
            .server_command("postgres")
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off"])
            .args(["-c", "full_page_writes=off"])
            .args(["-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `postgres` ({e}): {INSTALL_HINT}"));
        self.child = Some(child);
    }

    /// Waits until our postmaster accepts connections; `Err` when it exited first. Panics
    /// with the log tail after [`READY_WAIT`].
    fn wait_ready(&mut self) -> Result<(), ExitStatus> {
        let start = Instant::now();
        let pg_isready = self.tool("pg_isready");
        loop {
            let child = self.child.as_mut().expect("spawned");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(status);
            }
            let pid = child.id();
            // Ours, not a parallel test's server on the same port: the postmaster.pid of
            // our data dir names our child and says "ready".
            if self.pid_file_says_ready(pid) {
                let answers = match &pg_isready {
                    Some(p) => run_bounded(
                        Command::new(p)
                            .args(["-q", "-t", "2", "-h", "127.0.0.1"])
                            .args(["-p", &self.port.to_string()]),
                        TOOL_WAIT,
                    )
                    .is_ok_and(|o| o.status.success()),
                    None => accepts_tcp(self.port),
                };
                if answers {
                    return Ok(());
                }
            }
            if start.elapsed() > READY_WAIT {
                panic!(
                    "postgres on port {} did not accept connections within {READY_WAIT:?}; log \
                     tail:\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Line 1 of `postmaster.pid` is the postmaster's pid, line 8 its status.
    fn pid_file_says_ready(&self, pid: u32) -> bool {
        let Ok(text) = fs::read_to_string(self.data().join("postmaster.pid")) else {
            return false;
        };
        let lines: Vec<&str> = text.lines().collect();
        lines.first().and_then(|l| l.trim().parse().ok()) == Some(pid)
            && lines.get(7).is_some_and(|l| l.trim() == "ready")
    }

    fn create_database(&self) {
        let createdb = self.tool("createdb").unwrap_or_else(|| {
            panic!("cannot find PostgreSQL's `createdb` next to initdb nor on PATH: {INSTALL_HINT}")
        });
        let mut last = String::new();
        for _ in 0..10 {
            let out = run_bounded(
                Command::new(&createdb)
                    .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                    .args(["-U", "portcullis", "portcullis"])
                    .env("PGCONNECT_TIMEOUT", "5"),
                TOOL_WAIT,
            );
            match &out {
                Ok(o) if o.status.success() => return,
                // An earlier attempt that timed out on our side may have succeeded.
                Ok(o) if String::from_utf8_lossy(&o.stderr).contains("already exists") => return,
                _ => last = describe(&out),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "createdb portcullis on port {} failed 10 times, last: {last}; log tail:\n{}",
            self.port,
            self.log_tail()
        );
    }

    /// Removes the System V shared memory segment a killed postmaster leaves behind
    /// (named on line 7 of `postmaster.pid`), so killed servers leak nothing. Best effort.
    fn remove_shared_memory(&self) {
        let Ok(text) = fs::read_to_string(self.data().join("postmaster.pid")) else {
            return;
        };
        let id = text
            .lines()
            .nth(6)
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|id| id.parse::<u64>().ok());
        if let Some(id) = id {
            let _ = run_bounded(
                Command::new("ipcrm").args(["-m", &id.to_string()]),
                TOOL_WAIT,
            );
        }
    }

    fn log_len(&self) -> u64 {
        fs::metadata(self.log_path()).map_or(0, |m| m.len())
    }

    fn log_since(&self, offset: u64) -> String {
        let text = fs::read(self.log_path()).unwrap_or_default();
        let start = (offset as usize).min(text.len());
        String::from_utf8_lossy(&text[start..]).into_owned()
    }

    fn log_tail(&self) -> String {
        let text = self.log_since(0);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Never panics: it may run while a test unwinds.
        if let Some(mut child) = self.child.take() {
            let pid = child.id();
            // Wake a stalled server, then ask for an immediate shutdown (SIGQUIT): the
            // postmaster ends its children and removes its shared memory itself.
            signal("-CONT", &group_and(pid, &descendants(pid)));
            signal("-QUIT", &[pid.to_string()]);
            let exited = wait_until(Duration::from_secs(10), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !exited {
                let kids = descendants(pid);
                signal("-KILL", &group_and(pid, &kids));
                let _ = child.wait();
                wait_until(DEATH_WAIT, || kids.iter().all(|&k| !alive(k)));
                self.remove_shared_memory();
            }
        }
        for _ in 0..5 {
            if fs::remove_dir_all(&self.dir).is_ok() || !self.dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The highest `/usr/lib/postgresql/<version>/bin` with `initdb` and `postgres`, else the
/// directory of `initdb` on PATH (`None` when `postgres` is on PATH too but elsewhere).
/// Panics naming what is missing.
fn server_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version = name
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    match (on_path("initdb"), on_path("postgres")) {
        (Some(initdb), Some(postgres)) => {
            let dir = initdb.parent().map(Path::to_path_buf);
            (dir.as_deref() == postgres.parent())
                .then_some(dir)
                .flatten()
        }
        (None, None) => panic!(
            "neither `initdb` nor `postgres` found in /usr/lib/postgresql/*/bin or on PATH: \
             {INSTALL_HINT}"
        ),
        (None, Some(_)) => {
            panic!("`initdb` not found in /usr/lib/postgresql/*/bin or on PATH: {INSTALL_HINT}")
        }
        (Some(_), None) => {
            panic!("`postgres` not found in /usr/lib/postgresql/*/bin or on PATH: {INSTALL_HINT}")
        }
    }
}

/// `name` in a directory of PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The effective uid, from `/proc/self/status` (else `id -u`).
fn effective_uid() -> u32 {
    let from_proc = fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("Uid:"))?;
        // Real, effective, saved, filesystem.
        line.split_whitespace().nth(2)?.parse().ok()
    });
    from_proc
        .or_else(|| id(&["-u"]))
        .expect("cannot tell the current uid: no /proc/self/status and `id -u` failed")
}

/// `id ARGS` as a number.
fn id(args: &[&str]) -> Option<u32> {
    let out = Command::new("id").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The uid and gid of [`PG_USER`], created once per process with `useradd` (tolerating
/// its creation by a parallel test process meanwhile).
fn pg_user() -> (u32, u32) {
    static USER: OnceLock<(u32, u32)> = OnceLock::new();
    *USER.get_or_init(|| {
        let lookup = || Some((id(&["-u", PG_USER])?, id(&["-g", PG_USER])?));
        if let Some(ids) = lookup() {
            return ids;
        }
        let mut last = String::new();
        for _ in 0..20 {
            let out = run_bounded(
                Command::new("useradd").args(["--system", "--no-create-home", PG_USER]),
                TOOL_WAIT,
            );
            if let Some(ids) = lookup() {
                return ids;
            }
            if matches!(&out, Err(e) if e.starts_with("cannot run")) {
                panic!(
                    "PostgreSQL refuses to run as root and the tests run as root, so they run \
                     it as the user {PG_USER}, but `useradd` to create it is missing ({}); \
                     install it (Debian/Ubuntu: `apt-get install passwd`) or create the user",
                    describe(&out)
                );
            }
            // "already exists" from a parallel creation, or /etc/passwd locked by it.
            last = describe(&out);
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("cannot create the user {PG_USER} with `useradd --system --no-create-home`: {last}")
    })
}

/// Runs `cmd` (stdin closed, output captured), killing it after `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{:?} {:?} did not finish within {limit:?}",
                    cmd.get_program(),
                    cmd.get_args().collect::<Vec<_>>()
                ));
            }
        }
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// What a command run by [`run_bounded`] did, for a panic message.
fn describe(out: &Result<Output, String>) -> String {
    match out {
        Ok(o) => format!(
            "{}\nstdout:\n{}\nstderr:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout).trim_end(),
            String::from_utf8_lossy(&o.stderr).trim_end()
        ),
        Err(e) => e.clone(),
    }
}

/// `kill SIG -- TARGETS…`; failures (a process gone meanwhile) are ignored.
fn signal(sig: &str, targets: &[String]) {
    if targets.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(sig)
        .arg("--")
        .args(targets)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The process group of `pid` (it leads one: `process_group(0)`) and `kids`, as `kill`
/// targets.
fn group_and(pid: u32, kids: &[u32]) -> Vec<String> {
    let mut targets = vec![format!("-{pid}"), pid.to_string()];
    targets.extend(kids.iter().map(u32::to_string));
    targets
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, …); `None`: no such process.
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold anything: the state follows the last ')'.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Whether `pid` lives (a zombie does not: it holds nothing any more).
fn alive(pid: u32) -> bool {
    !matches!(proc_state(pid), None | Some('Z' | 'X'))
}

/// Every descendant of `pid`, from the parent pids in `/proc/*/stat`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(p);
        }
    }
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            found.push(c);
            todo.push(c);
        }
    }
    found
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
fn accepts_tcp(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// Polls `done` every 20 ms until it holds or `limit` passes; whether it held.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `psql -tAc SQL` against the server's database, bounded; `Err` when it failed or
    /// did not finish. `-q`: psql 15 prints the command tag of every statement of a
    /// multi-statement `-c` otherwise (`CREATE TABLE`, `INSERT 0 1`).
    fn psql(pg: &PostgresServer, sql: &str) -> Result<String, String> {
        let psql = pg.tool("psql").expect("psql next to initdb or on PATH");
        let out = run_bounded(
            Command::new(psql)
                .args(["-X", "-q", "-h", "127.0.0.1", "-p", &pg.port().to_string()])
                .args([
                    "-U",
                    "portcullis",
                    "-d",
                    "portcullis",
                    "-v",
                    "ON_ERROR_STOP=1",
                ])
                .args(["-tAc", sql])
                .env("PGCONNECT_TIMEOUT", "2"),
            Duration::from_secs(10),
        )?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(describe(&Ok(out)))
        }
    }

    #[test]
    fn postgres_server_survives_kill_and_restart_with_its_data() {
        let mut pg = PostgresServer::start();
        assert_eq!(
            pg.url(),
            format!("postgres://portcullis@127.0.0.1:{}/portcullis", pg.port())
        );
        assert_eq!(
            psql(
                &pg,
                "create table t(x int); insert into t values (7); select x from t"
            )
            .unwrap(),
            "7"
        );
        pg.kill();
        assert!(
            psql(&pg, "select 1").is_err(),
            "psql still works after kill"
        );
        pg.restart();
        assert_eq!(psql(&pg, "select x from t").unwrap(), "7");
    }

    #[test]
    fn postgres_server_stall_blocks_clients_until_resume() {
        let pg = PostgresServer::start();
        assert_eq!(psql(&pg, "select 1").unwrap(), "1");
        pg.stall();
        let started = Instant::now();
        let stalled = psql(&pg, "select 1");
        assert!(stalled.is_err(), "psql worked on a stalled server");
        assert!(
            started.elapsed() >= Duration::from_millis(1500),
            "psql failed fast on a stalled server, not by timing out: {stalled:?}"
        );
        pg.resume();
        assert_eq!(psql(&pg, "select 1").unwrap(), "1");
    }

    #[test]
    fn dropping_a_server_removes_its_processes_and_temp_dir() {
        let pg = PostgresServer::start();
        pg.stall();
        let pid = pg.pid();
        let dir = pg.dir.clone();
        let kids = descendants(pid);
        assert!(!kids.is_empty(), "the postmaster has no children");
        drop(pg);
        assert!(!alive(pid), "the postmaster outlived its drop");
        assert!(
            wait_until(DEATH_WAIT, || kids.iter().all(|&k| !alive(k))),
            "children of the postmaster outlived its drop"
        );
        assert!(!dir.exists(), "{} outlived the drop", dir.display());

        // A killed, never restarted server too.
        let mut pg = PostgresServer::start();
        let dir = pg.dir.clone();
        pg.kill();
        drop(pg);
        assert!(!dir.exists(), "{} outlived the drop", dir.display());
    }
}
