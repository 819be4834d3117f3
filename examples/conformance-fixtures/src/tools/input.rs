//! MRTR (SEP-2322) fixtures: tools that ask the client questions through an
//! `InputRequiredResult` and finish when the answers come back.
//!
//! Each asks only what this request's client declared it can answer
//! (elicitation, sampling, roots). Keys the tool did not ask for are
//! ignored; a missing answer is asked again; a malformed one is an
//! invalid-params error. Tools that issue a `requestState` want it back with
//! the answers, and [`super::call`] has already refused one that was
//! tampered with.

use super::{Call, Failure, Outcome, Tool, capability, no_arguments, require, text};
use crate::questions::{
    self, Elicited, boolean_form, field, read_elicited, read_roots, read_sampled, reply,
    string_form,
};
use serde_json::{Map, Value as Json, json};

pub const TOOLS: &[Tool] = &[
    Tool {
        name: "test_input_required_result_elicitation",
        description: "Asks the user's name (key user_name) and greets them.",
        input_schema: no_arguments,
        run: elicitation,
    },
    Tool {
        name: "test_input_required_result_sampling",
        description: "Asks the client's model a question and returns its answer.",
        input_schema: no_arguments,
        run: sampling,
    },
    Tool {
        name: "test_input_required_result_list_roots",
        description: "Asks the client for its roots and lists them.",
        input_schema: no_arguments,
        run: list_roots,
    },
    Tool {
        name: "test_input_required_result_request_state",
        description: "Asks for a confirmation with a sealed requestState and checks it on the retry.",
        input_schema: no_arguments,
        run: request_state,
    },
    Tool {
        name: "test_input_required_result_multiple_inputs",
        description: "Asks an elicitation, a sampling and a roots question at once.",
        input_schema: no_arguments,
        run: multiple_inputs,
    },
    Tool {
        name: "test_input_required_result_multi_round",
        description: "Asks a name, then a colour, in two rounds with a new requestState each.",
        input_schema: no_arguments,
        run: multi_round,
    },
    Tool {
        name: "test_input_required_result_tampered_state",
        description: "Asks for a confirmation with a sealed requestState; an altered state is an error.",
        input_schema: no_arguments,
        run: tampered_state,
    },
    Tool {
        name: "test_input_required_result_capabilities",
        description: "Asks one question of a kind the client declared it can answer.",
        input_schema: no_arguments,
        run: capabilities,
    },
];

/// Where a single-question tool stands.
pub(super) enum Step<'a> {
    /// Ask (again): the outcome to return.
    Ask(Outcome),
    /// The client's reply to the question.
    Reply(&'a Json),
}

/// One question under `key`. With `sealed`, the question carries a state
/// and a reply counts only when that state of round 1 came back with it.
pub(super) fn one_question<'a>(
    call: &'a Call<'_>,
    key: &str,
    sealed: bool,
    question: impl FnOnce() -> Json,
) -> Step<'a> {
    let state_ok = !sealed || call.state.as_ref().is_some_and(|s| s.round == 1);
    match reply(call.replies, key) {
        Some(answer) if state_ok => Step::Reply(answer),
        _ => {
            let mut requests = Map::new();
            requests.insert(key.to_string(), question());
            let state = sealed.then(|| call.seal(1, json!({})));
            Step::Ask(Outcome::InputRequired(questions::input_required(
                requests, state,
            )))
        }
    }
}

fn name_question() -> Json {
    questions::elicit("What is your name?", string_form("name"))
}

/// The name in an elicitation reply, or what to say instead.
fn read_name(key: &str, answer: &Json) -> Result<Result<String, &'static str>, Failure> {
    Ok(
        match read_elicited(key, answer).map_err(Failure::InvalidParams)? {
            Elicited::Accepted(content) => field(&content, "name")
                .map(str::to_string)
                .ok_or("The form came back without a name."),
            Elicited::Declined => Err("The user declined to give a name."),
            Elicited::Cancelled => Err("The user cancelled."),
        },
    )
}

fn elicitation(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.elicitation, capability("elicitation"))?;
    match one_question(call, "user_name", false, name_question) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => Ok(match read_name("user_name", answer)? {
            Ok(name) => text(format!("Hello, {name}!")),
            Err(instead) => text(instead),
        }),
    }
}

