//! Cooldowns shared by every gateway instance (D1, F6): a provider's Retry-After,
//! a "remaining: 0" header or a disabled credential seen by one instance stops sends on
//! that scope from all of them.
//!
//! Cooldowns are read on every request, so each instance keeps its own table (the
//! [`UpstreamRegistry`]'s) and the instances tell each other of changes over Redis
//! pub/sub instead of paying a round trip per decision: a change made here is
//! published (off the request path, through a channel to a publishing task), and
//! changes published by the others are applied as they arrive. Messages carry
//! durations, not instants, so instances whose clocks disagree still agree on how long
//! a scope rests. Delivery is best effort: a change made while the link is down is
//! not replayed, and the scope's own provider answers will cool it again.
//!
//! Message: `<instance id>\n<C remaining ms | D | X>\n<scope key>`.

use portcullis_core::upstream::{CooldownChange, UpstreamRegistry};
use portcullis_core::{Clock, SystemClock};
use redis::AsyncCommands;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Shares the cooldowns of the attached registry with every instance on the same Redis.
/// Dropping it stops the sharing.
pub struct CooldownSync {
    inner: Arc<Inner>,
}

struct Inner {
    instance: String,
    tx: mpsc::Sender<Vec<u8>>,
    registry: Mutex<Weak<UpstreamRegistry>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// Longest pause between two attempts to (re)subscribe.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// Changes waiting to be published; beyond it (Redis down during a storm of 429s)
/// new ones are dropped rather than queued without bound.
const BACKLOG: usize = 1024;

impl CooldownSync {
    /// Starts sharing on `client`'s server, on the pub/sub channel `<prefix>:cooldowns`.
    /// `instance` must differ between instances (it filters out this instance's own
    /// messages). Needs a tokio runtime.
    pub fn start(client: redis::Client, prefix: &str, instance: impl Into<String>) -> Self {
        let channel = format!("{prefix}:cooldowns");
        let (tx, rx) = mpsc::channel::<Vec<u8>>(BACKLOG);
        let inner = Arc::new(Inner {
            instance: instance.into(),
            tx,
            registry: Mutex::new(Weak::new()),
            tasks: Mutex::new(Vec::new()),
        });
        let publisher = tokio::spawn(publish(client.clone(), channel.clone(), rx));
        let subscriber = tokio::spawn(subscribe(client, channel, Arc::downgrade(&inner)));
        inner
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend([publisher, subscriber]);
        Self { inner }
    }

    /// [`start`](Self::start) on the store URL the [`RedisStore`](crate::RedisStore)
    /// takes: one node, or a comma-separated list of a Cluster's nodes. On a Cluster
    /// a message published on any node reaches the subscribers on every node, so the
    /// first node of the list carries the sharing.
    pub fn start_url(url: &str, prefix: &str, instance: impl Into<String>) -> Result<Self, String> {
        let first = url
            .split(',')
            .map(str::trim)
            .find(|s| !s.is_empty())
            .unwrap_or(url);
        let client = redis::Client::open(first).map_err(|e| format!("redis url {first:?}: {e}"))?;
        Ok(Self::start(client, prefix, instance))
    }

    /// Shares `registry`'s cooldowns from now on, in place of the registry attached
    /// before (a configuration reload builds a new one).
    pub fn attach(&self, registry: &Arc<UpstreamRegistry>) {
        *self
            .inner
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(registry);
        let weak = Arc::downgrade(&self.inner);
        registry
            .cooldowns()
            .set_listener(Some(Arc::new(move |key: &str, change| {
                if let Some(inner) = weak.upgrade() {
                    if inner
                        .tx
                        .try_send(encode(&inner.instance, key, change))
                        .is_err()
                    {
                        tracing::warn!("cooldown not shared: publishing backlog full");
                    }
                }
            })));
    }
}

fn encode(instance: &str, key: &str, change: CooldownChange) -> Vec<u8> {
    let kind = match change {
        CooldownChange::Cool { remaining_ms } => format!("C{remaining_ms}"),
        CooldownChange::Disable => "D".to_owned(),
        CooldownChange::Clear => "X".to_owned(),
    };
    format!("{instance}\n{kind}\n{key}").into_bytes()
}

fn decode(msg: &[u8]) -> Option<(&str, CooldownChange, &str)> {
    let text = std::str::from_utf8(msg).ok()?;
    let (instance, rest) = text.split_once('\n')?;
    let (kind, key) = rest.split_once('\n')?;
    let change = match kind.as_bytes().first()? {
        b'C' => CooldownChange::Cool {
            remaining_ms: kind[1..].parse().ok()?,
        },
        b'D' if kind.len() == 1 => CooldownChange::Disable,
        b'X' if kind.len() == 1 => CooldownChange::Clear,
        _ => return None,
    };
    Some((instance, change, key))
}

async fn publish(client: redis::Client, channel: String, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut conn = None;
    while let Some(msg) = rx.recv().await {
        if conn.is_none() {
            // Bounded: a dead Redis costs each change at most a second, never a hang.
            conn = tokio::time::timeout(
                Duration::from_secs(1),
                client.get_multiplexed_async_connection(),
            )
            .await
            .ok()
            .and_then(Result::ok);
        }
        let Some(c) = conn.as_mut() else {
            tracing::warn!("cooldown not shared: Redis unreachable");
            continue;
        };
        let sent = tokio::time::timeout(
            Duration::from_secs(1),
            c.publish::<_, _, i64>(&channel, msg),
        )
        .await;
        match sent {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cooldown not shared");
                conn = None;
            }
            Err(_) => {
                tracing::warn!("cooldown not shared: Redis did not answer within 1 s");
                conn = None;
            }
        }
    }
}

async fn subscribe(client: redis::Client, channel: String, inner: Weak<Inner>) {
    use futures_util::StreamExt;
    let mut pause = Duration::from_millis(50);
    loop {
        match client.get_async_pubsub().await {
            Ok(mut ps) => {
                if ps.subscribe(&channel).await.is_ok() {
                    pause = Duration::from_millis(50);
                    let mut messages = ps.on_message();
                    while let Some(msg) = messages.next().await {
                        let Some(inner) = inner.upgrade() else { return };
                        let Some((from, change, key)) = decode(msg.get_payload_bytes()) else {
                            continue;
                        };
                        if from == inner.instance {
                            continue;
                        }
                        let registry = inner
                            .registry
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .upgrade();
                        if let Some(r) = registry {
                            r.cooldowns().apply(key, change, SystemClock::new().now());
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cooldown subscription: Redis unreachable"),
        }
        if inner.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_ignored() {
        for change in [
            CooldownChange::Cool { remaining_ms: 1234 },
            CooldownChange::Disable,
            CooldownChange::Clear,
        ] {
            let m = encode("gw-1", "\0up\0m\0cred\0gpt\nx", change);
            assert_eq!(decode(&m), Some(("gw-1", change, "\0up\0m\0cred\0gpt\nx")));
        }
        for bad in [
            &b""[..],
            b"gw",
            b"gw\nQ\nk",
            b"gw\nC-1\nk",
            b"gw\nDX\nk",
            &[0xff, b'\n', b'D', b'\n'],
        ] {
            assert_eq!(decode(bad), None);
        }
    }
}
