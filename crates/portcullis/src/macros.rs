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
