//! The tasks extension's fixtures.
//!
//! A tool becomes a task only for a request that declared the extension;
//! the runner then answers with a `CreateTaskResult` and the scheduler
//! drives the job ([`crate::task`]). Without the extension a tool whose task
//! support is optional runs inline (its questions as MRTR), and one whose
//! task support is required (`failing_job`, `test_tool_with_task`) fails
//! with -32021 naming the extension. `greet` never makes a task.

use super::input::{Step, one_question};
use super::{
    Call, Failure, Outcome, Tool, capability, no_arguments, object_schema, require, string_arg,
    tasks_capability, text, tool_error,
};
use crate::questions::{self, Elicited, read_elicited, reply, string_form};
use crate::task::{Ending, Job, TaskRecord};
use crate::{host, store};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;

pub const TOOLS: &[Tool] = &[
    Tool {
        name: "greet",
        description: "Greets a name at once; never a task.",
        input_schema: greet_schema,
        run: greet,
    },
    Tool {
        name: "slow_compute",
        description: "Takes the given number of seconds; a cancellable task when the client supports tasks.",
        input_schema: slow_compute_schema,
        run: slow_compute,
    },
    Tool {
        name: "failing_job",
        description: "A task (required) that completes with a tool error after a second.",
        input_schema: no_arguments,
        run: failing_job,
    },
    Tool {
        name: "protocol_error_job",
        description: "A task that fails with a protocol error after a second.",
        input_schema: no_arguments,
        run: protocol_error_job,
    },
    Tool {
        name: "confirm_delete",
        description: "Asks to confirm before it deletes the named file (nothing is deleted).",
        input_schema: confirm_delete_schema,
        run: confirm_delete,
    },
    Tool {
        name: "multi_input",
        description: "Asks two questions at once, then reports both answers.",
        input_schema: no_arguments,
        run: multi_input,
    },
    Tool {
        name: "test_tool_with_task",
        description: "Asks the user's name first, then greets them in a task (tasks required).",
        input_schema: no_arguments,
        run: tool_with_task,
    },
];

/// The longest `slow_compute` runs inline, inside one call: the runner ends
/// a plugin call after its deadline (15 s by default).
const MAX_INLINE_SECONDS: u64 = 10;

fn greet_schema() -> Json {
    object_schema(
        json!({"name": {"type": "string", "description": "Who to greet"}}),
        &["name"],
    )
}

fn slow_compute_schema() -> Json {
    object_schema(
        json!({
            "seconds": {"type": "integer", "minimum": 0, "description": "How long to take"},
            "label": {"type": "string", "description": "A name for the computation"},
        }),
        &["seconds"],
    )
}

fn confirm_delete_schema() -> Json {
    object_schema(
        json!({"filename": {"type": "string", "description": "The file to delete"}}),
        &["filename"],
    )
}

/// Stores `job` as a new task; the runner hands it out.
fn start(job: Job) -> Result<Outcome, Failure> {
    let record = TaskRecord::new(host::random_id(), job, host::now_ms());
    store::create(&record).map_err(Failure::Internal)?;
    Ok(Outcome::Task(Box::new(record)))
}

/// Runs `job` within the call: its questions (if any) as one MRTR round,
/// then its ending.
fn run_inline(call: &Call<'_>, job: &Job) -> Result<Outcome, Failure> {
    let questions = job.questions();
    let mut answers = BTreeMap::new();
    if !questions.is_empty() {
        require(call.client.elicitation, capability("elicitation"))?;
        for key in questions.keys() {
            if let Some(answer) = reply(call.replies, key) {
                read_elicited(key, answer).map_err(Failure::InvalidParams)?;
                answers.insert(key.clone(), answer.clone());
            }
        }
        if answers.len() < questions.len() {
            let requests = questions.into_iter().collect();
            return Ok(Outcome::InputRequired(questions::input_required(
                requests, None,
            )));
        }
    }
    match job.conclude(&answers) {
        Ending::Completed(result) => Ok(Outcome::Complete(result)),
        Ending::Failed { message, .. } => Err(Failure::Internal(message)),
    }
}

fn greet(call: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(text(format!("Hello, {}!", string_arg(call.args, "name")?)))
}

