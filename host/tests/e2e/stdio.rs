//! The binary over stdio: a smoke test through rmcp's child-process client,
//! and raw lines for framing and malformed input.

use crate::common::*;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn settle_command(api: &str) -> tokio::process::Command {
    let plugin = plugin_path();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"));
    command
        .args(["serve", "--stdio", "--store", "memory", "--device-api", api])
        .args([
            "--plugin",
            plugin.to_str().unwrap(),
            "--plugin-config",
            FAST,
        ])
        .env("NO_COLOR", "1")
        .env("SETTLE_CACHE_DIR", cache_dir());
    command
}

#[tokio::test]
async fn an_rmcp_client_runs_a_verified_command_over_stdio() {
    let sim = sim(Duration::from_millis(300)).await;
    let command = settle_command(&sim.base_url()).configure(|c| {
        c.stderr(Stdio::null());
    });
    let transport = TokioChildProcess::new(command).unwrap();
    let client = ClientConfig::new(ClientCapabilities::default(), Implementation::new("t", "0"))
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("stdio client connects");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 7);
    let task = structured(&complete(
        client
            .call_tool_once(
                rmcp::model::CallToolRequestParams::new("set_temperature").with_arguments(args(
                    json!({"device_id": "ac-bedroom", "temperature": 25.5}),
                )),
            )
            .await
            .unwrap(),
    ));
    assert_eq!(task["status"], "completed", "{task}");
    client.cancel().await.unwrap();
}

/// Writes one line and reads the next response line.
async fn exchange(
    stdin: &mut tokio::process::ChildStdin,
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    line: &str,
) -> Value {
    stdin.write_all(line.as_bytes()).await.unwrap();
    stdin.write_all(b"\n").await.unwrap();
    stdin.flush().await.unwrap();
    let answer = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("an answer in time")
        .unwrap()
        .expect("a line");
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"))
}

#[tokio::test]
async fn malformed_lines_get_errors_and_the_session_goes_on() {
    let sim = sim(Duration::from_millis(100)).await;
    let mut child = settle_command(&sim.base_url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });

    // A notification first must not end the session.
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await
        .unwrap();

    let answer = exchange(&mut stdin, &mut lines, "this is not json").await;
    assert_eq!(answer["error"]["code"], -32700, "{answer}");

    let answer = exchange(
        &mut stdin,
        &mut lines,
        r#"{"jsonrpc":"2.0","id":9,"method":7}"#,
    )
    .await;
    assert_eq!(
        (answer["error"]["code"].clone(), answer["id"].clone()),
        (json!(-32600), json!(9)),
        "{answer}"
    );

    let discover =
        json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": meta}});
    let answer = exchange(&mut stdin, &mut lines, &discover.to_string()).await;
    assert_eq!(
        answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "settle"
    );

    let bad_args = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"set_temperature","arguments":{"device_id":"ac-living"},"_meta": meta}});
    let answer = exchange(&mut stdin, &mut lines, &bad_args.to_string()).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("temperature is required")
    );

    let list = json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta": meta}});
    let answer = exchange(&mut stdin, &mut lines, &list.to_string()).await;
    assert_eq!(
        answer["result"]["tools"].as_array().unwrap().len(),
        7,
        "{answer}"
    );

    // Closing stdin ends the process cleanly.
    drop(stdin);
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_legacy_client_initializes_over_stdio() {
    let sim = sim(Duration::from_millis(100)).await;
    let command = settle_command(&sim.base_url()).configure(|c| {
        c.stderr(Stdio::null());
    });
    let transport = TokioChildProcess::new(command).unwrap();
    let client = ClientConfig::new(ClientCapabilities::default(), Implementation::new("t", "0"))
        .with_protocol_version(ProtocolVersion::V_2025_06_18)
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .expect("legacy stdio client connects");
    let info = client.peer_info().unwrap();
    assert_eq!(info.protocol_version.to_string(), "2025-06-18");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 7);
    client.cancel().await.unwrap();
}
