//! An OpenAI chat request written as a Gemini `generateContent` body (no model in it:
//! the channel's model goes in the path).
use super::wire::{
    ChatContent, ChatMessage, ChatRequest, ChatStop, ChatTool, ChatToolChoice, GBlob, GContent,
    GFunctionCallingConfig, GFunctionDeclaration, GFunctionResponse, GGenerationConfig, GPart,
    GRequest, GThinkingConfig, GTool, GToolConfig, PDF,
};
use super::{CallId, GEMINI, asks, call_from_chat, malformed, refuse_extra, ser, unwrap_signature};
use crate::translate::TranslateError;
use crate::translate::request::{Extra, parse, unsupported};
use serde_json::{Map, Value};

/// `body`, an OpenAI chat request, as a Gemini `generateContent` body.
pub(crate) fn request_from_chat(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let r: ChatRequest = parse(body)?;
    refuse_extra("", &r.extra, GEMINI)?;
    let refuse = |field: &str, why: &str| Err(unsupported(field, why));
    if r.n.is_some_and(|n| n > 1) {
        return refuse("n", "only one candidate is translated from Gemini");
    }
    if r.logprobs == Some(true) {
        return refuse("logprobs", "log probabilities are not translated to Gemini");
    }
    if asks(r.top_logprobs.as_ref()) {
        return refuse(
            "top_logprobs",
            "log probabilities are not translated to Gemini",
        );
    }
    if asks(r.logit_bias.as_ref()) {
        return refuse("logit_bias", "Gemini has no logit bias");
    }
    if asks(r.audio.as_ref()) {
        return refuse("audio", "audio answers are not translated to Gemini");
    }
    if r.modalities
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m != "text"))
    {
        return refuse("modalities", "only text answers are translated to Gemini");
    }
    if asks(r.prediction.as_ref()) {
        return refuse("prediction", "Gemini has no predicted outputs");
    }
    if r.parallel_tool_calls == Some(false) {
        return refuse(
            "parallel_tool_calls",
            "Gemini cannot be told not to call functions in parallel",
        );
    }
    let (system, contents) = contents(r.messages)?;
    let tools = r.tools.map(tools).transpose()?;
    let tool_config = r.tool_choice.map(tool_config).transpose()?;
    let thinking_config = r.reasoning_effort.as_deref().map(thinking).transpose()?;
    let (response_mime_type, response_json_schema) = match r.response_format {
        None => (None, None),
        Some(f) => match f.kind.as_str() {
            "text" => (None, None),
            "json_object" => (Some("application/json".to_owned()), None),
            "json_schema" => {
                let schema = f
                    .json_schema
                    .ok_or_else(|| {
                        malformed("invalid body: `response_format.json_schema` is missing")
                    })?
                    .schema
                    .unwrap_or_else(|| Value::Object(Map::new()));
                (Some("application/json".to_owned()), Some(schema))
            }
            other => {
                return Err(unsupported(
                    "response_format.type",
                    format!("`{other}` has no Gemini response MIME type"),
                ));
            }
        },
    };
    let config = GGenerationConfig {
        stop_sequences: r.stop.map(|s| match s {
            ChatStop::One(s) => vec![s],
            ChatStop::Many(v) => v,
        }),
        response_mime_type,
        response_json_schema,
        max_output_tokens: r.max_completion_tokens.or(r.max_tokens),
        temperature: r.temperature,
        top_p: r.top_p,
        seed: r.seed,
        presence_penalty: r.presence_penalty,
        frequency_penalty: r.frequency_penalty,
        thinking_config,
        ..GGenerationConfig::default()
    };
    let generation_config = (serde_json::to_value(&config)
        .is_ok_and(|v| v.as_object().is_some_and(|o| !o.is_empty())))
    .then_some(config);
    ser(&GRequest {
        contents,
        system_instruction: system,
        tools,
        tool_config,
        generation_config,
        ..GRequest::default()
    })
}

fn content(role: &str, parts: Vec<GPart>) -> GContent {
    GContent {
        role: Some(role.into()),
        parts,
        extra: Extra::new(),
    }
}

