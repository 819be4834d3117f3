//! JSON text of a `serde_json::Value`, written straight into a buffer, and
//! a JSON pointer's lookup without an allocation per step.
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

/// What `value.pointer(pointer)` finds (RFC 6901), without an allocation
/// per step: serde_json unescapes every token into a new `String`, even
/// one with nothing to unescape, and a device read looks up a pointer for
/// each field (`docs/performance.md`, "Twenty-fifth round").
pub fn pointer<'a>(value: &'a Json, pointer: &str) -> Option<&'a Json> {
    if pointer.is_empty() {
        return Some(value);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(value, |target, token| {
            let token = if token.contains('~') {
                std::borrow::Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
            } else {
                std::borrow::Cow::Borrowed(token)
            };
            match target {
                Json::Object(map) => map.get(token.as_ref()),
                Json::Array(list) => array_index(&token).and_then(|i| list.get(i)),
                _ => None,
            }
        })
}

/// An array index as RFC 6901 spells it: digits, no sign, no leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointer_finds_what_serde_json_finds() {
        let value = json!({
            "a": {"b": [10, {"c": true}], "": 1},
            "x/y": 2, "m~n": 3, "~1": 4, "7": "key",
            "list": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
        });
        for p in [
            "",
            "/",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c",
            "/a/b/2",
            "/a/b/-1",
            "/a/b/01",
            "/a/b/+1",
            "/a/b/1.0",
            "/a/",
            "/x~1y",
            "/m~0n",
            "/~01",
            "/~1",
            "/7",
            "/list/11",
            "/list/011",
            "/a/b/0/c",
            "a",
            "/missing/x",
            "/list/18446744073709551616",
        ] {
            assert_eq!(pointer(&value, p), value.pointer(p), "{p:?}");
        }
    }

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
