//! The hello plugin (`examples/hello-plugin`) served by the stock runner: a
//! plugin that knows nothing of devices needs no change to the runner, and
//! what a server says about itself comes from its plugin.

use crate::common::*;
use serde_json::json;

fn instructions(client: &Client) -> Option<String> {
    client
        .peer_info()
        .expect("the server said who it is")
        .instructions
        .clone()
}

#[tokio::test]
async fn the_hello_plugin_is_served_as_it_is() {
    let config = config_for(&hello_plugin_path(), &["--plugin-config", "greeting=Hi"]);
    let server = serve_http_config(config).await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    let tools = tool_names(&client).await;
    assert_eq!(tools, ["hello"]);
    let hello = complete(call(&client, "hello", json!({"name": "settle"})).await);
    assert_eq!(structured(&hello)["greeting"], "Hi, settle!");
    let world = complete(call(&client, "hello", json!({})).await);
    assert_eq!(structured(&world)["greeting"], "Hi, world!");
    let bad = complete(call(&client, "hello", json!({"name": 3})).await);
    assert!(error_text(&bad).contains("name must be a string"));
    assert_eq!(
        instructions(&client).as_deref(),
        Some("Call hello to be greeted.")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_configuration_the_plugin_refuses_stops_the_start_with_its_reason() {
    let config = config_for(&hello_plugin_path(), &["--plugin-config", "greeting="]);
    let err = match settle::app::Runner::start(config).await {
        Err(e) => format!("{e:#}"),
        Ok(_) => panic!("a refused configuration started"),
    };
    assert!(
        err.contains("refuses the tenant's configuration: plugin configuration: greeting is empty"),
        "{err}"
    );
    assert!(err.contains("settle_hello.wasm"), "{err}");
}

#[tokio::test]
async fn server_instructions_are_the_plugins_own_in_both_eras() {
    let sim = sim(std::time::Duration::from_millis(10)).await;
    let api = sim.base_url();
    let devices = serve_http(&["--device-api", &api]).await;
    let hello = serve_http_config(config_for(&hello_plugin_path(), &[])).await;
    for (server, expected) in [
        (&devices, "Device commands are verified"),
        (&hello, "Call hello to be greeted."),
    ] {
        let modern = modern_http_client(&server.url, Declares::default()).await;
        let legacy = legacy_http_client(&server.url).await;
        for client in [&modern, &legacy] {
            let said = instructions(client).unwrap_or_default();
            assert!(said.contains(expected), "{said:?}");
        }
    }
    devices.stop().await;
    hello.stop().await;
}
