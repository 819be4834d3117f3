//! MCP over Streamable HTTP: both protocol eras, the tasks extension,
//! malformed messages, and the HTTP-level rules (Host, Origin, methods).

use crate::common::*;
use rmcp::model::{CallToolResponse, CancelTaskParams, GetTaskParams, TaskStatus};
use serde_json::{Value, json};
use std::time::Duration;

/// A well-formed modern request with its required headers.
async fn request(
    url: &str,
    id: u64,
    method: &str,
    params: Value,
    name: Option<&str>,
) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let mut headers = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
    if let Some(name) = name {
        headers.push(("mcp-name", name));
    }
    post(url, &body, &headers).await
}

async fn setup(delay_ms: u64, extra: &[&str]) -> (device_sim::RunningSim, Server) {
    let sim = sim(Duration::from_millis(delay_ms)).await;
    let api = sim.base_url();
    let mut argv = vec!["--device-api", api.as_str(), "--plugin-config", FAST];
    argv.extend_from_slice(extra);
    (sim, serve_http(&argv).await)
}

#[tokio::test]
async fn malformed_messages_get_json_rpc_errors_and_the_server_keeps_serving() {
    let (_sim, server) = setup(100, &[]).await;
    let (status, body) = post(&server.url, "{\"jsonrpc\": \"2.0\", \"id\": 1,", &[]).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], -32700, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Parse error")
    );

    let (status, body) = post(&server.url, r#"{"jsonrpc":"2.0","id":5}"#, &[]).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!(-32600)),
        "{body}"
    );
    assert_eq!(body["id"], 5);

    let (status, body) = post(
        &server.url,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
        &[],
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("batches"),
        "{body}"
    );

    // tools/call without a name: malformed params, not an unknown method.
    let (_, body) = request(
        &server.url,
        6,
        "tools/call",
        json!({"_meta": meta(false)}),
        None,
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");

    // Still serving.
    let (status, body) = request(
        &server.url,
        7,
        "tools/list",
        json!({"_meta": meta(false)}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 7);
    server.stop().await;
}

#[tokio::test]
async fn protocol_errors_use_the_2026_07_28_codes() {
    let (_sim, server) = setup(100, &[]).await;
    let (status, body) = request(
        &server.url,
        1,
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}, "_meta": meta(false)}),
        Some("no_such_tool"),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{status} {body}");

    let mut old = meta(false);
    old["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let body_text =
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta": old}}).to_string();
    let (status, body) = post(
        &server.url,
        &body_text,
        &[
            ("mcp-protocol-version", "1900-01-01"),
            ("mcp-method", "tools/list"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.to_string().contains("1900-01-01"), "{body}");

    // A header that disagrees with the body.
    let body_text =
        json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta": meta(false)}})
            .to_string();
    let (status, body) = post(
        &server.url,
        &body_text,
        &[
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "tools/call"),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!(-32020)),
        "{body}"
    );
    server.stop().await;
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused() {
    let (_sim, server) = setup(100, &[]).await;
    let list =
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": meta(false)}})
            .to_string();
    let modern = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/list"),
    ];

    let mut headers = modern.to_vec();
    headers.push(("host", "evil.example"));
    let (status, _) = post(&server.url, &list, &headers).await;
    assert_eq!(
        status, 403,
        "a foreign Host (DNS rebinding) must be refused"
    );

    let mut headers = modern.to_vec();
    headers.push(("origin", "http://evil.example"));
    let (status, _) = post(&server.url, &list, &headers).await;
    assert_eq!(status, 403, "a foreign Origin must be refused");

    let mut headers = modern.to_vec();
    headers.push(("origin", "http://localhost:3000"));
    let (status, _) = post(&server.url, &list, &headers).await;
    assert_eq!(status, 200, "a local Origin is fine");
    server.stop().await;
}

#[tokio::test]
async fn get_on_the_endpoint_is_not_allowed_for_modern_clients() {
    let (_sim, server) = setup(100, &[]).await;
    let response = reqwest::Client::new()
        .get(&server.url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    server.stop().await;
}

#[tokio::test]
async fn a_legacy_initialize_client_is_served_on_the_same_endpoint() {
    let (_sim, server) = setup(100, &["--inline-wait-ms", "10000"]).await;
    let client = legacy_http_client(&server.url).await;
    let version = client.peer_info().map(|i| i.protocol_version.to_string());
    assert_eq!(version.as_deref(), Some("2025-11-25"));
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 7);
    let task = structured(&complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 25}),
        )
        .await,
    ));
    assert_eq!(task["status"], "completed", "{task}");
    server.stop().await;
}

/// A one-message answer is sent with its length, not chunked: counting
/// the answer until it is sent must not change how it is framed.
#[tokio::test]
async fn a_json_answer_carries_its_content_length() {
    let (_sim, server) = setup(100, &[]).await;
    let response = tools_list_request(&reqwest::Client::new(), &server.url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("transfer-encoding").is_none(),
        "{:?}",
        response.headers()
    );
    let length: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let text = response.text().await.unwrap();
    assert_eq!(text.len(), length);
    assert!(serde_json::from_str::<Value>(&text).unwrap()["result"]["tools"].is_array());
    server.stop().await;
}

