#![allow(dead_code)]
//! A private Redis Cluster per test, for the distributed (Redis store) tests.
//!
//! [`RedisCluster::start`] runs `masters * (1 + replicas_per_master)` `redis-server`
//! processes on free `127.0.0.1` ports, joins them with
//! `redis-cli --cluster create … --cluster-replicas R --cluster-yes` and waits until the
//! cluster has settled (see [`RedisCluster::settled`]); every process is killed and its
//! temp dir removed when the value is dropped (also on panic). Only `std` is used, so the
//! file can be included from any test crate with `#[path = "…"] mod cluster;`.
//!
//! Every node runs with
//! * `--bind 127.0.0.1`, `--port P`, `--cluster-port B` (a second free port, so nothing
//!   depends on the `P + 10000` convention),
//! * no persistence (`--save "" --appendonly no`), diskless replication without delay
//!   (`--repl-diskless-sync yes --repl-diskless-sync-delay 0`, so a replica syncs at once
//!   instead of after the default 5 s),
//! * its own temp dir (`--dir`, holding `nodes.conf` and `redis.log`),
//! * `--cluster-node-timeout 1000` ([`NODE_TIMEOUT_MS`]) so failure detection and
//!   automatic failover take a few seconds, not the default 15+ s.
//!
//! `cluster-require-full-coverage` keeps its default **yes**, as in production: while
//! any slot has no reachable master, *every* node answers `CLUSTERDOWN`. A manual
//! [`failover`](RedisCluster::failover) never leaves a slot uncovered, so it behaves
//! like a production switchover; a [`kill`](RedisCluster::kill) or a long
//! [`freeze`](RedisCluster::freeze) of a master shows the real outage window (cluster
//! down from the moment the master is flagged FAIL until its replica is promoted), and
//! killing a master without a replica takes the whole cluster down.
//!
//! The test faults: [`failover`](RedisCluster::failover) (manual `CLUSTER FAILOVER`),
//! [`kill`](RedisCluster::kill) (SIGKILL), [`freeze`](RedisCluster::freeze) /
//! [`thaw`](RedisCluster::thaw) (SIGSTOP / SIGCONT) and
//! [`migrate_slot`](RedisCluster::migrate_slot) (a one-slot reshard, as
//! `redis-cli --cluster reshard` does it).
//!
//! Every wait is bounded ([`NODE_WAIT`], [`CLUSTER_WAIT`], [`CLI_WAIT`],
//! [`REPLY_WAIT`]). When `redis-server` is not installed the start fails with a message
//! saying how to install it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest one node may take to answer `PING` after being spawned.
pub const NODE_WAIT: Duration = Duration::from_secs(10);

/// The longest a cluster operation may take: creation plus settling, a failover, a slot
/// migration, [`RedisCluster::wait_settled`] from the helpers.
pub const CLUSTER_WAIT: Duration = Duration::from_secs(20);

/// The longest one `redis-cli` invocation may run (except `--cluster create`, which gets
/// [`CLUSTER_WAIT`]).
pub const CLI_WAIT: Duration = Duration::from_secs(10);

/// The longest the harness waits for one reply on its own connections (`MIGRATE` gets
/// its own, longer limit).
pub const REPLY_WAIT: Duration = Duration::from_secs(1);

/// `cluster-node-timeout` of every node, in milliseconds. A master unreachable for about
/// this long is flagged PFAIL, then FAIL once a majority of masters agree; its replica
/// then starts an election after 500 ms plus up to 500 ms of jitter (plus 1 s per rank).
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How to get `redis-server` when it is missing.
const INSTALL_HINT: &str = "the Redis store tests need `redis-server` on PATH; install it \
    (Debian/Ubuntu: `apt-get install redis-server`)";

/// Distinguishes the temp dirs of several clusters started by one test process.
static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("no free port on 127.0.0.1")
        .port()
}

/// CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection), the checksum Redis
/// Cluster hashes keys with. `crc16(b"123456789") == 0x31C3`.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash slot of `key`, as `CLUSTER KEYSLOT` computes it: CRC16 mod 16384 of the
/// whole key, or — when the key has a `{` followed later by a `}` with at least one byte
/// between them — of the bytes between the first `{` and the first `}` after it (the
/// hash tag). So `{user1}.a` and `{user1}.b` share a slot; `{}a` and `a{}{b}` hash whole.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % SLOTS
}

/// A node's role as it reports it itself (`ROLE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `ROLE` says `master`.
    Master,
    /// `ROLE` says `slave`.
    Replica,
    /// Killed, frozen or not answering within [`REPLY_WAIT`].
    Down,
}

/// A snapshot of one node, from [`RedisCluster::nodes`].
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// The client port.
    pub port: u16,
    /// The cluster bus port (`--cluster-port`).
    pub bus_port: u16,
    /// The process id, unless the node was killed.
    pub pid: Option<u32>,
    /// The 40-character cluster node id (`CLUSTER MYID`).
    pub id: String,
    /// The role the node reports now ([`Role::Down`] when killed, frozen or silent).
    pub role: Role,
    /// For a replica: the port of the master it replicates from (`ROLE`).
    pub master_port: Option<u16>,
    /// For a master: the slot ranges it owns, inclusive, ascending, by its own
    /// `CLUSTER NODES` line (empty for replicas and down nodes).
    pub slots: Vec<(u16, u16)>,
}

impl NodeInfo {
    /// Whether this node owns `slot` (by its own view).
    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }

    /// How many slots this node owns.
    pub fn slot_count(&self) -> usize {
        self.slots
            .iter()
            .map(|&(a, b)| usize::from(b - a) + 1)
            .sum()
    }
}

/// One `redis-server` process of a cluster; killed (and its dir removed) on drop.
struct Node {
    port: u16,
    bus_port: u16,
    id: String,
    child: Option<Child>,
    frozen: AtomicBool,
    dir: PathBuf,
}

impl Node {
    /// Spawns a node on fresh free ports and waits until it answers; a port (client or
    /// bus) taken between choosing and binding is retried with new ports (5 attempts).
    fn spawn() -> Result<Node, String> {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let bus_port = free_port();
            if bus_port == port {
                continue;
            }
            let dir = std::env::temp_dir().join(format!(
                "portcullis-cluster-{}-{}-{port}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let spawned = Command::new("redis-server")
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .args(["--repl-diskless-sync", "yes"])
                .args(["--repl-diskless-sync-delay", "0"])
                .arg("--dir")
                .arg(&dir)
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
                .args(["--cluster-port", &bus_port.to_string()])
                .args(["--loglevel", "notice"])
                .args(["--logfile", "redis.log"])
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let child = match spawned {
                Ok(c) => c,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(format!("cannot start `redis-server` ({e}): {INSTALL_HINT}"));
                }
            };
            let mut node = Node {
                port,
                bus_port,
                id: String::new(),
                child: Some(child),
                frozen: AtomicBool::new(false),
                dir,
            };
            match node.wait_ready() {
                Ok(()) => return Ok(node),
                Err(e) => last = e, // `node` drops here: killed, dir removed.
            }
        }
        Err(format!("could not start a cluster node: {last}"))
    }

