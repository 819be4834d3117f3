//! Questions a verified command asks a person, and their answers.
//!
//! A question is an MCP elicitation (form mode). It reaches the person either
//! as an MRTR `InputRequiredResult` on the `tools/call` itself, or on a task
//! in `input_required`, answered through `tasks/update`. Either way the
//! answer is an `ElicitResult`; anything but an explicit yes is a no.

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

/// What a question decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionKind {
    /// Send a command the safety gate stopped?
    Confirm,
    /// The device settled on another value: accept it, or send again?
    AcceptDifferent,
}

impl QuestionKind {
    fn key_prefix(self) -> &'static str {
        match self {
            QuestionKind::Confirm => "confirm",
            QuestionKind::AcceptDifferent => "accept_different",
        }
    }

    /// The form the person fills in.
    fn schema(self) -> Json {
        match self {
            QuestionKind::Confirm => json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Send this command"}},
                "required": ["confirm"],
            }),
            QuestionKind::AcceptDifferent => json!({
                "type": "object",
                "properties": {"choice": {
                    "type": "string",
                    "title": "What now?",
                    "enum": ["accept", "retry"],
                    "enumNames": ["Accept the device's value", "Send the command again"],
                }},
                "required": ["choice"],
            }),
        }
    }
}

/// An outstanding question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Unique over the task's lifetime: answered keys are never reused.
    pub key: String,
    pub kind: QuestionKind,
    pub message: String,
}

impl Question {
    /// The `n`th question of a task.
    pub fn new(kind: QuestionKind, n: u32, message: String) -> Question {
        Question {
            key: format!("{}_{n}", kind.key_prefix()),
            kind,
            message,
        }
    }

    /// The MRTR input request: an `elicitation/create` in form mode.
    pub fn input_request(&self) -> Json {
        json!({
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": self.message,
                "requestedSchema": self.kind.schema(),
            },
        })
    }
}

/// A person's answer, read from an `ElicitResult`.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Confirmed / accept the device's value.
    Yes,
    /// Send the command again (only for [`QuestionKind::AcceptDifferent`]).
    Retry,
    /// Declined, cancelled, or anything unclear.
    No,
}

/// Reads an `ElicitResult` as the answer to a question of `kind`. Only an
/// `accept` with the expected content is a yes.
pub fn read_reply(kind: QuestionKind, result: &Json) -> Reply {
    if result.get("action").and_then(Json::as_str) != Some("accept") {
        return Reply::No;
    }
    let content = result.get("content");
    match kind {
        QuestionKind::Confirm => {
            if content.and_then(|c| c.get("confirm")) == Some(&json!(true)) {
                Reply::Yes
            } else {
                Reply::No
            }
        }
        QuestionKind::AcceptDifferent => {
            match content.and_then(|c| c.get("choice")).and_then(Json::as_str) {
                Some("accept") => Reply::Yes,
                Some("retry") => Reply::Retry,
                _ => Reply::No,
            }
        }
    }
}

/// A stable 64-bit digest (FNV-1a) of a command's canonical JSON. An MRTR
/// retry must carry the digest of the command that was confirmed, so an
/// answer cannot be replayed onto a different command.
pub fn digest(text: &str) -> String {
    format!("{:016x}", crate::stable_hash::fnv1a(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_yes_confirms() {
        let k = QuestionKind::Confirm;
        assert_eq!(
            read_reply(k, &json!({"action":"accept","content":{"confirm":true}})),
            Reply::Yes
        );
        assert_eq!(
            read_reply(k, &json!({"action":"accept","content":{"confirm":false}})),
            Reply::No
        );
        assert_eq!(read_reply(k, &json!({"action":"accept"})), Reply::No);
        assert_eq!(read_reply(k, &json!({"action":"decline"})), Reply::No);
        assert_eq!(read_reply(k, &json!({"action":"cancel"})), Reply::No);
        assert_eq!(read_reply(k, &json!("yes")), Reply::No);
    }

    #[test]
    fn a_different_value_can_be_accepted_or_retried() {
        let k = QuestionKind::AcceptDifferent;
        assert_eq!(
            read_reply(k, &json!({"action":"accept","content":{"choice":"accept"}})),
            Reply::Yes
        );
        assert_eq!(
            read_reply(k, &json!({"action":"accept","content":{"choice":"retry"}})),
            Reply::Retry
        );
        assert_eq!(
            read_reply(k, &json!({"action":"accept","content":{"choice":"maybe"}})),
            Reply::No
        );
    }

    #[test]
    fn keys_carry_the_kind_and_a_sequence_number() {
        let q = Question::new(QuestionKind::Confirm, 3, "Send?".into());
        assert_eq!(q.key, "confirm_3");
        let request = q.input_request();
        assert_eq!(request["method"], "elicitation/create");
        assert_eq!(request["params"]["mode"], "form");
        assert_eq!(
            request["params"]["requestedSchema"]["required"],
            json!(["confirm"])
        );
    }

    #[test]
    fn digests_are_stable_and_differ() {
        assert_eq!(digest(""), "cbf29ce484222325");
        assert_ne!(digest("{\"t\":30}"), digest("{\"t\":29}"));
    }
}
