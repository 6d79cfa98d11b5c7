//! Reading what the fake needs from a request body, and the deterministic usage numbers.

use serde_json::Value;

use crate::Dialect;
use crate::behavior::{Behavior, DEFAULT_CHUNKS, DEFAULT_OUTPUT_TOKENS};
use crate::stats::Route;

/// The bytes of prompt text in a JSON request body: the summed UTF-8 length of every
/// string value under a key named `content`, `text`, `system`, `input`, `instructions`
/// or `prompt` (at any depth; inside such a value, nested objects count only their own
/// strings under those keys). That covers OpenAI `messages[].content` (string or
/// parts), the Responses API's `input` (a string, or items whose `content` is a string
/// or `input_text` parts) and `instructions`, embedding `input` strings, image and video
/// `prompt`s, Anthropic `system` and `messages[].content` (string or blocks), and Gemini
/// `contents[].parts[].text`, `systemInstruction.parts[].text` and embedding
/// `content.parts[].text`, while roles, models and types are not counted.
pub fn prompt_text_bytes(body: &Value) -> u64 {
    fn walk(v: &Value, counted: bool) -> u64 {
        match v {
            Value::String(s) if counted => s.len() as u64,
            Value::Array(a) => a.iter().map(|x| walk(x, counted)).sum(),
            Value::Object(m) => m.iter().map(|(k, x)| walk(x, is_text_key(k))).sum(),
            _ => 0,
        }
    }
    walk(body, false)
}

fn is_text_key(k: &str) -> bool {
    matches!(
        k,
        "content" | "text" | "system" | "input" | "instructions" | "prompt"
    )
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
        "portcullis ",
        "fake-upstream. ",
    ];
    WORDS[i % WORDS.len()]
}

/// The full answer text for `chunks` content chunks.
pub fn expected_text(chunks: u32) -> String {
    (0..chunks as usize).map(chunk_text).collect()
}

/// Default dimensions of the fake's embedding vectors (kept tiny).
pub const DEFAULT_EMBEDDING_DIMENSIONS: u32 = 8;
/// Largest `dimensions` / `outputDimensionality` the fake accepts.
pub(crate) const MAX_EMBEDDING_DIMENSIONS: u64 = 3072;
/// Most inputs in one OpenAI embeddings call (as OpenAI).
pub(crate) const MAX_EMBEDDING_INPUTS: usize = 2048;
/// Most requests in one Gemini `batchEmbedContents` call (as Gemini).
pub(crate) const MAX_BATCH_EMBED_REQUESTS: usize = 100;
/// Most images in one images call (as OpenAI).
pub(crate) const MAX_IMAGES: u64 = 10;

/// What one call asks for.
pub(crate) struct Parsed {
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    pub(crate) max_tokens: Option<u64>,
    /// Whether the provider keeps the answer for retrieval, as OpenAI does: a chat
    /// completion only with `"store": true`, a Responses API response unless
    /// `"store": false`.
    pub(crate) store: bool,
    /// Prompt text bytes (estimated at 4 bytes a token).
    pub(crate) text_bytes: u64,
    /// Prompt tokens known exactly (token-id arrays of embedding inputs).
    pub(crate) exact_tokens: u64,
    /// What the route needs beyond the usage numbers.
    pub(crate) call: Call,
}

/// The route-specific part of a call.
pub(crate) enum Call {
    /// Text generation (chat completions, messages, generateContent, Responses).
    Generate,
    /// Token counting (Anthropic count_tokens, Gemini countTokens).
    CountTokens,
    /// Embeddings: one `(seed, dimensions)` per input, in order.
    Embed {
        inputs: Vec<(u64, u32)>,
        base64: bool,
    },
    /// Image generations and edits.
    Images { n: u64, size: String },
    /// A video job.
    Video { seconds: String, size: String },
    /// A stored response or video job, by id (no body read).
    Resource { id: String },
}

/// FNV-1a, 64 bits: the seed of an embedding vector.
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// An unsigned number given as a JSON number or a numeric string (form fields).
fn num_of(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A string field, or a number rendered as a string (form fields, `seconds`).
fn str_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn default_model(route: Route) -> &'static str {
    match route {
        Route::Messages | Route::MessagesCountTokens => "claude-sonnet-4-5",
        Route::GenerateContent | Route::StreamGenerateContent | Route::CountTokens => {
            "gemini-2.0-flash"
        }
        Route::EmbedContent | Route::BatchEmbedContents => "text-embedding-004",
        Route::Embeddings => "text-embedding-3-small",
        Route::ImageGenerations | Route::ImageEdits => "gpt-image-1",
        Route::VideoCreate | Route::VideoRetrieve | Route::VideoContent | Route::VideoDelete => {
            "sora-2"
        }
        _ => "gpt-4o-mini",
    }
}

