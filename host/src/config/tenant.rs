//! One tenant's configuration, checked in one place ([`TenantDraft::check`])
//! whether it came from a `[tenant.NAME]` table of a tenants file or from the
//! flags of a runner without one. A [`Problem`] names the [`Field`] it is
//! in, so the tenants file can point at its line and the command line at
//! its flag.

use crate::cli::{self, Alias, AliasKind};
use crate::context::Limits;
use crate::policy::{AllowedOrigin, OutboundPolicy};
use crate::secret::Secret;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A tenant as its configuration gives it, before any check.
#[derive(Debug, Clone, Default)]
pub struct TenantDraft {
    /// Its name: in its URL (`/t/{name}/mcp`), its logs and its metrics.
    pub name: String,
    /// Its store namespace; its name when not given.
    pub namespace: Option<String>,
    /// Its plugin component.
    pub plugin: PathBuf,
    /// Plugin settings given as such (`plugin_config`, `--plugin-config`).
    pub settings: BTreeMap<String, String>,
    /// Aliases of plugin settings given under their own names, with their
    /// values (a secret already read; a JSON file's path resolved).
    pub aliases: Vec<(&'static Alias, String)>,
    /// Where its plugin may send HTTP requests; by default the origin of
    /// the [`cli::DEFAULT_OUTBOUND`] setting.
    pub allow_outbound: Option<Vec<String>>,
    /// Linear memory of one plugin instance.
    pub memory_mib: Option<usize>,
    /// Wall time of one plugin call.
    pub call_timeout_ms: Option<u64>,
    /// Plugin calls of this tenant running at once.
    pub max_concurrent_calls: Option<usize>,
    /// The bearer token its MCP clients present.
    pub token: Option<Secret>,
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

/// Which part of a draft a problem is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The tenant's name.
    Name,
    /// Its namespace.
    Namespace,
    /// Its plugin path.
    Plugin,
    /// A plugin setting, given by an alias or in `plugin_config`.
    Setting(String),
    /// The outbound allow-list entry at this index.
    AllowOutbound(usize),
    /// The memory limit.
    MemoryMib,
    /// The call timeout.
    CallTimeoutMs,
    /// The concurrency limit.
    MaxConcurrentCalls,
}

impl Field {
    /// The field as a tenants-file key.
    pub fn key(&self) -> &str {
        match self {
            Field::Name => "tenant name",
            Field::Namespace => "namespace",
            Field::Plugin => "plugin",
            Field::Setting(key) => key,
            Field::AllowOutbound(_) => "allow_outbound",
            Field::MemoryMib => "memory_mib",
            Field::CallTimeoutMs => "call_timeout_ms",
            Field::MaxConcurrentCalls => "max_concurrent_calls",
        }
    }
}

/// What is wrong with a draft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where it is.
    pub field: Field,
    /// What is wrong, and what would be right.
    pub message: String,
}

fn problem(field: Field, message: impl Into<String>) -> Problem {
    Problem {
        field,
        message: message.into(),
    }
}

/// Whether a name is valid in a URL path and as a store namespace.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric()
}

/// The text of a setting given as a JSON file, checked to be JSON (the
/// plugin checks the rest when it is admitted, and names the field; only
/// the runner can name the file and line).
fn read_json_file(key: &str, path: &str) -> Result<String, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("{key} {path}: cannot read it: {e}"))?;
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
        return Err(format!("{key} {path}:{}:{}: {e}", e.line(), e.column()));
    }
    Ok(text)
}