fn slow_compute(call: &Call<'_>) -> Result<Outcome, Failure> {
    let seconds = call
        .args
        .get("seconds")
        .and_then(Json::as_u64)
        .ok_or_else(|| {
            Failure::InvalidParams("argument \"seconds\" must be a whole number".into())
        })?;
    let label = call
        .args
        .get("label")
        .and_then(Json::as_str)
        .unwrap_or("unlabelled")
        .to_string();
    let job = Job::SlowCompute { seconds, label };
    if call.tasks() {
        return start(job);
    }
    if seconds > MAX_INLINE_SECONDS {
        return Ok(tool_error(format!(
            "slow_compute runs at most {MAX_INLINE_SECONDS} s without the tasks extension; \
             declare io.modelcontextprotocol/tasks to run it as a task"
        )));
    }
    if seconds > 0 {
        host::sleep_ms(seconds * 1000);
    }
    run_inline(call, &job)
}

fn failing_job(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.tasks(), tasks_capability())?;
    start(Job::FailingJob)
}

fn protocol_error_job(call: &Call<'_>) -> Result<Outcome, Failure> {
    if call.tasks() {
        return start(Job::ProtocolErrorJob);
    }
    run_inline(call, &Job::ProtocolErrorJob)
}

fn confirm_delete(call: &Call<'_>) -> Result<Outcome, Failure> {
    let job = Job::ConfirmDelete {
        filename: string_arg(call.args, "filename")?.to_string(),
    };
    if call.tasks() {
        return start(job);
    }
    run_inline(call, &job)
}

fn multi_input(call: &Call<'_>) -> Result<Outcome, Failure> {
    if call.tasks() {
        return start(Job::MultiInput);
    }
    run_inline(call, &Job::MultiInput)
}

/// MRTR before the task exists: the name is asked in the call itself, and
/// only the answered call creates the task.
fn tool_with_task(call: &Call<'_>) -> Result<Outcome, Failure> {
    require(call.tasks(), tasks_capability())?;
    require(call.client.elicitation, capability("elicitation"))?;
    match one_question(call, "user_name", true, || {
        questions::elicit("What is your name?", string_form("name"))
    }) {
        Step::Ask(outcome) => Ok(outcome),
        Step::Reply(answer) => {
            match read_elicited("user_name", answer).map_err(Failure::InvalidParams)? {
                Elicited::Accepted(content) => {
                    let name = content.get("name").and_then(Json::as_str).ok_or_else(|| {
                        Failure::InvalidParams("inputResponses.user_name needs a name".into())
                    })?;
                    start(Job::Greet {
                        name: name.to_string(),
                    })
                }
                Elicited::Declined | Elicited::Cancelled => {
                    Ok(text("No name was given, so no task was started."))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::{KEY, answered, asked, everything};
    use crate::{mrtr::Sealer, tools};

    fn run(name: &str, args: Json, tasks: bool, replies: Option<Json>) -> Result<Outcome, Failure> {
        let mut client = everything();
        client.tasks = tasks;
        tools::call(
            name,
            &args,
            &client,
            replies.as_ref(),
            None,
            &Sealer::new(KEY),
            "n",
        )
    }

    #[test]
    fn greet_says_hello_by_name() {
        let outcome = run("greet", json!({"name": "sep-2243"}), true, None);
        assert_eq!(answered(outcome), "Hello, sep-2243!");
    }

    #[test]
    fn failing_job_without_the_extension_names_it_as_missing() {
        let outcome = run("failing_job", json!({}), false, None);
        assert_eq!(
            outcome.unwrap_err(),
            Failure::MissingCapability(
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
            )
        );
    }

    #[test]
    fn slow_compute_of_zero_seconds_runs_inline_without_the_extension() {
        let outcome = run(
            "slow_compute",
            json!({"seconds": 0, "label": "x"}),
            false,
            None,
        );
        assert!(!answered(outcome).is_empty());
    }

    #[test]
    fn confirm_delete_without_the_extension_asks_inline_then_deletes() {
        let args = json!({"filename": "a.txt"});
        let body = asked(run("confirm_delete", args.clone(), false, None));
        assert_eq!(body["inputRequests"].as_object().unwrap().len(), 1);
        let replies = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
        assert_eq!(
            answered(run("confirm_delete", args, false, Some(replies))),
            "Deleted a.txt"
        );
    }

    #[test]
    fn tool_with_task_asks_first_and_carries_a_state() {
        let body = asked(run("test_tool_with_task", json!({}), true, None));
        assert!(body["inputRequests"].get("user_name").is_some());
        assert!(body["requestState"].is_string());
    }

    #[test]
    fn tool_with_task_without_the_extension_names_it_as_missing() {
        let outcome = run("test_tool_with_task", json!({}), false, None);
        assert!(matches!(outcome, Err(Failure::MissingCapability(_))));
    }
}
