//! The admission walk over a request's candidates (U1, U4) as a small step machine,
//! shared by the synchronous path in `call` and the response future (the shape of
//! `window/decide.rs`).

use super::layer::{ChannelFuture, Shared};
use super::{Held, UpstreamGuard};
use crate::time::ms;
use http::{Request, Response};
use portcullis_core::upstream::{RateEstimates, ScopeWindow, Skip, TokenMeasure, no_channel_left};
use portcullis_core::{
    Candidates, CapacityTake, ChannelRef, Chosen, Clock, Demand, Dialect, JointAdmission,
    JointItem, LayerKind, Rejection, Scope, StoreResult, UsageRecorder, WindowStore,
};
use std::sync::Arc;

/// What to do next with a request.
pub(crate) enum Step<St: WindowStore> {
    /// Await the answer for the windows of the channel being asked.
    Ask(St::Future<JointAdmission>),
    /// Await its windows decided with a capacity lease on it (see `crate::joint`).
    Join(ChannelFuture),
    /// Decided: the request goes on with what the walk kept.
    Done(Plan),
    /// Refused (U4, or a store failure that fails closed).
    Reject(Rejection),
}

/// The outcome of the admission walk.
pub(crate) struct Plan {
    /// The candidates left; `None` for all of them.
    kept: Option<Vec<ChannelRef>>,
    reserved: Option<(Arc<str>, Vec<Held>, Dialect)>,
    /// What the reservation learnt of the reserved channel's capacity.
    prefetched: Option<crate::extensions::Prefetched>,
}

/// The question out for one channel's windows.
struct Asked {
    items: Vec<JointItem>,
    /// What each window's token tier counts, in `items` order.
    measures: Vec<TokenMeasure>,
    dialect: Dialect,
    /// A capacity lease was asked for with the windows.
    joined: bool,
}

/// One request's walk over its candidates in order (see the [module docs](super)):
/// unregistered or unlimited channels are kept, cooling ones skipped, the request is
/// counted on the first channel with limits that has room, later channels with limits
/// are dropped.
pub(crate) struct Walk<St, C> {
    shared: Arc<Shared<St, C>>,
    candidates: Candidates,
    model: Option<Arc<str>>,
    /// The estimate under each vendor's rules: a channel is charged its own (U2).
    estimate: RateEstimates,
    /// The channel being looked at.
    at: usize,
    /// `None` while every candidate so far is kept (the usual case: the request keeps
    /// its list, nothing is allocated); the kept prefix is copied at the first drop.
    kept: Option<Vec<ChannelRef>>,
    skips: Vec<Skip>,
    reserved: Option<(Arc<str>, Vec<Held>, Dialect)>,
    prefetched: Option<crate::extensions::Prefetched>,
    asked: Option<Asked>,
}

/// What the response future needs once the inner service answers.
pub(crate) struct After<St, C> {
    shared: Arc<Shared<St, C>>,
    model: Option<Arc<str>>,
    recorder: UsageRecorder,
    /// The first channel left: the one served, unless the answer says otherwise.
    first: Option<Arc<str>>,
}

impl<St: WindowStore, C: Clock> Walk<St, C> {
    /// The walk for `candidates` serving `model`, and its first step.
    pub(crate) fn start(
        shared: Arc<Shared<St, C>>,
        candidates: Candidates,
        model: Option<Arc<str>>,
        estimate: RateEstimates,
    ) -> (Self, Step<St>) {
        let mut walk = Self {
            shared,
            candidates,
            model,
            estimate,
            at: 0,
            kept: None,
            skips: Vec::new(),
            reserved: None,
            prefetched: None,
            asked: None,
        };
        let step = walk.next();
        (walk, step)
    }

