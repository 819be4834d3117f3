//! The Home Assistant driver (`--driver homeassistant`) against the fake
//! Home Assistant (`examples/ha-fake`): climate entities written through
//! service calls and verified from later state reads.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const TOKEN: &str = "long-lived-access-token";

async fn setup(delay_ms: u64, token: &str) -> (ha_fake::RunningFake, Server, Client) {
    let ha = ha_fake::spawn(TOKEN, Duration::from_millis(delay_ms))
        .await
        .expect("fake Home Assistant starts");
    let (server, client) = serve_http_with_client(&[
        "--driver",
        "homeassistant",
        "--device-api",
        &ha.base_url,
        "--device-token",
        token,
        "--plugin-config",
        FAST,
        "--inline-wait-ms",
        "0",
    ])
    .await;
    (ha, server, client)
}

async fn start(client: &Client, tool: &str, arguments: Value) -> Value {
    let task = structured(&complete(call(client, tool, arguments).await));
    assert!(task["taskId"].is_string(), "{task}");
    task
}

#[tokio::test]
async fn climate_entities_are_the_devices() {
    let (_ha, server, client) = setup(0, TOKEN).await;
    let devices = structured(&complete(call(&client, "list_devices", json!({})).await));
    let ids: Vec<&str> = devices["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["id"].as_str())
        .collect();
    assert_eq!(ids, ["climate.bedroom", "climate.living_room"], "{devices}");
    let state = structured(&complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "climate.living_room"}),
        )
        .await,
    ));
    assert_eq!(state["state"]["mode"], "cool", "{state}");
    assert_eq!(state["state"]["target_temperature"], 24.0, "{state}");
    assert_eq!(state["roomTemperature"], 26.5, "{state}");
    server.stop().await;
}

#[tokio::test]
async fn set_temperature_completes_once_the_entity_state_shows_it() {
    let (ha, server, client) = setup(1_000, TOKEN).await;
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "climate.living_room", "temperature": 22.5}),
    )
    .await;
    // The service call was answered at once; the state has not moved yet.
    assert_eq!(task["status"], "working", "{task}");
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["observed"]["target_temperature"], 22.5);
    let calls = ha.fake.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, "set_temperature");
    assert_eq!(
        calls[0].1,
        json!({"entity_id": "climate.living_room", "temperature": 22.5})
    );
    server.stop().await;
}

#[tokio::test]
async fn an_entity_that_ignores_the_call_fails_the_task() {
    let (ha, server, client) = setup(200, TOKEN).await;
    ha.fake
        .edit("climate.living_room", |e| e.ignores_calls = true);
    let task = start(
        &client,
        "set_power_mode",
        json!({"device_id": "climate.living_room", "mode": "heat"}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "not_applied", "{done}");
    assert!(
        done["statusMessage"]
            .as_str()
            .unwrap()
            .contains("mode cool (sent heat)"),
        "{done}"
    );
    assert_eq!(ha.fake.calls()[0].1["hvac_mode"], "heat");
    server.stop().await;
}

#[tokio::test]
async fn a_mode_the_entity_does_not_list_is_refused_before_sending() {
    let (ha, server, client) = setup(0, TOKEN).await;
    ha.fake.edit("climate.bedroom", |e| {
        e.attributes
            .insert("hvac_modes".into(), json!(["off", "cool", "fan_only"]));
    });
    let refused = complete(
        call(
            &client,
            "set_power_mode",
            json!({"device_id": "climate.bedroom", "mode": "heat"}),
        )
        .await,
    );
    let text = error_text(&refused);
    assert!(text.contains("mode must be one of cool, fan"), "{text}");
    assert!(ha.fake.calls().is_empty(), "nothing was sent");

    // `fan` is Home Assistant's `fan_only`.
    let task = start(
        &client,
        "set_power_mode",
        json!({"device_id": "climate.bedroom", "mode": "fan"}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(ha.fake.calls()[0].1["hvac_mode"], "fan_only");
    server.stop().await;
}

#[tokio::test]
async fn an_attribute_the_entity_does_not_report_is_unverifiable() {
    // The bedroom lists swing modes but does not report the current one.
    let (ha, server, client) = setup(100, TOKEN).await;
    let refused = complete(
        call(
            &client,
            "set_fan",
            json!({"device_id": "climate.bedroom", "vane_vertical": "both"}),
        )
        .await,
    );
    let text = error_text(&refused);
    assert!(text.contains("vane_vertical cannot be read back"), "{text}");
    assert!(ha.fake.calls().is_empty());

    let task = start(
        &client,
        "set_fan",
        json!({"device_id": "climate.bedroom", "speed": "high", "vane_vertical": "both", "confirm": true}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "unverifiable", "{done}");
    let services: Vec<String> = ha.fake.calls().into_iter().map(|(s, _)| s).collect();
    assert_eq!(services, ["set_fan_mode", "set_swing_mode"]);
    server.stop().await;
}

#[tokio::test]
async fn a_wrong_token_is_reported_as_refused_credentials() {
    let (ha, server, client) = setup(0, "not-the-token").await;
    let result = complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "climate.living_room"}),
        )
        .await,
    );
    let text = error_text(&result);
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(text.contains("401"), "{text}");
    assert!(ha.fake.calls().is_empty());
    server.stop().await;
}
