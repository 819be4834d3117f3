//! The task state machine of a verified command.
//!
//! Pure code: time and sensor readings come in as arguments, so every
//! transition is unit tested natively. A task starts `working`, and ends in
//! exactly one of `completed`, `failed` or `cancelled`; once it has ended,
//! every transition function refuses to change it.
//!
//! The verdict comes only from what the sensor endpoint reports, never from
//! the API's answer to the command:
//!
//! | what the sensors show                        | verdict                       |
//! | -------------------------------------------- | ----------------------------- |
//! | every readable field equals what was sent    | `completed`                   |
//! | `online: false`                              | `failed`, not applied (early) |
//! | unchanged until the settle window closes     | `failed`, not applied         |
//! | another value, held for `stable_reads` reads | `failed`, both values given   |
//! | a field that cannot be read back             | `failed`, sent but unverifiable |
//! | anything else                                | still `working`               |
//!
//! A task whose creator can answer questions (it declared both the tasks
//! extension and elicitation) asks instead of failing when the device
//! settles on another value, and a gated command waits in `input_required`
//! for its confirmation before anything is sent.

use crate::driver::Reading;
use crate::model::{Comparison, Field, Value};
use crate::question::{Question, QuestionKind, Reply};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};

/// The version of the stored record layout. A plugin reading a record of a
/// newer format refuses it instead of misreading it (hot swap may run two
/// versions side by side for a moment).
pub const RECORD_FORMAT: u32 = 1;

/// How long an ended task stays readable at least, so a client polling at
/// `pollIntervalMs` still sees how it ended even when it ended near its TTL.
pub const KEEP_AFTER_END_MS: u64 = 60_000;

/// The JSON-RPC error code settle uses, in the extension's `error`, for a
/// command the device did not carry out as sent. It sits in the
/// implementation-defined server range; `error.data.reason` says which way.
pub const DEVICE_OUTCOME_ERROR: i64 = -32001;

/// The tasks extension's statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// Why a task failed; `error.data.reason` on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// The API took the command but the device never showed it.
    NotApplied,
    /// The device settled on a value other than the one sent.
    DifferentValue,
    /// Sent, but some field cannot be read back, so it cannot be verified.
    Unverifiable,
    /// The task did not finish within its TTL.
    Expired,
    /// A newer command to the same field of the same device replaced it.
    Superseded,
    /// The command never reached the API.
    NotSent,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::NotApplied => "not_applied",
            FailureReason::DifferentValue => "different_value",
            FailureReason::Unverifiable => "unverifiable",
            FailureReason::Expired => "expired",
            FailureReason::Superseded => "superseded",
            FailureReason::NotSent => "not_sent",
        }
    }
}

/// Where the command itself is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum Stage {
    /// Stopped by the safety gate, waiting for a person; nothing sent.
    AwaitingConfirmation,
    /// Stored, not yet accepted by the API.
    Sending,
    /// The API accepted it at `at_ms`.
    Sent {
        at_ms: u64,
        request_id: Option<String>,
    },
}

/// One field of a command and what the device showed for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FieldState {
    pub field: Field,
    pub sent: Value,
    /// What the device reported just before the command, when known: it tells
    /// "never moved" apart from "moved somewhere else".
    pub baseline: Option<Value>,
    /// The latest value read back.
    pub observed: Option<Value>,
    /// Whether the sensor endpoint reports this field at all.
    pub readable: bool,
    pub comparison: Comparison,
}

/// A field's standing after a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Reads back as sent.
    Matched,
    /// Not there yet: unchanged, or not reported in this reading.
    Waiting,
    /// Moved to a value that is neither the old one nor the one sent.
    Diverged,
    /// The sensor endpoint cannot report it.
    Unverifiable,
}

impl FieldState {
    pub fn verdict(&self) -> Verdict {
        if !self.readable {
            return Verdict::Unverifiable;
        }
        let Some(observed) = &self.observed else {
            return Verdict::Waiting;
        };
        if self.comparison.matches(&self.sent, observed) {
            Verdict::Matched
        } else if self
            .baseline
            .as_ref()
            .is_some_and(|b| !self.comparison.matches(b, observed))
        {
            Verdict::Diverged
        } else {
            Verdict::Waiting
        }
    }

    fn verdict_name(&self) -> &'static str {
        match self.verdict() {
            Verdict::Matched => "matched",
            Verdict::Waiting => "waiting",
            Verdict::Diverged => "different",
            Verdict::Unverifiable => "unverifiable",
        }
    }

    /// `target_temperature 26 (sent 24)`, or `… not reported` before a read.
    fn describe(&self) -> String {
        match &self.observed {
            Some(o) if self.verdict() == Verdict::Matched => format!("{} {o}", self.field),
            Some(o) => format!("{} {o} (sent {})", self.field, self.sent),
            None => format!("{} not reported (sent {})", self.field, self.sent),
        }
    }
}

/// Why a task failed, in words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub reason: FailureReason,
    pub message: String,
}

/// Timing policy, fixed into each task when it is created so that a restart
/// or a new plugin version carries on with the rules the task started under.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// After this, an unfinished task fails (counted from creation).
    pub ttl_ms: u64,
    /// How often the sensor endpoint is read while the task waits.
    pub poll_interval_ms: u64,
    /// How long after sending an unchanged device still counts as "on its
    /// way"; after it, "not applied".
    pub settle_window_ms: u64,
    /// How many reads in a row a different value must hold before it is the
    /// device's answer rather than a value in passing.
    pub stable_reads: u32,
}

