//! The command line. Every flag also reads a `SETTLE_*` environment
//! variable, so a client config can pass secrets without putting them in
//! `ps` output.
//!
//! This is also the one place in the runner that names the device plugin's
//! settings: [`ALIASES`] keeps `--device-api`, `--device-token`, `--driver`
//! and `--device-profile` (and the same keys in a tenants file) working as
//! names for plain plugin settings, which the plugin checks.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

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

impl Cli {
    /// Parses the process's arguments; `--version` also names the
    /// built-in plugin and its component's hash.
    pub fn parse_args() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command()
            .version(crate::builtin::version())
            .get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The audit trail of a running server: every command as it ended
    /// (completed, failed, cancelled, gated, declined), read over MCP.
    Tasks(TasksArgs),
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

    /// The plugin component to load: a `.wasm` file, or `builtin` for the
    /// plugin built into this binary (the default when it has one; see
    /// `settle --version`).
    #[arg(long, env = "SETTLE_PLUGIN", value_name = "PATH", default_value = crate::builtin::default_plugin())]
    pub plugin: PathBuf,

    /// Base URL of the device API the plugin talks to (plugin setting
    /// `device_api`). Its origin is the default --allow-outbound.
    #[arg(
        long,
        env = "SETTLE_DEVICE_API",
        value_name = "URL",
        default_value = "http://127.0.0.1:8081"
    )]
    pub device_api: String,

    /// The kind of device API (plugin setting `driver`); the device plugin
    /// knows `sim` (its default: settle's simulator and APIs shaped like
    /// it), `profile` (an API a --device-profile describes) and
    /// `homeassistant` (climate entities through Home Assistant's REST API;
    /// --device-api is its base URL and --device-token a long-lived access
    /// token), and refuses any other when it loads.
    #[arg(long, env = "SETTLE_DRIVER", value_name = "DRIVER")]
    pub driver: Option<String>,

    /// A device profile (JSON) describing an HTTP device API (plugin setting
    /// `device_profile`, the file's text); implies `--driver profile`. See
    /// profiles/.
    #[arg(long, env = "SETTLE_DEVICE_PROFILE", value_name = "PATH")]
    pub device_profile: Option<PathBuf>,

    /// Bearer token for the device API (plugin setting `device_token`).
    /// Prefer the environment variable: a flag is visible to other users in
    /// the process list.
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
    /// Default: the --device-api origin alone. Repeat or comma-separate.
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

    /// HTTP: serve the plugin's live view at /ui (off by default; also
    /// `[server] ui = true` in a tenants file). Without a tenants file it
    /// needs --ui-token; with one, each tenant's token opens its own view
    /// at /t/NAME/ui, and the admin token opens every tenant's.
    #[arg(long, env = "SETTLE_UI")]
    pub ui: bool,

    /// The token that opens /ui without a tenants file: open the view once
    /// as /ui?token=TOKEN. Prefer the environment variable: a flag is
    /// visible to other users in the process list.
    #[arg(
        long,
        env = "SETTLE_UI_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub ui_token: Option<String>,

    /// HTTP: close a connection whose request headers have not all arrived
    /// within this many milliseconds, or that sits idle between requests
    /// as long (ends slowloris connections). Default 10000; also
    /// `[server] header_read_timeout_ms` in a tenants file.
    #[arg(long, env = "SETTLE_HEADER_READ_TIMEOUT_MS", value_name = "MS")]
    pub header_read_timeout_ms: Option<u64>,

    /// HTTP: connections open at once; one more is answered 503 with
    /// Retry-After and closed. Default 4096; also `[server]
    /// max_connections`.
    #[arg(long, env = "SETTLE_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// HTTP: open subscriptions/listen streams per tenant; one more is
    /// refused (HTTP 429, a JSON-RPC error). Default 256; also `[server]
    /// max_listen_streams`.
    #[arg(long, env = "SETTLE_MAX_LISTEN_STREAMS", value_name = "N")]
    pub max_listen_streams: Option<usize>,

    /// HTTP: requests per second per tenant (bursts of as many); one more
    /// is answered 429 with Retry-After. 0 turns it off. Default 5000; also
    /// `[server] max_requests_per_second`.
    #[arg(long, env = "SETTLE_MAX_REQUESTS_PER_SECOND", value_name = "N")]
    pub max_requests_per_second: Option<u32>,
}

