//! The code every layer's service and layer type would otherwise write out again: the
//! inner-service accessors tower's own services have, and `Clone` for handle types.

// Each macro is used by the layers whose features are on; with fewer layers, some by none.
#![allow(unused_macros)]

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
/// its body, with its `Future` impl.
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
    };
}
