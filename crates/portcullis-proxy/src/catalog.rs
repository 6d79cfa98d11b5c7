//! Models and channels as the data path uses them: prices, defaults, and the channels
//! that serve each model.
//!
//! Imports go one way: the catalog reads [`crate::config`] (and gives each channel its
//! [`crate::metrics`] counters); the request path — [`crate::prepare`],
//! [`crate::forward`], [`crate::telemetry`] — reads the catalog, never the reverse.

use crate::config::{Channel, Config, ModelSettings};
use http::HeaderValue;
use portcullis_core::capacity::ChannelRef;
use portcullis_core::{Candidates, Dialect, Price};
use portcullis_dialects::translate::{Wire, translates};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
    /// Its `portcullis_upstream_responses_total` counters.
    pub responses: crate::metrics::ResponseCounters,
    /// The channel is the bundled fake upstream (`fake://`) or on a loopback address,
    /// where the fake runs: the fake's `x-fake-*` control headers are forwarded to it.
    pub fake_controls: bool,
    /// Public model name → the provider's id for it on this channel, where they differ.
    upstream_models: Vec<(String, Arc<str>)>,
}

impl Route {
    /// The id this channel's provider knows the public `model` by (X1): its
    /// `upstream_models` entry, else the public name itself.
    pub fn upstream_model(&self, model: &str) -> Option<&Arc<str>> {
        self.upstream_models
            .iter()
            .find(|(public, _)| public == model)
            .map(|(_, id)| id)
    }
}

/// Maps looked up by model name on every request (names come from configuration).
type Map<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// The weighted round-robin choices for one model and client dialect, built once so
/// a request takes a reference-counted list instead of building one.
#[derive(Debug, Default)]
struct Choices {
    total: u64,
    picks: Vec<Pick>,
}

/// One channel a request may be sent to first: its route, its weight, and the
/// candidates it heads (itself, then the others of its failover group, in channel
/// order; F1, Q2) as the layers read them.
#[derive(Debug)]
struct Pick {
    first: Arc<Route>,
    weight: u64,
    list: Candidates,
}

/// Everything the request path needs to know about models and channels.
#[derive(Debug)]
pub struct Catalog {
    models: Map<ModelSettings>,
    /// Per model some channel serves as another configured model (`upstream_models`):
    /// the dearest rates of all it may be served as, which its reservation is made
    /// at (the attempt is then settled at the price of the model that served it).
    reserve_prices: Map<Price>,
    routes: Map<Vec<Arc<Route>>>,
    /// Per model, per client dialect (in [`dialect_index`] order): the channels of the
    /// client's own vendor.
    choices: Map<[Choices; 4]>,
    /// Per model, per client dialect: every channel whose vendor the client's
    /// generation requests translate to (X1), the client's own vendor among them.
    reach: Map<[Choices; 4]>,
    next: AtomicUsize,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Upstream response-head timeout.
    pub upstream_timeout: Duration,
    /// Longest silence of an upstream body.
    pub upstream_idle_timeout: Duration,
    /// Longest time to receive a request body.
    pub body_read_timeout: Duration,
    /// What a request holds in money while it runs (`[billing]`, B8).
    pub reservation: crate::reserve::Reservation,
}