    /// Waits (bounded by [`NODE_WAIT`]) until the server answering on our port is our
    /// process (by `process_id` of `INFO server`), then fetches the node id.
    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        let pid = self.pid();
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "redis-server on port {} (bus {}) exited with {status} at start: {}",
                    self.port,
                    self.bus_port,
                    self.log_tail()
                ));
            }
            // Another test's server may hold the port: then ours fails to bind and
            // exits, which the check above sees on a later round.
            if pid.is_some() && server_pid(self.port) == pid {
                break;
            }
            if start.elapsed() > NODE_WAIT {
                return Err(format!(
                    "redis-server on port {} did not answer within {NODE_WAIT:?}: {}",
                    self.port,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.id = match query(self.port, &["CLUSTER", "MYID"]) {
            Ok(Resp::Bulk(Some(id))) => String::from_utf8_lossy(&id).into_owned(),
            other => return Err(format!("CLUSTER MYID on {}: {other:?}", self.port)),
        };
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Running and not frozen: expected to answer.
    fn live(&self) -> bool {
        self.child.is_some() && !self.frozen.load(Ordering::SeqCst)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    fn signal(&self, sig: &str) {
        let Some(pid) = self.pid() else {
            panic!("redis-server on port {} is not running", self.port);
        };
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid} (port {}) failed", self.port);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A stopped process dies from SIGKILL too; CONT anyway so nothing lingers.
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `redis-server` processes owned by a test; every process is killed
/// and every temp dir removed on drop.
///
/// Nodes are addressed by their client port. Roles change with failovers, so every
/// method that needs "the masters" asks the nodes (`ROLE`) instead of remembering.
pub struct RedisCluster {
    nodes: Vec<Node>,
    masters: usize,
    replicas_per_master: usize,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas_per_master` replicas each and waits
    /// (bounded by [`CLUSTER_WAIT`]) until the cluster has [settled](Self::settled).
    ///
    /// # Panics
    /// When `redis-server` is missing (with an install hint), `masters < 3` (the minimum
    /// `redis-cli --cluster create` accepts), or the cluster does not come up.
    pub fn start(masters: usize, replicas_per_master: usize) -> Self {
        Self::try_start(masters, replicas_per_master).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`start`](Self::start), returning the reason instead of panicking. Ports taken by
    /// a parallel test between choosing and binding are retried per node with new
    /// ports; a failed creation is retried once with all-new nodes.
    pub fn try_start(masters: usize, replicas_per_master: usize) -> Result<Self, String> {
        if masters < 3 {
            return Err(format!(
                "a Redis Cluster needs at least 3 masters (`redis-cli --cluster create`), \
                 asked for {masters}"
            ));
        }
        let mut last = String::new();
        for _ in 0..2 {
            match Self::try_start_once(masters, replicas_per_master) {
                Ok(c) => return Ok(c),
                Err(e) if e.contains(INSTALL_HINT) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn try_start_once(masters: usize, replicas_per_master: usize) -> Result<Self, String> {
        let total = masters * (1 + replicas_per_master);
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            nodes.push(Node::spawn()?);
        }
        let cluster = RedisCluster {
            nodes,
            masters,
            replicas_per_master,
        };
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]);
        for n in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        create
            .args(["--cluster-replicas", &replicas_per_master.to_string()])
            .arg("--cluster-yes");
        let (status, out, err) = run_bounded(&mut create, CLUSTER_WAIT)
            .map_err(|e| format!("redis-cli --cluster create: {e}"))?;
        if !status.success() || !out.contains("All 16384 slots covered") {
            return Err(format!(
                "redis-cli --cluster create failed ({status}): {}{}",
                tail(&out, 8),
                tail(&err, 4)
            ));
        }
        cluster
            .try_wait_settled(CLUSTER_WAIT)
            .map_err(|e| format!("cluster created but did not settle: {e}"))?;
        Ok(cluster)
    }

    /// The number of masters the cluster was created with.
    pub fn master_count(&self) -> usize {
        self.masters
    }

    /// The number of replicas per master the cluster was created with.
    pub fn replicas_per_master(&self) -> usize {
        self.replicas_per_master
    }

    fn node(&self, port: u16) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("port {port} is not a node of this cluster"))
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("port {port} is not a node of this cluster"))
    }

    /// The client ports of all nodes (also killed ones), in creation order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The process id of the node on `port`, unless it was killed.
    pub fn pid(&self, port: u16) -> Option<u32> {
        self.node(port).pid()
    }

    /// The cluster node id of the node on `port`.
    pub fn node_id(&self, port: u16) -> String {
        self.node(port).id.clone()
    }

    /// The ports of the nodes that report themselves master now (killed and frozen
    /// nodes left out), in creation order.
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.live() && role_of(n.port).is_ok_and(|(r, _)| r == Role::Master))
            .map(|n| n.port)
            .collect()
    }

    /// The ports of the live nodes that report themselves replicas of `master_port`
    /// now (`ROLE`), in creation order.
    pub fn replicas_of(&self, master_port: u16) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| {
                n.live() && role_of(n.port).is_ok_and(|r| r == (Role::Replica, Some(master_port)))
            })
            .map(|n| n.port)
            .collect()
    }

    /// `redis://127.0.0.1:<port>` of every current master ([`master_ports`](Self::master_ports)
    /// (Self::master_ports)).
    pub fn urls(&self) -> Vec<String> {
        self.master_ports()
            .into_iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The URL of the first current master, a seed for a cluster client.
    ///
    /// # Panics
    /// When no node reports itself master.
    pub fn seed_url(&self) -> String {
        self.urls()
            .into_iter()
            .next()
            .expect("no node of the cluster reports itself master")
    }

    /// [`urls`](Self::urls) joined with `,` (for a `PORTCULLIS_REDIS_URL`-style setting).
    pub fn comma_urls(&self) -> String {
        self.urls().join(",")
    }

    /// A snapshot of every node (also killed ones), in creation order: role by `ROLE`,
    /// owned slots by the node's own `CLUSTER NODES` line.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.nodes
            .iter()
            .map(|n| {
                let mut info = NodeInfo {
                    port: n.port,
                    bus_port: n.bus_port,
                    pid: n.pid(),
                    id: n.id.clone(),
                    role: Role::Down,
                    master_port: None,
                    slots: Vec::new(),
                };
                if !n.live() {
                    return info;
                }
                let Ok((role, master_port)) = role_of(n.port) else {
                    return info;
                };
                info.role = role;
                info.master_port = master_port;
                let me = (role == Role::Master)
                    .then(|| text(n.port, &["CLUSTER", "NODES"]).ok())
                    .flatten()
                    .and_then(|text| {
                        parse_cluster_nodes(&text)
                            .into_iter()
                            .find(|e| e.flags.iter().any(|f| f == "myself"))
                    });
                if let Some(me) = me {
                    info.slots = me.slots;
                }
                info
            })
            .collect()
    }

    /// Runs `redis-cli -h 127.0.0.1 -p <port> --raw <args…>` (no `-c`: a `MOVED` or
    /// `ASK` is printed, not followed) and returns its stdout without the trailing line breaks.
    /// Error replies come back as text on stdout too (`MOVED 866 127.0.0.1:…`,
    /// `CLUSTERDOWN …`), so the result can be asserted on.
    ///
    /// # Panics
    /// When `redis-cli` cannot run, exits non-zero or takes longer than [`CLI_WAIT`]
    /// (e.g. against a frozen node).
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        cli_run(port, false, args)
    }

    /// [`cli`](Self::cli) with `-c`: redis-cli follows `MOVED` / `ASK` redirections,
    /// so a key can be written or read through any node.
    pub fn cli_cluster(&self, port: u16, args: &[&str]) -> String {
        cli_run(port, true, args)
    }

    /// [`cli`](Self::cli) on every current master, in [`master_ports`](Self::master_ports)
    /// (Self::master_ports) order.
    pub fn cli_all_masters(&self, args: &[&str]) -> Vec<String> {
        self.master_ports()
            .into_iter()
            .map(|p| self.cli(p, args))
            .collect()
    }

    /// `FLUSHALL` on every current master (the replicas follow by replication).
    ///
    /// # Panics
    /// When a master does not answer `OK`.
    pub fn flush_all(&self) {
        for p in self.master_ports() {
            match query(p, &["FLUSHALL"]) {
                Ok(Resp::Simple(s)) if s == "OK" => {}
                other => panic!("FLUSHALL on {p}: {other:?}"),
            }
        }
    }

    /// The port of the master that owns `slot` now, by the masters' own `CLUSTER NODES`
    /// lines.
    ///
    /// # Panics
    /// When no live master claims the slot.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        assert!(slot < SLOTS, "slot {slot} out of range");
        self.nodes()
            .into_iter()
            .find(|n| n.role == Role::Master && n.owns(slot))
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("no live master owns slot {slot}"))
    }

    /// The port of the master that owns `key`'s slot now.
    pub fn master_of_key(&self, key: &[u8]) -> u16 {
        self.master_of_slot(key_slot(key))
    }

    /// Manual failover of the master on `master_port`: picks one of its replicas whose
    /// link is up, sends it `CLUSTER FAILOVER` (the graceful kind: the master pauses its
    /// clients until the replica has caught up, so no acknowledged write is lost) and
    /// waits (bounded by [`CLUSTER_WAIT`]) until the replica reports itself master, the
    /// old master reports itself a replica with its link up, and the cluster has
    /// [settled](Self::settled). Returns the new master's port. `CLUSTER FAILOVER` is
    /// sent again if nothing happened after 6 s (a manual failover gives up after 5 s).
    ///
    /// # Panics
    /// When `master_port` is not a live master, has no replica with its link up, or the
    /// failover does not complete in time.
    pub fn failover(&self, master_port: u16) -> u16 {
        self.failover_as(master_port, None)
    }

    /// [`failover`](Self::failover) with a mode: `Some("FORCE")` (the replica takes
    /// over without the master's agreement: writes the master acknowledged but did not
    /// replicate yet are lost) or `Some("TAKEOVER")` (without the cluster's agreement
    /// either).
    pub fn failover_as(&self, master_port: u16, mode: Option<&str>) -> u16 {
        assert!(
            self.node(master_port).live(),
            "failover: node {master_port} is killed or frozen"
        );
        let role = role_of(master_port);
        assert!(
            matches!(role, Ok((Role::Master, _))),
            "failover: node {master_port} is not a master: {role:?}"
        );
        let replica = self
            .replicas_of(master_port)
            .into_iter()
            .find(|&p| info_field(p, "replication", "master_link_status").as_deref() == Ok("up"))
            .unwrap_or_else(|| panic!("failover: master {master_port} has no replica in sync"));
        let mut cmd = vec!["CLUSTER", "FAILOVER"];
        cmd.extend(mode);
        let send = || match query(replica, &cmd) {
            Ok(Resp::Simple(s)) if s == "OK" => {}
            other => panic!("CLUSTER FAILOVER on {replica}: {other:?}"),
        };
        send();
        let start = Instant::now();
        let mut resent = false;
        let mut last;
        loop {
            let new_role = role_of(replica);
            let old_role = role_of(master_port);
            last = match (&new_role, &old_role) {
                (Ok((Role::Master, _)), Ok((Role::Replica, Some(m)))) if *m == replica => {
                    match self.settled() {
                        Ok(()) => return replica,
                        Err(e) => e,
                    }
                }
                _ => format!(
                    "replica {replica}: {new_role:?}, old master {master_port}: {old_role:?}"
                ),
            };
            if !resent
                && start.elapsed() > Duration::from_secs(6)
                && !matches!(new_role, Ok((Role::Master, _)))
            {
                resent = true;
                send();
            }
            if start.elapsed() > CLUSTER_WAIT {
                panic!(
                    "failover of {master_port} to {replica} did not complete within {CLUSTER_WAIT:?}: {last}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the node on `port` (SIGKILL) and reaps it: its connections drop, its data
    /// is gone. For a master with a replica, the cluster fails it over by itself after
    /// about 2–4 s ([`NODE_TIMEOUT_MS`]); [`wait_settled`](Self::wait_settled) waits
    /// for that. The port may be reused by anyone afterwards.
    ///
    /// # Panics
    /// When `port` is not a node of this cluster or was killed already.
    pub fn kill(&mut self, port: u16) {
        let node = self.node_mut(port);
        assert!(node.child.is_some(), "kill: node {port} was killed already");
        node.kill();
    }

    /// Applies `fault` to master `port`, blocking until it is done (a stall for its
    /// whole length); returns the ports of the nodes still running.
    pub fn fault(&mut self, port: u16, fault: MasterFault) -> Vec<u16> {
        match fault {
            MasterFault::ForcedFailover => {
                self.failover_as(port, Some("FORCE"));
            }
            MasterFault::Kill => self.kill(port),
            MasterFault::Stall(length) => {
                self.freeze(port);
                std::thread::sleep(length);
                self.thaw(port);
            }
        }
        self.ports()
            .into_iter()
            .filter(|&p| self.pid(p).is_some())
            .collect()
    }

    /// Freezes the node on `port` (SIGSTOP): connections stay open, nothing is
    /// answered. A master frozen for longer than about [`NODE_TIMEOUT_MS`] is failed
    /// over by the cluster, and demoted to a replica when thawed.
    pub fn freeze(&self, port: u16) {
        let node = self.node(port);
        node.signal("-STOP");
        node.frozen.store(true, Ordering::SeqCst);
    }

    /// Resumes a frozen node (SIGCONT); it then answers everything queued meanwhile.
    pub fn thaw(&self, port: u16) {
        let node = self.node(port);
        node.signal("-CONT");
        node.frozen.store(false, Ordering::SeqCst);
    }

    /// Moves `slot` (and its keys) from its current owner to the master on `to_port`,
    /// the way `redis-cli --cluster reshard` does it: `CLUSTER SETSLOT <slot> IMPORTING
    /// <src-id>` on the target, `MIGRATING <dst-id>` on the source, `CLUSTER
    /// GETKEYSINSLOT` + `MIGRATE 127.0.0.1 <to_port> "" 0 5000 KEYS …` until the slot is
    /// empty on the source, then `CLUSTER SETSLOT <slot> NODE <dst-id>` on the target,
    /// the source and the other masters; then waits (bounded by [`CLUSTER_WAIT`]) until
    /// the cluster has [settled](Self::settled). A no-op when `to_port` owns it already.
    ///
    /// While it runs, clients get `ASK` redirections for keys already moved. Note that a
    /// master that loses its *last* slot becomes a replica of the target (Redis 7
    /// `cluster-allow-replica-migration yes`).
    ///
    /// # Panics
    /// When `to_port` is not a live master or any step fails or takes too long.
    pub fn migrate_slot(&self, slot: u16, to_port: u16) {
        let from = self.master_of_slot(slot);
        if from == to_port {
            return;
        }
        assert!(
            matches!(role_of(to_port), Ok((Role::Master, _))),
            "migrate_slot: target {to_port} is not a master"
        );
        let src_id = self.node_id(from);
        let dst_id = self.node_id(to_port);
        let s = slot.to_string();
        let ok = |port: u16, args: &[&str]| match query(port, args) {
            Ok(Resp::Simple(r)) if r == "OK" => {}
            other => panic!("migrate_slot {slot}: {args:?} on {port}: {other:?}"),
        };
        ok(to_port, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &src_id]);
        ok(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst_id]);
        let start = Instant::now();
        loop {
            let keys = match query(from, &["CLUSTER", "GETKEYSINSLOT", &s, "100"]) {
                Ok(Resp::Array(Some(items))) => items
                    .into_iter()
                    .map(|k| match k {
                        Resp::Bulk(Some(k)) => k,
                        other => panic!("GETKEYSINSLOT {slot}: unexpected item {other:?}"),
                    })
                    .collect::<Vec<_>>(),
                other => panic!("GETKEYSINSLOT {slot} on {from}: {other:?}"),
            };
            if keys.is_empty() {
                break;
            }
            let port = to_port.to_string();
            let mut args: Vec<&[u8]> = vec![
                b"MIGRATE",
                b"127.0.0.1",
                port.as_bytes(),
                b"",
                b"0",
                b"5000",
                b"KEYS",
            ];
            args.extend(keys.iter().map(Vec::as_slice));
            match query_bytes(from, &args, Duration::from_secs(10)) {
                Ok(Resp::Simple(r)) if r == "OK" || r == "NOKEY" => {}
                other => panic!("MIGRATE of slot {slot} from {from} to {to_port}: {other:?}"),
            }
            assert!(
                start.elapsed() < CLUSTER_WAIT,
                "migrate_slot {slot}: keys still left after {CLUSTER_WAIT:?}"
            );
        }
        ok(to_port, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
        ok(from, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
        for p in self.master_ports() {
            if p != from && p != to_port {
                ok(p, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
            }
        }
        self.wait_settled(CLUSTER_WAIT);
        let owner = self.master_of_slot(slot);
        assert_eq!(
            owner, to_port,
            "migrate_slot {slot}: owner is {owner}, not {to_port}"
        );
    }

    /// `calls` per command (lower-case names as `INFO commandstats` gives them, e.g.
    /// `get`, `evalsha`, `cluster|slots`), summed over every live node, sorted by name.
    ///
    /// Replicas count the writes they apply from their master as calls too, and the
    /// harness's own commands (`info`, `cluster|nodes`, `role`, `ping`, `config|…`)
    /// show up; see [`master_command_calls`](Self::master_command_calls) for what
    /// clients sent to the masters.
    pub fn command_calls(&self) -> Vec<(String, u64)> {
        let ports: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.live())
            .map(|n| n.port)
            .collect();
        sum_command_calls(&ports)
    }

    /// [`command_calls`](Self::command_calls) over the current masters only.
    pub fn master_command_calls(&self) -> Vec<(String, u64)> {
        sum_command_calls(&self.master_ports())
    }

    /// The summed `calls` of one command (e.g. `"evalsha"`) over every live node.
    pub fn calls_of(&self, command: &str) -> u64 {
        self.command_calls()
            .into_iter()
            .find(|(c, _)| c == command)
            .map_or(0, |(_, n)| n)
    }

    /// `CONFIG RESETSTAT` on every live node.
    ///
    /// # Panics
    /// When a node does not answer `OK`.
    pub fn reset_stats(&self) {
        for n in self.nodes.iter().filter(|n| n.live()) {
            match query(n.port, &["CONFIG", "RESETSTAT"]) {
                Ok(Resp::Simple(s)) if s == "OK" => {}
                other => panic!("CONFIG RESETSTAT on {}: {other:?}", n.port),
            }
        }
    }

    /// `(total keys, keys without expiry)` summed over the current masters, from
    /// `INFO keyspace` (`db0:keys=…,expires=…`).
    pub fn key_counts(&self) -> (u64, u64) {
        let mut keys = 0;
        let mut expires = 0;
        for p in self.master_ports() {
            let info = text(p, &["INFO", "keyspace"])
                .unwrap_or_else(|e| panic!("INFO keyspace on {p}: {e}"));
            let (k, e) = parse_keyspace(&info);
            keys += k;
            expires += e;
        }
        (keys, keys - expires)
    }

    /// Whether the cluster has settled now, or why not. Settled means, over the live
    /// nodes (running, not frozen): each answers with `cluster_state:ok` and
    /// `cluster_slots_assigned:16384`; each one's `CLUSTER NODES` lists every live node
    /// once, none flagged `fail`/`fail?`/`handshake`/`noaddr`, and all of them agree on
    /// roles, masters and slot ownership; the live masters together own all 16384 slots
    /// (so no slot is left with a dead owner); every live replica has
    /// `master_link_status:up`.
    pub fn settled(&self) -> Result<(), String> {
        let live: Vec<&Node> = self.nodes.iter().filter(|n| n.live()).collect();
        let live_ports: BTreeSet<u16> = live.iter().map(|n| n.port).collect();
        let mut first: Option<(u16, View)> = None;
        for n in &live {
            let p = n.port;
            let info = text(p, &["CLUSTER", "INFO"]).map_err(|e| format!("node {p}: {e}"))?;
            let state = field(&info, "cluster_state").unwrap_or_default();
            if state != "ok" {
                return Err(format!("node {p}: cluster_state:{state}"));
            }
            let assigned = field(&info, "cluster_slots_assigned").unwrap_or_default();
            if assigned != "16384" {
                return Err(format!("node {p}: cluster_slots_assigned:{assigned}"));
            }
            let nodes_text =
                text(p, &["CLUSTER", "NODES"]).map_err(|e| format!("node {p}: {e}"))?;
            let view = view_of(&nodes_text, &live_ports).map_err(|e| format!("node {p}: {e}"))?;
            let covered: usize = view
                .values()
                .filter(|v| v.0 == Role::Master)
                .flat_map(|v| v.2.iter())
                .map(|&(a, b)| usize::from(b - a) + 1)
                .sum();
            if covered != usize::from(SLOTS) {
                return Err(format!(
                    "node {p}: live masters own {covered} slots, not 16384: {view:?}"
                ));
            }
            match &first {
                None => first = Some((p, view.clone())),
                Some((q, v)) if *v != view => {
                    return Err(format!("views differ: node {q}: {v:?}; node {p}: {view:?}"));
                }
                Some(_) => {}
            }
            let (role, _) = role_of(p).map_err(|e| format!("node {p}: ROLE: {e}"))?;
            if view.get(&p).map(|v| v.0) != Some(role) {
                return Err(format!(
                    "node {p}: ROLE {role:?} but CLUSTER NODES {:?}",
                    view.get(&p)
                ));
            }
            if role == Role::Replica {
                let link = info_field(p, "replication", "master_link_status")
                    .map_err(|e| format!("node {p}: {e}"))?;
                if link != "up" {
                    return Err(format!("replica {p}: master_link_status:{link}"));
                }
            }
        }
        if live.is_empty() {
            return Err("no live node".into());
        }
        Ok(())
    }

    /// Waits until [`settled`](Self::settled) holds, at most `limit`; returns the last
    /// reason on timeout.
    pub fn try_wait_settled(&self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let err = match self.settled() {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if start.elapsed() > limit {
                return Err(format!("not settled after {limit:?}: {err}"));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// [`try_wait_settled`](Self::try_wait_settled), panicking on timeout (e.g. after a
    /// [`kill`](Self::kill) of a master, to wait for its replica to take over).
    pub fn wait_settled(&self, limit: Duration) {
        if let Err(e) = self.try_wait_settled(limit) {
            panic!("{e}");
        }
    }
}

/// One node's view of the live nodes: port → (role, master port, slot ranges).
type View = BTreeMap<u16, (Role, Option<u16>, Vec<(u16, u16)>)>;

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
struct Entry {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: Option<String>,
    /// Owned slots, inclusive ranges; `[slot->-id]` / `[slot-<-id]` migration markers
    /// are left out.
    slots: Vec<(u16, u16)>,
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport[,host]> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>…`.
fn parse_cluster_nodes(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| {
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.len() < 8 {
                return None;
            }
            let addr = t[1].split(['@', ',']).next()?;
            let port = addr.rsplit(':').next()?.parse().ok()?;
            let slots = t[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(Entry {
                id: t[0].to_owned(),
                port,
                flags: t[2].split(',').map(str::to_owned).collect(),
                master_id: (t[3] != "-").then(|| t[3].to_owned()),
                slots,
            })
        })
        .collect()
}

/// A node's view (from its `CLUSTER NODES` text) restricted to the live ports, after
/// checking that it lists each live node once and flags none of them.
fn view_of(nodes_text: &str, live: &BTreeSet<u16>) -> Result<View, String> {
    let entries = parse_cluster_nodes(nodes_text);
    let port_of: BTreeMap<&str, u16> = entries.iter().map(|e| (e.id.as_str(), e.port)).collect();
    let mut view = View::new();
    for e in &entries {
        if e.flags.iter().any(|f| f == "handshake" || f == "noaddr") {
            return Err(format!("node {} is flagged {:?}", e.port, e.flags));
        }
        if !live.contains(&e.port) {
            continue;
        }
        if e.flags.iter().any(|f| f == "fail" || f == "fail?") {
            return Err(format!("live node {} is flagged {:?}", e.port, e.flags));
        }
        let role = if e.flags.iter().any(|f| f == "master") {
            Role::Master
        } else if e.flags.iter().any(|f| f == "slave") {
            Role::Replica
        } else {
            return Err(format!("node {} has neither master nor slave flag", e.port));
        };
        let master = e
            .master_id
            .as_deref()
            .and_then(|id| port_of.get(id).copied());
        if view
            .insert(e.port, (role, master, e.slots.clone()))
            .is_some()
        {
            return Err(format!("node {} is listed twice", e.port));
        }
    }
    if view.len() != live.len() {
        return Err(format!(
            "lists {} of the {} live nodes",
            view.len(),
            live.len()
        ));
    }
    Ok(view)
}

/// `INFO keyspace` → (keys, expires) summed over all `dbN:` lines.
fn parse_keyspace(info: &str) -> (u64, u64) {
    let mut keys = 0;
    let mut expires = 0;
    for line in info.lines() {
        let Some((db, stats)) = line.split_once(':') else {
            continue;
        };
        if !db.starts_with("db") {
            continue;
        }
        for kv in stats.split(',') {
            match kv.split_once('=') {
                Some(("keys", n)) => keys += n.trim().parse::<u64>().unwrap_or(0),
                Some(("expires", n)) => expires += n.trim().parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
    }
    (keys, expires)
}

/// `INFO commandstats` → `(command, calls)` per `cmdstat_<name>:calls=…,…` line.
fn parse_command_calls(info: &str) -> Vec<(String, u64)> {
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls")?.strip_prefix('='))?
                .trim()
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

fn sum_command_calls(ports: &[u16]) -> Vec<(String, u64)> {
    let mut sum = BTreeMap::<String, u64>::new();
    for &p in ports {
        let info = text(p, &["INFO", "commandstats"])
            .unwrap_or_else(|e| panic!("INFO commandstats on {p}: {e}"));
        for (name, calls) in parse_command_calls(&info) {
            *sum.entry(name).or_default() += calls;
        }
    }
    sum.into_iter().collect()
}

/// `name:value` of an INFO-style text.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then(|| v.trim().to_owned())
    })
}

/// One field of `INFO <section>` on `port`.
fn info_field(port: u16, section: &str, name: &str) -> Result<String, String> {
    let info = text(port, &["INFO", section])?;
    field(&info, name).ok_or_else(|| format!("INFO {section} has no {name}"))
}

/// `ROLE` on `port` → (role, master port for a replica).
fn role_of(port: u16) -> Result<(Role, Option<u16>), String> {
    match query(port, &["ROLE"])? {
        Resp::Array(Some(items)) => match items.first() {
            Some(Resp::Bulk(Some(r))) if r == b"master" => Ok((Role::Master, None)),
            Some(Resp::Bulk(Some(r))) if r == b"slave" => match items.get(2) {
                Some(Resp::Int(p)) => Ok((Role::Replica, u16::try_from(*p).ok())),
                other => Err(format!("ROLE: no master port: {other:?}")),
            },
            other => Err(format!("ROLE: unexpected {other:?}")),
        },
        other => Err(format!("ROLE: unexpected {other:?}")),
    }
}

/// The pid of the redis-server answering on `port` (from `INFO server`), to tell our
/// server from another test's that happens to hold the same port.
fn server_pid(port: u16) -> Option<u32> {
    field(&text(port, &["INFO", "server"]).ok()?, "process_id")?
        .parse()
        .ok()
}

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

/// A fault a test applies to one master ([`RedisCluster::fault`]).
#[derive(Clone, Copy, Debug)]
pub enum MasterFault {
    /// `CLUSTER FAILOVER FORCE` on one of its replicas.
    ForcedFailover,
    /// SIGKILL.
    Kill,
    /// SIGSTOP for this long, then SIGCONT (past the node timeout, the Cluster fails
    /// it over and it comes back as a replica).
    Stall(Duration),
}

/// Waits until the Cluster is ok again after a fault on the shard of `probe_slot` (T5's
/// "the Cluster is ok again"): every node in `live` says `cluster_state:ok`, and the
/// shard's master — the live node that says `role:master` and whose own `CLUSTER NODES`
/// line owns the slot — reports its replicas, at least one, `online` in `INFO
/// replication`. Returns that master's port. Polls every 20 ms (each reply within
/// [`REPLY_WAIT`]), blocking, up to `limit`; panics with the last reason after that.
pub fn ok_again(live: &[u16], probe_slot: u16, limit: Duration) -> u16 {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        assert!(
            start.elapsed() < limit,
            "the Cluster was not ok again within {limit:?}: {last}"
        );
        match shard_ok(live, probe_slot) {
            Ok(master) => return master,
            Err(why) => last = why,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One look of [`ok_again`]: the shard's master, or why the Cluster is not ok yet.
fn shard_ok(live: &[u16], probe_slot: u16) -> Result<u16, String> {
    for &p in live {
        let info = text(p, &["CLUSTER", "INFO"]).unwrap_or_default();
        if !info.contains("cluster_state:ok") {
            return Err(format!("node {p}: not cluster_state:ok"));
        }
    }
    for &p in live {
        let repl = text(p, &["INFO", "replication"]).unwrap_or_default();
        if !repl.contains("role:master") {
            continue;
        }
        let nodes = text(p, &["CLUSTER", "NODES"]).unwrap_or_default();
        let owns = parse_cluster_nodes(&nodes)
            .into_iter()
            .find(|e| e.flags.iter().any(|f| f == "myself"))
            .is_some_and(|e| {
                e.slots
                    .iter()
                    .any(|&(a, b)| a <= probe_slot && probe_slot <= b)
            });
        if !owns {
            continue;
        }
        let replicas: Vec<&str> = repl
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("ip="))
            .collect();
        if !replicas.is_empty() && replicas.iter().all(|l| l.contains("state=online")) {
            return Ok(p);
        }
        return Err(format!("master {p}: replicas {replicas:?}"));
    }
    Err(format!("no live master owns slot {probe_slot}"))
}

/// Sends one command on a fresh connection and reads the whole reply, within
/// [`REPLY_WAIT`].
fn query(port: u16, args: &[&str]) -> Result<Resp, String> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    query_bytes(port, &args, REPLY_WAIT)
}

/// [`query`] with binary arguments and a chosen time limit (per connect, write and
/// read).
fn query_bytes(port: u16, args: &[&[u8]], limit: Duration) -> Result<Resp, String> {
    let mut replies = pipeline(port, &[args], limit)?;
    Ok(replies.remove(0))
}

/// Sends `commands` on one fresh connection, one after the other without waiting, and
/// reads a reply for each, within `limit` (per connect, write and read).
fn pipeline(port: u16, commands: &[&[&[u8]]], limit: Duration) -> Result<Vec<Resp>, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let c = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("connect {port}: {e}"))?;
    c.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    c.set_write_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    let mut req = Vec::new();
    for args in commands {
        req.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in *args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
    }
    (&c).write_all(&req)
        .map_err(|e| format!("write {port}: {e}"))?;
    let mut r = BufReader::new(c);
    commands
        .iter()
        .map(|_| read_resp(&mut r).map_err(|e| format!("reply from {port}: {e}")))
        .collect()
}

/// How many replicas acknowledged a write of `key` on the master at `port` within
/// `wait_ms` (`SET` then `WAIT replicas wait_ms` on one connection); the key is
/// deleted again.
pub fn acknowledged(port: u16, key: &str, replicas: u32, wait_ms: u64) -> Result<i64, String> {
    let (n, wait) = (replicas.to_string(), wait_ms.to_string());
    let set: &[&[u8]] = &[b"SET", key.as_bytes(), b"1"];
    let wait: &[&[u8]] = &[b"WAIT", n.as_bytes(), wait.as_bytes()];
    let del: &[&[u8]] = &[b"DEL", key.as_bytes()];
    let replies = pipeline(
        port,
        &[set, wait, del],
        REPLY_WAIT + Duration::from_millis(wait_ms),
    )?;
    match &replies[1] {
        Resp::Int(acks) => Ok(*acks),
        other => Err(format!("WAIT on {port}: {other:?} (SET: {:?})", replies[0])),
    }
}

/// Waits (for `limit` at most) until the master at `master` acknowledges a write in
/// slot `slot` with `replicas` replicas: a replica whose link is up (`online`, which
/// [`ok_again`] waits for) acknowledges writes only some 0.3–0.5 s later, and a run
/// that writes with `replica_acks` must not start before.
pub fn acknowledging(master: u16, slot: u16, replicas: u32, limit: Duration) {
    let key = (0u64..)
        .map(|i| format!("acknowledging-probe-{i}"))
        .find(|k| key_slot(k.as_bytes()) == slot)
        .expect("a key in every slot");
    let start = Instant::now();
    loop {
        let got = acknowledged(master, &key, replicas, 100);
        if matches!(got, Ok(n) if n >= i64::from(replicas)) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "master {master} did not get {replicas} replica acknowledgement(s) within \
             {limit:?}: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_resp(r: &mut BufReader<TcpStream>) -> Result<Resp, String> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
    if line.is_empty() {
        return Err("connection closed".into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(format!(
            "truncated line {:?}",
            String::from_utf8_lossy(&line)
        ));
    }
    line.truncate(line.len() - 2);
    let rest = String::from_utf8_lossy(&line[1..]).into_owned();
    let int = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| format!("bad length/integer {s:?}"))
    };
    match line[0] {
        b'+' => Ok(Resp::Simple(rest)),
        b'-' => Ok(Resp::Error(rest)),
        b':' => Ok(Resp::Int(int(&rest)?)),
        b'$' => {
            let n = int(&rest)?;
            if n < 0 {
                return Ok(Resp::Bulk(None));
            }
            let mut buf = vec![0; n as usize + 2];
            r.read_exact(&mut buf).map_err(|e| e.to_string())?;
            buf.truncate(n as usize);
            Ok(Resp::Bulk(Some(buf)))
        }
        b'*' => {
            let n = int(&rest)?;
            if n < 0 {
                return Ok(Resp::Array(None));
            }
            let items = (0..n).map(|_| read_resp(r)).collect::<Result<_, _>>()?;
            Ok(Resp::Array(Some(items)))
        }
        other => Err(format!("unexpected reply type {:?}", other as char)),
    }
}

/// A bulk or simple-string reply as text; an error reply or anything else is an `Err`.
fn text(port: u16, args: &[&str]) -> Result<String, String> {
    match query(port, args)? {
        Resp::Bulk(Some(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Resp::Simple(s) => Ok(s),
        other => Err(format!("{args:?}: {other:?}")),
    }
}

fn cli_run(port: u16, follow: bool, args: &[&str]) -> String {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "--raw"]);
    if follow {
        cmd.arg("-c");
    }
    cmd.args(args);
    match run_bounded(&mut cmd, CLI_WAIT) {
        Ok((status, out, _)) if status.success() => out.trim_end_matches(['\r', '\n']).to_owned(),
        Ok((status, out, err)) => {
            panic!("redis-cli -p {port} {args:?} exited with {status}: {out}{err}")
        }
        Err(e) => panic!("redis-cli -p {port} {args:?}: {e}"),
    }
}

/// Runs `cmd` (stdin closed) and collects stdout and stderr; kills it after `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<(ExitStatus, String, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {:?} ({e}): {INSTALL_HINT}", cmd.get_program()))?;
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped stdout")));
    let err = reader(Box::new(child.stderr.take().expect("piped stderr")));
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(format!("wait: {e}")),
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let out = out.join().unwrap_or_default();
            return Err(format!(
                "no exit within {limit:?}; output: {}",
                tail(&out, 8)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok((
        status,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    ))
}

/// The last `n` lines of `s`, joined with ` | `.
fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_and_key_slot_known_values() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b""), 0);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"{unclosed"), crc16(b"{unclosed") % SLOTS);
    }

    #[test]
    fn parsers() {
        let nodes = "07c3 127.0.0.1:30004@31004,host slave e7d1 0 1426238317239 4 connected\n\
                     e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 7000 [5461->-07c3]\n";
        let e = parse_cluster_nodes(nodes);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].port, 30004);
        assert_eq!(e[0].master_id.as_deref(), Some("e7d1"));
        assert_eq!(e[1].slots, vec![(0, 5460), (7000, 7000)]);
        let live: BTreeSet<u16> = [30001, 30004].into();
        let v = view_of(nodes, &live).unwrap();
        assert_eq!(v[&30004], (Role::Replica, Some(30001), vec![]));
        assert_eq!(
            parse_keyspace(
                "# Keyspace\r\ndb0:keys=5,expires=2,avg_ttl=100\r\ndb1:keys=1,expires=0,avg_ttl=0\r\n"
            ),
            (6, 2)
        );
        assert_eq!(
            parse_command_calls(
                "# Commandstats\r\ncmdstat_get:calls=3,usec=5,usec_per_call=1.67\r\ncmdstat_cluster|nodes:calls=2,usec=1\r\n"
            ),
            vec![("get".to_owned(), 3), ("cluster|nodes".to_owned(), 2)]
        );
    }

    fn slot_of_key_on_server(port: u16, key: &[u8]) -> u16 {
        match query_bytes(port, &[b"CLUSTER", b"KEYSLOT", key], REPLY_WAIT) {
            Ok(Resp::Int(n)) => n as u16,
            other => panic!("CLUSTER KEYSLOT {key:?}: {other:?}"),
        }
    }

    fn proc_is_redis(pid: u32) -> bool {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("redis-server"))
    }

    #[test]
    fn cluster_end_to_end() {
        let t = Instant::now();
        let mut c = RedisCluster::start(3, 1);
        eprintln!("start(3, 1): {:?}", t.elapsed());

        // Topology.
        let nodes = c.nodes();
        assert_eq!(nodes.len(), 6);
        let masters: Vec<&NodeInfo> = nodes.iter().filter(|n| n.role == Role::Master).collect();
        assert_eq!(masters.len(), 3, "{nodes:?}");
        assert_eq!(masters.iter().map(|m| m.slot_count()).sum::<usize>(), 16384);
        for r in nodes.iter().filter(|n| n.role == Role::Replica) {
            let m = r.master_port.expect("replica has a master");
            assert!(masters.iter().any(|x| x.port == m), "{r:?}");
        }
        assert!(nodes.iter().all(|n| n.pid.is_some() && n.id.len() == 40));
        assert_eq!(c.urls().len(), 3);
        assert_eq!(c.seed_url(), c.urls()[0]);
        assert_eq!(c.comma_urls(), c.urls().join(","));
        assert!(c.seed_url().starts_with("redis://127.0.0.1:"));
        let dirs: Vec<PathBuf> = c.nodes.iter().map(|n| n.dir.clone()).collect();
        assert!(dirs.iter().all(|d| d.join("nodes.conf").exists()));

        // key_slot against the server.
        let keys: [&[u8]; 9] = [
            b"foo",
            b"portcullis:rl:tenant-a",
            b"{tenant-a}:tokens",
            b"{tenant-a}:requests",
            b"a{}{b}",
            b"x{{y}}z",
            b"{}",
            b"",
            b"\xff\x00{\x01}",
        ];
        let p0 = c.ports()[0];
        for k in keys {
            assert_eq!(key_slot(k), slot_of_key_on_server(p0, k), "key {k:?}");
        }

        // A key written through any node with -c lands on its slot's owner.
        let key = "{tg}:k1";
        let slot = key_slot(key.as_bytes());
        assert_eq!(c.cli_cluster(p0, &["SET", key, "v1"]), "OK");
        assert_eq!(
            c.cli_cluster(p0, &["SET", "{tg}:ttl", "v2", "EX", "100"]),
            "OK"
        );
        let owner = c.master_of_slot(slot);
        assert_eq!(c.master_of_key(key.as_bytes()), owner);
        assert_eq!(c.cli(owner, &["GET", key]), "v1");
        let other = c.master_ports().into_iter().find(|&p| p != owner).unwrap();
        assert!(
            c.cli(other, &["GET", key]).starts_with("MOVED "),
            "no -c: MOVED is printed"
        );
        assert_eq!(c.key_counts(), (2, 1));

        // Stats.
        c.reset_stats();
        for _ in 0..3 {
            c.cli(owner, &["GET", key]);
        }
        assert_eq!(c.calls_of("get"), 3, "{:?}", c.command_calls());
        assert!(c.master_command_calls().contains(&("get".to_owned(), 3)));
        let echoes = c.cli_all_masters(&["ECHO", "hi"]);
        assert_eq!(echoes, vec!["hi"; 3]);

        // Manual failover: the replica takes over, the key survives.
        let t = Instant::now();
        let new_owner = c.failover(owner);
        eprintln!("failover({owner}) -> {new_owner}: {:?}", t.elapsed());
        assert_ne!(new_owner, owner);
        assert_eq!(c.master_of_slot(slot), new_owner);
        assert_eq!(role_of(owner).unwrap(), (Role::Replica, Some(new_owner)));
        assert_eq!(c.cli(new_owner, &["GET", key]), "v1");
        assert_eq!(c.cli_cluster(other, &["GET", key]), "v1");
        assert!(c.master_ports().contains(&new_owner) && !c.master_ports().contains(&owner));
        assert_eq!(c.key_counts(), (2, 1));

        // Migrate the key's slot to another master.
        let t = Instant::now();
        c.migrate_slot(slot, other);
        eprintln!("migrate_slot({slot}, {other}): {:?}", t.elapsed());
        assert_eq!(c.master_of_slot(slot), other);
        assert_eq!(c.cli(other, &["GET", key]), "v1");
        assert!(c.cli(other, &["TTL", "{tg}:ttl"]).parse::<i64>().unwrap() > 0);
        assert!(c.cli(new_owner, &["GET", key]).starts_with("MOVED "));
        assert_eq!(c.key_counts(), (2, 1));
        assert!(c.nodes().iter().any(|n| n.port == other && n.owns(slot)));

        // Freeze / thaw a replica briefly (shorter than the node timeout).
        let replica = c.replicas_of(other)[0];
        c.freeze(replica);
        assert!(query(replica, &["PING"]).is_err(), "frozen node answered");
        assert_eq!(
            c.nodes().iter().find(|n| n.port == replica).unwrap().role,
            Role::Down
        );
        c.thaw(replica);
        assert_eq!(query(replica, &["PING"]), Ok(Resp::Simple("PONG".into())));
        c.wait_settled(CLUSTER_WAIT);

        // Kill a master: its replica is promoted by the cluster itself.
        let victim = c.master_of_slot(slot);
        let heir = c.replicas_of(victim)[0];
        let t = Instant::now();
        c.kill(victim);
        c.wait_settled(CLUSTER_WAIT);
        eprintln!(
            "kill({victim}) -> {heir} promoted and settled: {:?}",
            t.elapsed()
        );
        assert_eq!(c.master_of_slot(slot), heir);
        assert_eq!(c.cli(heir, &["GET", key]), "v1");
        assert_eq!(c.pid(victim), None);
        assert_eq!(
            c.nodes().iter().find(|n| n.port == victim).unwrap().role,
            Role::Down
        );

        // Flush.
        c.flush_all();
        assert_eq!(c.key_counts(), (0, 0));
        assert_eq!(c.cli(heir, &["GET", key]), "");

        // Drop kills everything and removes the dirs.
        let pids: Vec<u32> = c.nodes().iter().filter_map(|n| n.pid).collect();
        assert_eq!(pids.len(), 5);
        assert!(pids.iter().all(|&p| proc_is_redis(p)));
        drop(c);
        for p in pids {
            assert!(!proc_is_redis(p), "redis-server {p} still runs after drop");
        }
        for d in dirs {
            assert!(!d.exists(), "{} left behind", d.display());
        }
    }

    #[test]
    fn parallel_clusters_do_not_collide() {
        let t = Instant::now();
        let handles: Vec<_> = (0..3)
            .map(|_| std::thread::spawn(|| RedisCluster::start(3, 0)))
            .collect();
        let clusters: Vec<RedisCluster> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        eprintln!("3 parallel start(3, 0): {:?}", t.elapsed());
        let mut ports = BTreeSet::new();
        for c in &clusters {
            assert!(c.settled().is_ok());
            for p in c.ports() {
                assert!(ports.insert(p), "port {p} in two clusters");
            }
            // Each node is its own process.
            for n in c.nodes() {
                assert_eq!(server_pid(n.port), n.pid);
            }
        }
        let err = RedisCluster::try_start(2, 0)
            .err()
            .expect("2 masters refused");
        assert!(err.contains("at least 3 masters"), "{err}");
    }
}
