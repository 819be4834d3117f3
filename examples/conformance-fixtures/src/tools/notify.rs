//! Tools that talk to the client while they run: progress, log messages,
//! and list changes for `subscriptions/listen`.
//!
//! The runner decides who hears what: progress only with a progress token,
//! log messages only at the level the client asked for (none on 2026-07-28
//! without `_meta` `logLevel`), list changes only on listen streams that
//! asked for that kind.

use super::{Call, Failure, Outcome, Tool, no_arguments, text};
use crate::host::{self, ListKind, LogLevel};
use serde_json::json;

pub const TOOLS: &[Tool] = &[
    Tool {
        name: "test_tool_with_progress",
        description: "Reports progress 0, 50 and 100 of 100 before it answers.",
        input_schema: no_arguments,
        run: progress,
    },
    Tool {
        name: "test_tool_with_logging",
        description: "Sends three info log messages while it runs.",
        input_schema: no_arguments,
        run: logging,
    },
    Tool {
        name: "test_logging_tool",
        description: "Logs at info and answers at once; without a requested log level nothing is sent.",
        input_schema: no_arguments,
        run: logging_quick,
    },
    Tool {
        name: "test_trigger_tool_change",
        description: "Announces a change of the tool list to listening clients.",
        input_schema: no_arguments,
        run: trigger_tool_change,
    },
    Tool {
        name: "test_trigger_prompt_change",
        description: "Announces a change of the prompt list to listening clients.",
        input_schema: no_arguments,
        run: trigger_prompt_change,
    },
];

/// Pause between notifications, so a client sees them arrive one by one.
const PACE_MS: u64 = 50;

fn progress(_: &Call<'_>) -> Result<Outcome, Failure> {
    for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if i > 0 {
            host::sleep_ms(PACE_MS);
        }
        host::progress(step, Some(100.0), None);
    }
    Ok(text("Progress reported: 0, 50 and 100 of 100."))
}

fn logging(_: &Call<'_>) -> Result<Outcome, Failure> {
    let steps = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ];
    for (i, step) in steps.into_iter().enumerate() {
        if i > 0 {
            host::sleep_ms(PACE_MS);
        }
        host::notify_log(LogLevel::Info, Some("fixtures"), &json!(step).to_string());
    }
    Ok(text("Tool with logging executed successfully"))
}

fn logging_quick(_: &Call<'_>) -> Result<Outcome, Failure> {
    host::notify_log(
        LogLevel::Info,
        Some("fixtures"),
        &json!("test_logging_tool ran").to_string(),
    );
    Ok(text("Logged once at info."))
}

fn trigger_tool_change(_: &Call<'_>) -> Result<Outcome, Failure> {
    host::list_changed(ListKind::Tools);
    Ok(text("Tool list change announced."))
}

fn trigger_prompt_change(_: &Call<'_>) -> Result<Outcome, Failure> {
    host::list_changed(ListKind::Prompts);
    Ok(text("Prompt list change announced."))
}
