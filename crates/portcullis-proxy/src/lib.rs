//! The ready portcullis gateway (the proxy rules, P1–P6): an axum router built from the
//! portcullis layers, a TOML configuration, and a pooled upstream client.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_proxy::{Config, Gateway};
//! let config = Config::load("portcullis.toml".as_ref())?;
//! let listen = config.server().listen;
//! let app = Gateway::new(config, portcullis::core::MemoryStore::new()).router()?;
//! let listener = tokio::net::TcpListener::bind(listen).await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! Its modules, from the outside in (imports only go down this list, never back up):
//! [`app`] assembles the [`Gateway`] from the request routes, the reloadable stack and
//! the admin routes; [`forward`] sends an attempt upstream; [`telemetry`] traces it;
//! [`prepare`] reads and inspects the request; [`catalog`] knows the models and
//! channels; [`config`] reads the file, and reads none of the others but [`reserve`],
//! the rule of a request's money hold (B8), which reads nothing of the crate. [`store`]
//! opens the store a gateway is built on, [`serve`] serves it.
#![warn(missing_docs)]
#![deny(unreachable_pub)]

pub mod admin;
pub mod app;
pub mod auth;
pub mod books;
pub mod catalog;
pub mod config;
pub mod docs;
pub mod extensions;
pub mod forward;
pub mod homes;
pub mod keys;
pub mod ledger;
pub mod metrics;
pub mod pages;
pub mod prepare;
pub mod reserve;
pub mod resolve_pending;
mod routes;
mod running;
mod seed;
pub mod serve;
pub mod sink;
pub mod stall;
pub mod store;
pub mod telemetry;

pub use app::Gateway;
pub use config::{Config, ConfigError};
