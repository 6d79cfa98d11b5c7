//! Models and channels as the data path uses them: prices, defaults, and the channels
//! that serve each model.

use crate::config::{Channel, Config, ModelConfig};
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tollgate_core::Dialect;

/// A channel ready to forward to.
#[derive(Debug)]
pub struct Route {
    /// Channel name.
    pub name: Arc<str>,
    /// The API format the channel speaks.
    pub dialect: Dialect,
    /// Base URL without a trailing slash.
    pub base_url: String,
    /// Credential header value, ready to inject.
    pub credential: Option<HeaderValue>,
    /// Share of traffic.
    pub weight: u32,
    /// Most in-flight requests (0 = unlimited).
    pub capacity: u32,
    /// Failover group: a request's candidates all share its first choice's group.
    pub group: Arc<str>,
    /// Its `tollgate_upstream_responses_total` counters.
    pub responses: crate::metrics::ResponseCounters,
}

/// Everything the request path needs to know about models and channels.
#[derive(Debug)]
pub struct Catalog {
    models: HashMap<String, ModelConfig>,
    routes: HashMap<String, Vec<Arc<Route>>>,
    next: AtomicUsize,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Upstream response-head timeout.
    pub upstream_timeout: Duration,
    /// Longest silence of an upstream body.
    pub upstream_idle_timeout: Duration,
    /// Longest time to receive a request body.
    pub body_read_timeout: Duration,
}

/// Default max output when neither the request nor the model names one.
pub const FALLBACK_MAX_OUTPUT: u64 = 4096;

impl Catalog {
    /// Builds the catalog; `fake://` base URLs are pointed at `fake_base` (the bundled
    /// fake upstream of the demo).
    pub fn new(config: &Config, fake_base: Option<&str>) -> Result<Self, String> {
        let mut routes: HashMap<String, Vec<Arc<Route>>> = HashMap::new();
        for ch in &config.channels {
            let route = Arc::new(route(ch, fake_base)?);
            for m in &ch.config.models {
                routes
                    .entry(m.get_ref().clone())
                    .or_default()
                    .push(route.clone());
            }
        }
        Ok(Self {
            models: config.raw.models.clone().into_iter().collect(),
            routes,
            next: AtomicUsize::new(0),
            max_body_bytes: config.raw.server.max_body_bytes,
            upstream_timeout: config.raw.server.upstream_timeout.0,
            upstream_idle_timeout: config.raw.server.upstream_idle_timeout.0,
            body_read_timeout: config.raw.server.body_read_timeout.0,
        })
    }

    /// A configured model.
    pub fn model(&self, id: &str) -> Option<&ModelConfig> {
        self.models.get(id)
    }

    /// Every configured model id.
    pub fn model_ids(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// Whether any channel serves `model` at all (else 50201, a configuration problem).
    pub fn has_channel(&self, model: &str) -> bool {
        self.routes.get(model).is_some_and(|r| !r.is_empty())
    }

    /// The channels that may serve `model` for a `dialect` client, in order of
    /// preference: the weighted round-robin pick first, then the others of the same
    /// failover group (Q2, F1).
    pub fn candidates(&self, model: &str, dialect: Dialect) -> Vec<Arc<Route>> {
        let Some(first) = self.pick(model, dialect) else {
            return Vec::new();
        };
        let mut v = vec![first.clone()];
        v.extend(
            self.routes
                .get(model)
                .into_iter()
                .flatten()
                .filter(|r| {
                    r.dialect == dialect
                        && r.weight > 0
                        && r.group == first.group
                        && !Arc::ptr_eq(r, &first)
                })
                .cloned(),
        );
        v
    }

    /// The route of a channel by name, among those serving `model`.
    pub fn route(&self, model: &str, name: &str) -> Option<Arc<Route>> {
        self.routes
            .get(model)?
            .iter()
            .find(|r| &*r.name == name)
            .cloned()
    }

    /// Picks a channel for `model` that speaks `dialect`, by weighted round-robin.
    pub fn pick(&self, model: &str, dialect: Dialect) -> Option<Arc<Route>> {
        let candidates: Vec<&Arc<Route>> = self
            .routes
            .get(model)?
            .iter()
            .filter(|r| r.dialect == dialect && r.weight > 0)
            .collect();
        let total: u64 = candidates.iter().map(|r| u64::from(r.weight)).sum();
        if total == 0 {
            return None;
        }
        let mut ticket = self.next.fetch_add(1, Ordering::Relaxed) as u64 % total;
        for r in &candidates {
            if ticket < u64::from(r.weight) {
                return Some((*r).clone());
            }
            ticket -= u64::from(r.weight);
        }
        None
    }
}

fn route(ch: &Channel, fake_base: Option<&str>) -> Result<Route, String> {
    let base_url = if ch.config.base_url.starts_with("fake://") {
        fake_base
            .ok_or_else(|| {
                format!(
                    "channel {:?} uses fake:// but no fake upstream runs",
                    ch.name
                )
            })?
            .trim_end_matches('/')
            .to_owned()
    } else {
        ch.config.base_url.trim_end_matches('/').to_owned()
    };
    let dialect = ch.config.vendor.dialect();
    let credential = ch
        .credential
        .as_deref()
        .map(|c| {
            let v = match dialect {
                Dialect::OpenAi => format!("Bearer {c}"),
                _ => c.to_owned(),
            };
            let mut v = HeaderValue::try_from(v).map_err(|_| {
                format!(
                    "channel {:?}: credential is not a valid header value",
                    ch.name
                )
            })?;
            v.set_sensitive(true);
            Ok::<_, String>(v)
        })
        .transpose()?;
    Ok(Route {
        name: ch.name.clone(),
        dialect,
        base_url,
        credential,
        weight: ch.config.weight,
        capacity: ch.config.capacity,
        group: Arc::from(ch.config.group.as_str()),
        responses: crate::metrics::ResponseCounters::new(&ch.name),
    })
}

/// The channels' provider limits for the upstream limit layer (U1): per credential
/// (shared by channels with the same credential id), per credential and model, and per
/// vendor.
pub fn upstream_registry(config: &Config) -> tollgate_core::upstream::UpstreamRegistry {
    use tollgate_core::upstream::{UpstreamChannel, UpstreamRegistry};
    let mut reg = UpstreamRegistry::new();
    for (vendor, l) in &config.raw.vendors {
        reg = reg.with_vendor(vendor.as_str(), *l);
    }
    for ch in &config.channels {
        reg = reg.with_channel(UpstreamChannel {
            name: ch.name.clone(),
            dialect: ch.config.vendor.dialect(),
            vendor: ch.config.vendor.as_str().into(),
            credential: ch.credential_id().into(),
            limits: ch.config.limits,
            model_limits: ch
                .config
                .model_limits
                .iter()
                .map(|(m, l)| (Arc::from(m.as_str()), *l))
                .collect(),
        });
    }
    reg
}
