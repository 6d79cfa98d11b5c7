//! The walk over the body: the top-level object, messages, content blocks and parts,
//! tools; each element counted into the running tally as it is read.

use super::error::MAX_OBJECT_ID_LEN;
use super::read::{Ctx, Seg};
use super::seeds::{FromKey, Generic, KeySeed, LenientLen, OptU64, TextLen};
use super::settings::{Format, GenerationConfig, Object, OutputConfig, Settings, StreamOptions};
use crate::estimate;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// Reads one value with `$seed`, with `$seg` pushed on the path and `$expect` as the
/// description used if it has the wrong type. On error the path is left in place.
macro_rules! field {
    ($ctx:ident, $access:ident . $method:ident, $seg:expr, $expect:expr, $seed:expr) => {{
        $ctx.path.push($seg);
        $ctx.expect = $expect;
        let value = $access.$method($seed)?;
        $ctx.path.pop();
        value
    }};
}

keys!(TopKey {
    Model = ["model"],
    PreviousResponse = ["previous_response_id"],
    Stream = ["stream"],
    StreamOptions = ["stream_options"],
    Messages = ["messages", "contents"],
    System = ["system"],
    SystemInstruction = ["systemInstruction", "system_instruction"],
    Tools = ["tools", "functions"],
    MaxTokens = ["max_tokens"],
    MaxCompletionTokens = ["max_completion_tokens"],
    MaxOutputTokens = ["max_output_tokens"],
    N = ["n"],
    Format = ["response_format", "output_format"],
    OutputConfig = ["output_config"],
    GenerationConfig = ["generationConfig", "generation_config"],
    // `content` and `requests`: Gemini's `embedContent` and `batchEmbedContents`.
    Text = ["prompt", "input", "instructions", "content", "requests"],
});

keys!(BlockKey {
    Type = ["type"],
    Content = ["content"],
    Parts = ["parts"],
    Text = ["text", "thinking", "refusal", "reasoning_content"],
    Json = [
        "tool_calls", "function_call", "input", "output", "arguments", "name", "title",
        "context", "functionCall", "functionResponse", "function_response",
        "executableCode", "executable_code", "codeExecutionResult", "code_execution_result",
    ],
    ImageUrl = ["image_url"],
    VideoUrl = ["video_url"],
    Audio = ["input_audio"],
    File = ["file"],
    Source = ["source"],
    Inline = ["inlineData", "inline_data", "fileData", "file_data"],
    Ignore = [
        "role", "id", "call_id", "tool_use_id", "tool_call_id", "signature", "data",
        "thoughtSignature", "thought_signature", "thought", "cache_control", "citations",
        "annotations", "is_error", "detail", "audio", "status", "format", "filename",
        "file_id", "videoMetadata", "video_metadata", "partMetadata", "part_metadata",
        "mediaResolution", "media_resolution",
    ],
});

keys!(SourceKey {
    Type = ["type"],
    MediaType = ["media_type"],
    Data = ["data"],
    Content = ["content"],
});

keys!(InlineKey {
    Mime = ["mimeType", "mime_type"],
});

/// The top-level object.
pub(super) struct Top<'c> {
    pub(super) ctx: &'c mut Ctx,
}

