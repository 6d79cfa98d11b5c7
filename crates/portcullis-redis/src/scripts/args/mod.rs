//! The arguments of every script: one type per script (or batch op) that writes its
//! `ARGV` in the order the Lua side reads it, and declares that order ([`Layout`]),
//! which a test holds the Lua sources to.
//!
//! Numbers a window script reads travel as one blob of doubles ([`Doubles`], see
//! [`crate::codec`]); everything else as text.

mod billing;
mod slots;
mod windows;

pub(crate) use billing::*;
pub(crate) use slots::*;
pub(crate) use windows::*;

use super::Script;
use crate::batch::Code;
use crate::codec::Doubles;

/// A script's `ARGV`, as bytes.
#[derive(Default)]
pub(crate) struct Argv(Vec<Vec<u8>>);

impl Argv {
    fn text(&mut self, s: impl Into<String>) -> &mut Self {
        self.0.push(s.into().into_bytes());
        self
    }
    fn num(&mut self, n: impl std::fmt::Display) -> &mut Self {
        self.text(n.to_string())
    }
    fn flag(&mut self, b: bool) -> &mut Self {
        self.text(if b { "1" } else { "0" })
    }
    fn blob(&mut self, d: &Doubles) -> &mut Self {
        self.0.push(d.bytes().to_vec());
        self
    }
    fn raw(&mut self, b: Vec<u8>) -> &mut Self {
        self.0.push(b);
        self
    }
    pub(crate) fn into_vec(self) -> Vec<Vec<u8>> {
        self.0
    }
}

/// The positions of a script's `ARGV`: `head` at 1.., then `each` repeated per item,
/// then `tail`. A name ending in `?` is a position that may be left out (the last ones
/// of the head or of the tail only). Read by the layout tests only.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Layout {
    pub(crate) head: &'static [&'static str],
    pub(crate) each: &'static [&'static str],
    pub(crate) tail: &'static [&'static str],
}

#[cfg_attr(not(test), allow(dead_code))]
impl Layout {
    const fn head(head: &'static [&'static str]) -> Self {
        Self {
            head,
            each: &[],
            tail: &[],
        }
    }
}

/// The arguments of one script or batch op.
pub(crate) trait ScriptArgs {
    /// Where the Lua side reads each argument.
    #[cfg_attr(not(test), allow(dead_code))]
    const LAYOUT: Layout;
    /// Writes the arguments in [`LAYOUT`](Self::LAYOUT) order.
    fn write(&self, argv: &mut Argv);
    fn argv(&self) -> Vec<Vec<u8>> {
        let mut a = Argv::default();
        self.write(&mut a);
        a.into_vec()
    }
}

/// Arguments of a script called on its own (`EVALSHA`).
pub(crate) trait ScriptCall: ScriptArgs {
    const SCRIPT: Script;
}

/// Arguments of an op of the batch script.
pub(crate) trait BatchArgs: ScriptArgs {
    fn code(&self) -> Code;
}

/// One queued op as the batch script reads it.
#[derive(Clone, Copy)]
pub(crate) struct QueuedOp<'a> {
    pub(crate) code: Code,
    pub(crate) keys: usize,
    pub(crate) args: &'a [Vec<u8>],
}

/// `batch.lua`: every op's code, key count, argument count and arguments.
pub(crate) struct BatchCallArgs<'a> {
    pub(crate) ops: Vec<QueuedOp<'a>>,
}

impl ScriptArgs for BatchCallArgs<'_> {
    const LAYOUT: Layout = Layout {
        head: &["op count"],
        each: &["code", "key count", "argument count", "arguments…"],
        tail: &[],
    };
    fn write(&self, a: &mut Argv) {
        a.num(self.ops.len());
        for op in &self.ops {
            a.text(op.code.as_str()).num(op.keys).num(op.args.len());
            for x in op.args {
                a.raw(x.clone());
            }
        }
    }
}

/// `impl ScriptCall`: each argument type called as its script.
macro_rules! script_calls {
    ($($args:ty => $script:ident),* $(,)?) => {
        $(impl ScriptCall for $args {
            const SCRIPT: Script = Script::$script;
        })*
    };
}

/// `impl BatchArgs`: each argument type sent as its batch op.
macro_rules! batch_ops {
    ($($args:ty => $code:ident),* $(,)?) => {
        $(impl BatchArgs for $args {
            fn code(&self) -> Code {
                Code::$code
            }
        })*
    };
}

script_calls! {
    SlotAcquireArgs => SlotAcquire,
    SlotRenewArgs => SlotRenew,
    SlotRenewBlockArgs => SlotRenewBlock,
    InFlightArgs => SlotInFlight,
    WindowAdmitArgs => WindowAdmit,
    WindowViewArgs => WindowView,
    AdmitAllArgs => WindowAdmitAll,
    JointArgs => JointAdmit,
    ChannelArgs => ChannelAdmit,
    ReserveArgs => BillingReserve,
    SettleArgs => BillingSettle,
    AccountArgs => BillingAccount,
    SeedArgs => BillingSeed,
    CreditArgs => BillingCredit,
    CorrectArgs => BillingCorrect,
    BatchCallArgs<'_> => Batch,
}

batch_ops! {
    LeaseReleaseArgs => LeaseRelease,
    BlockLeasesArgs => BlockLeases,
    SomeBlockLeasesArgs => BlockLeasesSome,
    ReserveArgs => BillingReserve,
    BlockReserveArgs => BillingBlock,
    SettleArgs => BillingSettle,
}
