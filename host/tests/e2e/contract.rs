//! A plugin built against another version of the `settle:plugin` contract
//! is refused when it is loaded, with both versions named.

use crate::common::*;
use settle::contract;
use settle::plugin::LoadError;

#[test]
fn a_plugin_built_for_0_1_0_is_refused_at_load_with_both_versions_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.wasm");
    std::fs::write(&path, component_built_for("0.1.0")).unwrap();
    let runtime =
        settle::runtime::Runtime::new(settle::store::Store::memory(), None).expect("runtime");
    let err = match runtime.load_plugin(&path) {
        Err(err) => err,
        Ok(_) => panic!("a 0.1.0 plugin was loaded"),
    };
    assert!(matches!(err, LoadError::Version { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("old.wasm"), "{message}");
    assert!(
        message.contains("built for settle:plugin@0.1.0"),
        "{message}"
    );
    assert!(
        message.contains(&format!("serves settle:plugin@{}", contract::VERSION)),
        "{message}"
    );
}

#[test]
fn the_same_shape_of_this_version_passes_the_check_and_meets_the_linker() {
    // The built component is only refused for its version: at the version
    // served, the check passes and the linker names what it lacks.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bare.wasm");
    std::fs::write(&path, component_built_for(contract::VERSION)).unwrap();
    let runtime =
        settle::runtime::Runtime::new(settle::store::Store::memory(), None).expect("runtime");
    match runtime.load_plugin(&path) {
        Err(LoadError::Interface { .. }) => {}
        Err(other) => panic!("expected a linker refusal, got: {other}"),
        Ok(_) => panic!("a bare component was loaded"),
    }
}

#[tokio::test]
async fn a_runner_given_a_0_1_0_plugin_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.wasm");
    std::fs::write(&path, component_built_for("0.1.0")).unwrap();
    let cache = cache_dir();
    let args = serve_args(&[
        "settle",
        "serve",
        "--plugin",
        path.to_str().unwrap(),
        "--store",
        "memory",
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    let config = settle::config::RunnerConfig::from_args(&args).expect("flags are valid");
    let err = match settle::app::Runner::start(config).await {
        Err(err) => format!("{err:#}"),
        Ok(_) => panic!("a runner started with a 0.1.0 plugin"),
    };
    assert!(err.contains("built for settle:plugin@0.1.0"), "{err}");
}

/// The runner answers `tasks/get` of an ended task itself only for a
/// plugin that tells it when a task is removed (it imports
/// `forget-tasks`): the device plugin does. The fixtures and hello plugins
/// do not, so the runner asks them for every task.
#[test]
fn ended_tasks_are_kept_only_for_a_plugin_that_says_when_it_removes_one() {
    let runtime = memory_runtime();
    let keeps = |path: std::path::PathBuf| {
        runtime
            .load_plugin(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .keeps_ended
    };
    assert!(keeps(plugin_path()), "the device plugin");
    assert!(!keeps(fixtures_plugin_path()), "the fixtures plugin");
    assert!(!keeps(hello_plugin_path()), "the hello plugin");
}

/// Views a runner kept for a plugin that can forget tasks may have
/// outlived their tasks once a runner serves one that cannot (it removes
/// tasks without a word), so that runner drops them when it starts, and
/// leaves a mark on the store: views found later (its drop failed, or a
/// late write) are dropped before a plugin that keeps views serves. Once
/// such a plugin has started, its views are kept across restarts.
#[tokio::test]
async fn a_runner_whose_plugin_cannot_forget_tasks_drops_the_views_kept_before() {
    let store = settle::store::Store::memory();
    // Starts a runner on `store` with 1,200 views stored; how many are left.
    let views_left_after_start = async |mut config: settle::config::RunnerConfig| {
        config.store = store.clone();
        let views = settle::ended::namespace(&config.tenants[0].namespace);
        let kept = (0..1200)
            .map(|i| (format!("t-{i}"), br#"{"status":"completed"}"#.to_vec()))
            .collect();
        store.set_many(&views, kept).await.unwrap();
        let _runner = settle::app::Runner::start(config)
            .await
            .expect("runner starts");
        store.list_keys(&views, None).await.unwrap().0.len()
    };
    assert_eq!(
        views_left_after_start(config_for(&fixtures_plugin_path(), &[])).await,
        0,
        "the fixtures plugin"
    );
    // Views found after such a plugin served (as if its drop had failed)
    // are dropped before the device plugin, which keeps views, serves.
    assert_eq!(
        views_left_after_start(config(&[])).await,
        0,
        "the device plugin, after the fixtures plugin"
    );
    assert_eq!(
        views_left_after_start(config(&[])).await,
        1000,
        "the device plugin, after itself (one page of the listing)"
    );
}
