//! The fixture tasks: what each job does, and the task state machine.
//!
//! Pure: time comes in as a parameter and nothing here calls the runner, so
//! every transition is unit tested natively. [`crate::store`] keeps records
//! and tells the runner about changes; the runner's scheduler drives
//! [`TaskRecord::step`] through `advance`.
//!
//! ```text
//! working ──due──▶ completed | failed            (jobs that ask nothing)
//! working ──due──▶ input_required ──all answered──▶ completed
//! any non-terminal ──cancel──▶ cancelled
//! ```

use crate::questions::{self, Elicited, read_elicited};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};
use std::collections::BTreeMap;

/// Bumped when a stored record changes shape incompatibly.
pub const RECORD_FORMAT: u32 = 1;

/// How long a task is kept after it was created: long past any check.
pub const TTL_MS: u64 = 3_600_000;

/// How often clients are asked to poll.
pub const POLL_INTERVAL_MS: u64 = 250;

/// The JSON-RPC error `protocol_error_job` fails with (internal error).
pub const PROTOCOL_ERROR_CODE: i64 = -32603;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

/// What a task does.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Job {
    /// Waits `seconds`, then completes.
    SlowCompute { seconds: u64, label: String },
    /// Completes after a second with a tool error (`isError`).
    FailingJob,
    /// Fails after a second with a JSON-RPC error.
    ProtocolErrorJob,
    /// Asks to confirm, then deletes (pretends to) or keeps `filename`.
    ConfirmDelete { filename: String },
    /// Asks two questions at once.
    MultiInput,
    /// Greets a name asked for before the task was created.
    Greet { name: String },
}

/// How a job ends.
#[derive(Debug, PartialEq)]
pub enum Ending {
    /// A `CallToolResult`, `isError` included.
    Completed(Json),
    /// A JSON-RPC error.
    Failed { code: i64, message: String },
}

fn text_result(text: String, is_error: bool) -> Json {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

impl Job {
    /// How long after creation the job's first step is due.
    pub fn delay_ms(&self) -> u64 {
        match self {
            Job::SlowCompute { seconds, .. } => seconds.saturating_mul(1000),
            Job::FailingJob | Job::ProtocolErrorJob => 1000,
            Job::ConfirmDelete { .. } | Job::MultiInput => 0,
            Job::Greet { .. } => 300,
        }
    }

    /// The questions the job asks before it can end, by key.
    pub fn questions(&self) -> BTreeMap<String, Json> {
        let confirm = |message: String| {
            questions::elicit(
                &message,
                json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "Who answers"},
                        "confirm": {"type": "boolean", "description": "Go ahead?"},
                    },
                    "required": ["confirm"],
                }),
            )
        };
        match self {
            Job::ConfirmDelete { filename } => BTreeMap::from([(
                "confirm".to_string(),
                questions::elicit(
                    &format!("Delete {filename}?"),
                    questions::boolean_form("confirm"),
                ),
            )]),
            Job::MultiInput => BTreeMap::from([
                ("first".to_string(), confirm("First input, please".into())),
                ("second".to_string(), confirm("Second input, please".into())),
            ]),
            _ => BTreeMap::new(),
        }
    }

    /// The end of the job, given the replies to all its questions.
    pub fn conclude(&self, answers: &BTreeMap<String, Json>) -> Ending {
        let accepted = |key: &str| match answers.get(key).map(|a| read_elicited(key, a)) {
            Some(Ok(Elicited::Accepted(content))) => Some(content),
            _ => None,
        };
        match self {
            Job::SlowCompute { seconds, label } => Ending::Completed(text_result(
                format!("Computed {label:?} in {seconds} s"),
                false,
            )),
            Job::FailingJob => Ending::Completed(text_result(
                "failing_job failed, as it always does".into(),
                true,
            )),
            Job::ProtocolErrorJob => Ending::Failed {
                code: PROTOCOL_ERROR_CODE,
                message: "protocol_error_job failed with a protocol error, as it always does"
                    .into(),
            },
            Job::ConfirmDelete { filename } => {
                let confirmed = accepted("confirm")
                    .and_then(|c| c.get("confirm").and_then(Json::as_bool))
                    .unwrap_or(false);
                Ending::Completed(text_result(
                    if confirmed {
                        format!("Deleted {filename}")
                    } else {
                        format!("Kept {filename}: the deletion was not confirmed")
                    },
                    false,
                ))
            }
            Job::MultiInput => {
                let name = |key: &str| {
                    accepted(key)
                        .and_then(|c| c.get("name").and_then(Json::as_str).map(str::to_string))
                        .unwrap_or_else(|| "(no answer)".into())
                };
                Ending::Completed(text_result(
                    format!(
                        "Received first={}, second={}",
                        name("first"),
                        name("second")
                    ),
                    false,
                ))
            }
            Job::Greet { name } => Ending::Completed(text_result(format!("Hello, {name}!"), false)),
        }
    }
}