/// The boundary parameter of a `multipart/form-data` content type.
fn multipart_boundary(content_type: &str) -> Option<&str> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"'))
            .filter(|b| !b.is_empty())
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, _) = needle.split_first()?;
    let last_start = hay.len().checked_sub(needle.len())?;
    let mut i = 0;
    while i <= last_start {
        i += hay[i..=last_start].iter().position(|&b| b == first)?;
        if hay[i..].starts_with(needle) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The `name="…"` (or `filename="…"`) parameter of a part's content-disposition.
fn disposition_param<'a>(headers: &'a str, param: &str) -> Option<&'a str> {
    let line = headers
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?;
    line.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim() == param).then(|| v.trim().trim_matches('"'))
    })
}

/// The text fields of a `multipart/form-data` body as a JSON object of strings (file
/// parts are skipped; a malformed body yields the fields read before the fault).
pub(crate) fn form_fields(body: &[u8], boundary: &str) -> Value {
    let mut out = serde_json::Map::new();
    let delim = format!("--{boundary}");
    let Some(first) = find(body, delim.as_bytes()) else {
        return Value::Object(out);
    };
    let mut rest = &body[first + delim.len()..];
    // Each part: CRLF, headers, CRLF CRLF, value, CRLF, delimiter.
    while let Some(after) = rest.strip_prefix(b"\r\n") {
        let Some(end) = find(after, delim.as_bytes()) else {
            break;
        };
        let part = &after[..end];
        rest = &after[end + delim.len()..];
        let Some(split) = find(part, b"\r\n\r\n") else {
            continue;
        };
        let headers = String::from_utf8_lossy(&part[..split]);
        if disposition_param(&headers, "filename").is_some() {
            continue;
        }
        let Some(name) = disposition_param(&headers, "name") else {
            continue;
        };
        let value = &part[split + 4..];
        let value = value.strip_suffix(b"\r\n").unwrap_or(value);
        out.insert(
            name.to_owned(),
            Value::String(String::from_utf8_lossy(value).into_owned()),
        );
    }
    Value::Object(out)
}

