//! Real MCP clients (rmcp, protocol 2026-07-28 over Streamable HTTP), one
//! per replica, reconnected after the replica behind them was killed.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

type Client = RunningService<RoleClient, ClientConfig>;

/// How long one call may take before the soak counts it as unanswered.
const CALL_WITHIN: Duration = Duration::from_secs(15);

/// What a tool call came back as.
pub enum Answer {
    /// A tool result that is not an error: its `structuredContent`.
    Ok(Value),
    /// A tool error (`isError: true`): its text.
    ToolError(String),
    /// No answer: the replica was down, the connection broke, a protocol
    /// error. Whether the call had an effect is unknown.
    Unanswered(String),
}

/// One client per replica URL.
pub struct Clients {
    urls: Vec<String>,
    clients: Vec<tokio::sync::Mutex<Option<Arc<Client>>>>,
}

impl Clients {
    pub fn new(urls: Vec<String>) -> Clients {
        let clients = urls.iter().map(|_| tokio::sync::Mutex::new(None)).collect();
        Clients { urls, clients }
    }

    pub fn len(&self) -> usize {
        self.urls.len()
    }

    async fn client(&self, replica: usize) -> Result<Arc<Client>, String> {
        let mut slot = self.clients[replica].lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let transport = StreamableHttpClientTransport::from_uri(self.urls[replica].clone());
        let info = ClientConfig::new(
            ClientCapabilities::builder().build(),
            Implementation::new("settle-soak", "0"),
        );
        let connect = info.serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        );
        let client = match tokio::time::timeout(CALL_WITHIN, connect).await {
            Ok(Ok(client)) => Arc::new(client),
            Ok(Err(e)) => return Err(format!("connect: {e}")),
            Err(_) => return Err("connect: timed out".into()),
        };
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Drops `stale` so the next call connects again.
    async fn forget(&self, replica: usize, stale: &Arc<Client>) {
        let mut slot = self.clients[replica].lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, stale)) {
            *slot = None;
        }
    }

    /// One `tools/call` through replica `replica`.
    pub async fn call(&self, replica: usize, tool: &str, arguments: Value) -> Answer {
        let client = match self.client(replica).await {
            Ok(client) => client,
            Err(e) => return Answer::Unanswered(e),
        };
        let params = CallToolRequestParams::new(tool.to_string())
            .with_arguments(arguments.as_object().cloned().unwrap_or_default());
        let outcome = tokio::time::timeout(CALL_WITHIN, client.call_tool_once(params)).await;
        match outcome {
            Ok(Ok(CallToolResponse::Complete(result))) => {
                if result.is_error == Some(true) {
                    let text = serde_json::to_value(&result.content)
                        .ok()
                        .and_then(|c| c.as_array().cloned())
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|c| c["text"].as_str().map(str::to_string))
                        .collect::<Vec<_>>()
                        .join("\n");
                    Answer::ToolError(text)
                } else {
                    match &result.structured_content {
                        Some(value) => Answer::Ok(value.clone()),
                        None => Answer::ToolError(format!("no structuredContent: {result:?}")),
                    }
                }
            }
            Ok(Ok(other)) => Answer::Unanswered(format!("unexpected answer: {other:?}")),
            Ok(Err(e)) => {
                self.forget(replica, &client).await;
                Answer::Unanswered(e.to_string())
            }
            Err(_) => {
                self.forget(replica, &client).await;
                Answer::Unanswered("timed out".into())
            }
        }
    }
}
