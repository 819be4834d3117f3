//! The tenants file (`--config settle.toml`): one `[tenant.NAME]` table per
//! tenant, and an optional `[server]` table.
//!
//! Every problem is reported with the file and the line it is on: an
//! unknown key, a plugin that does not exist, a malformed outbound origin, a
//! duplicate tenant or namespace, a token that is not set. Secrets are never
//! written in the file: it names the environment variable or file that
//! holds each one.

use crate::policy::{AllowedOrigin, OutboundPolicy};
use crate::tenant::Limits;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// A tenants file problem, located.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The line the problem is on (1-based).
    pub line: usize,
    /// What is wrong, and what would be right.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    server: Option<Spanned<ServerSection>>,
    #[serde(default)]
    tenant: BTreeMap<Spanned<String>, Spanned<TenantSection>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ServerSection {
    /// The environment variable holding the admin endpoint's token; the
    /// endpoint is off unless this is set.
    admin_token_env: Option<Spanned<String>>,
    /// Or the file holding it.
    admin_token_file: Option<Spanned<String>>,
    /// The environment variable holding the token `/metrics` asks for;
    /// `/metrics` is off unless this is set (its labels name the tenants).
    metrics_token_env: Option<Spanned<String>>,
    /// Or the file holding it.
    metrics_token_file: Option<Spanned<String>>,
    /// Reload a tenant's plugin when its file changes (default on).
    watch_plugins: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantSection {
    plugin: Spanned<String>,
    device_api: Spanned<String>,
    driver: Option<Spanned<String>>,
    device_profile: Option<Spanned<String>>,
    device_token_env: Option<Spanned<String>>,
    device_token_file: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    token_file: Option<Spanned<String>>,
    allow_outbound: Option<Vec<Spanned<String>>>,
    memory_mib: Option<Spanned<usize>>,
    call_timeout_ms: Option<Spanned<u64>>,
    max_concurrent_calls: Option<Spanned<usize>>,
    namespace: Option<Spanned<String>>,
    #[serde(default)]
    plugin_config: BTreeMap<String, toml::Value>,
}

/// A secret, read from where the file says it is.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// One tenant, checked.
#[derive(Clone, Debug)]
pub struct TenantSpec {
    /// Its name: in its URL (`/t/{name}/mcp`) and its logs.
    pub name: String,
    /// Its store namespace (default: its name).
    pub namespace: String,
    /// Its plugin component.
    pub plugin: PathBuf,
    /// What its plugin reads through `wasi:config`.
    pub plugin_config: BTreeMap<String, String>,
    /// Where its plugin may send HTTP requests.
    pub policy: OutboundPolicy,
    /// Bounds of its calls.
    pub limits: Limits,
    /// The bearer token its MCP clients must present (always set from a
    /// tenants file; the default tenant of a runner without one has none).
    pub token: Option<Secret>,
}

/// The whole file, checked.
#[derive(Clone, Debug)]
pub struct TenantsFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Every tenant, by name.
    pub tenants: Vec<TenantSpec>,
    /// The admin endpoint's token, when the endpoint is on.
    pub admin_token: Option<Secret>,
    /// The token `/metrics` asks for, when it is on.
    pub metrics_token: Option<Secret>,
    /// Reload plugins when their files change.
    pub watch_plugins: bool,
}

/// Where a tenant name is valid: in a URL path and as a store namespace.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric()
}

struct Locator<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Locator<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    fn error(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.path.to_path_buf(),
            line: self.line_of(span.start),
            message: message.into(),
        }
    }
}