/// A stored task.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TaskRecord {
    pub format: u32,
    pub id: String,
    pub job: Job,
    pub status: Status,
    pub status_message: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// When a working task takes its next step.
    pub due_at_ms: u64,
    /// Outstanding questions by key, while `input_required`.
    pub questions: BTreeMap<String, Json>,
    /// Replies received so far, by key.
    pub answers: BTreeMap<String, Json>,
    /// The `CallToolResult`, once completed.
    pub result: Option<Json>,
    /// `{code, message}`, once failed.
    pub error: Option<Json>,
}

impl TaskRecord {
    pub fn new(id: String, job: Job, now_ms: u64) -> TaskRecord {
        TaskRecord {
            format: RECORD_FORMAT,
            id,
            due_at_ms: now_ms + job.delay_ms(),
            job,
            status: Status::Working,
            status_message: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            questions: BTreeMap::new(),
            answers: BTreeMap::new(),
            result: None,
            error: None,
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status,
            Status::Completed | Status::Failed | Status::Cancelled
        )
    }

    /// When the task is removed, whatever its state.
    pub fn expires_at_ms(&self) -> u64 {
        self.created_at_ms + TTL_MS
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_at_ms()
    }

    /// When the runner should next call `advance` for this task: its next
    /// step while working, its removal otherwise.
    pub fn next_wake_ms(&self) -> u64 {
        match self.status {
            Status::Working => self.due_at_ms,
            _ => self.expires_at_ms(),
        }
    }

    fn end(&mut self, now_ms: u64, ending: Ending) {
        self.questions.clear();
        self.updated_at_ms = now_ms;
        match ending {
            Ending::Completed(result) => {
                self.status = Status::Completed;
                self.status_message = None;
                self.result = Some(result);
            }
            Ending::Failed { code, message } => {
                self.status = Status::Failed;
                self.status_message = Some(message.clone());
                self.error = Some(json!({"code": code, "message": message}));
            }
        }
    }

    /// Takes the next step if it is due; returns whether anything changed.
    pub fn step(&mut self, now_ms: u64) -> bool {
        if self.status != Status::Working || now_ms < self.due_at_ms {
            return false;
        }
        let questions = self.job.questions();
        if questions.is_empty() {
            let ending = self.job.conclude(&self.answers);
            self.end(now_ms, ending);
        } else {
            self.status = Status::InputRequired;
            self.status_message = Some("Waiting for answers".into());
            self.questions = questions;
            self.updated_at_ms = now_ms;
        }
        true
    }

    /// Applies replies (`tasks/update`): a reply to an outstanding question
    /// is taken if it reads as an `ElicitResult`; anything else is ignored.
    /// The last answer ends the task. Returns whether anything changed.
    pub fn answer(&mut self, now_ms: u64, replies: &Map<String, Json>) -> bool {
        if self.status != Status::InputRequired {
            return false;
        }
        let mut changed = false;
        for (key, reply) in replies {
            if self.questions.contains_key(key) && read_elicited(key, reply).is_ok() {
                self.questions.remove(key);
                self.answers.insert(key.clone(), reply.clone());
                changed = true;
            }
        }
        if !changed {
            return false;
        }
        self.updated_at_ms = now_ms;
        if self.questions.is_empty() {
            let ending = self.job.conclude(&self.answers);
            self.end(now_ms, ending);
        }
        true
    }

    /// Cancels a task that has not ended; returns whether it changed.
    pub fn cancel(&mut self, now_ms: u64) -> bool {
        if self.is_terminal() {
            return false;
        }
        self.status = Status::Cancelled;
        self.status_message = Some("Cancelled at the client's request".into());
        self.questions.clear();
        self.updated_at_ms = now_ms;
        true
    }

    /// The extension's `Task` fields.
    fn task_fields(&self) -> Map<String, Json> {
        let mut task = Map::new();
        task.insert("taskId".into(), json!(self.id));
        task.insert("status".into(), json!(self.status.as_str()));
        if let Some(message) = &self.status_message {
            task.insert("statusMessage".into(), json!(message));
        }
        task.insert("createdAt".into(), json!(rfc3339(self.created_at_ms)));
        task.insert("lastUpdatedAt".into(), json!(rfc3339(self.updated_at_ms)));
        task.insert("ttlMs".into(), json!(TTL_MS));
        task.insert("pollIntervalMs".into(), json!(POLL_INTERVAL_MS));
        task
    }