/// The system instruction and the turns of a chat conversation.
fn contents(
    messages: Vec<ChatMessage>,
) -> Result<(Option<GContent>, Vec<GContent>), TranslateError> {
    let mut system = Vec::new();
    let mut out: Vec<GContent> = Vec::new();
    // The calls seen so far (plain id, name), for the tool messages' names.
    let mut calls: Vec<(String, String)> = Vec::new();
    // The last content holds tool results (the next ones join it).
    let mut in_results = false;
    for (i, m) in messages.into_iter().enumerate() {
        let p = format!("messages[{i}]");
        refuse_extra(&p, &m.extra, GEMINI)?;
        if m.name.is_some() {
            return Err(unsupported(
                format!("{p}.name"),
                "Gemini turns have no participant name",
            ));
        }
        let results = m.role == "tool";
        match m.role.as_str() {
            "system" | "developer" => system.extend(text_parts(&p, m.content)?),
            "user" => {
                let parts = user_parts(&p, m.content)?;
                if !parts.is_empty() {
                    out.push(content("user", parts));
                }
            }
            "assistant" => {
                let mut parts = text_parts(&p, m.content)?;
                for (k, call) in m.tool_calls.into_iter().flatten().enumerate() {
                    let cp = format!("{p}.tool_calls[{k}]");
                    if call.kind != "function" {
                        return Err(unsupported(
                            format!("{cp}.type"),
                            "only function tool calls are translated",
                        ));
                    }
                    let part = call_from_chat(&cp, call, CallId::Plain)?;
                    if let Some(c) = &part.function_call {
                        calls.push((c.id.clone().unwrap_or_default(), c.name.clone()));
                    }
                    parts.push(part);
                }
                if !parts.is_empty() {
                    out.push(content("model", parts));
                }
            }
            "tool" => {
                let id = m.tool_call_id.as_deref().ok_or_else(|| {
                    malformed(format!("invalid body: `{p}.tool_call_id` is missing"))
                })?;
                let (id, _) = unwrap_signature(id);
                let name = calls
                    .iter()
                    .rev()
                    .find(|(c, _)| *c == id)
                    .map(|(_, name)| name.clone())
                    .ok_or_else(|| {
                        malformed(format!(
                            "invalid body: `{p}.tool_call_id` matches no earlier tool call"
                        ))
                    })?;
                let text: String = text_parts(&p, m.content)?
                    .into_iter()
                    .filter_map(|t| t.text)
                    .collect();
                let response = match serde_json::from_str::<Value>(&text) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => {
                        Value::Object(Map::from_iter([("result".to_owned(), Value::String(text))]))
                    }
                };
                let part = GPart {
                    function_response: Some(GFunctionResponse {
                        id: (!id.is_empty()).then_some(id),
                        name,
                        response,
                        extra: Extra::new(),
                    }),
                    ..GPart::default()
                };
                match out.last_mut() {
                    Some(last) if in_results => last.parts.push(part),
                    _ => out.push(content("user", vec![part])),
                }
            }
            other => {
                return Err(unsupported(
                    format!("{p}.role"),
                    format!("`{other}` messages cannot be sent to Gemini"),
                ));
            }
        }
        in_results = results;
    }
    if out.is_empty() {
        return Err(unsupported(
            "messages",
            "Gemini needs at least one user or assistant message with content",
        ));
    }
    let system = (!system.is_empty()).then(|| GContent {
        role: None,
        parts: system,
        extra: Extra::new(),
    });
    Ok((system, out))
}

