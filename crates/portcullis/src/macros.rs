//! The code every layer's service and layer type would otherwise write out again: the
//! inner-service accessors tower's own services have, and `Clone` for handle types.

// Each macro is used by the layers whose features are on; with fewer layers, some by none.
#![allow(unused_macros)]

/// Items compiled when any of the named features is on: the parts the layers share,
/// each with the layers that use it.
///
/// ```text
/// cfg_any! {
///     ["slots", "windows"]
///     mod subject;
/// }
/// ```
macro_rules! cfg_any {
    (@one [$($feature:literal),+] $item:item) => {
        #[cfg(any($(feature = $feature),+))]
        $item
    };
    ($features:tt $($item:item)*) => {
        $(cfg_any!(@one $features $item);)*
    };
}

/// `Clone` for a type whose fields are all cheap handles (`Arc`s, and an inner service
/// that is cloned when it is `Clone`), bounded only as written. `derive(Clone)` would
/// also ask the store, extractor and clock parameters to be `Clone`, which a layer's
/// service never needs: they live behind the shared `Arc`.
///
/// ```text
/// handle_clone!(impl<S: Clone, St, C> Clone for BillingGate<S, St, C> { inner, shared });
/// ```
macro_rules! handle_clone {
    (impl<$($p:ident $(: $bound:path)?),*> Clone for $ty:ty { $($field:ident),* $(,)? }) => {
        impl<$($p $(: $bound)?),*> Clone for $ty {
            fn clone(&self) -> Self {
                Self {
                    $($field: self.$field.clone()),*
                }
            }
        }
    };
}

/// `get_ref`, `get_mut` and `into_inner` of a service wrapping its inner service `S`
/// in a field named `inner` — the accessors tower's `ConcurrencyLimit` and `Retry` have.
/// The inner service's type parameter must be named `S`.
///
/// ```text
/// inner_service!(impl<S, St, C> BillingGate<S, St, C>);
/// ```
macro_rules! inner_service {
    (impl<$($p:ident $(: $bound:path)?),*> $ty:ty) => {
        impl<$($p $(: $bound)?),*> $ty {
            /// The inner service.
            pub fn get_ref(&self) -> &S {
                &self.inner
            }
            /// The inner service, mutably.
            pub fn get_mut(&mut self) -> &mut S {
                &mut self.inner
            }
            /// Unwraps the inner service.
            pub fn into_inner(self) -> S {
                self.inner
            }
        }
    };
}

/// A layer's service: `Clone` when its inner service is (the layer's state is behind
/// the shared `Arc`), and the inner-service accessors.
///
/// ```text
/// layer_service!(impl<S, St, C> BillingGate<S, St, C>);
/// ```
macro_rules! layer_service {
    (impl<S $(, $p:ident $(: $bound:path)?)*> $ty:ty) => {
        handle_clone!(impl<S: Clone $(, $p $(: $bound)?)*> Clone for $ty { inner, shared });
        inner_service!(impl<S $(, $p $(: $bound)?)*> $ty);
    };
}

/// What every layer built as the crate docs say ("How a layer is built") writes the
/// same way: `Clone` for `XLayer { config, state }`, and its `Layer` impl, which gives
/// the service `X { inner, shared }` one `Arc` of the config and the state
/// (`Shared { config, state }`).
///
/// ```text
/// layer_parts!(BillingGateLayer<St: BillingStore, C> => BillingGate, Shared);
/// ```
macro_rules! layer_parts {
    ($layer:ident<$($p:ident $(: $bound:path)?),*> => $service:ident, $shared:ident) => {
        impl<$($p: Clone $(+ $bound)?),*> Clone for $layer<$($p),*> {
            fn clone(&self) -> Self {
                Self {
                    config: self.config.clone(),
                    state: self.state.clone(),
                }
            }
        }

        impl<Inner, $($p: Clone $(+ $bound)?),*> tower_layer::Layer<Inner> for $layer<$($p),*> {
            type Service = $service<Inner, $($p),*>;

            fn layer(&self, inner: Inner) -> Self::Service {
                $service {
                    inner,
                    shared: std::sync::Arc::new($shared {
                        config: self.config.clone(),
                        state: self.state.clone(),
                    }),
                }
            }
        }
    };
}

