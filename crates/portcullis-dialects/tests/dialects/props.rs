//! Property tests: no input makes the data path panic; the watcher's answer does not
//! depend on how the body is chunked; its memory stays bounded; the incremental scanner
//! agrees with `serde_json` on where usage is.

use crate::support::*;
use portcullis_dialects::{Dialect, UsageWatcher, inspect_request, usage_from_json};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn dialect() -> impl Strategy<Value = Dialect> {
    prop_oneof![
        Just(Dialect::OpenAi),
        Just(Dialect::Anthropic),
        Just(Dialect::Gemini),
        Just(Dialect::Native),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/v1/chat/completions".to_owned()),
        Just("/v1/messages".to_owned()),
        Just("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse".to_owned()),
        Just("/v1/images/generations".to_owned()),
        "\\PC{0,40}",
    ]
}

/// Cuts `bytes` at the given (unsorted, possibly out-of-range) points.
fn chunks(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0;
    for c in cuts {
        out.push(bytes[at..c].to_vec());
        at = c;
    }
    out.push(bytes[at..].to_vec());
    out
}

fn watch_chunks(dialect: Dialect, streaming: bool, chunks: &[Vec<u8>]) -> Seen {
    let mut w = UsageWatcher::new(dialect, streaming);
    for c in chunks {
        w.observe(c);
        assert!(w.heap_bytes() < 16 * 1024);
    }
    seen(&mut w)
}

/// Keys the request and response walkers look for, and some that trip them up.
const KEYS: &[&str] = &[
    "model",
    "stream",
    "messages",
    "contents",
    "content",
    "parts",
    "text",
    "type",
    "image_url",
    "source",
    "data",
    "media_type",
    "inlineData",
    "mimeType",
    "tools",
    "max_tokens",
    "n",
    "generationConfig",
    "maxOutputTokens",
    "response_format",
    "system",
    "systemInstruction",
    "usage",
    "usageMetadata",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "promptTokenCount",
    "candidates",
    "choices",
    "delta",
    "error",
    "message",
    "response",
    "prompt_tokens_details",
    "cached_tokens",
    "cache_creation_input_tokens",
    "cachedContentTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
    "toolUsePromptTokenCount",
    "é\"\\\u{0}",
    "a_key_that_is_much_longer_than_thirty_two_bytes",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e12).prop_map(Value::from),
        prop::sample::select(KEYS).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

