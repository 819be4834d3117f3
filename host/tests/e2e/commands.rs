//! Verified commands end to end: the real plugin in the real runtime, the
//! simulator on loopback, an rmcp client over Streamable HTTP.

use crate::common::*;
use device_sim::Fault;
use serde_json::json;
use std::time::Duration;

async fn setup(delay_ms: u64, extra: &[&str]) -> (device_sim::RunningSim, Server, Client) {
    let sim = sim(Duration::from_millis(delay_ms)).await;
    let api = sim.base_url();
    let mut argv = vec!["--device-api", api.as_str(), "--plugin-config", FAST];
    argv.extend_from_slice(extra);
    let server = serve_http(&argv).await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    (sim, server, client)
}

/// Starts a command without waiting inline, returning the task view.
async fn start(client: &Client, tool: &str, arguments: serde_json::Value) -> serde_json::Value {
    let task = structured(&complete(call(client, tool, arguments).await));
    assert!(
        task["taskId"].as_str().is_some_and(|id| id.len() == 32),
        "{task}"
    );
    task
}

#[tokio::test]
async fn set_temperature_completes_when_the_sensors_show_it() {
    let (sim, server, client) = setup(1_000, &["--inline-wait-ms", "0"]).await;
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 24}),
    )
    .await;
    assert_eq!(
        task["status"], "working",
        "a 1 s device cannot be done at once: {task}"
    );
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["sent"]["target_temperature"], json!(24.0));
    assert_eq!(
        done["result"]["observed"]["target_temperature"],
        json!(24.0)
    );
    let (control, _) = sim_counts(&sim, "ac-living");
    assert_eq!(control, 1, "exactly one command was sent");
    server.stop().await;
}

#[tokio::test]
async fn a_quick_device_answers_inline_with_the_finished_task() {
    let (_sim, server, client) = setup(200, &["--inline-wait-ms", "10000"]).await;
    let task = structured(&complete(
        call(
            &client,
            "set_power_mode",
            json!({"device_id": "ac-bedroom", "mode": "heat", "power": "on"}),
        )
        .await,
    ));
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"]["observed"]["mode"], "heat");
    server.stop().await;
}

#[tokio::test]
async fn an_offline_device_fails_early_as_not_applied() {
    let (sim, server, client) = setup(500, &["--inline-wait-ms", "0"]).await;
    sim.sim().set_fault("ac-living", Fault::Offline).unwrap();
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 22}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "not_applied");
    let message = done["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("accepted by the API, not applied"),
        "{message}"
    );
    assert!(message.contains("online: false"), "{message}");
    // Early: the first read decides, long before the 2.5 s settle window.
    assert_eq!(done["error"]["reads"], json!(1), "{done}");
    server.stop().await;
}

#[tokio::test]
async fn an_ignored_command_fails_when_the_device_never_moves() {
    let (sim, server, client) = setup(300, &["--inline-wait-ms", "0"]).await;
    sim.sim().set_fault("ac-living", Fault::Ignore).unwrap();
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 21.5}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "not_applied");
    let message = done["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("target_temperature 26 (sent 21.5)"),
        "{message}"
    );
    assert_eq!(done["error"]["observed"]["target_temperature"], json!(26.0));
    server.stop().await;
}

#[tokio::test]
async fn a_clamped_value_fails_with_both_values() {
    let (sim, server, client) = setup(300, &["--inline-wait-ms", "0"]).await;
    sim.sim()
        .set_fault(
            "ac-living",
            Fault::Clamp {
                min: 18.0,
                max: 28.0,
                round: false,
            },
        )
        .unwrap();
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 30, "confirm": true}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "different_value");
    assert_eq!(done["error"]["sent"]["target_temperature"], json!(30.0));
    assert_eq!(done["error"]["observed"]["target_temperature"], json!(28.0));
    let message = done["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("target_temperature 28 (sent 30)"),
        "{message}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_gated_command_without_confirm_sends_nothing() {
    let (sim, server, client) = setup(300, &[]).await;
    let result = complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 29}),
        )
        .await,
    );
    let text = error_text(&result);
    assert!(
        text.contains("needs confirmation; nothing was sent"),
        "{text}"
    );
    assert!(text.contains("outside the safe range 18..28"), "{text}");
    assert!(text.contains("confirm: true"), "{text}");
    let (control, _) = sim_counts(&sim, "ac-living");
    assert_eq!(
        control, 0,
        "the gate must stop the command before it is sent"
    );

    // Confirmed, the same command goes.
    let task = structured(&complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 29, "confirm": true}),
        )
        .await,
    ));
    assert_eq!(sim_counts(&sim, "ac-living").0, 1, "{task}");
    server.stop().await;
}

