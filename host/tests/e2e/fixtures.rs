//! The conformance fixture plugin's sealing key: the runner no longer hands
//! plugins one, so the plugin keeps its own in its key-value bucket. Every
//! runner sharing a store then seals and opens `requestState` with the same
//! key, and a runner on another store cannot open it.

use crate::common::*;
use rmcp::model::{CallToolRequestParams, CallToolResponse, InputResponses};
use serde_json::json;

const TOOL: &str = "test_input_required_result_request_state";

const ELICITATION: Declares = Declares {
    tasks: false,
    elicitation: true,
};

/// The retry of the fixture's confirmation question, with its state.
fn retry(state: &str) -> CallToolRequestParams {
    let mut answer = InputResponses::new();
    answer.insert(
        "confirm".into(),
        json!({"action": "accept", "content": {"ok": true}}),
    );
    CallToolRequestParams::new(TOOL)
        .with_arguments(args(json!({})))
        .with_input_responses(answer)
        .with_request_state(state.to_string())
}

#[tokio::test]
async fn request_state_sealed_by_one_runner_opens_on_another_sharing_the_store() {
    let a = config_for(&fixtures_plugin_path(), &[]);
    let mut b = config_for(&fixtures_plugin_path(), &[]);
    b.store = a.store.clone();
    let elsewhere = config_for(&fixtures_plugin_path(), &[]);
    let (a, b, elsewhere) = (
        serve_http_config(a).await,
        serve_http_config(b).await,
        serve_http_config(elsewhere).await,
    );
    let on_a = modern_http_client(&a.url, ELICITATION).await;
    let on_b = modern_http_client(&b.url, ELICITATION).await;
    let on_elsewhere = modern_http_client(&elsewhere.url, ELICITATION).await;

    let asked = on_a
        .call_tool_once(CallToolRequestParams::new(TOOL).with_arguments(args(json!({}))))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(questions) = asked else {
        panic!("expected MRTR questions, got {asked:?}");
    };
    let state = questions.request_state.expect("the question carries state");

    let done = complete(on_b.call_tool_once(retry(&state)).await.unwrap());
    let text = serde_json::to_string(&done.content).unwrap();
    assert!(text.contains("state-ok"), "{text}");

    let refused = on_elsewhere
        .call_tool_once(retry(&state))
        .await
        .expect_err("another store's key does not open it");
    assert!(
        refused.to_string().contains("integrity check failed"),
        "{refused}"
    );
    for server in [a, b, elsewhere] {
        server.stop().await;
    }
}
