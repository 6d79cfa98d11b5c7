//! The replies of the joint scripts, read into decisions.

use crate::client::{count, protocol};
use crate::codec::{self, AdmitReply};
use crate::store::windows::joint_reply_granted;
use portcullis_core::{
    CapacityTake, Demand, JointAdmission, JointDecision, JointItem, LeaseId, Policy, StoreResult,
};
use redis::FromRedisValue;
use std::sync::Arc;

/// Reads `joint_admit.lua`'s reply: the decision, the leases taken and the requests
/// the windows counted (a quota block's, or 1).
pub(crate) fn joint_decision(
    r: redis::Value,
    lease: LeaseId,
    asked: Option<(&Arc<Policy>, &Demand)>,
) -> StoreResult<(JointDecision, u32, u64)> {
    let bad = |what: &str| protocol(format!("acquire_and_admit: {what} in reply"));
    let redis::Value::Array(mut parts) = r else {
        return Err(bad("no array"));
    };
    let took = match parts.len() {
        2 => 0,
        3 => match parts.pop() {
            Some(redis::Value::Int(n)) => count(n, "acquire_and_admit")?,
            _ => return Err(bad("no lease count")),
        },
        _ => return Err(bad("wrong length")),
    };
    let rest = parts.pop().unwrap_or(redis::Value::Nil);
    let mut counted = 1;
    let mut window = |v: redis::Value| -> StoreResult<Option<AdmitReply>> {
        let ints = Vec::<i64>::from_redis_value(v)
            .map_err(|e| protocol(format!("acquire_and_admit: {e}")))?;
        match asked {
            None if ints.is_empty() => Ok(None),
            None => Err(bad("a window reply to a slot-only call")),
            Some((p, d)) => {
                counted = codec::admitted_requests(&ints);
                codec::admit_reply(&ints, p, d, lease).map(Some)
            }
        }
    };
    let decision = match parts[0] {
        redis::Value::Int(0) => {
            let redis::Value::Int(n) = rest else {
                return Err(bad("no lease count"));
            };
            JointDecision::SlotFull {
                in_flight: count(n, "acquire_and_admit")?,
            }
        }
        redis::Value::Int(1) => match window(rest)? {
            None => JointDecision::Admitted {
                lease,
                ticket: None,
            },
            Some(AdmitReply::Admitted(t)) => JointDecision::Admitted {
                lease,
                ticket: Some(t),
            },
            Some(AdmitReply::Exceeded(_)) => return Err(bad("a refusal with a slot taken")),
        },
        redis::Value::Int(2) => match window(rest)? {
            Some(AdmitReply::Exceeded(e)) => JointDecision::Exceeded(e),
            _ => return Err(bad("no refusal")),
        },
        _ => return Err(bad("unknown code")),
    };
    Ok((decision, took.max(1), counted))
}

/// Reads `admit_all_acquire.lua`'s reply: the windows' answer, the lease, the leases
/// taken and the requests each item counted.
pub(crate) fn channel_reply(
    r: redis::Value,
    id: LeaseId,
    items: &[JointItem],
) -> StoreResult<(JointAdmission, CapacityTake, u32, Vec<u64>)> {
    let redis::Value::Array(mut parts) = r else {
        return Err(protocol("admit_all_and_acquire: no array in reply"));
    };
    let took = match parts.pop() {
        Some(redis::Value::Int(n)) => count(n, "admit_all_and_acquire")?,
        other => {
            return Err(protocol(format!(
                "admit_all_and_acquire: lease count {other:?}"
            )));
        }
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
    let (admission, counted) = joint_reply_granted(windows, items, 0, id)?;
    Ok((admission, take, took.max(1), counted))
}
