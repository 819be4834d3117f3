//! Command sequences a person really makes, through the real component and
//! the simulator: changing one's mind while a command is still applying,
//! going back to where the device was, and someone at the wall. Each
//! verdict is checked against the simulator's own record of what it
//! applied, and when.

use crate::common::*;
use device_sim::{Fault, RunningSim};
use serde_json::{Value, json};
use std::time::{Duration, UNIX_EPOCH};

/// The simulator acts 1.5 s after a command, so a second command 0.3 s
/// after the first arrives while the first is still applying.
const DELAY: Duration = Duration::from_millis(1_500);

async fn setup() -> (RunningSim, Server, Client) {
    let sim = sim(DELAY).await;
    let api = sim.base_url();
    let server = serve_http(&[
        "--device-api",
        &api,
        "--plugin-config",
        "poll_interval_ms=200,settle_window_ms=5000",
        "--inline-wait-ms",
        "0",
    ])
    .await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    (sim, server, client)
}

async fn set(client: &Client, device: &str, temperature: f64) -> String {
    let task = structured(&complete(
        call(
            client,
            "set_temperature",
            json!({"device_id": device, "temperature": temperature}),
        )
        .await,
    ));
    task["taskId"].as_str().expect("a task").to_string()
}

/// The simulator's record of the commands it applied or dropped.
fn settled(sim: &RunningSim, device: &str) -> Vec<Value> {
    let view = serde_json::to_value(sim.sim().inspect(device).unwrap()).unwrap();
    view["settled"].as_array().unwrap().clone()
}

fn last_updated_ms(task: &Value) -> u64 {
    let at = humantime::parse_rfc3339(task["lastUpdatedAt"].as_str().unwrap()).unwrap();
    at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The time the simulator applied the command that set `temperature`.
fn applied_at(settled: &[Value], temperature: f64) -> u64 {
    settled
        .iter()
        .find(|c| c["applied"] == true && c["command"]["target_temperature"] == json!(temperature))
        .and_then(|c| c["settled_at_ms"].as_u64())
        .unwrap_or_else(|| panic!("the simulator never applied {temperature}: {settled:?}"))
}

#[tokio::test]
async fn a_retarget_completes_when_the_new_value_lands() {
    let (sim, server, client) = setup().await;
    let first = set(&client, "ac-living", 27.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // the person changes their mind
    let second = set(&client, "ac-living", 23.0).await;

    let old = wait_for_end(&client, &first).await;
    assert_eq!(old["status"], "failed", "{old}");
    assert_eq!(old["statusMessage"], format!("superseded by {second}"));
    let done = wait_for_end(&client, &second).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["observed"]["target_temperature"],
        json!(23.0)
    );

    let settled = settled(&sim, "ac-living");
    let (at27, at23) = (applied_at(&settled, 27.0), applied_at(&settled, 23.0));
    assert!(at27 <= at23, "27 landed first: {settled:?}");
    assert!(
        last_updated_ms(&done) >= at23,
        "completed only once 23 was applied: {done}"
    );
    server.stop().await;
}

#[tokio::test]
async fn going_back_to_the_original_value_completes_after_it_lands_again() {
    let (sim, server, client) = setup().await;
    // The simulator starts at 26.
    let first = set(&client, "ac-living", 27.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let back = set(&client, "ac-living", 26.0).await;

    let done = wait_for_end(&client, &back).await;
    assert_eq!(done["status"], "completed", "{done}");
    let old = wait_for_end(&client, &first).await;
    assert_eq!(old["statusMessage"], format!("superseded by {back}"));

    let settled = settled(&sim, "ac-living");
    let at26 = applied_at(&settled, 26.0);
    assert!(applied_at(&settled, 27.0) <= at26, "{settled:?}");
    assert!(
        last_updated_ms(&done) >= at26,
        "26 was already showing before either command; completed only once the second landed: {done}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_value_nobody_sent_is_a_different_value_with_both_values() {
    let (sim, server, client) = setup().await;
    // The unit drops the command, and someone sets 21 at the wall.
    sim.sim().set_fault("ac-bedroom", Fault::Ignore).unwrap();
    let task = set(&client, "ac-bedroom", 24.0).await;
    let by_hand = reqwest::Client::new()
        .post(format!("{}/_sim/devices/ac-bedroom/state", sim.base_url()))
        .json(&json!({"target_temperature": 21.0}))
        .send()
        .await
        .unwrap();
    assert!(by_hand.status().is_success());

    let done = wait_for_end(&client, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["reason"], "different_value", "{done}");
    assert_eq!(done["error"]["sent"]["target_temperature"], json!(24.0));
    assert_eq!(done["error"]["observed"]["target_temperature"], json!(21.0));
    assert!(
        done["statusMessage"]
            .as_str()
            .unwrap()
            .contains("target_temperature 21 (sent 24)"),
        "{done}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_device_with_history_is_read_around_its_usual_time() {
    let (sim, server, client) = setup().await;
    // Two commands teach settle how long the unit takes.
    for t in [22.0, 23.0] {
        let id = set(&client, "ac-living", t).await;
        assert_eq!(wait_for_end(&client, &id).await["status"], "completed");
    }
    let id = set(&client, "ac-living", 24.0).await;
    let working = structured(&complete(
        call(&client, "get_task", json!({"task_id": id})).await,
    ));
    assert!(
        working["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("ac-living usually acts in about 1.")),
        "{working}"
    );
    let done = wait_for_end(&client, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let lag = last_updated_ms(&done) - applied_at(&settled(&sim, "ac-living"), 24.0);
    assert!(
        lag < 2_000,
        "seen soon after the device acted (timing is measured in make bench): {lag} ms"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_device_takes_only_so_many_commands_a_minute() {
    let sim = sim(DELAY).await;
    let api = sim.base_url();
    let server = serve_http(&[
        "--device-api",
        &api,
        "--plugin-config",
        "poll_interval_ms=200,max_commands_per_minute=2",
        "--inline-wait-ms",
        "0",
    ])
    .await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    set(&client, "ac-living", 21.0).await;
    set(&client, "ac-living", 22.0).await;
    // Repeating the latest command changes nothing and does not count.
    set(&client, "ac-living", 22.0).await;
    let refused = complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 23}),
        )
        .await,
    );
    let text = error_text(&refused);
    assert!(
        text.contains("ac-living has taken 2 commands in the last minute")
            && text.contains("nothing was sent")
            && text.contains("The next one may be sent in"),
        "{text}"
    );
    assert_eq!(sim_counts(&sim, "ac-living").0, 3, "the fourth never left");
    // Another device is not held back by this one.
    set(&client, "ac-bedroom", 23.0).await;
    server.stop().await;
}