/// Text-only content (system, assistant and tool messages) as text parts; empty text
/// is dropped.
fn text_parts(path: &str, content: Option<ChatContent>) -> Result<Vec<GPart>, TranslateError> {
    match content {
        None => Ok(Vec::new()),
        Some(ChatContent::Text(s)) => Ok((!s.is_empty())
            .then(|| GPart::text(s))
            .into_iter()
            .collect()),
        Some(ChatContent::Parts(parts)) => {
            let mut out = Vec::new();
            for (j, p) in parts.into_iter().enumerate() {
                let pp = format!("{path}.content[{j}]");
                if p.kind != "text" {
                    return Err(unsupported(
                        format!("{pp}.type"),
                        "only text parts are translated here",
                    ));
                }
                refuse_extra(&pp, &p.extra, GEMINI)?;
                let t = p
                    .text
                    .ok_or_else(|| malformed(format!("invalid body: `{pp}.text` is missing")))?;
                if !t.is_empty() {
                    out.push(GPart::text(t));
                }
            }
            Ok(out)
        }
    }
}

fn user_parts(path: &str, content: Option<ChatContent>) -> Result<Vec<GPart>, TranslateError> {
    let parts = match content {
        None => {
            return Err(malformed(format!(
                "invalid body: `{path}.content` is missing"
            )));
        }
        Some(ChatContent::Text(s)) => return text_parts(path, Some(ChatContent::Text(s))),
        Some(ChatContent::Parts(parts)) => parts,
    };
    let mut out = Vec::new();
    for (j, p) in parts.into_iter().enumerate() {
        let pp = format!("{path}.content[{j}]");
        match p.kind.as_str() {
            "text" => {
                refuse_extra(&pp, &p.extra, GEMINI)?;
                let t = p
                    .text
                    .ok_or_else(|| malformed(format!("invalid body: `{pp}.text` is missing")))?;
                if !t.is_empty() {
                    out.push(GPart::text(t));
                }
            }
            "image_url" => {
                refuse_extra(&pp, &p.extra, GEMINI)?;
                let image = p.image_url.ok_or_else(|| {
                    malformed(format!("invalid body: `{pp}.image_url` is missing"))
                })?;
                if image.detail.as_deref().is_some_and(|d| d != "auto") {
                    return Err(unsupported(
                        format!("{pp}.image_url.detail"),
                        "Gemini has no per-image detail level",
                    ));
                }
                let inline = image
                    .url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(";base64,"));
                let Some((mime, data)) = inline else {
                    return Err(unsupported(
                        format!("{pp}.image_url.url"),
                        "Gemini does not fetch image URLs: send the image inline as a base64 data: URL",
                    ));
                };
                out.push(GPart {
                    inline_data: Some(GBlob {
                        mime_type: mime.into(),
                        data: data.into(),
                    }),
                    ..GPart::default()
                });
            }
            "file" => {
                refuse_extra(&pp, &p.extra, GEMINI)?;
                let file = p
                    .file
                    .ok_or_else(|| malformed(format!("invalid body: `{pp}.file` is missing")))?;
                if file.file_id.is_some() {
                    return Err(unsupported(
                        format!("{pp}.file.file_id"),
                        "a file uploaded to OpenAI cannot be read by Gemini: send it as file_data",
                    ));
                }
                let inline = file
                    .file_data
                    .as_deref()
                    .and_then(|d| d.strip_prefix("data:"))
                    .and_then(|rest| rest.split_once(";base64,"));
                let Some((PDF, data)) = inline else {
                    return Err(unsupported(
                        format!("{pp}.file.file_data"),
                        "Gemini is sent PDF files, as a base64 data URL of application/pdf",
                    ));
                };
                out.push(GPart {
                    inline_data: Some(GBlob {
                        mime_type: PDF.into(),
                        data: data.into(),
                    }),
                    ..GPart::default()
                });
            }
            other => {
                return Err(unsupported(
                    format!("{pp}.type"),
                    format!("`{other}` parts are not translated to Gemini"),
                ));
            }
        }
    }
    Ok(out)
}

