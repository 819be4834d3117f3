//! Smoke tests of the `device-sim` binary: flags and variables reach the simulator, the
//! "listening" line appears on stdout, bad flags fail with a message.

mod common;

use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;

const VARS: &[&str] = &[
    "DEVICE_SIM_ADDR",
    "DEVICE_SIM_TOKEN",
    "DEVICE_SIM_DELAY_MS",
    "DEVICE_SIM_JITTER_MS",
    "DEVICE_SIM_FAULT",
    "DEVICE_SIM_DEVICES",
    "DEVICE_SIM_HIDE_FIELD",
];

/// The binary with a clean `DEVICE_SIM_*` environment.
fn device_sim() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_device-sim"));
    for var in VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Reads stderr after the process ended, for failure messages.
async fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s).await;
    }
    s
}

#[tokio::test]
async fn the_binary_announces_its_address_and_honours_flags_and_variables() {
    let mut child = device_sim()
        .args([
            "--addr",
            "127.0.0.1:0",
            "--devices",
            "3",
            "--hide-field",
            "ac-00001=mode",
        ])
        .env("DEVICE_SIM_TOKEN", "tok")
        .env("DEVICE_SIM_FAULT", "ac-00000=offline,ac-00002=latency:1")
        .spawn()
        .expect("binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = match timeout(common::DEADLINE, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        other => {
            let _ = child.kill().await;
            panic!(
                "no listening line ({other:?}); stderr: {}",
                stderr_of(&mut child).await
            );
        }
    };
    let base = line
        .strip_prefix("device-sim listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");

    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let get = |path: &str, token: Option<&str>| {
        let mut req = http.get(format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(get("/api/v1/devices", None).await.unwrap().status(), 401);
    let list: serde_json::Value = get("/api/v1/devices", Some("tok"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<_> = list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [json!("ac-00000"), json!("ac-00001"), json!("ac-00002")]
    );
    let s: serde_json::Value = get("/api/v1/devices/ac-00000/sensors", Some("tok"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(s["online"], false);
    let s: serde_json::Value = get("/api/v1/devices/ac-00001/sensors", Some("tok"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(s.get("mode").is_none(), "{s}");
    let view: serde_json::Value = get("/_sim/devices/ac-00002", None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["faults"], json!([{"kind":"latency","ms":1}]));
    assert_eq!(view["delay_ms"], 4000);

    child.kill().await.expect("binary stops");
}

#[tokio::test]
async fn a_fault_for_an_unknown_device_stops_the_binary_with_a_message() {
    let out = device_sim()
        .args(["--addr", "127.0.0.1:0", "--fault", "ac-garage=offline"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown device `ac-garage`"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing announced: {:?}", out.stdout);
}

#[tokio::test]
async fn a_malformed_flag_is_rejected_by_the_parser() {
    let out = device_sim()
        .args(["--fault", "ac-living=clamp:warm"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error code");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("clamp parameter must be MIN-MAX (e.g. 18-28) or `round`, got `warm`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn help_documents_every_flag_and_its_variable() {
    let out = device_sim().arg("--help").output().await.unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--addr",
        "--token",
        "--delay-ms",
        "--jitter-ms",
        "--fault",
        "--devices",
        "--hide-field",
    ] {
        assert!(help.contains(flag), "{flag} missing from help:\n{help}");
    }
    for var in VARS {
        assert!(help.contains(var), "{var} missing from help:\n{help}");
    }
}
