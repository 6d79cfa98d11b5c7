//! A Gemini client's `generateContent` request written as an OpenAI chat request.
use super::request_config as config;
use super::wire::{
    ChatContent, ChatMessage, ChatPart, ChatRequest, GContent, GPart, GRequest, PDF,
};
use super::{CHAT, asks, call_to_chat, malformed, refuse_extra, ser};
use crate::translate::TranslateError;
use crate::translate::request::{OaToolCall, parse, unsupported};
use serde_json::{Value, json};

/// `body`, a Gemini `generateContent` request, as a chat request for `model`; a
/// `stream` asks for the usage chunk too.
pub(crate) fn request_to_chat(
    body: &[u8],
    model: &str,
    stream: bool,
) -> Result<Vec<u8>, TranslateError> {
    let r: GRequest = parse(body)?;
    refuse_extra("", &r.extra, CHAT)?;
    if asks(r.safety_settings.as_ref()) {
        return Err(unsupported(
            "safetySettings",
            "OpenAI chat completions has no safety thresholds",
        ));
    }
    if asks(r.cached_content.as_ref()) {
        return Err(unsupported(
            "cachedContent",
            "a Gemini context cache cannot be used by another provider",
        ));
    }
    let mut messages = Vec::new();
    if let Some(sys) = r.system_instruction {
        messages.push(system_message(sys)?);
    }
    if r.contents.is_empty() {
        return Err(malformed("invalid body: `contents` is empty"));
    }
    let mut calls = Calls::default();
    for (i, c) in r.contents.into_iter().enumerate() {
        let p = format!("contents[{i}]");
        refuse_extra(&p, &c.extra, CHAT)?;
        match c.role.as_deref() {
            None | Some("user") => user_turn(&p, c.parts, &mut calls, &mut messages)?,
            Some("model") => model_turn(&p, c.parts, &mut calls, &mut messages)?,
            Some(other) => {
                return Err(unsupported(
                    format!("{p}.role"),
                    format!("`{other}` turns are not translated (use user or model)"),
                ));
            }
        }
    }
    if messages.iter().all(|m| m.role == "system") {
        return Err(malformed("invalid body: `contents` hold no parts"));
    }
    let mut out = ChatRequest {
        model: model.into(),
        messages,
        stream: stream.then_some(true),
        stream_options: stream.then(|| json!({"include_usage": true})),
        ..ChatRequest::default()
    };
    if let Some(g) = r.generation_config {
        config::generation_config(g, &mut out)?;
    }
    out.tools = r.tools.map(config::tools).transpose()?;
    if let Some(tc) = r.tool_config {
        config::tool_config(tc, &mut out)?;
    }
    ser(&out)
}

fn text_message(role: &str, content: ChatContent) -> ChatMessage {
    ChatMessage {
        role: role.into(),
        content: Some(content),
        ..ChatMessage::default()
    }
}

fn system_message(sys: GContent) -> Result<ChatMessage, TranslateError> {
    refuse_extra("systemInstruction", &sys.extra, CHAT)?;
    let mut texts = Vec::new();
    for (j, part) in sys.parts.into_iter().enumerate() {
        let pp = format!("systemInstruction.parts[{j}]");
        refuse_extra(&pp, &part.extra, CHAT)?;
        match part {
            GPart {
                text: Some(t),
                inline_data: None,
                file_data: None,
                function_call: None,
                function_response: None,
                ..
            } => texts.push(t),
            _ => {
                return Err(unsupported(
                    pp,
                    "a system instruction holds text only in OpenAI chat completions",
                ));
            }
        }
    }
    let content = match <[String; 1]>::try_from(texts) {
        Ok([t]) => ChatContent::Text(t),
        Err(v) => ChatContent::Parts(v.into_iter().map(ChatPart::text).collect()),
    };
    Ok(text_message("system", content))
}

/// The function calls of the conversation so far, to give each response its call's id.
#[derive(Default)]
struct Calls {
    calls: Vec<Call>,
}

struct Call {
    gemini_id: Option<String>,
    name: String,
    chat_id: String,
    answered: bool,
}

