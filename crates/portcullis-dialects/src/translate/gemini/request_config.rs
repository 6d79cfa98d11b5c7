//! The `generationConfig`, `tools` and `toolConfig` of a Gemini client's request as
//! chat request fields.
use super::wire::{
    ChatFunction, ChatJsonSchema, ChatName, ChatRequest, ChatResponseFormat, ChatStop, ChatTool,
    ChatToolChoice, GGenerationConfig, GThinkingConfig, GTool, GToolConfig,
};
use super::{CHAT, asks, refuse_extra, schema};
use crate::translate::TranslateError;
use crate::translate::request::{Extra, unsupported};

/// The nearest `reasoning_effort` of a thinking budget (-1: dynamic).
fn effort_of_budget(budget: i64) -> Result<&'static str, TranslateError> {
    Ok(match budget {
        -1 => "medium",
        0 => "none",
        1..4608 => "low",
        4608..16384 => "medium",
        16384.. => "high",
        _ => {
            return Err(unsupported(
                "generationConfig.thinkingConfig.thinkingBudget",
                "a thinking budget is -1 (dynamic), 0 (off) or a token count",
            ));
        }
    })
}

fn thinking(t: GThinkingConfig) -> Result<Option<String>, TranslateError> {
    const P: &str = "generationConfig.thinkingConfig";
    refuse_extra(P, &t.extra, CHAT)?;
    if let Some(level) = t.thinking_level {
        let effort = level.to_ascii_lowercase();
        return match effort.as_str() {
            "minimal" | "low" | "medium" | "high" => Ok(Some(effort)),
            _ => Err(unsupported(
                format!("{P}.thinkingLevel"),
                format!("`{level}` has no reasoning_effort (use minimal, low, medium or high)"),
            )),
        };
    }
    t.thinking_budget
        .map(|b| effort_of_budget(b).map(str::to_owned))
        .transpose()
}

pub(super) fn generation_config(
    g: GGenerationConfig,
    out: &mut ChatRequest,
) -> Result<(), TranslateError> {
    const P: &str = "generationConfig";
    refuse_extra(P, &g.extra, CHAT)?;
    let refuse = |field: &str, why: &str| Err(unsupported(format!("{P}.{field}"), why));
    if g.candidate_count.is_some_and(|n| n > 1) {
        return refuse("candidateCount", "only one candidate is translated");
    }
    if asks(g.top_k.as_ref()) {
        return refuse("topK", "OpenAI chat completions has no top-k sampling");
    }
    if g.response_logprobs == Some(true) {
        return refuse("responseLogprobs", "log probabilities are not translated");
    }
    if asks(g.logprobs.as_ref()) {
        return refuse("logprobs", "log probabilities are not translated");
    }
    if g.response_modalities
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| !m.eq_ignore_ascii_case("text")))
    {
        return refuse("responseModalities", "only text answers are translated");
    }
    let schema_field = if g.response_json_schema.is_some() {
        "responseJsonSchema"
    } else {
        "responseSchema"
    };
    let schema = g
        .response_json_schema
        .or_else(|| g.response_schema.as_ref().map(schema::to_json_schema));
    out.response_format = match (g.response_mime_type.as_deref(), schema) {
        (None | Some("text/plain"), None) => None,
        (Some("application/json"), None) => Some(ChatResponseFormat {
            kind: "json_object".into(),
            json_schema: None,
        }),
        (Some("application/json"), Some(schema)) => Some(ChatResponseFormat {
            kind: "json_schema".into(),
            json_schema: Some(ChatJsonSchema {
                name: "response".into(),
                description: None,
                schema: Some(schema),
                strict: None,
            }),
        }),
        (None | Some("text/plain"), Some(_)) => {
            return refuse(
                schema_field,
                "a response schema needs responseMimeType application/json",
            );
        }
        (Some(other), _) => {
            return Err(unsupported(
                format!("{P}.responseMimeType"),
                format!("`{other}` answers are not translated (use application/json)"),
            ));
        }
    };
    out.max_completion_tokens = g.max_output_tokens;
    out.temperature = g.temperature;
    out.top_p = g.top_p;
    out.stop = g.stop_sequences.map(ChatStop::Many);
    out.seed = g.seed;
    out.presence_penalty = g.presence_penalty;
    out.frequency_penalty = g.frequency_penalty;
    out.reasoning_effort = g.thinking_config.map(thinking).transpose()?.flatten();
    Ok(())
}

