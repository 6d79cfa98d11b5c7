//! Policies: the limits attached to a subject (C1–C5, W1–W10).

use crate::clock::Millis;
use crate::money::Money;
use std::fmt;
use std::time::Duration;

/// A windowed or cumulative quantity a policy limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Dimension {
    /// Requests started (anchored windows, W1).
    Requests,
    /// Tokens, input plus output (anchored windows sharing the requests anchor, W3).
    Tokens,
    /// Images generated or sent (own anchor).
    Images,
    /// Videos (own anchor).
    Videos,
    /// Cumulative spend, no window (W6).
    Amount,
    /// In-flight requests (C*).
    Concurrency,
    /// Requests started in the last 60 s, rolling (W10).
    RollingRequests,
}

impl Dimension {
    /// Stable lower-case name, used in logs, metrics and the usage view.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Requests => "requests",
            Dimension::Tokens => "tokens",
            Dimension::Images => "images",
            Dimension::Videos => "videos",
            Dimension::Amount => "amount",
            Dimension::Concurrency => "concurrency",
            Dimension::RollingRequests => "rolling_requests",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One (window length, limit) pair of a dimension (a "tier").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tier {
    /// Window length in milliseconds (> 0).
    pub window_ms: Millis,
    /// Most units admitted per window.
    pub limit: u64,
}

impl Tier {
    /// A tier of `limit` per `window`. A zero window is raised to 1 ms.
    pub fn new(window: Duration, limit: u64) -> Self {
        Self {
            window_ms: crate::clock::millis(window).max(1),
            limit,
        }
    }
    /// `limit` per minute.
    pub fn per_minute(limit: u64) -> Self {
        Self::new(Duration::from_secs(60), limit)
    }
    /// `limit` per hour.
    pub fn per_hour(limit: u64) -> Self {
        Self::new(Duration::from_secs(3600), limit)
    }
    /// `limit` per day.
    pub fn per_day(limit: u64) -> Self {
        Self::new(Duration::from_secs(86_400), limit)
    }
}

/// The three anchor groups of W3: requests and tokens share one anchor, images and
/// videos have their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum AnchorGroup {
    /// Requests + tokens.
    RequestsTokens,
    /// Images.
    Images,
    /// Videos.
    Videos,
}

impl AnchorGroup {
    /// All groups, in evaluation order.
    pub(crate) const ALL: [AnchorGroup; 3] = [
        AnchorGroup::RequestsTokens,
        AnchorGroup::Images,
        AnchorGroup::Videos,
    ];
    /// Index into per-group arrays.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The limits attached to a subject.
///
/// Build with the `with_*` methods:
///
/// ```
/// use portcullis_core::{Policy, Tier};
/// let p = Policy::default()
///     .with_concurrency(3)
///     .with_requests(Tier::per_minute(60))
///     .with_requests(Tier::per_day(5000))
///     .with_tokens(Tier::per_minute(100_000));
/// assert_eq!(p.tiers(portcullis_core::Dimension::Requests).len(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// In-flight requests; 0 = unlimited (C1).
    pub concurrency: u32,
    /// Request tiers (W1).
    pub requests: Vec<Tier>,
    /// Token tiers (W1).
    pub tokens: Vec<Tier>,
    /// Image tiers (W1).
    pub images: Vec<Tier>,
    /// Video tiers (W1).
    pub videos: Vec<Tier>,
    /// Cumulative spend cap in minor units (W6); `None` = no cap.
    pub amount_cap: Option<Money>,
    /// Requests started in the last 60 s (W10); `None` = off.
    pub rolling_rpm: Option<u32>,
}

impl Policy {
    /// Sets the concurrency limit (0 = unlimited).
    pub fn with_concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }
    /// Adds a request tier.
    pub fn with_requests(mut self, t: Tier) -> Self {
        self.requests.push(t);
        self
    }
    /// Adds a token tier.
    pub fn with_tokens(mut self, t: Tier) -> Self {
        self.tokens.push(t);
        self
    }
    /// Adds an image tier.
    pub fn with_images(mut self, t: Tier) -> Self {
        self.images.push(t);
        self
    }
    /// Adds a video tier.
    pub fn with_videos(mut self, t: Tier) -> Self {
        self.videos.push(t);
        self
    }
    /// Sets the cumulative spend cap.
    pub fn with_amount_cap(mut self, cap: Money) -> Self {
        self.amount_cap = Some(cap);
        self
    }
    /// Sets the rolling 60 s request limit.
    pub fn with_rolling_rpm(mut self, n: u32) -> Self {
        self.rolling_rpm = Some(n);
        self
    }

    /// The tiers of one windowed dimension (empty for the others).
    pub fn tiers(&self, d: Dimension) -> &[Tier] {
        match d {
            Dimension::Requests => &self.requests,
            Dimension::Tokens => &self.tokens,
            Dimension::Images => &self.images,
            Dimension::Videos => &self.videos,
            _ => &[],
        }
    }

    /// The dimensions of an anchor group.
    pub(crate) fn group_dimensions(g: AnchorGroup) -> &'static [Dimension] {
        match g {
            AnchorGroup::RequestsTokens => &[Dimension::Requests, Dimension::Tokens],
            AnchorGroup::Images => &[Dimension::Images],
            AnchorGroup::Videos => &[Dimension::Videos],
        }
    }

    /// Whether the window layer has anything to enforce for this policy.
    pub fn has_window_limits(&self) -> bool {
        !(self.requests.is_empty()
            && self.tokens.is_empty()
            && self.images.is_empty()
            && self.videos.is_empty()
            && self.amount_cap.is_none()
            && self.rolling_rpm.is_none())
    }

    /// Checks the policy for values that cannot be enforced.
    pub fn validate(&self) -> Result<(), String> {
        for d in [
            Dimension::Requests,
            Dimension::Tokens,
            Dimension::Images,
            Dimension::Videos,
        ] {
            let tiers = self.tiers(d);
            for (i, t) in tiers.iter().enumerate() {
                if t.window_ms == 0 {
                    return Err(format!("{d} tier {i}: window must be > 0"));
                }
                if tiers[..i].iter().any(|o| o.window_ms == t.window_ms) {
                    return Err(format!(
                        "{d}: two tiers with the same window of {} ms",
                        t.window_ms
                    ));
                }
            }
        }
        if let Some(cap) = self.amount_cap {
            if cap < 0 {
                return Err("amount cap must not be negative".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_duplicate_windows() {
        let p = Policy::default()
            .with_requests(Tier::per_minute(1))
            .with_requests(Tier::per_minute(2));
        assert!(p.validate().unwrap_err().contains("same window"));
        assert!(
            Policy::default()
                .with_requests(Tier::per_minute(1))
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn has_window_limits_sees_each_kind() {
        assert!(!Policy::default().with_concurrency(3).has_window_limits());
        assert!(Policy::default().with_amount_cap(5).has_window_limits());
        assert!(Policy::default().with_rolling_rpm(5).has_window_limits());
        assert!(
            Policy::default()
                .with_videos(Tier::per_day(1))
                .has_window_limits()
        );
    }
}
