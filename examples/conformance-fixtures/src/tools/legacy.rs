//! The 2025-11-25 sampling and elicitation fixtures.
//!
//! On that wire the server sends `sampling/createMessage` and
//! `elicitation/create` as requests of its own. The plugin never does: it
//! returns the question as an MRTR outcome, the runner sends it to a legacy
//! client as a real request and calls again with the reply, and a 2026-07-28
//! client simply gets the `InputRequiredResult`. So these tools work on both
//! wires, in two rounds.
//!
//! The requested schemas are the suite's: SEP-1034 (a default for every
//! primitive type) and SEP-1330 (every enum variant, titled or not, single
//! or multi-select). They must reach the client exactly as written.

use super::input::{Step, one_question};
use super::{
    Call, Failure, Outcome, Tool, capability, no_arguments, object_schema, require, string_arg,
    text,
};
use crate::questions::{self, Elicited, read_elicited, read_sampled};
use serde_json::{Map, Value as Json, json};

pub const TOOLS: &[Tool] = &[
    Tool {
        name: "test_sampling",
        description: "Asks the client's model to answer the given prompt.",
        input_schema: sampling_schema,
        run: sampling,
    },
    Tool {
        name: "test_elicitation",
        description: "Asks the user for a username and an email address.",
        input_schema: elicitation_schema,
        run: elicitation,
    },
    Tool {
        name: "test_elicitation_sep1034_defaults",
        description: "Asks for a form whose every field has a default (SEP-1034).",
        input_schema: no_arguments,
        run: sep1034_defaults,
    },
    Tool {
        name: "test_elicitation_sep1330_enums",
        description: "Asks for a form with every enum variant (SEP-1330).",
        input_schema: no_arguments,
        run: sep1330_enums,
    },
];

fn sampling_schema() -> Json {
    object_schema(
        json!({"prompt": {"type": "string", "description": "The prompt to send to the model"}}),
        &["prompt"],
    )
}

fn elicitation_schema() -> Json {
    object_schema(
        json!({"message": {"type": "string", "description": "The message to show the user"}}),
        &["message"],
    )
}

fn sampling(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.sampling, capability("sampling"))?;
    let prompt = string_arg(call.args, "prompt")?;
    match one_question(call, "sampling", false, || questions::sample(prompt, 100)) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => {
            let said = read_sampled("sampling", answer).map_err(Failure::InvalidParams)?;
            Ok(text(format!("LLM response: {said}")))
        }
    }
}

/// Elicits with `schema`, then reports the action and content as the
/// reference fixture does.
fn elicit_and_report(
    call: &Call<'_>,
    message: &str,
    schema: impl FnOnce() -> Json,
    report: &str,
) -> Result<Outcome, Failure> {
    require(call.client.elicitation, capability("elicitation"))?;
    let key = "elicitation";
    match one_question(call, key, false, || questions::elicit(message, schema())) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => {
            let (action, content) =
                match read_elicited(key, answer).map_err(Failure::InvalidParams)? {
                    Elicited::Accepted(content) => ("accept", content),
                    Elicited::Declined => ("decline", Map::new()),
                    Elicited::Cancelled => ("cancel", Map::new()),
                };
            Ok(text(format!(
                "{report}: action={action}, content={}",
                Json::Object(content)
            )))
        }
    }
}

fn elicitation(call: &Call<'_>) -> Result<Outcome, Failure> {
    let message = string_arg(call.args, "message")?;
    elicit_and_report(call, message, contact_form, "User response")
}

fn contact_form() -> Json {
    json!({
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    })
}

fn sep1034_defaults(call: &Call<'_>) -> Result<Outcome, Failure> {
    elicit_and_report(
        call,
        "Please review and update the form fields with defaults",
        defaults_form,
        "Elicitation completed",
    )
}

/// SEP-1034: a default for a string, an integer, a number, an enum and a
/// boolean.
pub fn defaults_form() -> Json {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": true},
        },
        "required": [],
    })
}