fn sampling(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.sampling, capability("sampling"))?;
    let key = "capital_question";
    match one_question(call, key, false, || {
        questions::sample("What is the capital of France?", 100)
    }) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => Ok(text(
            read_sampled(key, answer).map_err(Failure::InvalidParams)?,
        )),
    }
}

fn list_roots(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.roots, capability("roots"))?;
    let key = "client_roots";
    match one_question(call, key, false, questions::list_roots) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => {
            let roots = read_roots(key, answer).map_err(Failure::InvalidParams)?;
            Ok(text(format!(
                "Found {} root(s): {}",
                roots.len(),
                roots.join(", ")
            )))
        }
    }
}

fn confirm_question() -> Json {
    questions::elicit("Please confirm", boolean_form("ok"))
}

fn request_state(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.elicitation, capability("elicitation"))?;
    match one_question(call, "confirm", true, confirm_question) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => {
            read_elicited("confirm", answer).map_err(Failure::InvalidParams)?;
            Ok(text("state-ok: requestState validated"))
        }
    }
}

fn tampered_state(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.elicitation, capability("elicitation"))?;
    match one_question(call, "confirm", true, confirm_question) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => {
            read_elicited("confirm", answer).map_err(Failure::InvalidParams)?;
            Ok(text("state-ok: the requestState came back unaltered"))
        }
    }
}

/// The three questions of `multiple_inputs`, one of each kind.
const MULTIPLE: [&str; 3] = ["user_name", "greeting", "client_roots"];

/// Whether the client can answer the `multiple_inputs` question `key`.
fn can_answer(call: &Call<'_>, key: &str) -> bool {
    match key {
        "user_name" => call.client.elicitation,
        "greeting" => call.client.sampling,
        _ => call.client.roots,
    }
}

fn multiple_question(key: &str) -> Json {
    match key {
        "user_name" => name_question(),
        "greeting" => questions::sample("Generate a greeting", 50),
        _ => questions::list_roots(),
    }
}

/// An answer as `multiple_inputs` remembers it between rounds.
fn read_multiple(key: &str, answer: &Json) -> Result<String, Failure> {
    match key {
        "user_name" => Ok(read_name(key, answer)?.unwrap_or_else(|e| e.to_string())),
        "greeting" => read_sampled(key, answer).map_err(Failure::InvalidParams),
        _ => read_roots(key, answer)
            .map(|r| r.join(", "))
            .map_err(Failure::InvalidParams),
    }
}

fn multiple_inputs(call: &Call<'_>) -> Result<Outcome, Failure> {
    let wanted: Vec<&str> = MULTIPLE
        .into_iter()
        .filter(|key| can_answer(call, key))
        .collect();
    if wanted.is_empty() {
        return Err(Failure::MissingCapability(capability("elicitation")));
    }
    // Answers of earlier rounds travel in the state; new ones count only
    // with a state, which is what ties them to the questions asked.
    let mut collected = Map::new();
    if let Some(state) = &call.state {
        if let Some(earlier) = state.data.as_object() {
            collected.extend(earlier.clone());
        }
        for key in &wanted {
            if let Some(answer) = reply(call.replies, key) {
                collected.insert(key.to_string(), json!(read_multiple(key, answer)?));
            }
        }
    }
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|k| !collected.contains_key(*k))
        .collect();
    if missing.is_empty() {
        let parts: Vec<String> = wanted
            .iter()
            .map(|k| format!("{k}={}", collected[*k].as_str().unwrap_or_default()))
            .collect();
        return Ok(text(format!("Received all inputs: {}", parts.join("; "))));
    }
    let round = call.state.as_ref().map_or(1, |s| s.round + 1);
    let requests = missing
        .iter()
        .map(|k| (k.to_string(), multiple_question(k)))
        .collect();
    Ok(Outcome::InputRequired(questions::input_required(
        requests,
        Some(call.seal(round, Json::Object(collected))),
    )))
}

