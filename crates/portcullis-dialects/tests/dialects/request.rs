//! Request inspection per dialect (W5, U2, F11, E4).

use crate::support::*;
use portcullis_core::Price;
use portcullis_dialects::estimate::*;
use portcullis_dialects::{Dialect, RequestError, RequestFacts, inspect_request, rate_estimate};

fn none(_: &str) -> Option<u64> {
    None
}

fn inspect(dialect: Dialect, path: &str, body: &[u8]) -> Result<RequestFacts, RequestError> {
    inspect_request(dialect, path, body, &none)
}

fn openai(body: &str) -> Result<RequestFacts, RequestError> {
    inspect(Dialect::OpenAi, "/v1/chat/completions", body.as_bytes())
}

fn anthropic(body: &str) -> Result<RequestFacts, RequestError> {
    inspect(Dialect::Anthropic, "/v1/messages", body.as_bytes())
}

fn gemini(body: &str) -> Result<RequestFacts, RequestError> {
    inspect(
        Dialect::Gemini,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        body.as_bytes(),
    )
}

fn wrong_type(r: Result<RequestFacts, RequestError>) -> (String, &'static str) {
    match r {
        Err(RequestError::WrongType {
            field, expected, ..
        }) => (field, expected),
        other => panic!("expected a wrong-type error, got {other:?}"),
    }
}

#[test]
fn w5_estimate_rule_is_pinned_for_every_dialect() {
    // 3 per request + 4 per message (system included) + ceil(9 text bytes / 3).
    let want = REQUEST_OVERHEAD_TOKENS + 2 * MESSAGE_OVERHEAD_TOKENS + 3;
    let o = openai(
        r#"{"model":"m","messages":[{"role":"system","content":"abcdef"},
            {"role":"user","content":[{"type":"text","text":"abc"}]}]}"#,
    )
    .unwrap();
    assert_eq!(o.input_tokens, want);
    let a = anthropic(
        r#"{"model":"m","max_tokens":10,"system":"abcdef",
            "messages":[{"role":"user","content":"abc"}]}"#,
    )
    .unwrap();
    assert_eq!(a.input_tokens, want);
    let g = gemini(
        r#"{"systemInstruction":{"parts":[{"text":"abcdef"}]},
            "contents":[{"role":"user","parts":[{"text":"abc"}]}]}"#,
    )
    .unwrap();
    assert_eq!(g.input_tokens, want);

    // One image adds IMAGE_TOKENS, whatever its size; UTF-8 bytes, not characters, count.
    let img = openai(
        r#"{"model":"m","messages":[{"role":"user","content":[
            {"type":"text","text":"日本"},
            {"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}"#,
    )
    .unwrap();
    assert_eq!(
        img.input_tokens,
        REQUEST_OVERHEAD_TOKENS + MESSAGE_OVERHEAD_TOKENS + 2 + IMAGE_TOKENS
    );
    assert_eq!(img.images, 1);
}

