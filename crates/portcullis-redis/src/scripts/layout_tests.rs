//! Each argument type writes its `ARGV` where the Lua side reads it: the positions a
//! script's Lua reads (`ARGV[n]` literally, and the start of its repeated items) are
//! those its type declares, and the type writes as many arguments as it declares.

use super::Script;
use super::args::*;
use crate::batch::Code;
use crate::codec::Doubles;

/// Lua without its comments.
fn code_of(lua: &str) -> String {
    lua.lines()
        .map(|l| l.split_once("--").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The index expressions of `table[...]` in `code`.
fn indices<'a>(code: &'a str, table: &str) -> Vec<&'a str> {
    let open = format!("{table}[");
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(&open) {
        // Not the end of a longer name (`KEYS[` for `S[`).
        let before = rest[..at].chars().last();
        rest = &rest[at + open.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest.find(']').expect("closed index");
        out.push(&rest[..end]);
    }
    out
}

/// The batch op `code`'s function in `batch.lua`.
fn batch_op(code: &str) -> String {
    let src = Script::Batch.operation();
    let start = src
        .find(&format!("  {code} = function(K, A)"))
        .unwrap_or_else(|| panic!("batch op {code}"));
    let body = &src[start + 2..];
    let end = body
        .find("\n  z")
        .into_iter()
        .chain(body.find("\n}"))
        .min()
        .expect("end of op");
    body[..end].to_owned()
}

/// Checks that `lua` reads `table` where `layout` says.
fn check_lua(what: &str, layout: &Layout, lua: &str, table: &str) {
    let code = code_of(lua);
    let head = layout.head.len();
    let width = layout.each.len().max(1) as i64;
    let mut literal = std::collections::BTreeSet::new();
    let mut items_read = false;
    for ix in indices(&code, table) {
        let ix = ix.trim();
        if let Ok(n) = ix.parse::<usize>() {
            assert!(
                (1..=head).contains(&n),
                "{what}: reads {table}[{n}], beyond its declared head {:?}",
                layout.head
            );
            literal.insert(n);
            continue;
        }
        // `c + k * v` or `c + v`: item `v` (1-based) of width `k`, or the tail after
        // `v` items.
        let Some((c, _)) = ix.split_once(" + ") else {
            continue;
        };
        let Ok(c) = c.trim().parse::<i64>() else {
            continue;
        };
        let h = head as i64;
        let item = !layout.each.is_empty() && c + width > h && c <= h;
        let tail = c > h && c - h <= layout.tail.len() as i64;
        assert!(
            item || tail,
            "{what}: reads {table}[{ix}], outside its declared layout"
        );
        items_read |= item;
    }
    assert_eq!(
        literal,
        (1..=head).collect(),
        "{what}: every head position {:?} is read by position",
        layout.head
    );
    if !layout.each.is_empty() {
        let from = format!("= {}, ", head + 1);
        assert!(
            items_read || code.contains(&from),
            "{what}: the items are read from {table}[{}]",
            head + 1
        );
    }
}

/// Checks that `argv` is as long as `layout` declares for `items` items with
/// `optional` optional positions written.
fn check_len(what: &str, layout: &Layout, argv: &[Vec<u8>], items: usize, optional: usize) {
    let required = |names: &[&str]| names.iter().filter(|n| !n.ends_with('?')).count();
    let want = required(layout.head) + items * layout.each.len() + required(layout.tail) + optional;
    assert_eq!(argv.len(), want, "{what}: arguments written");
}

fn at(layout: &Layout, argv: &[Vec<u8>], name: &str) -> String {
    let i = layout
        .head
        .iter()
        .position(|n| n.trim_end_matches('?') == name)
        .unwrap_or_else(|| panic!("no position {name}"));
    String::from_utf8_lossy(&argv[i]).into_owned()
}

fn script<A: ScriptCall>(sample: &A, items: usize, optional: usize) -> Vec<Vec<u8>> {
    let what = format!("{:?}", A::SCRIPT);
    let lua = A::SCRIPT.operation();
    check_lua(&what, &A::LAYOUT, lua, "ARGV");
    let argv = sample.argv();
    check_len(&what, &A::LAYOUT, &argv, items, optional);
    argv
}

fn op<A: BatchArgs>(sample: &A, lua: &str, table: &str, items: usize, optional: usize) {
    let what = format!("{:?}", sample.code());
    check_lua(&what, &A::LAYOUT, lua, table);
    check_len(&what, &A::LAYOUT, &sample.argv(), items, optional);
}

fn doubles() -> Doubles {
    Doubles::text("d".to_owned())
}

fn reserve(mode: ReserveMode) -> ReserveArgs {
    ReserveArgs {
        time: "T".into(),
        bill_balance: true,
        has_tenant: true,
        spend_cap: None,
        money: 5,
        budget_ttl: 9,
        lifetime: 1_000,
        tenant_expected: false,
        books_base: "b:".into(),
        attempt: "a1".into(),
        budgets: vec![
            BudgetArg {
                limit: 10,
                period: None,
            },
            BudgetArg {
                limit: 20,
                period: Some(60_000),
            },
        ],
        subject: "k".into(),
        mode,
    }
}

#[test]
fn slot_scripts_read_what_their_arguments_write() {
    let a = SlotAcquireArgs {
        time: "T".into(),
        limit: 3,
        ttl: 60_000,
        member: "i:1".into(),
    };
    let argv = script(&a, 0, 0);
    assert_eq!(at(&SlotAcquireArgs::LAYOUT, &argv, "member"), "i:1");
    for restore in [false, true] {
        let r = SlotRenewArgs {
            time: "T".into(),
            ttl: 1,
            member: "i:1".into(),
            restore,
        };
        script(&r, 0, usize::from(restore));
        let b = SlotRenewBlockArgs {
            time: "T".into(),
            ttl: 1,
            base: "i:1".into(),
            count: 4,
            restore,
        };
        let argv = script(&b, 0, usize::from(restore));
        assert_eq!(at(&SlotRenewBlockArgs::LAYOUT, &argv, "count"), "4");
    }
    script(&InFlightArgs { time: "T".into() }, 0, 0);
}

#[test]
fn window_scripts_read_what_their_arguments_write() {
    let argv = script(
        &WindowAdmitArgs {
            time: "T".into(),
            doubles: doubles(),
            record: "7".into(),
        },
        0,
        1,
    );
    assert_eq!(at(&WindowAdmitArgs::LAYOUT, &argv, "record"), "7");
    script(
        &WindowViewArgs {
            time: "T".into(),
            doubles: doubles(),
        },
        0,
        0,
    );
    script(
        &AdmitAllArgs {
            time: "T".into(),
            record: "7".into(),
            items: vec![doubles(), doubles()],
        },
        2,
        0,
    );
    for record in [None, Some("7".to_owned())] {
        let s = WindowSettleArgs {
            time: "T".into(),
            doubles: doubles(),
            record: record.clone(),
        };
        op(
            &s,
            super::WINDOW_SETTLE_LUA,
            "ARGV",
            0,
            usize::from(record.is_some()),
        );
        let code = if record.is_some() {
            Code::WindowSettle
        } else {
            Code::WindowCorrect
        };
        assert_eq!(s.code(), code);
    }
}

#[test]
fn joint_scripts_read_what_their_arguments_write() {
    for window in [false, true] {
        let j = JointArgs {
            time: "T".into(),
            limit: 3,
            ttl: 1,
            member: "i:1".into(),
            leases: 1,
            window: window.then(|| JointWindow {
                doubles: doubles(),
                record: "7".into(),
            }),
        };
        let argv = script(&j, 0, if window { 2 } else { 0 });
        assert_eq!(at(&JointArgs::LAYOUT, &argv, "leases"), "1");
    }
    let c = ChannelArgs {
        time: "T".into(),
        capacity: 2,
        ttl: 1,
        member: "i:1".into(),
        leases: 4,
        record: "7".into(),
        items: vec![doubles(), doubles(), doubles()],
    };
    let argv = script(&c, 3, 0);
    assert_eq!(at(&ChannelArgs::LAYOUT, &argv, "record"), "7");
}

#[test]
fn billing_scripts_read_what_their_arguments_write() {
    for mode in [
        ReserveMode::Plain,
        ReserveMode::Force,
        ReserveMode::Block { headroom: 64 },
    ] {
        let r = reserve(mode);
        let argv = script(&r, 2, usize::from(mode != ReserveMode::Plain));
        assert_eq!(at(&ReserveArgs::LAYOUT, &argv, "attempt"), "a1");
        assert_eq!(
            argv[10..14],
            [
                b"10".to_vec(),
                b"-1".to_vec(),
                b"20".to_vec(),
                b"60000".to_vec()
            ]
        );
        assert_eq!(argv[14], b"k");
        let mode_arg = argv
            .get(15)
            .map(|m| String::from_utf8_lossy(m).into_owned());
        let want = match mode {
            ReserveMode::Plain => None,
            ReserveMode::Force => Some("f".to_owned()),
            ReserveMode::Block { headroom } => Some(format!("h{headroom}")),
        };
        assert_eq!(mode_arg, want);
    }
    for (outcome, letter) in [
        (SettleOutcome::Settled, "s"),
        (SettleOutcome::Pending, "p"),
        (SettleOutcome::Refund, "r"),
        (SettleOutcome::Part, "c"),
    ] {
        let s = SettleArgs {
            time: "T".into(),
            outcome,
            cost: 3,
            budget_ttl: 9,
            attempt: "a1".into(),
            reconcile: false,
            retry: true,
        };
        let argv = script(&s, 0, 2);
        assert_eq!(at(&SettleArgs::LAYOUT, &argv, "outcome"), letter);
        assert_eq!(at(&SettleArgs::LAYOUT, &argv, "retry"), "1");
    }
    script(
        &AccountArgs {
            time: "T".into(),
            has_tenant: true,
            periods: vec![None, Some(5)],
        },
        2,
        0,
    );
    script(&SeedArgs { amount: 1 }, 0, 0);
    script(&CreditArgs { amount: -1 }, 0, 0);
    let c = script(
        &CorrectArgs {
            time: "T".into(),
            difference: -7,
            bill_balance: true,
            has_tenant: false,
            charged_at: 42,
            keep: 86_400_000,
            budget_ttl: 9,
            periods: vec![None, Some(5)],
        },
        2,
        0,
    );
    assert_eq!(at(&CorrectArgs::LAYOUT, &c, "difference"), "-7");
    assert_eq!(at(&CorrectArgs::LAYOUT, &c, "has tenant"), "0");
    assert_eq!(c[7..], [b"-1".to_vec(), b"5".to_vec()]);
}

#[test]
fn batch_ops_read_what_their_arguments_write() {
    let reserve_lua = Script::BillingReserve.operation();
    op(&reserve(ReserveMode::Plain), reserve_lua, "ARGV", 2, 0);
    let bb = BlockReserveArgs {
        block_keys: 7,
        block: reserve(ReserveMode::Block { headroom: 1 }),
        alone: reserve(ReserveMode::Plain),
    };
    // The block's 16 arguments and the request's 15, as items.
    op(&bb, &batch_op("bb"), "A", 31, 0);
    assert_eq!(bb.argv()[..2], [b"7".to_vec(), b"16".to_vec()]);
    op(
        &LeaseReleaseArgs {
            member: "i:1".into(),
        },
        &batch_op("zr"),
        "A",
        0,
        0,
    );
    op(
        &BlockLeasesArgs {
            base: "i:1".into(),
            size: 4,
        },
        &batch_op("zm"),
        "A",
        0,
        0,
    );
    op(
        &SomeBlockLeasesArgs {
            base: "i:1".into(),
            indices: vec![0, 3],
        },
        &batch_op("zl"),
        "A",
        2,
        0,
    );
    // The dispatcher: the op count, then each op's code, counts and arguments.
    let args = [b"m".to_vec()];
    let call = BatchCallArgs {
        ops: vec![
            QueuedOp {
                code: Code::LeaseRelease,
                keys: 1,
                args: &args,
            };
            2
        ],
    };
    let lua = code_of(Script::Batch.operation());
    check_lua(
        "batch",
        &BatchCallArgs::LAYOUT,
        &lua[lua.find("local out").expect("the dispatcher")..],
        "ARGV",
    );
    assert!(
        lua.contains("local ai, ki = 2, 1"),
        "ops are read from ARGV[2]"
    );
    assert_eq!(
        call.argv(),
        [&b"2"[..], b"zr", b"1", b"1", b"m", b"zr", b"1", b"1", b"m"].map(<[u8]>::to_vec)
    );
}
