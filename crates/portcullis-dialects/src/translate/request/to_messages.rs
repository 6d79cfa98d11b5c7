//! OpenAI chat completions → Anthropic messages (see the [parent](super) for the
//! rules).
use super::*;

/// Appends a message, merging it into the previous one of the same role.
fn push(msgs: &mut Vec<AnMessage>, role: AnRole, content: AnContent) {
    if let Some(last) = msgs.last_mut().filter(|m| m.role == role) {
        let prev = std::mem::replace(&mut last.content, AnContent::Blocks(Vec::new()));
        let mut blocks = prev.into_blocks();
        blocks.extend(content.into_blocks());
        last.content = AnContent::Blocks(blocks);
    } else {
        msgs.push(AnMessage {
            role,
            content,
            extra: Extra::new(),
        });
    }
}

/// Text-only content (system, tool and assistant messages) as text blocks.
fn text_blocks(path: &str, content: Option<OaContent>) -> Result<Vec<AnBlock>, TranslateError> {
    match content {
        None => Ok(Vec::new()),
        Some(OaContent::Text(s)) => Ok(vec![AnBlock::text(s)]),
        Some(OaContent::Parts(parts)) => parts
            .into_iter()
            .enumerate()
            .map(|(j, p)| {
                let pp = format!("{path}.content[{j}]");
                if p.kind == "text" {
                    refuse_extra(&pp, &p.extra, AN)?;
                }
                match (p.kind.as_str(), p.text) {
                    ("text", Some(t)) => Ok(AnBlock::text(t)),
                    ("text", None) => {
                        Err(TranslateError::Malformed(format!("{pp}.text is missing")))
                    }
                    _ => Err(unsupported(
                        format!("{pp}.type"),
                        "only text parts are translated here",
                    )),
                }
            })
            .collect(),
    }
}

fn image_block(path: &str, image: Option<OaImageUrl>) -> Result<AnBlock, TranslateError> {
    let image =
        image.ok_or_else(|| TranslateError::Malformed(format!("{path}.image_url is missing")))?;
    if image.detail.as_deref().is_some_and(|d| d != "auto") {
        return Err(unsupported(
            format!("{path}.image_url.detail"),
            "Anthropic has no image detail level",
        ));
    }
    let source = if let Some(rest) = image.url.strip_prefix("data:") {
        match rest.split_once(";base64,") {
            Some((mime, data)) => AnSource::Base64 {
                media_type: mime.into(),
                data: data.into(),
            },
            None => {
                return Err(unsupported(
                    format!("{path}.image_url.url"),
                    "only base64 data URLs are translated",
                ));
            }
        }
    } else if image.url.starts_with("https://") || image.url.starts_with("http://") {
        AnSource::Url { url: image.url }
    } else {
        return Err(unsupported(
            format!("{path}.image_url.url"),
            "only http(s) and data URLs are translated",
        ));
    };
    Ok(AnBlock::Image {
        source,
        extra: Extra::new(),
    })
}

/// A chat `file` part as an Anthropic document: a PDF given inline (`data:` URL); an
/// uploaded file's id (it lives at OpenAI) or another type is refused.
fn document_block(path: &str, file: Option<OaFile>) -> Result<AnBlock, TranslateError> {
    let file = file.ok_or_else(|| TranslateError::Malformed(format!("{path}.file is missing")))?;
    if file.file_id.is_some() {
        return Err(unsupported(
            format!("{path}.file.file_id"),
            "a file uploaded to OpenAI cannot be read by Anthropic: send it as file_data",
        ));
    }
    let data = file
        .file_data
        .ok_or_else(|| TranslateError::Malformed(format!("{path}.file.file_data is missing")))?;
    match data
        .strip_prefix("data:")
        .and_then(|d| d.split_once(";base64,"))
    {
        Some((PDF, b64)) => Ok(AnBlock::Document {
            source: AnSource::Base64 {
                media_type: PDF.into(),
                data: b64.into(),
            },
            title: file.filename,
            extra: Extra::new(),
        }),
        _ => Err(unsupported(
            format!("{path}.file.file_data"),
            "Anthropic takes PDF files, as a base64 data URL of application/pdf",
        )),
    }
}

