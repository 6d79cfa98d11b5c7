//! The two kinds of block a subject's limits lend: a window block (requests and tokens)
//! and a slot block (leases), each with its own accounting (see the parent module).

use super::*;

/// One borrowed block of a subject's windows.
#[derive(Clone, Debug)]
pub struct WindowBlock {
    pub(super) id: u64,
    /// The shared store's ticket of the whole block (its demand: the block's tokens).
    pub(super) shared: WindowTicket,
    pub(super) requests: u64,
    /// Local time until which it admits.
    pub(super) until: Millis,
    /// Requests admitted from it and not refunded.
    pub(super) admitted: u64,
    /// Tokens committed: the estimates of requests in flight, the actual use of ended
    /// ones.
    pub(super) tokens: u64,
    pub(super) in_flight: u32,
    pub(super) retired: bool,
    /// Given back with requests still in flight: those are counted in Redis as
    /// requests of their own now, and settle there.
    pub(super) handed: bool,
    /// Requests in flight when it was handed over.
    pub(super) handed_in_flight: u32,
}

impl WindowBlock {
    /// The block the shared store admitted as `shared` for `requests` requests, asked
    /// for at local time `asked_at`; the borrower's request, of `first`, is counted in
    /// it already.
    pub(super) fn new(
        id: u64,
        shared: WindowTicket,
        requests: u64,
        policy: &Policy,
        first: &Demand,
        asked_at: Millis,
        sizing: &BlockSizing,
    ) -> Self {
        let at = shared.admitted_at;
        // What is left of the shortest window the block was counted in, at the shared
        // store's admission: from here, those windows end no earlier than `asked_at`
        // plus that.
        let left = shared.anchors[0].map_or(0, |anchor| {
            policy
                .requests
                .iter()
                .chain(&policy.tokens)
                .map(|t| {
                    window_end(anchor, t.window_ms, window_index(anchor, t.window_ms, at)) - at
                })
                .min()
                .unwrap_or(0)
        });
        let life = left.saturating_sub(WINDOW_MARGIN_MS).min(sizing.max_age_ms);
        Self {
            id,
            shared,
            requests,
            until: asked_at.saturating_add(life),
            admitted: 1,
            tokens: first.tokens,
            in_flight: 1,
            retired: life == 0,
            handed: false,
            handed_in_flight: 0,
        }
    }

    pub(super) fn ticket(&self, demand: &Demand) -> WindowTicket {
        WindowTicket {
            admitted_at: self.shared.admitted_at,
            anchors: self.shared.anchors,
            demand: *demand,
            amount: false,
            money: 0,
            rolling: false,
            fallback: false,
            borrowed: self.id,
            id: 0,
        }
    }

    pub(super) fn fits(&self, demand: &Demand, now: Millis) -> bool {
        !self.retired
            && !self.handed
            && now < self.until
            && self.admitted < self.requests
            && self.tokens.saturating_add(demand.tokens) <= self.shared.demand.tokens
    }

    pub(super) fn take(&mut self, demand: &Demand) -> WindowTicket {
        self.admitted += 1;
        self.tokens = self.tokens.saturating_add(demand.tokens);
        self.in_flight += 1;
        // Every request handed out: it admits no more, and gives back its unused tokens
        // as soon as its last request ends.
        self.retired |= self.admitted >= self.requests;
        self.ticket(demand)
    }

    pub(super) fn settle(&mut self, reserved: &Demand, outcome: Outcome) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Refund => {
                self.admitted = self.admitted.saturating_sub(1);
                self.tokens = self.tokens.saturating_sub(reserved.tokens);
            }
            Outcome::Completed(Some(u)) => {
                self.tokens = self
                    .tokens
                    .saturating_sub(reserved.tokens)
                    .saturating_add(u.total_tokens());
            }
            // Unknown: the estimate stands as the use (W5).
            Outcome::Completed(None) => {}
        }
    }

    pub(super) fn spent(&self) -> bool {
        self.retired && self.in_flight == 0
    }

    pub(super) fn give_back(&self, key: &str) -> GiveBack {
        GiveBack::Window {
            key: key.to_owned(),
            ticket: self.shared,
            requests: self.requests,
            used: self.admitted,
            outcome: Outcome::Completed(Some(Usage {
                input_tokens: self.tokens,
                ..Usage::default()
            })),
            handed: if self.handed {
                self.handed_in_flight
            } else {
                0
            },
        }
    }
}

/// One borrowed block of a subject's slots (or a channel's capacity leases).
#[derive(Clone, Debug)]
pub struct SlotBlock {
    pub(super) id: u64,
    /// The shared store's lease id the block's leases are named after.
    pub(super) shared: LeaseId,
    pub(super) size: u32,
    pub(super) held: [u64; 4],
    pub(super) count: u32,
    pub(super) ttl: Millis,
    /// Local time until which it hands out leases.
    pub(super) until: Millis,
    /// Local time by which its shared leases expire unless renewed.
    pub(super) expires: Millis,
    pub(super) renewing: bool,
    pub(super) retired: bool,
    /// Its unheld leases were given back while some were still held: each of those is
    /// a lease of its own in Redis now, released and renewed there.
    pub(super) handed: bool,
    /// The limit it was borrowed under: a block serves no other.
    pub(super) limit: u32,
}