    /// The detailed task for `tasks/get`: `inputRequests` only while
    /// `input_required`, `result` only when completed, `error` only when
    /// failed.
    pub fn to_detailed_json(&self) -> Json {
        let mut task = self.task_fields();
        match self.status {
            Status::InputRequired => {
                let requests: Map<String, Json> = self.questions.clone().into_iter().collect();
                task.insert("inputRequests".into(), Json::Object(requests));
            }
            Status::Completed => {
                task.insert("result".into(), self.result.clone().unwrap_or(Json::Null));
            }
            Status::Failed => {
                task.insert("error".into(), self.error.clone().unwrap_or(Json::Null));
            }
            Status::Working | Status::Cancelled => {}
        }
        Json::Object(task)
    }

    /// The `CallToolResult` that stands for the task to a client without
    /// the extension: the result once completed, otherwise a text saying
    /// where the task stands (an error when it failed or was cancelled).
    pub fn to_tool_result(&self) -> Json {
        if let (Status::Completed, Some(result)) = (self.status, &self.result) {
            return result.clone();
        }
        let structured = Json::Object(self.task_fields());
        let (text, is_error) = match self.status {
            Status::Failed => (
                format!(
                    "Task {} failed: {}",
                    self.id,
                    self.status_message.as_deref().unwrap_or("")
                ),
                true,
            ),
            Status::Cancelled => (format!("Task {} was cancelled", self.id), true),
            status => (format!("Task {} is {}", self.id, status.as_str()), false),
        };
        json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": structured,
            "isError": is_error,
        })
    }
}