any_seed!(Top<'_>);

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        while let Some((key, name)) = map.next_key_seed(KeySeed::<TopKey>::new())? {
            match key {
                // Gemini names the model and the streaming mode in the path.
                TopKey::Model | TopKey::Stream if ctx.gemini => {
                    map.next_value::<IgnoredAny>()?;
                }
                TopKey::Model => {
                    let model: Option<String> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a string",
                        PhantomData
                    );
                    // `null` is absent; a name too long is flagged, not kept.
                    if let Some(m) = model {
                        ctx.model_too_long = m.len() > estimate::MAX_MODEL_LEN;
                        ctx.model = (!ctx.model_too_long).then_some(m);
                    }
                }
                TopKey::PreviousResponse => {
                    let id: Option<String> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a string",
                        PhantomData
                    );
                    // An id no provider makes (empty, or too long to be one) is not kept:
                    // the request then goes where any request of its model goes.
                    ctx.continues = id.filter(|i| (1..=MAX_OBJECT_ID_LEN).contains(&i.len()));
                }
                TopKey::Stream => {
                    ctx.stream = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a boolean",
                        PhantomData::<Option<bool>>
                    );
                }
                TopKey::StreamOptions => {
                    let o: Option<StreamOptions> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    if let Some(v) = o.and_then(|o| o.include_usage) {
                        ctx.include_usage = Some(v);
                    }
                }
                TopKey::Messages => field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "an array of messages",
                    Blocks {
                        ctx: &mut *ctx,
                        element: "a message object",
                        messages: true,
                    }
                ),
                TopKey::System => {
                    ctx.message();
                    field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a string or an array of content blocks",
                        Content {
                            ctx: &mut *ctx,
                            strict: true,
                        }
                    )
                }
                TopKey::SystemInstruction => {
                    ctx.message();
                    field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a Content object",
                        Block { ctx: &mut *ctx }
                    )
                }
                TopKey::Text => {
                    ctx.message();
                    field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "text",
                        Content {
                            ctx: &mut *ctx,
                            strict: false,
                        }
                    )
                }
                TopKey::Tools => field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "an array of tools",
                    Tools { ctx: &mut *ctx }
                ),
                TopKey::MaxTokens
                | TopKey::MaxCompletionTokens
                | TopKey::MaxOutputTokens
                | TopKey::N => {
                    let v = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a non-negative integer",
                        OptU64
                    );
                    *match key {
                        TopKey::MaxTokens => &mut ctx.max_tokens,
                        TopKey::MaxCompletionTokens => &mut ctx.max_completion_tokens,
                        TopKey::MaxOutputTokens => &mut ctx.max_output_tokens,
                        _ => &mut ctx.n,
                    } = v;
                }
                TopKey::Format => {
                    let f: Option<Format> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    f.inspect(|f| f.count(ctx));
                }
                TopKey::OutputConfig => {
                    let o: Option<OutputConfig> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    if let Some(Object(f)) = o.and_then(|o| o.format) {
                        f.count(ctx);
                    }
                }
                TopKey::GenerationConfig => {
                    let g: Option<GenerationConfig> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    g.inspect(|g| g.count(ctx));
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// An array of messages (each adds the per-message overhead) or of parts; `null` is
/// absent.
struct Blocks<'c> {
    ctx: &'c mut Ctx,
    element: &'static str,
    messages: bool,
}

any_seed!(Blocks<'_>);

impl<'de> Visitor<'de> for Blocks<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        let mut i = 0;
        loop {
            let more = field!(
                ctx,
                seq.next_element_seed,
                Seg::Index(i),
                self.element,
                Block { ctx: &mut *ctx }
            );
            if more.is_none() {
                return Ok(());
            }
            if self.messages {
                ctx.message();
            }
            i += 1;
        }
    }
}

/// Message content: a string, an array of blocks, one block, or `null`. Strict content
/// rejects scalars and non-object array elements; lenient content (`prompt`, `input`,
/// document sources) takes anything and counts its text.
struct Content<'c> {
    ctx: &'c mut Ctx,
    strict: bool,
}

any_seed!(Content<'_>);

impl<'de> Visitor<'de> for Content<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of content blocks")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.ctx.text(v.len() as u64);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Bool(v), &self));
        }
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Unsigned(v), &self));
        }
        // A token id of a pre-tokenized prompt.
        self.ctx.text(estimate::BYTES_PER_TOKEN);
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Signed(v), &self));
        }
        self.ctx.text(estimate::BYTES_PER_TOKEN);
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Float(v), &self));
        }
        self.ctx.text(estimate::BYTES_PER_TOKEN);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        let mut i = 0;
        loop {
            let more = if self.strict {
                field!(
                    ctx,
                    seq.next_element_seed,
                    Seg::Index(i),
                    "a content block object",
                    Block { ctx: &mut *ctx }
                )
            } else {
                field!(
                    ctx,
                    seq.next_element_seed,
                    Seg::Index(i),
                    "text",
                    Content {
                        ctx: &mut *ctx,
                        strict: false,
                    }
                )
            };
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_block(self.ctx, map)
    }
}

