//! Usage extraction on every proxied response: the cost of reading a provider's
//! answer for its token counts, a non-streamed OpenAI chat completion and an OpenAI
//! stream, as the bundled fake upstream sends them.
//!
//!     cargo bench -p portcullis-dialects --bench usage

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use portcullis_dialects::{Dialect, UsageWatcher};
use std::hint::black_box;

const CHAT: &[u8] = br#"{"id":"chatcmpl-fake00000001","object":"chat.completion","created":1796211325,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"This is a fake ","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":16,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fake"}"#;

fn stream() -> Vec<u8> {
    let mut s = Vec::new();
    for word in ["This ", "is ", "a ", "fake ", "answer."] {
        s.extend_from_slice(format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"finish_reason\":null}}]}}\n\n"
        ).as_bytes());
    }
    s.extend_from_slice(b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5,\"total_tokens\":17}}\n\ndata: [DONE]\n\n");
    s
}

fn usage(c: &mut Criterion) {
    let mut g = c.benchmark_group("usage");
    g.throughput(Throughput::Bytes(CHAT.len() as u64));
    g.bench_function("openai_chat_json", |b| {
        b.iter(|| {
            let mut w = UsageWatcher::new(Dialect::OpenAi, false);
            w.observe(black_box(CHAT));
            black_box(w.finish())
        })
    });
    let s = stream();
    g.throughput(Throughput::Bytes(s.len() as u64));
    g.bench_function("openai_chat_stream", |b| {
        b.iter(|| {
            let mut w = UsageWatcher::new(Dialect::OpenAi, true);
            for event in s.split_inclusive(|&c| c == b'\n') {
                w.observe(black_box(event));
            }
            black_box(w.finish())
        })
    });
    g.finish();
}

criterion_group!(benches, usage);
criterion_main!(benches);
