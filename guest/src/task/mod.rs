//! The task state machine of a verified command.
//!
//! Pure code: time, sensor readings and the device model's view of them
//! come in as arguments, so every transition is unit tested natively. A task
//! starts `working`, and ends in exactly one of `completed`, `failed` or
//! `cancelled`; once it has ended, every transition function refuses to
//! change it.
//!
//! The verdict comes only from what the sensor endpoint reports, never from
//! the API's answer to the command, and each reading is judged against the
//! device's command timeline ([`crate::device`]): a value an earlier
//! command asked for is that command landing, not a verdict.
//!
//! | what the sensors show                                  | verdict                         |
//! | ------------------------------------------------------ | ------------------------------- |
//! | every readable field as sent, nothing earlier pending   | `completed`                     |
//! | `online: false` (once the device's usual time passed)  | `failed`, not applied           |
//! | unchanged, or an earlier command's value, past patience | `failed`, not applied           |
//! | a value nobody sent, held, once the command should have landed | `failed`, both values given |
//! | a field that cannot be read back                       | `failed`, sent but unverifiable |
//! | anything else                                          | still `working`                 |
//!
//! A task whose creator can answer questions (it declared both the tasks
//! extension and elicitation) asks instead of failing when the device
//! settles on another value, and a gated command waits in `input_required`
//! for its confirmation before anything is sent.
//!
//! [`view`] renders a task for clients; [`schedule`] says when it is woken.

mod schedule;
mod view;

pub use schedule::{MAX_BACKOFF_MS, align_up, backoff, next_grid_read};
pub use view::{rfc3339, tool_result};

use crate::driver::Reading;
use crate::model::{Comparison, Field, Value};
use crate::question::{Question, QuestionKind, Reply};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

/// Where one field of a task stands after a reading, as its device's
/// model ([`crate::device`]) sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The device shows the value sent, and no earlier command with another
    /// value can still land after it.
    Landed,
    /// The device shows the value sent, but an earlier command with another
    /// value may still land: not yet.
    Blocked,
    /// Not there yet: the device still shows what it showed before, or
    /// (`earlier`) what an earlier command asked for, which landed since.
    Waiting { earlier: bool },
    /// A value no command explains: clamped, rounded or set at the wall.
    Foreign,
    /// The sensors do not report the field.
    NotReported,
}

/// When a task's wait is over, from the device's timing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Horizons {
    /// After this the command should have landed: a value other than the
    /// one sent is then the device's answer. `None` without history.
    pub settled_at: Option<u64>,
    /// After this an unchanged device has not applied the command.
    pub patience_at: u64,
    /// How long the device usually takes, when known.
    pub typical_ms: Option<u64>,
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
    /// Where the field stood at the last reading.
    #[serde(default)]
    pub verdict: Verdict,
}

/// A field's standing after a read, as results show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Reads back as sent.
    Matched,
    /// Not there yet: unchanged, an earlier command's value, or not reported.
    #[default]
    Waiting,
    /// A value nobody sent.
    #[serde(rename = "different")]
    Diverged,
    /// The sensor endpoint cannot report it.
    Unverifiable,
}