fn tools(tools: Vec<ChatTool>) -> Result<Vec<GTool>, TranslateError> {
    let mut decls = Vec::new();
    for (i, t) in tools.into_iter().enumerate() {
        let tp = format!("tools[{i}]");
        if t.kind != "function" {
            return Err(unsupported(
                format!("{tp}.type"),
                "only function tools are translated to Gemini",
            ));
        }
        refuse_extra(&tp, &t.extra, GEMINI)?;
        let f = t
            .function
            .ok_or_else(|| malformed(format!("invalid body: `{tp}.function` is missing")))?;
        refuse_extra(&format!("{tp}.function"), &f.extra, GEMINI)?;
        decls.push(GFunctionDeclaration {
            name: f.name,
            description: f.description,
            parameters_json_schema: f.parameters,
            ..GFunctionDeclaration::default()
        });
    }
    Ok(vec![GTool {
        function_declarations: Some(decls),
        extra: Extra::new(),
    }])
}

fn tool_config(choice: ChatToolChoice) -> Result<GToolConfig, TranslateError> {
    let (mode, names) = match choice {
        ChatToolChoice::Mode(m) => match m.as_str() {
            "auto" => ("AUTO", None),
            "required" => ("ANY", None),
            "none" => ("NONE", None),
            _ => {
                return Err(unsupported(
                    "tool_choice",
                    "only auto, none, required or a named function are translated",
                ));
            }
        },
        ChatToolChoice::Named {
            kind,
            function: Some(f),
        } if kind == "function" => ("ANY", Some(vec![f.name])),
        ChatToolChoice::Named { .. } => {
            return Err(unsupported(
                "tool_choice.type",
                "only function tool choices are translated",
            ));
        }
    };
    Ok(GToolConfig {
        function_calling_config: Some(GFunctionCallingConfig {
            mode: Some(mode.into()),
            allowed_function_names: names,
            extra: Extra::new(),
        }),
        extra: Extra::new(),
    })
}