/// One stored task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub format: u32,
    pub id: String,
    pub tool: String,
    pub device_id: String,
    pub status: Status,
    pub status_message: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub timing: Timing,
    #[serde(flatten)]
    pub stage: Stage,
    pub fields: Vec<FieldState>,
    /// Sensor reads that answered.
    pub reads: u32,
    /// Sensor reads that did not answer; they are not verdicts.
    pub failed_reads: u32,
    /// Failed reads in a row: the next read backs off accordingly.
    #[serde(default)]
    pub failed_streak: u32,
    /// Attempts to hand the command to the API that got no answer.
    #[serde(default)]
    pub send_attempts: u32,
    /// When the next attempt to send is due, after one got no answer.
    #[serde(default)]
    pub retry_at_ms: Option<u64>,
    /// Reads in a row in which some field showed a different value.
    pub diverged_streak: u32,
    pub failure: Option<Failure>,
    pub ended_at_ms: Option<u64>,
    /// Questions waiting for an answer.
    #[serde(default)]
    pub questions: Vec<Question>,
    /// Questions asked so far; numbers keys so none is ever reused.
    #[serde(default)]
    pub asked: u32,
    /// Whoever created the task can answer questions on it.
    #[serde(default)]
    pub can_ask: bool,
    /// A person accepted the value the device settled on.
    #[serde(default)]
    pub accepted_as_is: bool,
}

/// What a caller must do after an answer was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterAnswer {
    /// Nothing more (the task ended, or waits on).
    Nothing,
    /// Send the command now.
    Send,
}

impl TaskRecord {
    /// A task for a command that is about to be sent.
    pub fn new(
        id: String,
        tool: &str,
        device_id: &str,
        fields: Vec<FieldState>,
        timing: Timing,
        now_ms: u64,
    ) -> TaskRecord {
        TaskRecord {
            format: RECORD_FORMAT,
            id,
            tool: tool.to_string(),
            device_id: device_id.to_string(),
            status: Status::Working,
            status_message: "sending the command to the device API".to_string(),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            timing,
            stage: Stage::Sending,
            fields,
            reads: 0,
            failed_reads: 0,
            failed_streak: 0,
            send_attempts: 0,
            retry_at_ms: None,
            diverged_streak: 0,
            failure: None,
            ended_at_ms: None,
            questions: Vec::new(),
            asked: 0,
            can_ask: false,
            accepted_as_is: false,
        }
    }

    /// Holds a new task at the safety gate until a person confirms it.
    pub fn await_confirmation(&mut self, now_ms: u64, message: String) {
        self.stage = Stage::AwaitingConfirmation;
        self.ask(now_ms, QuestionKind::Confirm, message);
    }

    /// Asks a question: the task waits in `input_required`.
    fn ask(&mut self, now_ms: u64, kind: QuestionKind, message: String) {
        self.asked += 1;
        self.questions
            .push(Question::new(kind, self.asked, message.clone()));
        self.status = Status::InputRequired;
        self.status_message = message;
        self.updated_at_ms = now_ms;
    }

    /// Records an answer to the outstanding question `key`. Returns `None`
    /// when no such question is outstanding (never asked, already answered,
    /// or the task ended): the answer is ignored.
    pub fn answer(&mut self, now_ms: u64, key: &str, reply: Reply) -> Option<AfterAnswer> {
        if self.is_terminal() {
            return None;
        }
        let at = self.questions.iter().position(|q| q.key == key)?;
        let question = self.questions.remove(at);
        let after = match (question.kind, reply) {
            (QuestionKind::Confirm, Reply::Yes) => {
                self.stage = Stage::Sending;
                self.resume(now_ms, "confirmed; sending the command to the device API");
                AfterAnswer::Send
            }
            (QuestionKind::Confirm, _) => {
                self.finish(
                    now_ms,
                    Status::Cancelled,
                    None,
                    "not sent: the confirmation was declined".to_string(),
                );
                AfterAnswer::Nothing
            }
            (QuestionKind::AcceptDifferent, Reply::Yes) => {
                self.accepted_as_is = true;
                let message = format!(
                    "the device settled on a different value, accepted as is: {}",
                    self.describe_fields()
                );
                self.finish(now_ms, Status::Completed, None, message);
                AfterAnswer::Nothing
            }
            (QuestionKind::AcceptDifferent, Reply::Retry) => {
                // What the device shows now is the new baseline.
                for field in &mut self.fields {
                    if field.observed.is_some() {
                        field.baseline = field.observed.clone();
                    }
                }
                self.diverged_streak = 0;
                self.stage = Stage::Sending;
                self.resume(now_ms, "sending the command again");
                AfterAnswer::Send
            }
            (QuestionKind::AcceptDifferent, Reply::No) => {
                let message = format!(
                    "accepted by the API, but the device settled on a different value: {}",
                    self.describe_fields()
                );
                self.fail(now_ms, FailureReason::DifferentValue, message);
                AfterAnswer::Nothing
            }
        };
        Some(after)
    }

    /// Back to `working` once no question is outstanding.
    fn resume(&mut self, now_ms: u64, message: &str) {
        if self.questions.is_empty() {
            self.status = Status::Working;
        }
        self.set_message(now_ms, message.to_string());
    }

    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// The command's fields.
    pub fn touches(&self, field: Field) -> bool {
        self.fields.iter().any(|f| f.field == field)
    }

    /// The API accepted the command.
    pub fn mark_sent(&mut self, now_ms: u64, request_id: Option<String>) -> bool {
        if self.is_terminal() || self.stage != Stage::Sending || !self.questions.is_empty() {
            return false;
        }
        self.stage = Stage::Sent {
            at_ms: now_ms,
            request_id,
        };
        self.set_message(
            now_ms,
            "sent; waiting for the device to report the new state".into(),
        );
        true
    }

