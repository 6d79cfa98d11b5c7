//! Upstream limits (U1–U4) as plain types: what a provider allows per credential,
//! per credential and model, and per vendor, compiled into window keys of the
//! [`WindowStore`](crate::WindowStore); the [`RateCount`] a request is charged with
//! (U2: the vendors' counting rules live in `portcullis-dialects`, above this crate); the
//! cooldown table that provider signals feed (U3); and the rejection a request gets
//! when no channel is usable (U4).
//!
//! A provider limit is kept like a user-policy window (W5: requests counted at send,
//! tokens reserved from the estimate and settled from actual usage), under store keys
//! that start with a NUL byte so no subject key a client sends can name them.
//!
//! | granularity | store key | cooldown key |
//! |---|---|---|
//! | credential | `\0up\0c\0{credential}` | same |
//! | credential + model | `\0up\0m\0{credential}\0{model}` | same |
//! | vendor | `\0up\0v\0{vendor}` | same |
//!
//! A scope with ITPM or OTPM gets one more key each (suffix `\0i`, `\0o`), whose token
//! window is charged with the input or the output count only.

use crate::clock::Millis;
use crate::dialect::Dialect;
use crate::policy::{Dimension, Policy, Tier};
use crate::rejection::GatewayCode;
use crate::subject::SubjectKey;
use crate::window::ExceededLimit;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Limits at one granularity (U1). `None` = no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct RateLimits {
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Requests per hour.
    pub rph: Option<u64>,
    /// Requests per day.
    pub rpd: Option<u64>,
    /// Tokens per minute (the vendor's combined count).
    pub tpm: Option<u64>,
    /// Input tokens per minute.
    pub itpm: Option<u64>,
    /// Output tokens per minute.
    pub otpm: Option<u64>,
}

impl RateLimits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The kind of a provider limit: what U4 names when it is the reason every channel
/// was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// Requests per minute.
    Rpm,
    /// Requests per hour.
    Rph,
    /// Requests per day.
    Rpd,
    /// Tokens per minute.
    Tpm,
    /// Input tokens per minute.
    Itpm,
    /// Output tokens per minute.
    Otpm,
}

impl LimitKind {
    /// The U4 code when every candidate was skipped by this kind: minute requests
    /// 42902, hour requests 42903, day requests 42904, minute tokens (any) 42905.
    pub fn code(self) -> GatewayCode {
        match self {
            LimitKind::Rpm => GatewayCode::RpmLimit,
            LimitKind::Rph => GatewayCode::RphLimit,
            LimitKind::Rpd => GatewayCode::RpdLimit,
            LimitKind::Tpm | LimitKind::Itpm | LimitKind::Otpm => GatewayCode::TpmLimit,
        }
    }
}

/// Tokens counted toward a provider's per-minute token limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateCount {
    /// Toward a combined tokens-per-minute limit.
    pub tpm: u64,
    /// Toward an input-tokens-per-minute limit.
    pub itpm: u64,
    /// Toward an output-tokens-per-minute limit.
    pub otpm: u64,
}

impl RateCount {
    /// The same count toward every limit (a conservative estimate when nothing better
    /// is known).
    pub fn all(tokens: u64) -> Self {
        Self {
            tpm: tokens,
            itpm: tokens,
            otpm: tokens,
        }
    }
    /// The count a window of `measure` is charged with.
    pub fn of(&self, measure: TokenMeasure) -> u64 {
        match measure {
            TokenMeasure::Total => self.tpm,
            TokenMeasure::Input => self.itpm,
            TokenMeasure::Output => self.otpm,
        }
    }
}

/// A request's estimate toward provider limits under each vendor's counting rules
/// (U2), for a request whose candidates speak different dialects (a translated
/// request): each channel is charged the count of its own dialect. A request that
/// carries only a [`RateCount`] is charged that count on every channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateEstimates {
    /// Under OpenAI's rules (also the native dialect's).
    pub openai: RateCount,
    /// Under Anthropic's rules.
    pub anthropic: RateCount,
    /// Under Gemini's rules.
    pub gemini: RateCount,
}

