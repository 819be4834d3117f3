//! The audit trail (`settle://audit`, kept by the device plugin): a record
//! for each command as it ends (completed, failed, declined) and for one
//! the safety gate stopped, with the client that asked; filters; and
//! retention by count and by age.

use crate::common::*;
use device_sim::Fault;
use rmcp::model::{
    CallToolResponse, GetTaskParams, InputResponses, ReadResourceRequestParams, TaskStatus,
    UpdateTaskParams,
};
use serde_json::{Value, json};
use std::time::Duration;

async fn setup(extra: &[&str]) -> (device_sim::RunningSim, Server) {
    let sim = sim(Duration::from_millis(200)).await;
    let api = sim.base_url();
    let mut argv = vec![
        "--device-api",
        api.as_str(),
        "--plugin-config",
        FAST,
        "--inline-wait-ms",
        "0",
    ];
    argv.extend_from_slice(extra);
    let server = serve_http(&argv).await;
    (sim, server)
}

/// The trail's records, newest first, for a query (`""` for all).
async fn trail(client: &Client, query: &str) -> Vec<Value> {
    let read = client
        .read_resource(ReadResourceRequestParams::new(format!(
            "settle://audit{query}"
        )))
        .await
        .unwrap_or_else(|e| panic!("reading settle://audit{query}: {e}"));
    let text = serde_json::to_value(&read).unwrap()["contents"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let body: Value = serde_json::from_str(&text).unwrap();
    body["records"].as_array().unwrap().clone()
}

fn by_id<'a>(records: &'a [Value], id: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no audit record for {id} in {records:?}"))
}

async fn status_of(client: &Client, id: &str) -> String {
    let task = client
        .get_task(GetTaskParams::new(id.to_string()))
        .await
        .unwrap();
    serde_json::to_value(&task).unwrap()["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn completed_failed_gated_and_declined_commands_are_recorded() {
    let (sim, server) = setup(&[]).await;
    sim.sim().set_fault("ac-bedroom", Fault::Ignore).unwrap();
    let plain = modern_http_client(&server.url, Declares::default()).await;
    let asking = modern_http_client(
        &server.url,
        Declares {
            tasks: true,
            elicitation: true,
        },
    )
    .await;

    let completed = structured(&complete(
        call(
            &plain,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 25}),
        )
        .await,
    ))["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let failed = structured(&complete(
        call(
            &plain,
            "set_temperature",
            json!({"device_id": "ac-bedroom", "temperature": 21.5}),
        )
        .await,
    ))["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let gated = error_text(&complete(
        call(
            &plain,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 30}),
        )
        .await,
    ));
    assert!(gated.contains("nothing was sent"), "{gated}");
    let declined = match call(
        &asking,
        "set_temperature",
        json!({"device_id": "ac-bedroom", "temperature": 29}),
    )
    .await
    {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::InputRequired);
            created.task.task_id.clone()
        }
        other => panic!("expected a task waiting for confirmation, got {other:?}"),
    };
    let mut no = InputResponses::new();
    no.insert("confirm_1".to_string(), json!({"action": "decline"}));
    asking
        .update_task(UpdateTaskParams::new(declined.clone(), no))
        .await
        .unwrap();

    for id in [&completed, &failed, &declined] {
        eventually(&format!("task {id} ends"), async || {
            let status = status_of(&asking, id).await;
            match status.as_str() {
                "completed" | "failed" | "cancelled" => Ok(()),
                _ => Err(status),
            }
        })
        .await;
    }
    let records = trail(&plain, "").await;
    assert_eq!(records.len(), 4, "{records:#?}");
    for record in &records {
        assert_eq!(record["client"]["name"], "settle-tests", "{record}");
        assert_eq!(record["client"]["version"], "0", "{record}");
        assert_eq!(record["tool"], "set_temperature", "{record}");
        let accepted = record["acceptedAtMs"].as_u64().unwrap();
        let ended = record["endedAtMs"].as_u64().unwrap();
        assert!(accepted <= ended, "{record}");
        if let Some(sent) = record["sentAtMs"].as_u64() {
            assert!(accepted <= sent && sent <= ended, "{record}");
        }
    }
    let ended: Vec<u64> = records
        .iter()
        .map(|r| r["endedAtMs"].as_u64().unwrap())
        .collect();
    assert!(
        ended.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {ended:?}"
    );

    let done = by_id(&records, &completed);
    assert_eq!(done["outcome"], "completed", "{done}");
    assert_eq!(done["arguments"]["temperature"], json!(25), "{done}");
    assert_eq!(done["sent"]["target_temperature"], json!(25.0), "{done}");
    assert_eq!(
        done["observed"]["target_temperature"],
        json!(25.0),
        "{done}"
    );
    assert!(done["sentAtMs"].is_u64(), "{done}");

    let bad = by_id(&records, &failed);
    assert_eq!(bad["outcome"], "failed", "{bad}");
    assert_eq!(bad["reason"], "not_applied", "{bad}");
    assert_eq!(bad["sent"]["target_temperature"], json!(21.5), "{bad}");
    assert_eq!(bad["observed"]["target_temperature"], json!(26.0), "{bad}");

    let no = by_id(&records, &declined);
    assert_eq!(no["outcome"], "declined", "{no}");
    assert!(
        no["sent"].is_null() && no["sentAtMs"].is_null(),
        "not sent: {no}"
    );
    assert_eq!(no["arguments"]["temperature"], json!(29), "{no}");

    let stopped: Vec<&Value> = records.iter().filter(|r| r["outcome"] == "gated").collect();
    assert_eq!(stopped.len(), 1, "{records:#?}");
    let stopped = stopped[0];
    assert!(stopped["sent"].is_null(), "not sent: {stopped}");
    assert_eq!(stopped["reason"], "gate", "{stopped}");
    assert_eq!(stopped["arguments"]["temperature"], json!(30), "{stopped}");
    assert!(
        stopped["message"]
            .as_str()
            .unwrap()
            .contains("needs confirmation"),
        "{stopped}"
    );

    // Filters.
    assert_eq!(trail(&plain, "?status=gated").await.len(), 1);
    let bedroom = trail(&plain, "?device=ac-bedroom").await;
    assert_eq!(bedroom.len(), 2, "{bedroom:#?}");
    assert!(bedroom.iter().all(|r| r["deviceId"] == "ac-bedroom"));
    let newest = ended[0];
    assert_eq!(trail(&plain, &format!("?since={newest}")).await.len(), 1);
    assert_eq!(trail(&plain, "?limit=2").await.len(), 2);
    // A bad filter is an error that names it, and the server keeps serving.
    let err = plain
        .read_resource(ReadResourceRequestParams::new("settle://audit?status=done"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("status must be"), "{err}");
    assert_eq!(trail(&plain, "").await.len(), 4);

    // `settle tasks`, through the running server.
    let listed = tasks_cli(&server.url, &["list", "--json"]).await;
    let listed: Vec<Value> = serde_json::from_str(&listed).expect("--json prints a JSON array");
    assert_eq!(listed, records, "the CLI shows the trail as served");
    let listed = tasks_cli(
        &server.url,
        &[
            "list",
            "--json",
            "--status",
            "failed",
            "--device",
            "ac-bedroom",
            "--since",
            "1h",
        ],
    )
    .await;
    let listed: Vec<Value> = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["id"], failed.as_str());
    let table = tasks_cli(&server.url, &["list"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ENDED (UTC)"), "{table}");
    assert_eq!(lines.len(), 5, "{table}");
    assert!(
        table.contains("not sent") && table.contains("gated"),
        "{table}"
    );
    assert!(table.contains("settle-tests 0"), "{table}");
    let shown = tasks_cli(&server.url, &["show", &completed, "--json"]).await;
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["outcome"], "completed", "{shown}");
    server.stop().await;
}