#[tokio::test]
async fn an_unreadable_field_needs_confirmation_and_is_never_completed() {
    let (sim, server, client) = setup(200, &["--inline-wait-ms", "0"]).await;
    sim.sim()
        .set_hidden_fields(
            "ac-living",
            [device_sim::SensorField::VaneHorizontal]
                .into_iter()
                .collect(),
        )
        .unwrap();
    let refused = complete(
        call(
            &client,
            "set_fan",
            json!({"device_id": "ac-living", "vane_horizontal": "left"}),
        )
        .await,
    );
    assert!(error_text(&refused).contains("vane_horizontal cannot be read back"));
    assert_eq!(sim_counts(&sim, "ac-living").0, 0);

    let task = start(
        &client,
        "set_fan",
        json!({"device_id": "ac-living", "speed": "high", "vane_horizontal": "left", "confirm": true}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "unverifiable");
    assert!(
        done["statusMessage"]
            .as_str()
            .unwrap()
            .starts_with("sent, unverifiable")
    );
    server.stop().await;
}

#[tokio::test]
async fn cancel_ends_the_task_at_once_and_it_stays_cancelled() {
    let (sim, server, client) = setup(1_500, &["--inline-wait-ms", "0"]).await;
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 23}),
    )
    .await;
    let id = task["taskId"].as_str().unwrap();
    let cancelled = structured(&complete(
        call(&client, "cancel_task", json!({"task_id": id})).await,
    ));
    assert_eq!(cancelled["status"], "cancelled");
    assert!(
        cancelled["statusMessage"]
            .as_str()
            .unwrap()
            .contains("not recalled")
    );
    // The device still applies the command; the task must not flip.
    eventually("the device applies the command", async || {
        let state = sim.sim().inspect("ac-living").unwrap();
        match state.pending.is_empty() {
            true => Ok(()),
            false => Err(format!("{} commands pending", state.pending.len())),
        }
    })
    .await;
    let later = structured(&complete(
        call(&client, "get_task", json!({"task_id": id})).await,
    ));
    assert_eq!(later["status"], "cancelled", "{later}");
    // Cancelling again is harmless.
    let again = structured(&complete(
        call(&client, "cancel_task", json!({"task_id": id})).await,
    ));
    assert_eq!(again["status"], "cancelled");
    server.stop().await;
}

#[tokio::test]
async fn unknown_and_malformed_task_ids_are_tool_errors() {
    let (_sim, server, client) = setup(200, &[]).await;
    let unknown = complete(
        call(
            &client,
            "get_task",
            json!({"task_id": "0123456789abcdef0123456789abcdef"}),
        )
        .await,
    );
    assert!(error_text(&unknown).contains("unknown task_id"));
    let malformed = complete(call(&client, "cancel_task", json!({"task_id": "nope"})).await);
    assert!(error_text(&malformed).contains("malformed task_id \"nope\""));
    let missing = complete(call(&client, "get_task", json!({})).await);
    assert!(error_text(&missing).contains("task_id is required"));
    server.stop().await;
}

