//! Device APIs described as data: the Sensibo profile
//! (`profiles/sensibo.json`) against a fake Sensibo, and bad profiles
//! refused when settle starts. (The simulator's own API is the built-in
//! `sim` profile: every other end-to-end test runs through it.)

use crate::common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

const KEY: &str = "sensibo-api-key";

fn sensibo_profile() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../profiles/sensibo.json")
}

async fn setup(delay_ms: u64) -> (sensibo_fake::RunningFake, Server, Client) {
    let fake = sensibo_fake::spawn(KEY, Duration::from_millis(delay_ms))
        .await
        .expect("fake Sensibo starts");
    let profile = sensibo_profile();
    let (server, client) = serve_http_with_client(&[
        "--device-profile",
        profile.to_str().unwrap(),
        "--device-api",
        &fake.base_url,
        "--device-token",
        KEY,
        "--plugin-config",
        FAST,
        "--inline-wait-ms",
        "0",
    ])
    .await;
    (fake, server, client)
}

async fn start(client: &Client, tool: &str, arguments: Value) -> Value {
    let task = structured(&complete(call(client, tool, arguments).await));
    assert!(task["taskId"].is_string(), "{task}");
    task
}

#[tokio::test]
async fn pods_are_listed_and_read_through_the_profile() {
    let (_fake, server, client) = setup(0).await;
    let devices = structured(&complete(call(&client, "list_devices", json!({})).await));
    assert_eq!(devices["devices"][0]["id"], "Ab12Cd34", "{devices}");
    assert_eq!(devices["devices"][0]["name"], "Living room", "{devices}");
    let state = structured(&complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "Ab12Cd34"}),
        )
        .await,
    ));
    assert_eq!(state["state"]["power"], "on", "{state}");
    assert_eq!(state["state"]["mode"], "cool", "{state}");
    assert_eq!(state["state"]["vane_vertical"], "auto", "{state}");
    assert_eq!(state["roomTemperature"], 25.8, "{state}");
    server.stop().await;
}

#[tokio::test]
async fn a_temperature_is_sent_with_the_whole_state_and_verified() {
    let (fake, server, client) = setup(800).await;
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "Ab12Cd34", "temperature": 22}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    let posted = fake.fake.posted();
    assert_eq!(posted.len(), 1, "{posted:?}");
    // Sensibo replaces the whole state: the fields not asked for were sent
    // at their current values.
    assert_eq!(
        posted[0].1,
        json!({"on": true, "mode": "cool", "targetTemperature": 22.0, "temperatureUnit": "C",
               "fanLevel": "auto", "swing": "stopped"})
    );
    server.stop().await;
}

#[tokio::test]
async fn a_pod_that_ignores_the_command_fails_the_task() {
    let (fake, server, client) = setup(100).await;
    fake.fake.edit("Ab12Cd34", |p| p.ignores_commands = true);
    let task = start(
        &client,
        "set_power_mode",
        json!({"device_id": "Ab12Cd34", "power": "off"}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "not_applied", "{done}");
    assert_eq!(fake.fake.posted()[0].1["on"], false);
    server.stop().await;
}

#[tokio::test]
async fn a_mode_the_remote_does_not_have_is_refused_before_sending() {
    let (fake, server, client) = setup(0).await;
    let refused = complete(
        call(
            &client,
            "set_power_mode",
            json!({"device_id": "Ef56Gh78", "mode": "heat"}),
        )
        .await,
    );
    let text = error_text(&refused);
    assert!(
        text.contains("mode must be one of cool, dry, fan"),
        "{text}"
    );
    assert!(fake.fake.posted().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_bad_profile_stops_the_start_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile: Value =
        serde_json::from_str(&std::fs::read_to_string(sensibo_profile()).unwrap()).unwrap();
    profile["fields"]["target_temperature"]["number"]["step"] = json!(0);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, profile.to_string()).unwrap();
    let not_json = dir.path().join("not.json");
    std::fs::write(&not_json, "{\n  \"name\": \"x\",\n  oops\n}").unwrap();
    for (path, expected) in [
        (
            &bad,
            "fields.target_temperature.number.step: must be above 0",
        ),
        (&not_json, "not.json:3:"),
    ] {
        let args = serve_args(&[
            "settle",
            "serve",
            "--device-profile",
            path.to_str().unwrap(),
            "--store",
            "memory",
            "--plugin",
            plugin_path().to_str().unwrap(),
            "--cache-dir",
            cache_dir().to_str().unwrap(),
        ]);
        let refused = match settle::config::RunnerConfig::from_args(&args) {
            Err(e) => format!("{e:#}"),
            Ok(config) => match settle::app::Runner::start(config).await {
                Err(e) => format!("{e:#}"),
                Ok(_) => panic!("{} was accepted", path.display()),
            },
        };
        assert!(refused.contains(expected), "expected {expected}: {refused}");
    }
}

#[tokio::test]
async fn a_key_in_the_query_never_shows_in_errors() {
    let profile = sensibo_profile();
    // Nothing listens on port 9: the request fails with the URL in the
    // message, which must not carry the key.
    let server = serve_http(&[
        "--device-profile",
        profile.to_str().unwrap(),
        "--device-api",
        "http://127.0.0.1:9",
        "--device-token",
        KEY,
    ])
    .await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    let result = complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "Ab12Cd34"}),
        )
        .await,
    );
    let text = error_text(&result);
    assert!(text.contains("127.0.0.1:9/api/v2/pods/Ab12Cd34"), "{text}");
    assert!(!text.contains(KEY), "{text}");
    server.stop().await;
}
