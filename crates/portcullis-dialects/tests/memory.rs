//! Memory stays bounded whatever the body: a counting global allocator watches the live
//! heap while 100 MB bodies without a newline stream through a `UsageWatcher` (W5: the
//! watcher sits on every response body, so it must never buffer one whole).
//!
//! One test in its own binary, so no other test allocates concurrently.

use portcullis_dialects::{Dialect, UsageWatcher};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MB: usize = 1024 * 1024;
const CHUNK: usize = 64 * 1024;

/// Feeds `head`, then `total` bytes of `fill` in 64 KiB chunks, then `tail`; returns
/// the peak live heap above the level before the watcher existed.
fn peak_growth(
    dialect: Dialect,
    streaming: bool,
    head: &[u8],
    fill: u8,
    total: usize,
    tail: &[u8],
) -> usize {
    let chunk = vec![fill; CHUNK];
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut w = UsageWatcher::new(dialect, streaming);
    w.observe(head);
    for _ in 0..total / CHUNK {
        w.observe(&chunk);
    }
    w.observe(tail);
    let _ = w.finish();
    assert!(w.heap_bytes() < 16 * 1024);
    drop(w);
    PEAK.load(Ordering::Relaxed) - base
}

#[test]
fn w5_watcher_memory_is_bounded_for_100_mb_bodies_without_newlines() {
    /// (name, dialect, streaming, head, fill byte, tail)
    type Case<'a> = (&'a str, Dialect, bool, &'a [u8], u8, &'a [u8]);
    let cases: &[Case<'_>] = &[
        // One SSE data line of 100 MB (a huge text delta).
        ("sse string", Dialect::OpenAi, true, b"data: {\"choices\":[{\"delta\":{\"content\":\"", b'a', b"\"}}]}\n\n"),
        // A 100 MB JSON body (a huge base64 image), usage after it.
        (
            "json string",
            Dialect::Gemini,
            false,
            b"{\"candidates\":[{\"content\":{\"parts\":[{\"inlineData\":{\"mimeType\":\"image/png\",\"data\":\"",
            b'A',
            b"\"}}]}}],\"usageMetadata\":{\"promptTokenCount\":5}}",
        ),
        // 100 MB of bytes that are not SSE fields at all.
        ("sse garbage", Dialect::Anthropic, true, b"x", b'x', b""),
        // 100 MB of nesting.
        ("deep nesting", Dialect::OpenAi, false, b"", b'[', b""),
        // 100 MB of one number.
        ("long number", Dialect::OpenAi, false, b"{\"usage\":{\"prompt_tokens\":", b'7', b"}}"),
        // 100 MB of one key.
        ("long key", Dialect::Anthropic, false, b"{\"", b'k', b"\":1}"),
    ];
    for (name, dialect, streaming, head, fill, tail) in cases {
        let growth = peak_growth(*dialect, *streaming, head, *fill, 100 * MB, tail);
        assert!(
            growth < 64 * 1024,
            "{name}: peak heap grew by {growth} bytes"
        );
    }

    // And the usage after a 100 MB part is still read.
    let mut w = UsageWatcher::new(Dialect::Gemini, false);
    let (_, _, _, head, fill, tail) = cases[1];
    w.observe(head);
    let chunk = vec![fill; CHUNK];
    for _ in 0..(100 * MB) / CHUNK {
        w.observe(&chunk);
    }
    w.observe(tail);
    let u = w.finish().unwrap();
    assert_eq!((u.input_tokens, u.images), (5, 1));
}