/// Reads what a call needs from its body. `param` is the model (Gemini routes) or the
/// id (response and video routes) taken from the path. An `Err` is the message of the
/// 400 the vendor would send.
pub(crate) fn parse(
    route: Route,
    dialect: Dialect,
    body: &[u8],
    content_type: Option<&str>,
    param: Option<&str>,
) -> Result<Parsed, String> {
    let mut p = Parsed {
        model: default_model(route).to_owned(),
        stream: false,
        include_usage: true,
        max_tokens: None,
        store: false,
        text_bytes: 0,
        exact_tokens: 0,
        call: Call::Generate,
    };
    if route.is_resource() {
        p.call = Call::Resource {
            id: param.unwrap_or_default().to_owned(),
        };
        return Ok(p);
    }
    let form = content_type.and_then(multipart_boundary);
    let v: Value = match form {
        Some(boundary) => form_fields(body, boundary),
        None => serde_json::from_slice(body)
            .map_err(|e| format!("We could not parse the JSON body of your request: {e}"))?,
    };
    if !v.is_object() {
        return Err("The request body must be a JSON object.".into());
    }
    if let Some(m) = v.get("model").and_then(Value::as_str) {
        p.model = m.to_owned();
    }
    if dialect == Dialect::Gemini {
        p.model = param.unwrap_or(default_model(route)).to_owned();
    }
    p.text_bytes = prompt_text_bytes(&v);
    let num = |v: Option<&Value>| v.and_then(Value::as_u64);
    match route {
        Route::ChatCompletions => {
            p.stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
            p.include_usage = v
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            p.max_tokens = num(v.get("max_completion_tokens")).or(num(v.get("max_tokens")));
            p.store = v.get("store").and_then(Value::as_bool).unwrap_or(false);
        }
        Route::Messages => {
            p.stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
            p.max_tokens = num(v.get("max_tokens"));
        }
        Route::GenerateContent | Route::StreamGenerateContent => {
            p.stream = route == Route::StreamGenerateContent;
            p.max_tokens = num(v.pointer("/generationConfig/maxOutputTokens"));
        }
        Route::Responses => {
            p.stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
            p.max_tokens = num(v.get("max_output_tokens"));
            p.store = v.get("store").and_then(Value::as_bool).unwrap_or(true);
        }
        Route::MessagesCountTokens | Route::CountTokens => p.call = Call::CountTokens,
        Route::Embeddings => embeddings(&v, &mut p)?,
        Route::EmbedContent => {
            let content = v
                .get("content")
                .filter(|c| c.is_object())
                .ok_or("* EmbedContentRequest.content: contents is not specified")?;
            let dims = gemini_dims(&v)?;
            p.call = Call::Embed {
                inputs: vec![(gemini_seed(content), dims)],
                base64: false,
            };
        }
        Route::BatchEmbedContents => {
            let requests = v
                .get("requests")
                .and_then(Value::as_array)
                .filter(|r| !r.is_empty())
                .ok_or("* BatchEmbedContentsRequest.requests: requests is not specified")?;
            if requests.len() > MAX_BATCH_EMBED_REQUESTS {
                return Err(format!(
                    "* BatchEmbedContentsRequest.requests: at most {MAX_BATCH_EMBED_REQUESTS} requests can be in one batch"
                ));
            }
            let mut inputs = Vec::with_capacity(requests.len());
            for (i, r) in requests.iter().enumerate() {
                let content = r.get("content").filter(|c| c.is_object()).ok_or_else(|| {
                    format!("* BatchEmbedContentsRequest.requests[{i}].content: contents is not specified")
                })?;
                inputs.push((gemini_seed(content), gemini_dims(r)?));
            }
            p.call = Call::Embed {
                inputs,
                base64: false,
            };
        }
        Route::ImageGenerations | Route::ImageEdits => {
            prompt_of(&v)?;
            let n = match v.get("n") {
                None | Some(Value::Null) => 1,
                Some(x) => num_of(Some(x)).ok_or("Invalid type for 'n': expected an integer.")?,
            };
            if n < 1 {
                return Err(format!(
                    "Invalid 'n': integer below minimum value. Expected a value >= 1, but got {n} instead."
                ));
            }
            if n > MAX_IMAGES {
                return Err(format!(
                    "Invalid 'n': integer above maximum value. Expected a value <= {MAX_IMAGES}, but got {n} instead."
                ));
            }
            p.call = Call::Images {
                n,
                size: str_of(v.get("size")).unwrap_or_else(|| "1024x1024".into()),
            };
        }
        Route::VideoCreate => {
            prompt_of(&v)?;
            p.call = Call::Video {
                seconds: str_of(v.get("seconds")).unwrap_or_else(|| "4".into()),
                size: str_of(v.get("size")).unwrap_or_else(|| "720x1280".into()),
            };
        }
        _ => {}
    }
    Ok(p)
}

fn prompt_of(v: &Value) -> Result<&str, String> {
    v.get("prompt")
        .and_then(Value::as_str)
        .ok_or_else(|| "Missing required parameter: 'prompt'.".to_owned())
}

/// The seed of a Gemini content: its parts' texts.
fn gemini_seed(content: &Value) -> u64 {
    let parts = content.get("parts").and_then(Value::as_array);
    let texts = parts
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("text").and_then(Value::as_str));
    fnv1a(texts.flat_map(|t| t.bytes().chain([0u8])))
}

/// An embedding's dimensions field: the default when absent, `bad()` when it is not
/// an integer in 1..=[`MAX_EMBEDDING_DIMENSIONS`].
fn dimensions(d: Option<&Value>, bad: impl FnOnce() -> String) -> Result<u32, String> {
    match d {
        None | Some(Value::Null) => Ok(DEFAULT_EMBEDDING_DIMENSIONS),
        Some(d) => d
            .as_u64()
            .filter(|d| (1..=MAX_EMBEDDING_DIMENSIONS).contains(d))
            .map(|d| d as u32)
            .ok_or_else(bad),
    }
}

fn gemini_dims(v: &Value) -> Result<u32, String> {
    dimensions(v.get("outputDimensionality"), || {
        format!(
            "* EmbedContentRequest.output_dimensionality: must be between 1 and {MAX_EMBEDDING_DIMENSIONS}"
        )
    })
}

const INVALID_INPUT: &str = "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.";

/// A token-id array (`[1, 2, 3]`): its length and seed.
fn token_array(a: &[Value]) -> Option<(u64, u64)> {
    let mut bytes = Vec::with_capacity(a.len() * 8);
    for t in a {
        bytes.extend_from_slice(&t.as_u64()?.to_le_bytes());
    }
    Some((a.len() as u64, fnv1a(bytes)))
}