fn thinking(effort: &str) -> Result<GThinkingConfig, TranslateError> {
    let budget = match effort {
        "none" | "minimal" => {
            return Ok(GThinkingConfig {
                thinking_budget: Some(0),
                ..GThinkingConfig::default()
            });
        }
        "low" => 1024,
        "medium" => 8192,
        "high" => 24576,
        other => {
            return Err(unsupported(
                "reasoning_effort",
                format!(
                    "`{other}` has no Gemini thinking budget (use none, minimal, low, medium or high)"
                ),
            ));
        }
    };
    Ok(GThinkingConfig {
        include_thoughts: Some(true),
        thinking_budget: Some(budget),
        ..GThinkingConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use crate::translate::request::wrap_tool_id;
    use crate::translate::{TranslateError, Wire, request};
    use serde_json::{Value, json};

    pub(super) fn oa_to_g(req: Value) -> Result<Value, TranslateError> {
        let out = request(
            Wire::Chat,
            Wire::Gemini,
            req.to_string().as_bytes(),
            "gemini-up",
            1000,
            false,
        )?;
        Ok(serde_json::from_slice(&out).unwrap())
    }

    fn refused(r: Result<Value, TranslateError>) -> String {
        match r {
            Err(TranslateError::Unsupported { field, .. }) => field,
            other => panic!("not refused: {other:?}"),
        }
    }

    fn weather_schema() -> Value {
        json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})
    }

    #[test]
    fn x2_chat_system_and_history_become_gemini_contents() {
        let got = oa_to_g(json!({
            "model": "gpt-4.1",
            "messages": [
                {"role": "system", "content": "You are a cat."},
                {"role": "user", "content": "Hello"},
                {"role": "developer", "content": [{"type": "text", "text": "Your name is Neko."}]},
                {"role": "assistant", "content": "Meow.", "refusal": null},
                {"role": "user", "content": "And?"},
                {"role": "user", "content": ""}
            ],
            "max_tokens": 100, "temperature": 0.2, "top_p": 0.9, "stop": "END", "seed": 3,
            "presence_penalty": 0.1, "frequency_penalty": 0.2, "stream": true,
            "stream_options": {"include_usage": true}, "user": "u-1", "store": false
        }))
        .unwrap();
        assert_eq!(
            got,
            json!({
                "systemInstruction": {"parts": [{"text": "You are a cat."}, {"text": "Your name is Neko."}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "Hello"}]},
                    {"role": "model", "parts": [{"text": "Meow."}]},
                    {"role": "user", "parts": [{"text": "And?"}]}
                ],
                "generationConfig": {"stopSequences": ["END"], "maxOutputTokens": 100, "temperature": 0.2, "topP": 0.9, "seed": 3, "presencePenalty": 0.1, "frequencyPenalty": 0.2}
            })
        );
        // max_completion_tokens wins over max_tokens.
        let got = oa_to_g(json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "max_completion_tokens": 9})).unwrap();
        assert_eq!(got["generationConfig"], json!({"maxOutputTokens": 9}));
    }

    #[test]
    fn x2_chat_tools_and_tool_choice_become_function_declarations() {
        let req = |choice: Value| {
            json!({"model": "m", "messages": [{"role": "user", "content": "Weather in Boston?"}],
                "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": weather_schema(), "strict": true}}],
                "tool_choice": choice, "parallel_tool_calls": true})
        };
        let got = oa_to_g(req(json!("auto"))).unwrap();
        assert_eq!(
            got["tools"],
            json!([{"functionDeclarations": [{"name": "get_weather", "description": "Get the weather", "parametersJsonSchema": weather_schema()}]}])
        );
        for (choice, want) in [
            (json!("auto"), json!({"mode": "AUTO"})),
            (json!("required"), json!({"mode": "ANY"})),
            (json!("none"), json!({"mode": "NONE"})),
            (
                json!({"type": "function", "function": {"name": "get_weather"}}),
                json!({"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
            ),
        ] {
            let got = oa_to_g(req(choice.clone())).unwrap();
            assert_eq!(
                got["toolConfig"],
                json!({"functionCallingConfig": want}),
                "{choice}"
            );
        }
        let mut r = req(json!("auto"));
        r["parallel_tool_calls"] = json!(false);
        assert_eq!(refused(oa_to_g(r)), "parallel_tool_calls");
        assert_eq!(
            refused(oa_to_g(req(
                json!({"type": "allowed_tools", "allowed_tools": {}})
            ))),
            "tool_choice.type"
        );
        let mut r = req(json!("auto"));
        r["tools"][0] = json!({"type": "custom", "custom": {"name": "x"}});
        assert_eq!(refused(oa_to_g(r)), "tools[0].type");
    }

    #[test]
    fn x2_chat_parallel_tool_results_become_one_gemini_turn_named_by_the_calls() {
        let sig = wrap_tool_id(
            "call_1",
            &[json!({"type": "gemini_signature", "signature": "c2lnLTE="})],
        );
        let got = oa_to_g(json!({"model": "m", "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": sig, "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}
            ]},
            {"role": "tool", "tool_call_id": sig, "content": "{\"temp\": 18}"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
            {"role": "user", "content": "Thanks"}
        ]}))
        .unwrap();
        assert_eq!(
            got["contents"],
            json!([
                {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
                {"role": "model", "parts": [
                    {"thoughtSignature": "c2lnLTE=", "functionCall": {"id": "call_1", "name": "get_weather", "args": {"location": "Paris"}}},
                    {"functionCall": {"id": "call_2", "name": "get_time", "args": {}}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "call_1", "name": "get_weather", "response": {"temp": 18}}},
                    {"functionResponse": {"id": "call_2", "name": "get_time", "response": {"result": "noon"}}}
                ]},
                {"role": "user", "parts": [{"text": "Thanks"}]}
            ])
        );
        // A tool message without its call, and arguments that are not an object.
        let orphan = oa_to_g(
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c", "content": "y"}]}),
        );
        assert!(
            matches!(orphan, Err(TranslateError::Malformed(m)) if m.contains("messages[1].tool_call_id"))
        );
        let bad = oa_to_g(
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]}),
        );
        assert!(
            matches!(bad, Err(TranslateError::Malformed(m)) if m.contains("messages[1].tool_calls[0]"))
        );
    }

    #[test]
    fn x2_chat_images_go_inline_and_urls_are_refused() {
        let req = |url: &str, detail: Option<&str>| {
            let mut image = json!({"url": url});
            if let Some(d) = detail {
                image["detail"] = json!(d);
            }
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": image}
            ]}]})
        };
        let got = oa_to_g(req("data:image/png;base64,iVBORw0KGgo=", Some("auto"))).unwrap();
        assert_eq!(
            got["contents"][0]["parts"],
            json!([{"text": "What is this?"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}])
        );
        assert_eq!(
            refused(oa_to_g(req("https://example.com/a.jpg", None))),
            "messages[0].content[1].image_url.url"
        );
        assert_eq!(
            refused(oa_to_g(req("data:image/png,rawbytes", None))),
            "messages[0].content[1].image_url.url"
        );
        assert_eq!(
            refused(oa_to_g(req("data:image/png;base64,AA==", Some("high")))),
            "messages[0].content[1].image_url.detail"
        );
        let audio = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}]});
        assert_eq!(refused(oa_to_g(audio)), "messages[0].content[0].type");
    }

    #[test]
    fn x2_chat_response_format_and_reasoning_become_generation_config() {
        let base = |k: &str, v: Value| {
            let mut r = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            r[k] = v;
            r
        };
        let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"], "additionalProperties": false});
        let got = oa_to_g(base("response_format", json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": schema}}))).unwrap();
        assert_eq!(
            got["generationConfig"],
            json!({"responseMimeType": "application/json", "responseJsonSchema": schema})
        );
        let got = oa_to_g(base("response_format", json!({"type": "json_object"}))).unwrap();
        assert_eq!(
            got["generationConfig"],
            json!({"responseMimeType": "application/json"})
        );
        let got = oa_to_g(base("response_format", json!({"type": "text"}))).unwrap();
        assert!(got.get("generationConfig").is_none());
        for (effort, want) in [
            (
                "low",
                json!({"includeThoughts": true, "thinkingBudget": 1024}),
            ),
            (
                "medium",
                json!({"includeThoughts": true, "thinkingBudget": 8192}),
            ),
            (
                "high",
                json!({"includeThoughts": true, "thinkingBudget": 24576}),
            ),
            ("none", json!({"thinkingBudget": 0})),
            ("minimal", json!({"thinkingBudget": 0})),
        ] {
            let got = oa_to_g(base("reasoning_effort", json!(effort))).unwrap();
            assert_eq!(got["generationConfig"]["thinkingConfig"], want, "{effort}");
        }
        assert_eq!(
            refused(oa_to_g(base("reasoning_effort", json!("max")))),
            "reasoning_effort"
        );
    }

    #[test]
    fn x2_chat_fields_gemini_cannot_express_are_refused() {
        let base = |k: &str, v: Value| {
            let mut r = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            r[k] = v;
            r
        };
        for (k, v) in [
            ("n", json!(2)),
            ("logprobs", json!(true)),
            ("top_logprobs", json!(2)),
            ("logit_bias", json!({"50256": -100})),
            ("audio", json!({"voice": "alloy", "format": "wav"})),
            ("modalities", json!(["text", "audio"])),
            ("prediction", json!({"type": "content", "content": "x"})),
            ("web_search_options", json!({})),
        ] {
            assert_eq!(refused(oa_to_g(base(k, v))), k);
        }
        assert!(oa_to_g(base("n", json!(1))).is_ok());
        assert!(oa_to_g(base("logit_bias", json!({}))).is_ok());
        let msgs = |m: Value| json!({"model": "m", "messages": m});
        assert_eq!(
            refused(oa_to_g(msgs(json!([{"role": "critic", "content": "x"}])))),
            "messages[0].role"
        );
        assert_eq!(
            refused(oa_to_g(msgs(
                json!([{"role": "user", "name": "bob", "content": "x"}])
            ))),
            "messages[0].name"
        );
        assert_eq!(
            refused(oa_to_g(msgs(
                json!([{"role": "system", "content": "only a system prompt"}])
            ))),
            "messages"
        );
        assert_eq!(
            refused(oa_to_g(msgs(
                json!([{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]}])
            ))),
            "messages[0].content[0].cache_control"
        );
    }
}