impl RateEstimates {
    /// The same count under every vendor's rules.
    pub fn same(count: RateCount) -> Self {
        Self {
            openai: count,
            anthropic: count,
            gemini: count,
        }
    }
    /// The count a channel speaking `dialect` is charged.
    pub fn of(&self, dialect: Dialect) -> RateCount {
        match dialect {
            Dialect::OpenAi | Dialect::Native => self.openai,
            Dialect::Anthropic => self.anthropic,
            Dialect::Gemini => self.gemini,
        }
    }
}

/// Which token count a window key is charged with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenMeasure {
    /// The combined count (TPM), on the key that also holds the request tiers.
    Total,
    /// Input tokens (ITPM).
    Input,
    /// Output tokens (OTPM).
    Output,
}

/// One window key of a scope: its store key, its policy and the tokens it counts.
#[derive(Clone, Debug)]
pub struct ScopeWindow {
    /// The store key.
    pub key: SubjectKey,
    /// Its tiers.
    pub policy: Arc<Policy>,
    /// What its token tier is charged with.
    pub measure: TokenMeasure,
}

impl ScopeWindow {
    /// The kind of an exceeded limit of this window.
    pub fn kind_of(&self, limit: &ExceededLimit) -> LimitKind {
        match limit.dimension {
            Dimension::Requests if limit.tier.window_ms <= 60_000 => LimitKind::Rpm,
            Dimension::Requests if limit.tier.window_ms <= 3_600_000 => LimitKind::Rph,
            Dimension::Requests => LimitKind::Rpd,
            _ => match self.measure {
                TokenMeasure::Total => LimitKind::Tpm,
                TokenMeasure::Input => LimitKind::Itpm,
                TokenMeasure::Output => LimitKind::Otpm,
            },
        }
    }
}

/// Compiles the limits of the scope stored under `key` into window keys (≤ 3).
pub fn scope_windows(key: &str, limits: &RateLimits) -> Vec<ScopeWindow> {
    let mut out = Vec::new();
    let mut main = Policy::default();
    if let Some(n) = limits.rpm {
        main = main.with_requests(Tier::per_minute(n));
    }
    if let Some(n) = limits.rph {
        main = main.with_requests(Tier::per_hour(n));
    }
    if let Some(n) = limits.rpd {
        main = main.with_requests(Tier::per_day(n));
    }
    if let Some(n) = limits.tpm {
        main = main.with_tokens(Tier::per_minute(n));
    }
    if main.has_window_limits() {
        out.push(ScopeWindow {
            key: SubjectKey::from(key.to_owned()),
            policy: Arc::new(main),
            measure: TokenMeasure::Total,
        });
    }
    for (n, suffix, measure) in [
        (limits.itpm, "\0i", TokenMeasure::Input),
        (limits.otpm, "\0o", TokenMeasure::Output),
    ] {
        if let Some(n) = n {
            out.push(ScopeWindow {
                key: SubjectKey::from(format!("{key}{suffix}")),
                policy: Arc::new(Policy::default().with_tokens(Tier::per_minute(n))),
                measure,
            });
        }
    }
    out
}

/// The store / cooldown key of a credential scope.
pub fn credential_key(credential: &str) -> String {
    format!("\0up\0c\0{credential}")
}
/// The store / cooldown key of a credential + model scope.
pub fn model_key(credential: &str, model: &str) -> String {
    format!("\0up\0m\0{credential}\0{model}")
}
/// The store / cooldown key of a vendor scope.
pub fn vendor_key(vendor: &str) -> String {
    format!("\0up\0v\0{vendor}")
}

/// One channel as the upstream limits see it.
#[derive(Clone, Debug)]
pub struct UpstreamChannel {
    /// The channel's name (as in [`ChannelRef`](crate::ChannelRef)).
    pub name: Arc<str>,
    /// The API format its provider speaks: picks the counting rules (U2).
    pub dialect: Dialect,
    /// The vendor whose account-wide limits apply.
    pub vendor: Arc<str>,
    /// A non-secret id of the credential (channels sharing a credential share its
    /// limits).
    pub credential: Arc<str>,
    /// Limits of the credential.
    pub limits: RateLimits,
    /// Limits of the credential per model.
    pub model_limits: Vec<(Arc<str>, RateLimits)>,
}

