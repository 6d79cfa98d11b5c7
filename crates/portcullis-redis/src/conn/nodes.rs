//! A Cluster's slot owners and the liveness and breaker of each node (D6, T5).

use super::route::Links;
use super::{Breaker, Liveness};
use redis::Value;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::Duration;

/// Hash slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// Most Cluster nodes whose liveness is told apart; nodes beyond share one entry.
const MAX_NODES: usize = 255;
/// Entries of per-node state: one per node, and entry 0 for "owner unknown".
pub(crate) const NODE_ENTRIES: usize = MAX_NODES + 1;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16/XMODEM of the key, or of
/// its hash tag (the text between the first `{` and the next `}`, when not empty).
pub(crate) fn hash_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS as u16
}

/// Which node owns each hash slot (as last read from `CLUSTER SLOTS`), and one
/// [`Liveness`] per node: on a Cluster, a node that is stalled must fail its own calls
/// at the deadline even while the other nodes answer theirs (T5), and a node that is
/// busy must not fail its calls because it was quiet for a while on some slot. Entry 0
/// stands for "owner unknown" (before the first read, or past [`MAX_NODES`]).
pub(crate) struct Nodes {
    owner: Box<[AtomicU16]>,
    /// Per slot: when its owner last changed (a failover, a reshard), in ms since
    /// `origin` (0 = never seen to change): writes the old owner had not replicated may
    /// be lost, so a lease renewed soon after is restored if it is gone (D10).
    moved: Box<[AtomicU64]>,
    origin: std::time::Instant,
    names: Mutex<Vec<String>>,
    live: Box<[Liveness]>,
    breakers: Box<[Breaker]>,
}

impl Nodes {
    /// The nodes of a Cluster whose calls have `deadline`.
    pub(crate) fn new(deadline: Duration) -> Self {
        Self {
            owner: (0..SLOTS).map(|_| AtomicU16::new(0)).collect(),
            moved: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            origin: std::time::Instant::now(),
            names: Mutex::new(Vec::new()),
            live: (0..=MAX_NODES).map(|_| Liveness::new()).collect(),
            breakers: (0..=MAX_NODES).map(|_| Breaker::new(deadline)).collect(),
        }
    }

    /// The index (entry) of the node that owns `key`'s slot.
    pub(crate) fn node_of(&self, key: &[u8]) -> usize {
        usize::from(self.owner[usize::from(hash_slot(key))].load(Ordering::Relaxed))
    }

    /// The liveness of node entry `node` (see [`node_of`](Self::node_of)).
    pub(crate) fn live(&self, node: usize) -> &Liveness {
        &self.live[node.min(MAX_NODES)]
    }

    /// The name (`host:port`) of node entry `node`; `None` for "owner unknown".
    pub(crate) fn name(&self, node: usize) -> Option<String> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        node.checked_sub(1).and_then(|i| names.get(i).cloned())
    }

    /// The breaker of node entry `node`: one node down fails its own calls fast, not
    /// every node's.
    pub(crate) fn breaker(&self, node: usize) -> &Breaker {
        &self.breakers[node.min(MAX_NODES)]
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// True when the owner of `key`'s slot changed within the last `window`.
    pub(crate) fn moved_within(&self, key: &[u8], window: Duration) -> bool {
        let at = self.moved[usize::from(hash_slot(key))].load(Ordering::Relaxed);
        at != 0
            && self.now_ms().saturating_sub(at)
                <= u64::try_from(window.as_millis()).unwrap_or(u64::MAX)
    }

    /// Index (≥ 1) of the node `name` (`host:port`), 0 past [`MAX_NODES`].
    fn index(&self, name: &str) -> u16 {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = names.iter().position(|n| n == name) {
            return (i + 1) as u16;
        }
        if names.len() >= MAX_NODES {
            return 0;
        }
        names.push(name.to_owned());
        names.len() as u16
    }

    /// The `host:port` of the node that owns `slot`, if known.
    pub(crate) fn owner_addr(&self, slot: u16) -> Option<String> {
        let node = self.owner[usize::from(slot) % SLOTS].load(Ordering::Relaxed);
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.get(usize::from(node).checked_sub(1)?).cloned()
    }

    /// A `MOVED` named `name` (`host:port`) the owner of `slot`.
    pub(crate) fn set_owner(&self, slot: u16, name: &str) {
        let node = self.index(name);
        self.take(usize::from(slot) % SLOTS, node, self.now_ms().max(1));
    }

    /// Every node that owns a slot now (`host:port`).
    pub(crate) fn masters(&self) -> Vec<String> {
        let mut seen = [false; MAX_NODES + 1];
        for o in self.owner.iter() {
            seen[usize::from(o.load(Ordering::Relaxed))] = true;
        }
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names
            .iter()
            .enumerate()
            .filter(|(i, _)| seen[i + 1])
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// `slot` is owned by `node` from now on (`now` ms since `origin`).
    fn take(&self, slot: usize, node: u16, now: u64) {
        let was = self.owner[slot].swap(node, Ordering::Relaxed);
        if was != 0 && was != node {
            self.moved[slot].store(now, Ordering::Relaxed);
        }
    }

    /// Takes the slot owners from a `CLUSTER SLOTS` reply; returns how many ranges it
    /// read.
    pub(crate) fn update(&self, reply: &Value) -> usize {
        let Value::Array(ranges) = reply else {
            return 0;
        };
        let mut read = 0;
        for r in ranges {
            let Value::Array(r) = r else { continue };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (r.first(), r.get(1), r.get(2))
            else {
                continue;
            };
            let host = match master.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                continue;
            };
            let node = self.index(&format!("{host}:{port}"));
            let last = SLOTS as i64 - 1;
            let now = self.now_ms().max(1);
            for slot in (*start).clamp(0, last)..=(*end).clamp(0, last) {
                self.take(slot as usize, node, now);
            }
            read += 1;
        }
        read
    }
}