/// Reference mapping, straight from a `serde_json::Value`: the usage fields of a
/// single document, read in document order (later valid numbers replace earlier).
fn reference_usage(dialect: Dialect, doc: &Value) -> Option<(u64, u64, u64, u64)> {
    fn num(v: &Value) -> Option<u64> {
        v.as_u64()
            .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    }
    fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
        path.iter().try_fold(v, |v, k| v.as_object()?.get(*k))
    }
    type Fields<'a> = &'a [(&'a [&'a str], usize)];
    let (prefixes, names): (&[&[&str]], Fields<'_>) = match dialect {
        Dialect::OpenAi | Dialect::Native => (
            &[&["usage"], &["response", "usage"]],
            &[
                (&["prompt_tokens"], 0),
                (&["input_tokens"], 0),
                (&["prompt_tokens_details", "cached_tokens"], 1),
                (&["input_tokens_details", "cached_tokens"], 1),
                (&["completion_tokens"], 3),
                (&["output_tokens"], 3),
            ],
        ),
        Dialect::Anthropic => (
            &[&["usage"], &["message", "usage"]],
            &[
                (&["input_tokens"], 0),
                (&["cache_read_input_tokens"], 1),
                (&["cache_creation_input_tokens"], 2),
                (&["output_tokens"], 3),
            ],
        ),
        Dialect::Gemini => (
            &[&["usageMetadata"]],
            &[
                (&["promptTokenCount"], 0),
                (&["cachedContentTokenCount"], 1),
                (&["candidatesTokenCount"], 3),
                (&["thoughtsTokenCount"], 4),
                (&["toolUsePromptTokenCount"], 5),
            ],
        ),
    };
    let mut f: [Option<u64>; 6] = [None; 6];
    // Top-level keys in document (serialization) order.
    for (top, value) in doc.as_object()? {
        for prefix in prefixes {
            if prefix[0] != top {
                continue;
            }
            let Some(Value::Object(usage)) = get(value, &prefix[1..]) else {
                continue;
            };
            for (k, v) in usage {
                for (path, slot) in names {
                    if path[0] == k {
                        if let Some(n) = get(v, &path[1..]).and_then(num) {
                            f[*slot] = Some(n);
                        }
                    }
                }
            }
        }
    }
    if f.iter().all(Option::is_none) {
        return None;
    }
    let n = |i: usize| f[i].unwrap_or(0);
    Some(match dialect {
        Dialect::OpenAi | Dialect::Native => (n(0).saturating_sub(n(1)), n(1), 0, n(3)),
        Dialect::Anthropic => (n(0), n(1), n(2), n(3)),
        Dialect::Gemini => (
            n(0).saturating_sub(n(1)).saturating_add(n(5)),
            n(1),
            0,
            n(3).saturating_add(n(4)),
        ),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn e4_inspect_request_never_panics_on_bytes(
        d in dialect(),
        p in path(),
        body in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        if let Err(e) = inspect_request(d, &p, &body, &|_| None) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn e4_inspect_request_never_panics_on_json(d in dialect(), p in path(), v in json_value()) {
        let body = serde_json::to_vec(&v).unwrap();
        match inspect_request(d, &p, &body, &|_| Some(7)) {
            Ok(f) => {
                prop_assert!(f.input_tokens >= portcullis_dialects::estimate::REQUEST_OVERHEAD_TOKENS);
                prop_assert!(f.choices >= 1 && !f.model.trim().is_empty());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn e4_inspect_request_never_panics_on_mutated_fixtures(
        which in 0usize..3,
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let (d, p, t) = [
            (Dialect::OpenAi, "/v1/chat/completions", OPENAI_REQUEST),
            (Dialect::Anthropic, "/v1/messages", ANTHROPIC_REQUEST),
            (Dialect::Gemini, "/v1beta/models/g:generateContent", GEMINI_REQUEST),
        ][which];
        let mut body = t.to_vec();
        for (at, b) in edits {
            let at = at % body.len();
            body[at] = b;
        }
        let _ = inspect_request(d, p, &body, &|_| None);
    }

    #[test]
    fn w5_usage_from_json_never_panics(d in dialect(), body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = usage_from_json(d, &body);
    }

    #[test]
    fn w5_watcher_answer_does_not_depend_on_chunking_of_arbitrary_bytes(
        d in dialect(),
        streaming in any::<bool>(),
        body in prop::collection::vec(
            prop_oneof![
                any::<u8>(),
                prop::sample::select(&b"{}[]\":,\\ \r\nadtu0123456789.-e"[..]),
            ],
            0..600,
        ),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let whole = watch_chunks(d, streaming, std::slice::from_ref(&body));
        prop_assert_eq!(watch_chunks(d, streaming, &chunks(&body, &cuts)), whole);
    }

    #[test]
    fn w5_fixtures_read_the_same_in_any_chunking(
        which in 0usize..STREAMS.len() + BODIES.len(),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let (name, d, bytes, streaming) = if which < STREAMS.len() {
            let (n, d, b) = STREAMS[which];
            (n, d, b, true)
        } else {
            let (n, d, b) = BODIES[which - STREAMS.len()];
            (n, d, b, false)
        };
        let whole = watch_chunks(d, streaming, &[bytes.to_vec()]);
        prop_assert_eq!(watch_chunks(d, streaming, &chunks(bytes, &cuts)), whole, "{}", name);
    }

    #[test]
    fn w5_watcher_never_panics_on_mutated_streams(
        which in 0usize..STREAMS.len(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let (_, d, s) = STREAMS[which];
        let mut bytes = s.to_vec();
        for (at, b) in edits {
            let at = at % bytes.len();
            bytes[at] = b;
        }
        let whole = watch_chunks(d, true, std::slice::from_ref(&bytes));
        prop_assert_eq!(watch_chunks(d, true, &chunks(&bytes, &cuts)), whole);
    }

    #[test]
    fn w5_scanner_agrees_with_serde_json_on_usage(
        d in dialect(),
        noise in json_value(),
        usage in prop::collection::vec(
            (prop::sample::select(KEYS), prop_oneof![
                any::<u32>().prop_map(Value::from),
                (-5i64..5).prop_map(Value::from),
                (0.0f64..1e6).prop_map(Value::from),
                Just(Value::Null),
                Just(Value::from("12")),
            ]),
            0..8,
        ),
        wrap in 0usize..4,
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let usage: Map<String, Value> = usage.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let mut doc = match noise {
            Value::Object(m) => m,
            other => Map::from_iter([("noise".to_owned(), other)]),
        };
        let key = ["usage", "usageMetadata", "message", "response"][wrap];
        let value = if wrap >= 2 {
            Value::Object(Map::from_iter([("usage".to_owned(), Value::Object(usage))]))
        } else {
            Value::Object(usage)
        };
        doc.insert(key.to_owned(), value);
        let doc = Value::Object(doc);
        let body = serde_json::to_vec_pretty(&doc).unwrap();
        let got = watch_chunks(d, false, &chunks(&body, &cuts)).usage.map(|u| {
            (u.input_tokens, u.cached_input_tokens, u.cache_write_tokens, u.output_tokens)
        });
        prop_assert_eq!(got, reference_usage(d, &doc));
    }
}
