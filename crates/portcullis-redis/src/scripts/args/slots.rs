//! The arguments of the lease scripts and batch ops (slots and capacity).

use super::{Argv, Layout, ScriptArgs};
use portcullis_core::Millis;

/// `slot_acquire.lua`: a lease if a slot is free.
pub(crate) struct SlotAcquireArgs {
    pub(crate) time: String,
    pub(crate) limit: u32,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
}

impl ScriptArgs for SlotAcquireArgs {
    const LAYOUT: Layout = Layout::head(&["time", "limit", "ttl", "member"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.limit)
            .num(self.ttl)
            .text(&*self.member);
    }
}

/// `slot_renew.lua`: one lease extended (or, `restore`, put back if gone).
pub(crate) struct SlotRenewArgs {
    pub(crate) time: String,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
    pub(crate) restore: bool,
}

impl ScriptArgs for SlotRenewArgs {
    const LAYOUT: Layout = Layout::head(&["time", "ttl", "member", "restore?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).num(self.ttl).text(&*self.member);
        if self.restore {
            a.flag(true);
        }
    }
}

/// `slot_renew_block.lua`: a quota block's `count` leases `base:0` .. extended together.
pub(crate) struct SlotRenewBlockArgs {
    pub(crate) time: String,
    pub(crate) ttl: Millis,
    pub(crate) base: String,
    pub(crate) count: u32,
    pub(crate) restore: bool,
}

impl ScriptArgs for SlotRenewBlockArgs {
    const LAYOUT: Layout = Layout::head(&["time", "ttl", "member base", "count", "restore?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.ttl)
            .text(&*self.base)
            .num(self.count);
        if self.restore {
            a.flag(true);
        }
    }
}

/// `slot_in_flight.lua`: the live leases.
pub(crate) struct InFlightArgs {
    pub(crate) time: String,
}

impl ScriptArgs for InFlightArgs {
    const LAYOUT: Layout = Layout::head(&["time"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time);
    }
}

/// Batch op `zr`: one lease released.
pub(crate) struct LeaseReleaseArgs {
    pub(crate) member: String,
}

impl ScriptArgs for LeaseReleaseArgs {
    const LAYOUT: Layout = Layout::head(&["member"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.member);
    }
}

/// Batch op `zm`: a quota block's leases `base:0` .. `base:<size - 1>` released.
pub(crate) struct BlockLeasesArgs {
    pub(crate) base: String,
    pub(crate) size: u32,
}

impl ScriptArgs for BlockLeasesArgs {
    const LAYOUT: Layout = Layout::head(&["member base", "size"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.base).num(self.size);
    }
}

/// Batch op `zl`: some of a quota block's leases released, by index.
pub(crate) struct SomeBlockLeasesArgs {
    pub(crate) base: String,
    pub(crate) indices: Vec<u32>,
}

impl ScriptArgs for SomeBlockLeasesArgs {
    const LAYOUT: Layout = Layout {
        head: &["member base"],
        each: &["index"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.base);
        for i in &self.indices {
            a.num(i);
        }
    }
}
