//! The outbound allow-list, deny case first: a plugin reaches only the
//! origins its tenant allows, and a denial is a clear tool error.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_device_api_off_the_allow_list_is_denied_with_a_clear_error() {
    let sim = sim(Duration::from_millis(100)).await;
    let api = sim.base_url();
    // Allowed: some other port on the same host. The simulator's is not.
    let server = serve_http(&[
        "--device-api",
        &api,
        "--allow-outbound",
        "http://127.0.0.1:9",
    ])
    .await;
    let client = modern_http_client(&server.url, Declares::default()).await;

    let read = complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    );
    let text = error_text(&read);
    assert!(text.contains("denied"), "{text}");
    assert!(text.contains("allow-list"), "{text}");

    let command = complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 24}),
        )
        .await,
    );
    let text = error_text(&command);
    assert!(
        text.contains("denied") && text.contains("nothing was sent"),
        "{text}"
    );
    assert_eq!(
        sim_counts(&sim, "ac-living"),
        (0, 0),
        "no request reached the simulator"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_same_call_works_once_the_origin_is_allowed() {
    let sim = sim(Duration::from_millis(100)).await;
    let api = sim.base_url();
    let server = serve_http(&[
        "--device-api",
        &api,
        "--allow-outbound",
        &format!("http://127.0.0.1:9,{api}"),
    ])
    .await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    let state = structured(&complete(
        call(
            &client,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    ));
    assert_eq!(state["deviceId"], "ac-living");
    assert_eq!(sim_counts(&sim, "ac-living").1, 1);
    server.stop().await;
}

#[tokio::test]
async fn by_default_only_the_device_api_origin_is_allowed() {
    let sim = sim(Duration::from_millis(100)).await;
    let api = sim.base_url();
    let config = config(&["--device-api", &api]);
    let origins: Vec<String> = config.tenants[0]
        .policy
        .origins()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(origins, [api]);
}

#[test]
fn a_malformed_allow_list_entry_is_refused_at_start_with_the_expected_form() {
    let plugin = plugin_path();
    let argv = [
        "settle",
        "serve",
        "--plugin",
        plugin.to_str().unwrap(),
        "--store",
        "memory",
        "--allow-outbound",
        "127.0.0.1:8081",
    ];
    let args = serve_args(&argv);
    let err = settle::config::RunnerConfig::from_args(&args)
        .err()
        .expect("refused");
    let text = format!("{err:#}");
    assert!(text.contains("--allow-outbound"), "{text}");
    assert!(text.contains("expected scheme://host[:port]"), "{text}");
}