impl Verdict {
    fn of(standing: Standing) -> Verdict {
        match standing {
            Standing::Landed => Verdict::Matched,
            Standing::Foreign => Verdict::Diverged,
            Standing::Blocked | Standing::Waiting { .. } | Standing::NotReported => {
                Verdict::Waiting
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Matched => "matched",
            Verdict::Waiting => "waiting",
            Verdict::Diverged => "different",
            Verdict::Unverifiable => "unverifiable",
        }
    }
}

impl FieldState {
    pub fn verdict(&self) -> Verdict {
        if self.readable {
            self.verdict
        } else {
            Verdict::Unverifiable
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
    /// How often the sensor endpoint is read while a device has no history,
    /// and the longest gap between reads otherwise.
    pub poll_interval_ms: u64,
    /// How long after sending an unchanged device still counts as "on its
    /// way" while the device has no history; after it, "not applied". With
    /// history the device's own timing decides.
    pub settle_window_ms: u64,
    /// How many reads in a row a different value must hold before it is the
    /// device's answer rather than a value in passing.
    pub stable_reads: u32,
    /// The gap between reads while a change is expected.
    #[serde(default = "default_dense_read_ms")]
    pub dense_read_ms: u64,
}

/// The gap between reads around an expected change: completion is seen at
/// most this late (plus one read's time).
pub const DEFAULT_DENSE_READ_MS: u64 = 200;

fn default_dense_read_ms() -> u64 {
    DEFAULT_DENSE_READ_MS
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
    /// The command's place in its device's timeline (0 until it is sent,
    /// and in records from before timelines existed).
    #[serde(default)]
    pub seq: u64,
    /// Sensor reads that answered.
    pub reads: u32,
    /// Sensor reads that did not answer; they are not verdicts.
    pub failed_reads: u32,
    /// Failed reads in a row.
    #[serde(default)]
    pub failed_streak: u32,
    /// Attempts to hand the command to the API that got no answer.
    #[serde(default)]
    pub send_attempts: u32,
    /// When the next attempt to send is due, after one got no answer.
    #[serde(default)]
    pub retry_at_ms: Option<u64>,
    /// Reads in a row in which some field showed a value nobody sent.
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
    /// The client that asked, as it named itself (for the audit trail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientInfo>,
    /// The tool's arguments as the client sent them (for the audit trail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
}

/// The client that asked for a command, as it named itself (MCP
/// `clientInfo`; self-reported, so kept for records, never for decisions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientInfo {
    pub name: Option<String>,
    pub version: Option<String>,
}

/// The message of a task whose confirmation a person declined.
pub const DECLINED: &str = "not sent: the confirmation was declined";

/// What one device read shows a task: the reading (or why there was none),
/// and the device model's view of it.
pub struct Sight<'a> {
    pub reading: Result<&'a Reading, &'a str>,
    /// Reads the device answered since this task's command was sent, this
    /// one included.
    pub reads: u32,
    /// Each of the task's fields, as the device model sees it.
    pub standings: &'a BTreeMap<Field, Standing>,
    /// When the device's timing says the wait is over.
    pub horizons: Horizons,
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
            seq: 0,
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
            client: None,
            arguments: None,
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
    ///
    /// `fresh` is a reading taken as the answer came, when there is one: a
    /// person may take a while, and the device may have changed meanwhile
    /// (nobody reads it while the task waits for them). If it now shows
    /// what was sent, the task completes whatever the answer.
    pub fn answer(
        &mut self,
        now_ms: u64,
        key: &str,
        reply: Reply,
        fresh: Option<&Reading>,
    ) -> Option<AfterAnswer> {
        if self.is_terminal() {
            return None;
        }
        let at = self.questions.iter().position(|q| q.key == key)?;
        let question = self.questions.remove(at);
        if question.kind == QuestionKind::AcceptDifferent
            && let Some(reading) = fresh
            && self.see_fresh(reading)
        {
            let message = format!(
                "the device reports the requested state (read when the answer came): {}",
                self.describe_fields()
            );
            self.finish(now_ms, Status::Completed, None, message);
            return Some(AfterAnswer::Nothing);
        }
        let after = match (question.kind, reply) {
            (QuestionKind::Confirm, Reply::Yes) => {
                self.stage = Stage::Sending;
                self.resume(now_ms, "confirmed; sending the command to the device API");
                AfterAnswer::Send
            }
            (QuestionKind::Confirm, _) => {
                self.finish(now_ms, Status::Cancelled, None, DECLINED.to_string());
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

    /// Takes a reading outside the device's ticks into the fields' observed
    /// values, comparing by value alone; returns whether every readable
    /// field shows what was sent.
    fn see_fresh(&mut self, reading: &Reading) -> bool {
        for field in self.fields.iter_mut().filter(|f| f.readable) {
            field.observed = reading.values.get(&field.field).cloned();
            field.verdict = match &field.observed {
                Some(o) if field.comparison.matches(&field.sent, o) => Verdict::Matched,
                Some(o)
                    if field
                        .baseline
                        .as_ref()
                        .is_some_and(|b| !field.comparison.matches(b, o)) =>
                {
                    Verdict::Diverged
                }
                _ => Verdict::Waiting,
            };
        }
        reading.online
            && self
                .fields
                .iter()
                .all(|f| matches!(f.verdict(), Verdict::Matched))
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

    /// The API accepted the command, which is command `seq` of its device's
    /// timeline; `usually` is how long the device usually takes, if known.
    pub fn mark_sent(
        &mut self,
        now_ms: u64,
        request_id: Option<String>,
        seq: u64,
        usually: Option<u64>,
    ) -> bool {
        if self.is_terminal() || self.stage != Stage::Sending || !self.questions.is_empty() {
            return false;
        }
        self.stage = Stage::Sent {
            at_ms: now_ms,
            request_id,
        };
        self.seq = seq;
        let message = format!(
            "sent; waiting for the device to report the new state{}",
            self.usually(usually)
        );
        self.set_message(now_ms, message);
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

    /// When the API took the command, once it did.
    pub fn sent_at_ms(&self) -> Option<u64> {
        match self.stage {
            Stage::Sent { at_ms, .. } => Some(at_ms),
            _ => None,
        }
    }

    /// Takes one device read into account. Returns whether anything a
    /// client could see (or a later verdict depends on) changed, so an
    /// unchanged device costs no write.
    pub fn observe(&mut self, now_ms: u64, sight: &Sight<'_>) -> bool {
        if self.is_terminal() {
            return false;
        }
        let mut before = self.clone();
        before.reads = sight.reads;
        self.reads = sight.reads;
        self.take_reading(now_ms, sight);
        *self != before
    }

    fn take_reading(&mut self, now_ms: u64, sight: &Sight<'_>) -> bool {
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
        if !matches!(self.stage, Stage::Sent { .. }) {
            return false;
        }
        let reading = match sight.reading {
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
                let standing = sight
                    .standings
                    .get(&field.field)
                    .copied()
                    .unwrap_or(Standing::NotReported);
                field.verdict = Verdict::of(standing);
            }
        }
        let horizons = sight.horizons;
        // A device that applied the command and then went offline reports
        // the state it had: the command was carried out.
        let all_read_back = self
            .fields
            .iter()
            .all(|f| matches!(f.verdict(), Verdict::Matched | Verdict::Unverifiable));
        if all_read_back {
            return self.conclude_read_back(now_ms, reading.online);
        }
        // The command should have landed by now, as far as the device's
        // history tells; without history, every reading counts at once.
        let settled = horizons.settled_at.is_none_or(|at| now_ms >= at);
        if !reading.online {
            if !settled {
                let message = format!(
                    "the device reports online: false; waiting until it should have acted{}",
                    self.usually(horizons.typical_ms)
                );
                self.set_message(now_ms, message);
                return true;
            }
            // It went offline after it changed: what it changed to is its
            // answer. Otherwise it never acted.
            if self.fields.iter().any(|f| f.verdict() == Verdict::Diverged) {
                let message = format!(
                    "accepted by the API, but the device settled on a different value: {} (it reports online: false)",
                    self.describe_fields()
                );
                return self.fail(now_ms, FailureReason::DifferentValue, message);
            }
            let message = format!(
                "accepted by the API, not applied: the device reports online: false after {}",
                self.reads_text()
            );
            return self.fail(now_ms, FailureReason::NotApplied, message);
        }

        if self.fields.iter().any(|f| f.verdict() == Verdict::Diverged) {
            self.diverged_streak += 1;
        } else {
            self.diverged_streak = 0;
        }
        if self.diverged_streak >= self.timing.stable_reads.max(1) && settled {
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
        if now_ms >= horizons.patience_at {
            let waited = horizons.patience_at - self.sent_at_ms().unwrap_or(horizons.patience_at);
            return self.conclude_not_applied(now_ms, sight.standings, waited);
        }
        let earlier = sight
            .standings
            .values()
            .any(|s| matches!(s, Standing::Blocked | Standing::Waiting { earlier: true }));
        let message = if earlier {
            format!(
                "waiting for the device: {}; an earlier command to it is still landing{}",
                self.describe_fields(),
                self.usually(horizons.typical_ms)
            )
        } else {
            format!(
                "waiting for the device: {}{}",
                self.describe_fields(),
                self.usually(horizons.typical_ms)
            )
        };
        self.set_message(now_ms, message);
        true
    }

    /// "; ac-living usually acts in about 4.0 s", when the device's timing
    /// is known.
    fn usually(&self, typical_ms: Option<u64>) -> String {
        typical_ms.map_or_else(String::new, |ms| {
            format!(
                "; {} usually acts in {}",
                self.device_id,
                describe_typical(ms)
            )
        })
    }

    /// Every readable field reads back as sent.
    fn conclude_read_back(&mut self, now_ms: u64, online: bool) -> bool {
        let unverifiable: Vec<&str> = self
            .fields
            .iter()
            .filter(|f| !f.readable)
            .map(|f| f.field.name())
            .collect();
        if unverifiable.is_empty() {
            let mut message = format!(
                "the device reports the requested state after {}: {}",
                self.reads_text(),
                self.describe_fields()
            );
            if !online {
                message.push_str(" (it reports online: false)");
            }
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

    /// The device's patience ran out with some field still not as sent.
    fn conclude_not_applied(
        &mut self,
        now_ms: u64,
        standings: &BTreeMap<Field, Standing>,
        waited_ms: u64,
    ) -> bool {
        let waited_s = waited_ms as f64 / 1000.0;
        let pending: Vec<&FieldState> = self
            .fields
            .iter()
            .filter(|f| f.verdict() == Verdict::Waiting)
            .collect();
        let from_earlier = pending.iter().any(|f| {
            matches!(
                standings.get(&f.field),
                Some(Standing::Waiting { earlier: true })
            )
        });
        let unreported = pending.iter().any(|f| f.observed.is_none());
        let any_matched = self.fields.iter().any(|f| f.verdict() == Verdict::Matched);
        let any_different = self.fields.iter().any(|f| f.verdict() == Verdict::Diverged);
        let (reason, lead) = if any_different || unreported {
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
        let mut message = format!(
            "{lead}: {} after {} over {waited_s} s",
            self.describe_fields(),
            self.reads_text()
        );
        if from_earlier {
            message.push_str("; the device shows what an earlier command asked for");
        }
        self.fail(now_ms, reason, message)
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
}

/// "about 4.0 s", for status messages.
pub fn describe_typical(typical_ms: u64) -> String {
    if typical_ms < 10_000 {
        format!("about {:.1} s", typical_ms as f64 / 1000.0)
    } else {
        format!("about {} s", (typical_ms + 500) / 1000)
    }
}

#[cfg(test)]
mod tests;
