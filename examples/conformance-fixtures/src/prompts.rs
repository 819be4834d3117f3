//! The fixture prompts, and argument completion for them.
//!
//! `test_input_required_result_prompt` shows that MRTR is not only for
//! tools: `prompts/get` may ask a question first.

use crate::bindings::settle::plugin::types::ClientContext;
use crate::content::PNG;
use crate::outcome::{Refusal, Served, string_param};
use crate::questions::{self, Elicited, field, read_elicited, reply, string_form};
use serde_json::{Map, Value as Json, json};

/// A prompt as `prompts/list` shows it.
struct Prompt {
    name: &'static str,
    description: &'static str,
    /// Argument names, all required.
    arguments: &'static [(&'static str, &'static str)],
}

const PROMPTS: &[Prompt] = &[
    Prompt {
        name: "test_simple_prompt",
        description: "A prompt without arguments.",
        arguments: &[],
    },
    Prompt {
        name: "test_prompt_with_arguments",
        description: "A prompt that repeats its two arguments.",
        arguments: &[("arg1", "First argument"), ("arg2", "Second argument")],
    },
    Prompt {
        name: "test_prompt_with_embedded_resource",
        description: "A prompt that embeds the resource it is given.",
        arguments: &[("resourceUri", "URI of the resource to embed")],
    },
    Prompt {
        name: "test_prompt_with_image",
        description: "A prompt with an image.",
        arguments: &[],
    },
    Prompt {
        name: "test_input_required_result_prompt",
        description: "A prompt that asks the user for context (MRTR) before it is built.",
        arguments: &[],
    },
];

/// Values `completion/complete` offers for `test_prompt_with_arguments`.
const ARGUMENT_VALUES: &[&str] = &["testValue1", "testValue2", "test-value", "other-value"];

/// Ids `completion/complete` offers for the resource template.
const TEMPLATE_IDS: &[&str] = &["123", "456"];

pub fn list() -> Json {
    let prompts: Vec<Json> = PROMPTS
        .iter()
        .map(|p| {
            let arguments: Vec<Json> = p
                .arguments
                .iter()
                .map(|(name, description)| {
                    json!({"name": name, "description": description, "required": true})
                })
                .collect();
            json!({"name": p.name, "description": p.description, "arguments": arguments})
        })
        .collect();
    json!({"prompts": prompts})
}

fn user(content: Json) -> Json {
    json!({"role": "user", "content": content})
}

fn user_text(text: impl Into<String>) -> Json {
    user(json!({"type": "text", "text": text.into()}))
}

/// `prompts/get`.
pub fn get(
    params: &Json,
    client: &ClientContext,
    replies: Option<&Json>,
) -> Result<Served, Refusal> {
    let name = string_param(params, "name")?;
    let prompt = PROMPTS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| Refusal::InvalidParams(format!("Unknown prompt: {name}")))?;
    let empty = Json::Object(Map::new());
    let args = params.get("arguments").unwrap_or(&empty);
    let arg = |key: &str| {
        args.get(key).and_then(Json::as_str).ok_or_else(|| {
            Refusal::InvalidParams(format!("prompt {name} needs the argument {key}"))
        })
    };
    let messages = match prompt.name {
        "test_simple_prompt" => vec![user_text("This is a simple prompt for testing.")],
        "test_prompt_with_arguments" => vec![user_text(format!(
            "Prompt with arguments: arg1='{}', arg2='{}'",
            arg("arg1")?,
            arg("arg2")?
        ))],
        "test_prompt_with_embedded_resource" => vec![
            user(json!({
                "type": "resource",
                "resource": {
                    "uri": arg("resourceUri")?,
                    "mimeType": "text/plain",
                    "text": "Embedded resource content for testing.",
                },
            })),
            user_text("Please process the embedded resource above."),
        ],
        "test_prompt_with_image" => vec![
            user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
            user_text("Please analyze the image above."),
        ],
        _ => return prompt_with_context(client, replies),
    };
    Ok(Served::Complete(json!({
        "description": prompt.description,
        "messages": messages,
    })))
}

const CONTEXT_KEY: &str = "user_context";

fn prompt_with_context(client: &ClientContext, replies: Option<&Json>) -> Result<Served, Refusal> {
    if !client.elicitation {
        return Err(Refusal::MissingCapability(json!({"elicitation": {}})));
    }
    let Some(answer) = reply(replies, CONTEXT_KEY) else {
        let mut requests = Map::new();
        requests.insert(
            CONTEXT_KEY.into(),
            questions::elicit(
                "What context should the prompt use?",
                string_form("context"),
            ),
        );
        return Ok(Served::InputRequired(questions::input_required(
            requests, None,
        )));
    };
    let context = match read_elicited(CONTEXT_KEY, answer).map_err(Refusal::InvalidParams)? {
        Elicited::Accepted(content) => field(&content, "context")
            .unwrap_or("none given")
            .to_string(),
        Elicited::Declined | Elicited::Cancelled => "none given".to_string(),
    };
    Ok(Served::Complete(json!({
        "description": "A prompt built from the user's context",
        "messages": [user_text(format!("Prompt with context: {context}"))],
    })))
}

