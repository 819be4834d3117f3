//! How a task is shown: the tool view (`structuredContent` of `get_task`
//! and of the command itself) and the tasks extension's detailed task.

use super::{DEVICE_OUTCOME_ERROR, Status, TaskRecord};
use serde_json::{Map, Value as Json, json};

impl TaskRecord {
    /// `{sent, observed, fields, reads}`: what was asked and what was seen,
    /// field by field, so a partial application is visible.
    pub(super) fn report(&self) -> Map<String, Json> {
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
                    "verdict": f.verdict().name(),
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
                task.insert("result".into(), tool_result(self.to_tool_json(), false));
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

/// A `CallToolResult` carrying `structured` both as structured content and,
/// for clients that only read text, as its JSON text. It takes `structured`
/// whole, so the result holds it without a copy.
pub fn tool_result(structured: Json, is_error: bool) -> Json {
    let text = crate::json::text(&structured);
    let mut result = Map::new();
    result.insert(
        "content".into(),
        json!([{"type": "text", "text": Json::String(text)}]),
    );
    result.insert("structuredContent".into(), structured);
    result.insert("isError".into(), Json::Bool(is_error));
    Json::Object(result)
}

/// Milliseconds since the epoch as an RFC 3339 UTC timestamp.
pub fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}