impl TenantDraft {
    /// Checks every field and applies the defaults.
    pub fn check(self) -> Result<TenantSpec, Problem> {
        if !valid_name(&self.name) {
            return Err(problem(
                Field::Name,
                format!(
                    "{:?} must be 1-63 characters of a-z, 0-9, - and _, starting with a letter or digit",
                    self.name
                ),
            ));
        }
        let namespace = self.namespace.unwrap_or_else(|| self.name.clone());
        if !valid_name(&namespace) {
            return Err(problem(
                Field::Namespace,
                "must use a-z, 0-9, - and _, starting with a letter or digit",
            ));
        }
        if !crate::builtin::exists(&self.plugin) {
            return Err(problem(
                Field::Plugin,
                format!("{} does not exist", self.plugin.display()),
            ));
        }
        let plugin_config = settings(self.settings, &self.aliases)?;
        let policy = outbound(self.allow_outbound.as_deref(), &plugin_config)?;
        let defaults = Limits::default();
        let memory_bytes = match self.memory_mib {
            None => defaults.memory_bytes,
            Some(mib) if mib == 0 || mib << 20 > crate::runtime::MAX_MEMORY_BYTES => {
                return Err(problem(
                    Field::MemoryMib,
                    format!(
                        "must be between 1 and {}",
                        crate::runtime::MAX_MEMORY_BYTES >> 20
                    ),
                ));
            }
            Some(mib) => mib << 20,
        };
        let call_timeout = match self.call_timeout_ms {
            None => defaults.call_timeout,
            Some(0) => return Err(problem(Field::CallTimeoutMs, "must be above 0")),
            Some(ms) => Duration::from_millis(ms),
        };
        let max_concurrent_calls = match self.max_concurrent_calls {
            None => defaults.max_concurrent_calls,
            Some(0) => return Err(problem(Field::MaxConcurrentCalls, "must be above 0")),
            Some(n) => n,
        };
        Ok(TenantSpec {
            name: self.name,
            namespace,
            plugin: self.plugin,
            plugin_config,
            policy,
            limits: Limits {
                memory_bytes,
                call_timeout,
                max_concurrent_calls,
            },
            token: self.token,
        })
    }
}

