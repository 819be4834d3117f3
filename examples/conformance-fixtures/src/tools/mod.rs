//! The fixture tools, grouped by what the suite checks with them:
//!
//! - [`content`]: one content type each, and a tool error;
//! - [`notify`]: progress, log messages and list changes;
//! - [`diagnostic`]: capability gating, stream hygiene and schema fidelity;
//! - [`input`]: MRTR questions (the `test_input_required_result_*` family);
//! - [`legacy`]: the 2025-11-25 sampling and elicitation tools, asked
//!   through the same MRTR outcome the runner turns into real requests;
//! - [`tasks`]: the tasks extension's fixtures.
//!
//! A tool is a [`Tool`]: its MCP description and a function from a [`Call`]
//! to an [`Outcome`]. The order of [`TOOLS`] is the order of `tools/list`.

mod content;
mod diagnostic;
mod input;
mod legacy;
mod notify;
mod tasks;

use crate::bindings::settle::plugin::types::ClientContext;
use crate::mrtr::{Sealer, State};
use crate::task::TaskRecord;
use serde_json::{Value as Json, json};

/// A tool as `tools/list` shows it, and what runs it.
pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
    /// The `inputSchema`; a function so schemas can be written with `json!`.
    pub input_schema: fn() -> Json,
    pub run: fn(&Call<'_>) -> Result<Outcome, Failure>,
}

/// One `tools/call` as a tool sees it.
pub struct Call<'a> {
    pub name: &'a str,
    pub args: &'a Json,
    pub client: &'a ClientContext,
    /// MRTR answers (`inputResponses`), when this is a retry.
    pub replies: Option<&'a Json>,
    /// The opened `requestState`, when the client sent one. It was issued
    /// for this tool by this runner: [`call`] refuses any other.
    pub state: Option<State>,
    pub sealer: &'a Sealer,
    /// Fresh per call, for the states this call issues.
    pub nonce: &'a str,
}

impl Call<'_> {
    /// A sealed state for the questions of `round`.
    pub fn seal(&self, round: u32, data: Json) -> String {
        self.sealer.seal(&State {
            tool: self.name.to_string(),
            round,
            nonce: self.nonce.to_string(),
            data,
        })
    }

    /// The client declared the tasks extension on this request.
    pub fn tasks(&self) -> bool {
        self.client.tasks
    }
}

/// What a tool produced.
#[derive(Debug)]
pub enum Outcome {
    /// A finished `CallToolResult` (without `resultType`).
    Complete(Json),
    /// MRTR: an `InputRequiredResult` body.
    InputRequired(Json),
    /// The call became a stored task.
    Task(Box<TaskRecord>),
}

/// Why a call produced no outcome; each is a JSON-RPC error.
#[derive(Debug, PartialEq)]
pub enum Failure {
    UnknownTool(String),
    InvalidParams(String),
    /// The `ClientCapabilities` the tool needs and the request lacked.
    MissingCapability(Json),
    Internal(String),
}

/// The `ClientCapabilities` naming one capability.
pub fn capability(name: &str) -> Json {
    json!({ name: {} })
}

/// The `ClientCapabilities` naming the tasks extension.
pub fn tasks_capability() -> Json {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// Fails with -32021 unless `declared`.
pub fn require(declared: bool, needed: Json) -> Result<(), Failure> {
    if declared {
        Ok(())
    } else {
        Err(Failure::MissingCapability(needed))
    }
}

/// A `CallToolResult` with one text block.
pub fn text(text: impl Into<String>) -> Outcome {
    Outcome::Complete(json!({"content": [{"type": "text", "text": text.into()}]}))
}

/// A `CallToolResult` flagged as a tool error.
pub fn tool_error(text: impl Into<String>) -> Outcome {
    Outcome::Complete(json!({
        "content": [{"type": "text", "text": text.into()}],
        "isError": true,
    }))
}

/// An object schema of the given properties, none required, extra
/// arguments allowed (the suite sends some, such as `label`).
pub fn object_schema(properties: Json, required: &[&str]) -> Json {
    json!({"type": "object", "properties": properties, "required": required})
}

/// The schema of a tool that takes no arguments.
pub fn no_arguments() -> Json {
    json!({"type": "object", "properties": {}})
}

/// A string argument, or an invalid-params failure naming it.
pub fn string_arg<'a>(args: &'a Json, name: &str) -> Result<&'a str, Failure> {
    args.get(name)
        .and_then(Json::as_str)
        .ok_or_else(|| Failure::InvalidParams(format!("argument {name:?} must be a string")))
}

