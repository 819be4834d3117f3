//! One tool per content type, and one that fails as a tool (not as a
//! protocol error). Payloads are the suite's reference payloads.

use super::{Call, Failure, Outcome, Tool, no_arguments, text, tool_error};
use crate::content::{PNG, WAV};
use serde_json::json;

pub const TOOLS: &[Tool] = &[
    Tool {
        name: "test_simple_text",
        description: "Returns one text block; takes no arguments.",
        input_schema: no_arguments,
        run: simple_text,
    },
    Tool {
        name: "test_image_content",
        description: "Returns one image block (a 1x1 PNG).",
        input_schema: no_arguments,
        run: image,
    },
    Tool {
        name: "test_audio_content",
        description: "Returns one audio block (a tiny WAV).",
        input_schema: no_arguments,
        run: audio,
    },
    Tool {
        name: "test_embedded_resource",
        description: "Returns one embedded text resource.",
        input_schema: no_arguments,
        run: embedded_resource,
    },
    Tool {
        name: "test_multiple_content_types",
        description: "Returns text, an image and an embedded resource together.",
        input_schema: no_arguments,
        run: mixed,
    },
    Tool {
        name: "test_error_handling",
        description: "Always fails as a tool: a result with isError, not a protocol error.",
        input_schema: no_arguments,
        run: error,
    },
];

fn simple_text(_: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(text("This is a simple text response for testing."))
}

fn image(_: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(Outcome::Complete(json!({
        "content": [{"type": "image", "data": PNG, "mimeType": "image/png"}],
    })))
}

fn audio(_: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(Outcome::Complete(json!({
        "content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}],
    })))
}

fn embedded_resource(_: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(Outcome::Complete(json!({
        "content": [{
            "type": "resource",
            "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content.",
            },
        }],
    })))
}

fn mixed(_: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(Outcome::Complete(json!({
        "content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": json!({"test": "data", "value": 123}).to_string(),
                },
            },
        ],
    })))
}

fn error(_: &Call<'_>) -> Result<Outcome, Failure> {
    Ok(tool_error(
        "This tool intentionally returns an error for testing",
    ))
}

#[cfg(test)]
mod tests {
    use crate::tools::testing::{answered, everything, run};
    use crate::tools::{Failure, Outcome};

    #[test]
    fn the_error_tool_returns_a_result_flagged_as_an_error() {
        let outcome = run("test_error_handling", &everything(), None, None, "n");
        let Ok(Outcome::Complete(result)) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(result["isError"], true);
    }

    #[test]
    fn audio_is_labelled_audio_wav() {
        let Ok(Outcome::Complete(result)) =
            run("test_audio_content", &everything(), None, None, "n")
        else {
            panic!();
        };
        assert_eq!(result["content"][0]["mimeType"], "audio/wav");
    }

    #[test]
    fn simple_text_needs_no_arguments() {
        let outcome: Result<Outcome, Failure> =
            run("test_simple_text", &everything(), None, None, "n");
        assert!(!answered(outcome).is_empty());
    }
}
