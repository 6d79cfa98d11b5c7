//! The client's name for a field a later leg refused: a Responses request crosses the
//! hub as a chat request, and the chat → Anthropic (or Gemini) leg names the fields it
//! refuses by their chat paths (`response_format`, `messages[3].content[0].type`).
//! [`client_field`] maps such a path back to the Responses request it came from.
use super::request::to_chat;
use super::wire::Request;
use crate::translate::request::parse;

/// The JSON path, in the client's Responses request `body`, of `field` — a path in
/// the chat request [`super::request_to_chat`] wrote from it (say, the field of an
/// `Unsupported` from the next leg). A path with no counterpart is returned unchanged.
pub(crate) fn client_field(body: &[u8], field: &str) -> String {
    let (head, tail) = split_head(field);
    match head {
        "messages" => match index_of(tail) {
            Some((k, rest)) => message_field(body, k, rest).unwrap_or_else(|| field.to_owned()),
            None => "input".to_owned(),
        },
        "response_format" => {
            let rest = tail.strip_prefix(".json_schema").unwrap_or(tail);
            format!("text.format{rest}")
        }
        "max_completion_tokens" | "max_tokens" => "max_output_tokens".to_owned(),
        "reasoning_effort" => "reasoning.effort".to_owned(),
        "stream_options" => "stream".to_owned(),
        "tools" => match index_of(tail) {
            Some((i, rest)) => format!(
                "tools[{i}]{}",
                rest.strip_prefix(".function").unwrap_or(rest)
            ),
            None => field.to_owned(),
        },
        "tool_choice" => match tail {
            ".function.name" => "tool_choice.name".to_owned(),
            ".type" => "tool_choice.type".to_owned(),
            _ => "tool_choice".to_owned(),
        },
        _ => field.to_owned(),
    }
}

/// `field` split at the end of its first key.
fn split_head(field: &str) -> (&str, &str) {
    let end = field.find(['.', '[']).unwrap_or(field.len());
    field.split_at(end)
}

/// `[n]rest` as `(n, rest)`.
fn index_of(s: &str) -> Option<(usize, &str)> {
    let (n, rest) = s.strip_prefix('[')?.split_once(']')?;
    Some((n.parse().ok()?, rest))
}

fn message_field(body: &[u8], k: usize, rest: &str) -> Option<String> {
    let (_, origins) = to_chat(parse::<Request>(body).ok()?, "").ok()?;
    let o = origins.get(k)?;
    if let Some((n, call)) = rest.strip_prefix(".tool_calls").and_then(index_of) {
        let call = match call {
            ".id" => ".call_id",
            ".function.name" => ".name",
            ".function.arguments" => ".arguments",
            ".type" => ".type",
            _ => "",
        };
        return Some(format!("input[{}]{call}", o.calls.get(n)?));
    }
    if !o.path.starts_with("input[") {
        // The instructions, or a string input: no parts to point into.
        return Some(o.path.clone());
    }
    let (key, tail) = split_head(rest.strip_prefix('.').unwrap_or(rest));
    // A chat image part's `image_url.url` / `.detail` are a Responses part's
    // `image_url` / `detail`.
    let tail = tail
        .replace(".image_url.detail", ".detail")
        .replace(".image_url.url", ".image_url");
    let rest = match (o.tool, key) {
        (true, "content") => format!(".output{tail}"),
        (true, "tool_call_id") => ".call_id".to_owned(),
        (_, "content" | "role" | "name") => format!(".{key}{tail}"),
        _ => String::new(),
    };
    Some(format!("{}{rest}", o.path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::{TranslateError, Wire, request};
    use serde_json::json;

    #[test]
    fn x2_a_refusal_of_the_next_leg_maps_back_to_the_clients_field() {
        let body = json!({"instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "a"},
                {"type": "input_image", "image_url": "https://a/b.png", "detail": "low"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "[1]"},
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]}
        ], "text": {"format": {"type": "json_object"}}})
        .to_string();
        let b = body.as_bytes();
        for (chat, client) in [
            ("messages[0].content", "instructions"),
            (
                "messages[1].content[1].image_url.detail",
                "input[0].content[1].detail",
            ),
            (
                "messages[1].content[1].image_url.url",
                "input[0].content[1].image_url",
            ),
            ("messages[1].role", "input[0].role"),
            ("messages[2].content", "input[2].content"),
            (
                "messages[2].tool_calls[1].function.arguments",
                "input[4].arguments",
            ),
            ("messages[2].tool_calls[0].id", "input[3].call_id"),
            ("messages[3].content[0].type", "input[5].output[0].type"),
            ("messages[3].tool_call_id", "input[5].call_id"),
            ("messages[2].refusal", "input[2]"),
            ("messages[9].role", "messages[9].role"),
            ("messages", "input"),
            ("response_format", "text.format"),
            ("response_format.json_schema.strict", "text.format.strict"),
            ("max_tokens", "max_output_tokens"),
            ("reasoning_effort", "reasoning.effort"),
            ("tools[2].function.parameters", "tools[2].parameters"),
            ("tool_choice.function.name", "tool_choice.name"),
            ("temperature", "temperature"),
        ] {
            assert_eq!(client_field(b, chat), client, "{chat}");
        }
        // A real refusal of the Anthropic leg (an image detail it has no setting for),
        // as `translate::request` maps it back.
        let err = request(Wire::Responses, Wire::Messages, b, "c", 100, false).unwrap_err();
        let TranslateError::Unsupported { field, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!(field, "input[0].content[1].detail");
        assert_eq!(
            client_field(b"{oops", "messages[1].role"),
            "messages[1].role"
        );
    }
}