/// A layer's `ResponseFuture`: a public newtype around the shared skeleton
/// `crate::future::Gate` (in its field `gate`), whose response holds `$guard<St>` in
/// its body, with its `Future` impl and a constructor for each state of the skeleton:
/// `rejected` (refused at once), `called` (the inner future, its guard and what the
/// layer does around it) and `deciding` (what the layer still waits for).
///
/// ```text
/// gate_future! {
///     /// Response future of [`BillingGate`](super::BillingGate).
///     pub struct ResponseFuture<S, ReqB, St, C = SystemClock>
///     holds BillingGuard, deciding Checking<S, ReqB, St, C>, around ()
///     where St: BillingStore;
/// }
/// ```
macro_rules! gate_future {
    (
        $(#[$doc:meta])*
        pub struct $future:ident<S, ReqB $(, $p:ident $(= $default:ty)?)*>
        holds $guard:ident, deciding $pending:ty, around $around:ty
        where St: $store:path $(, $q:ident: $bound:path)*;
    ) => {
        pin_project_lite::pin_project! {
            $(#[$doc])*
            pub struct $future<S, ReqB $(, $p $(= $default)?)*>
            where
                S: tower_service::Service<http::Request<ReqB>>,
                St: $store,
            {
                #[pin]
                gate: crate::future::Gate<S::Future, $guard<St>, $pending, $around>,
            }
        }

        impl<S, ReqB $(, $p)*, ResB> std::future::Future for $future<S, ReqB $(, $p)*>
        where
            S: tower_service::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
            S::Error: Into<crate::BoxError>,
            St: $store,
            $($q: $bound,)*
            ResB: http_body::Body,
        {
            type Output =
                Result<http::Response<crate::body::HoldBody<ResB, $guard<St>>>, crate::BoxError>;

            fn poll(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Self::Output> {
                self.project().gate.poll_gate(cx)
            }
        }

        impl<S, ReqB $(, $p)*> $future<S, ReqB $(, $p)*>
        where
            S: tower_service::Service<http::Request<ReqB>>,
            St: $store,
        {
            /// Refused at once.
            pub(crate) fn rejected(r: portcullis_core::Rejection) -> Self {
                Self {
                    gate: crate::future::Gate::rejected(r),
                }
            }
            /// Called: the inner future, holding `guard` (if any) in the response body.
            pub(crate) fn called(fut: S::Future, guard: Option<$guard<St>>, around: $around) -> Self {
                Self {
                    gate: crate::future::Gate::called(fut, guard, around),
                }
            }
            /// Still deciding: `pending` calls the inner service or refuses.
            pub(crate) fn deciding(pending: $pending) -> Self {
                Self {
                    gate: crate::future::Gate::deciding(pending),
                }
            }
        }
    };
}

/// Builder methods of a layer that set one field of its config each (see "How a layer
/// is built" in the crate docs): `name(value)` sets `self.config.<path>` and returns
/// the layer.
///
/// ```text
/// config_setters! {
///     /// Failure mode when the store cannot answer (D4); default open.
///     failure_mode(m: FailureMode) => failure_mode;
/// }
/// ```
macro_rules! config_setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $($field:ident).+;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.config.$($field).+ = $arg;
                self
            }
        )*
    };
}

