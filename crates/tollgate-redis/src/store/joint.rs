//! Decisions of adjacent layers joined into one script (T3): the slot with its windows
//! ([`JointStore`](tollgate_core::JointStore)), a channel's provider windows with its
//! capacity lease ([`ChannelStore`](tollgate_core::ChannelStore)).

use super::*;
use crate::codec::{self, AdmitReply};
use crate::conn::hash_slot;
use redis::FromRedisValue;
use std::sync::Arc;
use tollgate_core::{
    CapacityTake, Demand, JointAdmission, JointDecision, JointItem, LeaseId, Millis, Policy,
    SlotAsk, StoreResult, WindowAsk, WindowStore,
};

/// Reads `window_admit_all.lua`'s reply: `{1, {item reply}...}` or `{0, i, reply}`.
pub(super) fn joint_reply(
    r: redis::Value,
    items: &[JointItem],
    first: usize,
) -> StoreResult<JointAdmission> {
    let bad = |what: &str| protocol(format!("admit_all: {what} in reply"));
    let ints = |v: redis::Value| -> StoreResult<Vec<i64>> {
        Vec::<i64>::from_redis_value(v).map_err(|e| protocol(format!("admit_all: {e}")))
    };
    let redis::Value::Array(mut parts) = r else {
        return Err(bad("no array"));
    };
    match parts.first() {
        Some(redis::Value::Int(1)) if parts.len() == 2 => {
            let redis::Value::Array(replies) = parts.swap_remove(1) else {
                return Err(bad("no item replies"));
            };
            if replies.len() != items.len() {
                return Err(bad("wrong item count"));
            }
            let mut tickets = Vec::with_capacity(items.len());
            for (v, it) in replies.into_iter().zip(items) {
                match codec::admit_reply(&ints(v)?, &it.policy, &it.demand)? {
                    AdmitReply::Admitted(t) => tickets.push(t),
                    AdmitReply::Exceeded(_) => return Err(bad("a refusal among admissions")),
                }
            }
            Ok(JointAdmission::Admitted(tickets))
        }
        Some(redis::Value::Int(0)) if parts.len() == 3 => {
            let reply = ints(parts.swap_remove(2))?;
            let redis::Value::Int(i) = parts[1] else {
                return Err(bad("no index"));
            };
            let index = usize::try_from(i - 1).map_err(|_| bad("bad index"))?;
            let it = items.get(index).ok_or_else(|| bad("index out of range"))?;
            match codec::admit_reply(&reply, &it.policy, &it.demand)? {
                AdmitReply::Exceeded(exceeded) => Ok(JointAdmission::Exceeded {
                    index: first + index,
                    exceeded,
                }),
                AdmitReply::Admitted(_) => Err(bad("an admission as the refusal")),
            }
        }
        _ => Err(bad("unknown shape")),
    }
}

impl tollgate_core::JointStore for RedisStore {
    fn acquire_and_admit(
        &self,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
    ) -> RedisStoreFuture<JointDecision> {
        let id = self.inner.next_lease.next();
        let slots = self.slots_key(&slot.key);
        let mut keys = vec![slots.clone()];
        let args = vec![
            self.time(),
            slot.limit.to_string(),
            slot.ttl.to_string(),
            self.member(id),
        ];
        let mut blobs = Vec::new();
        let asked = window.map(|w| {
            keys.extend(self.window_keys(&slot.key, w.scope));
            blobs.push(codec::admit_args(
                self.inner.amount_ttl_ms,
                w.policy,
                w.demand,
            ));
            (w.policy.clone(), *w.demand)
        });
        let decided = self.eval_blobs(&scripts().joint, keys, args, blobs, move |r| {
            joint_decision(r, id, asked.as_ref())
        });
        self.removing_late_lease(slots, self.member(id), decided)
    }
}