/// One message, part or content block (an object).
struct Block<'c> {
    ctx: &'c mut Ctx,
}

any_seed!(Block<'_>);

impl<'de> Visitor<'de> for Block<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_block(self.ctx, map)
    }
}

/// The media kind of a block, from its `type`, its keys and its MIME type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Media {
    None,
    Image,
    Audio,
    Video,
    Document,
}

impl Media {
    fn from_type(t: &str) -> Self {
        match t {
            "image" | "image_url" | "input_image" => Media::Image,
            "document" | "file" | "input_file" => Media::Document,
            "input_audio" | "audio" => Media::Audio,
            "video" | "video_url" | "input_video" => Media::Video,
            _ => Media::None,
        }
    }

    /// `None` when the MIME type is absent.
    fn from_mime(m: &str) -> Self {
        let m = m.trim_start().as_bytes();
        let starts = |p: &[u8]| m.len() >= p.len() && m[..p.len()].eq_ignore_ascii_case(p);
        if starts(b"image/") {
            Media::Image
        } else if starts(b"video/") {
            Media::Video
        } else if starts(b"audio/") {
            Media::Audio
        } else if m.is_empty() {
            Media::None
        } else {
            Media::Document
        }
    }
}

/// A string classified by `classify`; anything else is `Media::None`.
struct MediaTag {
    mime: bool,
}

any_seed!(MediaTag);

impl<'de> Visitor<'de> for MediaTag {
    type Value = Media;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Media, E> {
        Ok(if self.mime {
            Media::from_mime(v)
        } else {
            Media::from_type(v)
        })
    }
    ignore_scalars!(Media::None);
    ignore_seq!(Media::None);
    ignore_map!(Media::None);
}

/// Anthropic `source` of an image / document block: text sources are counted as text,
/// other sources are media.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SourceKind {
    #[default]
    Other,
    Text,
    Content,
}

struct Source<'c> {
    ctx: &'c mut Ctx,
}

any_seed!(Source<'_>);

/// The kind of a source from its `type`.
struct SourceType;

any_seed!(SourceType);

impl<'de> Visitor<'de> for SourceType {
    type Value = SourceKind;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<SourceKind, E> {
        Ok(match v {
            "text" => SourceKind::Text,
            "content" => SourceKind::Content,
            _ => SourceKind::Other,
        })
    }
    ignore_scalars!(SourceKind::Other);
    ignore_seq!(SourceKind::Other);
    ignore_map!(SourceKind::Other);
}

impl<'de> Visitor<'de> for Source<'_> {
    type Value = (SourceKind, Media);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    ignore_str!((SourceKind::Other, Media::None));
    ignore_scalars!((SourceKind::Other, Media::None));
    ignore_seq!((SourceKind::Other, Media::None));
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let ctx = self.ctx;
        let mut kind = SourceKind::Other;
        let mut media = Media::None;
        let mut data_len = 0;
        while let Some((key, name)) = map.next_key_seed(KeySeed::<SourceKey>::new())? {
            match key {
                SourceKey::Type => kind = map.next_value_seed(SourceType)?,
                SourceKey::MediaType => media = map.next_value_seed(MediaTag { mime: true })?,
                SourceKey::Data => data_len = map.next_value_seed(LenientLen)?,
                SourceKey::Content => field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "text",
                    Content {
                        ctx: &mut *ctx,
                        strict: false,
                    }
                ),
                SourceKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if kind == SourceKind::Text {
            ctx.text(data_len);
        }
        Ok((kind, media))
    }
}

/// Gemini `inlineData` / `fileData`: only the MIME type matters.
struct Inline;