/// A builder method that changes the type of one generic part of a layer's config
/// (its subject extractor, its clock): the config is rebuilt with `$field` replaced and
/// the other fields (`keeps`) moved over; the state stays the layer's. Struct update
/// syntax (`..c`) cannot change a type parameter, hence the list.
///
/// ```text
/// swap_config! {
///     /// Uses another clock.
///     fn clock<C2>(clock) -> AnchoredWindowLayer<St, X, C2>
///     keeps { store, extractor, max_wait, failure_mode }
/// }
/// ```
macro_rules! swap_config {
    (
        $(#[$doc:meta])*
        fn $name:ident<$new:ident $(: $bound:path)?>($field:ident) -> $layer:ident<$($out:ident),*>
        keeps { $($keep:ident),* $(,)? }
    ) => {
        $(#[$doc])*
        pub fn $name<$new $(: $bound)?>(self, $field: $new) -> $layer<$($out),*> {
            let c = self.config;
            $layer {
                config: Config {
                    $field,
                    $($keep: c.$keep),*
                },
                state: self.state,
            }
        }
    };
}

/// `Hold` for a guard that settles by how the inner call ended (a request refused
/// further in, or never seen by the provider, is refunded: L5, B4): it keeps the end
/// in its field `end`, read when it is dropped.
///
/// ```text
/// hold_call_end!(impl<St: WindowStore> Hold for WindowGuard<St>);
/// ```
macro_rules! hold_call_end {
    (impl<$($p:ident $(: $bound:path)?),*> Hold for $ty:ty) => {
        impl<$($p $(: $bound)?),*> crate::body::Hold for $ty {
            fn call_ended(&mut self, end: portcullis_core::CallEnd) {
                self.end = end;
            }
        }
    };
}

/// The builder methods the subject-limiting layers (slots, windows) have alike, on
/// their `config`, a `crate::subject::SubjectConfig`, and `state.failures`: another
/// extractor or clock, the failure mode, the failure stats and the store. Written in
/// the layer's `impl<St, X, C>` block.
///
/// ```text
/// subject_builders!(AnchoredWindowLayer);
/// ```
macro_rules! subject_builders {
    ($layer:ident) => {
        /// Uses another subject extractor (L6).
        pub fn extractor<X2>(self, extractor: X2) -> $layer<St, X2, C> {
            $layer {
                config: self.config.with_extractor(extractor),
                state: self.state,
            }
        }
        /// Uses another clock for subscription expiry (the store keeps its own time).
        pub fn clock<C2>(self, clock: C2) -> $layer<St, X, C2> {
            $layer {
                config: self.config.with_clock(clock),
                state: self.state,
            }
        }
        config_setters! {
            /// Failure mode when the store cannot answer (D4); default open.
            failure_mode(m: crate::failure::FailureMode) => failure_mode;
        }
        /// Store failures so far.
        pub fn failure_stats(&self) -> crate::failure::FailureStats {
            self.state.failures.snapshot()
        }
        /// The store.
        pub fn store(&self) -> &St {
            &self.config.store
        }
    };
}

/// A layer's public stats and the atomic counters behind them, field for field: the
/// stats struct (each counted field a `u64`, then the `and` fields, which are not
/// counted here), the counters struct (each counted field of the given atomic type,
/// bumped as things happen) and its `load`, the counts so far with the `and` fields
/// given.
///
/// ```text
/// counted_stats! {
///     /// Counters of the upstream limit layer.
///     #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
///     pub struct UpstreamStats counted by Counters {
///         /// Cooldowns set from provider signals.
///         cooldowns: AtomicU64,
///     } and {
///         /// Store failures.
///         failures: FailureStats,
///     }
/// }
/// ```
macro_rules! counted_stats {
    (
        $(#[$meta:meta])*
        pub struct $stats:ident counted by $counters:ident {
            $($(#[$fdoc:meta])* $field:ident: $cty:ty,)*
        } $(and {
            $($(#[$xdoc:meta])* $extra:ident: $xty:ty,)*
        })?
    ) => {
        $(#[$meta])*
        pub struct $stats {
            $($(#[$fdoc])* pub $field: u64,)*
            $($($(#[$xdoc])* pub $extra: $xty,)*)?
        }

        #[doc = concat!("The counts behind [`", stringify!($stats), "`].")]
        #[derive(Debug, Default)]
        pub(crate) struct $counters {
            $(pub(crate) $field: $cty,)*
        }

        impl $counters {
            #[doc = concat!("The counts so far, as [`", stringify!($stats), "`] with its other fields.")]
            pub(crate) fn load(&self $($(, $extra: $xty)*)?) -> $stats {
                $stats {
                    $($field: self.$field.load(std::sync::atomic::Ordering::Relaxed),)*
                    $($($extra,)*)?
                }
            }
        }
    };
}