/// A plugin setting the runner also takes under a name of its own: a flag
/// (`--device-api`, the key with dashes) and a tenants-file key
/// (`device_api`). These are the device plugin's settings, kept because
/// operators used them before every setting could go through
/// `plugin_config`. The runner gives an alias no meaning: its value becomes
/// the plugin setting of the same name, which the plugin checks when it is
/// admitted.
#[derive(Debug, PartialEq, Eq)]
pub struct Alias {
    /// The plugin setting, and the tenants-file key.
    pub key: &'static str,
    /// How its value is given.
    pub kind: AliasKind,
    /// A setting it implies, and its value: giving that setting another
    /// value alongside is refused as a contradiction.
    pub implies: Option<(&'static str, &'static str)>,
}

/// How an alias's value is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AliasKind {
    /// The value itself.
    Value,
    /// A secret: a tenants file names where it is with `<key>_env` or
    /// `<key>_file`, never the value.
    Secret,
    /// The path of a JSON document (in a tenants file, relative to the
    /// file); the setting is the document's text.
    JsonFile,
}

/// Every alias.
pub const ALIASES: [Alias; 4] = [
    Alias {
        key: "device_api",
        kind: AliasKind::Value,
        implies: None,
    },
    Alias {
        key: "device_token",
        kind: AliasKind::Secret,
        implies: None,
    },
    Alias {
        key: "driver",
        kind: AliasKind::Value,
        implies: None,
    },
    Alias {
        key: "device_profile",
        kind: AliasKind::JsonFile,
        implies: Some(("driver", "profile")),
    },
];

/// The setting whose URL's origin is the outbound allow-list when none is
/// given: by default a plugin reaches its device API and nothing else.
pub const DEFAULT_OUTBOUND: &str = "device_api";

/// The alias named `key`, if there is one.
pub fn alias(key: &str) -> Option<&'static Alias> {
    ALIASES.iter().find(|a| a.key == key)
}

impl ServeArgs {
    /// The aliases the command line gives, with their values (a JSON
    /// file's path as given).
    pub fn aliases(&self) -> Vec<(&'static Alias, String)> {
        let given = [
            ("device_api", Some(self.device_api.clone())),
            ("device_token", self.device_token.clone()),
            ("driver", self.driver.clone()),
            (
                "device_profile",
                self.device_profile
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
            ),
        ];
        given
            .into_iter()
            .filter_map(|(key, value)| Some((alias(key)?, value?)))
            .collect()
    }
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
    fn device_flags_are_aliases_of_plugin_settings() {
        let Command::Serve(args) = Cli::try_parse_from([
            "settle",
            "serve",
            "--device-api",
            "http://api:1",
            "--driver",
            "some-driver",
        ])
        .unwrap()
        .command
        else {
            panic!("not serve")
        };
        let given: Vec<(&str, String)> = args
            .aliases()
            .into_iter()
            .map(|(a, v)| (a.key, v))
            .collect();
        assert_eq!(
            given,
            [
                ("device_api", "http://api:1".to_string()),
                ("driver", "some-driver".to_string())
            ]
        );
        for a in &ALIASES {
            assert!(
                args_have_flag(&a.key.replace('_', "-")),
                "--{} is a flag",
                a.key
            );
        }
    }

    fn args_have_flag(name: &str) -> bool {
        Cli::command()
            .find_subcommand("serve")
            .unwrap()
            .get_arguments()
            .any(|a| a.get_long() == Some(name))
    }

    #[test]
    fn stdio_and_http_exclude_each_other() {
        let err = Cli::try_parse_from(["settle", "serve", "--stdio", "--http", "127.0.0.1:1"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}

/// `settle tasks`: which server, and how to print.
#[derive(Args, Debug)]
pub struct TasksArgs {
    /// What to show.
    #[command(subcommand)]
    pub command: TasksCommand,
    /// The server's MCP endpoint (a tenant's: `/t/NAME/mcp`).
    #[arg(
        long,
        env = "SETTLE_URL",
        default_value = "http://127.0.0.1:8080/mcp",
        global = true
    )]
    pub url: String,
    /// The MCP bearer token of that endpoint, if it has one.
    #[arg(long, env = "SETTLE_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// JSON for scripts (`list`: one array; `watch`: one record a line)
    /// instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `settle tasks` subcommands.
#[derive(Subcommand, Debug)]
pub enum TasksCommand {
    /// The records that match, newest first.
    List(TasksFilter),
    /// One task's record, in full.
    Show {
        /// The task id.
        id: String,
    },
    /// Prints records as they are added, until interrupted.
    Watch(TasksFilter),
}

/// Which records.
#[derive(Args, Debug, Clone)]
pub struct TasksFilter {
    /// Only this device's.
    #[arg(long)]
    pub device: Option<String>,
    /// Only these: completed, failed, cancelled, gated or declined.
    #[arg(long)]
    pub status: Option<String>,
    /// Only those that ended since: a time ago (90s, 30m, 12h, 7d) or ms
    /// since the epoch.
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many (1..=1000).
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
}