fn sep1330_enums(call: &Call<'_>) -> Result<Outcome, Failure> {
    elicit_and_report(
        call,
        "Please select options from the enum fields",
        enums_form,
        "Elicitation completed",
    )
}

/// SEP-1330: untitled and titled single-select, the legacy `enumNames`
/// form, and untitled and titled multi-select.
pub fn enums_form() -> Json {
    let titled = |titles: [&str; 3]| -> Json {
        titles
            .iter()
            .enumerate()
            .map(|(i, title)| json!({"const": format!("value{}", i + 1), "title": title}))
            .collect()
    };
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"],
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": titled(["First Option", "Second Option", "Third Option"]),
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {"anyOf": titled(["First Choice", "Second Choice", "Third Choice"])},
            },
        },
        "required": [],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::{KEY, answered, asked, everything};
    use crate::{mrtr::Sealer, tools};

    fn run(name: &str, args: Json, replies: Option<Json>) -> Result<Outcome, Failure> {
        tools::call(
            name,
            &args,
            &everything(),
            replies.as_ref(),
            None,
            &Sealer::new(KEY),
            "n",
        )
    }

    #[test]
    fn sampling_sends_the_prompt_and_reports_the_reply() {
        let args = json!({"prompt": "Test prompt for sampling"});
        let body = asked(run("test_sampling", args.clone(), None));
        let question = &body["inputRequests"]["sampling"];
        assert_eq!(question["method"], "sampling/createMessage");
        assert_eq!(
            question["params"]["messages"][0]["content"]["text"],
            "Test prompt for sampling"
        );
        assert_eq!(question["params"]["maxTokens"], 100);
        let replies = json!({"sampling": {
            "role": "assistant",
            "content": {"type": "text", "text": "This is a test response from the client"},
            "model": "test-model",
            "stopReason": "endTurn",
        }});
        assert_eq!(
            answered(run("test_sampling", args, Some(replies))),
            "LLM response: This is a test response from the client"
        );
    }

    #[test]
    fn elicitation_reports_the_action_and_content() {
        let args = json!({"message": "Please provide your information"});
        let replies = json!({"elicitation": {
            "action": "accept",
            "content": {"username": "testuser", "email": "test@example.com"},
        }});
        let done = answered(run("test_elicitation", args, Some(replies)));
        assert!(done.starts_with("User response: action=accept, content={"));
        assert!(done.contains("testuser"));
    }

    #[test]
    fn every_sep1034_default_is_of_its_fields_type() {
        let form = defaults_form();
        let p = &form["properties"];
        assert!(p["name"]["default"].is_string());
        assert!(p["age"]["default"].is_i64());
        assert!(p["score"]["default"].is_f64());
        assert!(p["verified"]["default"].is_boolean());
        let status = &p["status"];
        assert!(
            status["enum"]
                .as_array()
                .unwrap()
                .contains(&status["default"])
        );
    }

    #[test]
    fn sep1330_enums_keep_titled_and_untitled_variants_apart() {
        let form = enums_form();
        let p = &form["properties"];
        assert!(p["untitledSingle"].get("oneOf").is_none());
        assert!(p["titledSingle"].get("enum").is_none());
        assert_eq!(p["titledSingle"]["oneOf"][2]["const"], "value3");
        assert_eq!(
            p["legacyEnum"]["enum"].as_array().unwrap().len(),
            p["legacyEnum"]["enumNames"].as_array().unwrap().len()
        );
        assert!(p["untitledMulti"]["items"].get("anyOf").is_none());
        assert!(p["titledMulti"]["items"].get("enum").is_none());
    }

    #[test]
    fn the_defaults_form_goes_out_unchanged() {
        let body = asked(run("test_elicitation_sep1034_defaults", json!({}), None));
        assert_eq!(
            body["inputRequests"]["elicitation"]["params"]["requestedSchema"],
            defaults_form()
        );
    }
}