    /// The API did not answer the command (a timeout, a 5xx): it may or may
    /// not have taken it. The command is sent again after a back-off, which
    /// is safe because commands are absolute; until the API takes it the
    /// task does not read the sensors, and past the TTL it fails as not sent.
    pub fn retry_send_later(&mut self, now_ms: u64, why: &str) -> bool {
        if self.is_terminal() || self.stage != Stage::Sending {
            return false;
        }
        self.send_attempts += 1;
        let wait = backoff(self.timing.poll_interval_ms, self.send_attempts);
        self.retry_at_ms = Some(now_ms.saturating_add(wait));
        self.set_message(
            now_ms,
            format!(
                "the device API did not take the command ({why}); sending again in {:.1} s (attempt {})",
                wait as f64 / 1000.0,
                self.send_attempts + 1
            ),
        );
        true
    }

    /// The command could not be handed to the API.
    pub fn mark_not_sent(&mut self, now_ms: u64, why: &str) -> bool {
        self.fail(now_ms, FailureReason::NotSent, format!("not sent: {why}"))
    }

    /// A cancel: the task ends at once. The device is not told anything.
    pub fn cancel(&mut self, now_ms: u64) -> bool {
        self.finish(
            now_ms,
            Status::Cancelled,
            None,
            "cancelled; tracking stopped. A command already sent to the device is not recalled"
                .to_string(),
        )
    }

    /// A newer command took over one of this task's fields.
    pub fn supersede(&mut self, now_ms: u64, by_task_id: &str) -> bool {
        self.fail(
            now_ms,
            FailureReason::Superseded,
            format!("superseded by {by_task_id}"),
        )
    }

    /// Past its TTL an unfinished task fails.
    pub fn expire_if_due(&mut self, now_ms: u64) -> bool {
        if self.is_terminal() || now_ms < self.deadline_ms() {
            return false;
        }
        let ttl_s = self.timing.ttl_ms / 1000;
        let message = if self.stage == Stage::AwaitingConfirmation {
            format!("not sent: no answer to the confirmation within the TTL of {ttl_s} s")
        } else if self.stage == Stage::Sending {
            format!(
                "not sent: the device API did not take the command within the TTL of {ttl_s} s ({} attempts)",
                self.send_attempts.max(1)
            )
        } else {
            format!(
                "not finished within its TTL of {ttl_s} s; last seen: {}",
                self.describe_fields()
            )
        };
        self.fail(now_ms, FailureReason::Expired, message)
    }

    /// Takes one sensor reading (or the reason there was none) into account;
    /// `reads` is how many the device answered since this command was sent,
    /// this one included. Returns whether anything a client could see (or a
    /// later verdict depends on) changed, so an unchanged device costs no
    /// write.
    pub fn observe(&mut self, now_ms: u64, reading: Result<&Reading, &str>, reads: u32) -> bool {
        if self.is_terminal() {
            return false;
        }
        let mut before = self.clone();
        before.reads = reads;
        self.reads = reads;
        self.take_reading(now_ms, reading);
        *self != before
    }

    fn take_reading(&mut self, now_ms: u64, reading: Result<&Reading, &str>) -> bool {
        if self.is_terminal() {
            return false;
        }
        if self.expire_if_due(now_ms) {
            return true;
        }
        if self.status == Status::InputRequired {
            // Waiting for a person; reads would not change anything.
            return false;
        }
        let Stage::Sent { at_ms: sent_at, .. } = self.stage else {
            return false;
        };
        let reading = match reading {
            Ok(reading) => reading,
            Err(why) => {
                // Not a verdict: the device may well be fine.
                self.failed_reads += 1;
                self.failed_streak += 1;
                self.set_message(
                    now_ms,
                    format!("sensor endpoint did not answer ({why}); reading again"),
                );
                return true;
            }
        };
        self.failed_streak = 0;
        for field in &mut self.fields {
            if field.readable {
                field.observed = reading.values.get(&field.field).cloned();
            }
        }
        if !reading.online {
            let message = format!(
                "accepted by the API, not applied: the device reports online: false after {}",
                self.reads_text()
            );
            return self.fail(now_ms, FailureReason::NotApplied, message);
        }

        let verdicts: Vec<Verdict> = self.fields.iter().map(FieldState::verdict).collect();
        let all_read_back = verdicts
            .iter()
            .all(|v| matches!(v, Verdict::Matched | Verdict::Unverifiable));
        if all_read_back {
            return self.conclude_read_back(now_ms);
        }

        if verdicts.contains(&Verdict::Diverged) {
            self.diverged_streak += 1;
        } else {
            self.diverged_streak = 0;
        }
        if self.diverged_streak >= self.timing.stable_reads.max(1) {
            if self.can_ask {
                let message = format!(
                    "{} settled on a different value: {}. Accept it, or send the command again?",
                    self.device_id,
                    self.describe_fields()
                );
                self.ask(now_ms, QuestionKind::AcceptDifferent, message);
                return true;
            }
            let message = format!(
                "accepted by the API, but the device settled on a different value: {}",
                self.describe_fields()
            );
            return self.fail(now_ms, FailureReason::DifferentValue, message);
        }
        if now_ms >= sent_at.saturating_add(self.timing.settle_window_ms) {
            return self.conclude_not_applied(now_ms);
        }
        self.set_message(
            now_ms,
            format!("waiting for the device: {}", self.describe_fields()),
        );
        true
    }

    /// Every readable field reads back as sent.
    fn conclude_read_back(&mut self, now_ms: u64) -> bool {
        let unverifiable: Vec<&str> = self
            .fields
            .iter()
            .filter(|f| !f.readable)
            .map(|f| f.field.name())
            .collect();
        if unverifiable.is_empty() {
            let message = format!(
                "the device reports the requested state after {}: {}",
                self.reads_text(),
                self.describe_fields()
            );
            return self.finish(now_ms, Status::Completed, None, message);
        }
        let verified: Vec<String> = self
            .fields
            .iter()
            .filter(|f| f.readable)
            .map(FieldState::describe)
            .collect();
        let mut message = format!(
            "sent, unverifiable: the sensor endpoint cannot report {}",
            unverifiable.join(", ")
        );
        if !verified.is_empty() {
            message.push_str(&format!("; verified: {}", verified.join(", ")));
        }
        self.fail(now_ms, FailureReason::Unverifiable, message)
    }

