//! An Anthropic messages stream for an OpenAI chat client.
use super::*;

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AEvent {
    MessageStart {
        message: AMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: ABlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: ADelta,
    },
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: AMessageDelta,
        #[serde(default)]
        usage: Option<AUsage>,
    },
    MessageStop {},
    Error {
        error: AError,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AMessage {
    id: String,
    usage: Option<AUsage>,
}

#[derive(Deserialize, Default)]
struct AUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct AMessageDelta {
    stop_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AError {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ABlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ADelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default)]
pub(super) struct AToO {
    id: String,
    created: u64,
    input: u64,
    cache_read: u64,
    cache_creation: u64,
    output: u64,
    /// The open block: its Anthropic index and kind.
    block: Option<(u64, Block)>,
    /// Thinking blocks seen so far, for the first tool call's id.
    thinking: Vec<Value>,
    tools: usize,
    /// The answer is a structured one (its text is the forced tool's input).
    structured: bool,
}

#[derive(Debug, Clone, Copy)]
enum Block {
    Text,
    /// Position in `thinking`.
    Thinking(usize),
    /// The OpenAI tool-call index.
    Tool(usize),
    /// The forced tool of a structured answer (`request::JSON_TOOL`).
    Structured,
    Other,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl AToO {
    fn chunk(&self, model: &str, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    }

    fn usage(&mut self, u: &AUsage) {
        let set = |slot: &mut u64, v: Option<u64>| *slot = v.unwrap_or(*slot);
        set(&mut self.input, u.input_tokens);
        set(&mut self.cache_read, u.cache_read_input_tokens);
        set(&mut self.cache_creation, u.cache_creation_input_tokens);
        set(&mut self.output, u.output_tokens);
    }
}

fn finish_reason(stop: &str) -> &'static str {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

impl Translator {
    pub(super) fn a_to_o(&mut self, _name: &str, data: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
        let ev: AEvent = serde_json::from_slice(data).map_err(|_| ())?;
        let Mode::AToO(a) = &mut self.mode else {
            return Ok(());
        };
        let model = self.model.as_str();
        match ev {
            AEvent::MessageStart { message } => {
                a.id = format!("chatcmpl-{}", message.id);
                a.created = unix_now();
                if let Some(u) = &message.usage {
                    a.usage(u);
                }
                sse_data(
                    out,
                    &a.chunk(model, json!({"role": "assistant", "content": ""}), None),
                );
            }
            AEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let kind = match content_block {
                    ABlock::Text { text } => {
                        if !text.is_empty() {
                            sse_data(out, &a.chunk(model, json!({"content": text}), None));
                        }
                        Block::Text
                    }
                    ABlock::Thinking {
                        thinking,
                        signature,
                    } => {
                        if !thinking.is_empty() {
                            let d = json!({"reasoning_content": thinking});
                            sse_data(out, &a.chunk(model, d, None));
                        }
                        a.thinking.push(json!({
                            "type": "thinking", "thinking": thinking, "signature": signature,
                        }));
                        Block::Thinking(a.thinking.len() - 1)
                    }
                    ABlock::RedactedThinking { data } => {
                        a.thinking
                            .push(json!({"type": "redacted_thinking", "data": data}));
                        Block::Other
                    }
                    // The structured answer of a `response_format` request: its
                    // input is the answer's text.
                    ABlock::ToolUse { name, .. } if name == JSON_TOOL => {
                        a.structured = true;
                        Block::Structured
                    }
                    ABlock::ToolUse { id, name, input } => {
                        let k = a.tools;
                        a.tools += 1;
                        let id = if k == 0 && !a.thinking.is_empty() {
                            wrap_tool_id(&id, &a.thinking)
                        } else {
                            id
                        };
                        let args = match &input {
                            Value::Object(m) if !m.is_empty() => input.to_string(),
                            _ => String::new(),
                        };
                        let d = json!({"tool_calls": [{
                            "index": k, "id": id, "type": "function",
                            "function": {"name": name, "arguments": args},
                        }]});
                        sse_data(out, &a.chunk(model, d, None));
                        Block::Tool(k)
                    }
                    ABlock::Other => Block::Other,
                };
                a.block = Some((index, kind));
            }
            AEvent::ContentBlockDelta { index, delta } => {
                let kind = match a.block {
                    Some((i, k)) if i == index => k,
                    _ => return Err(()),
                };
                let d = match (delta, kind) {
                    (ADelta::TextDelta { text }, _) => json!({"content": text}),
                    (ADelta::ThinkingDelta { thinking }, k) => {
                        if let Block::Thinking(t) = k {
                            if let Some(Value::String(s)) = a.thinking[t].get_mut("thinking") {
                                s.push_str(&thinking);
                            }
                        }
                        json!({"reasoning_content": thinking})
                    }
                    (ADelta::SignatureDelta { signature }, Block::Thinking(t)) => {
                        if let Some(Value::String(s)) = a.thinking[t].get_mut("signature") {
                            s.push_str(&signature);
                        }
                        return Ok(());
                    }
                    (ADelta::InputJsonDelta { partial_json }, Block::Structured) => {
                        json!({"content": partial_json})
                    }
                    (ADelta::InputJsonDelta { partial_json }, Block::Tool(k)) => {
                        json!({"tool_calls": [{"index": k, "function": {"arguments": partial_json}}]})
                    }
                    _ => return Ok(()),
                };
                sse_data(out, &a.chunk(model, d, None));
            }
            AEvent::ContentBlockStop {} => a.block = None,
            AEvent::MessageDelta { delta, usage } => {
                if let Some(u) = &usage {
                    a.usage(u);
                }
                let reason = match delta.stop_reason.as_deref() {
                    Some("tool_use") if a.structured && a.tools == 0 => Some("stop"),
                    r => r.map(finish_reason),
                };
                sse_data(
                    out,
                    &a.chunk(model, json!({}), Some(reason.unwrap_or("stop"))),
                );
            }
            AEvent::MessageStop {} => {
                if self.include_usage {
                    let prompt = a.input + a.cache_read + a.cache_creation;
                    let u = json!({
                        "prompt_tokens": prompt, "completion_tokens": a.output,
                        "total_tokens": prompt + a.output,
                        "prompt_tokens_details": {"cached_tokens": a.cache_read},
                    });
                    let c = json!({
                        "id": a.id, "object": "chat.completion.chunk", "created": a.created,
                        "model": model, "choices": [], "usage": u,
                    });
                    sse_data(out, &c);
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                self.end = End::Clean;
            }
            AEvent::Error { error } => {
                let (kind, code) = match error.kind.as_str() {
                    "overloaded_error" => ("server_error", Some("overloaded")),
                    "rate_limit_error" => ("rate_limit_exceeded", Some("rate_limit_exceeded")),
                    "api_error" => ("server_error", None),
                    k => (k, None),
                };
                openai_error(out, &error.message, kind, code);
                self.end = End::Failed;
            }
            AEvent::Other => {}
        }
        Ok(())
    }
}