/// Keeps the Cluster's slot owners up to date: reads `CLUSTER SLOTS` now, then every
/// `every` — and at once when a call sees a `MOVED` or a node's connection break, [`MIN_GAP`]
/// after the last read at the soonest — until the store is dropped (the task holds a
/// weak reference only). Each read asks every known master at once and takes the first
/// answer within `limit`: a stalled or dead node delays no read.
pub(crate) fn watch_topology(links: std::sync::Weak<Links>, every: Duration, limit: Duration) {
    tokio::spawn(async move {
        loop {
            let Some(l) = links.upgrade() else { return };
            if let Some(reply) = l.read_slots(limit).await {
                l.nodes().update(&reply);
            }
            drop(l);
            tokio::time::sleep(MIN_GAP).await;
            let Some(l) = links.upgrade() else { return };
            // Holds a strong reference while it waits: at most `every`.
            l.until_reread(every).await;
        }
    });
}

/// The shortest gap between two reads of the slot owners.
const MIN_GAP: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d3_hash_slots_follow_the_cluster_rules() {
        // Values from CLUSTER KEYSLOT on redis-server 7.
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"portcullis:{k}:slots"), hash_slot(b"k"));
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(
            hash_slot(b"a{}b"),
            crc16::State::<crc16::XMODEM>::calculate(b"a{}b") % 16384
        );
    }

    #[test]
    fn d6_slot_owners_are_read_from_cluster_slots() {
        let nodes = Nodes::new(Duration::from_millis(20));
        let master = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |a: i64, b: i64, port: i64| {
            Value::Array(vec![Value::Int(a), Value::Int(b), master(port)])
        };
        let key_in = |lo: u16, hi: u16| {
            (0..)
                .map(|i| format!("k{i}"))
                .find(|k| (lo..=hi).contains(&hash_slot(k.as_bytes())))
                .unwrap()
        };
        let (low, high) = (key_in(0, 8191), key_in(8192, 16383));
        // A node's entry holds its liveness and breaker.
        assert!(std::ptr::eq(nodes.live(2), &nodes.live[2]));
        assert!(std::ptr::eq(nodes.breaker(2), &nodes.breakers[2]));
        assert!(std::ptr::eq(nodes.live(usize::MAX), &nodes.live[MAX_NODES]));
        // Before the first read every key shares the "unknown" entry.
        assert_eq!(nodes.node_of(low.as_bytes()), 0);
        let reply = Value::Array(vec![range(0, 8191, 7001), range(8192, 16383, 7002)]);
        assert_eq!(nodes.update(&reply), 2);
        assert_eq!(nodes.node_of(low.as_bytes()), 1);
        assert_eq!(nodes.node_of(high.as_bytes()), 2);
        assert!(!nodes.moved_within(low.as_bytes(), Duration::from_secs(60)));
        // A failover moves the range to another node.
        nodes.update(&Value::Array(vec![
            range(0, 8191, 7001),
            range(8192, 16383, 7003),
        ]));
        assert_eq!(nodes.node_of(high.as_bytes()), 3);
        assert!(nodes.moved_within(high.as_bytes(), Duration::from_secs(60)));
        assert!(
            !nodes.moved_within(low.as_bytes(), Duration::from_secs(60)),
            "only the slots whose owner changed"
        );
        nodes.update(&Value::Array(vec![range(0, 16383, 7003)]));
        assert_eq!(nodes.node_of(low.as_bytes()), 3);
        assert_eq!(nodes.node_of(high.as_bytes()), 3);
    }
}
