//! Questions to the client (MRTR `inputRequests`) and reading its replies.
//!
//! A question is a server-to-client request without `jsonrpc` and `id`:
//! `elicitation/create`, `sampling/createMessage` or `roots/list`. A
//! 2026-07-28 client answers them in `inputResponses`; for a legacy client
//! the runner sends them as real requests and hands the replies back the
//! same way, so one shape serves both wires.
//!
//! Replies are read leniently where the wire allows variants (sampling
//! content as one block or a list) and strictly where it does not (an
//! elicitation reply must be an object with an `action`): a malformed reply
//! is the client's error, and must not be mistaken for an answer.

use serde_json::{Map, Value as Json, json};

/// An `elicitation/create` form question.
pub fn elicit(message: &str, requested_schema: Json) -> Json {
    json!({
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": requested_schema},
    })
}

/// A form asking for one string field, required.
pub fn string_form(field: &str) -> Json {
    json!({
        "type": "object",
        "properties": {field: {"type": "string"}},
        "required": [field],
    })
}

/// A form asking for one boolean field, required.
pub fn boolean_form(field: &str) -> Json {
    json!({
        "type": "object",
        "properties": {field: {"type": "boolean"}},
        "required": [field],
    })
}

/// A `sampling/createMessage` question with one user message.
pub fn sample(text: &str, max_tokens: u32) -> Json {
    json!({
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": max_tokens,
        },
    })
}

/// A `roots/list` question.
pub fn list_roots() -> Json {
    json!({"method": "roots/list", "params": {}})
}

/// An `InputRequiredResult` body (the runner adds `resultType`).
pub fn input_required(requests: Map<String, Json>, request_state: Option<String>) -> Json {
    let mut body = Map::new();
    body.insert("inputRequests".into(), Json::Object(requests));
    if let Some(state) = request_state {
        body.insert("requestState".into(), json!(state));
    }
    Json::Object(body)
}

/// The reply to `key`, if the client sent one. `null` counts as none.
pub fn reply<'a>(replies: Option<&'a Json>, key: &str) -> Option<&'a Json> {
    replies.and_then(|r| r.get(key)).filter(|v| !v.is_null())
}

/// What a person did with a form.
#[derive(Debug, PartialEq)]
pub enum Elicited {
    /// They filled it in.
    Accepted(Map<String, Json>),
    Declined,
    Cancelled,
}

/// Reads an `ElicitResult`.
pub fn read_elicited(key: &str, reply: &Json) -> Result<Elicited, String> {
    let action = reply
        .get("action")
        .and_then(Json::as_str)
        .ok_or_else(|| format!("inputResponses.{key} must be an ElicitResult with an action"))?;
    match action {
        "accept" => match reply.get("content") {
            Some(Json::Object(content)) => Ok(Elicited::Accepted(content.clone())),
            None | Some(Json::Null) => Ok(Elicited::Accepted(Map::new())),
            Some(_) => Err(format!("inputResponses.{key}.content must be an object")),
        },
        "decline" => Ok(Elicited::Declined),
        "cancel" => Ok(Elicited::Cancelled),
        other => Err(format!(
            "inputResponses.{key}.action {other:?} is not accept, decline or cancel"
        )),
    }
}

/// A string field of an accepted form.
pub fn field<'a>(content: &'a Map<String, Json>, name: &str) -> Option<&'a str> {
    content.get(name).and_then(Json::as_str)
}

/// Reads the text of a `CreateMessageResult` (content as one block or a
/// list of blocks; the first text block counts).
pub fn read_sampled(key: &str, reply: &Json) -> Result<String, String> {
    let content = reply
        .get("content")
        .ok_or_else(|| format!("inputResponses.{key} must be a CreateMessageResult"))?;
    let blocks = match content {
        Json::Array(blocks) => blocks.iter().collect::<Vec<_>>(),
        block => vec![block],
    };
    blocks
        .iter()
        .find_map(|b| b.get("text").and_then(Json::as_str))
        .map(str::to_string)
        .ok_or_else(|| format!("inputResponses.{key} has no text content"))
}

/// Reads the URIs of a `ListRootsResult`.
pub fn read_roots(key: &str, reply: &Json) -> Result<Vec<String>, String> {
    let roots = reply
        .get("roots")
        .and_then(Json::as_array)
        .ok_or_else(|| format!("inputResponses.{key} must be a ListRootsResult"))?;
    roots
        .iter()
        .map(|r| {
            r.get("uri")
                .and_then(Json::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("inputResponses.{key}: every root needs a uri"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accepted_form_yields_its_content() {
        let reply = json!({"action": "accept", "content": {"name": "Alice"}});
        let Ok(Elicited::Accepted(content)) = read_elicited("k", &reply) else {
            panic!("not accepted");
        };
        assert_eq!(field(&content, "name"), Some("Alice"));
    }

    #[test]
    fn a_number_is_not_an_elicitation_reply() {
        assert!(read_elicited("user_name", &json!(12345)).is_err());
    }

    #[test]
    fn an_unknown_action_is_refused() {
        assert!(read_elicited("k", &json!({"action": "maybe"})).is_err());
    }

    #[test]
    fn decline_and_cancel_are_told_apart() {
        assert_eq!(
            read_elicited("k", &json!({"action": "decline"})),
            Ok(Elicited::Declined)
        );
        assert_eq!(
            read_elicited("k", &json!({"action": "cancel"})),
            Ok(Elicited::Cancelled)
        );
    }

    #[test]
    fn sampled_text_is_read_from_one_block_or_a_list() {
        let one = json!({"role": "assistant", "content": {"type": "text", "text": "Paris"}});
        let list = json!({"role": "assistant", "content": [{"type": "text", "text": "Paris"}]});
        assert_eq!(read_sampled("k", &one).unwrap(), "Paris");
        assert_eq!(read_sampled("k", &list).unwrap(), "Paris");
    }

    #[test]
    fn roots_are_read_as_uris() {
        let reply = json!({"roots": [{"uri": "file:///test/root", "name": "Test Root"}]});
        assert_eq!(read_roots("k", &reply).unwrap(), ["file:///test/root"]);
    }

    #[test]
    fn a_null_reply_counts_as_none() {
        let replies = json!({"user_name": null});
        assert_eq!(reply(Some(&replies), "user_name"), None);
    }

    #[test]
    fn an_input_required_body_carries_the_state_only_when_given() {
        let mut requests = Map::new();
        requests.insert("k".into(), list_roots());
        let body = input_required(requests.clone(), None);
        assert!(body.get("requestState").is_none());
        let body = input_required(requests, Some("s".into()));
        assert_eq!(body["requestState"], "s");
    }
}
