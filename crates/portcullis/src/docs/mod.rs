//! The contract and the guides, as pages of this crate's documentation.
//!
//! The pages are Markdown files in `crates/portcullis/src/docs/` (the Redis store's
//! operations guide sits in `portcullis-redis`, the proxy's configuration reference and
//! running guide in `portcullis-proxy`), so they read the same on a code host and here;
//! every Rust block in them is compiled and run as a doctest.
#![doc = include_str!("index.md")]

/// Declares a documentation-only module whose text is the Markdown page `$file`.
macro_rules! page {
    ($(#[$m:meta])* $name:ident, $file:literal) => {
        $(#[$m])*
        #[doc = include_str!($file)]
        pub mod $name {}
    };
}

pub mod contract {
    //! What every layer must do, rule by rule: the ids (`C1`, `W8`, `D9` …) that code
    //! comments and test names refer to are defined in these pages.
    #![doc = include_str!("contract/index.md")]
    page!(layers, "contract/layers.md");
    page!(slots, "contract/slots.md");
    page!(windows, "contract/windows.md");
    page!(billing, "contract/billing.md");
    page!(upstream, "contract/upstream.md");
    page!(capacity, "contract/capacity.md");
    page!(failover, "contract/failover.md");
    page!(translation, "contract/translation.md");
    page!(keys, "contract/keys.md");
    page!(errors, "contract/errors.md");
    page!(distributed, "contract/distributed.md");
    page!(proxy, "contract/proxy.md");
    page!(scenarios, "contract/scenarios.md");
    page!(targets, "contract/targets.md");
}

pub mod guides {
    //! How to use the layers: stacking them in axum and in tonic, the gateway codes a
    //! client sees, and the benchmarks with how to reproduce them.
    #![doc = include_str!("guides/index.md")]
    page!(axum, "guides/axum.md");
    page!(tonic, "guides/tonic.md");
    page!(codes, "guides/codes.md");
    page!(benchmarks, "guides/benchmarks.md");
}
