//! The runner on a disk that fails: `settle` as its own process with
//! `disk/failing_disk.c` preloaded, so its fsyncs fail with EIO, or its
//! writes with ENOSPC, while the test says so. A command then is refused
//! with the reason and never reaches the device, readiness says why, and
//! once the disk heals the runner opens its store again by itself, with
//! nothing it acknowledged lost, and the task in flight through the outage
//! carries on.

use crate::common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Builds the preload with the system's C compiler (the one Rust links
/// with) into `dir`.
fn failing_disk_library(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/disk/failing_disk.c");
    let library = dir.join("failing_disk.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&library)
        .arg(&source)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("{compiler} (the C compiler Rust links with) runs: {e}"));
    assert!(built.success(), "{compiler} built {}", source.display());
    library
}

/// How the disk fails, as the preload makes it.
#[derive(Clone, Copy)]
enum Fault {
    /// fsync and fdatasync fail with EIO: a dying disk.
    FailingSync,
    /// pwrite fails with ENOSPC: a full disk.
    Full,
}

impl Fault {
    /// The preload's variable naming the file whose existence turns it on.
    fn variable(self) -> &'static str {
        match self {
            Fault::FailingSync => "FAILING_SYNC_WHILE",
            Fault::Full => "FULL_DISK_WHILE",
        }
    }

    /// What the operating system says, which the caller must hear.
    fn reason(self) -> &'static str {
        match self {
            Fault::FailingSync => "Input/output error",
            Fault::Full => "No space left on device",
        }
    }
}

async fn readiness(url: &str) -> (u16, String) {
    let url = url.replace("/mcp", "/readyz");
    let response = reqwest::get(&url).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_failing_disk_refuses_commands_with_the_reason_and_the_runner_recovers_when_it_heals() {
    refuses_then_recovers(Fault::FailingSync).await;
}

#[tokio::test]
async fn a_full_disk_refuses_commands_with_the_reason_and_the_runner_recovers_when_space_returns() {
    refuses_then_recovers(Fault::Full).await;
}

async fn refuses_then_recovers(fault: Fault) {
    let dir = tempfile::tempdir().unwrap();
    let library = failing_disk_library(dir.path());
    let failing = dir.path().join("the disk is failing");
    let store = dir.path().join("settle.redb");
    let sim = sim(Duration::from_millis(300)).await;
    let api = sim.base_url();
    let argv = [
        "--device-api",
        api.as_str(),
        "--store",
        store.to_str().unwrap(),
        "--inline-wait-ms",
        "0",
        "--plugin-config",
        FAST,
    ];
    let server = Process::start_env(
        &argv,
        &[
            ("LD_PRELOAD", library.to_str().unwrap()),
            (fault.variable(), failing.to_str().unwrap()),
        ],
    )
    .await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    let command = |temperature: f64| {
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-bedroom", "temperature": temperature}),
        )
    };
    let before = structured(&complete(command(21.0).await));
    let before = before["taskId"].as_str().unwrap().to_string();
    assert_eq!(wait_for_end(&client, &before).await["status"], "completed");
    let sent = sim_counts(&sim, "ac-bedroom").0;
    // A task still working when the disk fails: its device acts meanwhile.
    let during = structured(&complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 19}),
        )
        .await,
    ));
    let during = during["taskId"].as_str().unwrap().to_string();

    std::fs::write(&failing, b"").unwrap();
    let refused = client
        .call_tool_once(
            rmcp::model::CallToolRequestParams::new("set_temperature")
                .with_arguments(args(json!({"device_id": "ac-bedroom", "temperature": 22}))),
        )
        .await;
    let refused = format!("{refused:?}");
    assert!(
        refused.contains("could not be put on disk") && refused.contains(fault.reason()),
        "the caller hears why: {refused}\n{}",
        server.log()
    );
    assert_eq!(
        sim_counts(&sim, "ac-bedroom").0,
        sent,
        "nothing reached the device"
    );
    let (status, why) = readiness(&server.url).await;
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("settle.redb"), "{why}");
    assert!(
        server
            .log()
            .contains("reads and writes fail until it is opened again"),
        "{}",
        server.log()
    );

    // The device acts on the task in flight while the disk still fails
    // (the runner claims no wake then, so the task waits).
    let device = format!("{api}/_sim/devices/ac-living");
    eventually("ac-living acts during the outage", async || {
        let state: serde_json::Value = reqwest::get(&device)
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        match state["settled"].as_array().map(Vec::len) {
            Some(1..) => Ok(()),
            _ => Err(state.to_string()),
        }
    })
    .await;
    std::fs::remove_file(&failing).unwrap();
    eventually(
        "the runner opens its store again",
        async || match readiness(&server.url).await {
            (200, _) => Ok(()),
            (status, why) => Err(format!("{status} {why}")),
        },
    )
    .await;
    let healed = std::time::Instant::now();
    assert_eq!(
        wait_for_end(&client, &before).await["status"],
        "completed",
        "the task it acknowledged before is still there"
    );
    let resumed = wait_for_end(&client, &during).await;
    assert_eq!(
        resumed["status"], "completed",
        "the task in flight resumes: {resumed}"
    );
    // An advance that failed while the disk did is retried within seconds,
    // not when its claim's lease (30 s here) ends.
    eprintln!(
        "resumed {:?} after the store was ready again",
        healed.elapsed()
    );
    assert!(
        healed.elapsed() < Duration::from_secs(10),
        "resumed {:?} after the store was ready again\n{}",
        healed.elapsed(),
        server.log()
    );
    let after = structured(&complete(command(23.0).await));
    let after = after["taskId"].as_str().unwrap().to_string();
    let done = wait_for_end(&client, &after).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.log());
    assert_eq!(sim_counts(&sim, "ac-bedroom").0, sent + 1);
}
