//! The proxy's guides, as Markdown pages in `crates/portcullis-proxy/src/docs/` whose
//! Rust is compiled as doctests.

pub mod running {
    //! Installing and running the `portcullis` binary, its pages and its traces.
    #![doc = include_str!("running.md")]
}

pub mod configuration {
    //! Every setting of the proxy's configuration file.
    #![doc = include_str!("configuration.md")]
}