/// Milliseconds since the epoch as an RFC 3339 UTC timestamp with
/// milliseconds, e.g. `2026-11-29T10:00:00.000Z`.
pub fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_780_000_000_000;

    fn accept(content: Json) -> Json {
        json!({"action": "accept", "content": content})
    }

    fn replies(pairs: Json) -> Map<String, Json> {
        pairs.as_object().unwrap().clone()
    }

    #[test]
    fn slow_compute_works_until_its_seconds_have_passed() {
        let job = Job::SlowCompute {
            seconds: 2,
            label: "x".into(),
        };
        let mut task = TaskRecord::new("t".into(), job, T0);
        assert!(!task.step(T0 + 1999));
        assert_eq!(task.status, Status::Working);
        assert!(task.step(T0 + 2000));
        assert_eq!(task.status, Status::Completed);
        let detailed = task.to_detailed_json();
        assert!(!detailed["result"]["content"].as_array().unwrap().is_empty());
    }

    #[test]
    fn a_new_task_shows_none_of_the_status_payloads() {
        let task = TaskRecord::new("t".into(), Job::FailingJob, T0);
        let detailed = task.to_detailed_json();
        for key in ["result", "error", "inputRequests", "requestState"] {
            assert!(detailed.get(key).is_none(), "{key}");
        }
        assert_eq!(detailed["status"], "working");
        assert_eq!(detailed["ttlMs"], TTL_MS);
    }

    #[test]
    fn timestamps_are_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339(1_795_860_000_000), "2026-11-28T10:00:00.000Z");
    }

    #[test]
    fn failing_job_completes_with_a_tool_error() {
        let mut task = TaskRecord::new("t".into(), Job::FailingJob, T0);
        task.step(T0 + 1000);
        let detailed = task.to_detailed_json();
        assert_eq!(detailed["status"], "completed");
        assert_eq!(detailed["result"]["isError"], true);
    }

    #[test]
    fn protocol_error_job_fails_with_an_error_and_no_result() {
        let mut task = TaskRecord::new("t".into(), Job::ProtocolErrorJob, T0);
        task.step(T0 + 1000);
        let detailed = task.to_detailed_json();
        assert_eq!(detailed["status"], "failed");
        assert_eq!(detailed["error"]["code"], PROTOCOL_ERROR_CODE);
        assert!(detailed["error"]["message"].is_string());
        assert!(detailed.get("result").is_none());
    }

    #[test]
    fn confirm_delete_asks_one_question_then_completes_on_the_answer() {
        let job = Job::ConfirmDelete {
            filename: "a.txt".into(),
        };
        let mut task = TaskRecord::new("t".into(), job, T0);
        assert!(task.step(T0));
        let detailed = task.to_detailed_json();
        assert_eq!(detailed["status"], "input_required");
        assert_eq!(detailed["inputRequests"].as_object().unwrap().len(), 1);
        assert!(task.answer(
            T0 + 5,
            &replies(json!({"confirm": accept(json!({"confirm": true}))}))
        ));
        assert_eq!(task.status, Status::Completed);
        assert_eq!(
            task.to_detailed_json()["result"]["content"][0]["text"],
            "Deleted a.txt"
        );
    }

    #[test]
    fn unknown_keys_in_an_update_change_nothing() {
        let job = Job::ConfirmDelete {
            filename: "a.txt".into(),
        };
        let mut task = TaskRecord::new("t".into(), job, T0);
        task.step(T0);
        let before = task.clone();
        assert!(!task.answer(T0 + 5, &replies(json!({"unknown-key": {"ignored": true}}))));
        assert_eq!(task, before);
    }

    #[test]
    fn multi_input_drops_an_answered_key_and_keeps_the_other() {
        let mut task = TaskRecord::new("t".into(), Job::MultiInput, T0);
        task.step(T0);
        assert_eq!(task.questions.len(), 2);
        let first = accept(json!({"name": "partial-1", "confirm": true}));
        task.answer(T0 + 1, &replies(json!({"first": first})));
        let detailed = task.to_detailed_json();
        assert_eq!(detailed["status"], "input_required");
        assert!(detailed["inputRequests"].get("first").is_none());
        assert!(detailed["inputRequests"].get("second").is_some());
        let second = accept(json!({"name": "partial-2", "confirm": true}));
        task.answer(T0 + 2, &replies(json!({"second": second})));
        assert_eq!(task.status, Status::Completed);
        assert_eq!(
            task.to_detailed_json()["result"]["content"][0]["text"],
            "Received first=partial-1, second=partial-2"
        );
    }

    #[test]
    fn an_answer_to_an_answered_key_is_ignored() {
        let mut task = TaskRecord::new("t".into(), Job::MultiInput, T0);
        task.step(T0);
        let first = accept(json!({"name": "partial-1"}));
        task.answer(T0 + 1, &replies(json!({"first": first.clone()})));
        assert!(!task.answer(T0 + 2, &replies(json!({"first": first}))));
    }

    #[test]
    fn cancelling_a_working_task_cancels_it_and_cancelling_again_changes_nothing() {
        let job = Job::SlowCompute {
            seconds: 60,
            label: "x".into(),
        };
        let mut task = TaskRecord::new("t".into(), job, T0);
        assert!(task.cancel(T0 + 1));
        assert_eq!(task.status, Status::Cancelled);
        assert!(!task.cancel(T0 + 2));
        assert!(!task.step(T0 + 60_000));
        assert_eq!(task.status, Status::Cancelled);
    }

    #[test]
    fn a_completed_task_cannot_be_cancelled() {
        let mut task = TaskRecord::new("t".into(), Job::FailingJob, T0);
        task.step(T0 + 1000);
        assert!(!task.cancel(T0 + 1001));
        assert_eq!(task.status, Status::Completed);
    }

    #[test]
    fn a_cancelled_input_required_task_shows_no_questions() {
        let mut task = TaskRecord::new("t".into(), Job::MultiInput, T0);
        task.step(T0);
        task.cancel(T0 + 1);
        assert!(task.to_detailed_json().get("inputRequests").is_none());
    }

    #[test]
    fn a_working_task_wakes_when_due_and_an_ended_one_when_it_expires() {
        let mut task = TaskRecord::new("t".into(), Job::FailingJob, T0);
        assert_eq!(task.next_wake_ms(), T0 + 1000);
        task.step(T0 + 1000);
        assert_eq!(task.next_wake_ms(), T0 + TTL_MS);
    }

    #[test]
    fn the_tool_result_of_a_completed_task_is_its_result() {
        let mut task = TaskRecord::new(
            "t".into(),
            Job::Greet {
                name: "Alice".into(),
            },
            T0,
        );
        task.step(T0 + 300);
        assert_eq!(task.to_tool_result()["content"][0]["text"], "Hello, Alice!");
    }

    #[test]
    fn records_survive_a_round_trip_through_json() {
        let mut task = TaskRecord::new("t".into(), Job::MultiInput, T0);
        task.step(T0);
        let back: TaskRecord =
            serde_json::from_str(&serde_json::to_string(&task).unwrap()).unwrap();
        assert_eq!(back, task);
    }
}
