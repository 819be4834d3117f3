//! What only the legacy `initialize` era has: a session that remembers its
//! log level and its resource subscriptions between requests, and a client
//! that answers a plugin's questions as server-to-client requests (a
//! 2026-07-28 client gets them as an MRTR `InputRequiredResult` instead).

// MCP logging is deprecated (SEP-2577) but part of the legacy era settle
// serves, so rmcp's logging types are used on purpose.
#![allow(deprecated)]

use crate::events::{Event, Hub, Interest};
use rmcp::RoleServer;
use rmcp::model::{
    ErrorData, InputRequiredResult, LoggingLevel, ResourceUpdatedNotificationParam, ServerRequest,
};
use rmcp::service::Peer;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Question rounds a legacy client is taken through before giving up: the
/// plugin may ask again after each answer, but not forever.
pub const MAX_QUESTION_ROUNDS: usize = 10;

/// What a legacy session remembers between its requests.
#[derive(Default)]
pub struct Session {
    /// The level `logging/setLevel` chose; until then every message goes.
    log_level: Mutex<Option<LoggingLevel>>,
    /// Forwarders of `resources/subscribe`, by URI; dropping one ends it.
    subscriptions: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        let subscriptions = self
            .subscriptions
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        for (_, forwarder) in subscriptions.drain() {
            forwarder.abort();
        }
    }
}

impl Session {
    /// The lowest level of log messages the session's client gets.
    pub fn log_level(&self) -> LoggingLevel {
        self.log_level
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or(LoggingLevel::Debug)
    }

    /// `logging/setLevel`.
    pub fn set_log_level(&self, level: LoggingLevel) {
        *self.log_level.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    /// `resources/subscribe`: forwards updates of `uri` to the session's
    /// client until it unsubscribes or the session ends.
    pub fn subscribe(&self, hub: &Arc<Hub>, tenant: &str, uri: String, peer: Peer<RoleServer>) {
        let mut following = hub.follow(
            tenant,
            Interest {
                resources: [uri.clone()].into(),
                ..Interest::default()
            },
        );
        let forwarder = tokio::spawn(async move {
            while let Some(Event::ResourceUpdated(uri)) = following.next().await {
                if peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = subscriptions.insert(uri, forwarder) {
            old.abort();
        }
    }

    /// `resources/unsubscribe`; unsubscribing from what was not subscribed
    /// to is not an error.
    pub fn unsubscribe(&self, uri: &str) {
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(forwarder) = subscriptions.remove(uri) {
            forwarder.abort();
        }
    }
}

/// Sends each of the plugin's questions to a legacy client as a
/// server-to-client request and collects the answers by key: the
/// `inputResponses` and `requestState` of the plugin's next round.
pub async fn ask(
    peer: &Peer<RoleServer>,
    questions: &InputRequiredResult,
) -> Result<(String, Option<String>), ErrorData> {
    let mut answers = Map::new();
    for (key, question) in questions.input_requests.iter().flatten() {
        let request: ServerRequest = serde_json::to_value(question)
            .and_then(serde_json::from_value)
            .map_err(|e| {
                ErrorData::internal_error(
                    format!("the plugin asked an invalid question {key}: {e}"),
                    None,
                )
            })?;
        let reply = peer.send_request(request).await.map_err(|e| {
            ErrorData::internal_error(format!("the client did not answer {key}: {e}"), None)
        })?;
        answers.insert(
            key.clone(),
            serde_json::to_value(reply).unwrap_or(Value::Null),
        );
    }
    Ok((
        Value::Object(answers).to_string(),
        questions.request_state.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_logs_everything_until_told_otherwise() {
        let session = Session::default();
        assert_eq!(session.log_level(), LoggingLevel::Debug);
        session.set_log_level(LoggingLevel::Warning);
        assert_eq!(session.log_level(), LoggingLevel::Warning);
    }

    #[test]
    fn unsubscribing_from_nothing_is_fine() {
        Session::default().unsubscribe("settle://nothing");
    }
}
