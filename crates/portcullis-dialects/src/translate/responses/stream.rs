//! Streamed OpenAI chat answers → Responses streaming events (see the module docs).
use super::response::{call_item_id, item_id};
use super::wire::{ChatUsage, OutputContent, OutputItem, Response, SummaryText};
use super::{finished, now, skeleton, status_of, usage};
use crate::translate::stream::leg::{End, Leg, MALFORMED, TRUNCATED};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Chunk {
    id: String,
    created: Option<u64>,
    choices: Vec<Choice>,
    usage: Option<ChatUsage>,
    error: Option<ChunkError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Choice {
    index: u64,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Delta {
    content: Option<String>,
    refusal: Option<String>,
    reasoning_content: Option<String>,
    tool_calls: Option<Vec<ToolDelta>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ToolDelta {
    index: u64,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChunkError {
    message: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<Value>,
    param: Option<Value>,
}

/// A function call item: its chat tool-call index, output index, and whether open.
#[derive(Debug)]
struct Call {
    chat: u64,
    output: usize,
    open: bool,
}

/// The chat → Responses stream leg.
#[derive(Debug)]
pub(crate) struct ChatToResponses {
    model: String,
    seq: u64,
    end: End,
    started: bool,
    chat_id: String,
    created: u64,
    /// Every output item so far (for `response.completed`), in output order.
    items: Vec<OutputItem>,
    /// The open reasoning item's output index.
    reasoning: Option<usize>,
    /// The open message item's output index, and whether its last part is open.
    message: Option<(usize, bool)>,
    calls: Vec<Call>,
    /// Reasoning and message items opened so far (for their ids).
    reasonings: usize,
    messages: usize,
    finish: Option<String>,
    usage: Option<ChatUsage>,
}

impl ChatToResponses {
    pub(crate) fn new(public_model: &str) -> Self {
        Self {
            model: public_model.to_owned(),
            seq: 0,
            end: End::Open,
            started: false,
            chat_id: String::new(),
            created: 0,
            items: Vec::new(),
            reasoning: None,
            message: None,
            calls: Vec::new(),
            reasonings: 0,
            messages: 0,
            finish: None,
            usage: None,
        }
    }

    /// Writes one event of type `kind`, numbered.
    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(data.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn item_json(&self, i: usize) -> Value {
        serde_json::to_value(&self.items[i]).unwrap_or(Value::Null)
    }

    fn id_of(&self, i: usize) -> String {
        match &self.items[i] {
            OutputItem::Reasoning { id, .. }
            | OutputItem::Message { id, .. }
            | OutputItem::FunctionCall { id, .. } => id.clone(),
        }
    }

    fn response(&self, status: &'static str) -> Response {
        skeleton(&self.chat_id, self.created, &self.model, status)
    }

    fn start(&mut self, id: &str, created: Option<u64>, out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        self.chat_id = id.to_owned();
        self.created = created.unwrap_or_else(now);
        let r = json!({"response": self.response("in_progress")});
        self.emit(out, "response.created", r.clone());
        self.emit(out, "response.in_progress", r);
    }

    fn add_item(&mut self, item: OutputItem, out: &mut Vec<u8>) -> usize {
        let i = self.items.len();
        self.items.push(item);
        let d = json!({"output_index": i, "item": self.item_json(i)});
        self.emit(out, "response.output_item.added", d);
        i
    }

    fn done_item(&mut self, i: usize, status: &'static str, out: &mut Vec<u8>) {
        self.items[i].set_status(status);
        let d = json!({"output_index": i, "item": self.item_json(i)});
        self.emit(out, "response.output_item.done", d);
    }

    fn reasoning_delta(&mut self, text: &str, out: &mut Vec<u8>) {
        let i = match self.reasoning {
            Some(i) => i,
            None => {
                self.close_message("completed", out);
                self.close_calls(None, out);
                let id = item_id("rs", &self.chat_id, self.reasonings);
                self.reasonings += 1;
                let i = self.add_item(
                    OutputItem::Reasoning {
                        id,
                        summary: Vec::new(),
                    },
                    out,
                );
                if let OutputItem::Reasoning { summary, .. } = &mut self.items[i] {
                    summary.push(SummaryText::new(String::new()));
                }
                let d = json!({"item_id": self.id_of(i), "output_index": i, "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""}});
                self.emit(out, "response.reasoning_summary_part.added", d);
                self.reasoning = Some(i);
                i
            }
        };
        if let OutputItem::Reasoning { summary, .. } = &mut self.items[i] {
            if let Some(s) = summary.last_mut() {
                s.text.push_str(text);
            }
        }
        let d =
            json!({"item_id": self.id_of(i), "output_index": i, "summary_index": 0, "delta": text});
        self.emit(out, "response.reasoning_summary_text.delta", d);
    }

    fn close_reasoning(&mut self, out: &mut Vec<u8>) {
        let Some(i) = self.reasoning.take() else {
            return;
        };
        let text = match &self.items[i] {
            OutputItem::Reasoning { summary, .. } => {
                summary.last().map(|s| s.text.clone()).unwrap_or_default()
            }
            _ => String::new(),
        };
        let id = self.id_of(i);
        let d = json!({"item_id": id, "output_index": i, "summary_index": 0, "text": text});
        self.emit(out, "response.reasoning_summary_text.done", d);
        let d = json!({"item_id": id, "output_index": i, "summary_index": 0,
            "part": {"type": "summary_text", "text": text}});
        self.emit(out, "response.reasoning_summary_part.done", d);
        self.done_item(i, "completed", out);
    }

    /// Text (`refusal` false) or refusal text for the open message item.
    fn text_delta(&mut self, refusal: bool, text: &str, out: &mut Vec<u8>) {
        self.close_reasoning(out);
        self.close_calls(None, out);
        let i = match self.message {
            Some((i, _)) => i,
            None => {
                let id = item_id("msg", &self.chat_id, self.messages);
                self.messages += 1;
                let item = OutputItem::Message {
                    id,
                    status: "in_progress",
                    role: "assistant",
                    content: Vec::new(),
                };
                let i = self.add_item(item, out);
                self.message = Some((i, false));
                i
            }
        };
        let same_kind = |c: &OutputContent| matches!(c, OutputContent::Refusal { .. }) == refusal;
        let open = match (&self.items[i], self.message) {
            (OutputItem::Message { content, .. }, Some((_, true))) => {
                content.last().is_some_and(same_kind)
            }
            _ => false,
        };
        if !open {
            self.close_part(out);
            let part = if refusal {
                OutputContent::Refusal {
                    refusal: String::new(),
                }
            } else {
                OutputContent::OutputText {
                    text: String::new(),
                    annotations: Vec::new(),
                }
            };
            let d = json!({"item_id": self.id_of(i), "output_index": i,
                "content_index": self.part_count(i), "part": part});
            if let OutputItem::Message { content, .. } = &mut self.items[i] {
                content.push(part);
            }
            self.message = Some((i, true));
            self.emit(out, "response.content_part.added", d);
        }
        let k = self.part_count(i) - 1;
        if let OutputItem::Message { content, .. } = &mut self.items[i] {
            match content.last_mut() {
                Some(OutputContent::OutputText { text: t, .. })
                | Some(OutputContent::Refusal { refusal: t }) => t.push_str(text),
                None => {}
            }
        }
        let mut d =
            json!({"item_id": self.id_of(i), "output_index": i, "content_index": k, "delta": text});
        if refusal {
            self.emit(out, "response.refusal.delta", d);
        } else {
            d["logprobs"] = json!([]);
            self.emit(out, "response.output_text.delta", d);
        }
    }

    fn part_count(&self, i: usize) -> usize {
        match &self.items[i] {
            OutputItem::Message { content, .. } => content.len(),
            _ => 0,
        }
    }

    /// Closes the open message item's last part.
    fn close_part(&mut self, out: &mut Vec<u8>) {
        let Some((i, true)) = self.message else {
            return;
        };
        self.message = Some((i, false));
        let k = self.part_count(i) - 1;
        let part = match &self.items[i] {
            OutputItem::Message { content, .. } => content[k].clone(),
            _ => return,
        };
        let id = self.id_of(i);
        match &part {
            OutputContent::OutputText { text, .. } => {
                let d = json!({"item_id": id, "output_index": i, "content_index": k,
                    "text": text, "logprobs": []});
                self.emit(out, "response.output_text.done", d);
            }
            OutputContent::Refusal { refusal } => {
                let d = json!({"item_id": id, "output_index": i, "content_index": k,
                    "refusal": refusal});
                self.emit(out, "response.refusal.done", d);
            }
        }
        let d = json!({"item_id": id, "output_index": i, "content_index": k, "part": part});
        self.emit(out, "response.content_part.done", d);
    }

    fn close_message(&mut self, status: &'static str, out: &mut Vec<u8>) {
        self.close_part(out);
        if let Some((i, _)) = self.message.take() {
            self.done_item(i, status, out);
        }
    }

    fn tool_delta(&mut self, tc: ToolDelta, out: &mut Vec<u8>) {
        let (name, arguments) = tc.function.map_or((None, None), |f| (f.name, f.arguments));
        let c = match self.calls.iter().position(|c| c.chat == tc.index) {
            Some(c) => {
                if let (Some(n), OutputItem::FunctionCall { name, .. }) =
                    (name, &mut self.items[self.calls[c].output])
                {
                    name.push_str(&n);
                }
                c
            }
            None => {
                self.close_reasoning(out);
                self.close_message("completed", out);
                let item = OutputItem::FunctionCall {
                    id: call_item_id(&self.chat_id, self.calls.len()),
                    call_id: tc.id.unwrap_or_default(),
                    name: name.unwrap_or_default(),
                    arguments: String::new(),
                    status: "in_progress",
                };
                let output = self.add_item(item, out);
                self.calls.push(Call {
                    chat: tc.index,
                    output,
                    open: true,
                });
                self.calls.len() - 1
            }
        };
        let Some(args) = arguments.filter(|a| !a.is_empty()) else {
            return;
        };
        if !self.calls[c].open {
            // Its item was closed by text in between: dropped (module docs).
            return;
        }
        let i = self.calls[c].output;
        if let OutputItem::FunctionCall { arguments, .. } = &mut self.items[i] {
            arguments.push_str(&args);
        }
        let d = json!({"item_id": self.id_of(i), "output_index": i, "delta": args});
        self.emit(out, "response.function_call_arguments.delta", d);
    }

    /// Closes the open function calls, in output order; the one at output index
    /// `cut` (the answer's last item) as incomplete.
    fn close_calls(&mut self, cut: Option<usize>, out: &mut Vec<u8>) {
        for c in 0..self.calls.len() {
            if !std::mem::replace(&mut self.calls[c].open, false) {
                continue;
            }
            let i = self.calls[c].output;
            let (name, arguments) = match &self.items[i] {
                OutputItem::FunctionCall {
                    name, arguments, ..
                } => (name.clone(), arguments.clone()),
                _ => continue,
            };
            let d = json!({"item_id": self.id_of(i), "output_index": i,
                "arguments": arguments, "name": name});
            self.emit(out, "response.function_call_arguments.done", d);
            let status = if cut == Some(i) {
                "incomplete"
            } else {
                "completed"
            };
            self.done_item(i, status, out);
        }
    }

    /// The end: the open items close and the whole response goes out.
    fn complete(&mut self, out: &mut Vec<u8>) {
        self.start("", None, out);
        let (status, incomplete) = status_of(self.finish.as_deref());
        let cut = incomplete.and(self.items.len().checked_sub(1));
        let last = if cut.is_some() {
            "incomplete"
        } else {
            "completed"
        };
        // At most one of these holds the last item (the others closed when it opened).
        self.close_reasoning(out);
        self.close_message(last, out);
        self.close_calls(cut, out);
        let mut r = self.response(status);
        r.output = std::mem::take(&mut self.items);
        r.usage = self.usage.as_ref().map(usage);
        let r = finished(r, self.finish.as_deref(), now());
        let kind = if r.status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit(out, kind, json!({"response": r}));
        self.end = End::Clean;
    }

    fn error_event(&mut self, message: &str, code: Option<&str>, param: Value, out: &mut Vec<u8>) {
        let d = json!({"code": code, "message": message, "param": param});
        self.emit(out, "error", d);
        self.end = End::Failed;
    }

    fn handle(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
        if data.trim_ascii() == b"[DONE]" {
            self.complete(out);
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_slice(data).map_err(|_| ())?;
        if let Some(e) = chunk.error {
            let code = match &e.code {
                Some(Value::String(c)) => Some(c.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => e.kind,
            };
            let param = e.param.filter(Value::is_string).unwrap_or(Value::Null);
            self.error_event(&e.message, code.as_deref(), param, out);
            return Ok(());
        }
        self.start(&chunk.id, chunk.created, out);
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let d = choice.delta.unwrap_or_default();
            if let Some(t) = d.reasoning_content.filter(|t| !t.is_empty()) {
                self.reasoning_delta(&t, out);
            }
            if let Some(t) = d.content.filter(|t| !t.is_empty()) {
                self.text_delta(false, &t, out);
            }
            if let Some(t) = d.refusal.filter(|t| !t.is_empty()) {
                self.text_delta(true, &t, out);
            }
            for tc in d.tool_calls.into_iter().flatten() {
                self.tool_delta(tc, out);
            }
            if let Some(f) = choice.finish_reason {
                self.finish = Some(f);
            }
        }
        if let Some(u) = chunk.usage {
            self.usage = Some(u);
        }
        if self.finish.is_some() && self.usage.is_some() {
            self.complete(out);
        }
        Ok(())
    }
}

impl Leg for ChatToResponses {
    fn event(&mut self, _name: &str, data: &[u8], at_eof: bool, out: &mut Vec<u8>) -> bool {
        if self.end != End::Open {
            return false;
        }
        if self.handle(data, out).is_err() && !at_eof {
            self.fail(MALFORMED, "malformed_event", out);
        }
        self.end == End::Open
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> bool {
        if self.end == End::Open {
            if self.finish.is_some() {
                self.complete(out);
            } else {
                self.fail(TRUNCATED, "stream_truncated", out);
            }
        }
        self.end == End::Clean
    }

    fn fail(&mut self, message: &str, code: &str, out: &mut Vec<u8>) {
        self.error_event(message, Some(code), Value::Null, out);
    }
}
