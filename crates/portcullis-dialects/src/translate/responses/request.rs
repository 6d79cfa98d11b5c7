//! Responses requests → OpenAI chat requests (see the module docs for the mapping).
use super::wire::{
    ChatContent, ChatFile, ChatFunction, ChatFunctionCall, ChatImage, ChatMessage, ChatPart,
    ChatRequest, ChatTool, ChatToolCall, Extra, FunctionCallItem, FunctionOutputItem, FunctionTool,
    JsonSchemaFormat, MessageItem, Part, ReasoningItem, Request, from_value,
};
use crate::translate::TranslateError;
use crate::translate::request::{parse, unsupported};
use serde_json::{Map, Value, json};

/// A Responses request written as an OpenAI chat request for `model`.
pub(crate) fn request_to_chat(body: &[u8], model: &str) -> Result<Vec<u8>, TranslateError> {
    let (chat, _) = to_chat(parse(body)?, model)?;
    serde_json::to_vec(&chat).map_err(|e| TranslateError::Malformed(e.to_string()))
}

/// Where a chat message came from in the client's request: `path` (`instructions`,
/// `input`, or the item `input[i]`), the items of its tool calls in order, and whether
/// it is a tool message (a function call's output).
pub(super) struct Origin {
    pub path: String,
    pub calls: Vec<usize>,
    pub tool: bool,
}

impl Origin {
    fn at(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            calls: Vec::new(),
            tool: false,
        }
    }
}

fn malformed(at: &str, what: &str) -> TranslateError {
    TranslateError::Malformed(format!("invalid body at `{at}`: {what}"))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Refuses the first field the typed structures do not know.
fn refuse_extra(path: &str, extra: &Extra) -> Result<(), TranslateError> {
    match extra.keys().next() {
        None => Ok(()),
        Some(k) => Err(unsupported(
            join(path, k),
            "this Responses API field is not translated to chat completions, through which \
             this model is served",
        )),
    }
}

const NOT_OPENAI: &str = "this model is not served by OpenAI's Responses API";

/// The request fields that ask for state or features only OpenAI's Responses API has.
fn refuse_openai_only(r: &Request) -> Result<(), TranslateError> {
    if r.previous_response_id.is_some() {
        return Err(unsupported(
            "previous_response_id",
            format!(
                "it continues a conversation whose state OpenAI holds, and {NOT_OPENAI}; \
                 send the whole conversation as `input` items instead"
            ),
        ));
    }
    if r.conversation.is_some() {
        return Err(unsupported(
            "conversation",
            format!("conversations are held by OpenAI, and {NOT_OPENAI}; send `input` items"),
        ));
    }
    if r.store == Some(true) {
        return Err(unsupported(
            "store",
            format!("the response cannot be stored: {NOT_OPENAI} (send `store: false`)"),
        ));
    }
    if r.background == Some(true) {
        return Err(unsupported(
            "background",
            format!("background responses are run and stored by OpenAI, and {NOT_OPENAI}"),
        ));
    }
    if r.prompt.is_some() {
        return Err(unsupported(
            "prompt",
            format!("stored prompts live at OpenAI, and {NOT_OPENAI}"),
        ));
    }
    if r.truncation.as_deref().is_some_and(|t| t != "disabled") {
        return Err(unsupported(
            "truncation",
            "chat completions cannot drop input items to fit the context window",
        ));
    }
    if r.top_logprobs.is_some_and(|n| n > 0) {
        return Err(unsupported(
            "top_logprobs",
            "log probabilities are not translated",
        ));
    }
    for (i, inc) in r.include.iter().flatten().enumerate() {
        if inc != "reasoning.encrypted_content" {
            return Err(unsupported(
                format!("include[{i}]"),
                format!(
                    "`{inc}` is not available when the model is served through chat completions"
                ),
            ));
        }
    }
    Ok(())
}

/// The chat request of `r`, and the origin of each of its messages.
pub(super) fn to_chat(
    r: Request,
    model: &str,
) -> Result<(ChatRequest, Vec<Origin>), TranslateError> {
    refuse_extra("", &r.extra)?;
    refuse_openai_only(&r)?;
    let mut messages = Vec::new();
    let mut origins = Vec::new();
    if let Some(i) = r.instructions {
        origins.push(Origin::at("instructions"));
        messages.push(ChatMessage {
            role: "system".into(),
            content: Some(ChatContent::Text(i)),
            ..ChatMessage::default()
        });
    }
    match r.input {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            origins.push(Origin::at("input"));
            messages.push(ChatMessage {
                role: "user".into(),
                content: Some(ChatContent::Text(s)),
                ..ChatMessage::default()
            });
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.into_iter().enumerate() {
                push_item(i, item, &mut messages, &mut origins)?;
            }
        }
        Some(_) => return Err(malformed("input", "expected a string or an array of items")),
    }
    if messages.is_empty() {
        return Err(TranslateError::Malformed(
            "the request has no `input` (nor `instructions`)".into(),
        ));
    }
    let tools = r.tools.map(tools).transpose()?;
    let tool_choice = r.tool_choice.map(tool_choice).transpose()?;
    let mut response_format = None;
    if let Some(t) = r.text {
        refuse_extra("text", &t.extra)?;
        response_format = t.format.map(text_format).transpose()?;
    }
    let mut reasoning_effort = None;
    if let Some(rc) = r.reasoning {
        refuse_extra("reasoning", &rc.extra)?;
        reasoning_effort = rc.effort;
    }
    let stream_options = (r.stream == Some(true)).then(|| json!({"include_usage": true}));
    let chat = ChatRequest {
        model: model.into(),
        messages,
        max_completion_tokens: r.max_output_tokens,
        temperature: r.temperature,
        top_p: r.top_p,
        stream: r.stream,
        stream_options,
        tools,
        tool_choice,
        parallel_tool_calls: r.parallel_tool_calls,
        response_format,
        reasoning_effort,
        user: r.user.or(r.safety_identifier),
        metadata: r.metadata,
    };
    Ok((chat, origins))
}