/// OpenAI embeddings: `input` (a string, strings, a token array or token arrays),
/// `dimensions`, `encoding_format`.
fn embeddings(v: &Value, p: &mut Parsed) -> Result<(), String> {
    let dims = dimensions(v.get("dimensions"), || {
        format!(
            "Invalid value for 'dimensions': expected an integer between 1 and {MAX_EMBEDDING_DIMENSIONS}."
        )
    })?;
    let base64 = match v.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(_) => {
            return Err(
                "Invalid value for 'encoding_format': expected 'float' or 'base64'.".into(),
            );
        }
    };
    let mut inputs = Vec::new();
    let mut text_bytes = 0u64;
    let mut exact = 0u64;
    let mut text = |s: &str, inputs: &mut Vec<(u64, u32)>| {
        if s.is_empty() {
            return Err(INVALID_INPUT.to_owned());
        }
        text_bytes += s.len() as u64;
        inputs.push((fnv1a(s.bytes()), dims));
        Ok(())
    };
    match v.get("input") {
        None | Some(Value::Null) => return Err("'input' is a required property".into()),
        Some(Value::String(s)) => text(s, &mut inputs)?,
        Some(Value::Array(a)) if a.is_empty() => return Err(INVALID_INPUT.into()),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => {
            let (n, seed) = token_array(a).ok_or(INVALID_INPUT)?;
            exact += n;
            inputs.push((seed, dims));
        }
        Some(Value::Array(a)) => {
            if a.len() > MAX_EMBEDDING_INPUTS {
                return Err(format!(
                    "'$.input' is invalid: at most {MAX_EMBEDDING_INPUTS} inputs per request."
                ));
            }
            for x in a {
                match x {
                    Value::String(s) => text(s, &mut inputs)?,
                    Value::Array(t) if !t.is_empty() => {
                        let (n, seed) = token_array(t).ok_or(INVALID_INPUT)?;
                        exact += n;
                        inputs.push((seed, dims));
                    }
                    _ => return Err(INVALID_INPUT.into()),
                }
            }
        }
        Some(_) => return Err(INVALID_INPUT.into()),
    }
    p.text_bytes = text_bytes;
    p.exact_tokens = exact;
    p.call = Call::Embed { inputs, base64 };
    Ok(())
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
    /// Part of the output spent on reasoning.
    pub(crate) reasoning: u64,
    /// The output was cut by the request's max tokens.
    pub(crate) truncated: bool,
    /// Content chunks.
    pub(crate) chunks: u32,
}

impl Usage {
    pub(crate) fn compute(p: &Parsed, b: &Behavior) -> Usage {
        let cached = b.cached_tokens.unwrap_or(0);
        let cache_creation = b.cache_creation_tokens.unwrap_or(0);
        let base = b
            .input_tokens
            .unwrap_or_else(|| (p.text_bytes / 4 + p.exact_tokens).max(1));
        let prompt = base.max(cached.saturating_add(cache_creation));
        let wanted = b.output_tokens.unwrap_or(DEFAULT_OUTPUT_TOKENS);
        let output = p.max_tokens.map_or(wanted, |m| wanted.min(m));
        Usage {
            prompt,
            cached,
            cache_creation,
            output,
            reasoning: b.reasoning_tokens.unwrap_or(0).min(output),
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
    fn multipart_text_fields_are_read_and_files_skipped() {
        let ct = "multipart/form-data; boundary=\"xYz\"";
        let boundary = multipart_boundary(ct).unwrap();
        assert_eq!(boundary, "xYz");
        let body = b"--xYz\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\n3\r\n\
--xYz\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\r\n\x89PNG\r\n\
--xYz\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\ntwo\r\nlines\r\n--xYz--\r\n";
        let v = form_fields(body, boundary);
        assert_eq!(v, json!({"n": "3", "prompt": "two\r\nlines"}));
        assert_eq!(num_of(v.get("n")), Some(3));
        assert!(multipart_boundary("application/json").is_none());
        assert_eq!(form_fields(b"garbage", "xYz"), json!({}));
    }

    #[test]
    fn usage_rules() {
        let p = Parsed {
            model: "m".into(),
            stream: false,
            include_usage: false,
            max_tokens: Some(10),
            store: false,
            text_bytes: 40,
            exact_tokens: 0,
            call: Call::Generate,
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
