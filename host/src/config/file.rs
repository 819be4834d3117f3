//! The tenants file (`--config settle.toml`): one `[tenant.NAME]` table per
//! tenant, and an optional `[server]` table.
//!
//! Every problem is reported with the file and the line it is on: an
//! unknown key, a plugin that does not exist, a malformed outbound origin, a
//! duplicate tenant or namespace, a token that is not set. Secrets are never
//! written in the file: it names the environment variable or file that
//! holds each one. The tenant tables are read key by key (with their
//! spans), so that the aliases of plugin settings ([`crate::cli::ALIASES`])
//! are keys like any other without the file format naming them.

use super::limits::LimitsDraft;
use super::tenant::{Field, TenantDraft, TenantSpec};
use crate::cli::{self, Alias, AliasKind};
use crate::secret::Secret;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

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

/// Looks up an environment variable; injected so tests need not change the
/// process's environment.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

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
    /// Serve each tenant's live view at `/t/NAME/ui` (default off).
    ui: Option<bool>,
    /// The HTTP server's limits ([`crate::mcp::limits::HttpLimits`]); the
    /// per-tenant ones apply to each tenant.
    header_read_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    max_listen_streams: Option<usize>,
    max_requests_per_second: Option<u32>,
}

/// The keys of a tenant table that are not aliases.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantSection {
    plugin: Spanned<String>,
    token_env: Option<Spanned<String>>,
    token_file: Option<Spanned<String>>,
    allow_outbound: Option<Vec<Spanned<String>>>,
    memory_mib: Option<Spanned<usize>>,
    call_timeout_ms: Option<Spanned<u64>>,
    max_concurrent_calls: Option<Spanned<usize>>,
    namespace: Option<Spanned<String>>,
    plugin_config: Option<Spanned<BTreeMap<String, toml::Value>>>,
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
    /// Serve each tenant's live view.
    pub ui: bool,
    /// The HTTP server's limits the `[server]` table gives.
    pub limits: LimitsDraft,
}

/// Turns byte offsets of the file into located errors, and reads what the
/// file points at (secrets, files next to it).
struct Locator<'a> {
    path: &'a Path,
    text: &'a str,
    base: &'a Path,
    env: Env<'a>,
}

impl Locator<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    fn error(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.path.to_path_buf(),
            line: self.line_of(span.start),
            message: message.into(),
        }
    }

    fn toml_error(&self, e: toml::de::Error) -> ConfigError {
        ConfigError {
            file: self.path.to_path_buf(),
            line: e.span().map(|s| self.line_of(s.start)).unwrap_or(0),
            message: e.message().trim().to_string(),
        }
    }

    /// Deserializes one value of the document, keeping spans within it.
    fn value<T: DeserializeOwned>(&self, value: Spanned<DeValue<'_>>) -> Result<T, ConfigError> {
        T::deserialize(ValueDeserializer::from(value)).map_err(|e| self.toml_error(e))
    }

    /// Reads a secret from the environment variable or the file named by
    /// `<what>_env` / `<what>_file`.
    fn secret(
        &self,
        what: &str,
        env: &Option<Spanned<String>>,
        file: &Option<Spanned<String>>,
    ) -> Result<Option<Secret>, ConfigError> {
        match (env, file) {
            (Some(env), Some(_)) => Err(self.error(
                env.span(),
                format!("give {what}_env or {what}_file, not both"),
            )),
            (Some(env), None) => match (self.env)(env.get_ref()) {
                Some(value) if !value.trim().is_empty() => Ok(Some(Secret::new(value.trim()))),
                _ => Err(self.error(
                    env.span(),
                    format!("{what}_env names {:?}, which is not set", env.get_ref()),
                )),
            },
            (None, Some(file)) => {
                let path = self.base.join(file.get_ref());
                match std::fs::read_to_string(&path) {
                    Ok(value) if !value.trim().is_empty() => Ok(Some(Secret::new(value.trim()))),
                    Ok(_) => Err(self.error(file.span(), format!("{} is empty", path.display()))),
                    Err(e) => Err(self.error(
                        file.span(),
                        format!("cannot read {what}_file {}: {e}", path.display()),
                    )),
                }
            }
            (None, None) => Ok(None),
        }
    }
}

