//! Configuration: from the command line, and a tenants file when there is
//! one, to a checked [`RunnerConfig`].
//!
//! Both sources describe tenants the same way, as a
//! [`TenantDraft`](tenant::TenantDraft), and
//! [`TenantDraft::check`](tenant::TenantDraft::check) is the one place
//! that checks a tenant's limits, outbound hosts and plugin settings.
//!
//! # Layout
//! - [`tenant`]: one tenant's configuration and its check.
//! - [`file`](mod@file): the tenants file (`--config settle.toml`).
//! - [`flags`]: the default tenant of a runner without a tenants file.
//! - [`limits`]: the HTTP server's limits, from the flags and the file.

pub mod file;
pub mod flags;
pub mod limits;
pub mod tenant;

pub use file::{ConfigError, TenantsFile};
pub use tenant::TenantSpec;

use crate::cli::ServeArgs;
use crate::mcp::ServeOptions;
use crate::mcp::http::HttpAccess;
use crate::mcp::limits::HttpLimits;
use crate::secret::Secret;
use crate::store::Store;
use anyhow::{Context, bail};
use std::path::PathBuf;
use std::time::Duration;

/// The tenant a runner without a tenants file serves.
pub const DEFAULT_TENANT: &str = "default";

/// How tenants are reached over HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// No tenants file: the default tenant at `/mcp`, no bearer token.
    Single,
    /// A tenants file: each tenant at `/t/{name}/mcp` behind its token.
    Tenants,
}

/// Everything a runner needs, checked.
pub struct RunnerConfig {
    /// Where tasks and schedules live.
    pub store: Store,
    /// The tenants served.
    pub tenants: Vec<TenantSpec>,
    /// How tenants are reached over HTTP.
    pub layout: Layout,
    /// The admin endpoint's token; the endpoint is off without one.
    pub admin_token: Option<Secret>,
    /// The token `/metrics` asks for; `None` serves it openly (single
    /// tenant) or not at all (tenants file).
    pub metrics_token: Option<Secret>,
    /// Swap a tenant's plugin when its file changes.
    pub watch_plugins: bool,
    /// The live view at `/ui`, when it is on.
    pub ui: Option<UiAccess>,
    /// How MCP requests are answered.
    pub options: ServeOptions,
    /// Who may reach the HTTP endpoint.
    pub access: HttpAccess,
    /// What the HTTP server allows.
    pub http_limits: HttpLimits,
    /// How long a claimed due task belongs to this runner.
    pub lease: Duration,
    /// Where compiled plugins are cached; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
}

impl RunnerConfig {
    /// Checks the command line (and the tenants file it names); each
    /// problem names the flag, or the file and line.
    pub fn from_args(args: &ServeArgs) -> anyhow::Result<RunnerConfig> {
        let lease = Duration::from_millis(args.lease_ms);
        let (tenants, layout, file) = match &args.config {
            Some(path) => {
                let mut file = TenantsFile::load(path)?;
                if let Some(name) = &args.tenant {
                    file.tenants.retain(|t| &t.name == name);
                    if file.tenants.is_empty() {
                        bail!("--tenant {name}: {} has no such tenant", path.display());
                    }
                }
                (
                    std::mem::take(&mut file.tenants),
                    Layout::Tenants,
                    Some(file),
                )
            }
            None => {
                if let Some(name) = &args.tenant {
                    bail!(
                        "--tenant {name} needs --config: without a tenants file there is only the default tenant"
                    );
                }
                (vec![flags::default_tenant(args)?], Layout::Single, None)
            }
        };
        for tenant in &tenants {
            if tenant.limits.call_timeout >= lease {
                let timeout = tenant.limits.call_timeout.as_millis();
                let why = "a replica must finish advancing a task before another may take it";
                match &file {
                    None => bail!(
                        "--lease-ms {} must exceed --call-timeout-ms {timeout}: {why}",
                        args.lease_ms
                    ),
                    Some(file) => bail!(
                        "{}: tenant {}: call_timeout_ms {timeout} must be below --lease-ms {}: {why}",
                        file.path.display(),
                        tenant.name,
                        args.lease_ms
                    ),
                }
            }
        }
        let file_limits = file.as_ref().map(|f| f.limits.clone()).unwrap_or_default();
        let http_limits = limits::LimitsDraft::from_flags(args)
            .or(file_limits)
            .check()
            .map_err(|p| {
                anyhow::anyhow!(
                    "--{} (or `{}` in a tenants file's [server] table): {}",
                    p.key.replace('_', "-"),
                    p.key,
                    p.message
                )
            })?;
        let store = Store::open(&args.store).with_context(|| format!("--store {}", args.store))?;
        let mut access = HttpAccess::default();
        access
            .allowed_hosts
            .extend(args.allowed_host.iter().cloned());
        access
            .allowed_origins
            .extend(args.allowed_origin.iter().cloned());
        let ui = ui_access(args, file.as_ref(), layout)?;
        Ok(RunnerConfig {
            ui,
            store,
            tenants,
            layout,
            admin_token: file.as_ref().and_then(|f| f.admin_token.clone()),
            metrics_token: file.as_ref().and_then(|f| f.metrics_token.clone()),
            watch_plugins: file.as_ref().is_none_or(|f| f.watch_plugins),
            options: ServeOptions {
                inline_wait: Duration::from_millis(args.inline_wait_ms),
            },
            access,
            http_limits,
            lease,
            cache_dir: cache_dir(args.cache_dir.as_deref()),
        })
    }
}

/// Who opens the live view at `/ui`, when it is on.
#[derive(Clone, Debug)]
pub enum UiAccess {
    /// Without a tenants file: the holder of `--ui-token`.
    Token(Secret),
    /// With one: each tenant's token for its own view, and the admin
    /// token (when there is one) for every tenant's.
    Tenants,
}

/// `--ui` (or `[server] ui`), checked: off unless asked for, and never
/// without a token.
fn ui_access(
    args: &ServeArgs,
    file: Option<&TenantsFile>,
    layout: Layout,
) -> anyhow::Result<Option<UiAccess>> {
    let on = args.ui || file.is_some_and(|f| f.ui);
    if !on {
        return Ok(None);
    }
    match layout {
        Layout::Tenants => Ok(Some(UiAccess::Tenants)),
        Layout::Single => match args.ui_token.as_deref().map(str::trim) {
            Some(token) if !token.is_empty() => Ok(Some(UiAccess::Token(Secret::new(token)))),
            _ => bail!(
                "--ui needs a token: set SETTLE_UI_TOKEN (or --ui-token); the view is opened as /ui?token=TOKEN"
            ),
        },
    }
}

/// The compiled-plugin cache: the flag's directory, `none` for no cache,
/// or the user's cache directory by default (none when there is no home).
fn cache_dir(flag: Option<&str>) -> Option<PathBuf> {
    match flag {
        Some("none") => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
            .map(|base| base.join("settle")),
    }
}
