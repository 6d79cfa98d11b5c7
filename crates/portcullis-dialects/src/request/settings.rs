//! Settings objects: small, read with derived structs.

use super::read::Ctx;
use super::seeds::{Generic, OptU64};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// OpenAI `stream_options`.
#[derive(Deserialize)]
pub(super) struct StreamOptions {
    pub(super) include_usage: Option<bool>,
}

/// OpenAI `response_format`, Anthropic `output_format` / `output_config.format`.
#[derive(Deserialize)]
pub(super) struct Format {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    json_schema: JsonSize,
    #[serde(default)]
    schema: JsonSize,
}

impl Format {
    pub(super) fn count(&self, ctx: &mut Ctx) {
        if matches!(self.kind.as_deref(), Some("json_schema" | "json_object")) {
            ctx.structured = true;
        }
        ctx.schema(self.json_schema.0);
        ctx.schema(self.schema.0);
    }
}

/// Anthropic `output_config` (its `format` is read like `output_format`).
#[derive(Deserialize)]
pub(super) struct OutputConfig {
    pub(super) format: Option<Object<Format>>,
}

/// Gemini `generationConfig`, in camelCase or snake_case.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GenerationConfig {
    #[serde(default, alias = "max_output_tokens")]
    max_output_tokens: Count,
    #[serde(default, alias = "candidate_count")]
    candidate_count: Count,
    #[serde(alias = "response_mime_type")]
    response_mime_type: Option<String>,
    #[serde(default, alias = "response_schema")]
    response_schema: JsonSize,
    #[serde(default, alias = "response_json_schema")]
    response_json_schema: JsonSize,
    #[serde(default, rename = "_responseJsonSchema")]
    underscore_response_json_schema: JsonSize,
    #[serde(default, alias = "response_modalities")]
    response_modalities: Modalities,
}

impl GenerationConfig {
    pub(super) fn count(&self, ctx: &mut Ctx) {
        // A value read before (`generation_config` and `generationConfig` both sent)
        // stays unless this object gives one.
        ctx.gen_max_output = self.max_output_tokens.0.or(ctx.gen_max_output);
        ctx.candidate_count = self.candidate_count.0.or(ctx.candidate_count);
        if let Some(m) = &self.response_mime_type {
            let m = m.trim();
            if m.eq_ignore_ascii_case("application/json") || m.eq_ignore_ascii_case("text/x.enum") {
                ctx.structured = true;
            }
        }
        for schema in [
            &self.response_schema,
            &self.response_json_schema,
            &self.underscore_response_json_schema,
        ] {
            if schema.0 > 0 {
                ctx.structured = true;
                ctx.schema(schema.0);
            }
        }
        ctx.image_output |= self.response_modalities.0;
    }
}

/// What a field of a settings object must be, by its name; for error messages.
fn settings_expected(key: &str) -> &'static str {
    match key {
        "include_usage" => "a boolean",
        "format" => "an object",
        "maxOutputTokens" | "max_output_tokens" | "candidateCount" | "candidate_count" => {
            "a non-negative integer"
        }
        "responseModalities" | "response_modalities" => "an array of strings",
        _ => "a string",
    }
}

/// Reads a settings object `T` (or `null`); on failure, the path inside it and what
/// the failing field must be are left in the context for the error.
pub(super) struct Settings<'c, T> {
    ctx: &'c mut Ctx,
    _t: PhantomData<T>,
}

impl<'c, T> Settings<'c, T> {
    pub(super) fn new(ctx: &'c mut Ctx) -> Self {
        Settings {
            ctx,
            _t: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Settings<'_, T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Settings<'_, T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<T>, A::Error> {
        serde_path_to_error::deserialize(de::value::MapAccessDeserializer::new(map))
            .map(Some)
            .map_err(|e| {
                // A field sent twice (camelCase and snake_case alike): named as serde
                // names it.
                let text = e.inner().to_string();
                if let Some(dup) = text
                    .strip_prefix("duplicate field `")
                    .and_then(|t| t.split('`').next())
                {
                    self.ctx.expect = "given once";
                    self.ctx.tail = Some(dup.to_owned());
                    return e.into_inner();
                }
                let last = e.path().iter().rev().find_map(|s| match s {
                    serde_path_to_error::Segment::Map { key } => Some(key.as_str()),
                    _ => None,
                });
                if let Some(last) = last {
                    self.ctx.expect = settings_expected(last);
                    self.ctx.tail = Some(e.path().to_string());
                }
                e.into_inner()
            })
    }
}

/// A JSON object read as `T` (derived structs also take arrays, which no settings
/// object is).
pub(super) struct Object<T>(pub(super) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// [`OptU64`] as a field type.
#[derive(Default)]
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        OptU64.deserialize(d).map(Count)
    }
}

/// [`Generic`] (approximate JSON size) as a field type.
#[derive(Default)]
struct JsonSize(u64);

impl<'de> Deserialize<'de> for JsonSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Generic.deserialize(d).map(JsonSize)
    }
}

/// Whether Gemini `responseModalities` include `IMAGE` (`null` = no). A visitor, not a
/// `Vec`: the elements are compared, not kept, and any non-string element is skipped.
#[derive(Default)]
struct Modalities(bool);

impl<'de> Deserialize<'de> for Modalities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ModalitiesVisitor).map(Modalities)
    }
}

struct ModalitiesVisitor;

impl<'de> Visitor<'de> for ModalitiesVisitor {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of strings")
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut image = false;
        while let Some(len) = seq.next_element_seed(ImageWord)? {
            image |= len;
        }
        Ok(image)
    }
}

/// Whether a modality string is `IMAGE` (any case); anything else is `false`.
struct ImageWord;

any_seed!(ImageWord);

impl<'de> Visitor<'de> for ImageWord {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v.eq_ignore_ascii_case("image"))
    }
    ignore_scalars!(false);
    ignore_seq!(false);
    ignore_map!(false);
}
