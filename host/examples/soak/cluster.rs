//! The processes a soak kills: two `settle` replicas and the Redis they
//! share, each restartable on the same port and the same data, so clients
//! keep their URLs and the store keeps every acknowledged write.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// How long a process may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A free loopback port (bound, read, released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Sends `signal` (`KILL`, `TERM`) to a process id.
fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status();
}

/// Spawns `command`, copies its output to `log` (appending, so a restart
/// keeps the earlier lives' lines) and waits for a line containing `ready`.
async fn spawn_ready(
    mut command: tokio::process::Command,
    ready: &'static str,
    log: &Path,
) -> anyhow::Result<tokio::process::Child> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let (found, mut seen) = tokio::sync::mpsc::channel::<()>(1);
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let (found, mut file) = (found.clone(), file.try_clone()?);
        tokio::spawn(async move {
            use std::io::Write;
            let mut lines = tokio::io::BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = writeln!(file, "{line}");
                if line.contains(ready) {
                    let _ = found.try_send(());
                }
            }
        });
    }
    drop(found);
    // `recv` gives `None` at once if the process exits first (its output
    // ends, and with it every sender).
    match tokio::time::timeout(READY_WITHIN, seen.recv()).await {
        Ok(Some(())) => Ok(child),
        _ => bail!(
            "{command:?} did not print {ready:?} within {READY_WITHIN:?}; see {}",
            log.display()
        ),
    }
}

/// Kills a child with SIGKILL and reaps it.
async fn kill9(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        signal(pid, "KILL");
    }
    let _ = child.wait().await;
}

/// A redis-server persisting every write before it answers
/// (`appendonly yes`, `appendfsync always`): the durability the Redis
/// store promises for an acknowledged task.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Redis {
    pub async fn start(dir: &Path) -> anyhow::Result<Redis> {
        let mut redis = Redis {
            port: free_port()?,
            dir: dir.join("redis"),
            child: None,
        };
        std::fs::create_dir_all(&redis.dir)?;
        redis.spawn().await?;
        Ok(redis)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let mut command = tokio::process::Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(&self.dir);
        let log = self.dir.join("redis.log");
        self.child = Some(
            spawn_ready(command, "Ready to accept connections", &log)
                .await
                .context("redis-server (install it: make redis)")?,
        );
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// `kill -9`, then a start on the same port and append-only file.
    pub async fn kill_and_restart(&mut self, down_for: Duration) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            kill9(&mut child).await;
        }
        tokio::time::sleep(down_for).await;
        self.spawn().await
    }
}

/// What every replica is started with.
#[derive(Clone, Debug)]
pub struct ReplicaSpec {
    /// The `settle` binary.
    pub binary: PathBuf,
    /// `serve` arguments after `--http ADDR`.
    pub args: Vec<String>,
    /// `SETTLE_CACHE_DIR` for the compiled plugin (`None`: settle's default).
    pub cache_dir: Option<PathBuf>,
}

/// One `settle serve` on a fixed loopback port.
pub struct Replica {
    pub port: u16,
    spec: ReplicaSpec,
    log: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Replica {
    pub async fn start(spec: &ReplicaSpec, log: PathBuf) -> anyhow::Result<Replica> {
        let mut replica = Replica {
            port: free_port()?,
            spec: spec.clone(),
            log,
            child: None,
        };
        replica.spawn().await?;
        Ok(replica)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let mut command = tokio::process::Command::new(&self.spec.binary);
        command
            .args(["serve", "--http", &format!("127.0.0.1:{}", self.port)])
            .args(&self.spec.args)
            .env("NO_COLOR", "1");
        if let Some(dir) = &self.spec.cache_dir {
            command.env("SETTLE_CACHE_DIR", dir);
        }
        // A killed replica's port can stay busy for a moment; try again a
        // few times.
        let mut tries = 0;
        loop {
            tries += 1;
            match spawn_ready(command_clone(&command), "serving MCP at", &self.log).await {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(e) if tries >= 10 => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// `kill -9`, down for `down_for`, then a start on the same port.
    pub async fn kill_and_restart(&mut self, down_for: Duration) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            kill9(&mut child).await;
        }
        tokio::time::sleep(down_for).await;
        self.spawn().await
    }

    /// A clean stop at the end of the run.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                signal(pid, "TERM");
            }
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                kill9(&mut child).await;
            }
        }
    }
}

/// A fresh command with the same program, arguments and environment
/// (`tokio::process::Command` is not `Clone`).
fn command_clone(command: &tokio::process::Command) -> tokio::process::Command {
    let std = command.as_std();
    let mut copy = tokio::process::Command::new(std.get_program());
    copy.args(std.get_args());
    for (key, value) in std.get_envs() {
        match value {
            Some(value) => copy.env(key, value),
            None => copy.env_remove(key),
        };
    }
    copy
}