    /// The settle window closed with some field still not as sent.
    fn conclude_not_applied(&mut self, now_ms: u64) -> bool {
        let window_s = self.timing.settle_window_ms as f64 / 1000.0;
        let waiting_unchanged = self
            .fields
            .iter()
            .filter(|f| f.verdict() == Verdict::Waiting)
            .all(|f| f.baseline.is_some() && f.observed.is_some());
        let any_matched = self.fields.iter().any(|f| f.verdict() == Verdict::Matched);
        let (reason, lead) = if !waiting_unchanged {
            (
                FailureReason::DifferentValue,
                "accepted by the API, but the device does not report what was sent",
            )
        } else if any_matched {
            (
                FailureReason::NotApplied,
                "accepted by the API, only partly applied",
            )
        } else {
            (
                FailureReason::NotApplied,
                "accepted by the API, not applied",
            )
        };
        let message = format!(
            "{lead}: {} after {} over {window_s} s",
            self.describe_fields(),
            self.reads_text()
        );
        self.fail(now_ms, reason, message)
    }

    /// Whether the task waits on its device's reads: such tasks are woken
    /// by their device's tick (see `advance`), not one by one.
    pub fn waits_on_device(&self) -> bool {
        !self.is_terminal()
            && self.status == Status::Working
            && matches!(self.stage, Stage::Sent { .. })
    }

    /// When the task needs its own wake, if it does: a retry of its send,
    /// the TTL of a task waiting for a person, or the time an ended task's
    /// record may be removed. A task waiting on its device has none.
    pub fn next_wake_ms(&self, now_ms: u64) -> Option<u64> {
        if self.is_terminal() {
            return Some(self.purge_at_ms());
        }
        let next = match self.stage {
            Stage::Sending => self
                .retry_at_ms
                .unwrap_or_else(|| now_ms.saturating_add(self.timing.poll_interval_ms)),
            // Nothing happens until the answer comes; only the TTL remains.
            Stage::AwaitingConfirmation => self.deadline_ms(),
            Stage::Sent { .. } if self.status == Status::InputRequired => self.deadline_ms(),
            Stage::Sent { .. } => return None,
        };
        Some(next.min(self.deadline_ms()))
    }

    /// When a task waiting on its device must be looked at even if the
    /// device shows nothing new: at once while a different value is being
    /// confirmed or reads fail, else when its settle window closes, and at
    /// the latest at its TTL.
    pub fn next_check_ms(&self, now_ms: u64) -> u64 {
        let Stage::Sent { at_ms: sent_at, .. } = self.stage else {
            return now_ms;
        };
        if self.diverged_streak > 0 || self.failed_streak > 0 {
            return now_ms;
        }
        sent_at
            .saturating_add(self.timing.settle_window_ms)
            .min(self.deadline_ms())
    }

    /// When the device should next be read for this task: the next point
    /// of the poll grid (backed off while reads fail), so every task waiting
    /// on a device is due at the same instant and one read serves them all.
    pub fn next_read_ms(&self, now_ms: u64) -> u64 {
        next_grid_read(
            &self.device_id,
            now_ms,
            self.timing.poll_interval_ms,
            self.failed_streak,
        )
        .min(self.deadline_ms())
    }

    /// Creation plus TTL: after this an unfinished task fails.
    pub fn deadline_ms(&self) -> u64 {
        self.created_at_ms.saturating_add(self.timing.ttl_ms)
    }

    /// An ended task is kept for its TTL, and at least [`KEEP_AFTER_END_MS`]
    /// after it ended.
    pub fn purge_at_ms(&self) -> u64 {
        let ended = self.ended_at_ms.unwrap_or(self.updated_at_ms);
        self.deadline_ms()
            .max(ended.saturating_add(KEEP_AFTER_END_MS))
    }

    fn fail(&mut self, now_ms: u64, reason: FailureReason, message: String) -> bool {
        let failure = Failure {
            reason,
            message: message.clone(),
        };
        self.finish(now_ms, Status::Failed, Some(failure), message)
    }

    /// The one way into a terminal state; refuses if already there.
    fn finish(
        &mut self,
        now_ms: u64,
        status: Status,
        failure: Option<Failure>,
        message: String,
    ) -> bool {
        if self.is_terminal() {
            return false;
        }
        self.status = status;
        self.failure = failure;
        self.ended_at_ms = Some(now_ms);
        // An ended task has nothing left to ask.
        self.questions.clear();
        self.status_message = message;
        self.updated_at_ms = now_ms;
        true
    }

    fn set_message(&mut self, now_ms: u64, message: String) {
        if self.status_message != message {
            self.status_message = message;
            self.updated_at_ms = now_ms;
        }
    }

    fn reads_text(&self) -> String {
        match self.reads {
            1 => "1 read".to_string(),
            n => format!("{n} reads"),
        }
    }