/// The keys a tenant table may have, for the message about one it may not.
fn known_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "plugin",
        "token_env",
        "token_file",
        "allow_outbound",
        "memory_mib",
        "call_timeout_ms",
        "max_concurrent_calls",
        "namespace",
        "plugin_config",
    ]
    .map(String::from)
    .to_vec();
    for alias in &cli::ALIASES {
        match alias.kind {
            AliasKind::Secret => {
                keys.push(format!("{}_env", alias.key));
                keys.push(format!("{}_file", alias.key));
            }
            AliasKind::Value | AliasKind::JsonFile => keys.push(alias.key.to_string()),
        }
    }
    keys
}

/// The alias a tenant-table key gives, and whether it names a secret's
/// environment variable (`Some(true)`) or file (`Some(false)`).
fn alias_of(key: &str) -> Option<(&'static Alias, Option<bool>)> {
    cli::ALIASES.iter().find_map(|alias| match alias.kind {
        AliasKind::Secret if key == format!("{}_env", alias.key) => Some((alias, Some(true))),
        AliasKind::Secret if key == format!("{}_file", alias.key) => Some((alias, Some(false))),
        AliasKind::Value | AliasKind::JsonFile if key == alias.key => Some((alias, None)),
        _ => None,
    })
}

/// Where a secret alias's value is: `<key>_env` and `<key>_file`.
#[derive(Default)]
struct SecretKeys {
    env: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
}

/// The aliases one tenant table gives, as read from it.
#[derive(Default)]
struct GivenAliases {
    values: Vec<(&'static Alias, Spanned<String>)>,
    secrets: BTreeMap<&'static str, SecretKeys>,
}

impl TenantsFile {
    /// Reads and checks a tenants file; secrets named by `*_env` come from
    /// the process's environment.
    pub fn load(path: &Path) -> Result<TenantsFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        TenantsFile::parse(path, &text, &|name| std::env::var(name).ok())
    }

    /// Checks the text of a tenants file read from `path`, reading `*_env`
    /// secrets through `env`.
    pub fn parse(path: &Path, text: &str, env: Env<'_>) -> Result<TenantsFile, ConfigError> {
        let base = path.parent().unwrap_or(Path::new("."));
        let at = Locator {
            path,
            text,
            base,
            env,
        };
        let root = DeTable::parse(text).map_err(|e| at.toml_error(e))?;
        let mut server = ServerSection::default();
        let mut tenant_tables = Vec::new();
        for (key, value) in root.into_inner() {
            match key.get_ref().as_ref() {
                "server" => server = at.value(value)?,
                "tenant" => {
                    let span = value.span();
                    let DeValue::Table(tables) = value.into_inner() else {
                        return Err(
                            at.error(span, "tenant must be a table of [tenant.NAME] tables")
                        );
                    };
                    tenant_tables.extend(tables);
                }
                other => {
                    return Err(at.error(
                        key.span(),
                        format!("unknown field `{other}`, expected `server` or `tenant`"),
                    ));
                }
            }
        }
        if tenant_tables.is_empty() {
            return Err(at.error(0..0, "no tenants: add a [tenant.NAME] table"));
        }
        let admin_token = at.secret(
            "admin_token",
            &server.admin_token_env,
            &server.admin_token_file,
        )?;
        let metrics_token = at.secret(
            "metrics_token",
            &server.metrics_token_env,
            &server.metrics_token_file,
        )?;
        let mut tenants = Vec::new();
        let mut namespaces: HashMap<String, String> = HashMap::new();
        for (name, table) in tenant_tables {
            let Located {
                spec,
                namespace_span,
            } = tenant(&at, name.get_ref().to_string(), name.span(), table)?;
            if let Some(other) = namespaces.insert(spec.namespace.clone(), spec.name.clone()) {
                return Err(at.error(
                    namespace_span,
                    format!(
                        "tenant {}: namespace {:?} is already tenant {other}'s; tenants never share one",
                        spec.name, spec.namespace
                    ),
                ));
            }
            tenants.push(spec);
        }
        Ok(TenantsFile {
            path: path.to_path_buf(),
            tenants,
            admin_token,
            metrics_token,
            watch_plugins: server.watch_plugins.unwrap_or(true),
            ui: server.ui.unwrap_or(false),
            limits: LimitsDraft {
                header_read_timeout_ms: server.header_read_timeout_ms,
                max_connections: server.max_connections,
                max_listen_streams: server.max_listen_streams,
                max_requests_per_second: server.max_requests_per_second,
            },
        })
    }
}