#[tokio::test]
async fn tools_list_fits_the_size_budget() {
    let (_sim, server) = setup(100, &[]).await;
    let (_, body) = request(
        &server.url,
        1,
        "tools/list",
        json!({"_meta": meta(false)}),
        None,
    )
    .await;
    let bytes = serde_json::to_vec(&body["result"]).unwrap().len();
    assert!(
        bytes <= 3_000,
        "the tools/list result is {bytes} bytes; the budget is 3,000"
    );
    let tools = &body["result"]["tools"];
    for tool in tools.as_array().unwrap() {
        assert!(
            tool["outputSchema"].is_object(),
            "{} has no outputSchema",
            tool["name"]
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_task_aware_client_gets_a_task_and_follows_it_with_tasks_get() {
    let (_sim, server) = setup(1_000, &["--inline-wait-ms", "0"]).await;
    let client = modern_http_client(
        &server.url,
        Declares {
            tasks: true,
            ..Default::default()
        },
    )
    .await;
    let created = match call(
        &client,
        "set_temperature",
        json!({"device_id": "ac-living", "temperature": 24}),
    )
    .await
    {
        CallToolResponse::Task(created) => created,
        other => panic!("expected a CreateTaskResult, got {other:?}"),
    };
    let id = created.task.task_id.clone();
    assert_eq!(created.task.status, TaskStatus::Working);
    let done = eventually("the task ends", async || {
        let got = client
            .get_task(GetTaskParams::new(id.clone()))
            .await
            .unwrap();
        match got.task.status().is_terminal() {
            true => Ok(got),
            false => Err(format!("{:?}", got.task.status())),
        }
    })
    .await;
    assert_eq!(done.task.status(), TaskStatus::Completed);
    let wire = serde_json::to_value(&done).unwrap();
    assert_eq!(wire["resultType"], "complete");
    assert_eq!(
        wire["result"]["structuredContent"]["result"]["observed"]["target_temperature"],
        json!(24.0),
        "{wire}"
    );

    // Cancelling an ended task is acknowledged and changes nothing.
    client
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let still = client.get_task(GetTaskParams::new(id)).await.unwrap();
    assert_eq!(still.task.status(), TaskStatus::Completed);
    server.stop().await;
}

#[tokio::test]
async fn tasks_methods_need_the_extension_and_a_known_id() {
    let (_sim, server) = setup(100, &[]).await;
    let unknown = "0123456789abcdef0123456789abcdef";
    let (status, body) = request(
        &server.url,
        1,
        "tasks/get",
        json!({"taskId": unknown, "_meta": meta(false)}),
        Some(unknown),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!(-32021)),
        "{body}"
    );

    let (_, body) = request(
        &server.url,
        2,
        "tasks/get",
        json!({"taskId": unknown, "_meta": meta(true)}),
        Some(unknown),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Task not found"),
        "{body}"
    );

    // Mcp-Name must carry the task id.
    let (status, body) = request(
        &server.url,
        3,
        "tasks/get",
        json!({"taskId": unknown, "_meta": meta(true)}),
        Some("other"),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!(-32020)),
        "{body}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_client_without_tasks_never_gets_a_create_task_result() {
    let (_sim, server) = setup(3_000, &["--inline-wait-ms", "0"]).await;
    let (_, body) = request(
        &server.url,
        1,
        "tools/call",
        json!({"name": "set_temperature", "arguments": {"device_id": "ac-living", "temperature": 24}, "_meta": meta(false)}),
        Some("set_temperature"),
    )
    .await;
    assert_ne!(body["result"]["resultType"], "task", "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["status"], "working",
        "{body}"
    );
    server.stop().await;
}

/// The official Python SDK (`mcp` 2.3) ends a legacy session with `DELETE`
/// and logs "Session termination failed" unless the answer is 200 or 204.
#[tokio::test]
async fn a_legacy_session_delete_is_answered_no_content() {
    let (_sim, server) = setup(100, &[]).await;
    let http = reqwest::Client::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "delete-test", "version": "1"}}});
    let response = http
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .expect("a legacy initialize opens a session")
        .to_str()
        .unwrap()
        .to_string();
    let delete = || {
        http.delete(&server.url)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
    };
    let response = delete().await.unwrap();
    assert_eq!(response.status().as_u16(), 204);
    assert!(response.bytes().await.unwrap().is_empty());
    // The session is gone: using it again is not found.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let response = http
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(list)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    // A DELETE without a session id is still refused, not "no content".
    let response = http
        .delete(&server.url)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_ne!(response.status().as_u16(), 204);
    server.stop().await;
}

