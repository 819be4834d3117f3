//! JSON text of a `serde_json::Value`, written straight into a buffer.
//!
//! `Value::to_string` goes through `Display`: every piece (a quote, a key, a
//! comma) passes through `fmt::Formatter` and `fmt::Write` one call at a
//! time. In a profile of `tasks/get` that was 44 % of the plugin's time;
//! [`text`] writes the same bytes through serde_json's own writer
//! (`docs/performance.md`, ninth round).

use serde_json::Value as Json;

/// The JSON text of `value`, exactly as `value.to_string()` writes it.
pub fn text(value: &Json) -> String {
    // A `Value` always serializes: its map keys are strings and its writer
    // here is a `Vec`, which never fails.
    serde_json::to_string(value).expect("a JSON value serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_what_display_writes() {
        let value = json!({
            "b": [1, 2.5, -3, null, true],
            "a": "quote \" backslash \\ newline \n tab \t control \u{1} é 🌡",
            "nested": {"empty": {}, "list": []},
        });
        assert_eq!(text(&value), value.to_string());
    }
}
