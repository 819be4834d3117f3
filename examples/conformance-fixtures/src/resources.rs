//! The fixture resources: three static ones and one template.
//!
//! `test://static-text` is listed first: the caching check reads the first
//! listed resource. `test://watched-resource` exists to be subscribed to;
//! nothing in the suite waits for its updates, so it never changes.

use crate::content::PNG;
use crate::outcome::{Refusal, string_param};
use serde_json::{Value as Json, json};

/// The listed resources.
pub fn list() -> Json {
    json!({"resources": [
        {
            "uri": "test://static-text",
            "name": "static-text",
            "title": "Static Text Resource",
            "description": "A static text resource for testing",
            "mimeType": "text/plain",
        },
        {
            "uri": "test://static-binary",
            "name": "static-binary",
            "title": "Static Binary Resource",
            "description": "A static binary resource (a PNG image) for testing",
            "mimeType": "image/png",
        },
        {
            "uri": "test://watched-resource",
            "name": "watched-resource",
            "title": "Watched Resource",
            "description": "A resource clients can subscribe to",
            "mimeType": "text/plain",
        },
    ]})
}

/// The resource templates.
pub fn templates() -> Json {
    json!({"resourceTemplates": [{
        "uriTemplate": "test://template/{id}/data",
        "name": "template",
        "title": "Template Resource",
        "description": "JSON data for any id",
        "mimeType": "application/json",
    }]})
}

/// `resources/read`.
pub fn read(params: &Json) -> Result<Json, Refusal> {
    let uri = string_param(params, "uri")?;
    let contents = match uri {
        "test://static-text" => json!({
            "uri": uri,
            "mimeType": "text/plain",
            "text": "This is the content of the static text resource.",
        }),
        "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
        "test://watched-resource" => json!({
            "uri": uri,
            "mimeType": "text/plain",
            "text": "Watched resource content",
        }),
        _ => match template_id(uri) {
            Some(id) => json!({
                "uri": uri,
                "mimeType": "application/json",
                "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                    .to_string(),
            }),
            None => return Err(Refusal::NotFound(format!("Resource not found: {uri}"))),
        },
    };
    Ok(json!({"contents": [contents]}))
}

/// The `{id}` of `test://template/{id}/data`: one non-empty path segment.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix("test://template/")?
        .strip_suffix("/data")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_text_is_listed_first() {
        assert_eq!(list()["resources"][0]["uri"], "test://static-text");
    }

    #[test]
    fn every_listed_resource_can_be_read() {
        for resource in list()["resources"].as_array().unwrap() {
            let read = read(&json!({"uri": resource["uri"]})).unwrap();
            assert_eq!(read["contents"][0]["uri"], resource["uri"]);
        }
    }

    #[test]
    fn the_template_fills_in_the_id() {
        let read = read(&json!({"uri": "test://template/123/data"})).unwrap();
        assert!(
            read["contents"][0]["text"]
                .as_str()
                .unwrap()
                .contains("123")
        );
    }

    #[test]
    fn an_unknown_uri_is_not_found() {
        let uri = "test://nonexistent-resource-for-conformance-testing";
        assert!(matches!(
            read(&json!({"uri": uri})),
            Err(Refusal::NotFound(_))
        ));
    }

    #[test]
    fn a_template_uri_with_an_empty_or_nested_id_is_not_found() {
        for uri in ["test://template//data", "test://template/a/b/data"] {
            assert!(
                matches!(read(&json!({"uri": uri})), Err(Refusal::NotFound(_))),
                "{uri}"
            );
        }
    }
}