    /// Walks on from the channel at `self.at` until a store question or the end.
    fn next(&mut self) -> Step<St> {
        let shared = &*self.shared;
        let channels = self.candidates.channels();
        let model = self.model.as_deref();
        while let Some(c) = channels.get(self.at) {
            let i = self.at;
            let Some(scopes) = shared.config.registry.scopes(&c.name, model) else {
                keep(&mut self.kept, c);
                self.at += 1;
                continue;
            };
            let now = shared.config.clock.now();
            let cooldowns = shared.config.registry.cooldowns();
            // An empty table (the usual case) is one atomic load, no key built.
            let cooling = if cooldowns.is_empty() {
                None
            } else {
                cooldowns.any_until(&scopes.cooldown_keys(), now)
            };
            if let Some(until) = cooling {
                drop_from(&mut self.kept, channels, i);
                self.skips
                    .push(if until == portcullis_core::upstream::DISABLED {
                        Skip::Disabled
                    } else {
                        Skip::Cooling {
                            remaining_ms: until - now,
                        }
                    });
                self.at += 1;
                continue;
            }
            if scopes.window_count() == 0 {
                keep(&mut self.kept, c);
                self.at += 1;
                continue;
            }
            if self.reserved.is_some() {
                drop_from(&mut self.kept, channels, i);
                self.at += 1;
                continue;
            }
            // Every window of the channel (credential, credential + model, vendor),
            // all or nothing, in one store call (U1): a window without room leaves
            // every other one as it was.
            let estimate = self.estimate.of(scopes.dialect);
            let (items, measures): (Vec<JointItem>, Vec<TokenMeasure>) = scopes
                .windows()
                .map(|w| {
                    let item = JointItem {
                        key: w.key.clone(),
                        scope: Scope::Key,
                        policy: w.policy.clone(),
                        demand: Demand::tokens(estimate.of(w.measure)),
                    };
                    (item, w.measure)
                })
                .unzip();
            let join = shared
                .config
                .capacity
                .as_ref()
                .filter(|_| !c.is_unlimited());
            let step = match join {
                Some(j) => Step::Join((j.join)(&items, &c.name, c.capacity)),
                None => Step::Ask(shared.config.store.admit_all(&items)),
            };
            self.asked = Some(Asked {
                items,
                measures,
                dialect: scopes.dialect,
                joined: join.is_some(),
            });
            return step;
        }
        if self.kept.as_ref().is_some_and(Vec::is_empty) || channels.is_empty() {
            let (code, retry) = no_channel_left(&self.skips);
            tracing::debug!(code = code.code(), skips = ?self.skips, "no upstream channel usable");
            let r = Rejection::new(code, LayerKind::UpstreamLimit).with_retry_after(retry.map(ms));
            return self.reject(r);
        }
        Step::Done(Plan {
            kept: self.kept.take(),
            reserved: self.reserved.take(),
            prefetched: self.prefetched.take(),
        })
    }

