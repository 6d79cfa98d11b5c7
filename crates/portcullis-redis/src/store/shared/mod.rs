//! The calls decided in Redis alone, without a quota block — billing's reservations
//! and settlements ([`billing`]), a window's settlement ([`windows`]) — and the
//! attempts whose settlement failed ([`failed`]). They sit beneath the block book: the
//! book sends them for its blocks (a money block's reservation and settlement, a window
//! block's give-back), and the operations above it for what no block decides.

mod billing;
mod failed;
mod windows;

pub use billing::MAX_EXACT_MONEY;
pub(crate) use billing::{
    SettleReply, SharedBilling, exact, failed, period, registry_books, reply_err,
};
pub(crate) use windows::settle_window;