#[tokio::test]
async fn a_newer_command_supersedes_an_older_one_on_the_same_field() {
    let (_sim, server, client) = setup(2_000, &["--inline-wait-ms", "0"]).await;
    let first = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 22}),
    )
    .await;
    let second = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 23}),
    )
    .await;
    let first_id = first["taskId"].as_str().unwrap();
    let old = structured(&complete(
        call(&client, "get_task", json!({"task_id": first_id})).await,
    ));
    assert_eq!(old["status"], "failed");
    assert_eq!(
        old["statusMessage"],
        format!("superseded by {}", second["taskId"].as_str().unwrap())
    );
    let done = wait_for_end(&client, second["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    server.stop().await;
}

#[tokio::test]
async fn bad_arguments_are_precise_tool_errors_and_nothing_is_sent() {
    let (sim, server, client) = setup(200, &[]).await;
    let cases = [
        (
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 24.3}),
            "multiple of 0.5",
        ),
        (
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 40, "confirm": true}),
            "between 16 and 30",
        ),
        (
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": "warm"}),
            "temperature must be a number",
        ),
        (
            "set_temperature",
            json!({"device_id": "ac-living"}),
            "temperature is required",
        ),
        (
            "set_power_mode",
            json!({"device_id": "ac-living", "mode": "turbo"}),
            "mode must be one of cool, heat, dry, fan, auto",
        ),
        (
            "set_power_mode",
            json!({"device_id": "ac-living"}),
            "nothing to set",
        ),
        (
            "set_fan",
            json!({"device_id": "ac-living", "speed": "max"}),
            "fan_speed must be one of",
        ),
        (
            "set_fan",
            json!({"device_id": "ac-living", "sped": "high"}),
            "unknown argument \"sped\"",
        ),
        (
            "set_temperature",
            json!({"device_id": "ac-nowhere", "temperature": 24}),
            "unknown device \"ac-nowhere\"",
        ),
        (
            "get_device_state",
            json!({"device_id": 7}),
            "device_id must be a string",
        ),
    ];
    for (tool, arguments, expected) in cases {
        let result = complete(call(&client, tool, arguments.clone()).await);
        let text = error_text(&result);
        assert!(text.contains(expected), "{tool} {arguments}: {text}");
    }
    let (control, _) = sim_counts(&sim, "ac-living");
    assert_eq!(control, 0, "no bad command reached the device");
    server.stop().await;
}

#[tokio::test]
async fn read_tools_report_devices_and_readable_fields() {
    let (sim, server, client) = setup(200, &[]).await;
    let devices = structured(&complete(call(&client, "list_devices", json!({})).await));
    let ids: Vec<&str> = devices["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ac-living", "ac-bedroom"]);

    sim.sim()
        .set_hidden_fields(
            "ac-bedroom",
            [device_sim::SensorField::VaneHorizontal]
                .into_iter()
                .collect(),
        )
        .unwrap();
    let state = structured(&complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "ac-bedroom"}),
        )
        .await,
    ));
    assert_eq!(state["online"], true);
    assert_eq!(
        state["state"]["power"], "on",
        "sensor spelling is normalized: {state}"
    );
    assert_eq!(state["unreadable"], json!(["vane_horizontal"]));
    assert!(
        state["readable"]
            .as_array()
            .unwrap()
            .contains(&json!("target_temperature"))
    );
    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_sensor_endpoint_fails_the_read_tool_with_the_reason() {
    let (sim, server, client) = setup(200, &[]).await;
    sim.sim()
        .set_fault(
            "ac-living",
            Fault::Flaky {
                rate: 1.0,
                hang_ms: 0,
            },
        )
        .unwrap();
    let result = complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    );
    let text = error_text(&result);
    assert!(text.contains("could not read ac-living"), "{text}");
    assert!(text.contains("503"), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn inside_a_task_an_unreachable_sensor_is_not_a_verdict() {
    let (sim, server, client) = setup(600, &["--inline-wait-ms", "0"]).await;
    let task = start(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 25}),
    )
    .await;
    sim.sim()
        .set_fault(
            "ac-living",
            Fault::Flaky {
                rate: 1.0,
                hang_ms: 0,
            },
        )
        .unwrap();
    // Let several reads fail, then bring the sensors back.
    let id = task["taskId"].as_str().unwrap();
    eventually("the task says the sensors did not answer", async || {
        let now = structured(&complete(
            call(&client, "get_task", json!({"task_id": id})).await,
        ));
        assert_eq!(
            now["status"], "working",
            "failed reads must not end the task: {now}"
        );
        match now["statusMessage"]
            .as_str()
            .unwrap()
            .contains("did not answer")
        {
            true => Ok(()),
            false => Err(now.to_string()),
        }
    })
    .await;
    sim.sim().clear_faults("ac-living").unwrap();
    let done = wait_for_end(&client, id).await;
    assert_eq!(done["status"], "completed", "{done}");
    server.stop().await;
}

#[tokio::test]
async fn several_fields_complete_only_together() {
    let (_sim, server, client) = setup(300, &["--inline-wait-ms", "0"]).await;
    let task = start(
        &client,
        "set_fan",
        json!({"device_id": "ac-bedroom", "speed": "low", "vane_vertical": "down"}),
    )
    .await;
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    let fields = done["result"]["fields"].as_array().unwrap();
    assert_eq!(fields.len(), 2);
    assert!(fields.iter().all(|f| f["verdict"] == "matched"), "{done}");
    server.stop().await;
}
