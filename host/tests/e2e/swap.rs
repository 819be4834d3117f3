//! The swapper, driven directly: a plugin is swapped in only once it is
//! admitted, listeners hear of a new tool list, and every refusal leaves the
//! old plugin serving.

use crate::common::*;
use settle::events::{Event, Interest};
use settle::swap::{SwapOutcome, Swapper};
use settle::tenant::Tenants;
use std::path::Path;
use std::sync::Arc;

/// A tenant `t` serving a private copy of `plugin`, and its swapper.
struct Setup {
    runtime: Arc<settle::runtime::Runtime>,
    swapper: Swapper,
    file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Setup {
    fn new(plugin: &Path, settings: &[(&str, &str)]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plugin.wasm");
        std::fs::copy(plugin, &file).unwrap();
        let runtime = memory_runtime();
        let tenants = Arc::new(Tenants::new([bare_tenant(&runtime, "t", &file, settings)]));
        Setup {
            swapper: Swapper::new(runtime.clone(), tenants),
            runtime,
            file,
            _dir: dir,
        }
    }

    fn tenant(&self) -> Arc<settle::tenant::Tenant> {
        self.swapper.tenants().get("t").unwrap()
    }

    /// Replaces the plugin file (write aside, rename) and swaps.
    async fn swap_to(&self, bytes: &[u8]) -> SwapOutcome {
        let aside = self.file.with_extension("new");
        std::fs::write(&aside, bytes).unwrap();
        std::fs::rename(&aside, &self.file).unwrap();
        self.swapper.reload(&self.tenant()).await
    }

    async fn tool_names(&self) -> Vec<String> {
        let tools = self.runtime.list_tools(&self.tenant()).await.unwrap();
        tools.iter().map(|t| t.name.clone()).collect()
    }
}

fn refusal(outcome: SwapOutcome) -> String {
    match outcome {
        SwapOutcome::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn the_same_bytes_change_nothing() {
    let s = Setup::new(&hello_plugin_path(), &[]);
    assert_eq!(s.swapper.reload(&s.tenant()).await, SwapOutcome::Unchanged);
}

#[tokio::test]
async fn a_plugin_with_other_tools_is_swapped_in_and_listeners_are_told() {
    let s = Setup::new(&hello_plugin_path(), &[]);
    let tenant = s.tenant();
    let mut listener = tenant.context.events.follow(
        "t",
        Interest {
            tools_list: true,
            ..Interest::default()
        },
    );
    assert_eq!(s.tool_names().await, ["hello"]);
    let outcome = s
        .swap_to(&std::fs::read(fixtures_plugin_path()).unwrap())
        .await;
    assert!(
        matches!(
            outcome,
            SwapOutcome::Loaded {
                tools_changed: true,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert!(s.tool_names().await.contains(&"slow_compute".to_string()));
    let heard = tokio::time::timeout(DEADLINE, listener.next())
        .await
        .unwrap();
    assert!(matches!(heard, Some(Event::ToolsListChanged)), "{heard:?}");
    let metrics = tenant.context.metrics.render();
    assert!(
        metrics.contains(r#"settle_plugin_swaps_total{tenant="t",status="loaded"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_plugin_that_refuses_the_tenants_configuration_is_not_swapped_in() {
    // The fixture plugin ignores `greeting`; the hello plugin refuses an
    // empty one when it is admitted.
    let s = Setup::new(&fixtures_plugin_path(), &[("greeting", "")]);
    let before = s.tenant().plugin.load().digest.clone();
    let reason = refusal(
        s.swap_to(&std::fs::read(hello_plugin_path()).unwrap())
            .await,
    );
    assert!(
        reason.contains(
            "refuses the tenant's configuration: plugin configuration: greeting is empty"
        ),
        "{reason}"
    );
    assert_eq!(
        s.tenant().plugin.load().digest,
        before,
        "the old plugin serves"
    );
    assert!(s.tool_names().await.contains(&"slow_compute".to_string()));
    let metrics = s.tenant().context.metrics.render();
    assert!(
        metrics.contains(r#"settle_plugin_swaps_total{tenant="t",status="refused"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_plugin_built_for_another_contract_version_is_refused_with_both_named() {
    let s = Setup::new(&hello_plugin_path(), &[]);
    let reason = refusal(s.swap_to(&component_built_for("0.1.0")).await);
    assert!(reason.contains("built for settle:plugin@0.1.0"), "{reason}");
    assert!(
        reason.contains(&format!(
            "serves settle:plugin@{}",
            settle::contract::VERSION
        )),
        "{reason}"
    );
    assert_eq!(s.tool_names().await, ["hello"], "the old plugin serves");
}

/// The MCP layer keeps the plugin's tools and server info converted for
/// rmcp; after a swap it must describe the new plugin, not the old one.
#[tokio::test]
async fn after_a_swap_the_mcp_layer_describes_the_new_plugins_tools_and_server() {
    use settle::drain::Drain;
    use settle::mcp::dispatch::{Dispatch, ServeOptions};
    let s = Setup::new(&hello_plugin_path(), &[]);
    let dispatch = Dispatch::new(
        s.runtime.clone(),
        s.tenant(),
        ServeOptions::default(),
        Drain::default(),
    );
    let plugin = s.tenant().plugin.load_full();
    s.runtime
        .info_of(&s.tenant(), plugin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.tool_names().await, ["hello"]);
    assert!(dispatch.tool("hello").is_some());
    assert_eq!(
        dispatch.instructions().as_deref(),
        Some("Call hello to be greeted.")
    );

    let outcome = s
        .swap_to(&std::fs::read(fixtures_plugin_path()).unwrap())
        .await;
    assert!(matches!(outcome, SwapOutcome::Loaded { .. }), "{outcome:?}");
    assert!(dispatch.tool("slow_compute").is_some());
    assert!(
        dispatch.tool("hello").is_none(),
        "the old plugin's tool is still described"
    );
    let instructions = dispatch.instructions().unwrap_or_default();
    assert!(
        !instructions.is_empty() && instructions != "Call hello to be greeted.",
        "instructions after the swap: {instructions:?}"
    );
}

/// While a plugin without `forget-tasks` serves, its tasks may go without
/// a word, so the views the runner kept for ended tasks are dropped when
/// one takes over and again when a plugin that keeps views comes back:
/// a view must never answer for a task that may be gone.
#[tokio::test]
async fn views_of_ended_tasks_are_dropped_at_a_swap_to_or_from_a_plugin_that_cannot_forget() {
    let s = Setup::new(&plugin_path(), &[("device_api", "http://127.0.0.1:9")]);
    let tenant = s.tenant();
    let store = s.runtime.store();
    let views = settle::ended::namespace(&tenant.context.namespace);
    let views_left = async || store.list_keys(&views, None).await.unwrap().0.len();
    let keep_views = |ids: &[&str]| {
        let pairs = ids
            .iter()
            .map(|id| {
                (
                    id.to_string(),
                    format!(r#"{{"taskId":"{id}"}}"#).into_bytes(),
                )
            })
            .collect();
        store.set_many(&views, pairs)
    };
    // More than one page of the store's listing.
    let many: Vec<String> = (0..2500).map(|i| format!("t-{i}")).collect();
    keep_views(&many.iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(s.runtime.ended_task(&tenant, "t-7").await.is_some());

    let outcome = s
        .swap_to(&std::fs::read(fixtures_plugin_path()).unwrap())
        .await;
    assert!(matches!(outcome, SwapOutcome::Loaded { .. }), "{outcome:?}");
    assert_eq!(views_left().await, 0);

    // A view left behind by a call of the device plugin still in flight
    // at the swap: the device plugin, swapped back, does not serve it.
    keep_views(&["t-late"]).await.unwrap();
    let outcome = s.swap_to(&std::fs::read(plugin_path()).unwrap()).await;
    assert!(matches!(outcome, SwapOutcome::Loaded { .. }), "{outcome:?}");
    assert_eq!(s.runtime.ended_task(&tenant, "t-late").await, None);
    assert_eq!(views_left().await, 0);

    // Between two plugins that keep views, nothing is dropped.
    keep_views(&["t-kept"]).await.unwrap();
    let mut other_build = std::fs::read(plugin_path()).unwrap();
    // Other bytes, the same plugin: a custom section appended.
    other_build.push(0);
    wasm_encoder::Encode::encode(
        &wasm_encoder::CustomSection {
            name: "settle-test".into(),
            data: b"another build"[..].into(),
        },
        &mut other_build,
    );
    let outcome = s.swap_to(&other_build).await;
    assert!(matches!(outcome, SwapOutcome::Loaded { .. }), "{outcome:?}");
    assert!(s.runtime.ended_task(&tenant, "t-kept").await.is_some());
}
