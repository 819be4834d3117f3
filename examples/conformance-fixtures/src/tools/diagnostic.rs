//! Tools that probe the runner rather than the plugin: capability gating
//! (-32021), that questions travel as MRTR results and never as requests on
//! a response stream, that a JSON Schema 2020-12 input schema reaches the
//! client untouched, and `x-mcp-header` argument mirroring.

use super::{
    Call, Failure, Outcome, Tool, capability, no_arguments, object_schema, require, string_arg,
    text,
};
use crate::questions::{self, Elicited, read_elicited, reply};
use serde_json::{Map, Value as Json, json};

pub const TOOLS: &[Tool] = &[
    Tool {
        name: "test_missing_capability",
        description: "Needs the client's sampling capability; without it the call fails with -32021.",
        input_schema: no_arguments,
        run: missing_capability,
    },
    Tool {
        name: "test_streaming_elicitation",
        description: "Asks one question as an MRTR result, never as a request on the response stream.",
        input_schema: no_arguments,
        run: streaming_elicitation,
    },
    Tool {
        name: "json_schema_2020_12_tool",
        description: "Tool with JSON Schema 2020-12 features ($schema, $defs, $anchor, composition, conditionals).",
        input_schema: json_schema_2020_12,
        run: echo_arguments,
    },
    Tool {
        name: "echo_header",
        description: "Echoes its value argument, which clients also send as the Mcp-Param-Value header.",
        input_schema: echo_header_schema,
        run: echo_header,
    },
];

fn missing_capability(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.sampling, capability("sampling"))?;
    Ok(text("Success: the client declared sampling."))
}

const STREAM_KEY: &str = "stream_check";

fn streaming_elicitation(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.elicitation, capability("elicitation"))?;
    let Some(answer) = reply(call.replies, STREAM_KEY) else {
        let mut requests = Map::new();
        requests.insert(
            STREAM_KEY.into(),
            questions::elicit(
                "Is this question arriving as an input-required result?",
                questions::boolean_form("ok"),
            ),
        );
        return Ok(Outcome::InputRequired(questions::input_required(
            requests, None,
        )));
    };
    let answer = read_elicited(STREAM_KEY, answer).map_err(Failure::InvalidParams)?;
    Ok(text(match answer {
        Elicited::Accepted(_) => "Answered through MRTR.",
        Elicited::Declined | Elicited::Cancelled => "Not answered, as the client chose.",
    }))
}

/// The schema the `json-schema-2020-12` scenario compares keyword by keyword.
pub fn json_schema_2020_12() -> Json {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            },
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"},
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false,
    })
}

fn echo_arguments(call: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(text(format!(
        "JSON Schema 2020-12 tool called with: {}",
        call.args
    )))
}

fn echo_header_schema() -> Json {
    object_schema(
        json!({
            "value": {
                "type": "string",
                "description": "Any text; mirrored in the Mcp-Param-Value header.",
                "x-mcp-header": "Value",
            },
        }),
        &["value"],
    )
}

fn echo_header(call: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(text(format!("Echo: {}", string_arg(call.args, "value")?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::{answered, asked, client, everything, run};

    #[test]
    fn missing_capability_names_sampling_when_the_client_lacks_it() {
        let outcome = run(
            "test_missing_capability",
            &client(true, false, true),
            None,
            None,
            "n",
        );
        assert_eq!(
            outcome.unwrap_err(),
            Failure::MissingCapability(json!({"sampling": {}}))
        );
    }

    #[test]
    fn missing_capability_succeeds_with_sampling() {
        let outcome = run("test_missing_capability", &everything(), None, None, "n");
        assert!(answered(outcome).starts_with("Success"));
    }

    #[test]
    fn streaming_elicitation_asks_through_mrtr_then_answers() {
        let body = asked(run(
            "test_streaming_elicitation",
            &everything(),
            None,
            None,
            "n",
        ));
        assert_eq!(
            body["inputRequests"][STREAM_KEY]["method"],
            "elicitation/create"
        );
        let replies = json!({STREAM_KEY: {"action": "accept", "content": {"ok": true}}});
        let outcome = run(
            "test_streaming_elicitation",
            &everything(),
            Some(replies),
            None,
            "n",
        );
        assert!(!answered(outcome).is_empty());
    }

    #[test]
    fn the_2020_12_schema_keeps_its_keywords() {
        let schema = json_schema_2020_12();
        for keyword in ["$schema", "$defs", "allOf", "if", "then", "else"] {
            assert!(schema.get(keyword).is_some(), "{keyword}");
        }
        assert_eq!(schema["$defs"]["address"]["$anchor"], "addressDef");
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn echo_header_marks_its_string_argument_for_a_header() {
        assert_eq!(
            echo_header_schema()["properties"]["value"]["x-mcp-header"],
            "Value"
        );
    }
}
