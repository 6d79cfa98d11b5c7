//! The window scripts' replies, read into what the in-memory store answers.

use super::{AMOUNT, ROLLING, WINDOWED, protocol, tiers};
use portcullis_core::window::ROLLING_WINDOW_MS;
use portcullis_core::{
    Demand, Dimension, Exceeded, ExceededLimit, LimitView, Millis, Policy, StoreResult, Tier,
    WindowTicket,
};

/// The requests an admit reply counted: the block's, or 1.
pub(crate) fn admitted_requests(r: &[i64]) -> u64 {
    r.get(5)
        .and_then(|&n| u64::try_from(n).ok())
        .unwrap_or(1)
        .max(1)
}

fn non_negative(v: i64, what: &str) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| protocol(format!("{what}: negative value {v}")))
}

fn optional(v: i64) -> Option<u64> {
    u64::try_from(v).ok()
}

/// What the admit script answered.
pub(crate) enum AdmitReply {
    Admitted(WindowTicket),
    Exceeded(Exceeded),
}

/// Decodes the admit script's reply into what the in-memory store would return; `id`:
/// the call's id, under which the admission was recorded (D9).
pub(crate) fn admit_reply(r: &[i64], p: &Policy, d: &Demand, id: u64) -> StoreResult<AdmitReply> {
    let (&status, rest) = r
        .split_first()
        .ok_or_else(|| protocol("admit: empty reply"))?;
    let (&now, rest) = rest
        .split_first()
        .ok_or_else(|| protocol("admit: no time in reply"))?;
    let now: Millis = non_negative(now, "admit time")?;
    match status {
        1 => {
            // The anchors, then (from every script that may borrow) the requests counted.
            let ([a0, a1, a2] | [a0, a1, a2, _]) = rest else {
                return Err(protocol(format!("admit: bad anchors {rest:?}")));
            };
            let amount = p.amount_cap.is_some();
            Ok(AdmitReply::Admitted(WindowTicket {
                admitted_at: now,
                anchors: [optional(*a0), optional(*a1), optional(*a2)],
                demand: *d,
                amount,
                money: if amount { d.money.max(0) } else { 0 },
                rolling: p.rolling_rpm.is_some_and(|n| n > 0),
                fallback: false,
                borrowed: 0,
                id,
            }))
        }
        0 => {
            if rest.is_empty() || rest.len() % 4 != 0 {
                return Err(protocol(format!("admit: bad exceeded list {rest:?}")));
            }
            let limits = rest
                .chunks_exact(4)
                .map(|c| exceeded_limit(c, p))
                .collect::<StoreResult<Vec<_>>>()?;
            Ok(AdmitReply::Exceeded(Exceeded { limits }))
        }
        s => Err(protocol(format!("admit: unknown status {s}"))),
    }
}

fn exceeded_limit(c: &[i64], p: &Policy) -> StoreResult<ExceededLimit> {
    let (code, pos, used, retry) = (c[0], c[1], c[2], c[3]);
    let used = non_negative(used, "used")?;
    let retry_after_ms = optional(retry);
    match code {
        1..=4 => {
            let (dimension, tier) = usize::try_from(pos - 1)
                .ok()
                .and_then(|i| tiers(p).nth(i))
                .filter(|(d, _)| *d == WINDOWED[(code - 1) as usize])
                .ok_or_else(|| protocol(format!("admit: no tier {pos} of dimension {code}")))?;
            Ok(ExceededLimit {
                dimension,
                tier: *tier,
                used,
                retry_after_ms,
            })
        }
        AMOUNT => Ok(ExceededLimit {
            dimension: Dimension::Amount,
            tier: amount_tier(p),
            used,
            retry_after_ms: None,
        }),
        ROLLING => Ok(ExceededLimit {
            dimension: Dimension::RollingRequests,
            tier: rolling_tier(p),
            used,
            retry_after_ms,
        }),
        _ => Err(protocol(format!("admit: unknown dimension code {code}"))),
    }
}

fn amount_tier(p: &Policy) -> Tier {
    Tier {
        window_ms: 0,
        limit: p
            .amount_cap
            .map_or(0, |cap| u64::try_from(cap).unwrap_or(0)),
    }
}

