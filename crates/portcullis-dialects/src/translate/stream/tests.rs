use super::*;

const A: Wire = Wire::Messages;
const O: Wire = Wire::Chat;

/// The client's bytes of a `from` stream fed to a `to` client in `parts` (under the
/// public model `public`), and `finish`. Shared by the legs' stream tests.
pub(crate) fn run(from: Wire, to: Wire, parts: &[&[u8]], usage: bool) -> (Vec<u8>, bool) {
    let mut t = StreamTranslator::new(from, to, "public", usage);
    let mut out = Vec::new();
    for p in parts {
        t.push(p, &mut out);
    }
    let ok = t.finish(&mut out);
    (out, ok)
}

/// The client's events: (event name, data JSON; `[DONE]` as a string), with
/// `created` zeroed.
pub(crate) fn parse(out: &[u8]) -> Vec<(String, Value)> {
    let s = std::str::from_utf8(out).expect("utf-8 output");
    assert!(s.is_empty() || s.ends_with("\n\n"), "{s}");
    s.split_terminator("\n\n")
        .map(|ev| {
            let mut name = String::new();
            let mut data = None;
            for line in ev.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    assert!(data.is_none(), "one data line per event");
                    data = Some(d.to_owned());
                } else {
                    panic!("unexpected line {line:?}");
                }
            }
            let data = data.expect("data line");
            let mut v = if data == "[DONE]" {
                Value::String(data)
            } else {
                serde_json::from_str(&data).expect("valid JSON")
            };
            if let Some(c) = v.get_mut("created") {
                *c = json!(0);
            }
            (name, v)
        })
        .collect()
}

/// Translates `input` whole, split at every byte and one byte at a time; all
/// must agree. Returns the parsed events and `finish`.
fn split_anywhere(from: Wire, to: Wire, input: &str, usage: bool) -> (Vec<(String, Value)>, bool) {
    split_anywhere_read(parse, from, to, input, usage)
}

/// [`split_anywhere`] with the client's events read by `read` (each client API has
/// its own framing checks).
pub(crate) fn split_anywhere_read(
    read: fn(&[u8]) -> Vec<(String, Value)>,
    from: Wire,
    to: Wire,
    input: &str,
    usage: bool,
) -> (Vec<(String, Value)>, bool) {
    let b = input.as_bytes();
    let (whole, ok) = run(from, to, &[b], usage);
    let want = read(&whole);
    for i in 0..=b.len() {
        let (o, k) = run(from, to, &[&b[..i], &b[i..]], usage);
        assert_eq!((read(&o), k), (want.clone(), ok), "split at {i}");
    }
    let bytes: Vec<&[u8]> = b.chunks(1).collect();
    let (o, k) = run(from, to, &bytes, usage);
    assert_eq!((read(&o), k), (want.clone(), ok), "byte by byte");
    (want, ok)
}

pub(crate) fn data_only(events: &[(String, Value)]) -> Vec<Value> {
    events.iter().map(|(_, v)| v.clone()).collect()
}

fn chunk(id: &str, delta: Value, finish: Value) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": "public",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
}

const ANTHROPIC_TEXT: &str = "event: message_start\n\
data: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\", \"type\": \"message\", \"role\": \"assistant\", \"content\": [], \"model\": \"claude-opus-4-20250514\", \"stop_reason\": null, \"stop_sequence\": null, \"usage\": {\"input_tokens\": 25, \"output_tokens\": 1}}}\n\n\
event: content_block_start\n\
data: {\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_delta\n\
data: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"Hello\"}}\n\n\
event: content_block_delta\n\
data: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \" wörld ✓\"}}\n\n\
event: content_block_stop\n\
data: {\"type\": \"content_block_stop\", \"index\": 0}\n\n\
event: message_delta\n\
data: {\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\", \"stop_sequence\":null}, \"usage\": {\"output_tokens\": 15}}\n\n\
event: message_stop\n\
data: {\"type\": \"message_stop\"}\n\n";

const ANTHROPIC_THINKING_TOOLS: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01T\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_read_input_tokens\":1000,\"cache_creation_input_tokens\":28,\"output_tokens\":2}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"I need the weather \"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"in two cities.\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3h\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\":\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" \\\"San Francisco, CA\\\"}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":2}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_02\",\"name\":\"get_weather\",\"input\":{}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"Bogotá\\\"}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":3}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

fn openai_chunk(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"system_fingerprint\":\"fp_1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}],\"usage\":null}}\n\n"
    )
}

const OPENAI_USAGE: &str = "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"total_tokens\":120,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n";