/// Reads `joint_admit.lua`'s reply.
pub(super) fn joint_decision(
    r: redis::Value,
    lease: LeaseId,
    asked: Option<&(Arc<Policy>, Demand)>,
) -> StoreResult<JointDecision> {
    let bad = |what: &str| protocol(format!("acquire_and_admit: {what} in reply"));
    let redis::Value::Array(mut parts) = r else {
        return Err(bad("no array"));
    };
    if parts.len() != 2 {
        return Err(bad("wrong length"));
    }
    let rest = parts.pop().unwrap_or(redis::Value::Nil);
    let window = |v: redis::Value| -> StoreResult<Option<AdmitReply>> {
        let ints = Vec::<i64>::from_redis_value(v)
            .map_err(|e| protocol(format!("acquire_and_admit: {e}")))?;
        match asked {
            None if ints.is_empty() => Ok(None),
            None => Err(bad("a window reply to a slot-only call")),
            Some((p, d)) => codec::admit_reply(&ints, p, d).map(Some),
        }
    };
    match parts[0] {
        redis::Value::Int(0) => {
            let redis::Value::Int(n) = rest else {
                return Err(bad("no lease count"));
            };
            Ok(JointDecision::SlotFull {
                in_flight: count(n, "acquire_and_admit")?,
            })
        }
        redis::Value::Int(1) => match window(rest)? {
            None => Ok(JointDecision::Admitted {
                lease,
                ticket: None,
            }),
            Some(AdmitReply::Admitted(t)) => Ok(JointDecision::Admitted {
                lease,
                ticket: Some(t),
            }),
            Some(AdmitReply::Exceeded(_)) => Err(bad("a refusal with a slot taken")),
        },
        redis::Value::Int(2) => match window(rest)? {
            Some(AdmitReply::Exceeded(e)) => Ok(JointDecision::Exceeded(e)),
            _ => Err(bad("no refusal")),
        },
        _ => Err(bad("unknown code")),
    }
}

impl tollgate_core::ChannelStore for RedisStore {
    fn admit_all_and_acquire(
        &self,
        items: &[JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> RedisStoreFuture<(JointAdmission, CapacityTake)> {
        let leases = self.slots_key(&channel_subject(channel));
        let mut keys: Vec<String> = items
            .iter()
            .flat_map(|it| self.window_keys(&it.key, it.scope))
            .collect();
        keys.push(leases.clone());
        let one_slot = !self.is_cluster() || {
            let first = hash_slot(keys[0].as_bytes());
            keys.iter().all(|k| hash_slot(k.as_bytes()) == first)
        };
        if !one_slot {
            // On different Cluster slots: the windows, then the lease — two calls.
            let admitted = WindowStore::admit_all(self, items);
            let (store, channel) = (self.clone(), channel.to_owned());
            return RedisStoreFuture::new(async move {
                let a = admitted.await?;
                if !matches!(a, JointAdmission::Admitted(_)) {
                    return Ok((a, CapacityTake::NotAsked));
                }
                let take = match tollgate_core::CapacityStore::try_acquire(
                    &store, &channel, capacity, ttl,
                )
                .await
                {
                    Ok(Some(lease)) => CapacityTake::Taken(lease),
                    Ok(None) => CapacityTake::Full,
                    Err(_) => CapacityTake::NotAsked,
                };
                Ok((a, take))
            });
        }
        let id = self.inner.next_lease.next();
        let args = vec![
            self.time(),
            capacity.to_string(),
            ttl.to_string(),
            self.member(id),
        ];
        let blobs = items
            .iter()
            .map(|it| codec::admit_args(self.inner.amount_ttl_ms, &it.policy, &it.demand))
            .collect();
        let owned = items.to_vec();
        let decided = self.eval_blobs(
            &scripts().channel,
            keys,
            args,
            blobs,
            move |r: redis::Value| {
                let redis::Value::Array(mut parts) = r else {
                    return Err(protocol("admit_all_and_acquire: no array in reply"));
                };
                let take = match parts.pop() {
                    Some(redis::Value::Int(1)) => CapacityTake::Taken(id),
                    Some(redis::Value::Int(0)) => CapacityTake::Full,
                    Some(redis::Value::Int(-1)) => CapacityTake::NotAsked,
                    other => {
                        return Err(protocol(format!(
                            "admit_all_and_acquire: lease answer {other:?}"
                        )));
                    }
                };
                let windows = parts
                    .pop()
                    .ok_or_else(|| protocol("admit_all_and_acquire: no windows in reply"))?;
                Ok((joint_reply(windows, &owned, 0)?, take))
            },
        );
        self.removing_late_lease(leases, self.member(id), decided)
    }
}
