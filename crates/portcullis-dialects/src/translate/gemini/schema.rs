//! Gemini's OpenAPI-subset `Schema` (function `parameters`, `responseSchema`) as a
//! JSON schema: type names lower-cased (`OBJECT` → `object`), `nullable: true` folded
//! into the type (`["string", "null"]`), `propertyOrdering` dropped (JSON schema
//! objects are unordered); every other keyword (`description`, `enum`, `format`,
//! `required`, `minItems`, …) is the same in both and kept.
use serde_json::{Map, Value};

/// `schema` (OpenAPI subset) as a JSON schema.
pub(super) fn to_json_schema(schema: &Value) -> Value {
    let Value::Object(m) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        let v = match (k.as_str(), v) {
            ("type", Value::String(t)) => Value::String(t.to_ascii_lowercase()),
            ("nullable" | "propertyOrdering", _) => continue,
            ("properties", Value::Object(props)) => Value::Object(
                props
                    .iter()
                    .map(|(name, s)| (name.clone(), to_json_schema(s)))
                    .collect(),
            ),
            ("items", s) => to_json_schema(s),
            ("anyOf", Value::Array(a)) => Value::Array(a.iter().map(to_json_schema).collect()),
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    if m.get("nullable") == Some(&Value::Bool(true)) {
        match out.get("type").cloned() {
            Some(Value::String(t)) => {
                out.insert("type".into(), Value::Array(vec![t.into(), "null".into()]));
            }
            _ => {
                let any = Value::Object(std::mem::take(&mut out));
                let null = serde_json::json!({"type": "null"});
                out.insert("anyOf".into(), Value::Array(vec![any, null]));
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn x2_gemini_openapi_schema_becomes_a_json_schema() {
        // Gemini's function calling docs, the OpenAPI form of `parameters`.
        let openapi = json!({
            "type": "OBJECT",
            "properties": {
                "location": {"type": "STRING", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "STRING", "enum": ["celsius", "fahrenheit"], "nullable": true},
                "days": {"type": "ARRAY", "items": {"type": "INTEGER", "format": "int32"}, "minItems": 1}
            },
            "required": ["location"],
            "propertyOrdering": ["location", "unit", "days"]
        });
        assert_eq!(
            to_json_schema(&openapi),
            json!({
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "array", "items": {"type": "integer", "format": "int32"}, "minItems": 1}
                },
                "required": ["location"]
            })
        );
        assert_eq!(
            to_json_schema(&json!({"anyOf": [{"type": "STRING"}], "nullable": true})),
            json!({"anyOf": [{"anyOf": [{"type": "string"}]}, {"type": "null"}]})
        );
    }
}