pub(super) fn tools(tools: Vec<GTool>) -> Result<Vec<ChatTool>, TranslateError> {
    let mut out = Vec::new();
    for (i, t) in tools.into_iter().enumerate() {
        let tp = format!("tools[{i}]");
        refuse_extra(&tp, &t.extra, CHAT)?;
        for (k, d) in t.function_declarations.into_iter().flatten().enumerate() {
            refuse_extra(&format!("{tp}.functionDeclarations[{k}]"), &d.extra, CHAT)?;
            let parameters = d
                .parameters_json_schema
                .or_else(|| d.parameters.as_ref().map(schema::to_json_schema));
            out.push(ChatTool {
                kind: "function".into(),
                function: Some(ChatFunction {
                    name: d.name,
                    description: d.description,
                    parameters,
                    _strict: None,
                    extra: Extra::new(),
                }),
                extra: Extra::new(),
            });
        }
    }
    Ok(out)
}

pub(super) fn tool_config(tc: GToolConfig, out: &mut ChatRequest) -> Result<(), TranslateError> {
    const P: &str = "toolConfig.functionCallingConfig";
    refuse_extra("toolConfig", &tc.extra, CHAT)?;
    let Some(f) = tc.function_calling_config else {
        return Ok(());
    };
    refuse_extra(P, &f.extra, CHAT)?;
    let names = f.allowed_function_names.unwrap_or_default();
    let mode = f.mode.as_deref().unwrap_or("AUTO").to_ascii_uppercase();
    let choice = |m: &str| Some(ChatToolChoice::Mode(m.into()));
    out.tool_choice = match mode.as_str() {
        _ if !names.is_empty() && mode != "ANY" => {
            return Err(unsupported(
                format!("{P}.allowedFunctionNames"),
                "allowed function names are translated with mode ANY only",
            ));
        }
        "AUTO" | "MODE_UNSPECIFIED" => choice("auto"),
        "NONE" => choice("none"),
        "ANY" if names.is_empty() => choice("required"),
        "ANY" if names.len() == 1 => Some(ChatToolChoice::Named {
            kind: "function".into(),
            function: Some(ChatName {
                name: names[0].clone(),
            }),
        }),
        "ANY" => {
            // Offering only the allowed functions, one of which must be called.
            if let Some(tools) = &mut out.tools {
                tools.retain(|t| t.function.as_ref().is_some_and(|f| names.contains(&f.name)));
            }
            choice("required")
        }
        _ => {
            return Err(unsupported(
                format!("{P}.mode"),
                format!("mode `{mode}` has no tool_choice (use AUTO, ANY or NONE)"),
            ));
        }
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::request_to_chat::tests::{g_to_oa, refused, weather_json_schema};
    use serde_json::{Value, json};

    #[test]
    fn x2_gemini_function_declarations_and_calling_config_become_chat_tools() {
        // Google's function calling REST example (OpenAPI `parameters`), mode ANY.
        let decl = |name: &str| json!({"name": name, "description": "Gets the weather", "parameters": {"type": "OBJECT", "properties": {"location": {"type": "STRING", "description": "The city and state, e.g. San Francisco, CA"}}, "required": ["location"]}});
        let req = |config: Value| {
            json!({
                "contents": [{"role": "user", "parts": [{"text": "What's the weather in Boston?"}]}],
                "tools": [{"functionDeclarations": [decl("get_weather"), {"name": "get_time", "parametersJsonSchema": {"type": "object"}}]}],
                "toolConfig": {"functionCallingConfig": config}
            })
        };
        let got = g_to_oa(
            req(json!({"mode": "ANY", "allowedFunctionNames": ["get_weather"]})),
            false,
        )
        .unwrap();
        assert_eq!(
            got["tools"],
            json!([
                {"type": "function", "function": {"name": "get_weather", "description": "Gets the weather", "parameters": weather_json_schema()}},
                {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
            ])
        );
        assert_eq!(
            got["tool_choice"],
            json!({"type": "function", "function": {"name": "get_weather"}})
        );
        for (mode, want) in [("AUTO", "auto"), ("ANY", "required"), ("NONE", "none")] {
            let got = g_to_oa(req(json!({"mode": mode})), false).unwrap();
            assert_eq!(got["tool_choice"], json!(want), "{mode}");
            assert_eq!(got["tools"].as_array().unwrap().len(), 2);
        }
        // ANY among several names: only those tools are offered.
        let got = g_to_oa(
            req(json!({"mode": "ANY", "allowedFunctionNames": ["get_time", "nope"]})),
            false,
        )
        .unwrap();
        assert_eq!(got["tool_choice"], json!("required"));
        assert_eq!(got["tools"].as_array().unwrap().len(), 1);
        assert_eq!(got["tools"][0]["function"]["name"], json!("get_time"));
        assert_eq!(
            refused(g_to_oa(
                req(json!({"mode": "AUTO", "allowedFunctionNames": ["get_time"]})),
                false
            )),
            "toolConfig.functionCallingConfig.allowedFunctionNames"
        );
        assert_eq!(
            refused(g_to_oa(req(json!({"mode": "VALIDATED"})), false)),
            "toolConfig.functionCallingConfig.mode"
        );
    }

    #[test]
    fn x2_gemini_structured_output_becomes_response_format() {
        let req = |config: Value| json!({"contents": [{"parts": [{"text": "List a few popular cookie recipes."}]}], "generationConfig": config});
        // Google's structured output example, OpenAPI `responseSchema`.
        let got = g_to_oa(
            req(json!({"responseMimeType": "application/json", "responseSchema": {"type": "ARRAY", "items": {"type": "OBJECT", "properties": {"recipeName": {"type": "STRING"}}, "propertyOrdering": ["recipeName"]}}})),
            false,
        )
        .unwrap();
        assert_eq!(
            got["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "response", "schema": {"type": "array", "items": {"type": "object", "properties": {"recipeName": {"type": "string"}}}}}})
        );
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let got = g_to_oa(
            req(json!({"responseMimeType": "application/json", "responseJsonSchema": schema})),
            false,
        )
        .unwrap();
        assert_eq!(got["response_format"]["json_schema"]["schema"], schema);
        let got = g_to_oa(req(json!({"responseMimeType": "application/json"})), false).unwrap();
        assert_eq!(got["response_format"], json!({"type": "json_object"}));
        assert_eq!(
            refused(g_to_oa(
                req(json!({"responseMimeType": "text/x.enum"})),
                false
            )),
            "generationConfig.responseMimeType"
        );
        assert_eq!(
            refused(g_to_oa(
                req(json!({"responseSchema": {"type": "STRING"}})),
                false
            )),
            "generationConfig.responseSchema"
        );
        assert_eq!(
            refused(g_to_oa(
                req(
                    json!({"responseMimeType": "text/plain", "responseJsonSchema": {"type": "string"}})
                ),
                false
            )),
            "generationConfig.responseJsonSchema"
        );
    }

    #[test]
    fn x2_gemini_thinking_budget_maps_to_the_nearest_effort() {
        let req = |t: Value| json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"thinkingConfig": t}});
        for (budget, effort) in [
            (-1, "medium"),
            (0, "none"),
            (1024, "low"),
            (4607, "low"),
            (4608, "medium"),
            (8192, "medium"),
            (16384, "high"),
            (24576, "high"),
        ] {
            let got = g_to_oa(
                req(json!({"thinkingBudget": budget, "includeThoughts": true})),
                false,
            )
            .unwrap();
            assert_eq!(got["reasoning_effort"], json!(effort), "{budget}");
        }
        for (level, effort) in [("low", "low"), ("HIGH", "high")] {
            let got = g_to_oa(req(json!({"thinkingLevel": level})), false).unwrap();
            assert_eq!(got["reasoning_effort"], json!(effort));
        }
        let got = g_to_oa(req(json!({"includeThoughts": true})), false).unwrap();
        assert!(got.get("reasoning_effort").is_none());
        assert_eq!(
            refused(g_to_oa(req(json!({"thinkingBudget": -2})), false)),
            "generationConfig.thinkingConfig.thinkingBudget"
        );
        assert_eq!(
            refused(g_to_oa(req(json!({"thinkingLevel": "extreme"})), false)),
            "generationConfig.thinkingConfig.thinkingLevel"
        );
    }
}