impl Catalog {
    /// Builds the catalog; `fake://` base URLs are pointed at `fake_base` (the bundled
    /// fake upstream of the demo).
    pub fn new(config: &Config, fake_base: Option<&str>) -> Result<Self, String> {
        let mut routes: Map<Vec<Arc<Route>>> = Map::default();
        for ch in &config.channels {
            let route = Arc::new(route(ch, fake_base)?);
            for m in &ch.models {
                routes.entry(m.clone()).or_default().push(route.clone());
            }
        }
        let choices: Map<[Choices; 4]> = routes
            .iter()
            .map(|(model, rs)| {
                let per_dialect = DIALECTS.map(|d| choices(rs, |v| v == d));
                (model.clone(), per_dialect)
            })
            .collect();
        let reach: Map<[Choices; 4]> = routes
            .iter()
            .map(|(model, rs)| {
                let per_dialect = DIALECTS.map(|d| self::choices(rs, |v| translates(d, v)));
                (model.clone(), per_dialect)
            })
            .collect();
        let server = config.server();
        let models: Map<ModelSettings> = config.models().clone().into_iter().collect();
        let mut reserve_prices: Map<Price> = Map::default();
        for (public, rs) in &routes {
            let Some(own) = models.get(public) else {
                continue;
            };
            for served in rs.iter().filter_map(|r| r.upstream_model(public)) {
                if let Some(m) = models.get(&**served) {
                    let at = reserve_prices.entry(public.clone()).or_insert(own.price);
                    *at = at.dearest(&m.price);
                }
            }
        }
        Ok(Self {
            models,
            reserve_prices,
            routes,
            choices,
            reach,
            next: AtomicUsize::new(0),
            max_body_bytes: server.max_body_bytes,
            upstream_timeout: server.upstream_timeout,
            upstream_idle_timeout: server.upstream_idle_timeout,
            body_read_timeout: server.body_read_timeout,
            reservation: config.billing().reservation,
        })
    }

    /// A configured model.
    pub fn model(&self, id: &str) -> Option<&ModelSettings> {
        self.models.get(id)
    }

    /// The price a request for `model` reserves at: its own, or the dearest rates of
    /// the configured models its channels serve it as.
    pub fn reserve_price<'a>(&'a self, model: &'a ModelSettings, id: &str) -> &'a Price {
        self.reserve_prices.get(id).unwrap_or(&model.price)
    }

    /// The price an attempt of `model` on `route` is settled at: that of the model the
    /// channel serves it as, when that is a configured model, else the model's own.
    pub fn served_price(&self, model: &str, route: &Route) -> Price {
        route
            .upstream_model(model)
            .and_then(|id| self.models.get(&**id))
            .or_else(|| self.models.get(model))
            .map(|m| m.price)
            .unwrap_or_default()
    }

    /// Every configured model id.
    pub fn model_ids(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// Whether a channel serves `model` for a `dialect` client. Takes no round-robin
    /// turn (a check must not shift which channel the next request gets).
    pub fn serves(&self, model: &str, dialect: Dialect) -> bool {
        self.serves_in(model, Reach::Own(dialect))
    }

    /// Whether a channel serves `model` for a request of `reach`.
    pub fn serves_in(&self, model: &str, reach: Reach) -> bool {
        self.table(reach)
            .get(model)
            .is_some_and(|c| c[dialect_index(reach.client())].total > 0)
    }

    fn table(&self, reach: Reach) -> &Map<[Choices; 4]> {
        match reach {
            Reach::Own(_) => &self.choices,
            Reach::Translated(_) => &self.reach,
        }
    }

    /// The channels that may serve `model` for a `dialect` client, in order of
    /// preference: the weighted round-robin pick first, then the others of the same
    /// failover group (Q2, F1). Built once: no allocation per request.
    pub fn candidate_list(&self, model: &str, dialect: Dialect) -> Option<Candidates> {
        self.candidates_in(model, Reach::Own(dialect))
    }

    /// [`Catalog::candidate_list`] among the channels of `reach`.
    pub fn candidates_in(&self, model: &str, reach: Reach) -> Option<Candidates> {
        self.choose(model, reach).map(|p| p.list.clone())
    }

    /// The one candidate `channel`, if it serves `model` to a `dialect` client: where a
    /// request about a provider-side object must go (P6).
    pub fn home_candidates(
        &self,
        model: &str,
        channel: &str,
        dialect: Dialect,
    ) -> Option<Candidates> {
        let r = self.route(model, channel)?;
        (r.dialect == dialect).then(|| {
            Candidates::new([ChannelRef {
                name: r.name.clone(),
                capacity: r.capacity,
            }])
        })
    }

    /// Picks a channel for `model` that speaks `dialect`, by weighted round-robin.
    pub fn pick(&self, model: &str, dialect: Dialect) -> Option<Arc<Route>> {
        self.pick_in(model, Reach::Own(dialect))
    }

    /// [`Catalog::pick`] among the channels of `reach`.
    pub fn pick_in(&self, model: &str, reach: Reach) -> Option<Arc<Route>> {
        self.choose(model, reach).map(|p| p.first.clone())
    }

    /// The next weighted round-robin turn for `model` among the channels of `reach`.
    fn choose(&self, model: &str, reach: Reach) -> Option<&Pick> {
        let c = &self.table(reach).get(model)?[dialect_index(reach.client())];
        if c.total == 0 {
            return None;
        }
        let mut ticket = self.next.fetch_add(1, Ordering::Relaxed) as u64 % c.total;
        c.picks.iter().find(|p| {
            let hit = ticket < p.weight;
            ticket = ticket.saturating_sub(p.weight);
            hit
        })
    }

    /// The route of a channel by name, among those serving `model`.
    pub fn route(&self, model: &str, name: &str) -> Option<Arc<Route>> {
        self.routes
            .get(model)?
            .iter()
            .find(|r| &*r.name == name)
            .cloned()
    }
}

/// Which channels a request may go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Only channels of the client's own vendor: requests with no translation
    /// (embeddings, token counts, images, videos, objects, a continued response).
    Own(Dialect),
    /// Every channel whose vendor the client's generation request translates to (X1).
    Translated(Dialect),
}