/// A checked tenant, with where its namespace is set (for the message
/// about a namespace two tenants share).
struct Located {
    spec: TenantSpec,
    namespace_span: Range<usize>,
}

/// Reads and checks one `[tenant.NAME]` table.
fn tenant(
    at: &Locator<'_>,
    name: String,
    name_span: Range<usize>,
    table: Spanned<DeValue<'_>>,
) -> Result<Located, ConfigError> {
    let section_span = table.span();
    let DeValue::Table(entries) = table.into_inner() else {
        return Err(at.error(section_span, format!("tenant {name} must be a table")));
    };
    // Aliases are taken out by key; the rest must be the section's keys.
    let mut given = GivenAliases::default();
    let mut rest = DeTable::new();
    for (key, value) in entries {
        let Some((alias, secret)) = alias_of(key.get_ref()) else {
            rest.insert(key, value);
            continue;
        };
        let value: Spanned<String> = at.value(value)?;
        match secret {
            None => given.values.push((alias, value)),
            Some(true) => given.secrets.entry(alias.key).or_default().env = Some(value),
            Some(false) => given.secrets.entry(alias.key).or_default().file = Some(value),
        }
    }
    let section: TenantSection = at
        .value(Spanned::new(section_span.clone(), DeValue::Table(rest)))
        .map_err(|mut e| {
            if e.message.starts_with("unknown field") {
                // serde lists the section's own keys; name them all.
                let field = e.message.split('`').nth(1).unwrap_or_default().to_string();
                e.message = format!(
                    "unknown field `{field}`, expected one of {}",
                    known_keys()
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            e
        })?;

    let token = at
        .secret("token", &section.token_env, &section.token_file)?
        .ok_or_else(|| {
            at.error(
                section_span.clone(),
                format!("tenant {name}: token_env or token_file is required (the bearer token its clients present)"),
            )
        })?;
    let mut aliases = Vec::new();
    let mut alias_spans: HashMap<&str, Range<usize>> = HashMap::new();
    for (alias, value) in &given.values {
        alias_spans.insert(alias.key, value.span());
        let value = match alias.kind {
            AliasKind::JsonFile => at.base.join(value.get_ref()).to_string_lossy().into_owned(),
            AliasKind::Value | AliasKind::Secret => value.get_ref().clone(),
        };
        aliases.push((*alias, value));
    }
    for (key, SecretKeys { env, file }) in &given.secrets {
        let Some(alias) = cli::alias(key) else {
            continue;
        };
        if let Some(span) = env.as_ref().or(file.as_ref()).map(Spanned::span) {
            alias_spans.insert(alias.key, span);
        }
        if let Some(secret) = at.secret(key, env, file)? {
            aliases.push((alias, secret.expose().to_string()));
        }
    }
    let settings = section
        .plugin_config
        .as_ref()
        .map(|config| {
            config
                .get_ref()
                .iter()
                .map(|(key, value)| {
                    let text = match value {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (key.clone(), text)
                })
                .collect()
        })
        .unwrap_or_default();

    let draft = TenantDraft {
        name: name.clone(),
        namespace: section.namespace.as_ref().map(|n| n.get_ref().clone()),
        plugin: match section.plugin.get_ref() {
            name if name == crate::builtin::NAME => name.into(),
            path => at.base.join(path),
        },
        settings,
        aliases,
        allow_outbound: section
            .allow_outbound
            .as_ref()
            .map(|list| list.iter().map(|e| e.get_ref().clone()).collect()),
        memory_mib: section.memory_mib.as_ref().map(|m| *m.get_ref()),
        call_timeout_ms: section.call_timeout_ms.as_ref().map(|m| *m.get_ref()),
        max_concurrent_calls: section.max_concurrent_calls.as_ref().map(|m| *m.get_ref()),
        token: Some(token),
    };
    let namespace_span = section
        .namespace
        .as_ref()
        .map(Spanned::span)
        .unwrap_or(section_span.clone());
    let spec = draft.check().map_err(|p| {
        let span = match &p.field {
            Field::Name => name_span.clone(),
            Field::Namespace => namespace_span.clone(),
            Field::Plugin => section.plugin.span(),
            Field::Setting(key) => alias_spans
                .get(key.as_str())
                .cloned()
                .or(section.plugin_config.as_ref().map(Spanned::span))
                .unwrap_or(section_span.clone()),
            Field::AllowOutbound(i) => section
                .allow_outbound
                .as_ref()
                .and_then(|list| list.get(*i))
                .map(Spanned::span)
                .unwrap_or(section_span.clone()),
            Field::MemoryMib => span_of(&section.memory_mib, &section_span),
            Field::CallTimeoutMs => span_of(&section.call_timeout_ms, &section_span),
            Field::MaxConcurrentCalls => span_of(&section.max_concurrent_calls, &section_span),
        };
        let message = match &p.field {
            Field::Name => format!("tenant name {}", p.message),
            field => format!("tenant {name}: {}: {}", field.key(), p.message),
        };
        at.error(span, message)
    })?;
    Ok(Located {
        spec,
        namespace_span,
    })
}

fn span_of<T>(value: &Option<Spanned<T>>, otherwise: &Range<usize>) -> Range<usize> {
    value
        .as_ref()
        .map(Spanned::span)
        .unwrap_or(otherwise.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin_file(dir: &Path) -> String {
        let path = dir.join("p.wasm");
        std::fs::write(&path, b"not really a component").unwrap();
        "p.wasm".into()
    }

    /// The environment the tests see: one token variable, nothing else.
    fn env(name: &str) -> Option<String> {
        (name == "SETTLE_TEST_TOKEN").then(|| "t0ken".to_string())
    }

    fn parse(dir: &Path, text: &str) -> Result<TenantsFile, ConfigError> {
        TenantsFile::parse(&dir.join("settle.toml"), text, &env)
    }

    /// Alice's table: her plugin, the setting her default allow-list comes
    /// from, and her token.
    fn alice(plugin: &str) -> String {
        format!(
            "[tenant.alice]\nplugin = \"{plugin}\"\n{} = \"http://127.0.0.1:8081\"\ntoken_env = \"SETTLE_TEST_TOKEN\"\n",
            cli::DEFAULT_OUTBOUND
        )
    }

    fn alias_of_kind(kind: AliasKind) -> &'static Alias {
        cli::ALIASES.iter().find(|a| a.kind == kind).unwrap()
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
        assert_eq!(
            t.plugin_config[cli::DEFAULT_OUTBOUND],
            "http://127.0.0.1:8081"
        );
        assert_eq!(t.token.as_ref().unwrap().expose(), "t0ken");
        assert_eq!(format!("{:?}", t.token), "Some(Secret(***))");
        assert!(file.admin_token.is_none());
        let origins: Vec<String> = t.policy.origins().iter().map(|o| o.to_string()).collect();
        assert_eq!(origins, ["http://127.0.0.1:8081"]);
    }

    #[test]
    fn builtin_names_the_plugin_inside_the_binary_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let parsed = parse(dir.path(), &alice(crate::builtin::NAME));
        if crate::builtin::bytes().is_some() {
            let file = parsed.unwrap();
            assert_eq!(file.tenants[0].plugin, Path::new(crate::builtin::NAME));
        } else {
            // Built with SETTLE_BUILTIN_PLUGIN=none: there is nothing to name.
            assert!(parsed.is_err());
        }
    }

    #[test]
    fn an_alias_secret_and_file_become_plugin_settings() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let (secret, json) = (
            alias_of_kind(AliasKind::Secret),
            alias_of_kind(AliasKind::JsonFile),
        );
        std::fs::write(dir.path().join("a.secret"), "s3cret\n").unwrap();
        std::fs::write(dir.path().join("a.json"), "{\"name\": \"p\"}").unwrap();
        let text = format!(
            "{}{}_file = \"a.secret\"\n{} = \"a.json\"\n",
            alice(&plugin),
            secret.key,
            json.key
        );
        let t = &parse(dir.path(), &text).unwrap().tenants[0];
        assert_eq!(t.plugin_config[secret.key], "s3cret");
        assert_eq!(t.plugin_config[json.key], "{\"name\": \"p\"}");
    }

    #[test]
    fn a_plugin_needs_no_aliases() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text =
            format!("[tenant.hello]\nplugin = \"{plugin}\"\ntoken_env = \"SETTLE_TEST_TOKEN\"\n");
        let t = &parse(dir.path(), &text).unwrap().tenants[0];
        assert!(t.plugin_config.is_empty());
        assert!(t.policy.origins().is_empty());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = format!("{}memory_mb = 32\n", alice(&plugin));
        let err = parse(dir.path(), &text).unwrap_err();
        assert_eq!(err.line, 5, "{err}");
        assert!(err.message.contains("unknown field `memory_mb`"), "{err}");
        let secret = alias_of_kind(AliasKind::Secret).key;
        assert!(
            err.message.contains(&format!("`{secret}_env`")),
            "aliases are listed too: {err}"
        );
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
    fn a_bad_limit_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = format!("{}\ncall_timeout_ms = 0\n", alice(&plugin));
        let err = parse(dir.path(), &text).unwrap_err();
        assert_eq!(err.line, 6, "{err}");
        assert!(
            err.message
                .contains("tenant alice: call_timeout_ms: must be above 0"),
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
        let env = |name: &str| {
            [
                "SETTLE_ADMIN_TOKEN",
                "SETTLE_METRICS_TOKEN",
                "ALICE_TOKEN",
                "BOB_TOKEN",
            ]
            .contains(&name)
            .then(|| format!("{name}-value"))
        };
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/settle.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let file = TenantsFile::parse(&path, &text, &env).unwrap_or_else(|e| {
            panic!("{e} (the example names the device plugin `make guest` builds)")
        });
        let names: Vec<_> = file.tenants.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["alice", "bob"]);
        assert!(file.admin_token.is_some() && file.metrics_token.is_some());
        assert_eq!(file.tenants[1].limits.memory_bytes, 32 << 20);
        // The example lists the HTTP limits with their defaults.
        assert_eq!(
            file.limits.check().unwrap(),
            crate::mcp::limits::HttpLimits::default()
        );
    }

    #[test]
    fn tenant_names_must_fit_urls_and_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_file(dir.path());
        let text = alice(&plugin).replace("tenant.alice", "tenant.\"Al/ice\"");
        let err = parse(dir.path(), &text).unwrap_err();
        assert!(err.message.contains("must be 1-63 characters"), "{err}");
        assert_eq!(err.line, 1, "{err}");
    }
}