fn multi_round(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.client.elicitation, capability("elicitation"))?;
    let step1 = || questions::elicit("Step 1: What is your name?", string_form("name"));
    let step2 = || questions::elicit("Step 2: What is your favorite color?", string_form("color"));
    let ask = |key: &str, question: Json, round: u32, data: Json| {
        let mut requests = Map::new();
        requests.insert(key.to_string(), question);
        Outcome::InputRequired(questions::input_required(
            requests,
            Some(call.seal(round, data)),
        ))
    };
    let Some(state) = &call.state else {
        return Ok(ask("step1", step1(), 1, json!({})));
    };
    match state.round {
        1 => match reply(call.replies, "step1") {
            None => Ok(ask("step1", step1(), 1, json!({}))),
            Some(answer) => match read_name("step1", answer)? {
                Ok(name) => Ok(ask("step2", step2(), 2, json!({"name": name}))),
                Err(instead) => Ok(text(instead)),
            },
        },
        _ => {
            let name = state.data["name"].as_str().unwrap_or("someone");
            match reply(call.replies, "step2") {
                None => Ok(ask("step2", step2(), 2, state.data.clone())),
                Some(answer) => {
                    match read_elicited("step2", answer).map_err(Failure::InvalidParams)? {
                        Elicited::Accepted(content) => {
                            let color = field(&content, "color").unwrap_or("no colour");
                            Ok(text(format!(
                                "Multi-round complete for {name} who likes {color}"
                            )))
                        }
                        Elicited::Declined | Elicited::Cancelled => Ok(text(format!(
                            "Multi-round ended: {name} kept their colour to themselves"
                        ))),
                    }
                }
            }
        }
    }
}