struct ChannelEntry {
    dialect: Dialect,
    vendor: Arc<str>,
    credential_key: Arc<str>,
    credential: Arc<str>,
    credential_windows: Vec<ScopeWindow>,
    /// By the provider's model id.
    model_windows: HashMap<Arc<str>, Vec<ScopeWindow>, foldhash::fast::RandomState>,
    /// Public model name → the provider's id for it on this channel, where they differ.
    served_as: HashMap<Arc<str>, Arc<str>, foldhash::fast::RandomState>,
}

impl ChannelEntry {
    /// The provider's id of `model` on this channel.
    fn provider_model<'a>(&'a self, model: &'a str) -> &'a str {
        self.served_as.get(model).map_or(model, |id| id)
    }
}

/// The scopes of one (channel, model): the window keys to admit on and the cooldown
/// keys to consult, most specific first.
#[derive(Debug)]
pub struct ChannelScopes<'a> {
    /// The provider's dialect (counting rules).
    pub dialect: Dialect,
    /// Window keys: credential + model, credential, vendor (borrowed from the
    /// registry: building a scope allocates nothing).
    windows: [&'a [ScopeWindow]; 3],
    credential: &'a str,
    credential_key: &'a str,
    vendor: &'a str,
    model: Option<&'a str>,
}

impl<'a> ChannelScopes<'a> {
    /// The windows over every granularity: credential + model, credential, vendor.
    pub fn windows(&self) -> impl Iterator<Item = &'a ScopeWindow> + Clone + 'a {
        let [m, c, v] = self.windows;
        m.iter().chain(c).chain(v)
    }
    /// How many windows [`windows`](Self::windows) yields.
    pub fn window_count(&self) -> usize {
        self.windows.iter().map(|w| w.len()).sum()
    }

    /// Cooldown keys: credential + model (when the model is known), credential,
    /// vendor. Built on demand: most requests find the cooldown table empty and never
    /// need them.
    pub fn cooldown_keys(&self) -> Vec<String> {
        let mut keys = Vec::with_capacity(3);
        if let Some(m) = self.model {
            keys.push(model_key(self.credential, m));
        }
        keys.push(self.credential_key.to_owned());
        keys.push(vendor_key(self.vendor));
        keys
    }
}

/// Channels, their compiled limits and the cooldown table (U1, U3): what the upstream
/// limit layer and the failover layer share.
#[derive(Default)]
pub struct UpstreamRegistry {
    channels: HashMap<Arc<str>, ChannelEntry, foldhash::fast::RandomState>,
    vendors: HashMap<Arc<str>, Vec<ScopeWindow>, foldhash::fast::RandomState>,
    cooldowns: Cooldowns,
}

impl std::fmt::Debug for UpstreamRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamRegistry")
            .field("channels", &self.channels.len())
            .field("vendors", &self.vendors.len())
            .finish()
    }
}

