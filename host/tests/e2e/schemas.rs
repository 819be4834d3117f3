//! Tool schemas follow the configured devices: a client that validates
//! arguments against `set_temperature`'s schema must not refuse a value a
//! device accepts, and every value is still checked against its own device.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const TOKEN: &str = "long-lived-access-token";

#[tokio::test]
async fn the_temperature_schema_spans_every_device_and_each_device_keeps_its_own_range() {
    let ha = ha_fake::spawn(TOKEN, Duration::from_millis(200))
        .await
        .expect("fake Home Assistant starts");
    // One unit takes 7..35 °C; the other the usual 16..30.
    ha.fake.edit("climate.living_room", |e| {
        e.attributes.insert("min_temp".into(), json!(7.0));
        e.attributes.insert("max_temp".into(), json!(35.0));
    });
    let (server, client) = serve_http_with_client(&[
        "--driver",
        "homeassistant",
        "--device-api",
        &ha.base_url,
        "--device-token",
        TOKEN,
        "--plugin-config",
        FAST,
        "--inline-wait-ms",
        "0",
    ])
    .await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let set = tools
        .iter()
        .find(|t| t.name == "set_temperature")
        .expect("set_temperature");
    let temperature: Value =
        Value::Object((*set.input_schema).clone())["properties"]["temperature"].clone();
    assert_eq!(temperature["minimum"], json!(7.0), "{temperature}");
    assert_eq!(temperature["maximum"], json!(35.0), "{temperature}");
    assert_eq!(temperature["multipleOf"], json!(0.5), "{temperature}");

    let wide = structured(&complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "climate.living_room", "temperature": 34, "confirm": true}),
        )
        .await,
    ));
    assert!(
        wide["taskId"].is_string(),
        "34 is within this unit's range: {wide}"
    );
    let narrow = complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "climate.bedroom", "temperature": 34, "confirm": true}),
        )
        .await,
    );
    let refusal = error_text(&narrow);
    assert!(
        refusal.contains("between 16 and 30") && refusal.contains("nothing was sent"),
        "{refusal}"
    );
    server.stop().await;
}
