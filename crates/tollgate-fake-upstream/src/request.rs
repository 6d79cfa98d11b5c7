//! Reading what the fake needs from a request body, and the deterministic usage numbers.

use serde_json::Value;

use crate::Dialect;
use crate::behavior::{Behavior, DEFAULT_CHUNKS, DEFAULT_OUTPUT_TOKENS};

/// The bytes of prompt text in a JSON request body: the summed UTF-8 length of every
/// string value under a key named `content`, `text` or `system` (at any depth; inside
/// such a value, nested objects count only their own `content`/`text`/`system`
/// strings). That covers OpenAI `messages[].content` (string or parts), Anthropic
/// `system` and `messages[].content` (string or blocks), and Gemini
/// `contents[].parts[].text` and `systemInstruction.parts[].text`, while roles, models
/// and types are not counted.
pub fn prompt_text_bytes(body: &Value) -> u64 {
    fn walk(v: &Value, counted: bool) -> u64 {
        match v {
            Value::String(s) if counted => s.len() as u64,
            Value::Array(a) => a.iter().map(|x| walk(x, counted)).sum(),
            Value::Object(m) => m
                .iter()
                .map(|(k, x)| walk(x, matches!(k.as_str(), "content" | "text" | "system")))
                .sum(),
            _ => 0,
        }
    }
    walk(body, false)
}

/// The prompt-token estimate the fake reports for a request body:
/// `max(1, prompt_text_bytes / 4)` (see [`prompt_text_bytes`]); a body that is not
/// JSON counts 1.
pub fn estimate_input_tokens(body: &[u8]) -> u64 {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => (prompt_text_bytes(&v) / 4).max(1),
        Err(_) => 1,
    }
}

/// The text of content chunk `i` (0-based). The non-streamed answer's text is the
/// concatenation of the chunks `0..n`.
pub fn chunk_text(i: usize) -> &'static str {
    const WORDS: [&str; 8] = [
        "This ",
        "is ",
        "a ",
        "fake ",
        "answer ",
        "from ",
        "tollgate ",
        "fake-upstream. ",
    ];
    WORDS[i % WORDS.len()]
}

/// The full answer text for `chunks` content chunks.
pub fn expected_text(chunks: u32) -> String {
    (0..chunks as usize).map(chunk_text).collect()
}

/// What one generation request asks for.
pub(crate) struct Parsed {
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) text_bytes: u64,
}

pub(crate) fn parse(
    dialect: Dialect,
    body: &[u8],
    path_model: Option<&str>,
    path_stream: bool,
) -> Result<Parsed, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("We could not parse the JSON body of your request: {e}"))?;
    if !v.is_object() {
        return Err("The request body must be a JSON object.".into());
    }
    let num = |v: Option<&Value>| v.and_then(Value::as_u64);
    let (model, stream, include_usage, max_tokens) = match dialect {
        Dialect::OpenAi => (
            v.get("model")
                .and_then(Value::as_str)
                .unwrap_or("gpt-4o-mini")
                .to_owned(),
            v.get("stream").and_then(Value::as_bool).unwrap_or(false),
            v.pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            num(v.get("max_completion_tokens")).or(num(v.get("max_tokens"))),
        ),
        Dialect::Anthropic => (
            v.get("model")
                .and_then(Value::as_str)
                .unwrap_or("claude-sonnet-4-5")
                .to_owned(),
            v.get("stream").and_then(Value::as_bool).unwrap_or(false),
            true,
            num(v.get("max_tokens")),
        ),
        Dialect::Gemini => (
            path_model.unwrap_or("gemini-2.0-flash").to_owned(),
            path_stream,
            true,
            num(v.pointer("/generationConfig/maxOutputTokens")),
        ),
    };
    Ok(Parsed {
        model,
        stream,
        include_usage,
        max_tokens,
        text_bytes: prompt_text_bytes(&v),
    })
}

/// The usage numbers of one answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    /// Whole prompt (includes cached and cache-creation tokens).
    pub(crate) prompt: u64,
    /// Part of the prompt read from the cache.
    pub(crate) cached: u64,
    /// Part of the prompt written to the cache.
    pub(crate) cache_creation: u64,
    /// Output tokens.
    pub(crate) output: u64,
    /// The output was cut by the request's max tokens.
    pub(crate) truncated: bool,
    /// Content chunks.
    pub(crate) chunks: u32,
}

impl Usage {
    pub(crate) fn compute(p: &Parsed, b: &Behavior) -> Usage {
        let cached = b.cached_tokens.unwrap_or(0);
        let cache_creation = b.cache_creation_tokens.unwrap_or(0);
        let base = b.input_tokens.unwrap_or_else(|| (p.text_bytes / 4).max(1));
        let prompt = base.max(cached.saturating_add(cache_creation));
        let wanted = b.output_tokens.unwrap_or(DEFAULT_OUTPUT_TOKENS);
        let output = p.max_tokens.map_or(wanted, |m| wanted.min(m));
        Usage {
            prompt,
            cached,
            cache_creation,
            output,
            truncated: output < wanted,
            chunks: b.chunks.unwrap_or(DEFAULT_CHUNKS),
        }
    }

    /// Anthropic's `input_tokens`: the prompt minus cache reads and writes.
    pub(crate) fn uncached(&self) -> u64 {
        self.prompt - self.cached - self.cache_creation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_only_text() {
        let openai = json!({"model":"gpt-4o","messages":[{"role":"user","content":"12345678"},{"role":"user","content":[{"type":"text","text":"1234"}]}]});
        assert_eq!(prompt_text_bytes(&openai), 12);
        let anthropic = json!({"model":"claude","system":"1234","messages":[{"role":"user","content":[{"type":"text","text":"12345678"}]}]});
        assert_eq!(prompt_text_bytes(&anthropic), 12);
        let gemini = json!({"contents":[{"role":"user","parts":[{"text":"12345678"}]}],"systemInstruction":{"parts":[{"text":"1234"}]}});
        assert_eq!(prompt_text_bytes(&gemini), 12);
        assert_eq!(estimate_input_tokens(openai.to_string().as_bytes()), 3);
        assert_eq!(estimate_input_tokens(b"{}"), 1);
    }

    #[test]
    fn usage_rules() {
        let p = Parsed {
            model: "m".into(),
            stream: false,
            include_usage: false,
            max_tokens: Some(10),
            text_bytes: 40,
        };
        let u = Usage::compute(&p, &Behavior::new());
        assert_eq!((u.prompt, u.output, u.truncated), (10, 10, true));
        let u = Usage::compute(
            &p,
            &Behavior::new()
                .with_cached_tokens(30)
                .with_cache_creation_tokens(5)
                .with_output_tokens(3),
        );
        assert_eq!(
            (
                u.prompt,
                u.cached,
                u.cache_creation,
                u.uncached(),
                u.output,
                u.truncated
            ),
            (35, 30, 5, 0, 3, false)
        );
    }
}