    fn reject(&self, r: Rejection) -> Step<St> {
        if r.layer() == LayerKind::UpstreamLimit {
            self.shared
                .state
                .counters
                .refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Step::Reject(r)
    }

    /// The store's answer for the windows asked (an [`Ask`](Step::Ask) answer comes
    /// with [`CapacityTake::NotAsked`]).
    pub(crate) fn on_answer(
        &mut self,
        answer: StoreResult<(JointAdmission, CapacityTake)>,
    ) -> Step<St> {
        let (Some(asked), Some(c)) = (self.asked.take(), self.candidates.channels().get(self.at))
        else {
            return self.next();
        };
        let shared = &*self.shared;
        shared
            .state
            .failures
            .answered(LayerKind::UpstreamLimit, &answer);
        match answer {
            Ok((JointAdmission::Admitted(tickets), take)) => {
                if asked.joined {
                    self.prefetched = shared.config.capacity.as_ref().and_then(|j| {
                        crate::extensions::Prefetched::of(c.name.clone(), take, j.release.clone())
                    });
                }
                let held = asked
                    .items
                    .into_iter()
                    .zip(tickets)
                    .zip(asked.measures)
                    .map(|((it, ticket), measure)| Held {
                        key: it.key,
                        ticket,
                        measure,
                    })
                    .collect();
                self.reserved = Some((c.name.clone(), held, asked.dialect));
                keep(&mut self.kept, c);
            }
            Ok((JointAdmission::Exceeded { index, exceeded }, _)) => {
                let index = if index < asked.items.len() { index } else { 0 };
                let window = ScopeWindow {
                    key: asked.items[index].key.clone(),
                    policy: asked.items[index].policy.clone(),
                    measure: asked.measures[index],
                };
                drop_from(&mut self.kept, self.candidates.channels(), self.at);
                self.skips.push(Skip::Limit {
                    kind: window.kind_of(exceeded.binding()),
                    retry_after_ms: exceeded.retry_after_ms(),
                });
            }
            Err(e) => {
                match shared.state.failures.on_error(
                    shared.config.settings.failure_mode,
                    LayerKind::UpstreamLimit,
                    &e,
                ) {
                    None => keep(&mut self.kept, c),
                    Some(r) => return self.reject(r),
                }
            }
        }
        self.at += 1;
        self.next()
    }

    /// The request goes on: its guard on the reserved windows, its candidates as the
    /// walk kept them, [`Chosen`] set to the first (for a stack without a capacity
    /// layer).
    pub(crate) fn go<ReqB>(
        self,
        plan: Plan,
        req: &mut Request<ReqB>,
        recorder: UsageRecorder,
    ) -> (Option<UpstreamGuard<St>>, After<St, C>) {
        let guard = plan.reserved.map(|(channel, held, dialect)| UpstreamGuard {
            store: self.shared.config.store.clone(),
            channel,
            held,
            dialect,
            recorder: recorder.clone(),
            end: portcullis_core::CallEnd::Unanswered,
            moved: false,
            _in_flight: crate::gauge::InFlight::enter(LayerKind::UpstreamLimit),
        });
        let left = plan.kept.as_deref().unwrap_or(self.candidates.channels());
        let first = left.first().map(|c| c.name.clone());
        if let Some(first) = left.first() {
            req.extensions_mut().insert(Chosen(first.clone()));
        }
        if let Some(p) = plan.prefetched {
            req.extensions_mut().insert(p);
        }
        // Nothing dropped: the request keeps its candidate list as it was.
        if let Some(kept) = plan.kept {
            req.extensions_mut().insert(Candidates(kept.into()));
        }
        let after = After {
            shared: self.shared,
            model: self.model,
            recorder,
            first,
        };
        (guard, after)
    }
}

impl<St: WindowStore, C: Clock> After<St, C> {
    /// The inner service answered with `res`: the channel that served it (the answer's
    /// [`Chosen`], else the one the forwarder recorded, else the first kept) calibrates
    /// the local model (U3), and the guard learns the call was answered — and whether
    /// on another channel than the one it reserved, whose reservation then goes back.
    pub(crate) fn answered<B>(self, res: &Response<B>, guard: Option<&mut UpstreamGuard<St>>) {
        let served = res
            .extensions()
            .get::<Chosen>()
            .map(|c| c.0.name.clone())
            .or_else(|| self.recorder.channel())
            .or(self.first);
        if let Some(ch) = &served {
            self.shared.calibrate(ch, self.model.as_deref(), res);
        }
        if let Some(g) = guard {
            g.end = portcullis_core::CallEnd::Answered;
            g.moved = served.as_ref().is_some_and(|s| *s != g.channel);
        }
    }
}

fn keep(kept: &mut Option<Vec<ChannelRef>>, c: &ChannelRef) {
    if let Some(k) = kept.as_mut() {
        k.push(c.clone());
    }
}

fn drop_from(kept: &mut Option<Vec<ChannelRef>>, candidates: &[ChannelRef], i: usize) {
    kept.get_or_insert_with(|| candidates[..i].to_vec());
}
