//! Anthropic messages → OpenAI chat completions (see the [parent](super) for the
//! rules).
use super::*;

fn oa_message(role: &str, content: Option<OaContent>) -> OaMessage {
    OaMessage {
        role: role.into(),
        content,
        ..OaMessage::default()
    }
}

pub(super) fn to_openai(r: AnRequest, model: &str) -> Result<Vec<u8>, TranslateError> {
    refuse_extra("", &r.extra, OA)?;
    if r.top_k.is_some() {
        return Err(unsupported("top_k", "OpenAI has no top-k sampling"));
    }
    let max_tokens = r.max_tokens.ok_or_else(|| {
        TranslateError::Malformed("invalid body: missing field `max_tokens`".into())
    })?;
    let mut out = Vec::new();
    match r.system {
        None => {}
        Some(AnContent::Text(s)) => out.push(oa_message("system", Some(OaContent::Text(s)))),
        Some(AnContent::Blocks(blocks)) => {
            let parts = text_parts(blocks, "system", "system blocks must be text")?;
            out.push(oa_message("system", Some(OaContent::Parts(parts))));
        }
    }
    for (i, m) in r.messages.into_iter().enumerate() {
        let p = format!("messages[{i}]");
        refuse_extra(&p, &m.extra, OA)?;
        let blocks = match (m.role, m.content) {
            (AnRole::User, AnContent::Text(s)) => {
                out.push(oa_message("user", Some(OaContent::Text(s))));
                continue;
            }
            (AnRole::Assistant, AnContent::Text(s)) => {
                out.push(oa_message("assistant", Some(OaContent::Text(s))));
                continue;
            }
            (_, AnContent::Blocks(b)) => b,
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for (j, b) in blocks.into_iter().enumerate() {
            let bp = format!("{p}.content[{j}]");
            match (m.role, b) {
                (_, AnBlock::Text { text, extra }) => {
                    refuse_extra(&bp, &extra, OA)?;
                    parts.push(OaPart::text(text));
                }
                (AnRole::User, AnBlock::Image { source, extra }) => {
                    refuse_extra(&bp, &extra, OA)?;
                    let url = match source {
                        AnSource::Base64 { media_type, data } => {
                            format!("data:{media_type};base64,{data}")
                        }
                        AnSource::Url { url } => url,
                        AnSource::Other => {
                            return Err(unsupported(
                                format!("{bp}.source.type"),
                                "only base64 and url images are translated",
                            ));
                        }
                    };
                    parts.push(OaPart {
                        kind: "image_url".into(),
                        text: None,
                        image_url: Some(OaImageUrl { url, detail: None }),
                        file: None,
                        extra: Extra::new(),
                    });
                }
                (
                    AnRole::User,
                    AnBlock::Document {
                        source,
                        title,
                        extra,
                    },
                ) => {
                    refuse_extra(&bp, &extra, OA)?;
                    let AnSource::Base64 { media_type, data } = source else {
                        return Err(unsupported(
                            format!("{bp}.source.type"),
                            "OpenAI chat takes files inline: only base64 documents are translated",
                        ));
                    };
                    if media_type != PDF {
                        return Err(unsupported(
                            format!("{bp}.source.media_type"),
                            "only PDF documents are translated",
                        ));
                    }
                    parts.push(OaPart {
                        kind: "file".into(),
                        text: None,
                        image_url: None,
                        file: Some(OaFile {
                            file_data: Some(format!("data:{PDF};base64,{data}")),
                            file_id: None,
                            filename: Some(title.unwrap_or_else(|| "document.pdf".into())),
                        }),
                        extra: Extra::new(),
                    });
                }
                (
                    AnRole::User,
                    AnBlock::ToolResult {
                        tool_use_id,
                        content,
                        extra,
                        ..
                    },
                ) => {
                    refuse_extra(&bp, &extra, OA)?;
                    let content = match content {
                        None => OaContent::Text(String::new()),
                        Some(AnContent::Text(s)) => OaContent::Text(s),
                        Some(AnContent::Blocks(bs)) => OaContent::Parts(text_parts(
                            bs,
                            &format!("{bp}.content"),
                            "OpenAI tool results hold text only",
                        )?),
                    };
                    out.push(OaMessage {
                        tool_call_id: Some(tool_use_id),
                        ..oa_message("tool", Some(content))
                    });
                }
                (
                    AnRole::Assistant,
                    AnBlock::ToolUse {
                        id,
                        name,
                        input,
                        extra,
                    },
                ) => {
                    refuse_extra(&bp, &extra, OA)?;
                    calls.push(OaToolCall {
                        id,
                        kind: function(),
                        function: OaFunctionCall {
                            name,
                            arguments: input.to_string(),
                        },
                    });
                }
                (
                    AnRole::Assistant,
                    AnBlock::Thinking { .. } | AnBlock::RedactedThinking { .. },
                ) => {}
                _ => {
                    return Err(unsupported(
                        format!("{bp}.type"),
                        "this block type is not expressible in OpenAI chat completions",
                    ));
                }
            }
        }
        match m.role {
            AnRole::User if !parts.is_empty() => {
                out.push(oa_message("user", Some(OaContent::Parts(parts))))
            }
            AnRole::User => {}
            AnRole::Assistant => {
                let content = match <[OaPart; 1]>::try_from(parts) {
                    Ok([p]) => p.text.map(OaContent::Text),
                    Err(v) if v.is_empty() => None,
                    Err(v) => Some(OaContent::Parts(v)),
                };
                let tool_calls = (!calls.is_empty()).then_some(calls);
                out.push(OaMessage {
                    tool_calls,
                    ..oa_message("assistant", content)
                });
            }
        }
    }
    let tools = r
        .tools
        .map(|tools| {
            tools
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    if t.kind.as_deref().is_some_and(|k| k != "custom") {
                        return Err(unsupported(
                            format!("tools[{i}].type"),
                            "server tools are not expressible in OpenAI chat completions",
                        ));
                    }
                    refuse_extra(&format!("tools[{i}]"), &t.extra, OA)?;
                    Ok(OaTool {
                        kind: function(),
                        function: OaFunction {
                            name: t.name,
                            description: t.description,
                            parameters: t.input_schema,
                            _strict: None,
                        },
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let mut parallel_tool_calls = None;
    let tool_choice = match r.tool_choice {
        None => None,
        Some(c) => {
            if c.disable_parallel_tool_use == Some(true) {
                parallel_tool_calls = Some(false);
            }
            Some(match (c.kind.as_str(), c.name) {
                ("auto", _) => OaToolChoice::Mode("auto".into()),
                ("any", _) => OaToolChoice::Mode("required".into()),
                ("none", _) => OaToolChoice::Mode("none".into()),
                ("tool", Some(name)) => OaToolChoice::Named {
                    kind: function(),
                    function: OaName { name },
                },
                _ => {
                    return Err(unsupported(
                        "tool_choice.type",
                        "only auto, any, none and tool are translated",
                    ));
                }
            })
        }
    };
    let reasoning_effort = match r.thinking {
        None => None,
        Some(t) if t.kind == "disabled" => None,
        Some(t) if t.kind == "enabled" => Some(
            match t.budget_tokens.unwrap_or(0) {
                0..2560 => "low",
                2560..10240 => "medium",
                _ => "high",
            }
            .to_owned(),
        ),
        Some(_) => {
            return Err(unsupported(
                "thinking.type",
                "only enabled and disabled thinking are translated",
            ));
        }
    };
    let stream_options =
        (r.stream == Some(true)).then(|| serde_json::json!({"include_usage": true}));
    ser(&OaRequest {
        model: model.into(),
        messages: out,
        max_completion_tokens: Some(max_tokens),
        temperature: r.temperature,
        top_p: r.top_p,
        stop: r.stop_sequences.map(OaStop::Many),
        stream: r.stream,
        stream_options,
        tools,
        tool_choice,
        parallel_tool_calls,
        user: r.metadata.and_then(|m| m.user_id),
        reasoning_effort,
        ..OaRequest::default()
    })
}

/// Anthropic blocks at `path` that must all be text, as OpenAI text parts; any other
/// block is refused with `why`.
fn text_parts(blocks: Vec<AnBlock>, path: &str, why: &str) -> Result<Vec<OaPart>, TranslateError> {
    let mut parts = Vec::new();
    for (k, b) in blocks.into_iter().enumerate() {
        match b {
            AnBlock::Text { text, extra } => {
                refuse_extra(&format!("{path}[{k}]"), &extra, OA)?;
                parts.push(OaPart::text(text));
            }
            _ => return Err(unsupported(format!("{path}[{k}].type"), why)),
        }
    }
    Ok(parts)
}