fn rolling_tier(p: &Policy) -> Tier {
    Tier {
        window_ms: ROLLING_WINDOW_MS,
        limit: u64::from(p.rolling_rpm.unwrap_or(0)),
    }
}

/// Decodes the view script's reply, line for line as `ScopeState::view` builds it.
pub(crate) fn view_reply(r: &[i64], p: &Policy) -> StoreResult<Vec<LimitView>> {
    let mut it = r.iter().copied();
    let mut next = |what: &str| {
        it.next()
            .ok_or_else(|| protocol(format!("view: reply too short at {what}")))
    };
    let mut out = Vec::new();
    for (dimension, tier) in tiers(p) {
        let used = non_negative(next("used")?, "used")?;
        let resets_at = optional(next("reset")?);
        out.push(LimitView {
            dimension,
            tier: *tier,
            used,
            resets_at,
        });
    }
    if p.amount_cap.is_some() {
        // As the in-memory view: a (never expected) negative total shows as 0.
        let used = u64::try_from(next("amount")?).unwrap_or(0);
        out.push(LimitView {
            dimension: Dimension::Amount,
            tier: amount_tier(p),
            used,
            resets_at: None,
        });
    }
    if p.rolling_rpm.is_some_and(|n| n > 0) {
        let used = non_negative(next("rolling")?, "rolling")?;
        out.push(LimitView {
            dimension: Dimension::RollingRequests,
            tier: rolling_tier(p),
            used,
            resets_at: None,
        });
    }
    if it.next().is_some() {
        return Err(protocol("view: reply too long"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::policy;

    #[test]
    fn exceeded_limits_take_their_tier_from_the_policy() {
        let p = policy();
        let d = Demand::tokens(5);
        let r = [
            0, 1_000, 2, 2, 7, -1, 3, 3, 2, 900, 5, 0, 120, 40, 7, 0, 3, 19_000,
        ];
        let AdmitReply::Exceeded(e) = admit_reply(&r, &p, &d, 1).unwrap() else {
            panic!("expected exceeded");
        };
        assert_eq!(e.limits.len(), 4);
        assert_eq!(e.limits[0].dimension, Dimension::Tokens);
        assert_eq!(e.limits[0].tier.limit, u64::MAX);
        assert_eq!(e.limits[0].retry_after_ms, None);
        assert_eq!(e.limits[1].dimension, Dimension::Images);
        assert_eq!(e.limits[1].retry_after_ms, Some(900));
        assert_eq!(e.limits[2].dimension, Dimension::Amount);
        assert_eq!(e.limits[2].retry_after_ms, None, "the amount never retries");
        assert_eq!(e.limits[3].retry_after_ms, Some(19_000));
        // Unknown code, a position past the policy, a position of another dimension.
        assert!(admit_reply(&[0, 1, 9, 1, 0, 0], &p, &d, 1).is_err());
        assert!(admit_reply(&[0, 1, 1, 4, 0, 0], &p, &d, 1).is_err());
        assert!(admit_reply(&[0, 1, 1, 2, 0, 0], &p, &d, 1).is_err());
    }

    #[test]
    fn admitted_ticket_mirrors_apply() {
        let p = policy();
        let d = Demand {
            money: -5,
            ..Demand::tokens(3)
        };
        let AdmitReply::Admitted(t) = admit_reply(&[1, 77, 70, -1, -1], &p, &d, 1).unwrap() else {
            panic!("expected admitted");
        };
        assert_eq!(t.admitted_at, 77);
        assert_eq!(t.anchors, [Some(70), None, None]);
        assert!(t.amount && t.rolling);
        assert_eq!(t.money, 0);
    }

    #[test]
    fn view_lines_follow_the_policy() {
        let p = policy();
        let v = view_reply(&[1, 5_000, 0, -1, 2, 7_000, 40, 2], &p).unwrap();
        assert_eq!(v.len(), 5);
        assert_eq!(v[0].resets_at, Some(5_000));
        assert_eq!(v[1].resets_at, None);
        assert_eq!(v[2].dimension, Dimension::Images);
        assert_eq!(v[3].used, 40);
        assert_eq!(v[4].used, 2);
        assert!(view_reply(&[1, 5_000, 0, -1, 2, 7_000, 40], &p).is_err());
        assert!(view_reply(&[1, 5_000, 0, -1, 2, 7_000, 40, 2, 9], &p).is_err());
    }
}