fn user_content(path: &str, content: Option<OaContent>) -> Result<AnContent, TranslateError> {
    match content {
        None => Err(TranslateError::Malformed(format!(
            "{path}.content is missing"
        ))),
        Some(OaContent::Text(s)) => Ok(AnContent::Text(s)),
        Some(OaContent::Parts(parts)) => {
            let mut blocks = Vec::with_capacity(parts.len());
            for (j, p) in parts.into_iter().enumerate() {
                let pp = format!("{path}.content[{j}]");
                if matches!(p.kind.as_str(), "text" | "image_url" | "file") {
                    refuse_extra(&pp, &p.extra, AN)?;
                }
                blocks.push(match p.kind.as_str() {
                    "text" => AnBlock::text(p.text.ok_or_else(|| {
                        TranslateError::Malformed(format!("{pp}.text is missing"))
                    })?),
                    "image_url" => image_block(&pp, p.image_url)?,
                    "file" => document_block(&pp, p.file)?,
                    other => {
                        return Err(unsupported(
                            format!("{pp}.type"),
                            format!("`{other}` parts cannot be sent to Anthropic"),
                        ));
                    }
                });
            }
            Ok(AnContent::Blocks(blocks))
        }
    }
}

fn assistant_blocks(path: &str, m: OaMessage) -> Result<Vec<AnBlock>, TranslateError> {
    let mut blocks = Vec::new();
    let mut calls = Vec::new();
    for (k, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let cp = format!("{path}.tool_calls[{k}]");
        if call.kind != "function" {
            return Err(unsupported(
                format!("{cp}.type"),
                "only function tool calls are translated",
            ));
        }
        let (id, restored) = unwrap_tool_id(&call.id);
        if let Some(restored) = restored.filter(|_| blocks.is_empty()) {
            // Another vendor's envelope (a Gemini thought signature, after a failover
            // mid-conversation) means nothing to Anthropic.
            for b in restored
                .into_iter()
                .filter(|b| b["type"] != "gemini_signature")
            {
                match serde_json::from_value::<AnBlock>(b) {
                    Ok(b @ (AnBlock::Thinking { .. } | AnBlock::RedactedThinking { .. })) => {
                        blocks.push(b)
                    }
                    _ => {
                        return Err(TranslateError::Malformed(format!(
                            "{cp}.id carries an invalid thinking envelope"
                        )));
                    }
                }
            }
        }
        let args = call.function.arguments.trim();
        let input: Value = if args.is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str(args).map_err(|e| {
                TranslateError::Malformed(format!("{cp}.function.arguments is not JSON: {e}"))
            })?
        };
        if !input.is_object() {
            return Err(TranslateError::Malformed(format!(
                "{cp}.function.arguments is not a JSON object"
            )));
        }
        calls.push(AnBlock::ToolUse {
            id,
            name: call.function.name,
            input,
            extra: Extra::new(),
        });
    }
    let text = text_blocks(path, m.content)?;
    blocks.extend(
        text.into_iter()
            .filter(|b| !matches!(b, AnBlock::Text { text, .. } if text.is_empty())),
    );
    blocks.extend(calls);
    Ok(blocks)
}