impl UpstreamRegistry {
    /// An empty registry: every channel unconstrained.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds (or replaces) a channel.
    pub fn with_channel(mut self, ch: UpstreamChannel) -> Self {
        let ck = credential_key(&ch.credential);
        let model_windows = ch
            .model_limits
            .iter()
            .map(|(m, l)| (m.clone(), scope_windows(&model_key(&ch.credential, m), l)))
            .collect();
        self.channels.insert(
            ch.name.clone(),
            ChannelEntry {
                dialect: ch.dialect,
                vendor: ch.vendor,
                credential_windows: scope_windows(&ck, &ch.limits),
                credential_key: Arc::from(ck),
                credential: ch.credential,
                model_windows,
                served_as: HashMap::default(),
            },
        );
        self
    }
    /// Says that `channel` serves the public `model` as the provider's `id` (a channel
    /// that knows a model by its own name): the credential + model windows and
    /// cooldowns of that model on the channel are the provider's model's — limits
    /// written for `id` apply (or, if only the public name has some, those, keyed by
    /// `id`), and public models served as one id share its windows. Call it after
    /// [`with_channel`](Self::with_channel); an unknown channel is left as it is.
    pub fn serving_as(
        mut self,
        channel: &str,
        model: impl Into<Arc<str>>,
        id: impl Into<Arc<str>>,
    ) -> Self {
        let (model, id) = (model.into(), id.into());
        let Some(e) = self.channels.get_mut(channel) else {
            return self;
        };
        if model == id {
            return self;
        }
        if !e.model_windows.contains_key(&id) {
            if let Some(windows) = e.model_windows.remove(&model) {
                // The same windows (and their ITPM / OTPM suffixes) under the id's key.
                let (from, to) = (
                    model_key(&e.credential, &model),
                    model_key(&e.credential, &id),
                );
                let rekeyed = windows
                    .into_iter()
                    .map(|w| {
                        let suffix = w.key.as_str().strip_prefix(&from).unwrap_or_default();
                        ScopeWindow {
                            key: SubjectKey::from(format!("{to}{suffix}")),
                            ..w
                        }
                    })
                    .collect();
                e.model_windows.insert(id.clone(), rekeyed);
            }
        }
        e.served_as.insert(model, id);
        self
    }
    /// Sets a vendor's account-wide limits.
    pub fn with_vendor(mut self, vendor: impl Into<Arc<str>>, limits: RateLimits) -> Self {
        let vendor = vendor.into();
        let w = scope_windows(&vendor_key(&vendor), &limits);
        self.vendors.insert(vendor, w);
        self
    }
    /// True when `channel` is registered.
    pub fn contains(&self, channel: &str) -> bool {
        self.channels.contains_key(channel)
    }
    /// The scopes of `channel` serving `model`; `None` for an unregistered channel
    /// (unconstrained).
    pub fn scopes<'a>(
        &'a self,
        channel: &str,
        model: Option<&'a str>,
    ) -> Option<ChannelScopes<'a>> {
        let e = self.channels.get(channel)?;
        let model = model.map(|m| e.provider_model(m));
        let model_windows = model.and_then(|m| e.model_windows.get(m));
        let vendor_windows = self.vendors.get(&e.vendor);
        Some(ChannelScopes {
            dialect: e.dialect,
            windows: [
                model_windows.map_or(&[][..], Vec::as_slice),
                &e.credential_windows,
                vendor_windows.map_or(&[][..], Vec::as_slice),
            ],
            credential: &e.credential,
            credential_key: &e.credential_key,
            vendor: &e.vendor,
            model,
        })
    }
    /// The cooldown key provider rate signals of `channel` for `model` apply to: the
    /// credential + model scope (providers count per model and organisation), or the
    /// credential when the model is unknown.
    pub fn signal_key(&self, channel: &str, model: Option<&str>) -> Option<String> {
        let e = self.channels.get(channel)?;
        Some(match model {
            Some(m) => model_key(&e.credential, e.provider_model(m)),
            None => e.credential_key.to_string(),
        })
    }
    /// The cooldown key of `channel`'s credential.
    pub fn credential_cooldown_key(&self, channel: &str) -> Option<String> {
        Some(self.channels.get(channel)?.credential_key.to_string())
    }
    /// Ends every cooldown or disablement of `channel`'s credential: the credential
    /// scope and each of its credential + model scopes (an operator re-enabled it).
    pub fn clear_credential(&self, channel: &str) {
        let Some(e) = self.channels.get(channel) else {
            return;
        };
        let models = model_key(&e.credential, "");
        self.cooldowns
            .clear_where(|k| k == &*e.credential_key || k.starts_with(&models));
    }
    /// The cooldown table.
    pub fn cooldowns(&self) -> &Cooldowns {
        &self.cooldowns
    }
}

/// The cooldown deadline of a scope disabled until an operator re-enables it.
pub const DISABLED: Millis = Millis::MAX;