    fn describe_fields(&self) -> String {
        self.fields
            .iter()
            .map(FieldState::describe)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `{sent, observed, fields, reads}`: what was asked and what was seen,
    /// field by field, so a partial application is visible.
    fn report(&self) -> Map<String, Json> {
        let sent: Map<String, Json> = self
            .fields
            .iter()
            .map(|f| (f.field.name().to_string(), json!(f.sent)))
            .collect();
        let observed: Map<String, Json> = self
            .fields
            .iter()
            .map(|f| (f.field.name().to_string(), json!(f.observed)))
            .collect();
        let fields: Vec<Json> = self
            .fields
            .iter()
            .map(|f| {
                json!({
                    "field": f.field.name(),
                    "sent": f.sent,
                    "observed": f.observed,
                    "verdict": f.verdict_name(),
                })
            })
            .collect();
        let mut report = Map::new();
        report.insert("sent".into(), Json::Object(sent));
        report.insert("observed".into(), Json::Object(observed));
        report.insert("fields".into(), Json::Array(fields));
        report.insert("reads".into(), json!(self.reads));
        report
    }

    /// The task as tools return it (`structuredContent`): the extension's
    /// `Task` fields, the device, and `result` when completed, `error` when
    /// failed, `progress` otherwise.
    pub fn to_tool_json(&self) -> Json {
        let mut task = self.task_fields();
        task.insert("deviceId".into(), json!(self.device_id));
        let mut report = self.report();
        match (&self.status, &self.failure) {
            (Status::Completed, _) => {
                if self.accepted_as_is {
                    report.insert("acceptedAsIs".into(), json!(true));
                }
                task.insert("result".into(), Json::Object(report));
            }
            (Status::Failed, Some(failure)) => {
                let mut error = Map::new();
                error.insert("reason".into(), json!(failure.reason.as_str()));
                error.insert("message".into(), json!(failure.message));
                error.extend(report);
                task.insert("error".into(), Json::Object(error));
            }
            _ => {
                if !self.questions.is_empty() {
                    let questions: Vec<&str> =
                        self.questions.iter().map(|q| q.message.as_str()).collect();
                    report.insert("questions".into(), json!(questions));
                }
                task.insert("progress".into(), Json::Object(report));
            }
        }
        Json::Object(task)
    }

    /// The task as `tasks/get` returns it (the extension's detailed task):
    /// `result` holds the `CallToolResult` a client without tasks would have
    /// received; `error` holds a JSON-RPC error whose `data` is that same
    /// tool view of the task.
    pub fn to_detailed_json(&self) -> Json {
        let mut task = self.task_fields();
        match self.status {
            Status::Completed => {
                task.insert("result".into(), tool_result(&self.to_tool_json(), false));
            }
            Status::InputRequired => {
                let requests: Map<String, Json> = self
                    .questions
                    .iter()
                    .map(|q| (q.key.clone(), q.input_request()))
                    .collect();
                task.insert("inputRequests".into(), Json::Object(requests));
            }
            Status::Failed => {
                task.insert(
                    "error".into(),
                    json!({
                        "code": DEVICE_OUTCOME_ERROR,
                        "message": self.status_message,
                        "data": self.to_tool_json(),
                    }),
                );
            }
            _ => {}
        }
        Json::Object(task)
    }

    /// The extension's `Task` object.
    pub fn task_fields(&self) -> Map<String, Json> {
        let mut task = Map::new();
        task.insert("taskId".into(), json!(self.id));
        task.insert("status".into(), json!(self.status));
        task.insert("statusMessage".into(), json!(self.status_message));
        task.insert("createdAt".into(), json!(rfc3339(self.created_at_ms)));
        task.insert("lastUpdatedAt".into(), json!(rfc3339(self.updated_at_ms)));
        task.insert("ttlMs".into(), json!(self.timing.ttl_ms));
        task.insert("pollIntervalMs".into(), json!(self.timing.poll_interval_ms));
        task
    }
}

/// The wait before attempt `n` (from 1) after failures: the poll interval,
/// doubling with each failure, at most [`MAX_BACKOFF_MS`].
pub fn backoff(poll_interval_ms: u64, n: u32) -> u64 {
    let factor = 1u64 << n.saturating_sub(1).min(10);
    poll_interval_ms
        .max(1)
        .saturating_mul(factor)
        .min(MAX_BACKOFF_MS)
}

/// When to read a device next, given that `failed_streak` reads in a row
/// failed: the first point of the device's poll grid after the back-off,
/// less one interval.
///
/// Reads land on the grid so that every task waiting on a device is due at
/// the same instant and one read serves them all. A read that ran a little
/// late (`now` just past a grid point) is followed by the very next grid
/// point, so reads stay one interval apart rather than two. Each device's
/// grid is shifted by a phase taken from its id, so that ten thousand
/// devices are not all read in the same millisecond.
pub fn next_grid_read(
    device_id: &str,
    now_ms: u64,
    poll_interval_ms: u64,
    failed_streak: u32,
) -> u64 {
    let poll = poll_interval_ms.max(1);
    let wait = backoff(poll, failed_streak + 1);
    let phase = device_phase(device_id, poll);
    let earliest = now_ms.saturating_add(wait - poll + 1);
    align_up(earliest.saturating_sub(phase), poll).saturating_add(phase)
}

/// A stable offset in `0..poll` for a device (FNV-1a of its id), the same
/// in every process and across restarts.
fn device_phase(device_id: &str, poll: u64) -> u64 {
    let hash = device_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    hash % poll.max(1)
}

/// `t` rounded up to a multiple of `step`.
pub fn align_up(t: u64, step: u64) -> u64 {
    let step = step.max(1);
    t.div_ceil(step).saturating_mul(step)
}

/// The longest wait between retries of a failing device API.
pub const MAX_BACKOFF_MS: u64 = 30_000;

/// A `CallToolResult` carrying `structured` both as structured content and,
/// for clients that only read text, as its JSON text.
pub fn tool_result(structured: &Json, is_error: bool) -> Json {
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": is_error,
    })
}