impl Reach {
    /// The channels a request of a `dialect` client for `operation` at `path` may go
    /// to: every generation API translates (X1) — OpenAI chat completions and
    /// Responses, Anthropic messages, Gemini generateContent — except a Responses
    /// request that `continues` a response held by its OpenAI home; everything else
    /// (embeddings, token counts, images, objects) stays with its own vendor.
    pub fn of(
        dialect: Dialect,
        operation: portcullis_dialects::Operation,
        path: &str,
        continues: bool,
    ) -> Self {
        let generation = operation == portcullis_dialects::Operation::Generate
            && match Wire::of(dialect, path) {
                Some(Wire::Responses) => !continues,
                Some(_) => true,
                None => false,
            };
        if generation {
            Self::Translated(dialect)
        } else {
            Self::Own(dialect)
        }
    }

    /// The client's dialect.
    pub fn client(self) -> Dialect {
        match self {
            Self::Own(d) | Self::Translated(d) => d,
        }
    }
}

const DIALECTS: [Dialect; 4] = [
    Dialect::OpenAi,
    Dialect::Anthropic,
    Dialect::Gemini,
    Dialect::Native,
];

pub(crate) fn dialect_index(d: Dialect) -> usize {
    match d {
        Dialect::OpenAi => 0,
        Dialect::Anthropic => 1,
        Dialect::Gemini => 2,
        Dialect::Native => 3,
    }
}

/// The round-robin choices among the `routes` whose vendor `serves`.
fn choices(routes: &[Arc<Route>], serves: impl Fn(Dialect) -> bool) -> Choices {
    let eligible: Vec<&Arc<Route>> = routes
        .iter()
        .filter(|r| serves(r.dialect) && r.weight > 0)
        .collect();
    let picks = eligible
        .iter()
        .map(|first| {
            let list = std::iter::once(*first)
                .chain(
                    eligible
                        .iter()
                        .copied()
                        .filter(|r| r.group == first.group && !Arc::ptr_eq(r, first)),
                )
                .map(|r| ChannelRef {
                    name: r.name.clone(),
                    capacity: r.capacity,
                })
                .collect::<Vec<_>>();
            Pick {
                first: Arc::clone(first),
                weight: u64::from(first.weight),
                list: Candidates(list.into()),
            }
        })
        .collect::<Vec<_>>();
    Choices {
        total: picks.iter().map(|p| p.weight).sum(),
        picks,
    }
}

