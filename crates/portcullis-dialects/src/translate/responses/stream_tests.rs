//! Tests of chat streams → Responses events (and Anthropic streams through the hub).
use super::response_from_chat;
use crate::translate::stream::TRUNCATED;
use crate::translate::{StreamTranslator, Wire};
use serde_json::{Value, json};

fn run(from: Wire, parts: &[&[u8]]) -> (Vec<u8>, bool) {
    let mut t = StreamTranslator::new(from, Wire::Responses, "pub", true);
    let mut out = Vec::new();
    for p in parts {
        t.push(p, &mut out);
    }
    let ok = t.finish(&mut out);
    (out, ok)
}

fn zero(v: &mut Value, key: &str) {
    if let Some(x) = v.get_mut(key).filter(|x| x.is_number()) {
        *x = json!(0);
    }
}

/// The client's events as (type, data without `sequence_number`), checking that
/// each is `event: <type>` with one data line whose `type` is the same, and that the
/// sequence numbers run from 0. Timestamps of the response objects are zeroed.
fn parse(out: &[u8]) -> Vec<(String, Value)> {
    let s = std::str::from_utf8(out).expect("utf-8 output");
    assert!(s.is_empty() || s.ends_with("\n\n"), "{s}");
    s.split_terminator("\n\n")
        .enumerate()
        .map(|(n, ev)| {
            let mut lines = ev.lines();
            let name = lines
                .next()
                .and_then(|l| l.strip_prefix("event: "))
                .expect("event line");
            let data = lines
                .next()
                .and_then(|l| l.strip_prefix("data: "))
                .expect("data line");
            assert_eq!(lines.next(), None, "one data line per event");
            let mut v: Value = serde_json::from_str(data).expect("valid JSON");
            assert_eq!(v["type"], name);
            assert_eq!(v["sequence_number"], json!(n), "sequence number of {name}");
            v.as_object_mut().unwrap().remove("sequence_number");
            if let Some(r) = v.get_mut("response") {
                zero(r, "created_at");
                zero(r, "completed_at");
            }
            (name.to_owned(), v)
        })
        .collect()
}

/// Translates `input` whole, split at every byte and byte by byte; all must agree.
fn split_anywhere(from: Wire, input: &str) -> (Vec<(String, Value)>, bool) {
    let b = input.as_bytes();
    let (whole, ok) = run(from, &[b]);
    let want = parse(&whole);
    for i in 0..=b.len() {
        let (o, k) = run(from, &[&b[..i], &b[i..]]);
        assert_eq!((parse(&o), k), (want.clone(), ok), "split at {i}");
    }
    let bytes: Vec<&[u8]> = b.chunks(1).collect();
    let (o, k) = run(from, &bytes);
    assert_eq!((parse(&o), k), (want.clone(), ok), "byte by byte");
    (want, ok)
}

fn types(ev: &[(String, Value)]) -> Vec<&str> {
    ev.iter().map(|(n, _)| n.as_str()).collect()
}

fn chunk(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"system_fingerprint\":\"fp_1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}],\"usage\":null}}\n\n"
    )
}

const USAGE: &str = "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"total_tokens\":120,\"prompt_tokens_details\":{\"cached_tokens\":64},\"completion_tokens_details\":{\"reasoning_tokens\":5}}}\n\n";

const DONE: &str = "data: [DONE]\n\n";

fn stream(deltas: &[&str], finish: &str) -> String {
    let mut v = vec![chunk(
        r#"{"role":"assistant","content":"","refusal":null}"#,
        "null",
    )];
    v.extend(deltas.iter().map(|d| chunk(d, "null")));
    v.extend([
        chunk("{}", &format!("\"{finish}\"")),
        USAGE.into(),
        DONE.into(),
    ]);
    v.concat()
}