/// Milliseconds since the epoch as an RFC 3339 UTC timestamp.
pub fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const TIMING: Timing = Timing {
        ttl_ms: 300_000,
        poll_interval_ms: 1_000,
        settle_window_ms: 10_000,
        stable_reads: 2,
    };

    fn field(field: Field, sent: Value, baseline: Value) -> FieldState {
        let comparison = match sent {
            Value::Number(_) => Comparison::Tolerance(0.1),
            Value::Choice(_) => Comparison::CaseInsensitive,
        };
        FieldState {
            field,
            sent,
            baseline: Some(baseline),
            observed: None,
            readable: true,
            comparison,
        }
    }

    fn temperature_task(sent: f64, baseline: f64) -> TaskRecord {
        let mut task = TaskRecord::new(
            "t1".into(),
            "set_temperature",
            "ac-living",
            vec![field(
                Field::TargetTemperature,
                Value::Number(sent),
                Value::Number(baseline),
            )],
            TIMING,
            1_000,
        );
        assert!(task.mark_sent(1_000, Some("r1".into())));
        task
    }

    fn reading(values: &[(Field, Value)], online: bool) -> Reading {
        Reading {
            online,
            values: values.iter().cloned().collect::<BTreeMap<_, _>>(),
            ..Reading::default()
        }
    }

    /// Observes a reading the way the device tick does: one more read
    /// answered, or none when the read failed.
    fn see(task: &mut TaskRecord, now_ms: u64, reading: Result<&Reading, &str>) -> bool {
        let reads = task.reads + u32::from(reading.is_ok());
        task.observe(now_ms, reading, reads)
    }

    fn temp(n: f64) -> Reading {
        reading(&[(Field::TargetTemperature, Value::Number(n))], true)
    }

    #[test]
    fn matching_read_back_completes_with_sent_and_observed() {
        let mut task = temperature_task(24.0, 26.0);
        assert!(see(&mut task, 2_000, Ok(&temp(26.0))));
        assert_eq!(task.status, Status::Working);
        assert!(see(&mut task, 3_000, Ok(&temp(24.0))));
        assert_eq!(task.status, Status::Completed);
        let json = task.to_tool_json();
        assert_eq!(json["result"]["sent"]["target_temperature"], json!(24.0));
        assert_eq!(
            json["result"]["observed"]["target_temperature"],
            json!(24.0)
        );
        assert_eq!(json["result"]["reads"], json!(2));
        assert!(task.status_message.contains("after 2 reads"));
    }

    #[test]
    fn terminal_states_never_change() {
        let mut task = temperature_task(24.0, 26.0);
        assert!(see(&mut task, 2_000, Ok(&temp(24.0))));
        assert_eq!(task.status, Status::Completed);
        let before = task.clone();
        assert!(!task.cancel(3_000));
        assert!(!task.supersede(3_000, "t2"));
        assert!(!see(&mut task, 4_000, Ok(&temp(20.0))));
        assert!(!task.expire_if_due(10_000_000));
        assert_eq!(task, before);
    }

    #[test]
    fn offline_device_fails_at_the_first_read() {
        let mut task = temperature_task(24.0, 26.0);
        let offline = reading(&[(Field::TargetTemperature, Value::Number(26.0))], false);
        assert!(see(&mut task, 2_000, Ok(&offline)));
        assert_eq!(task.status, Status::Failed);
        assert_eq!(
            task.failure.as_ref().unwrap().reason,
            FailureReason::NotApplied
        );
        assert!(
            task.status_message.contains("online: false"),
            "{}",
            task.status_message
        );
        assert!(
            task.status_message
                .contains("accepted by the API, not applied")
        );
    }

    #[test]
    fn unchanged_device_fails_when_the_settle_window_closes() {
        let mut task = temperature_task(24.0, 26.0);
        for t in [2_000, 5_000, 10_000] {
            see(&mut task, t, Ok(&temp(26.0)));
            assert_eq!(task.status, Status::Working, "at {t}");
        }
        assert!(see(&mut task, 11_000, Ok(&temp(26.0))));
        assert_eq!(task.status, Status::Failed);
        let msg = &task.status_message;
        assert!(msg.starts_with("accepted by the API, not applied"), "{msg}");
        assert!(msg.contains("target_temperature 26 (sent 24)"), "{msg}");
        assert!(msg.contains("after 4 reads"), "{msg}");
    }

    #[test]
    fn a_different_value_must_hold_before_it_is_a_verdict() {
        let mut task = temperature_task(30.0, 26.0);
        assert!(see(&mut task, 2_000, Ok(&temp(28.0))));
        assert_eq!(task.status, Status::Working);
        assert!(see(&mut task, 3_000, Ok(&temp(28.0))));
        assert_eq!(task.status, Status::Failed);
        assert_eq!(
            task.failure.as_ref().unwrap().reason,
            FailureReason::DifferentValue
        );
        assert!(
            task.status_message
                .contains("target_temperature 28 (sent 30)")
        );
        let json = task.to_tool_json();
        assert_eq!(json["error"]["sent"]["target_temperature"], json!(30.0));
        assert_eq!(json["error"]["observed"]["target_temperature"], json!(28.0));
    }

    #[test]
    fn a_value_in_passing_does_not_fail_the_task() {
        let mut task = temperature_task(30.0, 26.0);
        assert!(see(&mut task, 2_000, Ok(&temp(28.0))));
        assert!(see(&mut task, 3_000, Ok(&temp(30.0))));
        assert_eq!(task.status, Status::Completed);
    }

    #[test]
    fn unreachable_sensors_are_not_a_verdict() {
        let mut task = temperature_task(24.0, 26.0);
        assert!(see(&mut task, 2_000, Err("503")));
        assert_eq!(task.status, Status::Working);
        assert_eq!(task.failed_reads, 1);
        assert_eq!(task.reads, 0);
        assert!(see(&mut task, 3_000, Ok(&temp(24.0))));
        assert_eq!(task.status, Status::Completed);
    }

    #[test]
    fn every_field_must_match_and_partial_application_is_visible() {
        let mut task = TaskRecord::new(
            "t1".into(),
            "set_power_mode",
            "ac-living",
            vec![
                field(Field::Power, Value::choice("on"), Value::choice("off")),
                field(Field::Mode, Value::choice("heat"), Value::choice("cool")),
            ],
            TIMING,
            0,
        );
        task.mark_sent(0, None);
        let half = reading(
            &[
                (Field::Power, Value::Choice("On".into())),
                (Field::Mode, Value::Choice("Cool".into())),
            ],
            true,
        );
        assert!(see(&mut task, 1_000, Ok(&half)));
        assert_eq!(task.status, Status::Working);
        assert!(see(&mut task, 10_000, Ok(&half)));
        assert_eq!(task.status, Status::Failed);
        assert!(
            task.status_message.contains("only partly applied"),
            "{}",
            task.status_message
        );
        let json = task.to_tool_json();
        let verdicts: Vec<&str> = json["error"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["verdict"].as_str().unwrap())
            .collect();
        assert_eq!(verdicts, ["matched", "waiting"]);
    }

    #[test]
    fn unreadable_fields_are_never_completed() {
        let mut vane = field(
            Field::VaneHorizontal,
            Value::choice("left"),
            Value::choice("center"),
        );
        vane.readable = false;
        vane.baseline = None;
        let mut task = TaskRecord::new(
            "t1".into(),
            "set_fan",
            "ac-living",
            vec![
                field(
                    Field::FanSpeed,
                    Value::choice("high"),
                    Value::choice("auto"),
                ),
                vane,
            ],
            TIMING,
            0,
        );
        task.mark_sent(0, None);
        let r = reading(&[(Field::FanSpeed, Value::choice("High"))], true);
        assert!(see(&mut task, 1_000, Ok(&r)));
        assert_eq!(task.status, Status::Failed);
        assert_eq!(
            task.failure.as_ref().unwrap().reason,
            FailureReason::Unverifiable
        );
        assert!(task.status_message.starts_with("sent, unverifiable"));
        assert!(task.status_message.contains("vane_horizontal"));
    }

    #[test]
    fn past_the_ttl_an_unfinished_task_fails() {
        let mut task = temperature_task(24.0, 26.0);
        assert!(!task.expire_if_due(300_999));
        assert_eq!(
            task.next_read_ms(300_900),
            301_000,
            "reads no later than the deadline"
        );
        assert_eq!(
            task.next_wake_ms(300_500),
            None,
            "its device's tick wakes it"
        );
        assert!(see(&mut task, 301_000, Ok(&temp(24.0))));
        assert_eq!(task.status, Status::Failed);
        assert_eq!(
            task.failure.as_ref().unwrap().reason,
            FailureReason::Expired
        );
    }

    #[test]
    fn cancel_and_supersede_end_the_task_at_once() {
        let mut task = temperature_task(24.0, 26.0);
        assert!(task.cancel(1_500));
        assert_eq!(task.status, Status::Cancelled);
        assert!(task.status_message.contains("not recalled"));

        let mut task = temperature_task(24.0, 26.0);
        assert!(task.supersede(1_500, "t2"));
        assert_eq!(task.status, Status::Failed);
        assert_eq!(task.status_message, "superseded by t2");
    }

    #[test]
    fn nothing_is_compared_before_the_command_is_sent() {
        let mut task = TaskRecord::new(
            "t1".into(),
            "set_temperature",
            "ac-living",
            vec![field(
                Field::TargetTemperature,
                Value::Number(24.0),
                Value::Number(26.0),
            )],
            TIMING,
            0,
        );
        assert!(!see(&mut task, 500, Ok(&temp(24.0))));
        assert_eq!(task.status, Status::Working);
        assert!(task.mark_not_sent(600, "connection refused"));
        assert_eq!(
            task.failure.as_ref().unwrap().reason,
            FailureReason::NotSent
        );
    }

    #[test]
    fn ended_tasks_are_kept_a_while_after_they_end() {
        let mut task = temperature_task(24.0, 26.0);
        see(&mut task, 299_000, Ok(&temp(24.0)));
        assert_eq!(task.purge_at_ms(), 299_000 + KEEP_AFTER_END_MS);
        assert_eq!(task.next_wake_ms(299_000), Some(task.purge_at_ms()));
    }

    #[test]
    fn detailed_view_follows_the_extension_shapes() {
        let mut task = temperature_task(24.0, 26.0);
        let working = task.to_detailed_json();
        assert_eq!(working["status"], "working");
        assert!(working.get("result").is_none() && working.get("error").is_none());
        assert_eq!(working["createdAt"], "1970-01-01T00:00:01.000Z");

        see(&mut task, 2_000, Ok(&temp(24.0)));
        let done = task.to_detailed_json();
        assert_eq!(done["result"]["isError"], false);
        assert_eq!(done["result"]["structuredContent"]["status"], "completed");

        let mut failed = temperature_task(24.0, 26.0);
        failed.supersede(2_000, "t9");
        let failed = failed.to_detailed_json();
        assert_eq!(failed["error"]["code"], DEVICE_OUTCOME_ERROR);
        assert_eq!(failed["error"]["data"]["error"]["reason"], "superseded");
    }

    #[test]
    fn a_gated_task_waits_for_confirmation_and_sends_only_on_yes() {
        let mut task = TaskRecord::new(
            "t1".into(),
            "set_temperature",
            "ac-living",
            vec![field(
                Field::TargetTemperature,
                Value::Number(30.0),
                Value::Number(26.0),
            )],
            TIMING,
            0,
        );
        task.await_confirmation(0, "Send 30?".into());
        assert_eq!(task.status, Status::InputRequired);
        assert!(
            !task.mark_sent(1, None),
            "nothing is sent before the answer"
        );
        let detailed = task.to_detailed_json();
        assert_eq!(
            detailed["inputRequests"]["confirm_1"]["method"],
            "elicitation/create"
        );
        assert_eq!(
            task.answer(5, "nope", Reply::Yes),
            None,
            "unknown keys are ignored"
        );
        assert_eq!(
            task.answer(5, "confirm_1", Reply::Yes),
            Some(AfterAnswer::Send)
        );
        assert_eq!(task.status, Status::Working);
        assert_eq!(
            task.answer(6, "confirm_1", Reply::Yes),
            None,
            "answered keys are ignored"
        );
        assert!(task.mark_sent(7, None));

        let mut declined = TaskRecord::new(
            "t2".into(),
            "set_temperature",
            "ac-living",
            vec![],
            TIMING,
            0,
        );
        declined.await_confirmation(0, "Send?".into());
        assert_eq!(
            declined.answer(1, "confirm_1", Reply::No),
            Some(AfterAnswer::Nothing)
        );
        assert_eq!(declined.status, Status::Cancelled);
        assert!(declined.status_message.contains("declined"));
        assert!(declined.questions.is_empty());
    }

    #[test]
    fn an_unanswered_confirmation_expires_without_sending() {
        let mut task = TaskRecord::new("t".into(), "set_fan", "ac-living", vec![], TIMING, 0);
        task.await_confirmation(0, "Send?".into());
        assert!(task.expire_if_due(TIMING.ttl_ms));
        assert_eq!(task.status, Status::Failed);
        assert!(
            task.status_message.starts_with("not sent"),
            "{}",
            task.status_message
        );
    }

    #[test]
    fn a_task_that_can_ask_asks_about_a_different_value() {
        let mut task = temperature_task(30.0, 26.0);
        task.can_ask = true;
        see(&mut task, 2_000, Ok(&temp(28.0)));
        see(&mut task, 3_000, Ok(&temp(28.0)));
        assert_eq!(task.status, Status::InputRequired);
        let key = task.questions[0].key.clone();
        assert_eq!(key, "accept_different_1");
        assert!(
            task.status_message
                .contains("Accept it, or send the command again?")
        );
        assert!(
            !see(&mut task, 4_000, Ok(&temp(28.0))),
            "reads wait for the answer"
        );

        let mut retry = task.clone();
        assert_eq!(
            retry.answer(5_000, &key, Reply::Retry),
            Some(AfterAnswer::Send)
        );
        assert_eq!(retry.stage, Stage::Sending);
        assert_eq!(retry.fields[0].baseline, Some(Value::Number(28.0)));
        retry.mark_sent(5_000, None);
        see(&mut retry, 6_000, Ok(&temp(30.0)));
        assert_eq!(retry.status, Status::Completed);

        let mut accept = task.clone();
        assert_eq!(
            accept.answer(5_000, &key, Reply::Yes),
            Some(AfterAnswer::Nothing)
        );
        assert_eq!(accept.status, Status::Completed);
        assert_eq!(accept.to_tool_json()["result"]["acceptedAsIs"], true);

        let mut refuse = task;
        refuse.answer(5_000, &key, Reply::No);
        assert_eq!(refuse.status, Status::Failed);
        assert_eq!(
            refuse.failure.unwrap().reason,
            FailureReason::DifferentValue
        );
    }

    #[test]
    fn an_unanswered_send_is_retried_with_backoff_until_the_ttl() {
        let mut task = TaskRecord::new(
            "t".into(),
            "set_temperature",
            "ac-living",
            vec![field(
                Field::TargetTemperature,
                Value::Number(24.0),
                Value::Number(26.0),
            )],
            TIMING,
            0,
        );
        assert!(task.retry_send_later(0, "503"));
        assert_eq!(task.next_wake_ms(0), Some(1_000));
        assert!(task.retry_send_later(1_000, "503"));
        assert_eq!(task.next_wake_ms(1_000), Some(3_000), "the wait doubles");
        assert_eq!(task.status, Status::Working);
        assert!(
            task.status_message.contains("attempt 3"),
            "{}",
            task.status_message
        );
        assert!(task.expire_if_due(TIMING.ttl_ms));
        assert!(
            task.status_message.starts_with("not sent"),
            "{}",
            task.status_message
        );
    }

    #[test]
    fn failed_reads_back_off_and_a_good_read_resets_it() {
        let mut task = temperature_task(24.0, 26.0);
        see(&mut task, 2_000, Err("503"));
        see(&mut task, 3_000, Err("503"));
        let after_two_failures = task.next_read_ms(3_000);
        assert!(
            (6_001..=7_000).contains(&after_two_failures),
            "two failures: the first grid point past three intervals, got {after_two_failures}"
        );
        assert_eq!(
            task.next_check_ms(3_000),
            3_000,
            "failing reads are looked at each time"
        );
        see(&mut task, 7_000, Ok(&temp(26.0)));
        let phase = device_phase(&task.device_id, 1_000);
        let on_grid = 8_000 + phase;
        assert_eq!(
            task.next_read_ms(on_grid - 1_000 + 350),
            on_grid,
            "reads land on the device's grid, one interval apart even when late"
        );
        assert_eq!(
            next_grid_read(&task.device_id, on_grid - 1, 1_000, 0),
            on_grid
        );
        assert_eq!(
            next_grid_read(&task.device_id, on_grid, 1_000, 1),
            on_grid + 2_000,
            "one failure: two intervals"
        );
        let phases: std::collections::BTreeSet<u64> = (0..100)
            .map(|i| device_phase(&format!("ac-{i:05}"), 10_000))
            .collect();
        assert!(phases.len() > 90, "devices are spread over the interval");
        assert_eq!(task.next_check_ms(7_000), 1_000 + TIMING.settle_window_ms);
        assert_eq!(backoff(1_000, 40), MAX_BACKOFF_MS);
    }

    #[test]
    fn an_unchanged_reading_changes_nothing_worth_writing() {
        let mut task = temperature_task(24.0, 26.0);
        assert!(
            see(&mut task, 2_000, Ok(&temp(26.0))),
            "the first read shows what the device reports"
        );
        assert!(
            !see(&mut task, 3_000, Ok(&temp(26.0))),
            "the same again is no change"
        );
        assert_eq!(task.reads, 2, "but the read is counted");
    }

    #[test]
    fn records_round_trip_through_json() {
        let task = temperature_task(24.0, 26.0);
        let text = serde_json::to_string(&task).unwrap();
        let back: TaskRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, task);
    }
}
