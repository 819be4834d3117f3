//! The tasks extension and confirmations with the device plugin: MRTR,
//! `input_required` answered through `tasks/update`, questions in the middle
//! of a task, and task notifications on `subscriptions/listen`.

use crate::common::*;
use device_sim::{DeviceSpec, Fault, SimConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetTaskParams, InputResponses, TaskStatus,
    UpdateTaskParams,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};

async fn setup(delay_ms: u64, declares: Declares) -> (device_sim::RunningSim, Server, Client) {
    let sim = sim(Duration::from_millis(delay_ms)).await;
    let api = sim.base_url();
    let server = serve_http(&[
        "--device-api",
        &api,
        "--plugin-config",
        FAST,
        "--inline-wait-ms",
        "0",
    ])
    .await;
    let client = modern_http_client(&server.url, declares).await;
    (sim, server, client)
}

const BOTH: Declares = Declares {
    tasks: true,
    elicitation: true,
};
const ELICITATION: Declares = Declares {
    tasks: false,
    elicitation: true,
};

fn answer(key: &str, value: Value) -> InputResponses {
    let mut responses = InputResponses::new();
    responses.insert(key.to_string(), value);
    responses
}

fn accept_confirm() -> Value {
    json!({"action": "accept", "content": {"confirm": true}})
}

async fn wait_for_status(client: &Client, id: &str, want: TaskStatus) -> Value {
    eventually(&format!("task {id} reaches {want:?}"), async || {
        let got = client
            .get_task(GetTaskParams::new(id.to_string()))
            .await
            .unwrap();
        let wire = serde_json::to_value(&got).unwrap();
        if got.task.status() == want {
            return Ok(wire);
        }
        assert!(
            !got.task.status().is_terminal(),
            "task {id} ended as {wire} while waiting for {want:?}"
        );
        Err(wire.to_string())
    })
    .await
}

fn task_id(response: CallToolResponse) -> (String, TaskStatus) {
    match response {
        CallToolResponse::Task(created) => (created.task.task_id.clone(), created.task.status),
        other => panic!("expected a CreateTaskResult, got {other:?}"),
    }
}

#[tokio::test]
async fn a_gated_command_is_confirmed_through_mrtr() {
    let (sim, server, client) = setup(200, ELICITATION).await;
    let arguments = args(json!({"device_id": "ac-living", "temperature": 30}));
    let first = client
        .call_tool_once(
            CallToolRequestParams::new("set_temperature").with_arguments(arguments.clone()),
        )
        .await
        .unwrap();
    let CallToolResponse::InputRequired(questions) = first else {
        panic!("expected MRTR questions, got {first:?}");
    };
    let requests = serde_json::to_value(&questions.input_requests).unwrap();
    assert_eq!(
        requests["confirm"]["method"], "elicitation/create",
        "{requests}"
    );
    let message = requests["confirm"]["params"]["message"].as_str().unwrap();
    assert!(message.contains("outside the safe range"), "{message}");
    assert_eq!(
        sim_counts(&sim, "ac-living").0,
        0,
        "nothing is sent before the answer"
    );

    let state = questions
        .request_state
        .clone()
        .expect("the question carries state");
    let retry = CallToolRequestParams::new("set_temperature")
        .with_arguments(arguments)
        .with_input_responses(answer("confirm", accept_confirm()))
        .with_request_state(state);
    let task = structured(&complete(client.call_tool_once(retry).await.unwrap()));
    assert_eq!(
        sim_counts(&sim, "ac-living").0,
        1,
        "the confirmed command is sent: {task}"
    );
    let done = wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    server.stop().await;
}

#[tokio::test]
async fn a_declined_or_mismatched_mrtr_answer_sends_nothing() {
    let (sim, server, client) = setup(200, ELICITATION).await;
    let arguments = args(json!({"device_id": "ac-living", "temperature": 30}));
    let CallToolResponse::InputRequired(questions) = client
        .call_tool_once(
            CallToolRequestParams::new("set_temperature").with_arguments(arguments.clone()),
        )
        .await
        .unwrap()
    else {
        panic!("expected questions");
    };
    let state = questions.request_state.clone().unwrap();

    let declined = CallToolRequestParams::new("set_temperature")
        .with_arguments(arguments)
        .with_input_responses(answer("confirm", json!({"action": "decline"})))
        .with_request_state(state.clone());
    let text = error_text(&complete(client.call_tool_once(declined).await.unwrap()));
    assert!(
        text.contains("not confirmed, so nothing was sent"),
        "{text}"
    );

    // A yes given for 30 does not carry over to 29.5.
    let other = CallToolRequestParams::new("set_temperature")
        .with_arguments(args(json!({"device_id": "ac-living", "temperature": 29.5})))
        .with_input_responses(answer("confirm", accept_confirm()))
        .with_request_state(state);
    let again = client.call_tool_once(other).await.unwrap();
    assert!(
        matches!(again, CallToolResponse::InputRequired(_)),
        "asked again: {again:?}"
    );
    assert_eq!(sim_counts(&sim, "ac-living").0, 0, "nothing was sent");
    server.stop().await;
}

