//! Checking one inbound message before rmcp sees it.
//!
//! rmcp drops unparseable lines on stdio and answers them with a plain-text
//! 415 on HTTP; MCP clients expect JSON-RPC `-32700` (parse error) and
//! `-32600` (invalid request) instead. Both transports run this check and
//! answer with a proper JSON-RPC error, so a client always learns what was
//! wrong and the server keeps serving.

use serde_json::{Value, json};

/// JSON-RPC: the message is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: JSON, but not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;

/// A message refused before dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    /// What is wrong, for the client.
    pub message: String,
    /// The request id, when one could be read.
    pub id: Value,
}

impl Rejection {
    /// The JSON-RPC error response.
    pub fn to_json(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        })
    }
}

/// Parses one message and checks it is a single JSON-RPC 2.0 request,
/// notification or response object.
pub fn check(bytes: &[u8]) -> Result<Value, Rejection> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| Rejection {
        code: PARSE_ERROR,
        message: format!("Parse error: the message is not valid JSON ({e})"),
        id: Value::Null,
    })?;
    let invalid = |message: String, id: Value| Rejection {
        code: INVALID_REQUEST,
        message,
        id,
    };
    let Some(object) = value.as_object() else {
        let message = if value.is_array() {
            "Invalid request: JSON-RPC batches are not supported; send one message per request"
                .to_string()
        } else {
            format!("Invalid request: a JSON-RPC message must be an object, not {value}")
        };
        return Err(invalid(message, Value::Null));
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(invalid(
            "Invalid request: \"jsonrpc\" must be \"2.0\"".to_string(),
            id,
        ));
    }
    if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
        return Err(invalid(
            "Invalid request: \"id\" must be a string or a number".to_string(),
            Value::Null,
        ));
    }
    let is_response = object.contains_key("result") || object.contains_key("error");
    match object.get("method") {
        Some(Value::String(m)) if !m.is_empty() => {}
        None if is_response => {}
        Some(_) => {
            return Err(invalid(
                "Invalid request: \"method\" must be a non-empty string".to_string(),
                id,
            ));
        }
        None => {
            return Err(invalid(
                "Invalid request: a request needs a \"method\"".to_string(),
                id,
            ));
        }
    }
    if let Some(params) = object.get("params")
        && !(params.is_object() || params.is_array())
    {
        return Err(invalid(
            "Invalid request: \"params\" must be an object".to_string(),
            id,
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_json_is_a_parse_error() {
        let r = check(b"{\"jsonrpc\":\"2.0\",").unwrap_err();
        assert_eq!(r.code, PARSE_ERROR);
        assert!(r.message.starts_with("Parse error"));
        assert_eq!(r.to_json()["id"], Value::Null);
    }

    #[test]
    fn wrong_shapes_are_invalid_requests_that_keep_the_id() {
        let r = check(br#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).unwrap_err();
        assert_eq!((r.code, r.id.clone()), (INVALID_REQUEST, json!(7)));
        let r = check(br#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#).unwrap_err();
        assert!(r.message.contains("batches"));
        let r = check(br#"{"jsonrpc":"2.0","id":1}"#).unwrap_err();
        assert!(r.message.contains("needs a \"method\""));
        let r = check(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#).unwrap_err();
        assert!(r.message.contains("params"));
        let r = check(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#).unwrap_err();
        assert!(r.message.contains("\"id\""));
    }

    #[test]
    fn well_formed_messages_pass() {
        assert!(check(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).is_ok());
    }
}