/// `completion/complete`: values starting with what was typed.
pub fn complete(params: &Json) -> Result<Json, Refusal> {
    let reference = params
        .get("ref")
        .ok_or_else(|| Refusal::InvalidParams("params.ref is required".into()))?;
    let argument = params
        .get("argument")
        .ok_or_else(|| Refusal::InvalidParams("params.argument is required".into()))?;
    let argument_name = string_param(argument, "name")?;
    let typed = argument.get("value").and_then(Json::as_str).unwrap_or("");
    let candidates: &[&str] = match reference.get("type").and_then(Json::as_str) {
        Some("ref/prompt") => {
            let name = string_param(reference, "name")?;
            let prompt = PROMPTS
                .iter()
                .find(|p| p.name == name)
                .ok_or_else(|| Refusal::InvalidParams(format!("Unknown prompt: {name}")))?;
            match prompt.name {
                "test_prompt_with_arguments" => ARGUMENT_VALUES,
                _ => &[],
            }
        }
        Some("ref/resource") => match (string_param(reference, "uri")?, argument_name) {
            ("test://template/{id}/data", "id") => TEMPLATE_IDS,
            _ => &[],
        },
        _ => {
            return Err(Refusal::InvalidParams(
                "params.ref.type must be ref/prompt or ref/resource".into(),
            ));
        }
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|v| v.starts_with(typed))
        .collect();
    Ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(elicitation: bool) -> ClientContext {
        ClientContext {
            protocol_version: "2026-07-28".into(),
            tasks: false,
            elicitation,
            sampling: false,
            roots: false,
            client_name: None,
            client_version: None,
        }
    }

    fn messages(served: Result<Served, Refusal>) -> Json {
        match served {
            Ok(Served::Complete(result)) => result["messages"].clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_prompt_has_a_description() {
        for prompt in list()["prompts"].as_array().unwrap() {
            assert!(!prompt["description"].as_str().unwrap().is_empty());
        }
    }

    #[test]
    fn arguments_appear_in_the_prompt() {
        let params = json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "testValue1", "arg2": "testValue2"}});
        let text = messages(get(&params, &client(true), None)).to_string();
        assert!(text.contains("testValue1") && text.contains("testValue2"));
    }

    #[test]
    fn a_missing_argument_is_invalid_params() {
        let params = json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "x"}});
        assert!(matches!(
            get(&params, &client(true), None),
            Err(Refusal::InvalidParams(_))
        ));
    }

    #[test]
    fn an_unknown_prompt_is_invalid_params() {
        let params = json!({"name": "nope"});
        assert!(matches!(
            get(&params, &client(true), None),
            Err(Refusal::InvalidParams(_))
        ));
    }

    #[test]
    fn the_embedded_resource_prompt_embeds_the_given_uri() {
        let params = json!({"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "test://example-resource"}});
        let messages = messages(get(&params, &client(true), None));
        assert_eq!(
            messages[0]["content"]["resource"]["uri"],
            "test://example-resource"
        );
    }

    #[test]
    fn the_input_required_prompt_asks_then_uses_the_answer() {
        let params = json!({"name": "test_input_required_result_prompt"});
        let Ok(Served::InputRequired(body)) = get(&params, &client(true), None) else {
            panic!("expected questions");
        };
        assert_eq!(
            body["inputRequests"][CONTEXT_KEY]["method"],
            "elicitation/create"
        );
        let replies =
            json!({CONTEXT_KEY: {"action": "accept", "content": {"context": "test context"}}});
        let messages = messages(get(&params, &client(true), Some(&replies)));
        assert_eq!(
            messages[0]["content"]["text"],
            "Prompt with context: test context"
        );
    }

    #[test]
    fn the_input_required_prompt_needs_elicitation() {
        let params = json!({"name": "test_input_required_result_prompt"});
        assert!(matches!(
            get(&params, &client(false), None),
            Err(Refusal::MissingCapability(_))
        ));
    }

    #[test]
    fn completion_offers_values_that_start_with_what_was_typed() {
        let params = json!({
            "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
            "argument": {"name": "arg1", "value": "test"},
        });
        let values = complete(&params).unwrap()["completion"]["values"].clone();
        assert_eq!(values, json!(["testValue1", "testValue2", "test-value"]));
    }

    #[test]
    fn completion_of_the_template_offers_ids() {
        let params = json!({
            "ref": {"type": "ref/resource", "uri": "test://template/{id}/data"},
            "argument": {"name": "id", "value": "1"},
        });
        assert_eq!(
            complete(&params).unwrap()["completion"]["values"],
            json!(["123"])
        );
    }
}