fn openai_text() -> String {
    [
        openai_chunk(
            r#"{"role":"assistant","content":"","refusal":null}"#,
            "null",
        ),
        openai_chunk(r#"{"content":"Hello"}"#, "null"),
        openai_chunk(r#"{"reasoning_content":"hidden"}"#, "null"),
        openai_chunk(r#"{"content":" wörld ✓"}"#, "null"),
        openai_chunk("{}", r#""stop""#),
        OPENAI_USAGE.into(),
        "data: [DONE]\n\n".into(),
    ]
    .concat()
}

fn openai_tools(interleaved: bool) -> String {
    let call = |i: u32, id: &str| {
        openai_chunk(
            &format!(
                r#"{{"tool_calls":[{{"index":{i},"id":"{id}","type":"function","function":{{"name":"get_weather","arguments":""}}}}]}}"#
            ),
            "null",
        )
    };
    let args = |i: u32, a: &str| {
        openai_chunk(
            &format!(
                r#"{{"tool_calls":[{{"index":{i},"function":{{"arguments":{}}}}}]}}"#,
                json!(a)
            ),
            "null",
        )
    };
    let mut v = vec![
        openai_chunk(r#"{"role":"assistant","content":null}"#, "null"),
        openai_chunk(r#"{"content":"Checking."}"#, "null"),
    ];
    if interleaved {
        v.extend([
            call(0, "call_a"),
            call(1, "call_b"),
            args(0, "{\"location\":"),
            args(1, "{\"location\": \"Bogotá\"}"),
            args(0, " \"Paris\"}"),
        ]);
    } else {
        v.extend([
            call(0, "call_a"),
            args(0, "{\"location\":"),
            args(0, " \"Paris\"}"),
            call(1, "call_b"),
            args(1, "{\"location\": \"Bogotá\"}"),
        ]);
    }
    v.extend([
        openai_chunk("{}", r#""tool_calls""#),
        OPENAI_USAGE.into(),
        "data: [DONE]\n\n".into(),
    ]);
    v.concat()
}

#[test]
fn x2_anthropic_stream_becomes_openai_chunks_split_anywhere() {
    let (ev, ok) = split_anywhere(A, O, ANTHROPIC_TEXT, false);
    assert!(ok);
    assert!(ev.iter().all(|(name, _)| name.is_empty()));
    let id = "chatcmpl-msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY";
    assert_eq!(
        data_only(&ev),
        vec![
            chunk(id, json!({"role": "assistant", "content": ""}), json!(null)),
            chunk(id, json!({"content": "Hello"}), json!(null)),
            chunk(id, json!({"content": " wörld ✓"}), json!(null)),
            chunk(id, json!({}), json!("stop")),
            json!("[DONE]"),
        ]
    );
    // CRLF line ends, split anywhere, read the same.
    let crlf = ANTHROPIC_TEXT.replace('\n', "\r\n");
    assert_eq!(split_anywhere(A, O, &crlf, false), (ev, true));
}

#[test]
fn x2_openai_stream_becomes_anthropic_events_split_anywhere() {
    let (ev, ok) = split_anywhere(O, A, &openai_text(), true);
    assert!(ok);
    let text_delta = |t: &str| {
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": t}})
    };
    let want = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {
            "id": "msg_chatcmpl-abc", "type": "message", "role": "assistant",
            "model": "public", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        ("content_block_delta", text_delta("Hello")),
        ("content_block_delta", text_delta(" wörld ✓")),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 20, "input_tokens": 36, "cache_read_input_tokens": 64}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let want: Vec<(String, Value)> = want.into_iter().map(|(n, v)| (n.into(), v)).collect();
    assert_eq!(ev, want);
}

#[test]
fn x2_stream_usage_maps_cached_tokens() {
    let (ev, _) = split_anywhere(A, O, ANTHROPIC_THINKING_TOOLS, true);
    let (last, usage) = (&ev[ev.len() - 1].1, &ev[ev.len() - 2].1);
    assert_eq!(last, &json!("[DONE]"));
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 1500, "completion_tokens": 89, "total_tokens": 1589,
            "prompt_tokens_details": {"cached_tokens": 1000}})
    );
    // Without include_usage there is no usage chunk.
    let (ev, _) = split_anywhere(A, O, ANTHROPIC_TEXT, false);
    assert!(ev.iter().all(|(_, v)| v.get("usage").is_none()));
    // OpenAI → Anthropic: input excludes the cached part (see the text test).
    let (ev, _) = split_anywhere(O, A, &openai_text(), false);
    let delta = &ev
        .iter()
        .find(|(n, _)| n == "message_delta")
        .expect("delta")
        .1;
    assert_eq!(delta["usage"]["input_tokens"], 36);
    assert_eq!(delta["usage"]["cache_read_input_tokens"], 64);
}

#[test]
fn x2_thinking_signature_rides_in_the_first_tool_call_id() {
    let (ev, ok) = split_anywhere(A, O, ANTHROPIC_THINKING_TOOLS, false);
    assert!(ok);
    let blocks = vec![
        json!({"type": "thinking", "thinking": "I need the weather in two cities.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}),
    ];
    let first = wrap_tool_id("toolu_01T1x1fJ34qAmk2tNTrN7Up6", &blocks);
    let id = "chatcmpl-msg_01T";
    let tc = |v: Value| json!({"tool_calls": [v]});
    assert_eq!(
        data_only(&ev),
        vec![
            chunk(id, json!({"role": "assistant", "content": ""}), json!(null)),
            chunk(
                id,
                json!({"reasoning_content": "I need the weather "}),
                json!(null)
            ),
            chunk(
                id,
                json!({"reasoning_content": "in two cities."}),
                json!(null)
            ),
            chunk(
                id,
                tc(json!({"index": 0, "id": first, "type": "function",
                "function": {"name": "get_weather", "arguments": ""}})),
                json!(null)
            ),
            chunk(
                id,
                tc(json!({"index": 0, "function": {"arguments": "{\"location\":"}})),
                json!(null)
            ),
            chunk(
                id,
                tc(json!({"index": 0, "function": {"arguments": " \"San Francisco, CA\"}"}})),
                json!(null)
            ),
            chunk(
                id,
                tc(json!({"index": 1, "id": "toolu_02", "type": "function",
                "function": {"name": "get_weather", "arguments": ""}})),
                json!(null)
            ),
            chunk(
                id,
                tc(json!({"index": 1, "function": {"arguments": "{\"location\": \"Bogotá\"}"}})),
                json!(null)
            ),
            chunk(id, json!({}), json!("tool_calls")),
            json!("[DONE]"),
        ]
    );
}

#[test]
fn x2_streamed_parallel_tool_calls_keep_their_own_index_and_id() {
    for interleaved in [false, true] {
        let (ev, ok) = split_anywhere(O, A, &openai_tools(interleaved), true);
        assert!(ok);
        let ev: Vec<Value> = data_only(&ev)[1..].to_vec();
        let start = |i: u32, id: &str| {
            json!({"type": "content_block_start", "index": i, "content_block":
                {"type": "tool_use", "id": id, "name": "get_weather", "input": {}}})
        };
        let delta =
            |i: u32, d: Value| json!({"type": "content_block_delta", "index": i, "delta": d});
        let args =
            |i: u32, a: &str| delta(i, json!({"type": "input_json_delta", "partial_json": a}));
        let stop = |i: u32| json!({"type": "content_block_stop", "index": i});
        let mut want = vec![
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            delta(0, json!({"type": "text_delta", "text": "Checking."})),
            stop(0),
            start(1, "call_a"),
            args(1, "{\"location\":"),
            args(1, " \"Paris\"}"),
            stop(1),
            start(2, "call_b"),
            args(2, "{\"location\": \"Bogotá\"}"),
            stop(2),
        ];
        want.extend([
            json!({"type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 20, "input_tokens": 36,
                    "cache_read_input_tokens": 64}}),
            json!({"type": "message_stop"}),
        ]);
        assert_eq!(ev, want, "interleaved: {interleaved}");
    }
}

#[test]
fn x3_cut_stream_ends_with_an_error_never_a_clean_finish() {
    // Anthropic → OpenAI: cut anywhere before message_stop.
    let b = ANTHROPIC_TEXT.as_bytes();
    let end = ANTHROPIC_TEXT.find("event: message_stop").expect("stop");
    for cut in [0, 10, end / 2, end] {
        let (out, ok) = run(A, O, &[&b[..cut]], true);
        assert!(!ok, "cut at {cut}");
        let ev = data_only(&parse(&out));
        assert!(!ev.contains(&json!("[DONE]")));
        assert_eq!(
            ev.last(),
            Some(
                &json!({"error": {"message": TRUNCATED, "type": "server_error",
                "code": "stream_truncated", "param": null}})
            )
        );
    }
    // OpenAI → Anthropic: cut before the finish_reason chunk.
    let s = openai_text();
    let end = s.find(r#""finish_reason":"stop""#).expect("finish");
    for cut in [0, 30, end] {
        let (out, ok) = run(O, A, &[&s.as_bytes()[..cut]], true);
        assert!(!ok, "cut at {cut}");
        let ev = parse(&out);
        assert!(ev.iter().all(|(n, _)| n != "message_stop"));
        assert_eq!(
            ev.last(),
            Some(&(
                "error".to_owned(),
                json!({"type": "error",
                "error": {"type": "api_error", "message": TRUNCATED}})
            ))
        );
    }
    // A finish_reason followed by the end of the body is a proper end.
    let after = s.find("data: [DONE]").expect("done");
    let (out, ok) = run(O, A, &[&s.as_bytes()[..after - OPENAI_USAGE.len()]], true);
    assert!(ok);
    assert_eq!(parse(&out).last().expect("event").0, "message_stop");
}

#[test]
fn x3_in_stream_error_becomes_the_clients_error_event() {
    let cut = ANTHROPIC_TEXT
        .find("event: content_block_stop")
        .expect("stop");
    let err = "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
    let input = format!("{}{err}", &ANTHROPIC_TEXT[..cut]);
    let (ev, ok) = split_anywhere(A, O, &input, true);
    assert!(!ok);
    assert_eq!(
        ev.last().expect("event").1,
        json!({"error": {"message": "Overloaded", "type": "server_error",
            "code": "overloaded", "param": null}})
    );
    // Nothing after the error, even if the provider goes on.
    let (out, ok) = run(A, O, &[input.as_bytes(), ANTHROPIC_TEXT.as_bytes()], true);
    assert!(!ok);
    assert_eq!(parse(&out), ev);

    let s = openai_text();
    let cut = s.find(r#""finish_reason":"stop""#).expect("finish");
    let cut = s[..cut].rfind("data: ").expect("chunk");
    let err = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n";
    let (ev, ok) = split_anywhere(O, A, &format!("{}{err}", &s[..cut]), true);
    assert!(!ok);
    assert_eq!(
        ev.last().expect("event"),
        &(
            "error".to_owned(),
            json!({"type": "error",
            "error": {"type": "rate_limit_error", "message": "Rate limit reached"}})
        )
    );
    assert!(ev.iter().all(|(n, _)| n != "message_stop"));
}

#[test]
fn x3_an_oversized_event_ends_the_stream_with_an_error() {
    let mut t = StreamTranslator::new(O, A, "public", true);
    let mut out = Vec::new();
    t.push(b"data: {\"content\":\"", &mut out);
    let big = vec![b'a'; 1 << 20];
    for _ in 0..5 {
        t.push(&big, &mut out);
    }
    assert!(!t.finish(&mut out));
    let ev = parse(&out);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].1["error"]["message"], TOO_LARGE);
}

#[test]
fn x2_a_streamed_structured_answer_arrives_as_text() {
    let input = format!(
        "event: message_start\n\
data: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_s\",\"usage\":{{\"input_tokens\":9,\"output_tokens\":1}}}}}}\n\n\
event: content_block_start\n\
data: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_s\",\"name\":\"{JSON_TOOL}\",\"input\":{{}}}}}}\n\n\
event: content_block_delta\n\
data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{\\\"city\\\": \"}}}}\n\n\
event: content_block_delta\n\
data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"Paris\\\"}}\"}}}}\n\n\
event: content_block_stop\n\
data: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
event: message_delta\n\
data: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"tool_use\"}},\"usage\":{{\"output_tokens\":7}}}}\n\n\
event: message_stop\n\
data: {{\"type\":\"message_stop\"}}\n\n"
    );
    let (ev, ok) = split_anywhere(A, O, &input, false);
    assert!(ok);
    let text: String = ev
        .iter()
        .filter_map(|(_, v)| v["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, r#"{"city": "Paris"}"#);
    assert!(
        ev.iter()
            .all(|(_, v)| v["choices"][0]["delta"].get("tool_calls").is_none()),
        "{ev:?}"
    );
    let finish: Vec<&Value> = ev
        .iter()
        .map(|(_, v)| &v["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")]);
}

#[test]
fn x1_same_dialect_streams_pass_through() {
    let (out, ok) = run(A, A, &[ANTHROPIC_TEXT.as_bytes()], true);
    assert!(ok);
    assert_eq!(out, ANTHROPIC_TEXT.as_bytes());
    let (out, ok) = run(O, O, &[b"data: x"], true);
    assert!(ok);
    assert_eq!(out, b"data: x");
}
