//! Progress and log notifications from a plugin, to the client of the request
//! it is serving.
//!
//! Progress goes out only with a progress token. Log messages go out only at
//! or above the level the client asked for: per request in 2026-07-28
//! (`_meta` `logLevel`; none asked, none sent), per session in the legacy era
//! (`logging/setLevel`; everything until it is called).

// MCP logging is deprecated (SEP-2577) but part of the legacy era settle
// serves, so rmcp's logging types are used on purpose.
#![allow(deprecated)]

use crate::capabilities::runner::{LogLevel, RequestNotifier};
use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::Peer;

/// The notification channel of one request.
pub struct Notifier {
    /// The client's end of the request's stream.
    pub peer: Peer<RoleServer>,
    /// The request's progress token; no token, no progress notifications.
    pub progress_token: Option<ProgressToken>,
    /// The lowest level sent; `None` sends no log messages at all.
    pub min_level: Option<LoggingLevel>,
}

/// RFC 5424 severity order, lowest first.
pub fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn to_mcp(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

impl RequestNotifier for Notifier {
    fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> BoxFuture<'static, ()> {
        let Some(token) = self.progress_token.clone() else {
            return Box::pin(async {});
        };
        let peer = self.peer.clone();
        Box::pin(async move {
            let mut param = ProgressNotificationParam::new(token, progress);
            param.total = total;
            param.message = message;
            if let Err(e) = peer.notify_progress(param).await {
                tracing::debug!("progress notification not sent: {e}");
            }
        })
    }

    fn log(
        &self,
        level: LogLevel,
        logger: Option<String>,
        data: serde_json::Value,
    ) -> BoxFuture<'static, ()> {
        let level = to_mcp(level);
        let Some(min) = self.min_level else {
            return Box::pin(async {});
        };
        if severity(level) < severity(min) {
            return Box::pin(async {});
        }
        let peer = self.peer.clone();
        Box::pin(async move {
            let mut param = LoggingMessageNotificationParam::new(level, data);
            param.logger = logger;
            #[allow(deprecated)]
            let sent = peer.notify_logging_message(param).await;
            if let Err(e) = sent {
                tracing::debug!("log notification not sent: {e}");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_follow_rfc_5424() {
        assert!(severity(LoggingLevel::Debug) < severity(LoggingLevel::Info));
        assert!(severity(LoggingLevel::Warning) < severity(LoggingLevel::Error));
        assert!(severity(LoggingLevel::Alert) < severity(LoggingLevel::Emergency));
    }
}