/// A stateless `tools/call` or `tasks/get` that rmcp would accept is served
/// without rmcp's per-request service (`host/src/mcp/direct.rs`). Each
/// request here is sent twice: as a client sends it, which takes that
/// route, and with an `Accept` entry carrying a weight, which the direct
/// route leaves to rmcp. Both answers must be the same, status included;
/// `/metrics` shows which route each took.
#[tokio::test]
async fn the_direct_route_answers_as_rmcp_does() {
    let (_sim, server) = setup(100, &["--inline-wait-ms", "0"]).await;
    let unknown = "0123456789abcdef0123456789abcdef";
    let call = |name: &str, arguments: Value, tasks: bool| json!({"name": name, "arguments": arguments, "_meta": meta(tasks)});
    let created = request(
        &server.url,
        1,
        "tools/call",
        call(
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 22}),
            true,
        ),
        Some("set_temperature"),
    )
    .await;
    assert_eq!(created.1["result"]["resultType"], "task", "{created:?}");
    let task_id = created.1["result"]["taskId"].as_str().unwrap().to_string();
    let task = |tasks: bool, id: &str| json!({"taskId": id, "_meta": meta(tasks)});
    eventually("the task ends", async || {
        let (_, body) = request(
            &server.url,
            2,
            "tasks/get",
            task(true, &task_id),
            Some(&task_id),
        )
        .await;
        match body["result"]["status"].as_str() {
            Some("completed") => Ok(()),
            other => Err(format!("{other:?}: {body}")),
        }
    })
    .await;

    let cases = [
        (
            "tools/call",
            call("no_such_tool", json!({}), true),
            "no_such_tool".to_string(),
        ),
        (
            "tools/call",
            call("get_device_state", json!({}), true),
            "get_device_state".to_string(),
        ),
        (
            "tools/call",
            call("get_device_state", json!({"device_id": "nowhere"}), false),
            "get_device_state".to_string(),
        ),
        (
            "tools/call",
            call("list_devices", json!({}), false),
            "list_devices".to_string(),
        ),
        ("tasks/get", task(true, unknown), unknown.to_string()),
        ("tasks/get", task(true, &task_id), task_id.clone()),
    ];
    let http = reqwest::Client::new();
    let before = routes(&http, &server.url).await;
    for (i, (method, params, name)) in cases.iter().enumerate() {
        let body =
            json!({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).to_string();
        let headers = [
            ("mcp-protocol-version", MODERN),
            ("mcp-method", method),
            ("mcp-name", name.as_str()),
        ];
        let direct = post(&server.url, &body, &headers).await;
        let weighted = [&headers[..], &[("accept", "text/event-stream;q=1")]].concat();
        let through_rmcp = post(&server.url, &body, &weighted).await;
        assert_eq!(direct, through_rmcp, "{method} {params}");
    }
    let after = routes(&http, &server.url).await;
    let n = cases.len() as u64;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (n, n),
        "requests served (directly, through rmcp)"
    );
    server.stop().await;
}

/// MCP POSTs served so far: (directly, through rmcp).
async fn routes(http: &reqwest::Client, url: &str) -> (u64, u64) {
    let text = metrics_text(http, url).await;
    let count = |route: &str| {
        text.lines()
            .filter(|line| {
                line.starts_with("settle_mcp_requests_total")
                    && line.contains(&format!("route=\"{route}\""))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    (count("direct"), count("rmcp"))
}

/// A direct `get_device_state` passes every `settle::timeline` mark, in
/// the order `bench`'s timeline part reports, and settle's log shows them
/// when asked (`RUST_LOG`).
#[tokio::test]
async fn a_direct_call_passes_every_timeline_mark_in_order() {
    let sim = sim(Duration::from_millis(100)).await;
    let api = sim.base_url();
    let process = Process::start_env(
        &["--device-api", &api, "--plugin-config", FAST],
        &[("RUST_LOG", "info,settle::timeline=trace")],
    )
    .await;
    // The first call opens the device connection; the second takes it
    // from the pool, as every call at a steady rate does.
    for id in 1..=2 {
        let (status, body) = request(
            &process.url,
            id,
            "tools/call",
            json!({"name": "get_device_state", "arguments": {"device_id": "ac-living"}, "_meta": meta(false)}),
            Some("get_device_state"),
        )
        .await;
        assert_eq!(
            (status, &body["result"]["isError"]),
            (200, &json!(false)),
            "{body}"
        );
    }
    let stages = [
        "request head in",
        "request body read",
        "direct route chosen",
        "instance starts",
        "instance ready",
        "outbound exchange starts",
        "pooled connection taken",
        "answer head in",
        "answer body read",
        "plugin returned",
        "MCP answer built",
    ];
    eventually("the second call's marks are in the log", async || {
        let log = process.log();
        let marks: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("settle::timeline"))
            .filter_map(|l| stages.iter().copied().find(|s| l.ends_with(s)))
            .collect();
        let second = marks
            .iter()
            .rposition(|m| *m == stages[0])
            .map(|at| &marks[at..]);
        if second == Some(&stages[..]) {
            Ok(())
        } else {
            Err(format!("marks so far: {marks:?}"))
        }
    })
    .await;
}