impl Calls {
    /// A new call as a chat tool call (its id: Gemini's, else `call_<n>`).
    fn add(&mut self, part: GPart) -> Option<OaToolCall> {
        let call = part.function_call?;
        let n = self.calls.len();
        let gemini_id = call.id.clone();
        let name = call.name.clone();
        // A Gemini client's own thought signatures mean nothing to another provider.
        let tc = call_to_chat(call, None, n);
        self.calls.push(Call {
            gemini_id,
            name,
            chat_id: tc.id.clone(),
            answered: false,
        });
        Some(tc)
    }

    /// The chat id of the call a response answers: the same id, else the first
    /// unanswered call of that name.
    fn answer(&mut self, id: Option<&str>, name: &str) -> Option<String> {
        let by_id = id.and_then(|id| {
            self.calls
                .iter()
                .position(|c| c.gemini_id.as_deref() == Some(id))
        });
        let at = by_id.or_else(|| {
            self.calls
                .iter()
                .position(|c| !c.answered && c.name == name)
        })?;
        self.calls[at].answered = true;
        Some(self.calls[at].chat_id.clone())
    }
}

/// Which data a part holds (exactly one is expected).
fn kinds(part: &GPart) -> usize {
    [
        part.text.is_some(),
        part.inline_data.is_some(),
        part.file_data.is_some(),
        part.function_call.is_some(),
        part.function_response.is_some(),
    ]
    .iter()
    .filter(|k| **k)
    .count()
}

fn check_part(pp: &str, part: &GPart) -> Result<(), TranslateError> {
    refuse_extra(pp, &part.extra, CHAT)?;
    match kinds(part) {
        1 => Ok(()),
        0 => Err(malformed(format!("invalid body: `{pp}` holds no data"))),
        _ => Err(malformed(format!(
            "invalid body: `{pp}` holds more than one kind of data"
        ))),
    }
}

fn user_turn(
    p: &str,
    parts: Vec<GPart>,
    calls: &mut Calls,
    messages: &mut Vec<ChatMessage>,
) -> Result<(), TranslateError> {
    let mut content = Vec::new();
    for (j, mut part) in parts.into_iter().enumerate() {
        let pp = format!("{p}.parts[{j}]");
        check_part(&pp, &part)?;
        if part.thought == Some(true) {
            return Err(unsupported(
                format!("{pp}.thought"),
                "only the model's parts can be thoughts",
            ));
        }
        if let Some(t) = part.text {
            if !t.is_empty() {
                content.push(ChatPart::text(t));
            }
        } else if let Some(blob) = part.inline_data.take_if(|b| b.mime_type == PDF) {
            content.push(ChatPart::pdf(blob.data));
        } else if let Some(blob) = part.inline_data {
            if !blob.mime_type.starts_with("image/") {
                return Err(unsupported(
                    format!("{pp}.inlineData"),
                    format!(
                        "`{}` data is not translated (only images and PDFs reach OpenAI chat completions)",
                        blob.mime_type
                    ),
                ));
            }
            content.push(ChatPart::image(format!(
                "data:{};base64,{}",
                blob.mime_type, blob.data
            )));
        } else if let Some(file) = part.file_data {
            match file.mime_type.as_deref() {
                Some(m) if m.starts_with("image/") => content.push(ChatPart::image(file.file_uri)),
                _ => {
                    return Err(unsupported(
                        format!("{pp}.fileData"),
                        "only image files (with an image/* mimeType) are translated",
                    ));
                }
            }
        } else if let Some(resp) = part.function_response {
            refuse_extra(&format!("{pp}.functionResponse"), &resp.extra, CHAT)?;
            let id = calls
                .answer(resp.id.as_deref(), &resp.name)
                .ok_or_else(|| {
                    malformed(format!(
                        "invalid body: `{pp}.functionResponse` answers no earlier functionCall named `{}`",
                        resp.name
                    ))
                })?;
            let text = match resp.response {
                Value::Object(mut o)
                    if o.len() == 1 && o.get("result").is_some_and(Value::is_string) =>
                {
                    match o.remove("result") {
                        Some(Value::String(s)) => s,
                        _ => String::new(),
                    }
                }
                other => other.to_string(),
            };
            // Tool messages go before the rest of their turn (chat wants them right
            // after the assistant's calls).
            messages.push(ChatMessage {
                tool_call_id: Some(id),
                ..text_message("tool", ChatContent::Text(text))
            });
        } else {
            return Err(unsupported(
                format!("{pp}.functionCall"),
                "only the model's turns hold function calls",
            ));
        }
    }
    if content.is_empty() {
        return Ok(());
    }
    let content = if content.len() == 1 && content[0].kind == "text" {
        ChatContent::Text(content.remove(0).text.unwrap_or_default())
    } else {
        ChatContent::Parts(content)
    };
    messages.push(text_message("user", content));
    Ok(())
}

