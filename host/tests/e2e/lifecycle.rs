//! The runner as a process: restarts on the same store, `kill -9`, and an
//! orderly SIGTERM.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_runner_killed_mid_task_finishes_the_task_after_a_restart() {
    let sim = sim(Duration::from_millis(2_000)).await;
    let api = sim.base_url();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("settle.redb");
    let store = store.to_str().unwrap();
    let argv = [
        "--device-api",
        api.as_str(),
        "--store",
        store,
        "--inline-wait-ms",
        "0",
        "--plugin-config",
        FAST,
    ];

    let mut first = Process::start(&argv).await;
    let client = modern_http_client(&first.url, Declares::default()).await;
    let task = structured(&complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 20}),
        )
        .await,
    ));
    assert_eq!(task["status"], "working");
    let id = task["taskId"].as_str().unwrap().to_string();
    first.signal("KILL");
    let status = first.exited().await;
    assert!(!status.success(), "it was killed");
    drop(client);

    let second = Process::start(&argv).await;
    let client = modern_http_client(&second.url, Declares::default()).await;
    let done = wait_for_end(&client, &id).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", second.log());
    assert_eq!(
        done["result"]["observed"]["target_temperature"],
        json!(20.0)
    );
    assert_eq!(
        sim_counts(&sim, "ac-living").0,
        1,
        "the command was sent once, not again"
    );
}

#[tokio::test]
async fn sigterm_lets_the_call_in_flight_finish_then_exits_cleanly() {
    let sim = sim(Duration::from_millis(1_000)).await;
    let api = sim.base_url();
    let argv = [
        "--device-api",
        api.as_str(),
        "--store",
        "memory",
        "--inline-wait-ms",
        "20000",
        "--plugin-config",
        FAST,
    ];
    let mut process = Process::start(&argv).await;
    let client = modern_http_client(&process.url, Declares::default()).await;

    let call = tokio::spawn(async move {
        let result = call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 27}),
        )
        .await;
        (client, result)
    });
    // Wait until the command reached the device, so the call is in flight.
    eventually("the call reaches the device", async || {
        match sim_counts(&sim, "ac-living").0 {
            0 => Err("no control request yet".into()),
            _ => Ok(()),
        }
    })
    .await;
    process.signal("TERM");
    let (_client, result) = match call.await {
        Ok(done) => done,
        Err(e) => panic!("{e}; log:\n{}", process.log()),
    };
    let task = structured(&complete(result));
    assert_eq!(
        task["status"], "completed",
        "the call in flight was answered in full: {task}"
    );
    let status = process.exited().await;
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        process.log()
    );
    assert!(process.log().contains("finishing calls in flight"));
}

#[tokio::test]
async fn a_command_in_flight_when_the_runner_dies_is_sent_again_after_a_restart() {
    let sim = sim(Duration::from_millis(300)).await;
    // The control endpoint answers slowly, so the runner dies while it waits:
    // the API never takes that first request.
    sim.sim()
        .set_fault("ac-living", device_sim::Fault::Latency { ms: 3_000 })
        .unwrap();
    let api = sim.base_url();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("settle.redb");
    let store = store.to_str().unwrap();
    let argv = [
        "--device-api",
        api.as_str(),
        "--store",
        store,
        "--inline-wait-ms",
        "0",
        "--plugin-config",
        "poll_interval_ms=200,settle_window_ms=10000,http_timeout_ms=5000",
    ];
    let mut first = Process::start(&argv).await;
    let url = first.url.clone();
    let caller = tokio::spawn(async move {
        let client = modern_http_client(&url, Declares::default()).await;
        // This call dies with the runner; its task is already stored.
        let _ = client
            .call_tool_once(
                rmcp::model::CallToolRequestParams::new("set_temperature")
                    .with_arguments(args(json!({"device_id": "ac-living", "temperature": 20}))),
            )
            .await;
    });
    eventually("the command leaves", async || {
        match sim_counts(&sim, "ac-living").0 {
            0 => Err("no control request yet".into()),
            _ => Ok(()),
        }
    })
    .await;
    first.signal("KILL");
    first.exited().await;
    caller.abort();
    sim.sim().clear_faults("ac-living").unwrap();

    let second = Process::start(&argv).await;
    eventually("the restarted runner sends the command again", async || {
        let state = serde_json::to_value(sim.sim().inspect("ac-living").unwrap()).unwrap();
        match state["state"]["target_temperature"] == json!(20.0) {
            true => Ok(()),
            false => Err(format!("{state}; runner log:\n{}", second.log())),
        }
    })
    .await;
    assert!(second.log().contains("re-sending"), "{}", second.log());
    assert_eq!(
        sim_counts(&sim, "ac-living").0,
        2,
        "sent once before the crash, once after"
    );
}