/// Reads a secret from an environment variable or a file.
fn secret(
    at: &Locator<'_>,
    what: &str,
    env: &Option<Spanned<String>>,
    file: &Option<Spanned<String>>,
    base: &Path,
) -> Result<Option<Secret>, ConfigError> {
    match (env, file) {
        (Some(env), Some(_)) => Err(at.error(
            env.span(),
            format!("give {what}_env or {what}_file, not both"),
        )),
        (Some(env), None) => match std::env::var(env.get_ref()) {
            Ok(value) if !value.trim().is_empty() => Ok(Some(Secret(value.trim().to_string()))),
            _ => Err(at.error(
                env.span(),
                format!("{what}_env names {:?}, which is not set", env.get_ref()),
            )),
        },
        (None, Some(file)) => {
            let path = base.join(file.get_ref());
            match std::fs::read_to_string(&path) {
                Ok(value) if !value.trim().is_empty() => Ok(Some(Secret(value.trim().to_string()))),
                Ok(_) => Err(at.error(file.span(), format!("{} is empty", path.display()))),
                Err(e) => Err(at.error(
                    file.span(),
                    format!("cannot read {what}_file {}: {e}", path.display()),
                )),
            }
        }
        (None, None) => Ok(None),
    }
}

impl TenantsFile {
    /// Reads and checks a tenants file.
    pub fn load(path: &Path) -> Result<TenantsFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        TenantsFile::parse(path, &text)
    }

    /// Checks the text of a tenants file read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<TenantsFile, ConfigError> {
        let at = Locator { path, text };
        let file: File = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| at.line_of(s.start)).unwrap_or(0);
            ConfigError {
                file: path.to_path_buf(),
                line,
                message: e.message().trim().to_string(),
            }
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        if file.tenant.is_empty() {
            return Err(ConfigError {
                file: path.to_path_buf(),
                line: 1,
                message: "no tenants: add a [tenant.NAME] table".into(),
            });
        }
        let server = file.server.map(Spanned::into_inner).unwrap_or_default();
        let admin_token = secret(
            &at,
            "admin_token",
            &server.admin_token_env,
            &server.admin_token_file,
            base,
        )?;
        let metrics_token = secret(
            &at,
            "metrics_token",
            &server.metrics_token_env,
            &server.metrics_token_file,
            base,
        )?;

        let mut tenants = Vec::new();
        let mut namespaces: HashMap<String, String> = HashMap::new();
        for (name, section) in file.tenant {
            let name_span = name.span();
            let name = name.into_inner();
            if !valid_name(&name) {
                return Err(at.error(
                    name_span,
                    format!(
                        "tenant name {name:?} must be 1-63 characters of a-z, 0-9, - and _, starting with a letter or digit"
                    ),
                ));
            }
            let section_span = section.span();
            let t = section.into_inner();

            let plugin = base.join(t.plugin.get_ref());
            if !plugin.is_file() {
                return Err(at.error(
                    t.plugin.span(),
                    format!("tenant {name}: plugin {} does not exist", plugin.display()),
                ));
            }
            let device_api = t.device_api.get_ref();
            let api_origin = AllowedOrigin::of_url(device_api).map_err(|e| {
                at.error(
                    t.device_api.span(),
                    format!("tenant {name}: device_api: {e}"),
                )
            })?;
            let origins = match &t.allow_outbound {
                None => vec![api_origin],
                Some(list) => list
                    .iter()
                    .map(|entry| {
                        AllowedOrigin::parse(entry.get_ref()).map_err(|e| {
                            at.error(entry.span(), format!("tenant {name}: allow_outbound: {e}"))
                        })
                    })
                    .collect::<Result<_, _>>()?,
            };
            let token = secret(&at, "token", &t.token_env, &t.token_file, base)?.ok_or_else(|| {
                at.error(
                    section_span.clone(),
                    format!("tenant {name}: token_env or token_file is required (the bearer token its clients present)"),
                )
            })?;
            let device_token = secret(
                &at,
                "device_token",
                &t.device_token_env,
                &t.device_token_file,
                base,
            )?;

            let defaults = Limits::default();
            let memory_mib = t.memory_mib.as_ref().map(|m| (*m.get_ref(), m.span()));
            let memory_bytes = match memory_mib {
                None => defaults.memory_bytes,
                Some((mib, span)) => {
                    if mib == 0 || mib << 20 > crate::runtime::MAX_MEMORY_BYTES {
                        return Err(at.error(
                            span,
                            format!(
                                "tenant {name}: memory_mib must be between 1 and {}",
                                crate::runtime::MAX_MEMORY_BYTES >> 20
                            ),
                        ));
                    }
                    mib << 20
                }
            };
            let call_timeout = match &t.call_timeout_ms {
                None => defaults.call_timeout,
                Some(ms) if *ms.get_ref() == 0 => {
                    return Err(at.error(
                        ms.span(),
                        format!("tenant {name}: call_timeout_ms must be above 0"),
                    ));
                }
                Some(ms) => Duration::from_millis(*ms.get_ref()),
            };
            let max_concurrent_calls = match &t.max_concurrent_calls {
                None => defaults.max_concurrent_calls,
                Some(n) if *n.get_ref() == 0 => {
                    return Err(at.error(
                        n.span(),
                        format!("tenant {name}: max_concurrent_calls must be above 0"),
                    ));
                }
                Some(n) => *n.get_ref(),
            };

            let namespace = match &t.namespace {
                None => name.clone(),
                Some(ns) => {
                    if !valid_name(ns.get_ref()) {
                        return Err(at.error(
                            ns.span(),
                            format!("tenant {name}: namespace must use a-z, 0-9, - and _"),
                        ));
                    }
                    ns.get_ref().clone()
                }
            };
            if let Some(other) = namespaces.insert(namespace.clone(), name.clone()) {
                let span = t
                    .namespace
                    .as_ref()
                    .map(Spanned::span)
                    .unwrap_or(section_span.clone());
                return Err(at.error(
                    span,
                    format!("tenant {name}: namespace {namespace:?} is already tenant {other}'s; tenants never share one"),
                ));
            }

            let mut plugin_config = BTreeMap::new();
            for (key, value) in &t.plugin_config {
                let text = match value {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                plugin_config.insert(key.clone(), text);
            }
            plugin_config.insert("device_api".into(), device_api.clone());
            if let Some(driver) = &t.driver {
                if !matches!(
                    driver.get_ref().as_str(),
                    "sim" | "profile" | "homeassistant"
                ) {
                    return Err(at.error(
                        driver.span(),
                        format!(
                            "tenant {name}: driver {:?} is not one settle has (sim, profile, homeassistant)",
                            driver.get_ref()
                        ),
                    ));
                }
                plugin_config.insert("driver".into(), driver.get_ref().clone());
            }
            if let Some(profile) = &t.device_profile {
                let text = crate::app::read_profile(&base.join(profile.get_ref()))
                    .map_err(|e| at.error(profile.span(), format!("tenant {name}: {e:#}")))?;
                plugin_config.insert("device_profile".into(), text);
                plugin_config.insert("driver".into(), "profile".into());
            }
            if let Some(token) = device_token {
                plugin_config.insert("device_token".into(), token.0);
            }
            tenants.push(TenantSpec {
                name,
                namespace,
                plugin,
                plugin_config,
                policy: OutboundPolicy::new(origins),
                limits: Limits {
                    memory_bytes,
                    call_timeout,
                    max_concurrent_calls,
                },
                token: Some(token),
            });
        }
        Ok(TenantsFile {
            path: path.to_path_buf(),
            tenants,
            admin_token,
            metrics_token,
            watch_plugins: server.watch_plugins.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin_file(dir: &Path) -> String {
        let path = dir.join("p.wasm");
        std::fs::write(&path, b"not really a component").unwrap();
        "p.wasm".into()
    }

    fn parse(dir: &Path, text: &str) -> Result<TenantsFile, ConfigError> {
        // SAFETY: tests set a variable only they read.
        unsafe { std::env::set_var("SETTLE_TEST_TOKEN", "t0ken") };
        TenantsFile::parse(&dir.join("settle.toml"), text)
    }

    fn alice(plugin: &str) -> String {
        format!(
            "[tenant.alice]\nplugin = \"{plugin}\"\ndevice_api = \"http://127.0.0.1:8081\"\ntoken_env = \"SETTLE_TEST_TOKEN\"\n"
        )
    }

    #[test]
    fn a_good_file_gives_checked_tenants() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = format!(
            "{}memory_mib = 32\n[tenant.alice.plugin_config]\npoll_interval_ms = 500\n",
            alice(&plugin)
        );
        let file = parse(dir.path(), &text).unwrap();
        let t = &file.tenants[0];
        assert_eq!((t.name.as_str(), t.namespace.as_str()), ("alice", "alice"));
        assert_eq!(t.limits.memory_bytes, 32 << 20);
        assert_eq!(t.plugin_config["poll_interval_ms"], "500");
        assert_eq!(t.plugin_config["device_api"], "http://127.0.0.1:8081");
        assert_eq!(t.token.as_ref().unwrap().expose(), "t0ken");
        assert_eq!(format!("{:?}", t.token), "Some(Secret(***))");
        assert!(file.admin_token.is_none());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = format!("{}memory_mb = 32\n", alice(&plugin));
        let err = parse(dir.path(), &text).unwrap_err();
        assert_eq!(err.line, 5, "{err}");
        assert!(err.message.contains("memory_mb"), "{err}");
        assert!(err.to_string().contains("settle.toml:5"), "{err}");
    }

    #[test]
    fn a_missing_plugin_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let err = parse(dir.path(), &alice("missing.wasm")).unwrap_err();
        assert_eq!(err.line, 2, "{err}");
        assert!(err.message.contains("missing.wasm does not exist"), "{err}");
    }

    #[test]
    fn a_bad_outbound_origin_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = format!(
            "{}allow_outbound = [\n  \"http://ok:1\",\n  \"ftp://bad\",\n]\n",
            alice(&plugin)
        );
        let err = parse(dir.path(), &text).unwrap_err();
        assert_eq!(err.line, 7, "{err}");
        assert!(
            err.message.contains("expected scheme://host[:port]"),
            "{err}"
        );
    }

    #[test]
    fn a_duplicate_tenant_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = format!("{}\n{}", alice(&plugin), alice(&plugin));
        let err = parse(dir.path(), &text).unwrap_err();
        assert_eq!(err.line, 6, "{err}");
        assert!(err.message.to_lowercase().contains("duplicate"), "{err}");
    }

    #[test]
    fn tenants_never_share_a_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let bob = alice(&plugin).replace("tenant.alice", "tenant.bob") + "namespace = \"alice\"\n";
        let err = parse(dir.path(), &format!("{}{bob}", alice(&plugin))).unwrap_err();
        assert!(err.message.contains("already tenant alice's"), "{err}");
        assert_eq!(err.line, 9, "{err}");
    }

    #[test]
    fn a_token_must_be_given_and_set() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let none = alice(&plugin).replace("token_env = \"SETTLE_TEST_TOKEN\"\n", "");
        let err = parse(dir.path(), &none).unwrap_err();
        assert!(
            err.message.contains("token_env or token_file is required"),
            "{err}"
        );
        let unset = alice(&plugin).replace("SETTLE_TEST_TOKEN", "SETTLE_TEST_UNSET_VAR");
        let err = parse(dir.path(), &unset).unwrap_err();
        assert!(err.message.contains("is not set"), "{err}");
        assert_eq!(err.line, 4, "{err}");
    }

    #[test]
    fn the_documented_example_file_is_valid() {
        // SAFETY: tests set variables only they read.
        for var in [
            "SETTLE_ADMIN_TOKEN",
            "SETTLE_METRICS_TOKEN",
            "ALICE_TOKEN",
            "BOB_TOKEN",
        ] {
            unsafe { std::env::set_var(var, format!("{var}-value")) };
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/settle.toml");
        let file = TenantsFile::load(&path).unwrap_or_else(|e| {
            panic!("{e} (the example names the device plugin `make guest` builds)")
        });
        let names: Vec<_> = file.tenants.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["alice", "bob"]);
        assert!(file.admin_token.is_some() && file.metrics_token.is_some());
        assert_eq!(file.tenants[1].limits.memory_bytes, 32 << 20);
    }

    #[test]
    fn tenant_names_must_fit_urls_and_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = alice(&plugin).replace("tenant.alice", "tenant.\"Al/ice\"");
        let err = parse(dir.path(), &text).unwrap_err();
        assert!(err.message.contains("must be 1-63 characters"), "{err}");
    }
}