any_seed!(Inline);

impl<'de> Visitor<'de> for Inline {
    type Value = Media;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    ignore_str!(Media::None);
    ignore_scalars!(Media::None);
    ignore_seq!(Media::None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Media, A::Error> {
        let mut media = Media::None;
        while let Some((key, _)) = map.next_key_seed(KeySeed::<InlineKey>::new())? {
            match key {
                InlineKey::Mime => media = map.next_value_seed(MediaTag { mime: true })?,
                InlineKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(media)
    }
}

/// Walks the keys of one message / part / block, then counts its media.
fn walk_block<'de, A: MapAccess<'de>>(ctx: &mut Ctx, mut map: A) -> Result<(), A::Error> {
    let mut by_type = Media::None;
    let mut by_key = Media::None;
    let mut by_mime = Media::None;
    let mut source = None;
    while let Some((key, name)) = map.next_key_seed(KeySeed::<BlockKey>::new())? {
        match key {
            BlockKey::Type => by_type = map.next_value_seed(MediaTag { mime: false })?,
            BlockKey::Content => field!(
                ctx,
                map.next_value_seed,
                Seg::Key(name),
                "a string or an array of content blocks",
                Content {
                    ctx: &mut *ctx,
                    strict: true,
                }
            ),
            BlockKey::Parts => field!(
                ctx,
                map.next_value_seed,
                Seg::Key(name),
                "an array of parts",
                Blocks {
                    ctx: &mut *ctx,
                    element: "a part object",
                    messages: false,
                }
            ),
            BlockKey::Text => {
                let n = field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "a string",
                    TextLen
                );
                ctx.text(n);
            }
            BlockKey::Json | BlockKey::Other => {
                let n = map.next_value_seed(Generic)?;
                ctx.text(n);
            }
            BlockKey::ImageUrl => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Image;
            }
            BlockKey::VideoUrl => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Video;
            }
            BlockKey::Audio => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Audio;
            }
            BlockKey::File => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Document;
            }
            BlockKey::Source => {
                source = Some(field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "a source",
                    Source { ctx: &mut *ctx }
                ));
            }
            BlockKey::Inline => {
                let m = map.next_value_seed(Inline)?;
                if m != Media::None {
                    by_mime = m;
                } else if by_key == Media::None {
                    // A Responses-API `file_data` string, or a part without a MIME type.
                    by_key = Media::Document;
                }
            }
            BlockKey::Ignore => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    let media = match source {
        // Plain-text and content documents were counted as text.
        Some((SourceKind::Text | SourceKind::Content, _)) => Media::None,
        Some((SourceKind::Other, mime)) if by_type == Media::None && by_key == Media::None => mime,
        _ if by_mime != Media::None => by_mime,
        _ if by_key != Media::None => by_key,
        _ => by_type,
    };
    let t = &mut ctx.tally;
    match media {
        Media::None => {}
        Media::Image => t.images = t.images.saturating_add(1),
        Media::Audio => t.audio = t.audio.saturating_add(1),
        Media::Video => t.videos = t.videos.saturating_add(1),
        Media::Document => t.documents = t.documents.saturating_add(1),
    }
    Ok(())
}

/// `tools` / `functions`: an array (or `null`); each element's JSON size counts.
struct Tools<'c> {
    ctx: &'c mut Ctx,
}

any_seed!(Tools<'_>);

impl<'de> Visitor<'de> for Tools<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of tools")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(n) = seq.next_element_seed(Generic)? {
            self.ctx.schema(n);
            self.ctx.tally.has_tools = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_from_mime() {
        assert_eq!(Media::from_mime("IMAGE/png"), Media::Image);
        assert_eq!(Media::from_mime("video/mp4"), Media::Video);
        assert_eq!(Media::from_mime("audio/wav"), Media::Audio);
        assert_eq!(Media::from_mime("application/pdf"), Media::Document);
        assert_eq!(Media::from_mime(""), Media::None);
    }
}