/// The buffered translation of the same answer, its timestamps zeroed: a
/// stream's `response.completed` must carry the same response.
fn buffered(message: Value, finish: &str) -> Value {
    let chat = json!({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1694268190, "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 5}}});
    let out = response_from_chat(chat.to_string().as_bytes(), "pub").unwrap();
    let mut v: Value = serde_json::from_slice(&out).unwrap();
    zero(&mut v, "created_at");
    zero(&mut v, "completed_at");
    v
}

#[test]
fn x2_chat_text_stream_becomes_responses_events_split_anywhere() {
    let (ev, ok) = split_anywhere(
        Wire::Chat,
        &stream(
            &[r#"{"content":"Hello"}"#, r#"{"content":" wörld ✓"}"#],
            "stop",
        ),
    );
    assert!(ok);
    let msg = "msg_chatcmpl-abc";
    let at = |v: Value| {
        let mut base = json!({"item_id": msg, "output_index": 0, "content_index": 0});
        base.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        base
    };
    let part = |t: &str| json!({"type": "output_text", "text": t, "annotations": []});
    let item = |status: &str, content: Value| json!({"type": "message", "id": msg, "status": status, "role": "assistant", "content": content});
    let completed = buffered(
        json!({"role": "assistant", "content": "Hello wörld ✓"}),
        "stop",
    );
    let mut created = completed.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    created["usage"] = Value::Null;
    created["completed_at"] = Value::Null;
    let want: Vec<(&str, Value)> = vec![
        ("response.created", json!({"response": created})),
        ("response.in_progress", json!({"response": created})),
        (
            "response.output_item.added",
            json!({"output_index": 0, "item": item("in_progress", json!([]))}),
        ),
        ("response.content_part.added", at(json!({"part": part("")}))),
        (
            "response.output_text.delta",
            at(json!({"delta": "Hello", "logprobs": []})),
        ),
        (
            "response.output_text.delta",
            at(json!({"delta": " wörld ✓", "logprobs": []})),
        ),
        (
            "response.output_text.done",
            at(json!({"text": "Hello wörld ✓", "logprobs": []})),
        ),
        (
            "response.content_part.done",
            at(json!({"part": part("Hello wörld ✓")})),
        ),
        (
            "response.output_item.done",
            json!({"output_index": 0, "item": item("completed", json!([part("Hello wörld ✓")]))}),
        ),
        ("response.completed", json!({"response": completed})),
    ];
    let want: Vec<(String, Value)> = want
        .into_iter()
        .map(|(n, mut v)| {
            v["type"] = json!(n);
            (n.to_owned(), v)
        })
        .collect();
    assert_eq!(ev, want);
    assert_eq!(ev[9].1["response"]["id"], "resp_chatcmpl-abc");
    // The response is created when the chat completion was.
    let (raw, _) = run(
        Wire::Chat,
        &[stream(&[r#"{"content":"Hi"}"#], "stop").as_bytes()],
    );
    let raw = String::from_utf8(raw).unwrap();
    assert_eq!(raw.matches("\"created_at\":1694268190").count(), 3);
}

fn tools_stream(interleaved: bool) -> String {
    let call = |i: u32, id: &str| {
        chunk(
            &format!(
                r#"{{"tool_calls":[{{"index":{i},"id":"{id}","type":"function","function":{{"name":"get_weather","arguments":""}}}}]}}"#
            ),
            "null",
        )
    };
    let args = |i: u32, a: &str| {
        chunk(
            &format!(
                r#"{{"tool_calls":[{{"index":{i},"function":{{"arguments":{}}}}}]}}"#,
                json!(a)
            ),
            "null",
        )
    };
    let mut v = vec![
        chunk(r#"{"role":"assistant","content":null}"#, "null"),
        chunk(r#"{"content":"Checking."}"#, "null"),
    ];
    if interleaved {
        v.extend([
            call(0, "call_a"),
            call(1, "call_b__pcx1_eyJ4Ijp9"),
            args(0, "{\"location\":"),
            args(1, "{\"location\": \"Bogotá\"}"),
            args(0, " \"Paris\"}"),
        ]);
    } else {
        v.extend([
            call(0, "call_a"),
            args(0, "{\"location\":"),
            args(0, " \"Paris\"}"),
            call(1, "call_b__pcx1_eyJ4Ijp9"),
            args(1, "{\"location\": \"Bogotá\"}"),
        ]);
    }
    v.extend([chunk("{}", r#""tool_calls""#), USAGE.into(), DONE.into()]);
    v.concat()
}

#[test]
fn x2_streamed_parallel_tool_calls_each_get_their_own_output_index_and_call_id() {
    let completed = buffered(
        json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
            {"id": "call_b__pcx1_eyJ4Ijp9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Bogotá\"}"}}
        ]}),
        "tool_calls",
    );
    for interleaved in [false, true] {
        let (ev, ok) = split_anywhere(Wire::Chat, &tools_stream(interleaved));
        assert!(ok);
        let of = |kind: &str| -> Vec<&Value> {
            ev.iter()
                .filter(|(n, _)| n == kind)
                .map(|(_, v)| v)
                .collect()
        };
        let added = of("response.output_item.added");
        assert_eq!(added.len(), 3);
        for (i, id) in [(1, "call_a"), (2, "call_b__pcx1_eyJ4Ijp9")] {
            assert_eq!(added[i]["output_index"], i);
            assert_eq!(
                added[i]["item"],
                json!({"type": "function_call", "id": format!("fc_chatcmpl-abc_{}", i - 1), "call_id": id,
                    "name": "get_weather", "arguments": "", "status": "in_progress"})
            );
            let args: String = of("response.function_call_arguments.delta")
                .iter()
                .filter(|d| d["output_index"] == i)
                .inspect(|d| assert_eq!(d["item_id"], format!("fc_chatcmpl-abc_{}", i - 1)))
                .map(|d| d["delta"].as_str().unwrap())
                .collect();
            let want = completed["output"][i]["arguments"].clone();
            assert_eq!(json!(args), want);
            let done = of("response.function_call_arguments.done");
            let done = done
                .iter()
                .find(|d| d["output_index"] == i)
                .expect("arguments done");
            assert_eq!(
                (&done["arguments"], &done["name"]),
                (&want, &json!("get_weather"))
            );
        }
        // The text item closes before the first call opens.
        let at = |p: &dyn Fn(&(String, Value)) -> bool| ev.iter().position(p).unwrap();
        let text_done = at(&|(n, _)| n == "response.output_item.done");
        let first_call =
            at(&|(n, v)| n == "response.output_item.added" && v["item"]["type"] == "function_call");
        assert!(text_done < first_call, "interleaved: {interleaved}");
        assert_eq!(ev[text_done].1["item"]["type"], "message");
        assert_eq!(of("response.output_item.done").len(), 3);
        assert_eq!(
            ev.last().unwrap(),
            &(
                "response.completed".to_owned(),
                json!({"type": "response.completed", "response": completed})
            )
        );
    }
}

#[test]
fn x2_stream_usage_and_every_item_arrive_in_response_completed() {
    let (ev, ok) = split_anywhere(Wire::Chat, &stream(&[r#"{"content":"Hi"}"#], "stop"));
    assert!(ok);
    let r = &ev.last().unwrap().1["response"];
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 120})
    );
    assert_eq!(r["status"], "completed");
    assert_eq!(r["output"][0]["content"][0]["text"], "Hi");
    // Usage before [DONE] ends the stream; the end of the body after a finish_reason
    // without usage is a proper end too (without usage).
    let s = stream(&[r#"{"content":"Hi"}"#], "stop");
    let (out, ok) = run(Wire::Chat, &[&s.as_bytes()[..s.len() - DONE.len()]]);
    assert!(ok);
    assert_eq!(parse(&out), ev);
    let cut = s.find(USAGE).unwrap();
    let (out, ok) = run(Wire::Chat, &[&s.as_bytes()[..cut]]);
    assert!(ok);
    let ev = parse(&out);
    assert_eq!(ev.last().unwrap().0, "response.completed");
    assert_eq!(ev.last().unwrap().1["response"]["usage"], Value::Null);
}

#[test]
fn x2_streamed_reasoning_and_refusal_match_the_buffered_answer() {
    let (ev, ok) = split_anywhere(
        Wire::Chat,
        &stream(
            &[
                r#"{"reasoning_content":"Six times "}"#,
                r#"{"reasoning_content":"seven."}"#,
                r#"{"content":"42"}"#,
                r#"{"refusal":"No more."}"#,
            ],
            "stop",
        ),
    );
    assert!(ok);
    let want = buffered(
        json!({"role": "assistant", "content": "42", "reasoning_content": "Six times seven.", "refusal": "No more."}),
        "stop",
    );
    assert_eq!(ev.last().unwrap().1["response"], want);
    let t = types(&ev);
    assert_eq!(
        t[2..13],
        [
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
        ]
    );
    let get = |kind: &str| ev.iter().find(|(n, _)| n == kind).unwrap().1.clone();
    assert_eq!(
        get("response.reasoning_summary_text.done"),
        json!({"type": "response.reasoning_summary_text.done", "item_id": "rs_chatcmpl-abc", "output_index": 0, "summary_index": 0, "text": "Six times seven."})
    );
    assert_eq!(
        get("response.refusal.done"),
        json!({"type": "response.refusal.done", "item_id": "msg_chatcmpl-abc", "output_index": 1, "content_index": 1, "refusal": "No more."})
    );
}

#[test]
fn x3_length_finish_ends_with_response_incomplete() {
    let (ev, ok) = split_anywhere(
        Wire::Chat,
        &stream(&[r#"{"content":"Once upon a"}"#], "length"),
    );
    assert!(ok);
    let (name, last) = ev.last().unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(
        last["response"],
        buffered(
            json!({"role": "assistant", "content": "Once upon a"}),
            "length"
        )
    );
    assert_eq!(
        last["response"]["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    let done = &ev
        .iter()
        .find(|(n, _)| n == "response.output_item.done")
        .unwrap()
        .1;
    assert_eq!(done["item"]["status"], "incomplete");
}

#[test]
fn x3_cut_stream_ends_with_an_error_event_and_finish_false() {
    let s = stream(
        &[
            r#"{"content":"Hello"}"#,
            r#"{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}"#,
        ],
        "stop",
    );
    let end = s.find(r#""finish_reason":"stop""#).unwrap();
    for cut in [0, 20, end / 2, end] {
        let (out, ok) = run(Wire::Chat, &[&s.as_bytes()[..cut]]);
        assert!(!ok, "cut at {cut}");
        let ev = parse(&out);
        assert!(
            ev.iter()
                .all(|(n, _)| n != "response.completed" && n != "response.incomplete")
        );
        assert_eq!(
            ev.last().unwrap(),
            &(
                "error".to_owned(),
                json!({"type": "error", "code": "stream_truncated", "message": TRUNCATED, "param": null})
            )
        );
    }
    let (ev, ok) = split_anywhere(Wire::Chat, &s[..end]);
    assert!(!ok);
    assert_eq!(ev.last().unwrap().0, "error");
}

#[test]
fn x3_in_stream_error_becomes_an_error_event_and_nothing_after() {
    let s = stream(&[r#"{"content":"Hello"}"#], "stop");
    let cut = s.find(r#""finish_reason":"stop""#).unwrap();
    let cut = s[..cut].rfind("data: ").unwrap();
    let err = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n";
    let input = format!("{}{err}", &s[..cut]);
    let (ev, ok) = split_anywhere(Wire::Chat, &input);
    assert!(!ok);
    assert_eq!(
        ev.last().unwrap(),
        &(
            "error".to_owned(),
            json!({"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached", "param": null})
        )
    );
    // The provider going on changes nothing.
    let (out, ok) = run(Wire::Chat, &[input.as_bytes(), s.as_bytes()]);
    assert!(!ok);
    assert_eq!(parse(&out), ev);
    // A chunk that cannot be read ends the stream the same way.
    let (ev, ok) = split_anywhere(
        Wire::Chat,
        &format!("{}data: {{oops\n\n{}", &s[..cut], &s[cut..]),
    );
    assert!(!ok);
    assert_eq!(ev.last().unwrap().1["code"], "malformed_event");
    assert!(ev.iter().all(|(n, _)| n != "response.completed"));
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

#[test]
fn x1_anthropic_stream_reaches_a_responses_client_through_the_hub() {
    let (ev, ok) = split_anywhere(Wire::Messages, ANTHROPIC_TEXT);
    assert!(ok);
    let t = types(&ev);
    assert_eq!(t[..2], ["response.created", "response.in_progress"]);
    assert_eq!(
        t.iter()
            .filter(|n| **n == "response.output_text.delta")
            .count(),
        2
    );
    let (name, last) = ev.last().unwrap();
    assert_eq!(name, "response.completed");
    let r = &last["response"];
    assert_eq!(
        r["id"],
        "resp_chatcmpl-msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY"
    );
    assert_eq!(
        (&r["status"], &r["model"]),
        (&json!("completed"), &json!("pub"))
    );
    assert_eq!(r["output"][0]["content"][0]["text"], "Hello wörld ✓");
    assert_eq!(r["usage"]["input_tokens"], 25);
    assert_eq!(r["usage"]["output_tokens"], 15);
    // Cut before message_stop: the Anthropic leg's truncation reaches the client as
    // an error event.
    let end = ANTHROPIC_TEXT.find("event: message_delta").unwrap();
    let (out, ok) = run(Wire::Messages, &[&ANTHROPIC_TEXT.as_bytes()[..end]]);
    assert!(!ok);
    let ev = parse(&out);
    assert_eq!(ev.last().unwrap().1["code"], "stream_truncated");
    assert!(ev.iter().all(|(n, _)| n != "response.completed"));
}

const ANTHROPIC_THINKING_TOOL: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01T\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"output_tokens\":2}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"I need the weather.\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3h\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"Paris\\\"}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

#[test]
fn x2_thinking_signature_round_trips_through_a_responses_client() {
    // An Anthropic turn streamed to a Responses client...
    let (ev, ok) = split_anywhere(Wire::Messages, ANTHROPIC_THINKING_TOOL);
    assert!(ok);
    let r = &ev.last().unwrap().1["response"];
    assert_eq!(r["output"][0]["type"], "reasoning");
    assert_eq!(r["output"][0]["summary"][0]["text"], "I need the weather.");
    let call = &r["output"][1];
    assert_eq!(
        (&call["type"], &call["name"]),
        (&json!("function_call"), &json!("get_weather"))
    );
    assert_eq!(call["arguments"], "{\"location\": \"Paris\"}");
    let call_id = call["call_id"].as_str().unwrap();
    assert!(
        call_id.starts_with("toolu_01T1x1fJ34qAmk2tNTrN7Up6__pcx1_"),
        "{call_id}"
    );
    // ...which sends its output back with the call's result, as the SDK docs show.
    let mut input = vec![json!({"role": "user", "content": "Weather in Paris?"})];
    input.extend(r["output"].as_array().unwrap().iter().cloned());
    input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "14C"}));
    let body = json!({"model": "m", "input": input, "reasoning": {"effort": "low"}, "max_output_tokens": 4000});
    let out = crate::translate::request(
        Wire::Responses,
        Wire::Messages,
        body.to_string().as_bytes(),
        "claude",
        1000,
        false,
    )
    .unwrap();
    let got: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        got["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "I need the weather.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
            {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {"location": "Paris"}}
        ])
    );
    assert_eq!(
        got["messages"][2]["content"][0]["tool_use_id"],
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    );
}
