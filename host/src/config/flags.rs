//! The default tenant of a runner without a tenants file, from the flags:
//! the same [`TenantDraft`] a tenants-file table gives, checked the same
//! way, with each problem named by its flag.

use super::DEFAULT_TENANT;
use super::tenant::{Field, TenantDraft, TenantSpec};
use crate::cli::{self, ServeArgs};

/// The default tenant the flags describe.
pub fn default_tenant(args: &ServeArgs) -> anyhow::Result<TenantSpec> {
    let draft = TenantDraft {
        name: DEFAULT_TENANT.into(),
        namespace: None,
        plugin: args.plugin.clone(),
        settings: args.plugin_config.iter().cloned().collect(),
        aliases: args.aliases(),
        allow_outbound: (!args.allow_outbound.is_empty()).then(|| args.allow_outbound.clone()),
        memory_mib: Some(args.memory_mib),
        call_timeout_ms: Some(args.call_timeout_ms),
        max_concurrent_calls: None,
        token: None,
    };
    draft
        .check()
        .map_err(|p| anyhow::anyhow!("{}: {}", flag(&p.field), p.message))
}

/// The flag that sets `field`.
fn flag(field: &Field) -> String {
    match field {
        Field::Plugin => "--plugin".into(),
        Field::Setting(key) if cli::alias(key).is_some() => format!("--{}", key.replace('_', "-")),
        Field::Setting(key) => format!("--plugin-config {key}"),
        Field::AllowOutbound(_) => "--allow-outbound".into(),
        Field::MemoryMib => "--memory-mib".into(),
        Field::CallTimeoutMs => "--call-timeout-ms".into(),
        // Fixed for the default tenant; named for completeness.
        Field::Name | Field::Namespace | Field::MaxConcurrentCalls => field.key().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{AliasKind, Cli, Command};
    use clap::Parser;

    fn tenant(extra: &[&str]) -> anyhow::Result<TenantSpec> {
        let dir = tempfile::tempdir().unwrap();
        let plugin = dir.path().join("p.wasm");
        std::fs::write(&plugin, b"not really a component").unwrap();
        let mut argv = vec!["settle", "serve", "--plugin", plugin.to_str().unwrap()];
        argv.extend_from_slice(extra);
        let Command::Serve(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not serve");
        };
        default_tenant(&args)
    }

    /// The flag of the alias of this kind.
    fn flag_of(kind: AliasKind, implies: bool) -> String {
        let alias = cli::ALIASES
            .iter()
            .find(|a| a.kind == kind && a.implies.is_some() == implies)
            .unwrap();
        format!("--{}", alias.key.replace('_', "-"))
    }

    #[test]
    fn alias_flags_become_plugin_settings_and_the_url_origin_the_allow_list() {
        let url_flag = format!("--{}", cli::DEFAULT_OUTBOUND.replace('_', "-"));
        let secret_flag = flag_of(AliasKind::Secret, false);
        let spec = tenant(&[
            &url_flag,
            "http://api.example:8081/base",
            &secret_flag,
            "tok",
            "--plugin-config",
            "poll_interval_ms=500",
        ])
        .unwrap();
        assert_eq!(spec.name, "default");
        assert_eq!(
            spec.plugin_config[cli::DEFAULT_OUTBOUND],
            "http://api.example:8081/base"
        );
        assert_eq!(
            spec.plugin_config[&secret_flag[2..].replace('-', "_")],
            "tok"
        );
        assert_eq!(spec.plugin_config["poll_interval_ms"], "500");
        let origins: Vec<String> = spec
            .policy
            .origins()
            .iter()
            .map(|o| o.to_string())
            .collect();
        assert_eq!(origins, ["http://api.example:8081"]);
    }

    #[test]
    fn problems_name_their_flag() {
        let url_flag = format!("--{}", cli::DEFAULT_OUTBOUND.replace('_', "-"));
        let json_flag = flag_of(AliasKind::JsonFile, true);
        for (extra, flag) in [
            (vec!["--memory-mib", "0"], "--memory-mib"),
            (vec!["--call-timeout-ms", "0"], "--call-timeout-ms"),
            (vec!["--allow-outbound", "127.0.0.1:80"], "--allow-outbound"),
            (vec![&url_flag, "ftp://x"], &url_flag),
            (vec![&json_flag, "/nonexistent.json"], &json_flag),
        ] {
            let err = format!("{:#}", tenant(&extra).unwrap_err());
            assert!(err.starts_with(flag), "{extra:?}: {err}");
        }
    }
}
