//! The proxy's own request extensions: what each one says, who puts it in the
//! request, who reads it, and when — the gateway's half of the layer crate's table
//! ([`portcullis::extensions`], whose extensions the proxy also writes: the `Subject`,
//! `BillingProfile`, `Demand`, `Dialect`, `Candidates`, …).
//!
//! Each type lives with the step that makes it; this table is where they are read
//! together. Those marked *(crate)* are private to the proxy: no client or application
//! can set them.
//!
//! | extension | written by | read by | when |
//! |---|---|---|---|
//! | [`RequestTrace`](crate::telemetry::RequestTrace) | the `RequestTraceLayer` (the request span and the arrival time) | telemetry: the request span's model and key (`record_request`), each attempt's span (`AttemptTrace`) | first, around the whole stack; one `Arc`, cloned with every attempt's request |
//! | `CutNotice` *(crate, `stall.rs`)* | [`serve`](crate::serve), for each request of a connection | the `StallLayer`, which ends the connection of a stream that stalls (`OnCut`) | before the router |
//! | `NativeErrors` *(crate, `routes/api.rs`)* | the `/native/…` routes, and `native_for_key` for a key with `errors = "native"`, each with `Dialect::Native` | the error mapping reads the `Dialect::Native` beside it; `wire_dialect` takes both away below it, so the layers read the vendor's dialect from the path | above the error mapping; taken away just below it |
//! | `Arc<`[`KeyEntry`](crate::config::KeyEntry)`>` | authentication ([`KeyTable::authenticate`](crate::auth::KeyTable::authenticate)), with the key's `Subject` and `BillingProfile` | [`Prepare`](crate::prepare::Prepare) (the key's models, 403; its vendors), telemetry (the key's label and tenant on the request span) | after authentication, before `Prepare` |
//! | [`Facts`](crate::prepare::Facts) | [`Prepare`](crate::prepare::Prepare), once the body is read and inspected (with the `Demand` and the `Dialect`) | the forwarder (model, streaming, usage reporting, the continuation's object), telemetry (the request span's model and stream flag; each attempt's stream flag) | `Prepare`'s call, before the layers; the same `Arc` in every attempt |
//! | `InProcess` *(crate, `admin.rs`)* | the in-process [`Reloader`](crate::admin::Reloader) (the binary's `SIGHUP`) | `POST /admin/reload`, which then needs no admin token | on the reload request only |
