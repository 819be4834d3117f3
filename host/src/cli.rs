//! The command line. Every flag also reads a `SETTLE_*` environment
//! variable, so a client config can pass secrets without putting them in
//! `ps` output.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Where `make build` leaves the device plugin.
pub const DEFAULT_PLUGIN: &str = "target/wasm32-wasip2/release/settle_devices.wasm";

#[derive(Parser, Debug)]
#[command(
    name = "settle",
    version,
    about = "Device tools for AI agents that tell the truth: every command is an MCP task that \
             completes only when the device's own sensors show the new state."
)]
/// `settle`'s arguments.
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve MCP over stdio (the default) or Streamable HTTP.
    Serve(Box<ServeArgs>),
    /// Make a running `settle serve` reload every tenant's plugin (sends it
    /// SIGHUP). A plugin that fails to load is refused and the old one keeps
    /// serving; the server's log says which.
    Reload(ReloadArgs),
}

/// `settle reload`.
#[derive(Args, Debug, Clone)]
pub struct ReloadArgs {
    /// The pid file `settle serve --pid-file` wrote.
    #[arg(
        long,
        env = "SETTLE_PID_FILE",
        value_name = "PATH",
        required_unless_present = "pid"
    )]
    pub pid_file: Option<PathBuf>,
    /// The server's process id, instead of a pid file.
    #[arg(long, conflicts_with = "pid_file")]
    pub pid: Option<i32>,
}

/// `settle serve`.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Serve one client over stdin/stdout (the default). Logs go to stderr.
    #[arg(long, conflicts_with = "http")]
    pub stdio: bool,

    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio. Binding to
    /// anything but localhost also needs --allowed-host.
    #[arg(long, env = "SETTLE_HTTP", value_name = "ADDR")]
    pub http: Option<SocketAddr>,

    /// A tenants file (TOML): one `[tenant.NAME]` table per tenant with its
    /// plugin, device API, tokens, outbound hosts, limits and namespace.
    /// HTTP then serves each tenant at /t/NAME/mcp behind its bearer token.
    /// Without one, the flags below describe the single default tenant.
    #[arg(
        long,
        env = "SETTLE_CONFIG",
        value_name = "PATH",
        conflicts_with_all = ["plugin", "device_api", "device_token", "driver", "device_profile", "allow_outbound", "plugin_config", "memory_mib", "call_timeout_ms"]
    )]
    pub config: Option<PathBuf>,

    /// With --config: serve only this tenant (stdio serves exactly one).
    #[arg(long, env = "SETTLE_TENANT", value_name = "NAME")]
    pub tenant: Option<String>,

    /// Write the process id here (removed on exit), for `settle reload`.
    #[arg(long, env = "SETTLE_PID_FILE", value_name = "PATH")]
    pub pid_file: Option<PathBuf>,

    /// The plugin component to load.
    #[arg(long, env = "SETTLE_PLUGIN", value_name = "PATH", default_value = DEFAULT_PLUGIN)]
    pub plugin: PathBuf,

    /// Base URL of the device API the plugin talks to.
    #[arg(
        long,
        env = "SETTLE_DEVICE_API",
        value_name = "URL",
        default_value = "http://127.0.0.1:8081"
    )]
    pub device_api: String,

    /// The kind of device API: `sim` (settle's simulator and APIs shaped
    /// like it), `profile` (an API a --device-profile describes) or
    /// `homeassistant` (climate entities through Home
    /// Assistant's REST API; --device-api is its base URL and
    /// --device-token a long-lived access token).
    #[arg(long, env = "SETTLE_DRIVER", value_name = "DRIVER", default_value = "sim", value_parser = ["sim", "profile", "homeassistant"])]
    pub driver: String,

    /// A device profile (JSON) describing an HTTP device API, for
    /// `--driver profile` (which it implies); see profiles/.
    #[arg(long, env = "SETTLE_DEVICE_PROFILE", value_name = "PATH")]
    pub device_profile: Option<PathBuf>,

    /// Bearer token for the device API. Prefer the environment variable: a
    /// flag is visible to other users in the process list.
    #[arg(
        long,
        env = "SETTLE_DEVICE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub device_token: Option<String>,

    /// Where tasks and schedules are kept: a redb file path (one runner), a
    /// redis://HOST:PORT/DB URL (any number of replicas sharing it; run
    /// Redis with appendonly yes), or `memory` (lost on exit; for tests).
    #[arg(
        long,
        env = "SETTLE_STORE",
        value_name = "PATH",
        default_value = "settle.redb"
    )]
    pub store: String,

    /// Origins the plugin may send HTTP requests to, as scheme://host[:port].
    /// Default: the device API's origin alone. Repeat or comma-separate.
    #[arg(
        long,
        env = "SETTLE_ALLOW_OUTBOUND",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    pub allow_outbound: Vec<String>,

    /// Extra plugin settings, KEY=VALUE (e.g. settle_window_ms=10000,
    /// poll_interval_ms=500, safe_max_temperature=27). Repeat or
    /// comma-separate.
    #[arg(long = "plugin-config", env = "SETTLE_PLUGIN_CONFIG", value_name = "KEY=VALUE", value_delimiter = ',', value_parser = parse_setting)]
    pub plugin_config: Vec<(String, String)>,

    /// How long a command waits for its task to end before answering with
    /// the unfinished task, in milliseconds.
    #[arg(
        long,
        env = "SETTLE_INLINE_WAIT_MS",
        value_name = "MS",
        default_value_t = 2000
    )]
    pub inline_wait_ms: u64,

    /// Wall-time limit of one plugin call, in milliseconds.
    #[arg(
        long,
        env = "SETTLE_CALL_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 15_000
    )]
    pub call_timeout_ms: u64,

    /// How long a replica owns a due task it took, in milliseconds. If it
    /// dies, another replica takes the task when this runs out. Must exceed
    /// --call-timeout-ms.
    #[arg(
        long,
        env = "SETTLE_LEASE_MS",
        value_name = "MS",
        default_value_t = 30_000
    )]
    pub lease_ms: u64,

    /// Where compiled plugins are cached, so that a start or a swap skips
    /// compiling. Default: $XDG_CACHE_HOME/settle or ~/.cache/settle;
    /// `none` compiles every time.
    #[arg(long, env = "SETTLE_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<String>,

    /// Linear memory limit of one plugin instance, in MiB.
    #[arg(
        long,
        env = "SETTLE_MEMORY_MIB",
        value_name = "MIB",
        default_value_t = 64
    )]
    pub memory_mib: usize,

    /// Extra accepted HTTP Host names (localhost, 127.0.0.1 and ::1 always
    /// are). Repeat or comma-separate.
    #[arg(
        long,
        env = "SETTLE_ALLOWED_HOST",
        value_name = "HOST",
        value_delimiter = ','
    )]
    pub allowed_host: Vec<String>,

    /// Extra accepted HTTP Origin values, e.g. https://app.example.com
    /// (local origins always are). Repeat or comma-separate.
    #[arg(
        long,
        env = "SETTLE_ALLOWED_ORIGIN",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    pub allowed_origin: Vec<String>,
}

fn parse_setting(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn settings_must_be_key_value() {
        assert_eq!(parse_setting("a=1"), Ok(("a".into(), "1".into())));
        assert!(parse_setting("a").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_setting("=1").is_err());
    }

    #[test]
    fn stdio_and_http_exclude_each_other() {
        let err = Cli::try_parse_from(["settle", "serve", "--stdio", "--http", "127.0.0.1:1"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}
