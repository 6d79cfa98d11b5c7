//! An OpenAI chat stream for an Anthropic messages client.
use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
struct OChunk {
    id: String,
    choices: Vec<OChoice>,
    usage: Option<OUsage>,
    error: Option<OError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OChoice {
    index: u64,
    delta: Option<ODelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ODelta {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<OToolCall>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OToolCall {
    index: u64,
    id: Option<String>,
    function: Option<OFunction>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OFunction {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    prompt_tokens_details: Option<ODetails>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ODetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OError {
    message: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<Value>,
}

#[derive(Debug, Default)]
pub(super) struct OToA {
    started: bool,
    /// The next Anthropic block index.
    next: u64,
    open: Open,
    tools: Vec<Tool>,
    pub(super) finish: Option<String>,
    /// Prompt, completion and cached tokens.
    usage: Option<(u64, u64, u64)>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Open {
    #[default]
    None,
    Text(u64),
    /// Position in `tools` and the block index.
    Tool(usize, u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolState {
    Queued,
    Open,
    Closed,
}

#[derive(Debug)]
struct Tool {
    oai: u64,
    id: String,
    name: String,
    state: ToolState,
    /// Argument bytes waiting for the block to open.
    args: String,
    json: JsonEnd,
}

/// Whether a streamed JSON value has ended, byte by byte in constant memory.
#[derive(Debug, Default, Clone, Copy)]
struct JsonEnd {
    depth: u32,
    in_str: bool,
    esc: bool,
    started: bool,
}

impl JsonEnd {
    fn feed(&mut self, s: &str) {
        for b in s.bytes() {
            if self.in_str {
                if self.esc {
                    self.esc = false;
                } else if b == b'\\' {
                    self.esc = true;
                } else if b == b'"' {
                    self.in_str = false;
                }
            } else {
                match b {
                    b'"' => self.in_str = true,
                    b'{' | b'[' => {
                        self.depth += 1;
                        self.started = true;
                    }
                    b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
            }
        }
    }

    fn complete(&self) -> bool {
        self.started && self.depth == 0 && !self.in_str
    }
}

fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

impl OToA {
    fn close(&mut self, out: &mut Vec<u8>) {
        let index = match self.open {
            Open::None => return,
            Open::Text(i) => i,
            Open::Tool(t, i) => {
                self.tools[t].state = ToolState::Closed;
                i
            }
        };
        sse_event(
            out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
        self.open = Open::None;
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        if text.is_empty() {
            return;
        }
        let index = match self.open {
            Open::Text(i) => i,
            _ => {
                self.close(out);
                let i = self.next;
                self.next += 1;
                let s = json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}});
                sse_event(out, "content_block_start", &s);
                self.open = Open::Text(i);
                i
            }
        };
        let d = json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": text}});
        sse_event(out, "content_block_delta", &d);
    }

    fn args(out: &mut Vec<u8>, index: u64, partial: &str) {
        let d = json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": partial}});
        sse_event(out, "content_block_delta", &d);
    }

    fn open_tool(&mut self, t: usize, out: &mut Vec<u8>) {
        self.close(out);
        let i = self.next;
        self.next += 1;
        let tool = &mut self.tools[t];
        let s = json!({"type": "content_block_start", "index": i, "content_block":
            {"type": "tool_use", "id": tool.id, "name": tool.name, "input": {}}});
        sse_event(out, "content_block_start", &s);
        if !tool.args.is_empty() {
            Self::args(out, i, &std::mem::take(&mut tool.args));
        }
        tool.state = ToolState::Open;
        self.open = Open::Tool(t, i);
    }

    fn tool_call(&mut self, tc: OToolCall, out: &mut Vec<u8>) {
        let (name, arguments) = match tc.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let t = match self.tools.iter().position(|t| t.oai == tc.index) {
            Some(t) => t,
            None => {
                self.tools.push(Tool {
                    oai: tc.index,
                    id: String::new(),
                    name: String::new(),
                    state: ToolState::Queued,
                    args: String::new(),
                    json: JsonEnd::default(),
                });
                self.tools.len() - 1
            }
        };
        let tool = &mut self.tools[t];
        if tool.state == ToolState::Queued {
            if let Some(id) = tc.id {
                tool.id = id;
            }
            if let Some(name) = name {
                tool.name.push_str(&name);
            }
        }
        if let Some(a) = arguments.filter(|a| !a.is_empty()) {
            tool.json.feed(&a);
            match (tool.state, self.open) {
                (ToolState::Open, Open::Tool(_, i)) => Self::args(out, i, &a),
                (ToolState::Queued, _) => tool.args.push_str(&a),
                _ => {}
            }
        }
        self.switch(out);
    }

    /// Opens the first waiting tool call when the open block is done with.
    fn switch(&mut self, out: &mut Vec<u8>) {
        loop {
            let Some(next) = self
                .tools
                .iter()
                .position(|t| t.state == ToolState::Queued && !t.name.is_empty())
            else {
                return;
            };
            match self.open {
                Open::Tool(t, _) if !self.tools[t].json.complete() => return,
                _ => self.open_tool(next, out),
            }
        }
    }
}

impl Translator {
    pub(super) fn o_to_a(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
        if data.trim_ascii() == b"[DONE]" {
            self.end_o_to_a(out);
            return Ok(());
        }
        let chunk: OChunk = serde_json::from_slice(data).map_err(|_| ())?;
        if let Some(e) = chunk.error {
            let code = e.code.as_ref().and_then(Value::as_str).unwrap_or("");
            let kind = e.kind.as_deref().unwrap_or("");
            let kind = match (kind, code) {
                (_, "rate_limit_exceeded") | ("rate_limit_exceeded", _) => "rate_limit_error",
                (_, "overloaded") => "overloaded_error",
                ("invalid_request_error", _) => "invalid_request_error",
                _ => "api_error",
            };
            anthropic_error(out, kind, &e.message);
            self.end = End::Failed;
            return Ok(());
        }
        let Mode::OToA(o) = &mut self.mode else {
            return Ok(());
        };
        if !o.started {
            o.started = true;
            let m = json!({"type": "message_start", "message": {
                "id": format!("msg_{}", chunk.id), "type": "message", "role": "assistant",
                "model": self.model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0},
            }});
            sse_event(out, "message_start", &m);
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let delta = choice.delta.unwrap_or_default();
            if let Some(text) = delta.content.as_deref().or(delta.refusal.as_deref()) {
                o.text(text, out);
            }
            for tc in delta.tool_calls.into_iter().flatten() {
                o.tool_call(tc, out);
            }
            if let Some(f) = choice.finish_reason {
                o.finish = Some(f);
            }
        }
        if let Some(u) = chunk.usage {
            let cached = u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0);
            o.usage = Some((u.prompt_tokens, u.completion_tokens, cached));
        }
        if o.finish.is_some() && o.usage.is_some() {
            self.end_o_to_a(out);
        }
        Ok(())
    }

    /// The Anthropic client's last events: open and waiting blocks, the stop reason and
    /// usage, `message_stop`.
    pub(super) fn end_o_to_a(&mut self, out: &mut Vec<u8>) {
        let Mode::OToA(o) = &mut self.mode else {
            return;
        };
        if !o.started {
            o.started = true;
            let m = json!({"type": "message_start", "message": {
                "id": "msg_", "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }});
            sse_event(out, "message_start", &m);
        }
        o.close(out);
        while let Some(t) = o.tools.iter().position(|t| t.state == ToolState::Queued) {
            o.open_tool(t, out);
            o.close(out);
        }
        let usage = match o.usage {
            Some((prompt, completion, cached)) => json!({
                "output_tokens": completion, "input_tokens": prompt.saturating_sub(cached),
                "cache_read_input_tokens": cached,
            }),
            None => json!({"output_tokens": 0}),
        };
        let reason = stop_reason(o.finish.as_deref().unwrap_or("stop"));
        let d = json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": usage});
        sse_event(out, "message_delta", &d);
        sse_event(out, "message_stop", &json!({"type": "message_stop"}));
        self.end = End::Clean;
    }
}