/// Input item `i`, appended to `out` as chat messages (their origins to `origins`).
fn push_item(
    i: usize,
    item: Value,
    out: &mut Vec<ChatMessage>,
    origins: &mut Vec<Origin>,
) -> Result<(), TranslateError> {
    let path = &format!("input[{i}]");
    if !item.is_object() {
        return Err(malformed(path, "expected an input item object"));
    }
    let kind = match item.get("type") {
        None | Some(Value::Null) => "message".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(malformed(&join(path, "type"), "expected a string")),
    };
    match kind.as_str() {
        "message" => {
            let m: MessageItem = from_value(path, item)?;
            refuse_extra(path, &m.extra)?;
            out.push(message(path, m.role, m.content)?);
            origins.push(Origin::at(path));
        }
        "function_call" => {
            let c: FunctionCallItem = from_value(path, item)?;
            refuse_extra(path, &c.extra)?;
            let call = ChatToolCall {
                id: c.call_id,
                kind: "function".into(),
                function: ChatFunctionCall {
                    name: c.name,
                    arguments: c.arguments,
                },
            };
            match out.last_mut() {
                Some(last) if last.role == "assistant" => {
                    last.tool_calls.get_or_insert_with(Vec::new).push(call);
                    if let Some(o) = origins.last_mut() {
                        o.calls.push(i);
                    }
                }
                _ => {
                    out.push(ChatMessage {
                        role: "assistant".into(),
                        tool_calls: Some(vec![call]),
                        ..ChatMessage::default()
                    });
                    origins.push(Origin {
                        calls: vec![i],
                        ..Origin::at(path)
                    });
                }
            }
        }
        "function_call_output" => {
            let o: FunctionOutputItem = from_value(path, item)?;
            refuse_extra(path, &o.extra)?;
            let content = match o.output {
                Value::String(s) => ChatContent::Text(s),
                Value::Array(parts) => {
                    let mut texts = Vec::with_capacity(parts.len());
                    for (j, p) in parts.into_iter().enumerate() {
                        let pp = format!("{path}.output[{j}]");
                        match (part(&pp, "tool", p)?, &pp) {
                            (t @ ChatPart::Text { .. }, _) => texts.push(t),
                            (ChatPart::ImageUrl { .. } | ChatPart::File { .. }, pp) => {
                                return Err(unsupported(
                                    format!("{pp}.type"),
                                    "a chat tool message holds text only",
                                ));
                            }
                        }
                    }
                    ChatContent::Parts(texts)
                }
                _ => {
                    return Err(malformed(
                        &join(path, "output"),
                        "expected a string or an array of content parts",
                    ));
                }
            };
            out.push(ChatMessage {
                role: "tool".into(),
                content: Some(content),
                tool_call_id: Some(o.call_id),
                ..ChatMessage::default()
            });
            origins.push(Origin {
                tool: true,
                ..Origin::at(path)
            });
        }
        "reasoning" => {
            // Dropped: chat completions cannot take reasoning back (module docs).
            let r: ReasoningItem = from_value(path, item)?;
            refuse_extra(path, &r.extra)?;
        }
        "item_reference" => {
            return Err(unsupported(
                join(path, "type"),
                format!(
                    "it refers to an item stored at OpenAI, and {NOT_OPENAI}; send the item itself"
                ),
            ));
        }
        other => {
            return Err(unsupported(
                join(path, "type"),
                format!(
                    "`{other}` items are not expressible in chat completions (messages, \
                     function calls, their outputs and reasoning are)"
                ),
            ));
        }
    }
    Ok(())
}