/// The plugin's settings: those given as such, then the aliases (which win,
/// as the more specific name), then what the aliases imply.
fn settings(
    mut settings: BTreeMap<String, String>,
    aliases: &[(&'static Alias, String)],
) -> Result<BTreeMap<String, String>, Problem> {
    for (alias, value) in aliases {
        let value = match alias.kind {
            AliasKind::Value | AliasKind::Secret => value.clone(),
            AliasKind::JsonFile => read_json_file(alias.key, value)
                .map_err(|m| problem(Field::Setting(alias.key.into()), m))?,
        };
        settings.insert(alias.key.to_string(), value);
    }
    for (alias, _) in aliases {
        let Some((key, value)) = alias.implies else {
            continue;
        };
        match settings.get(key) {
            Some(other) if other != value => {
                return Err(problem(
                    Field::Setting(alias.key.into()),
                    format!("implies {key} = {value:?}, and {key} is {other:?}"),
                ));
            }
            _ => {
                settings.insert(key.to_string(), value.to_string());
            }
        }
    }
    Ok(settings)
}

/// The outbound policy: the entries given, or the origin of the default
/// setting's URL (none without one). That URL is checked whenever it is
/// given, so a malformed one is refused at start, not at the first call.
fn outbound(
    entries: Option<&[String]>,
    settings: &BTreeMap<String, String>,
) -> Result<OutboundPolicy, Problem> {
    let default = settings
        .get(cli::DEFAULT_OUTBOUND)
        .map(|url| AllowedOrigin::of_url(url))
        .transpose()
        .map_err(|e| problem(Field::Setting(cli::DEFAULT_OUTBOUND.into()), e.to_string()))?;
    let origins = match entries {
        None => default.into_iter().collect(),
        Some(entries) => entries
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                AllowedOrigin::parse(entry)
                    .map_err(|e| problem(Field::AllowOutbound(i), e.to_string()))
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(OutboundPolicy::new(origins))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(dir: &std::path::Path) -> TenantDraft {
        let plugin = dir.join("p.wasm");
        std::fs::write(&plugin, b"not really a component").unwrap();
        TenantDraft {
            name: "alice".into(),
            plugin,
            ..TenantDraft::default()
        }
    }

    /// The alias given as a JSON file that implies another setting.
    fn json_alias() -> &'static Alias {
        cli::ALIASES
            .iter()
            .find(|a| a.kind == AliasKind::JsonFile && a.implies.is_some())
            .expect("an alias given as a JSON file")
    }

    fn given(alias: &'static Alias, value: &str) -> (&'static Alias, String) {
        (alias, value.to_string())
    }

    fn url_alias() -> &'static Alias {
        cli::alias(cli::DEFAULT_OUTBOUND).expect("the default outbound setting is an alias")
    }

    #[test]
    fn defaults_apply_and_aliases_become_plugin_settings() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = draft(dir.path());
        let key = cli::DEFAULT_OUTBOUND;
        d.settings.insert(key.into(), "http://old:1".into());
        d.settings.insert("poll_interval_ms".into(), "500".into());
        d.aliases = vec![given(url_alias(), "http://api:8081/base")];
        let spec = d.check().unwrap();
        assert_eq!(spec.namespace, "alice");
        assert_eq!(spec.limits, Limits::default());
        assert_eq!(
            spec.plugin_config[key], "http://api:8081/base",
            "the alias wins"
        );
        assert_eq!(spec.plugin_config["poll_interval_ms"], "500");
        let origins: Vec<String> = spec
            .policy
            .origins()
            .iter()
            .map(|o| o.to_string())
            .collect();
        assert_eq!(origins, ["http://api:8081"]);
    }

    #[test]
    fn without_a_default_url_nothing_is_allowed_out() {
        let dir = tempfile::tempdir().unwrap();
        let spec = draft(dir.path()).check().unwrap();
        assert!(spec.policy.origins().is_empty());
    }

    #[test]
    fn a_json_file_setting_is_read_and_checked_and_implies_another() {
        let dir = tempfile::tempdir().unwrap();
        let alias = json_alias();
        let (implied, value) = alias.implies.unwrap();
        let good = dir.path().join("good.json");
        std::fs::write(&good, "{\"name\": \"x\"}").unwrap();
        let mut d = draft(dir.path());
        d.aliases = vec![given(alias, good.to_str().unwrap())];
        let spec = d.check().unwrap();
        assert_eq!(spec.plugin_config[alias.key], "{\"name\": \"x\"}");
        assert_eq!(spec.plugin_config[implied], value);

        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\n  oops\n}").unwrap();
        let mut d = draft(dir.path());
        d.aliases = vec![given(alias, bad.to_str().unwrap())];
        let p = d.check().unwrap_err();
        assert_eq!(p.field, Field::Setting(alias.key.into()));
        assert!(p.message.contains("bad.json:2:"), "{}", p.message);
    }

    #[test]
    fn a_contradiction_with_what_an_alias_implies_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let alias = json_alias();
        let (implied, _) = alias.implies.unwrap();
        let file = dir.path().join("p.json");
        std::fs::write(&file, "{}").unwrap();
        let mut d = draft(dir.path());
        d.settings.insert(implied.into(), "something-else".into());
        d.aliases = vec![given(alias, file.to_str().unwrap())];
        let p = d.check().unwrap_err();
        assert_eq!(p.field, Field::Setting(alias.key.into()));
        assert!(
            p.message.contains(&format!("implies {implied}")),
            "{}",
            p.message
        );
    }

    #[test]
    fn each_field_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        type Edit = fn(&mut TenantDraft);
        let cases: [(Edit, Field); 9] = [
            (|d| d.memory_mib = Some(0), Field::MemoryMib),
            (|d| d.memory_mib = Some(4096), Field::MemoryMib),
            (|d| d.call_timeout_ms = Some(0), Field::CallTimeoutMs),
            (
                |d| d.max_concurrent_calls = Some(0),
                Field::MaxConcurrentCalls,
            ),
            (|d| d.namespace = Some("No/pe".into()), Field::Namespace),
            (|d| d.name = "Al/ice".into(), Field::Name),
            (|d| d.plugin = "missing.wasm".into(), Field::Plugin),
            (
                |d| d.allow_outbound = Some(vec!["http://ok:1".into(), "ftp://x".into()]),
                Field::AllowOutbound(1),
            ),
            (
                |d| d.aliases = vec![given(url_alias(), "not a url")],
                Field::Setting(cli::DEFAULT_OUTBOUND.into()),
            ),
        ];
        for (edit, field) in cases {
            let mut d = draft(dir.path());
            edit(&mut d);
            assert_eq!(d.check().unwrap_err().field, field);
        }
    }
}