#[tokio::test]
async fn a_gated_command_is_confirmed_through_tasks_update() {
    let (sim, server, client) = setup(200, BOTH).await;
    let (id, status) = task_id(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 29}),
        )
        .await,
    );
    assert_eq!(status, TaskStatus::InputRequired);
    let waiting = wait_for_status(&client, &id, TaskStatus::InputRequired).await;
    let keys: Vec<&String> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["confirm_1"], "{waiting}");
    assert_eq!(
        waiting["inputRequests"]["confirm_1"]["method"],
        "elicitation/create"
    );
    assert_eq!(sim_counts(&sim, "ac-living").0, 0);

    // An unknown key is ignored and leaves the task waiting.
    client
        .update_task(UpdateTaskParams::new(
            id.clone(),
            answer("nope", accept_confirm()),
        ))
        .await
        .unwrap();
    wait_for_status(&client, &id, TaskStatus::InputRequired).await;

    client
        .update_task(UpdateTaskParams::new(
            id.clone(),
            answer("confirm_1", accept_confirm()),
        ))
        .await
        .unwrap();
    let done = wait_for_status(&client, &id, TaskStatus::Completed).await;
    assert_eq!(sim_counts(&sim, "ac-living").0, 1, "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["result"]["observed"]["target_temperature"],
        json!(29.0)
    );
    server.stop().await;
}

/// How many `get-task` calls the plugin has served, from `/metrics`.
async fn plugin_get_task_calls(http: &reqwest::Client, url: &str) -> u64 {
    let series = r#"settle_plugin_calls_total{tenant="default",call="get-task",outcome="ok"}"#;
    counter(http, url, series).await
}

/// How many `tasks/get` the runner answered from a kept view.
async fn task_reads_by_runner(http: &reqwest::Client, url: &str) -> u64 {
    let series = r#"settle_task_reads_total{tenant="default",answered_by="runner"}"#;
    counter(http, url, series).await
}

/// The value of one counter `series` on `/metrics`; 0 before it counted.
async fn counter(http: &reqwest::Client, url: &str, series: &str) -> u64 {
    let metrics = metrics_text(http, url).await;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |count| count.trim().parse().unwrap())
}

/// `tasks/get` of a task that ended is answered by the runner, from the
/// view the plugin gave when the task ended: the same answer, and no call
/// into the plugin. A task still working is asked of the plugin each time.
#[tokio::test]
async fn an_ended_task_is_answered_by_the_runner_without_a_plugin_call() {
    let (sim, server, client) = setup(400, BOTH).await;
    let http = reqwest::Client::new();
    let (id, status) = task_id(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 23}),
        )
        .await,
    );
    assert_eq!(status, TaskStatus::Working);
    let before = plugin_get_task_calls(&http, &server.url).await;
    let working = wait_for_status(&client, &id, TaskStatus::Working).await;
    assert_eq!(working["taskId"], json!(id));
    assert_eq!(
        plugin_get_task_calls(&http, &server.url).await,
        before + 1,
        "a working task is the plugin's to answer"
    );

    let done = wait_for_status(&client, &id, TaskStatus::Completed).await;
    assert_eq!(
        done["result"]["structuredContent"]["result"]["observed"]["target_temperature"],
        json!(23.0),
        "{done}"
    );
    let asked = plugin_get_task_calls(&http, &server.url).await;
    let served = task_reads_by_runner(&http, &server.url).await;
    for _ in 0..5 {
        let again = wait_for_status(&client, &id, TaskStatus::Completed).await;
        assert_eq!(again, done, "an ended task's answer never changes");
    }
    assert_eq!(
        plugin_get_task_calls(&http, &server.url).await,
        asked,
        "an ended task is answered without the plugin"
    );
    assert_eq!(
        task_reads_by_runner(&http, &server.url).await,
        served + 5,
        "operators see each read the runner answered"
    );

    // A task cancelled before it ended is kept the same way.
    let (cancelled, _) = task_id(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-bedroom", "temperature": 21}),
        )
        .await,
    );
    client
        .cancel_task(rmcp::model::CancelTaskParams::new(cancelled.clone()))
        .await
        .unwrap();
    let asked = plugin_get_task_calls(&http, &server.url).await;
    let view = wait_for_status(&client, &cancelled, TaskStatus::Cancelled).await;
    assert_eq!(view["taskId"], json!(cancelled));
    assert_eq!(plugin_get_task_calls(&http, &server.url).await, asked);
    assert!(sim_counts(&sim, "ac-living").0 >= 1);
    server.stop().await;
}