/// Cooldowns per scope key (U3, F6, F8): until when no new request may be sent on a
/// scope. A cooldown extends, never shrinks to an earlier deadline. Bounded: expired
/// entries are purged whenever the table grows past its last purge size × 2.
///
/// Changes made here can be shared with other gateway instances: a
/// [`CooldownListener`] hears every change made in this process, and
/// [`apply`](Self::apply) takes in another instance's change without echoing it.
#[derive(Default)]
pub struct Cooldowns {
    inner: Mutex<CooldownTable>,
    /// Entries held, readable without the lock: an empty table (the usual case) costs
    /// a request one atomic load.
    entries: std::sync::atomic::AtomicUsize,
    listener: std::sync::RwLock<Option<CooldownListener>>,
}

impl std::fmt::Debug for Cooldowns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cooldowns")
            .field("entries", &self.len())
            .finish()
    }
}

/// A cooldown change made in this process, as other instances should apply it.
/// Durations, not instants: instances' clocks may disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CooldownChange {
    /// Cool for this long from now (or keep a later deadline).
    Cool {
        /// Time until the cooldown ends.
        remaining_ms: Millis,
    },
    /// Out of rotation until an operator re-enables it.
    Disable,
    /// Cooldown or disablement ended by an operator.
    Clear,
}

/// Hears every cooldown change made in this process: `(scope key, change)`.
pub type CooldownListener = Arc<dyn Fn(&str, CooldownChange) + Send + Sync>;

#[derive(Debug, Default)]
struct CooldownTable {
    until: HashMap<String, Millis, foldhash::fast::RandomState>,
    purge_at: usize,
}