/// Runs `settle tasks ARGS --url URL` and returns what it printed; it must
/// succeed.
async fn tasks_cli(url: &str, args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .arg("tasks")
        .args(args)
        .args(["--url", url])
        .output()
        .await
        .expect("settle tasks runs");
    assert!(
        output.status.success(),
        "settle tasks {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Gated commands are the cheapest to record: nothing is sent or waited for.
async fn gate(client: &Client, temperature: u32) {
    let text = error_text(&complete(
        call(
            client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": temperature}),
        )
        .await,
    ));
    assert!(text.contains("needs confirmation"), "{text}");
}

#[tokio::test]
async fn retention_keeps_the_newest_records_up_to_the_cap() {
    let (_sim, server) = setup(&["--plugin-config", "audit_max_records=2"]).await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    for temperature in [29, 30, 17] {
        gate(&client, temperature).await;
    }
    let kept: Vec<Value> = trail(&client, "")
        .await
        .iter()
        .map(|r| r["arguments"]["temperature"].clone())
        .collect();
    assert_eq!(kept, [json!(17), json!(30)]);
    // A filter the plugin does not know is its error, passed on; nothing
    // is printed on stdout.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .args([
            "tasks",
            "list",
            "--json",
            "--status",
            "done",
            "--url",
            &server.url,
        ])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("status must be"), "{stderr}");
    server.stop().await;
}

#[tokio::test]
async fn retention_drops_records_older_than_the_limit() {
    let (_sim, server) = setup(&["--plugin-config", "audit_retention_ms=1000"]).await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    gate(&client, 29).await;
    assert_eq!(trail(&client, "").await.len(), 1);
    // The age limit is the thing under test: wait for it to pass.
    eventually("the record ages out", async || {
        match trail(&client, "").await.len() {
            0 => Ok(()),
            n => Err(format!("{n} records")),
        }
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn settle_tasks_watch_prints_each_new_record_as_it_comes() {
    use tokio::io::AsyncBufReadExt;
    let (_sim, server) = setup(&[]).await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    gate(&client, 29).await;
    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["tasks", "watch", "--json", "--url", &server.url])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("settle tasks watch starts");
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(DEADLINE, lines.next_line())
            .await
            .expect("watch printed a record in time")
            .unwrap()
            .expect("watch is still running");
        serde_json::from_str(&line).unwrap()
    };
    // What was there when it started, then what comes after, once each.
    assert_eq!(next().await["arguments"]["temperature"], json!(29));
    gate(&client, 30).await;
    assert_eq!(next().await["arguments"]["temperature"], json!(30));
    gate(&client, 17).await;
    assert_eq!(next().await["arguments"]["temperature"], json!(17));
    watch.kill().await.unwrap();
    server.stop().await;
}