fn capabilities(call: &Call<'_>) -> Result<Outcome, Failure> {
    let (key, question): (&str, fn() -> Json) = if call.client.elicitation {
        ("user_input", || {
            questions::elicit("Anything to add?", string_form("note"))
        })
    } else if call.client.sampling {
        ("sample_input", || questions::sample("Sample request", 50))
    } else if call.client.roots {
        ("root_input", questions::list_roots)
    } else {
        return Err(Failure::MissingCapability(capability("elicitation")));
    };
    match one_question(call, key, false, question) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(_) => Ok(text(format!("Received {key}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::{answered, asked, client, everything, run};

    fn accept(content: Json) -> Json {
        json!({"action": "accept", "content": content})
    }

    #[test]
    fn elicitation_asks_user_name_without_a_state() {
        let body = asked(run(
            "test_input_required_result_elicitation",
            &everything(),
            None,
            None,
            "n",
        ));
        assert_eq!(
            body["inputRequests"]["user_name"]["method"],
            "elicitation/create"
        );
        assert!(body.get("requestState").is_none());
    }

    #[test]
    fn elicitation_greets_the_name_and_ignores_extra_keys() {
        let replies = json!({
            "user_name": accept(json!({"name": "Alice"})),
            "unknown_extra_key": accept(json!({"foo": "bar"})),
        });
        let outcome = run(
            "test_input_required_result_elicitation",
            &everything(),
            Some(replies),
            None,
            "n",
        );
        assert_eq!(answered(outcome), "Hello, Alice!");
    }

    #[test]
    fn elicitation_asks_again_when_only_a_wrong_key_came_back() {
        let replies = json!({"wrong_key": accept(json!({"data": "wrong"}))});
        let body = asked(run(
            "test_input_required_result_elicitation",
            &everything(),
            Some(replies),
            None,
            "n",
        ));
        assert!(body["inputRequests"].get("user_name").is_some());
    }

    #[test]
    fn elicitation_refuses_a_number_as_the_answer() {
        let outcome = run(
            "test_input_required_result_elicitation",
            &everything(),
            Some(json!({"user_name": 12345})),
            None,
            "n",
        );
        assert!(matches!(outcome, Err(Failure::InvalidParams(_))));
    }

    #[test]
    fn sampling_returns_the_models_answer() {
        let name = "test_input_required_result_sampling";
        let body = asked(run(name, &everything(), None, None, "n"));
        let key = body["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap()
            .clone();
        let replies = json!({key: {
            "role": "assistant",
            "content": {"type": "text", "text": "The capital of France is Paris."},
            "model": "test-model",
        }});
        let outcome = run(name, &everything(), Some(replies), None, "n");
        assert_eq!(answered(outcome), "The capital of France is Paris.");
    }

    #[test]
    fn request_state_completes_only_with_its_state() {
        let name = "test_input_required_result_request_state";
        let body = asked(run(name, &everything(), None, None, "n1"));
        let state = body["requestState"].as_str().unwrap();
        let replies = json!({"confirm": accept(json!({"ok": true}))});
        let again = asked(run(name, &everything(), Some(replies.clone()), None, "n2"));
        assert!(again["inputRequests"].get("confirm").is_some());
        let done = run(name, &everything(), Some(replies), Some(state), "n2");
        assert!(answered(done).starts_with("state-ok"));
    }

    #[test]
    fn tampered_state_is_an_error() {
        let name = "test_input_required_result_tampered_state";
        let body = asked(run(name, &everything(), None, None, "n1"));
        let state = format!("{}-TAMPERED", body["requestState"].as_str().unwrap());
        let replies = json!({"confirm": accept(json!({"ok": true}))});
        let outcome = run(name, &everything(), Some(replies), Some(&state), "n2");
        assert_eq!(
            outcome.unwrap_err(),
            Failure::InvalidParams("requestState integrity check failed".into())
        );
    }

    #[test]
    fn multiple_inputs_asks_all_three_kinds_then_completes() {
        let name = "test_input_required_result_multiple_inputs";
        let body = asked(run(name, &everything(), None, None, "n1"));
        let mut methods: Vec<&str> = body["inputRequests"]
            .as_object()
            .unwrap()
            .values()
            .map(|r| r["method"].as_str().unwrap())
            .collect();
        methods.sort();
        assert_eq!(
            methods,
            ["elicitation/create", "roots/list", "sampling/createMessage"]
        );
        let replies = json!({
            "user_name": accept(json!({"name": "Alice"})),
            "greeting": {"role": "assistant", "content": {"type": "text", "text": "Hello there!"}, "model": "m"},
            "client_roots": {"roots": [{"uri": "file:///test/root"}]},
        });
        let state = body["requestState"].as_str().unwrap();
        let done = answered(run(name, &everything(), Some(replies), Some(state), "n2"));
        assert!(done.contains("Alice") && done.contains("Hello there!"));
    }

    #[test]
    fn multiple_inputs_asks_only_for_what_is_still_missing() {
        let name = "test_input_required_result_multiple_inputs";
        let body = asked(run(name, &everything(), None, None, "n1"));
        let state = body["requestState"].as_str().unwrap();
        let replies = json!({"user_name": accept(json!({"name": "Alice"}))});
        let body = asked(run(name, &everything(), Some(replies), Some(state), "n2"));
        let mut keys: Vec<&String> = body["inputRequests"].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["client_roots", "greeting"]);
    }

    #[test]
    fn multi_round_takes_two_rounds_with_different_states() {
        let name = "test_input_required_result_multi_round";
        let r1 = asked(run(name, &everything(), None, None, "n1"));
        let s1 = r1["requestState"].as_str().unwrap();
        let r2 = asked(run(
            name,
            &everything(),
            Some(json!({"step1": accept(json!({"name": "Alice"}))})),
            Some(s1),
            "n2",
        ));
        let s2 = r2["requestState"].as_str().unwrap();
        assert_ne!(s1, s2);
        assert!(r2["inputRequests"].get("step2").is_some());
        let done = run(
            name,
            &everything(),
            Some(json!({"step2": accept(json!({"color": "blue"}))})),
            Some(s2),
            "n3",
        );
        assert_eq!(
            answered(done),
            "Multi-round complete for Alice who likes blue"
        );
    }

    #[test]
    fn capabilities_never_elicits_from_a_sampling_only_client() {
        let body = asked(run(
            "test_input_required_result_capabilities",
            &client(false, true, false),
            None,
            None,
            "n",
        ));
        let requests = body["inputRequests"].as_object().unwrap();
        assert!(!requests.is_empty());
        assert!(
            requests
                .values()
                .all(|r| r["method"] != "elicitation/create")
        );
    }

    #[test]
    fn a_state_from_another_tool_is_refused() {
        let body = asked(run(
            "test_input_required_result_request_state",
            &everything(),
            None,
            None,
            "n1",
        ));
        let outcome = run(
            "test_input_required_result_tampered_state",
            &everything(),
            Some(json!({"confirm": accept(json!({"ok": true}))})),
            body["requestState"].as_str(),
            "n2",
        );
        assert!(matches!(outcome, Err(Failure::InvalidParams(_))));
    }
}