fn message(path: &str, role: String, content: Value) -> Result<ChatMessage, TranslateError> {
    if !matches!(role.as_str(), "user" | "assistant" | "system" | "developer") {
        return Err(unsupported(
            join(path, "role"),
            format!("`{role}` messages are not translated"),
        ));
    }
    let content = match content {
        Value::String(s) => ChatContent::Text(s),
        Value::Array(parts) => ChatContent::Parts(
            parts
                .into_iter()
                .enumerate()
                .map(|(j, p)| part(&format!("{path}.content[{j}]"), &role, p))
                .collect::<Result<_, _>>()?,
        ),
        _ => {
            return Err(malformed(
                &join(path, "content"),
                "expected a string or an array of content parts",
            ));
        }
    };
    Ok(ChatMessage {
        role,
        content: Some(content),
        ..ChatMessage::default()
    })
}

/// One content part at `path` of a message of `role` (`tool` for a function output).
fn part(path: &str, role: &str, p: Value) -> Result<ChatPart, TranslateError> {
    let kind = p
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let wrong_place = |why: &str| Err(unsupported(join(path, "type"), why));
    match from_value::<Part>(path, p)? {
        Part::InputText { text, extra } => {
            refuse_extra(path, &extra)?;
            Ok(ChatPart::Text { text })
        }
        Part::OutputText { text, extra, .. }
        | Part::Refusal {
            refusal: text,
            extra,
        } => {
            if role != "assistant" {
                return wrong_place("output text and refusals belong to assistant messages");
            }
            refuse_extra(path, &extra)?;
            Ok(ChatPart::Text { text })
        }
        Part::InputImage {
            image_url,
            file_id,
            detail,
            extra,
        } => {
            refuse_extra(path, &extra)?;
            if role != "user" {
                return wrong_place("images are translated in user messages only");
            }
            if file_id.is_some() {
                return Err(unsupported(
                    join(path, "file_id"),
                    format!(
                        "files live at OpenAI, and {NOT_OPENAI}; send the image as a URL or a data URL"
                    ),
                ));
            }
            let url = image_url.ok_or_else(|| malformed(path, "an image needs `image_url`"))?;
            let detail = match detail.as_deref() {
                None => None,
                Some("auto" | "low" | "high") => detail,
                Some(other) => {
                    return Err(unsupported(
                        join(path, "detail"),
                        format!("chat completions has no `{other}` image detail"),
                    ));
                }
            };
            Ok(ChatPart::ImageUrl {
                image_url: ChatImage { url, detail },
            })
        }
        Part::InputFile {
            file_data,
            file_id,
            file_url,
            filename,
            extra,
        } => {
            refuse_extra(path, &extra)?;
            if role != "user" {
                return wrong_place("files are translated in user messages only");
            }
            if file_id.is_some() || file_url.is_some() {
                let field = if file_id.is_some() {
                    "file_id"
                } else {
                    "file_url"
                };
                return Err(unsupported(
                    join(path, field),
                    format!("{NOT_OPENAI}; send the file inline as file_data"),
                ));
            }
            let file_data = file_data.ok_or_else(|| malformed(path, "a file needs `file_data`"))?;
            Ok(ChatPart::File {
                file: ChatFile {
                    file_data,
                    filename,
                },
            })
        }
        Part::Other => Err(unsupported(
            join(path, "type"),
            format!("`{kind}` content parts are not translated to chat completions"),
        )),
    }
}