impl SlotBlock {
    pub(super) fn new(
        id: u64,
        shared: LeaseId,
        (size, limit): (u32, u32),
        ttl: Millis,
        asked_at: Millis,
        sizing: &BlockSizing,
    ) -> Self {
        let mut held = [0u64; 4];
        held[0] = 1;
        Self {
            id,
            shared,
            size: size.min(MAX_BLOCK_UNITS),
            held,
            count: 1,
            ttl,
            until: asked_at.saturating_add(sizing.max_age_ms.min(ttl / 4)),
            expires: asked_at.saturating_add(ttl),
            renewing: false,
            retired: false,
            handed: false,
            limit,
        }
    }

    pub(super) fn lease(&self, index: u32) -> LeaseId {
        BORROWED_LEASE | (self.id << 8) | LeaseId::from(index)
    }

    pub(super) fn holds(&self, index: u32) -> bool {
        index < self.size && self.held[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    pub(super) fn fits(&self, limit: u32, ttl: Millis, now: Millis) -> bool {
        !self.retired
            && !self.handed
            && now < self.until
            && ttl == self.ttl
            && limit == self.limit
            && self.count < self.size
    }

    pub(super) fn take(&mut self) -> Option<LeaseId> {
        let index = (0..self.size).find(|&i| !self.holds(i))?;
        self.held[(index / 64) as usize] |= 1 << (index % 64);
        self.count += 1;
        Some(self.lease(index))
    }

    pub(super) fn release(&mut self, index: u32) -> bool {
        if !self.holds(index) {
            return false;
        }
        self.held[(index / 64) as usize] &= !(1 << (index % 64));
        self.count -= 1;
        true
    }

    pub(super) fn spent(&self) -> bool {
        self.retired && self.count == 0
    }

    pub(super) fn give_back(&self, key: &str) -> GiveBack {
        GiveBack::Slots {
            key: key.to_owned(),
            shared: self.shared,
            size: self.size,
        }
    }

    /// The leases nobody holds, given back while some are held.
    pub(super) fn hand_over(&mut self, key: &str) -> GiveBack {
        self.handed = true;
        GiveBack::SlotMembers {
            key: key.to_owned(),
            shared: self.shared,
            indices: (0..self.size).filter(|&i| !self.holds(i)).collect(),
        }
    }
}

/// What [`Blocks::retire`] needs of a window or slot block.
pub(super) trait Retiring {
    fn id(&self) -> u64;
    fn handed(&self) -> bool;
    fn retire(&mut self);
    fn spent(&self) -> bool;
    fn give_back(&self, key: &str) -> GiveBack;
    /// Gives back what is unused while some is still in flight.
    fn hand_over(&mut self, key: &str) -> GiveBack;
}

impl Retiring for WindowBlock {
    fn id(&self) -> u64 {
        self.id
    }
    fn handed(&self) -> bool {
        self.handed
    }
    fn retire(&mut self) {
        self.retired = true;
    }
    fn spent(&self) -> bool {
        WindowBlock::spent(self)
    }
    fn give_back(&self, key: &str) -> GiveBack {
        WindowBlock::give_back(self, key)
    }
    fn hand_over(&mut self, key: &str) -> GiveBack {
        // The requests in flight count as used, with their estimates; each gets a
        // record of its own in the shared store.
        self.handed = true;
        self.handed_in_flight = self.in_flight;
        WindowBlock::give_back(self, key)
    }
}

impl Retiring for SlotBlock {
    fn id(&self) -> u64 {
        self.id
    }
    fn handed(&self) -> bool {
        self.handed
    }
    fn retire(&mut self) {
        self.retired = true;
    }
    fn spent(&self) -> bool {
        SlotBlock::spent(self)
    }
    fn give_back(&self, key: &str) -> GiveBack {
        SlotBlock::give_back(self, key)
    }
    fn hand_over(&mut self, key: &str) -> GiveBack {
        SlotBlock::hand_over(self, key)
    }
}

/// Retires block `id` of `blocks` (of `key`): all of it back if nothing is in flight,
/// else what is unused.
pub(super) fn retire_in<B: Retiring>(blocks: &mut Vec<B>, id: u64, key: &str) -> Option<GiveBack> {
    let i = blocks.iter().position(|b| b.id() == id)?;
    let b = &mut blocks[i];
    if b.handed() {
        return None;
    }
    b.retire();
    Some(if b.spent() {
        blocks.swap_remove(i).give_back(key)
    } else {
        b.hand_over(key)
    })
}