/// All tools, in `tools/list` order. `test_simple_text` comes first: some
/// checks call the first tool with no arguments and need it to succeed.
pub fn all() -> impl Iterator<Item = &'static Tool> {
    content::TOOLS
        .iter()
        .chain(notify::TOOLS)
        .chain(diagnostic::TOOLS)
        .chain(input::TOOLS)
        .chain(legacy::TOOLS)
        .chain(tasks::TOOLS)
}

/// Runs the tool `call.name`, after checking any `requestState` it carries.
pub fn call(
    name: &str,
    args: &Json,
    client: &ClientContext,
    replies: Option<&Json>,
    request_state: Option<&str>,
    sealer: &Sealer,
    nonce: &str,
) -> Result<Outcome, Failure> {
    let tool = all()
        .find(|t| t.name == name)
        .ok_or_else(|| Failure::UnknownTool(format!("Unknown tool: {name}")))?;
    let state = request_state
        .map(|s| sealer.open(name, s))
        .transpose()
        .map_err(|e| Failure::InvalidParams(e.to_string()))?;
    (tool.run)(&Call {
        name,
        args,
        client,
        replies,
        state,
        sealer,
        nonce,
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! Driving pure tools natively, round by round.

    use super::*;

    pub const KEY: &[u8] = b"test key";

    /// A 2026-07-28 client with the given capabilities.
    pub fn client(elicitation: bool, sampling: bool, roots: bool) -> ClientContext {
        ClientContext {
            protocol_version: "2026-07-28".into(),
            tasks: false,
            elicitation,
            sampling,
            roots,
            client_name: None,
            client_version: None,
        }
    }

    pub fn everything() -> ClientContext {
        client(true, true, true)
    }

    /// Calls `name` with `replies` and `state`, as round `nonce`.
    pub fn run(
        name: &str,
        client: &ClientContext,
        replies: Option<Json>,
        state: Option<&str>,
        nonce: &str,
    ) -> Result<Outcome, Failure> {
        call(
            name,
            &json!({}),
            client,
            replies.as_ref(),
            state,
            &Sealer::new(KEY),
            nonce,
        )
    }

    /// The body of an input-required outcome, or a panic.
    pub fn asked(outcome: Result<Outcome, Failure>) -> Json {
        match outcome {
            Ok(Outcome::InputRequired(body)) => body,
            other => panic!("expected questions, got {other:?}"),
        }
    }

    /// The text of a complete outcome's first block, or a panic.
    pub fn answered(outcome: Result<Outcome, Failure>) -> String {
        match outcome {
            Ok(Outcome::Complete(result)) => result["content"][0]["text"]
                .as_str()
                .expect("a text block")
                .to_string(),
            other => panic!("expected a result, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn test_simple_text_is_listed_first() {
        assert_eq!(all().next().unwrap().name, "test_simple_text");
    }

    #[test]
    fn every_tool_has_a_description_and_an_object_schema() {
        for tool in all() {
            assert!(!tool.description.is_empty(), "{}", tool.name);
            assert_eq!((tool.input_schema)()["type"], "object", "{}", tool.name);
        }
    }

    #[test]
    fn tool_names_are_unique_and_well_formed() {
        let mut seen = HashSet::new();
        for tool in all() {
            assert!(seen.insert(tool.name), "{} is listed twice", tool.name);
            assert!(
                tool.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)),
                "{}",
                tool.name
            );
        }
    }

    #[test]
    fn no_schema_but_the_2020_12_one_refuses_extra_arguments() {
        for tool in all().filter(|t| t.name != "json_schema_2020_12_tool") {
            assert!(
                (tool.input_schema)().get("additionalProperties").is_none(),
                "{}",
                tool.name
            );
        }
    }

    #[test]
    fn an_unknown_tool_is_a_protocol_error() {
        let outcome = testing::run("no_such_tool", &testing::everything(), None, None, "n");
        assert!(matches!(outcome, Err(Failure::UnknownTool(_))));
    }

    #[test]
    fn a_state_that_was_not_issued_by_this_runner_is_refused_before_the_tool_runs() {
        let outcome = testing::run(
            "test_simple_text",
            &testing::everything(),
            None,
            Some("forged"),
            "n",
        );
        assert_eq!(
            outcome.unwrap_err(),
            Failure::InvalidParams("requestState integrity check failed".into())
        );
    }
}
