//! The arguments of the window scripts and the joint ones.

use super::{Argv, BatchArgs, Layout, ScriptArgs};
use crate::batch::Code;
use crate::codec::Doubles;
use portcullis_core::Millis;

/// `window_admit.lua`: one admission, recorded under `record` (D9).
pub(crate) struct WindowAdmitArgs {
    pub(crate) time: String,
    /// [`codec::admit_args`](crate::codec::admit_args).
    pub(crate) doubles: Doubles,
    pub(crate) record: String,
}

impl ScriptArgs for WindowAdmitArgs {
    const LAYOUT: Layout = Layout::head(&["time", "doubles", "record?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).blob(&self.doubles).text(&*self.record);
    }
}

/// `window_view.lua`: the limits' use.
pub(crate) struct WindowViewArgs {
    pub(crate) time: String,
    pub(crate) doubles: Doubles,
}

impl ScriptArgs for WindowViewArgs {
    const LAYOUT: Layout = Layout::head(&["time", "doubles"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).blob(&self.doubles);
    }
}

/// `window_admit_all.lua`: several windows admitted all or nothing.
pub(crate) struct AdmitAllArgs {
    pub(crate) time: String,
    pub(crate) record: String,
    /// Each item's [`codec::admit_block_args`](crate::codec::admit_block_args).
    pub(crate) items: Vec<Doubles>,
}

impl ScriptArgs for AdmitAllArgs {
    const LAYOUT: Layout = Layout {
        head: &["time", "record"],
        each: &["item doubles"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).text(&*self.record);
        for d in &self.items {
            a.blob(d);
        }
    }
}

/// The window part of a joint call: its doubles and the admission's record.
pub(crate) struct JointWindow {
    pub(crate) doubles: Doubles,
    pub(crate) record: String,
}

/// `joint_admit.lua`: a subject's slot (`leases` of them for a quota block) with its
/// windows, or the slot alone.
pub(crate) struct JointArgs {
    pub(crate) time: String,
    pub(crate) limit: u32,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
    pub(crate) leases: u32,
    pub(crate) window: Option<JointWindow>,
}

impl ScriptArgs for JointArgs {
    const LAYOUT: Layout = Layout::head(&[
        "time", "limit", "ttl", "member", "leases", "doubles?", "record?",
    ]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.limit)
            .num(self.ttl)
            .text(&*self.member)
            .num(self.leases);
        if let Some(w) = &self.window {
            a.blob(&w.doubles).text(&*w.record);
        }
    }
}

/// `admit_all_acquire.lua`: a channel's provider windows with `leases` capacity leases.
pub(crate) struct ChannelArgs {
    pub(crate) time: String,
    pub(crate) capacity: u32,
    pub(crate) ttl: Millis,
    pub(crate) member: String,
    pub(crate) leases: u32,
    pub(crate) record: String,
    pub(crate) items: Vec<Doubles>,
}

impl ScriptArgs for ChannelArgs {
    const LAYOUT: Layout = Layout {
        head: &["time", "capacity", "ttl", "member", "leases", "record"],
        each: &["item doubles"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time)
            .num(self.capacity)
            .num(self.ttl)
            .text(&*self.member)
            .num(self.leases)
            .text(&*self.record);
        for d in &self.items {
            a.blob(d);
        }
    }
}

/// `window_settle.lua` (batch op `ws`): an admission settled, keyed by its `record`
/// (D9), or unkeyed without one.
pub(crate) struct WindowSettleArgs {
    pub(crate) time: String,
    /// [`codec::settle_args`](crate::codec::settle_args) or an undo's.
    pub(crate) doubles: Doubles,
    pub(crate) record: Option<String>,
}

impl ScriptArgs for WindowSettleArgs {
    const LAYOUT: Layout = Layout::head(&["time", "doubles", "record?"]);
    fn write(&self, a: &mut Argv) {
        a.text(&*self.time).blob(&self.doubles);
        if let Some(r) = &self.record {
            a.text(&**r);
        }
    }
}

impl BatchArgs for WindowSettleArgs {
    fn code(&self) -> Code {
        if self.record.is_some() {
            Code::WindowSettle
        } else {
            Code::WindowCorrect
        }
    }
}