#[tokio::test]
async fn a_declined_task_confirmation_sends_nothing() {
    let (sim, server, client) = setup(200, BOTH).await;
    // A field the sensors cannot report is gated.
    sim.sim()
        .set_hidden_fields(
            "ac-bedroom",
            [device_sim::SensorField::VaneHorizontal]
                .into_iter()
                .collect(),
        )
        .unwrap();
    let before = sim_counts(&sim, "ac-bedroom").0;
    let (id, status) = task_id(
        call(
            &client,
            "set_fan",
            json!({"device_id": "ac-bedroom", "vane_horizontal": "left"}),
        )
        .await,
    );
    assert_eq!(status, TaskStatus::InputRequired);
    client
        .update_task(UpdateTaskParams::new(
            id.clone(),
            answer("confirm_1", json!({"action": "decline"})),
        ))
        .await
        .unwrap();
    let ended = wait_for_status(&client, &id, TaskStatus::Cancelled).await;
    assert!(
        ended["statusMessage"]
            .as_str()
            .unwrap()
            .contains("declined"),
        "{ended}"
    );
    assert_eq!(sim_counts(&sim, "ac-bedroom").0, before, "nothing was sent");
    server.stop().await;
}

#[tokio::test]
async fn two_tasks_waiting_for_input_are_answered_in_reverse_order() {
    let (sim, server, client) = setup(200, BOTH).await;
    let (first, _) = task_id(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 29}),
        )
        .await,
    );
    let (second, _) = task_id(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-bedroom", "temperature": 17}),
        )
        .await,
    );
    wait_for_status(&client, &first, TaskStatus::InputRequired).await;
    wait_for_status(&client, &second, TaskStatus::InputRequired).await;

    client
        .update_task(UpdateTaskParams::new(
            second.clone(),
            answer("confirm_1", accept_confirm()),
        ))
        .await
        .unwrap();
    wait_for_status(&client, &second, TaskStatus::Completed).await;
    let still = wait_for_status(&client, &first, TaskStatus::InputRequired).await;
    assert!(
        still["inputRequests"]["confirm_1"].is_object(),
        "the first still waits: {still}"
    );
    assert_eq!(sim_counts(&sim, "ac-living").0, 0);

    client
        .update_task(UpdateTaskParams::new(
            first.clone(),
            answer("confirm_1", accept_confirm()),
        ))
        .await
        .unwrap();
    wait_for_status(&client, &first, TaskStatus::Completed).await;
    assert_eq!(sim_counts(&sim, "ac-living").0, 1);
    server.stop().await;
}

#[tokio::test]
async fn a_device_that_settles_elsewhere_asks_whether_to_accept() {
    let (sim, server, client) = setup(200, BOTH).await;
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
    let (id, _) = task_id(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 30, "confirm": true}),
        )
        .await,
    );
    let asking = wait_for_status(&client, &id, TaskStatus::InputRequired).await;
    let (key, request) = asking["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert!(key.starts_with("accept_different_"), "{asking}");
    let message = request["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("target_temperature 28 (sent 30)"),
        "{message}"
    );
    client
        .update_task(UpdateTaskParams::new(
            id.clone(),
            answer(
                key,
                json!({"action": "accept", "content": {"choice": "accept"}}),
            ),
        ))
        .await
        .unwrap();
    let done = wait_for_status(&client, &id, TaskStatus::Completed).await;
    let result = &done["result"]["structuredContent"]["result"];
    assert_eq!(result["acceptedAsIs"], true, "{done}");
    assert_eq!(result["observed"]["target_temperature"], json!(28.0));
    server.stop().await;
}

