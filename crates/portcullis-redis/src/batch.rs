//! Settlements and releases batched (D2, T3): a request's window settlements, its
//! billing settlement and its lease releases — and those of every other request that
//! ends at the same moment — go to Redis as one script call (one per Cluster slot),
//! instead of one call each.
//!
//! An op is queued; the first op into an empty queue schedules a flush on the runtime
//! [`FLUSH_AFTER`] later, so everything queued meanwhile (a response body's guards are
//! dropped one after the other; other requests end at the same moment) travels
//! together. A concurrency slot's release does not wait: the subject's next request may
//! go to another instance, which cannot flush this one's queue, so the release sends the
//! batch at once — with everything its request queued before it (its guards drop from
//! the innermost layer out, the slot's last). Order is kept with the store's
//! other calls: any other call first flushes what is queued, and a flush hands its
//! command to the connection before returning (its future is polled once in place),
//! so a release queued before an admission reaches Redis before it on the same
//! connection.

use portcullis_core::StoreResult;
use redis::Value;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How long the first op of a batch waits for others before the batch is sent (unless
/// another call of the store sends it first).
pub(crate) const FLUSH_AFTER: std::time::Duration = std::time::Duration::from_millis(1);

/// Most ops in one script call: bounds how long one call holds Redis (a few µs an op).
pub(crate) const MAX_BATCH: usize = 64;

/// What to do with an op's answer.
pub(crate) type Done = Box<dyn FnOnce(StoreResult<Value>) + Send>;

/// What an op of the batch script does (`lua/batch.lua` dispatches on [`Code::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// `WindowStore::settle` (`window_settle.lua`), keyed by the admission it settles.
    WindowSettle,
    /// `window_settle.lua` unkeyed: a request of a quota block given back while it was
    /// in flight corrects its own reservation (its block's record went with the block).
    WindowCorrect,
    /// `BillingStore::settle_attempt` (`billing_settle.lua`), keyed by the attempt.
    BillingSettle,
    /// `BillingStore::check_and_reserve` (`billing_reserve.lua`).
    BillingReserve,
    /// A billing quota block, else the request alone.
    BillingBlock,
    /// One lease released (`ZREM key member`).
    LeaseRelease,
    /// A quota block's leases released, `member:0` .. `member:<n - 1>`.
    BlockLeases,
    /// Some of a quota block's leases, by index.
    BlockLeasesSome,
}

impl Code {
    /// The op's name in the batch script.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Code::WindowSettle | Code::WindowCorrect => "ws",
            Code::BillingSettle => "bs",
            Code::BillingReserve => "br",
            Code::BillingBlock => "bb",
            Code::LeaseRelease => "zr",
            Code::BlockLeases => "zm",
            Code::BlockLeasesSome => "zl",
        }
    }

    /// True for an op whose answer a request waits for — a reservation: its batch is
    /// sent at once, and whatever was queued before it rides in the same call instead
    /// of one of its own.
    pub(crate) fn sent_at_once(self) -> bool {
        matches!(self, Code::BillingReserve | Code::BillingBlock)
    }

    /// How long a failed op is sent again (D9): a give-back — a release, settlement or
    /// refund, each idempotent and keyed by what it returns — until it lands or what it
    /// returns has surely expired; a reservation never (its caller has its answer: the
    /// failure).
    pub(crate) fn retried_for(self) -> Option<std::time::Duration> {
        match self {
            // Not keyed: sent again, it would correct twice. Its reservation stays as
            // the charge at worst.
            Code::BillingReserve | Code::BillingBlock | Code::WindowCorrect => None,
            // A lease lives its TTL (60 s by default, renewed every third of it): ten
            // minutes covers any TTL an operator sets.
            Code::LeaseRelease | Code::BlockLeases | Code::BlockLeasesSome => {
                Some(std::time::Duration::from_secs(600))
            }
            // Reservations of money and window units last until they are settled.
            Code::WindowSettle | Code::BillingSettle => {
                Some(std::time::Duration::from_secs(86_400))
            }
        }
    }
}

/// One queued operation of the batch script (`lua/batch.lua`).
pub(crate) struct Op {
    pub(crate) code: Code,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Vec<u8>>,
    /// Until when a give-back is sent again after its call failed
    /// ([`Code::retried_for`]).
    pub(crate) until: Option<std::time::Instant>,
    pub(crate) done: Done,
}