#[test]
fn w5_tools_cost_their_json_size_plus_a_fixed_overhead() {
    let tool = r#"{"type":"function","function":{"name":"get_weather","description":"Get the current weather","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}"#;
    let base = openai(r#"{"model":"m","messages":[]}"#).unwrap();
    let with = openai(&format!(
        r#"{{"model":"m","messages":[],"tools":[{tool}]}}"#
    ))
    .unwrap();
    assert!(with.has_tools && !base.has_tools);
    let added = with.input_tokens - base.input_tokens;
    let json = tool.len() as u64;
    assert!(
        added >= TOOLS_OVERHEAD_TOKENS + json / BYTES_PER_TOKEN
            && added <= TOOLS_OVERHEAD_TOKENS + json / BYTES_PER_TOKEN + 30,
        "added {added} for {json} bytes of schema"
    );
    let empty = openai(r#"{"model":"m","messages":[],"tools":[]}"#).unwrap();
    assert!(!empty.has_tools);
    assert_eq!(empty.input_tokens, base.input_tokens);
}

#[test]
fn w5_openai_request_facts() {
    let body = with_base64(OPENAI_REQUEST, 200_000);
    let f = inspect_request(Dialect::OpenAi, "/v1/chat/completions", &body, &|_| {
        panic!("max_completion_tokens is set")
    })
    .unwrap();
    assert_eq!(f.model, "gpt-4o-2024-08-06");
    assert!(f.stream && f.usage_reported);
    assert_eq!(f.max_output_tokens, 2048);
    assert_eq!((f.choices, f.images, f.videos), (1, 1, 0));
    assert!(f.has_tools && f.structured_output);
    let floor = REQUEST_OVERHEAD_TOKENS
        + 4 * MESSAGE_OVERHEAD_TOKENS
        + IMAGE_TOKENS
        + TOOLS_OVERHEAD_TOKENS;
    assert!(
        f.input_tokens > floor + 150 && f.input_tokens < floor + 600,
        "{}",
        f.input_tokens
    );
    assert_eq!(f.token_demand(), f.input_tokens + 2048);
}

#[test]
fn w5_base64_media_is_not_counted_as_text() {
    for (dialect, path, template) in [
        (Dialect::OpenAi, "/v1/chat/completions", OPENAI_REQUEST),
        (Dialect::Anthropic, "/v1/messages", ANTHROPIC_REQUEST),
        (
            Dialect::Gemini,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            GEMINI_REQUEST,
        ),
    ] {
        let small = inspect(dialect, path, &with_base64(template, 8)).unwrap();
        let big = inspect(dialect, path, &with_base64(template, 3_000_000)).unwrap();
        assert_eq!(small, big, "{dialect:?}");
    }
}

#[test]
fn w5_openai_usage_is_reported_in_streams_only_with_include_usage() {
    let f = openai(r#"{"model":"m","messages":[],"stream":true}"#).unwrap();
    assert!(f.stream && !f.usage_reported);
    let f = openai(
        r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":false}}"#,
    )
    .unwrap();
    assert!(!f.usage_reported);
    let f = openai(r#"{"model":"m","messages":[],"stream":false}"#).unwrap();
    assert!(!f.stream && f.usage_reported);
    let f = openai(r#"{"model":"m","messages":[],"stream":null,"stream_options":null}"#).unwrap();
    assert!(!f.stream && f.usage_reported);
}

#[test]
fn w5_max_output_prefers_the_request_then_the_model_default_then_the_fallback() {
    let body = br#"{"model":"gpt-4.1","messages":[]}"#;
    let seen = std::cell::RefCell::new(Vec::new());
    let f = inspect_request(Dialect::OpenAi, "/v1/chat/completions", body, &|m| {
        seen.borrow_mut().push(m.to_owned());
        Some(32_768)
    })
    .unwrap();
    assert_eq!(f.max_output_tokens, 32_768);
    assert_eq!(*seen.borrow(), ["gpt-4.1"]);
    let f = openai(r#"{"model":"gpt-4.1","messages":[]}"#).unwrap();
    assert_eq!(f.max_output_tokens, FALLBACK_MAX_OUTPUT_TOKENS);
    let f = openai(r#"{"model":"m","messages":[],"max_tokens":100,"max_completion_tokens":200}"#)
        .unwrap();
    assert_eq!(f.max_output_tokens, 200);
    let f = openai(r#"{"model":"m","messages":[],"max_tokens":100}"#).unwrap();
    assert_eq!(f.max_output_tokens, 100);
    let f = openai(r#"{"model":"m","input":"hi","max_output_tokens":300}"#).unwrap();
    assert_eq!(f.max_output_tokens, 300);
    let f = gemini(r#"{"contents":[]}"#).unwrap();
    assert_eq!(f.max_output_tokens, FALLBACK_MAX_OUTPUT_TOKENS);
}

#[test]
fn w5_choices_multiply_the_output_bound() {
    let f = openai(r#"{"model":"m","messages":[],"max_tokens":100,"n":3}"#).unwrap();
    assert_eq!(
        (f.max_output_tokens, f.choices, f.output_upper_bound()),
        (100, 3, 300)
    );
    assert_eq!(f.token_demand(), f.input_tokens + 300);
    let f = openai(r#"{"model":"m","messages":[],"n":100000}"#).unwrap();
    assert_eq!(f.choices, MAX_CHOICES);
    let f = openai(r#"{"model":"m","messages":[],"n":0}"#).unwrap();
    assert_eq!(f.choices, 1);
    let f =
        gemini(r#"{"contents":[],"generationConfig":{"candidateCount":2,"maxOutputTokens":10}}"#)
            .unwrap();
    assert_eq!(f.output_upper_bound(), 20);
}

#[test]
fn w5_openai_image_generation_counts_requested_images() {
    let f = inspect(
        Dialect::OpenAi,
        "/v1/images/generations",
        br#"{"model":"gpt-image-1","prompt":"A cute baby sea otter","n":2,"size":"1024x1024"}"#,
    )
    .unwrap();
    assert_eq!((f.images, f.choices), (2, 1));
    assert!(f.input_tokens > REQUEST_OVERHEAD_TOKENS);
}

#[test]
fn w5_anthropic_request_facts() {
    let f = inspect(
        Dialect::Anthropic,
        "/v1/messages",
        &with_base64(ANTHROPIC_REQUEST, 5000),
    )
    .unwrap();
    assert_eq!(f.model, "claude-sonnet-4-5");
    assert!(f.stream && f.usage_reported && f.has_tools && !f.structured_output);
    assert_eq!(f.max_output_tokens, 1024);
    // The base64 image and the URL image inside the tool result; the PDF is a document.
    assert_eq!((f.images, f.videos), (2, 0));
    let floor = REQUEST_OVERHEAD_TOKENS
        + 4 * MESSAGE_OVERHEAD_TOKENS
        + 2 * IMAGE_TOKENS
        + DOCUMENT_TOKENS
        + TOOLS_OVERHEAD_TOKENS;
    assert!(
        f.input_tokens > floor + 80 && f.input_tokens < floor + 300,
        "{}",
        f.input_tokens
    );
}

#[test]
fn w5_anthropic_text_documents_count_as_text() {
    let doc = |data: &str| {
        anthropic(&format!(
            r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":[
                {{"type":"document","source":{{"type":"text","media_type":"text/plain","data":"{data}"}}}}]}}]}}"#
        ))
        .unwrap()
    };
    let short = doc("abc");
    let long = doc(&"abc".repeat(1000));
    assert_eq!(long.input_tokens - short.input_tokens, 999);
    assert_eq!(short.images, 0);
}

#[test]
fn e4_anthropic_requires_max_tokens() {
    for body in [
        r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"Hi"}]}"#,
        r#"{"model":"claude-sonnet-4-5","max_tokens":null,"messages":[]}"#,
    ] {
        let e = anthropic(body).unwrap_err();
        assert_eq!(
            e,
            RequestError::MissingField {
                field: "max_tokens"
            }
        );
        assert_eq!(e.to_string(), "`max_tokens` is required");
        assert_eq!(e.param(), Some("max_tokens"));
    }
    // OpenAI and Gemini fall back instead.
    assert!(openai(r#"{"model":"m","messages":[]}"#).is_ok());
}

#[test]
fn w5_gemini_model_and_stream_come_from_the_path() {
    let body = br#"{"model":"ignored","stream":false,"contents":[{"parts":[{"text":"hi"}]}]}"#;
    for (path, model, stream) in [
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            "gemini-2.5-flash",
            false,
        ),
        (
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            "gemini-2.5-pro",
            true,
        ),
        (
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
            "gemini-2.5-pro",
            true,
        ),
        (
            "/v1/models/gemini-2.0-flash-001:generateContent?key=x",
            "gemini-2.0-flash-001",
            false,
        ),
        (
            "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent",
            "gemini-2.5-flash",
            true,
        ),
        (
            "/v1beta/models/gemini%2D2.5-flash:generateContent",
            "gemini-2.5-flash",
            false,
        ),
    ] {
        let f = inspect(Dialect::Gemini, path, body).unwrap();
        assert_eq!((f.model.as_str(), f.stream), (model, stream), "{path}");
        assert!(f.usage_reported);
    }
}

#[test]
fn e4_gemini_paths_without_a_model_are_rejected() {
    for path in [
        "/v1beta/models/:generateContent",
        "/v1beta/models/gemini-2.5-flash",
        "/v1beta/cachedContents",
        "/v1beta/models/%20:generateContent",
    ] {
        let e = inspect(Dialect::Gemini, path, b"{}").unwrap_err();
        assert!(matches!(e, RequestError::BadPath { .. }), "{path}: {e:?}");
        assert!(e.to_string().contains(":generateContent"), "{e}");
    }
}

#[test]
fn w5_gemini_request_facts() {
    let f = inspect(
        Dialect::Gemini,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        &with_base64(GEMINI_REQUEST, 4000),
    )
    .unwrap();
    assert_eq!(f.model, "gemini-2.5-flash");
    assert!(f.stream && f.has_tools && f.structured_output);
    assert_eq!(f.max_output_tokens, 800);
    assert_eq!((f.images, f.videos, f.choices), (1, 1, 1));
    let floor = REQUEST_OVERHEAD_TOKENS
        + 4 * MESSAGE_OVERHEAD_TOKENS
        + IMAGE_TOKENS
        + VIDEO_TOKENS
        + TOOLS_OVERHEAD_TOKENS;
    assert!(
        f.input_tokens > floor + 80 && f.input_tokens < floor + 300,
        "{}",
        f.input_tokens
    );
}

#[test]
fn w5_gemini_snake_case_fields_are_read_like_camel_case() {
    let camel = gemini(
        r#"{"systemInstruction":{"parts":[{"text":"Be brief."}]},
            "contents":[{"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"video/mp4","data":"AAAA"}}]}],
            "generationConfig":{"maxOutputTokens":64,"responseSchema":{"type":"STRING"}}}"#,
    )
    .unwrap();
    let snake = gemini(
        r#"{"system_instruction":{"parts":[{"text":"Be brief."}]},
            "contents":[{"role":"user","parts":[{"text":"hi"},{"inline_data":{"mime_type":"video/mp4","data":"AAAA"}}]}],
            "generation_config":{"max_output_tokens":64,"response_schema":{"type":"STRING"}}}"#,
    )
    .unwrap();
    assert_eq!(camel, snake);
    assert_eq!((camel.videos, camel.max_output_tokens), (1, 64));
    assert!(camel.structured_output);
}

#[test]
fn w5_gemini_image_output_counts_requested_images() {
    let f = gemini(
        r#"{"contents":[{"parts":[{"text":"Draw a nano banana"}]}],
            "generationConfig":{"responseModalities":["TEXT","IMAGE"],"candidateCount":2}}"#,
    )
    .unwrap();
    assert_eq!((f.images, f.choices), (2, 2));
}

#[test]
fn f11_structured_output_is_detected_per_dialect() {
    let so = |r: Result<RequestFacts, RequestError>| r.unwrap().structured_output;
    assert!(!so(openai(
        r#"{"model":"m","messages":[],"response_format":{"type":"text"}}"#
    )));
    assert!(so(openai(
        r#"{"model":"m","messages":[],"response_format":{"type":"json_object"}}"#
    )));
    assert!(so(anthropic(
        r#"{"model":"m","max_tokens":5,"messages":[],"output_format":{"type":"json_schema","schema":{"type":"object"}}}"#
    )));
    assert!(so(anthropic(
        r#"{"model":"m","max_tokens":5,"messages":[],"output_config":{"format":{"type":"json_schema","schema":{}}}}"#
    )));
    assert!(so(gemini(
        r#"{"contents":[],"generationConfig":{"responseMimeType":"application/json"}}"#
    )));
    assert!(!so(gemini(
        r#"{"contents":[],"generationConfig":{"responseMimeType":"text/plain"}}"#
    )));
}

#[test]
fn e4_malformed_json_reports_its_position() {
    let e = openai("{\"model\": \"gpt-4o\",\n \"messages\": [}").unwrap_err();
    let RequestError::Malformed { line, column, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!((*line, *column), (2, 15));
    assert_eq!(
        e.to_string(),
        "the request body is not valid JSON: expected value (line 2, column 15)"
    );
    for bad in [
        &b"{\"model\":\"m\"} trailing"[..],
        b"{\"model\":\"m\"",
        b"{\"model\":\"\xff\"}",
        b"   ",
    ] {
        let e = inspect(Dialect::OpenAi, "/v1/chat/completions", bad).unwrap_err();
        assert!(matches!(e, RequestError::Malformed { .. }), "{e:?}");
    }
}

#[test]
fn e4_the_body_must_be_an_object() {
    for body in ["[]", "\"hello\"", "42", "null", "true"] {
        let e = openai(body).unwrap_err();
        assert_eq!(e, RequestError::NotAnObject, "{body}");
        assert_eq!(e.to_string(), "the request body must be a JSON object");
    }
}

#[test]
fn e4_model_missing_empty_too_long_or_not_a_string() {
    assert_eq!(
        openai(r#"{"messages":[]}"#).unwrap_err(),
        RequestError::MissingModel
    );
    assert_eq!(
        openai(r#"{"model":null,"messages":[]}"#).unwrap_err(),
        RequestError::MissingModel
    );
    for body in [r#"{"model":""}"#, r#"{"model":"   "}"#] {
        let e = openai(body).unwrap_err();
        assert!(matches!(e, RequestError::InvalidModel { .. }), "{e:?}");
        assert_eq!(e.param(), Some("model"));
    }
    let long = format!(r#"{{"model":"{}"}}"#, "m".repeat(MAX_MODEL_LEN + 1));
    assert!(matches!(
        openai(&long).unwrap_err(),
        RequestError::InvalidModel { .. }
    ));
    assert_eq!(
        wrong_type(openai(r#"{"model":5}"#)),
        ("model".into(), "a string")
    );
}

#[test]
fn e4_wrong_types_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (r#"{"model":"m","stream":"yes"}"#, "stream", "a boolean"),
        (
            r#"{"model":"m","max_tokens":"100"}"#,
            "max_tokens",
            "a non-negative integer",
        ),
        (
            r#"{"model":"m","max_tokens":-1}"#,
            "max_tokens",
            "a non-negative integer",
        ),
        (
            r#"{"model":"m","max_completion_tokens":1.5}"#,
            "max_completion_tokens",
            "a non-negative integer",
        ),
        (
            r#"{"model":"m","messages":{}}"#,
            "messages",
            "an array of messages",
        ),
        (
            r#"{"model":"m","messages":["hi"]}"#,
            "messages[0]",
            "a message object",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":"ok"},{"role":"user","content":5}]}"#,
            "messages[1].content",
            "a string or an array of content blocks",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":7}]}]}"#,
            "messages[0].content[1].text",
            "a string",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":["bare string"]}]}"#,
            "messages[0].content[0]",
            "a content block object",
        ),
        (
            r#"{"model":"m","stream_options":{"include_usage":"yes"}}"#,
            "stream_options.include_usage",
            "a boolean",
        ),
        (
            r#"{"model":"m","tools":{"name":"x"}}"#,
            "tools",
            "an array of tools",
        ),
        (
            r#"{"model":"m","response_format":"json"}"#,
            "response_format",
            "an object",
        ),
    ];
    for (body, field, expected) in cases {
        assert_eq!(
            wrong_type(openai(body)),
            ((*field).to_owned(), *expected),
            "{body}"
        );
    }
    assert_eq!(
        wrong_type(anthropic(r#"{"model":"m","max_tokens":5,"system":7}"#)),
        ("system".into(), "a string or an array of content blocks")
    );
    assert_eq!(
        wrong_type(gemini(r#"{"contents":[{"parts":"hi"}]}"#)),
        ("contents[0].parts".into(), "an array of parts")
    );
    assert_eq!(
        wrong_type(gemini(
            r#"{"contents":[],"generationConfig":{"maxOutputTokens":"big"}}"#
        )),
        (
            "generationConfig.maxOutputTokens".into(),
            "a non-negative integer"
        )
    );
    let e = openai(r#"{"model":"m","messages":[{"role":"user","content":5}]}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`messages[0].content` must be a string or an array of content blocks (line 1, column 51)"
    );
    assert_eq!(e.param(), Some("messages[0].content"));
}

#[test]
fn e4_deep_nesting_is_rejected_without_overflowing_the_stack() {
    let body = format!(
        r#"{{"model":"m","messages":[{}"#,
        r#"{"role":"user","content":"#.repeat(100_000)
    );
    let e = openai(&body).unwrap_err();
    let RequestError::Malformed { reason, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(reason, "recursion limit exceeded");
    let body = format!(
        r#"{{"model":"m","messages":[{{"content":{}"#,
        "[".repeat(100_000)
    );
    assert!(openai(&body).is_err());
    let body = format!(r#"{{"model":"m","tools":[{}]}}"#, "{\"a\":".repeat(10_000));
    assert!(openai(&body).is_err());
}

#[test]
fn u2_rate_estimate_reserves_input_and_the_output_bound() {
    let f = openai(r#"{"model":"m","messages":[],"max_tokens":100,"n":2}"#).unwrap();
    let r = rate_estimate(Dialect::OpenAi, &f);
    assert_eq!(
        (r.tpm, r.itpm, r.otpm),
        (f.input_tokens + 200, f.input_tokens, 200)
    );
    let r = rate_estimate(Dialect::Anthropic, &f);
    assert_eq!((r.itpm, r.otpm), (f.input_tokens, 200));
    let r = rate_estimate(Dialect::Gemini, &f);
    assert_eq!(
        (r.tpm, r.itpm, r.otpm),
        (f.input_tokens, f.input_tokens, 200)
    );
}

#[test]
fn w6_demand_carries_the_money_upper_bound() {
    let f =
        openai(r#"{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":1000}"#)
            .unwrap();
    let price = Price {
        input_per_mtok: 2_500_000,
        output_per_mtok: 10_000_000,
        per_image: 1_000,
        ..Price::default()
    };
    let d = f.demand(&price);
    assert_eq!(d.tokens, f.input_tokens + 1000);
    assert_eq!((d.images, d.videos), (0, 0));
    assert_eq!(d.money, price.upper_bound(f.input_tokens, 1000, 0, 0));
}

// --- Embeddings and token counting (P6) -------------------------------------------

fn price() -> Price {
    Price {
        input_per_mtok: 1_000_000,
        output_per_mtok: 4_000_000,
        per_image: 50_000,
        ..Price::default()
    }
}

#[test]
fn p6_operation_is_read_from_the_path() {
    use portcullis_dialects::Operation;
    for (d, path, want) in [
        (Dialect::OpenAi, "/v1/embeddings", Operation::Embed),
        (Dialect::OpenAi, "/v1/chat/completions", Operation::Generate),
        (
            Dialect::Anthropic,
            "/v1/messages/count_tokens",
            Operation::CountTokens,
        ),
        (Dialect::Anthropic, "/v1/messages", Operation::Generate),
        (
            Dialect::Gemini,
            "/v1/models/m:embedContent",
            Operation::Embed,
        ),
        (
            Dialect::Gemini,
            "/v1beta/models/m:batchEmbedContents",
            Operation::Embed,
        ),
        (
            Dialect::Gemini,
            "/v1beta/models/m:countTokens",
            Operation::CountTokens,
        ),
        (
            Dialect::Gemini,
            "/v1beta/models/m:streamGenerateContent?alt=sse",
            Operation::Generate,
        ),
    ] {
        assert_eq!(Operation::of(d, path), want, "{d:?} {path}");
        let body = match d {
            Dialect::Gemini => r#"{"contents":[{"parts":[{"text":"hi"}]}]}"#,
            _ => r#"{"model":"m","max_tokens":5,"input":"hi","messages":[]}"#,
        };
        assert_eq!(
            inspect(d, path, body.as_bytes()).unwrap().operation,
            want,
            "{path}"
        );
    }
}

#[test]
fn p6_openai_embeddings_demand_is_the_input_only() {
    let text = "a".repeat(300); // 100 tokens of text at 3 bytes a token
    let one = inspect(
        Dialect::OpenAi,
        "/v1/embeddings",
        format!(r#"{{"model":"e","input":"{text}","dimensions":256,"encoding_format":"float"}}"#)
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(one.max_output_tokens, 0);
    assert_eq!(one.output_upper_bound(), 0);
    assert!(one.input_tokens >= 100, "{}", one.input_tokens);
    assert!(one.usage_reported && !one.stream);
    let d = one.demand(&price());
    assert_eq!(d.tokens, one.input_tokens);
    assert_eq!(d.money, price().upper_bound(one.input_tokens, 0, 0, 0));
    // A list of strings counts every element; token arrays count one token per id.
    let many = inspect(
        Dialect::OpenAi,
        "/v1/embeddings",
        format!(r#"{{"model":"e","input":["{text}","{text}","{text}"]}}"#).as_bytes(),
    )
    .unwrap();
    assert!(many.input_tokens >= 300, "{}", many.input_tokens);
    let ids = inspect(
        Dialect::OpenAi,
        "/v1/embeddings",
        br#"{"model":"e","input":[[1,2,3,4,5,6,7,8,9,10],[11,12]]}"#,
    )
    .unwrap();
    assert!(ids.input_tokens >= 12, "{}", ids.input_tokens);
    assert_eq!(rate_estimate(Dialect::OpenAi, &one).tpm, one.input_tokens);
}

#[test]
fn p6_gemini_embeddings_count_content_and_every_batched_request() {
    let text = "b".repeat(300);
    let single = inspect(
        Dialect::Gemini,
        "/v1/models/text-embedding-004:embedContent",
        format!(r#"{{"content":{{"parts":[{{"text":"{text}"}}]}}}}"#).as_bytes(),
    )
    .unwrap();
    assert_eq!(single.model, "text-embedding-004");
    assert!(single.input_tokens >= 100, "{}", single.input_tokens);
    assert_eq!(single.max_output_tokens, 0);
    // Gemini's embeddings report no usage: the gateway settles at its estimate.
    assert!(!single.usage_reported);
    let batch = inspect(
        Dialect::Gemini,
        "/v1beta/models/text-embedding-004:batchEmbedContents",
        format!(
            r#"{{"requests":[{{"model":"models/text-embedding-004","content":{{"parts":[{{"text":"{text}"}}]}}}},
                {{"model":"models/text-embedding-004","content":{{"parts":[{{"text":"{text}"}}]}}}}]}}"#
        )
        .as_bytes(),
    )
    .unwrap();
    assert!(
        batch.input_tokens >= 2 * 100 && batch.input_tokens > single.input_tokens,
        "{} vs {}",
        batch.input_tokens,
        single.input_tokens
    );
}

#[test]
fn p6_count_tokens_is_free_and_needs_no_max_tokens() {
    let a = inspect(
        Dialect::Anthropic,
        "/v1/messages/count_tokens",
        br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[
            {"type":"text","text":"How many tokens is this?"},
            {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}"#,
    )
    .unwrap();
    let g = inspect(
        Dialect::Gemini,
        "/v1beta/models/gemini-2.5-flash:countTokens",
        br#"{"contents":[{"parts":[{"text":"How many tokens is this?"}]}]}"#,
    )
    .unwrap();
    for (f, d) in [(a, Dialect::Anthropic), (g, Dialect::Gemini)] {
        assert_eq!(
            (f.input_tokens, f.max_output_tokens, f.images),
            (0, 0, 0),
            "{f:?}"
        );
        assert_eq!(
            f.demand(&price()),
            portcullis_core::Demand::default(),
            "{f:?}"
        );
        assert_eq!(rate_estimate(d, &f).tpm, 0);
        assert!(!f.usage_reported);
    }
    // The same body to /v1/messages still needs max_tokens.
    assert!(matches!(
        inspect(
            Dialect::Anthropic,
            "/v1/messages",
            br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#
        ),
        Err(RequestError::MissingField {
            field: "max_tokens"
        })
    ));
}

#[test]
fn p6_responses_input_items_count_text_images_and_files_like_chat() {
    let items = inspect(
        Dialect::OpenAi,
        "/v1/responses",
        br#"{"model":"gpt-4o","instructions":"Be brief.","max_output_tokens":300,
            "previous_response_id":"resp_abc123","stream":true,
            "input":[{"type":"message","role":"user","content":[
              {"type":"input_text","text":"What is in this picture?"},
              {"type":"input_image","image_url":"data:image/png;base64,AAAA"},
              {"type":"input_file","file_id":"file-1"}]}]}"#,
    )
    .unwrap();
    assert_eq!(items.images, 1, "{items:?}");
    assert_eq!(items.max_output_tokens, 300);
    assert_eq!(items.continues.as_deref(), Some("resp_abc123"));
    assert!(
        items.stream && items.usage_reported,
        "Responses streams report usage"
    );
    assert!(
        items.input_tokens >= IMAGE_TOKENS + DOCUMENT_TOKENS,
        "{}",
        items.input_tokens
    );
    let plain = inspect(
        Dialect::OpenAi,
        "/v1/responses",
        br#"{"model":"gpt-4o","input":"What is in this picture?"}"#,
    )
    .unwrap();
    assert_eq!((plain.images, plain.continues.as_deref()), (0, None));
    // An id no provider makes is not kept.
    let long = format!(
        r#"{{"model":"gpt-4o","input":"x","previous_response_id":"{}"}}"#,
        "r".repeat(200)
    );
    let f = inspect(Dialect::OpenAi, "/v1/responses", long.as_bytes()).unwrap();
    assert_eq!(f.continues, None);
}
