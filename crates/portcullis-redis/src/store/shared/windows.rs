//! A window's settlement in Redis: the one call both a ticket of its own and a quota
//! block's give-back end with.

use crate::client::Client;
use crate::codec::Doubles;
use crate::future::RedisStoreFuture;
use crate::scripts::args::WindowSettleArgs;

/// Queues the settlement `blob` of the admission recorded under `id` (a quota
/// block's when `block`), on the window script keys `keys`: keyed, so it counts
/// once and only if Redis counted the admission, and sent again until it lands
/// (D9); `id` 0: unkeyed, sent once.
pub(crate) fn settle_window(
    client: &Client,
    keys: Vec<String>,
    blob: Doubles,
    id: u64,
    block: bool,
) -> RedisStoreFuture<()> {
    let record = (id != 0).then(|| {
        let mut member = Client::record_member(id);
        if block {
            member.push_str(":b");
        }
        member
    });
    let args = WindowSettleArgs {
        time: client.time(),
        doubles: blob,
        record,
    };
    client.batched(keys, args, |_: i64| Ok(()))
}
