//! Leases and tickets handed out from blocks: settled, released and renewed in memory
//! while their block lives, in Redis once it was given back.

use super::BlockBook;
use crate::client::Client;
use crate::codec;
use crate::future::RedisStoreFuture;
use crate::keys::Keys;
use crate::scripts::args::{LeaseReleaseArgs, SlotRenewArgs, SlotRenewBlockArgs, WindowSettleArgs};
use portcullis_core::blocks::{ReleaseLocal, RenewLocal, SettleLocal, borrowed_lease};
use portcullis_core::{LeaseId, Millis, Outcome, WindowTicket};
use std::sync::Arc;

/// Settles `ticket` of window state `state` if a block handed it out: in memory,
/// giving the block back if that was its last request, or — its block handed over
/// while it was in flight — in Redis under the record the block left for it (D9:
/// keyed, so sent again until it lands). `Err`: settle it in Redis as this ordinary
/// ticket (not a block held here).
pub(crate) fn settle(
    book: Option<&Arc<BlockBook>>,
    state: &str,
    ticket: WindowTicket,
    outcome: Outcome,
) -> Result<RedisStoreFuture<()>, WindowTicket> {
    if ticket.borrowed == 0 {
        return Err(ticket);
    }
    let Some(book) = book else {
        return Ok(RedisStoreFuture::ready(Ok(())));
    };
    let answer = book.table().settle(state, &ticket, outcome);
    match answer {
        SettleLocal::Done(back) => {
            if let Some(back) = back {
                book.give_back(back);
            }
            Ok(RedisStoreFuture::ready(Ok(())))
        }
        SettleLocal::Handed {
            block,
            requests,
            index,
        } => {
            let c = &book.client;
            let args = WindowSettleArgs {
                time: c.time(),
                doubles: codec::settle_args(c.amount_ttl_ms(), &ticket, outcome),
                record: Some(handed_record(block, requests, index)),
            };
            Ok(c.batched(Keys::window_script(state.to_owned()), args, |_: i64| Ok(())))
        }
        SettleLocal::Shared => Err(WindowTicket {
            borrowed: 0,
            // Not a block held here: corrected unkeyed.
            id: 0,
            ..ticket
        }),
    }
}

/// Releases `lease` of `slots` if a block handed it out; `None`: it is a lease of its
/// own.
pub(crate) fn release(
    book: Option<&Arc<BlockBook>>,
    slots: &str,
    lease: LeaseId,
) -> Option<RedisStoreFuture<()>> {
    borrowed_lease(lease)?;
    let Some(book) = book else {
        return Some(RedisStoreFuture::ready(Ok(())));
    };
    let answer = book.table().release(slots, lease);
    Some(match answer {
        ReleaseLocal::Done(back) => {
            if let Some(back) = back {
                book.give_back(back);
            }
            RedisStoreFuture::ready(Ok(()))
        }
        ReleaseLocal::Member { shared, index } => book.client.batched(
            vec![slots.to_owned()],
            LeaseReleaseArgs {
                member: format!("{}:{index}", book.client.member(shared)),
            },
            |_: i64| Ok(()),
        ),
    })
}

/// Renews `lease` of `slots` if a block handed it out (`None`: it is a lease of its
/// own): in memory while the block's shared leases live long enough, else all of them
/// in one call (or, its block given back while it was held, that one lease).
pub(crate) fn renew(
    book: Option<&Arc<BlockBook>>,
    slots: &str,
    lease: LeaseId,
    ttl: Millis,
) -> Option<RedisStoreFuture<bool>> {
    borrowed_lease(lease)?;
    let Some(book) = book else {
        return Some(RedisStoreFuture::ready(Ok(false)));
    };
    let c = &book.client;
    let now = book.now();
    // As for a plain lease (see `SlotStore::renew`): leases a failover may have lost
    // are put back by their renewal (D10).
    let restore = c.slot_moved_within(slots, ttl);
    let answer = book.table().renew(slots, lease, ttl, now);
    Some(match answer {
        RenewLocal::Gone => RedisStoreFuture::ready(Ok(false)),
        RenewLocal::Alive => RedisStoreFuture::ready(Ok(true)),
        RenewLocal::Member { shared, index } => {
            let args = SlotRenewArgs {
                time: c.time(),
                ttl,
                member: format!("{}:{index}", c.member(shared)),
                restore,
            };
            c.eval(vec![slots.to_owned()], args, |r: i64| Ok(r == 1))
        }
        RenewLocal::Renew {
            block,
            shared,
            size,
        } => {
            let args = SlotRenewBlockArgs {
                time: c.time(),
                ttl,
                base: c.member(shared),
                count: size,
                restore,
            };
            let call = c.eval(vec![slots.to_owned()], args, |r: i64| Ok(r == 1));
            let (book, slots) = (Arc::clone(book), slots.to_owned());
            RedisStoreFuture::new(async move {
                let r = call.await;
                book.table()
                    .renewed(&slots, block, now, ttl, r.as_ref().ok().copied());
                r
            })
        }
    })
}

/// The admission record a block handed over with requests in flight left for its
/// request `index` (`window_settle.lua` writes them with the block's own record:
/// `<block record>:h<index>`; a block's record carries `:b` when it reserved more than
/// one request).
pub(crate) fn handed_record(block: u64, requests: u64, index: u32) -> String {
    let mut member = Client::record_member(block);
    if requests > 1 {
        member.push_str(":b");
    }
    member.push_str(":h");
    member.push_str(&index.to_string());
    member
}