pub(super) fn to_anthropic(
    r: OaRequest,
    model: &str,
    default_max: u64,
) -> Result<Vec<u8>, TranslateError> {
    refuse_extra("", &r.extra, AN)?;
    let refuse = |field: &str, why: &str| Err(unsupported(field, why));
    if r.n.is_some_and(|n| n > 1) {
        return refuse("n", "Anthropic returns a single choice");
    }
    if r.logprobs == Some(true) {
        return refuse("logprobs", "Anthropic returns no log probabilities");
    }
    if r.top_logprobs.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("top_logprobs", "Anthropic returns no log probabilities");
    }
    if r.logit_bias
        .as_ref()
        .is_some_and(|v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
    {
        return refuse("logit_bias", "Anthropic has no logit bias");
    }
    if r.presence_penalty.is_some_and(|p| p != 0.0) {
        return refuse("presence_penalty", "Anthropic has no presence penalty");
    }
    if r.frequency_penalty.is_some_and(|p| p != 0.0) {
        return refuse("frequency_penalty", "Anthropic has no frequency penalty");
    }
    if r.seed.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("seed", "Anthropic has no sampling seed");
    }
    if r.audio.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("audio", "Anthropic produces no audio");
    }
    if r.modalities
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m != "text"))
    {
        return refuse("modalities", "Anthropic produces text only");
    }
    if r.prediction.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("prediction", "Anthropic has no predicted outputs");
    }
    if r.temperature.is_some_and(|t| t > 1.0) {
        return refuse("temperature", "Anthropic accepts a temperature from 0 to 1");
    }
    let mut system = Vec::new();
    let mut messages: Vec<AnMessage> = Vec::new();
    for (i, m) in r.messages.into_iter().enumerate() {
        let p = format!("messages[{i}]");
        refuse_extra(&p, &m.extra, AN)?;
        if m.name.is_some() {
            return Err(unsupported(
                format!("{p}.name"),
                "Anthropic messages have no participant name",
            ));
        }
        match m.role.as_str() {
            "system" | "developer" => system.extend(text_blocks(&p, m.content)?),
            "user" => {
                let content = user_content(&p, m.content)?;
                push(&mut messages, AnRole::User, content);
            }
            "assistant" => {
                let blocks = assistant_blocks(&p, m)?;
                if messages.is_empty() && !blocks.is_empty() {
                    return Err(unsupported(
                        format!("{p}.role"),
                        "Anthropic conversations must start with a user message",
                    ));
                }
                match <[AnBlock; 1]>::try_from(blocks) {
                    Ok([AnBlock::Text { text, extra }]) if extra.is_empty() => {
                        push(&mut messages, AnRole::Assistant, AnContent::Text(text));
                    }
                    Ok([b]) => push(&mut messages, AnRole::Assistant, AnContent::Blocks(vec![b])),
                    Err(v) if v.is_empty() => {}
                    Err(v) => push(&mut messages, AnRole::Assistant, AnContent::Blocks(v)),
                }
            }
            "tool" => {
                let id = m.tool_call_id.clone().ok_or_else(|| {
                    TranslateError::Malformed(format!("{p}.tool_call_id is missing"))
                })?;
                let content = match m.content {
                    Some(OaContent::Text(s)) => Some(AnContent::Text(s)),
                    other => Some(AnContent::Blocks(text_blocks(&p, other)?)),
                };
                let block = AnBlock::ToolResult {
                    tool_use_id: unwrap_tool_id(&id).0,
                    content,
                    is_error: None,
                    extra: Extra::new(),
                };
                push(&mut messages, AnRole::User, AnContent::Blocks(vec![block]));
            }
            other => {
                return Err(unsupported(
                    format!("{p}.role"),
                    format!("`{other}` messages cannot be sent to Anthropic"),
                ));
            }
        }
    }
    if messages.is_empty() {
        return refuse("messages", "Anthropic needs at least one user message");
    }
    let client_max = r.max_completion_tokens.or(r.max_tokens);
    if client_max == Some(0) {
        return refuse("max_tokens", "Anthropic needs a maximum of at least 1");
    }
    let mut max_tokens = client_max.unwrap_or(default_max).max(1);
    let budget = r
        .reasoning_effort
        .as_deref()
        .map(budget_of)
        .transpose()?
        .flatten();
    if let Some(b) = budget.filter(|b| max_tokens <= *b) {
        max_tokens = b + default_max.max(1);
    }
    let tools = r
        .tools
        .map(|tools| {
            tools
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    if t.kind != "function" {
                        return Err(unsupported(
                            format!("tools[{i}].type"),
                            "only function tools are translated",
                        ));
                    }
                    Ok(AnTool {
                        kind: None,
                        name: t.function.name,
                        description: t.function.description,
                        input_schema: Some(t.function.parameters.unwrap_or_else(
                            || serde_json::json!({"type": "object", "properties": {}}),
                        )),
                        extra: Extra::new(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let json_tool = json_tool(r.response_format, &tools, budget, r.tool_choice.is_some())?;
    let mut tools = tools;
    if let Some(t) = &tools {
        if let Some(i) = t.iter().position(|t| t.name == JSON_TOOL) {
            return refuse(
                &format!("tools[{i}].function.name"),
                "this tool name is reserved",
            );
        }
    }
    let mut tool_choice = match r.tool_choice {
        _ if json_tool.is_some() => Some(AnToolChoice {
            kind: "tool".into(),
            name: Some(JSON_TOOL.into()),
            disable_parallel_tool_use: Some(true),
        }),
        None => None,
        Some(OaToolChoice::Mode(m)) => Some(AnToolChoice {
            kind: match m.as_str() {
                "auto" => "auto",
                "none" => "none",
                "required" => "any",
                _ => {
                    return refuse(
                        "tool_choice",
                        "only auto, none, required or a named function are translated",
                    );
                }
            }
            .into(),
            name: None,
            disable_parallel_tool_use: None,
        }),
        Some(OaToolChoice::Named { kind, function }) if kind == "function" => Some(AnToolChoice {
            kind: "tool".into(),
            name: Some(function.name),
            disable_parallel_tool_use: None,
        }),
        Some(OaToolChoice::Named { .. }) => {
            return refuse(
                "tool_choice.type",
                "only function tool choices are translated",
            );
        }
    };
    if r.parallel_tool_calls == Some(false) {
        let choice = tool_choice.get_or_insert_with(|| AnToolChoice {
            kind: "auto".into(),
            name: None,
            disable_parallel_tool_use: None,
        });
        if choice.kind != "none" {
            choice.disable_parallel_tool_use = Some(true);
        }
    }
    if let Some(t) = json_tool {
        tools = Some(vec![t]);
    }
    let system = match <[AnBlock; 1]>::try_from(system) {
        Ok([AnBlock::Text { text, .. }]) => Some(AnContent::Text(text)),
        Ok([b]) => Some(AnContent::Blocks(vec![b])),
        Err(v) if v.is_empty() => None,
        Err(v) => Some(AnContent::Blocks(v)),
    };
    ser(&AnRequest {
        model: model.into(),
        messages,
        system,
        max_tokens: Some(max_tokens),
        temperature: r.temperature,
        top_p: r.top_p,
        stop_sequences: r.stop.map(|s| match s {
            OaStop::One(s) => vec![s],
            OaStop::Many(v) => v,
        }),
        stream: r.stream,
        tools,
        tool_choice,
        thinking: budget.map(|b| AnThinking {
            kind: "enabled".into(),
            budget_tokens: Some(b),
        }),
        metadata: r.user.map(|u| AnMetadata { user_id: Some(u) }),
        ..AnRequest::default()
    })
}

/// The forced tool of a structured-output request (see [`JSON_TOOL`]), or none for
/// a text answer. Refused where a forced call cannot stand in for it: beside the
/// client's own tools or tool choice, with thinking (Anthropic does not force a tool
/// while thinking), or for a schema whose root is not an object (a tool's input is).
fn json_tool(
    format: Option<OaResponseFormat>,
    tools: &Option<Vec<AnTool>>,
    thinking: Option<u64>,
    tool_choice: bool,
) -> Result<Option<AnTool>, TranslateError> {
    let Some(f) = format.filter(|f| f.kind != "text") else {
        return Ok(None);
    };
    let why = match f.kind.as_str() {
        "json_object" | "json_schema" => None,
        _ => Some("only text, json_object and json_schema formats are translated"),
    };
    let why = why.or_else(|| {
        if tools.as_ref().is_some_and(|t| !t.is_empty()) || tool_choice {
            Some("Anthropic answers in a format by a forced tool call, which cannot stand beside the request's own tools")
        } else if thinking.is_some() {
            Some("Anthropic answers in a format by a forced tool call, which it does not make while thinking")
        } else {
            None
        }
    });
    if let Some(why) = why {
        return Err(unsupported("response_format", why));
    }
    let (description, schema) = match f.json_schema {
        Some(j) => (j.description, j.schema),
        None => (None, None),
    };
    let schema = schema.unwrap_or_else(|| serde_json::json!({"type": "object"}));
    if schema.get("type").is_some_and(|t| t != "object") {
        return Err(unsupported(
            "response_format.json_schema.schema.type",
            "Anthropic's structured answer is a tool's input, which must be an object",
        ));
    }
    Ok(Some(AnTool {
        kind: None,
        name: JSON_TOOL.into(),
        description: Some(
            description.unwrap_or_else(|| "Give the answer as this tool's input.".into()),
        ),
        input_schema: Some(schema),
        extra: Extra::new(),
    }))
}