/// Whether `base_url` is on this machine's loopback interface.
fn is_loopback(base_url: &str) -> bool {
    let Ok(uri) = base_url.parse::<http::Uri>() else {
        return false;
    };
    match uri.host() {
        Some("localhost") => true,
        Some(h) => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

fn route(ch: &Channel, fake_base: Option<&str>) -> Result<Route, String> {
    let fake = ch.is_fake();
    let base_url = if fake {
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
        ch.base_url.trim_end_matches('/').to_owned()
    };
    let dialect = ch.vendor.dialect();
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
        weight: ch.weight,
        capacity: ch.capacity,
        group: Arc::from(ch.group.as_str()),
        responses: crate::metrics::ResponseCounters::new(&ch.name),
        fake_controls: fake || is_loopback(&ch.base_url),
        upstream_models: ch
            .upstream_models
            .iter()
            .filter(|(public, id)| public != id)
            .map(|(public, id)| (public.clone(), Arc::from(id.as_str())))
            .collect(),
    })
}

/// The channels' provider limits for the upstream limit layer (U1): per credential
/// (shared by channels with the same credential id), per credential and model, and per
/// vendor.
pub fn upstream_registry(config: &Config) -> portcullis_core::upstream::UpstreamRegistry {
    use portcullis_core::upstream::{UpstreamChannel, UpstreamRegistry};
    let mut reg = UpstreamRegistry::new();
    for (vendor, l) in config.vendors() {
        reg = reg.with_vendor(vendor.as_str(), *l);
    }
    for ch in &config.channels {
        reg = reg.with_channel(UpstreamChannel {
            name: ch.name.clone(),
            dialect: ch.vendor.dialect(),
            vendor: ch.vendor.as_str().into(),
            credential: ch.credential_id.as_str().into(),
            limits: ch.limits,
            model_limits: ch
                .model_limits
                .iter()
                .map(|(m, l)| (Arc::from(m.as_str()), *l))
                .collect(),
        });
        // The provider's limits of the model a channel serves (X1): windows and
        // cooldowns by the channel's id for it.
        for (public, id) in &ch.upstream_models {
            reg = reg.serving_as(&ch.name, public.as_str(), id.as_str());
        }
    }
    reg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let text = r#"
[keys.k]
key = "sk-k"
tenant = "t"

[tenants.t]
balance = 1000

[channels.a]
vendor = "openai"
base_url = "http://127.0.0.1:9"
models = ["m"]
weight = 2
group = "g1"

[channels.b]
vendor = "openai"
base_url = "http://127.0.0.1:9"
models = ["m"]
group = "g1"

[channels.c]
vendor = "openai"
base_url = "http://127.0.0.1:9"
models = ["m"]
group = "g2"

[channels.d]
vendor = "anthropic"
base_url = "http://127.0.0.1:9"
models = ["m"]

[models.m]
price = { input_per_mtok = 1, output_per_mtok = 1 }
"#;
        let config = Config::parse(text).expect("test config");
        Catalog::new(&config, None).expect("catalog")
    }

    #[test]
    fn x1_a_model_served_as_other_models_reserves_at_their_dearest_rates() {
        let text = r#"
[channels.a]
vendor = "openai"
base_url = "http://127.0.0.1:9"
models = ["smart", "gpt"]
upstream_models = { smart = "gpt" }

[channels.b]
vendor = "anthropic"
base_url = "http://127.0.0.1:9"
models = ["smart", "claude"]
upstream_models = { smart = "claude", claude = "claude-20250929" }

[channels.c]
vendor = "gemini"
base_url = "http://127.0.0.1:9"
models = ["smart"]
upstream_models = { smart = "gemini-unpriced" }

[models.smart]
price = { input_per_mtok = 1, output_per_mtok = 1 }
[models.gpt]
price = { input_per_mtok = 2, output_per_mtok = 8 }
[models.claude]
price = { input_per_mtok = 3, output_per_mtok = 5, cached_input_per_mtok = 1 }
"#;
        let config = Config::parse(text).expect("test config");
        let cat = Catalog::new(&config, None).expect("catalog");
        let smart = cat.model("smart").unwrap();
        let p = cat.reserve_price(smart, "smart");
        assert_eq!(
            (p.input_per_mtok, p.output_per_mtok, p.cached_input_per_mtok),
            (3, 8, 1)
        );
        // A model served under its own name, or as an unpriced id, reserves at its own.
        let claude = cat.model("claude").unwrap();
        assert_eq!(cat.reserve_price(claude, "claude"), &claude.price);
        // Each attempt is settled at what served it.
        let route = |n: &str| cat.route("smart", n).unwrap();
        assert_eq!(
            cat.served_price("smart", &route("a")),
            cat.model("gpt").unwrap().price
        );
        assert_eq!(cat.served_price("smart", &route("b")), claude.price);
        assert_eq!(cat.served_price("smart", &route("c")), smart.price);
        assert_eq!(
            &**route("b").upstream_model("claude").unwrap(),
            "claude-20250929"
        );
        assert!(route("a").upstream_model("gpt").is_none());
    }

    #[test]
    fn x1_provider_limits_follow_the_model_a_channel_serves() {
        let text = r#"
[channels.a]
vendor = "anthropic"
base_url = "http://127.0.0.1:9"
credential_id = "acct"
models = ["smart", "clever"]
upstream_models = { smart = "claude-4", clever = "claude-4" }
model_limits = { "claude-4" = { rpm = 50 } }

[models.smart]
price = { input_per_mtok = 1 }
[models.clever]
price = { input_per_mtok = 1 }
"#;
        let config = Config::parse(text).expect("limits keyed by the channel's id are valid");
        let reg = upstream_registry(&config);
        let keys = |m: &str| -> Vec<String> {
            reg.scopes("a", Some(m))
                .unwrap()
                .windows()
                .map(|w| w.key.to_string())
                .collect()
        };
        let claude = portcullis_core::upstream::model_key("acct", "claude-4");
        assert_eq!(keys("smart"), std::slice::from_ref(&claude));
        assert_eq!(keys("clever"), [claude]);
        let unserved = text.replace(r#""claude-4" = { rpm"#, r#""claude-5" = { rpm"#);
        assert!(
            Config::parse(&unserved).is_err(),
            "limits of a model the channel does not serve"
        );
    }

    fn names(c: &Candidates) -> Vec<String> {
        c.channels().iter().map(|r| r.name.to_string()).collect()
    }

    #[test]
    fn p2_fake_controls_go_to_loopback_channels_only() {
        for (url, want) in [
            ("http://127.0.0.1:9100", true),
            ("http://127.8.0.1", true),
            ("http://localhost:8080/", true),
            ("http://[::1]:9", true),
            ("https://api.openai.com", false),
            ("http://10.0.0.1:80", false),
            ("http://127.0.0.1.example.com", false),
        ] {
            assert_eq!(is_loopback(url), want, "{url}");
        }
    }

    #[test]
    fn f1_q2_prebuilt_candidate_lists_follow_weights_groups_and_dialect() {
        let cat = catalog();
        // Weights 2 / 1 / 1 over a, b, c: a twice, then b, then c; each list is the
        // pick, then the others of its group in channel order.
        let seen: Vec<Vec<String>> = (0..8)
            .map(|_| names(&cat.candidate_list("m", Dialect::OpenAi).expect("a list")))
            .collect();
        let (ab, ba, c) = (vec!["a", "b"], vec!["b", "a"], vec!["c"]);
        let expect = [&ab, &ab, &ba, &c, &ab, &ab, &ba, &c];
        for (got, want) in seen.iter().zip(expect) {
            assert_eq!(got, want, "{seen:?}");
        }
        // The forwarder's own pick (no capacity layer) takes the same turns.
        let picked = catalog();
        let firsts: Vec<String> = (0..8)
            .map(|_| picked.pick("m", Dialect::OpenAi).unwrap().name.to_string())
            .collect();
        assert_eq!(firsts, ["a", "a", "b", "c", "a", "a", "b", "c"]);
        // Checking whether a model is served takes no turn.
        assert!(cat.serves("m", Dialect::OpenAi) && !cat.serves("m", Dialect::Gemini));
        assert_eq!(
            names(&cat.candidate_list("m", Dialect::OpenAi).unwrap()),
            ["a", "b"]
        );
        assert_eq!(
            names(&cat.candidate_list("m", Dialect::Anthropic).unwrap()),
            ["d"]
        );
        assert!(cat.candidate_list("m", Dialect::Gemini).is_none());
        assert!(cat.candidate_list("unknown", Dialect::OpenAi).is_none());
    }

    #[test]
    fn x1_a_translated_request_reaches_every_vendor_it_translates_to() {
        let cat = catalog();
        // OpenAI channels a, b, c (weights 2, 1, 1) and Anthropic channel d (1).
        let seen: Vec<Vec<String>> = (0..5)
            .map(|_| {
                names(
                    &cat.candidates_in("m", Reach::Translated(Dialect::Anthropic))
                        .unwrap(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                vec!["a", "b"],
                vec!["a", "b"],
                vec!["b", "a"],
                vec!["c"],
                vec!["d"]
            ]
        );
        // Its own vendor only, as before, for requests that do not translate.
        assert_eq!(
            names(
                &cat.candidates_in("m", Reach::Own(Dialect::Anthropic))
                    .unwrap()
            ),
            ["d"]
        );
        // Gemini does not translate (yet): nothing of another vendor.
        // A Gemini client's generation reaches them too; its other requests do not.
        assert!(cat.serves_in("m", Reach::Translated(Dialect::Gemini)));
        assert!(!cat.serves_in("m", Reach::Own(Dialect::Gemini)));
        assert!(!cat.serves_in("m", Reach::Translated(Dialect::Native)));
        assert!(cat.serves_in("m", Reach::Translated(Dialect::OpenAi)));
    }

    #[test]
    fn x1_every_generation_api_translates_and_nothing_else() {
        use portcullis_dialects::Operation::{CountTokens, Embed, Generate};
        let t = |d, op, path| Reach::of(d, op, path, false);
        for (d, path) in [
            (Dialect::OpenAi, "/v1/chat/completions"),
            (Dialect::OpenAi, "/native/v1/chat/completions"),
            (Dialect::OpenAi, "/v1/responses"),
            (Dialect::Anthropic, "/v1/messages"),
            (Dialect::Gemini, "/v1beta/models/m:generateContent"),
            (
                Dialect::Gemini,
                "/v1beta/models/m:streamGenerateContent?alt=sse",
            ),
        ] {
            assert_eq!(t(d, Generate, path), Reach::Translated(d), "{path}");
        }
        // A Responses request continuing an OpenAI-held response stays with OpenAI.
        assert_eq!(
            Reach::of(Dialect::OpenAi, Generate, "/v1/responses", true),
            Reach::Own(Dialect::OpenAi)
        );
        assert_eq!(
            t(Dialect::OpenAi, Embed, "/v1/embeddings"),
            Reach::Own(Dialect::OpenAi)
        );
        assert_eq!(
            t(Dialect::Anthropic, CountTokens, "/v1/messages/count_tokens"),
            Reach::Own(Dialect::Anthropic)
        );
        assert_eq!(
            t(Dialect::Gemini, Embed, "/v1beta/models/m:embedContent"),
            Reach::Own(Dialect::Gemini)
        );
    }
}