#[tokio::test]
async fn a_listener_following_100_tasks_receives_each_change_exactly_once() {
    let _alone = cpu_heavy().await;
    let sim = device_sim::spawn(SimConfig {
        devices: DeviceSpec::numbered(100),
        // Long enough that no task can end before the listener is open,
        // even on a slow, busy machine.
        delay: Duration::from_millis(20_000),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let api = sim.base_url();
    let server = serve_http(&[
        "--device-api",
        &api,
        "--plugin-config",
        // Reads every 2 s: 100 devices read more often would only load
        // the machine while the tasks are being created.
        "poll_interval_ms=2000,settle_window_ms=60000",
        "--inline-wait-ms",
        "0",
    ])
    .await;
    let client = modern_http_client(&server.url, BOTH).await;
    let creating = Instant::now();
    let mut ids = Vec::new();
    for n in 0..100 {
        let (id, _) = task_id(
            call(
                &client,
                "set_temperature",
                json!({"device_id": format!("ac-{n:05}"), "temperature": 24}),
            )
            .await,
        );
        ids.push(id);
    }
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mut listen = Listen::open(&server.url, 77, json!({"taskIds": ids}), caps).await;
    let ack = listen.next(DEADLINE).await.expect("an acknowledgement");
    println!("created 100 tasks in {:?}", creating.elapsed());
    assert!(
        creating.elapsed() < Duration::from_millis(18_000),
        "creating the tasks took {:?}, so some may have ended unseen",
        creating.elapsed()
    );
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"]
            .as_array()
            .unwrap()
            .len(),
        100
    );

    let mut seen: HashMap<String, Vec<Value>> = HashMap::new();
    let started = Instant::now();
    while seen
        .values()
        .filter(|v| v.last().is_some_and(is_terminal))
        .count()
        < 100
    {
        assert!(
            started.elapsed() < DEADLINE * 2,
            "not every task ended: {} did",
            seen.len()
        );
        let Some(message) = listen.next(DEADLINE).await else {
            let ended = seen
                .values()
                .filter(|v| v.last().is_some_and(is_terminal))
                .count();
            panic!(
                "the stream ended early: {} tasks heard of, {ended} ended",
                seen.len()
            );
        };
        assert_eq!(message["method"], "notifications/tasks", "{message}");
        assert_eq!(
            message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            77
        );
        let task = message["params"].clone();
        let id = task["taskId"].as_str().unwrap().to_string();
        assert!(ids.contains(&id), "a task nobody asked about: {id}");
        let history = seen.entry(id.clone()).or_default();
        assert!(
            !history.last().is_some_and(is_terminal),
            "a change after the end: {task}"
        );
        let mut visible = task.clone();
        visible["_meta"] = Value::Null;
        assert!(
            history.last() != Some(&visible),
            "the same change twice for {id}: {task}"
        );
        history.push(visible);
    }
    // Nothing more arrives once everything ended.
    assert!(listen.next(Duration::from_millis(500)).await.is_none());
    let changes: usize = seen.values().map(Vec::len).sum();
    assert!(changes >= 100, "{changes}");
    server.stop().await;
}

fn is_terminal(task: &Value) -> bool {
    matches!(
        task["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

#[tokio::test]
async fn listening_to_tasks_needs_the_extension() {
    let (_sim, server, _client) = setup(200, BOTH).await;
    let mut listen = Listen::open(&server.url, 5, json!({"taskIds": ["x"]}), json!({})).await;
    let reply = listen.next(DEADLINE).await.expect("an answer");
    assert_eq!(reply["error"]["code"], -32021, "{reply}");
    server.stop().await;
}

#[tokio::test]
async fn device_state_is_a_readable_and_subscribable_resource() {
    let (sim, server, client) = setup(300, Declares::default()).await;
    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<String> = resources.iter().map(|r| r.uri.clone()).collect();
    assert_eq!(
        uris,
        [
            "settle://devices/ac-living/state",
            "settle://devices/ac-bedroom/state",
            "settle://audit"
        ]
    );
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "settle://devices/ac-living/state",
        ))
        .await
        .unwrap();
    let text = serde_json::to_value(&read).unwrap()["contents"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let state: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(state["state"]["target_temperature"], json!(26.0), "{state}");

    let mut listen = Listen::open(
        &server.url,
        9,
        json!({"resourceSubscriptions": ["settle://devices/ac-living/state"]}),
        json!({}),
    )
    .await;
    let ack = listen.next(DEADLINE).await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["settle://devices/ac-living/state"])
    );
    let task = structured(&complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 22}),
        )
        .await,
    ));
    wait_for_end(&client, task["taskId"].as_str().unwrap()).await;
    let mut updates = 0;
    while let Some(message) = listen.next(Duration::from_millis(500)).await {
        assert_eq!(
            message["method"], "notifications/resources/updated",
            "{message}"
        );
        assert_eq!(message["params"]["uri"], "settle://devices/ac-living/state");
        updates += 1;
    }
    assert!(updates >= 1, "the change to 22 °C was announced");
    let unknown = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "settle://devices/nowhere/state",
        ))
        .await;
    let error = format!("{unknown:?}");
    assert!(
        error.contains("-32602") || error.contains("Resource not found"),
        "{error}"
    );
    drop(sim);
    server.stop().await;
}
