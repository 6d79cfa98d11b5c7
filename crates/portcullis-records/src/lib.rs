//! The portcullis gateway's records: client keys, tenants, tenant-scoped management
//! tokens and the audit trail of every change, in SQLite (the embedded default: a file,
//! nothing to install) or PostgreSQL (for many instances).
//!
//! - [`Records`] (`db.rs`): the database, its migrations, and every change as one
//!   transaction stamped with the next revision.
//! - [`Replica`] (`replica.rs`): the in-memory copy every lookup is answered from — no
//!   request waits for the database — brought up to date by revision, so a stale read
//!   cannot undo a newer change.
//! - [`Follower`] (`follow.rs`): keeps a replica up to date: notifications
//!   (PostgreSQL `LISTEN/NOTIFY`, or the change made in this process), and a poll of the
//!   revision as the safety net.
//! - [`LedgerRow`] (`ledger.rs`): the ledger, every billed attempt of every instance,
//!   written idempotently by attempt id, with the usage queries and the books' sums.
//! - `secret.rs`: generated secrets, shown once, stored as keyed hashes.
//! - `spec.rs`: the records, and the checks that need no configuration.
//!
//! Counters, leases and balances are not here: they stay in the gateway's store.

mod db;
mod follow;
mod ledger;
mod replica;
mod secret;
mod spec;

pub use db::{AuditRow, Backend, CHANNEL, NewKey, PAGE_MAX, Records, RecordsError, redact_url};
pub use follow::{Follower, FollowerStatus};
pub use ledger::{
    CorrectableQuery, LedgerCorrection, LedgerMoney, LedgerRow, LedgerUsage, Outcome, PendingQuery,
    PendingRow, USAGE_PAGE_MAX, UsagePage, UsageQuery, UsageTotals,
};
pub use replica::{Changes, Replica};
pub use secret::{Digest, Hasher, Secret, new_id, random};
pub use spec::{
    BudgetSpec, Invalid, KeyRecord, KeySpec, KeyState, Millis, NAME_MAX, SecretRecord,
    SubscriptionSpec, TenantRecord, TenantSpec, TokenRecord, check_key, check_tenant,
};