fn tools(tools: Vec<Value>) -> Result<Vec<ChatTool>, TranslateError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.into_iter().enumerate() {
        let path = format!("tools[{i}]");
        let kind = match t.get("type").and_then(Value::as_str) {
            Some(k) => k.to_owned(),
            None => return Err(malformed(&path, "a tool needs a string `type`")),
        };
        if kind != "function" {
            return Err(unsupported(
                format!("{path}.type"),
                format!(
                    "`{kind}` tools are run by OpenAI or have no chat equivalent; only \
                     function tools are translated"
                ),
            ));
        }
        let f: FunctionTool = from_value(&path, t)?;
        refuse_extra(&path, &f.extra)?;
        out.push(ChatTool {
            kind: "function",
            function: ChatFunction {
                name: f.name,
                description: f.description,
                parameters: f.parameters,
                strict: f.strict,
            },
        });
    }
    Ok(out)
}

fn tool_choice(v: Value) -> Result<Value, TranslateError> {
    match v {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => {
            Ok(Value::String(s))
        }
        Value::String(s) => Err(unsupported(
            "tool_choice",
            format!("`{s}` is not a tool choice chat completions knows"),
        )),
        Value::Object(mut o) => {
            let kind = o.remove("type");
            match kind.as_ref().and_then(Value::as_str) {
                Some("function") => {
                    let name = match o.remove("name") {
                        Some(Value::String(n)) => n,
                        _ => return Err(malformed("tool_choice.name", "expected a string")),
                    };
                    refuse_extra("tool_choice", &o)?;
                    Ok(json!({"type": "function", "function": {"name": name}}))
                }
                Some(k) => Err(unsupported(
                    "tool_choice.type",
                    format!(
                        "`{k}` tool choices are not translated (auto, none, required and function are)"
                    ),
                )),
                None => Err(malformed("tool_choice.type", "expected a string")),
            }
        }
        _ => Err(malformed("tool_choice", "expected a string or an object")),
    }
}

fn text_format(v: Value) -> Result<Value, TranslateError> {
    const PATH: &str = "text.format";
    let kind = match v.get("type").and_then(Value::as_str) {
        Some(k) => k.to_owned(),
        None => return Err(malformed(PATH, "a format needs a string `type`")),
    };
    match kind.as_str() {
        "text" | "json_object" => {
            if let Value::Object(mut o) = v {
                o.remove("type");
                refuse_extra(PATH, &o)?;
            }
            Ok(json!({"type": kind}))
        }
        "json_schema" => {
            let f: JsonSchemaFormat = from_value(PATH, v)?;
            refuse_extra(PATH, &f.extra)?;
            let mut schema = Map::new();
            schema.insert("name".into(), Value::String(f.name));
            if let Some(d) = f.description {
                schema.insert("description".into(), Value::String(d));
            }
            schema.insert("schema".into(), f.schema);
            if let Some(s) = f.strict {
                schema.insert("strict".into(), Value::Bool(s));
            }
            Ok(json!({"type": "json_schema", "json_schema": schema}))
        }
        other => Err(unsupported(
            "text.format.type",
            format!("`{other}` output formats are not translated"),
        )),
    }
}
