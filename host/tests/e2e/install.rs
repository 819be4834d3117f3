//! One binary with the device plugin inside (`host/build.rs`): served with
//! no `--plugin`, overridden by `--plugin`, named by `settle --version`;
//! and the same for a binary built the way `cargo install` builds it.

use crate::common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The SHA-256 `settle --version` names, from a binary's output.
fn version_digest(binary: &Path) -> String {
    let output = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .expect("settle --version runs");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("built-in plugin settle-devices "),
        "--version does not name the built-in plugin: {text}"
    );
    text.split("component sha256 ")
        .nth(1)
        .unwrap_or_else(|| panic!("--version names no hash: {text}"))
        .trim()
        .trim_end_matches(')')
        .to_string()
}

/// The built-in plugin's hash, computed here from the bytes the library
/// embeds.
fn embedded_digest() -> String {
    use sha2::Digest;
    let bytes = settle::builtin::bytes().expect("the test build embeds a plugin");
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// Serves `binary` with no `--plugin` and runs one verified command.
async fn serves_the_builtin_plugin(binary: &Path) {
    let sim = sim(Duration::from_millis(100)).await;
    let api = sim.base_url();
    let cache = cache_dir();
    let process = Process::start_binary(
        binary,
        &[
            "--device-api",
            &api,
            "--plugin-config",
            FAST,
            "--store",
            "memory",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
    )
    .await;
    let client = modern_http_client(&process.url, Declares::default()).await;
    let tools = tool_names(&client).await;
    assert!(tools.contains(&"set_temperature".to_string()), "{tools:?}");
    let devices = structured(&complete(call(&client, "list_devices", json!({})).await));
    assert!(devices.to_string().contains("ac-living"), "{devices}");
    let task = structured(&complete(
        call(
            &client,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 25}),
        )
        .await,
    ));
    let id = task["taskId"].as_str().unwrap().to_string();
    eventually("the command completes", async || {
        let task = structured(&complete(
            call(&client, "get_task", json!({"task_id": id})).await,
        ));
        match task["status"].as_str() {
            Some("completed") => Ok(()),
            _ => Err(task.to_string()),
        }
    })
    .await;
    assert!(
        process.log().contains("builtin"),
        "the log does not say the built-in plugin serves:\n{}",
        process.log()
    );
}

#[tokio::test]
async fn the_binary_serves_its_builtin_plugin_with_no_plugin_flag() {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_settle"));
    assert_eq!(version_digest(&binary), embedded_digest());
    serves_the_builtin_plugin(&binary).await;
}

#[tokio::test]
async fn the_plugin_flag_overrides_the_builtin_plugin() {
    let hello = hello_plugin_path();
    let cache = cache_dir();
    let process = Process::start_with(&[
        "--plugin",
        hello.to_str().unwrap(),
        "--store",
        "memory",
        "--cache-dir",
        cache.to_str().unwrap(),
    ])
    .await;
    let client = modern_http_client(&process.url, Declares::default()).await;
    let tools = tool_names(&client).await;
    assert_eq!(tools, ["hello"]);
}

/// `make install-check` builds `settle` with `cargo install --locked --debug
/// --path host` first and names it in `SETTLE_INSTALLED_BINARY`; without it
/// (`make test`, a plain `cargo test`) there is no such binary and the test
/// says it did nothing.
#[tokio::test]
async fn the_installed_binary_serves_its_builtin_plugin() {
    let Some(binary) = std::env::var_os("SETTLE_INSTALLED_BINARY") else {
        eprintln!(
            "SKIPPED: SETTLE_INSTALLED_BINARY is not set (`make install-check` builds the installed binary and runs this test)"
        );
        return;
    };
    let binary = PathBuf::from(binary);
    assert!(binary.is_file(), "{} does not exist", binary.display());
    // Built from the same sources and the same plugin as this test.
    assert_eq!(version_digest(&binary), embedded_digest());
    serves_the_builtin_plugin(&binary).await;
}