fn model_turn(
    p: &str,
    parts: Vec<GPart>,
    calls: &mut Calls,
    messages: &mut Vec<ChatMessage>,
) -> Result<(), TranslateError> {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (j, part) in parts.into_iter().enumerate() {
        let pp = format!("{p}.parts[{j}]");
        check_part(&pp, &part)?;
        if let Some(t) = &part.text {
            // Earlier thoughts are not sent back (Gemini does not need them either).
            if part.thought != Some(true) {
                text.push_str(t);
            }
        } else if part.function_call.is_some() {
            tool_calls.extend(calls.add(part));
        } else {
            let field = if part.inline_data.is_some() {
                "inlineData"
            } else if part.file_data.is_some() {
                "fileData"
            } else {
                "functionResponse"
            };
            return Err(unsupported(
                format!("{pp}.{field}"),
                "an assistant message holds text and tool calls only",
            ));
        }
    }
    if text.is_empty() && tool_calls.is_empty() {
        return Ok(());
    }
    messages.push(ChatMessage {
        role: "assistant".into(),
        content: (!text.is_empty()).then_some(ChatContent::Text(text)),
        tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        ..ChatMessage::default()
    });
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use crate::translate::{TranslateError, Wire, request};
    use serde_json::{Value, json};

    pub(in super::super) fn g_to_oa(req: Value, stream: bool) -> Result<Value, TranslateError> {
        let out = request(
            Wire::Gemini,
            Wire::Chat,
            req.to_string().as_bytes(),
            "gpt-up",
            1000,
            stream,
        )?;
        Ok(serde_json::from_slice(&out).unwrap())
    }

    pub(in super::super) fn refused(r: Result<Value, TranslateError>) -> String {
        match r {
            Err(TranslateError::Unsupported { field, .. }) => field,
            other => panic!("not refused: {other:?}"),
        }
    }

    pub(in super::super) fn weather_json_schema() -> Value {
        json!({"type": "object", "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}}, "required": ["location"]})
    }

    #[test]
    fn x2_gemini_text_with_system_instruction_becomes_chat_messages() {
        // Google's "system instructions" and "multi-turn conversation" REST examples.
        let got = g_to_oa(
            json!({
                "system_instruction": {"parts": [{"text": "You are a cat."}]},
                "contents": [{"role": "user", "parts": [{"text": "Hello"}]}]
            }),
            true,
        );
        // camelCase only: the snake_case spelling is refused by name, not dropped.
        assert_eq!(refused(got), "system_instruction");
        let got = g_to_oa(
            json!({
                "systemInstruction": {"parts": [{"text": "You are a cat. Your name is Neko."}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "Hello"}]},
                    {"role": "model", "parts": [{"text": "Great to meet you. What would you like to know?"}]},
                    {"role": "user", "parts": [{"text": "I have two dogs in my house."}, {"text": "How many paws are in my house?"}]}
                ],
                "generationConfig": {"stopSequences": ["Title"], "temperature": 1.0, "topP": 0.8, "maxOutputTokens": 800, "seed": 7, "presencePenalty": 0.5, "frequencyPenalty": 0.25}
            }),
            true,
        )
        .unwrap();
        assert_eq!(
            got,
            json!({
                "model": "gpt-up",
                "messages": [
                    {"role": "system", "content": "You are a cat. Your name is Neko."},
                    {"role": "user", "content": "Hello"},
                    {"role": "assistant", "content": "Great to meet you. What would you like to know?"},
                    {"role": "user", "content": [{"type": "text", "text": "I have two dogs in my house."}, {"type": "text", "text": "How many paws are in my house?"}]}
                ],
                "max_completion_tokens": 800,
                "temperature": 1.0,
                "top_p": 0.8,
                "stop": ["Title"],
                "seed": 7,
                "presence_penalty": 0.5,
                "frequency_penalty": 0.25,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn x2_gemini_function_response_second_turn_becomes_tool_messages_by_name() {
        // Google's parallel function calling example, second turn (no ids: by name, in
        // order).
        let got = g_to_oa(
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "Turn this place into a party!"}]},
                    {"role": "model", "parts": [
                        {"functionCall": {"name": "power_disco_ball", "args": {"power": true}}, "thoughtSignature": "c2lnMQ=="},
                        {"functionCall": {"name": "start_music", "args": {"energetic": true, "loud": true}}},
                        {"functionCall": {"name": "dim_lights", "args": {"brightness": 0.5}}}
                    ]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"name": "start_music", "response": {"result": "ok"}}},
                        {"functionResponse": {"name": "power_disco_ball", "response": {"status": true}}},
                        {"functionResponse": {"name": "dim_lights", "response": {"result": "dimmed"}}},
                        {"text": "Thanks!"}
                    ]}
                ]
            }),
            false,
        )
        .unwrap();
        let call = |id: &str, name: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
        assert_eq!(
            got["messages"],
            json!([
                {"role": "user", "content": "Turn this place into a party!"},
                {"role": "assistant", "tool_calls": [
                    call("call_0", "power_disco_ball", "{\"power\":true}"),
                    call("call_1", "start_music", "{\"energetic\":true,\"loud\":true}"),
                    call("call_2", "dim_lights", "{\"brightness\":0.5}")
                ]},
                {"role": "tool", "content": "ok", "tool_call_id": "call_1"},
                {"role": "tool", "content": "{\"status\":true}", "tool_call_id": "call_0"},
                {"role": "tool", "content": "dimmed", "tool_call_id": "call_2"},
                {"role": "user", "content": "Thanks!"}
            ])
        );
    }

    #[test]
    fn x2_gemini_function_ids_are_kept_and_matched() {
        let got = g_to_oa(
            json!({"contents": [
                {"role": "user", "parts": [{"text": "weather?"}]},
                {"role": "model", "parts": [
                    {"text": "thinking", "thought": true},
                    {"text": "Let me check."},
                    {"functionCall": {"id": "fc_a", "name": "w", "args": {"c": "Paris"}}},
                    {"functionCall": {"id": "fc_b", "name": "w", "args": {"c": "Rome"}}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "fc_b", "name": "w", "response": {"t": 24}}},
                    {"functionResponse": {"id": "fc_a", "name": "w", "response": {"t": 18}}}
                ]}
            ]}),
            false,
        )
        .unwrap();
        let m = &got["messages"];
        assert_eq!(m[1]["content"], json!("Let me check."));
        assert_eq!(m[1]["tool_calls"][0]["id"], json!("fc_a"));
        assert_eq!(m[1]["tool_calls"][1]["id"], json!("fc_b"));
        assert_eq!(
            m[2],
            json!({"role": "tool", "content": "{\"t\":24}", "tool_call_id": "fc_b"})
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "content": "{\"t\":18}", "tool_call_id": "fc_a"})
        );
        // A response that answers no call is malformed.
        let orphan = g_to_oa(
            json!({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {}}}]}]}),
            false,
        );
        assert!(
            matches!(orphan, Err(TranslateError::Malformed(m)) if m.contains("contents[0].parts[0].functionResponse"))
        );
    }

    #[test]
    fn x2_gemini_inline_image_becomes_a_data_url_and_files_only_when_images() {
        // Google's image understanding REST example (inline base64 JPEG).
        let got = g_to_oa(
            json!({"contents": [{"parts": [
                {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}},
                {"text": "Caption this image."},
                {"fileData": {"mimeType": "image/png", "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc"}}
            ]}]}),
            false,
        )
        .unwrap();
        assert_eq!(
            got["messages"],
            json!([{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQSkZJRg=="}},
                {"type": "text", "text": "Caption this image."},
                {"type": "image_url", "image_url": {"url": "https://generativelanguage.googleapis.com/v1beta/files/abc"}}
            ]}])
        );
        let with = |part: Value| {
            json!({"contents": [
                {"role": "user", "parts": [{"text": "a"}]},
                {"role": "model", "parts": [{"text": "b"}]},
                {"role": "user", "parts": [part]}
            ]})
        };
        for (part, field) in [
            (
                json!({"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/doc.pdf"}}),
                "contents[2].parts[0].fileData",
            ),
            (
                json!({"fileData": {"fileUri": "https://youtu.be/x"}}),
                "contents[2].parts[0].fileData",
            ),
            (
                json!({"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}}),
                "contents[2].parts[0].inlineData",
            ),
            (
                json!({"executableCode": {"language": "PYTHON", "code": "1"}}),
                "contents[2].parts[0].executableCode",
            ),
            (
                json!({"functionCall": {"name": "f", "args": {}}}),
                "contents[2].parts[0].functionCall",
            ),
        ] {
            assert_eq!(refused(g_to_oa(with(part), false)), field);
        }
    }

    #[test]
    fn x2_gemini_only_fields_are_refused_naming_their_path() {
        let base = || json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let with = |k: &str, v: Value| {
            let mut r = base();
            r[k] = v;
            r
        };
        let gen_with = |k: &str, v: Value| with("generationConfig", json!({ k: v }));
        for (req, field) in [
            (
                with(
                    "safetySettings",
                    json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}]),
                ),
                "safetySettings",
            ),
            (
                with("cachedContent", json!("cachedContents/abc")),
                "cachedContent",
            ),
            (
                with("tools", json!([{"googleSearch": {}}])),
                "tools[0].googleSearch",
            ),
            (
                with(
                    "tools",
                    json!([{"functionDeclarations": [{"name": "f", "behavior": "NON_BLOCKING"}]}]),
                ),
                "tools[0].functionDeclarations[0].behavior",
            ),
            (with("frobnicate", json!(1)), "frobnicate"),
            (gen_with("topK", json!(40)), "generationConfig.topK"),
            (
                gen_with("candidateCount", json!(2)),
                "generationConfig.candidateCount",
            ),
            (
                gen_with("responseLogprobs", json!(true)),
                "generationConfig.responseLogprobs",
            ),
            (gen_with("logprobs", json!(3)), "generationConfig.logprobs"),
            (
                gen_with("responseModalities", json!(["TEXT", "IMAGE"])),
                "generationConfig.responseModalities",
            ),
            (
                gen_with("speechConfig", json!({})),
                "generationConfig.speechConfig",
            ),
        ] {
            assert_eq!(refused(g_to_oa(req, false)), field);
        }
        let mut r = base();
        r["contents"][0]["role"] = json!("function");
        assert_eq!(refused(g_to_oa(r, false)), "contents[0].role");
        // Harmless values pass.
        assert!(g_to_oa(with("safetySettings", json!([])), false).is_ok());
        assert!(g_to_oa(gen_with("candidateCount", json!(1)), false).is_ok());
        assert!(g_to_oa(gen_with("responseModalities", json!(["TEXT"])), false).is_ok());
        assert!(matches!(
            g_to_oa(json!({"contents": []}), false),
            Err(TranslateError::Malformed(_))
        ));
        assert!(matches!(
            g_to_oa(json!({"contents": [{"parts": [{"text": 3}]}]}), false),
            Err(TranslateError::Malformed(m)) if m.contains("contents[0].parts[0].text")
        ));
    }
}