/// The queue of ops not sent yet.
#[derive(Default)]
pub(crate) struct Batcher {
    queue: Mutex<Queue>,
    queued: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    ops: Vec<Op>,
    /// Batches taken so far: names the batch now filling, so a flush timer fires only
    /// for the batch it was set for. (A timer outliving its batch — sent early by a
    /// slot release or another call — would otherwise send the next batch half
    /// filled: the next request's first settlements in one call, the rest in another.)
    taken: u64,
}

impl Batcher {
    /// Queues `op`; `Some(batch)` when the queue was empty: the caller schedules a
    /// flush of that batch (see [`take_if`](Self::take_if)).
    pub(crate) fn push(&self, op: Op) -> Option<u64> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.ops.push(op);
        self.queued.store(q.ops.len(), Ordering::Release);
        (q.ops.len() == 1).then_some(q.taken)
    }

    /// Everything queued if it is still batch `batch` (not sent since), else nothing.
    pub(crate) fn take_if(&self, batch: u64) -> Vec<Op> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.taken != batch {
            return Vec::new();
        }
        Self::take_locked(&mut q, &self.queued)
    }

    fn take_locked(q: &mut Queue, queued: &AtomicUsize) -> Vec<Op> {
        queued.store(0, Ordering::Release);
        if !q.ops.is_empty() {
            q.taken += 1;
        }
        std::mem::take(&mut q.ops)
    }

    /// True when nothing is queued (one atomic load).
    pub(crate) fn is_empty(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }

    /// Everything queued, in order.
    pub(crate) fn take(&self) -> Vec<Op> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        Self::take_locked(&mut q, &self.queued)
    }
}

/// Splits `ops` into script calls: consecutive runs on one slot (`slot_of` the op's
/// first key; one slot for everything on a single node), at most [`MAX_BATCH`] each.
pub(crate) fn calls(ops: Vec<Op>, slot_of: impl Fn(&str) -> u16) -> Vec<Vec<Op>> {
    let mut out: Vec<Vec<Op>> = Vec::new();
    let mut last: Option<u16> = None;
    for op in ops {
        let slot = slot_of(op.keys.first().map_or("", String::as_str));
        match out.last_mut() {
            Some(call) if last == Some(slot) && call.len() < MAX_BATCH => call.push(op),
            _ => out.push(vec![op]),
        }
        last = Some(slot);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str) -> Op {
        Op {
            code: Code::LeaseRelease,
            keys: vec![key.to_owned()],
            args: vec![b"m".to_vec()],
            until: None,
            done: Box::new(drop),
        }
    }

    #[test]
    fn t3_ops_split_by_slot_and_size() {
        let ops = vec![op("a"), op("a"), op("b"), op("a")];
        let sizes: Vec<usize> = calls(ops, |k| u16::from(k == "b"))
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [2, 1, 1], "runs on one slot, in order");
        let many = (0..MAX_BATCH + 3).map(|_| op("a")).collect();
        let sizes: Vec<usize> = calls(many, |_| 0).iter().map(Vec::len).collect();
        assert_eq!(sizes, [MAX_BATCH, 3]);
    }

    #[test]
    fn t3_the_first_op_of_an_empty_queue_asks_for_a_flush() {
        let b = Batcher::default();
        assert!(b.is_empty());
        assert_eq!(b.push(op("a")), Some(0));
        assert_eq!(b.push(op("b")), None);
        assert!(!b.is_empty());
        let taken = b.take();
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[0].keys, ["a"]);
        assert!(b.is_empty());
        assert_eq!(
            b.push(op("c")),
            Some(1),
            "empty again: the next op schedules a flush of the next batch"
        );
    }

    #[test]
    fn t3_a_flush_timer_sends_only_the_batch_it_was_set_for() {
        let b = Batcher::default();
        let first = b.push(op("a")).expect("first op of a batch");
        // The batch is sent early (a slot release), before its timer fires …
        assert_eq!(b.take().len(), 1);
        // … and the next request starts filling the next batch.
        let second = b.push(op("b")).expect("first op of the next batch");
        b.push(op("c"));
        // The stale timer fires: it must not send the next batch half filled.
        assert!(b.take_if(first).is_empty());
        b.push(op("d"));
        let sent = b.take_if(second);
        assert_eq!(sent.len(), 3, "the next batch goes whole, on its own timer");
        assert!(b.is_empty());
    }
}
