//! settle as its own process, for the benchmarks that measure it from
//! outside: the release binary, the release plugin, a store in a temporary
//! directory, and the URL it says it serves at.

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::process::Child;

/// The workspace's `target/` directory.
pub fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// A running `settle serve`, killed when dropped.
pub struct SettleProcess {
    pub url: String,
    _child: Child,
}

impl SettleProcess {
    /// The process id, for a profiler to attach to.
    #[allow(dead_code, reason = "only bench's --profile prints it")]
    pub fn pid(&self) -> u32 {
        self._child.id().unwrap_or(0)
    }
}

/// Starts `target/release/settle serve` on an ephemeral port against
/// `api`, its store in `store_dir`, with `extra` arguments, and waits until
/// it serves (at most 60 s).
pub async fn spawn_settle(
    api: &str,
    store_dir: &Path,
    extra: &[&str],
) -> anyhow::Result<SettleProcess> {
    let settle = target_dir().join("release/settle");
    let plugin = target_dir().join("wasm32-wasip2/release/settle_devices.wasm");
    let mut command = tokio::process::Command::new(&settle);
    // `BENCH_SETTLE_THREADS=N`: settle's runtime with N worker threads,
    // leaving the benchmark's own runtime as it is.
    if let Ok(threads) = std::env::var("BENCH_SETTLE_THREADS") {
        command.env("TOKIO_WORKER_THREADS", threads);
    }
    let mut child = command
        .args(["serve", "--http", "127.0.0.1:0", "--device-api", api])
        .arg("--plugin")
        .arg(&plugin)
        .arg("--store")
        .arg(store_dir.join("settle.redb"))
        // The per-tenant request limit protects a runner; a benchmark of
        // throughput must not measure it (a fast machine passes 5,000/s).
        .args(["--max-requests-per-second", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", settle.display()))?;
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    // What settle said before it served, so a start that fails says why.
    let mut said = Vec::new();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("settle did not start")??;
        let Some(line) = line else {
            anyhow::bail!(
                "{} exited before serving (is it older than the plugin? `make bench` builds it):\n{}",
                settle.display(),
                said.join("\n")
            );
        };
        if let Some(rest) = line.split("serving MCP at ").nth(1) {
            break rest.trim().to_string();
        }
        said.push(line);
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(SettleProcess { url, _child: child })
}