impl Cooldowns {
    fn with<R>(&self, f: impl FnOnce(&mut CooldownTable) -> R) -> R {
        let mut t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut t);
        self.entries
            .store(t.until.len(), std::sync::atomic::Ordering::Release);
        r
    }
    /// True when no cooldown entry is held (expired ones count until purged).
    pub fn is_empty(&self) -> bool {
        self.entries.load(std::sync::atomic::Ordering::Acquire) == 0
    }
    /// Cools `key` until `until` (or keeps a later cooldown). Returns the deadline now
    /// in force. A raised deadline is told to the listener.
    pub fn cool(&self, key: &str, until: Millis, now: Millis) -> Millis {
        let (deadline, raised) = self.raise(key, until, now);
        if raised {
            self.notify(
                key,
                if deadline == DISABLED {
                    CooldownChange::Disable
                } else {
                    CooldownChange::Cool {
                        remaining_ms: deadline.saturating_sub(now),
                    }
                },
            );
        }
        deadline
    }
    fn raise(&self, key: &str, until: Millis, now: Millis) -> (Millis, bool) {
        self.with(|t| {
            if t.until.len() >= t.purge_at.max(64) {
                t.until.retain(|_, u| *u > now);
                t.purge_at = t.until.len() * 2;
            }
            let e = t.until.entry(key.to_owned()).or_insert(0);
            let raised = until > *e;
            *e = (*e).max(until);
            (*e, raised)
        })
    }
    fn notify(&self, key: &str, change: CooldownChange) {
        let listener = self
            .listener
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(l) = listener {
            l(key, change);
        }
    }
    /// Sets (or removes) the listener of local changes.
    pub fn set_listener(&self, listener: Option<CooldownListener>) {
        *self.listener.write().unwrap_or_else(|e| e.into_inner()) = listener;
    }
    /// Applies another instance's change at `now`, without telling the listener.
    pub fn apply(&self, key: &str, change: CooldownChange, now: Millis) {
        match change {
            CooldownChange::Cool { remaining_ms } => {
                self.raise(key, now.saturating_add(remaining_ms).min(DISABLED - 1), now);
            }
            CooldownChange::Disable => {
                self.raise(key, DISABLED, now);
            }
            CooldownChange::Clear => self.with(|t| {
                t.until.remove(key);
            }),
        }
    }
    /// Until when `key` cools, if it still does at `now`.
    pub fn until(&self, key: &str, now: Millis) -> Option<Millis> {
        self.with(|t| t.until.get(key).copied().filter(|u| *u > now))
    }
    /// The latest cooldown among `keys` still running at `now`.
    pub fn any_until<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k String>,
        now: Millis,
    ) -> Option<Millis> {
        if self.is_empty() {
            return None;
        }
        self.with(|t| {
            keys.into_iter()
                .filter_map(|k| t.until.get(k.as_str()).copied())
                .filter(|u| *u > now)
                .max()
        })
    }
    /// Takes `key` out of rotation until an operator re-enables it ([`clear`](Self::clear)).
    pub fn disable(&self, key: &str, now: Millis) {
        self.cool(key, DISABLED, now);
    }
    /// Ends the cooldown of `key` (an operator re-enabled it).
    pub fn clear(&self, key: &str) {
        self.clear_where(|k| k == key);
    }
    /// Ends the cooldown of every key for which `which` holds; each is told to the
    /// listener.
    pub fn clear_where(&self, which: impl Fn(&str) -> bool) {
        let cleared: Vec<String> = self.with(|t| {
            let keys: Vec<String> = t.until.keys().filter(|k| which(k)).cloned().collect();
            for k in &keys {
                t.until.remove(k);
            }
            keys
        });
        for k in cleared {
            self.notify(&k, CooldownChange::Clear);
        }
    }
    /// Cooldown entries held (expired ones included until the next purge).
    pub fn len(&self) -> usize {
        self.entries.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Why one candidate channel was skipped (U1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// A limit of this kind had no room; recovers in `retry_after_ms` if known.
    Limit {
        /// The binding limit's kind.
        kind: LimitKind,
        /// Time until it has room.
        retry_after_ms: Option<Millis>,
    },
    /// The channel cools down for `remaining_ms` more.
    Cooling {
        /// Time until the cooldown ends.
        remaining_ms: Millis,
    },
    /// The channel is out of rotation until an operator re-enables it.
    Disabled,
}

impl Skip {
    fn recovery(&self) -> Option<Millis> {
        match self {
            Skip::Limit { retry_after_ms, .. } => *retry_after_ms,
            Skip::Cooling { remaining_ms } => Some(*remaining_ms),
            Skip::Disabled => None,
        }
    }
}

/// The answer when every candidate was skipped (U4): the code and the time until the
/// earliest candidate recovers. `skips` empty = the model has no channel (50201).
///
/// ```
/// use portcullis_core::upstream::{LimitKind, Skip, no_channel_left};
/// use portcullis_core::GatewayCode;
/// let tpm = Skip::Limit { kind: LimitKind::Tpm, retry_after_ms: Some(30_000) };
/// let rpm = Skip::Limit { kind: LimitKind::Rpm, retry_after_ms: Some(5_000) };
/// assert_eq!(no_channel_left(&[tpm, tpm]).0, GatewayCode::TpmLimit);
/// assert_eq!(no_channel_left(&[tpm, rpm]), (GatewayCode::UpstreamCooling, Some(5_000)));
/// assert_eq!(no_channel_left(&[]).0, GatewayCode::NoUpstream);
/// ```
pub fn no_channel_left(skips: &[Skip]) -> (GatewayCode, Option<Millis>) {
    let Some(first) = skips.first() else {
        return (GatewayCode::NoUpstream, None);
    };
    let earliest = skips.iter().filter_map(Skip::recovery).min();
    let code = match first {
        Skip::Limit { kind, .. }
            if skips
                .iter()
                .all(|s| matches!(s, Skip::Limit { kind: k, .. } if k.code() == kind.code())) =>
        {
            kind.code()
        }
        _ => GatewayCode::UpstreamCooling,
    };
    (code, earliest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u1_scope_windows_split_itpm_and_otpm_into_their_own_keys() {
        let l = RateLimits {
            rpm: Some(10),
            rph: Some(100),
            tpm: Some(1000),
            itpm: Some(500),
            otpm: Some(200),
            ..RateLimits::default()
        };
        let w = scope_windows("k", &l);
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].policy.requests.len(), 2);
        assert_eq!(w[0].policy.tokens.len(), 1);
        assert_eq!(w[1].measure, TokenMeasure::Input);
        assert_eq!(w[2].measure, TokenMeasure::Output);
        assert!(scope_windows("k", &RateLimits::default()).is_empty());
    }

    #[test]
    fn u1_registry_scopes_cover_model_credential_and_vendor() {
        let r = UpstreamRegistry::new()
            .with_channel(UpstreamChannel {
                name: "a".into(),
                dialect: Dialect::OpenAi,
                vendor: "openai".into(),
                credential: "cred1".into(),
                limits: RateLimits {
                    rpm: Some(5),
                    ..RateLimits::default()
                },
                model_limits: vec![(
                    "gpt".into(),
                    RateLimits {
                        tpm: Some(9),
                        ..RateLimits::default()
                    },
                )],
            })
            .with_vendor(
                "openai",
                RateLimits {
                    rpd: Some(1),
                    ..RateLimits::default()
                },
            );
        let s = r.scopes("a", Some("gpt")).unwrap();
        assert_eq!(s.window_count(), 3);
        assert_eq!(s.windows().count(), 3);
        assert_eq!(s.cooldown_keys().len(), 3);
        assert_eq!(r.scopes("a", Some("other")).unwrap().window_count(), 2);
        assert!(r.scopes("b", None).is_none());
    }

    #[test]
    fn u1_a_model_served_under_the_providers_id_has_that_models_limits() {
        let tpm = |n| RateLimits {
            tpm: Some(n),
            itpm: Some(n),
            ..RateLimits::default()
        };
        let r = UpstreamRegistry::new()
            .with_channel(UpstreamChannel {
                name: "a".into(),
                dialect: Dialect::Anthropic,
                vendor: "anthropic".into(),
                credential: "cred".into(),
                limits: RateLimits::default(),
                // Limits written for the provider's model, and for a public name.
                model_limits: vec![("claude-4".into(), tpm(9)), ("fast".into(), tpm(5))],
            })
            .serving_as("a", "smart", "claude-4")
            .serving_as("a", "clever", "claude-4")
            .serving_as("a", "fast", "claude-haiku")
            .serving_as("unknown", "x", "y");
        let keys = |m: &str| -> Vec<String> {
            r.scopes("a", Some(m))
                .unwrap()
                .windows()
                .map(|w| w.key.to_string())
                .collect()
        };
        let claude = model_key("cred", "claude-4");
        // Both public names served as one provider model share its windows.
        assert_eq!(keys("smart"), [claude.clone(), format!("{claude}\0i")]);
        assert_eq!(keys("clever"), keys("smart"));
        assert_eq!(
            r.scopes("a", Some("smart"))
                .unwrap()
                .windows()
                .next()
                .unwrap()
                .policy
                .tokens[0]
                .limit,
            9
        );
        // Limits written under the public name are the provider model's, by its id.
        let haiku = model_key("cred", "claude-haiku");
        assert_eq!(keys("fast"), [haiku.clone(), format!("{haiku}\0i")]);
        // Cooldowns too: a provider signal for `smart` cools the provider's model.
        assert_eq!(r.signal_key("a", Some("smart")), Some(claude.clone()));
        assert!(
            r.scopes("a", Some("smart"))
                .unwrap()
                .cooldown_keys()
                .contains(&claude)
        );
        // A model served under its own name is as before.
        assert_eq!(
            r.signal_key("a", Some("other")),
            Some(model_key("cred", "other"))
        );
        assert!(keys("other").is_empty());
    }

    #[test]
    fn u3_cooldown_extends_never_shrinks_and_expires() {
        let c = Cooldowns::default();
        assert_eq!(c.cool("k", 500, 0), 500);
        assert_eq!(c.cool("k", 300, 0), 500);
        assert_eq!(c.until("k", 499), Some(500));
        assert_eq!(c.until("k", 500), None);
        assert_eq!(c.cool("k", 900, 0), 900);
        c.clear("k");
        assert_eq!(c.until("k", 0), None);
    }

    #[test]
    fn d1_local_changes_are_heard_remote_ones_are_applied_silently() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let c = Cooldowns::default();
        let h = heard.clone();
        c.set_listener(Some(Arc::new(move |k: &str, ch| {
            h.lock().unwrap().push((k.to_owned(), ch))
        })));
        c.cool("k", 1_500, 1_000);
        c.cool("k", 1_200, 1_000); // not raised: not told
        c.disable("d", 1_000);
        c.clear("d");
        c.clear("never-set");
        c.apply("r", CooldownChange::Cool { remaining_ms: 300 }, 1_000);
        c.apply("x", CooldownChange::Disable, 1_000);
        assert_eq!(
            *heard.lock().unwrap(),
            [
                ("k".to_owned(), CooldownChange::Cool { remaining_ms: 500 }),
                ("d".to_owned(), CooldownChange::Disable),
                ("d".to_owned(), CooldownChange::Clear),
            ]
        );
        assert_eq!(c.until("r", 1_000), Some(1_300));
        assert_eq!(c.until("x", 1_000), Some(DISABLED));
        c.apply("x", CooldownChange::Clear, 1_000);
        assert_eq!(c.until("x", 1_000), None);
    }

    #[test]
    fn f8_re_enabling_a_channel_clears_its_credential_and_model_scopes_only() {
        let ch = |name: &str, cred: &str| UpstreamChannel {
            name: name.into(),
            dialect: Dialect::OpenAi,
            vendor: "openai".into(),
            credential: cred.into(),
            limits: RateLimits::default(),
            model_limits: vec![],
        };
        let r = UpstreamRegistry::new()
            .with_channel(ch("a", "org"))
            .with_channel(ch("b", "org2"));
        let c = r.cooldowns();
        c.disable(&credential_key("org"), 0);
        c.cool(&model_key("org", "gpt"), 1_000, 0);
        c.cool(&model_key("org2", "gpt"), 1_000, 0);
        c.cool(&vendor_key("openai"), 1_000, 0);
        r.clear_credential("a");
        assert_eq!(c.until(&credential_key("org"), 0), None);
        assert_eq!(c.until(&model_key("org", "gpt"), 0), None);
        assert_eq!(c.until(&model_key("org2", "gpt"), 0), Some(1_000));
        assert_eq!(c.until(&vendor_key("openai"), 0), Some(1_000));
    }

    #[test]
    fn cooldown_table_stays_bounded_under_a_flood_of_expired_keys() {
        let c = Cooldowns::default();
        for i in 0..100_000u64 {
            c.cool(&format!("k{i}"), i + 1, i);
        }
        assert!(c.len() < 1_000, "{} entries", c.len());
    }

    #[test]
    fn u4_same_kind_names_it_mixed_or_cooling_gives_42908_with_earliest_recovery() {
        let rph = Skip::Limit {
            kind: LimitKind::Rph,
            retry_after_ms: Some(100_000),
        };
        let rpd = Skip::Limit {
            kind: LimitKind::Rpd,
            retry_after_ms: None,
        };
        let cool = Skip::Cooling {
            remaining_ms: 2_000,
        };
        assert_eq!(
            no_channel_left(&[rph]),
            (GatewayCode::RphLimit, Some(100_000))
        );
        assert_eq!(no_channel_left(&[rpd, rpd]).0, GatewayCode::RpdLimit);
        assert_eq!(
            no_channel_left(&[rph, cool]),
            (GatewayCode::UpstreamCooling, Some(2_000))
        );
        assert_eq!(no_channel_left(&[cool]).0, GatewayCode::UpstreamCooling);
        // ITPM and OTPM are minute token limits: 42905 like TPM.
        let itpm = Skip::Limit {
            kind: LimitKind::Itpm,
            retry_after_ms: Some(1),
        };
        let otpm = Skip::Limit {
            kind: LimitKind::Otpm,
            retry_after_ms: Some(2),
        };
        assert_eq!(
            no_channel_left(&[itpm, otpm]),
            (GatewayCode::TpmLimit, Some(1))
        );
    }
}
