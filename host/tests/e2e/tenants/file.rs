//! The tenants file itself, the compiled-plugin cache, and stdio serving
//! one tenant of a file.

use super::*;

#[tokio::test]
async fn a_bad_tenants_file_stops_the_start_with_file_and_line() {
    let dir = Dir::new();
    let plugin = plugin_path();
    let cases = [
        (
            tenant("alice", &plugin, "http://127.0.0.1:1", "memory_mb = 3"),
            11,
            "unknown field `memory_mb`",
        ),
        (
            tenant("alice", &dir.path("nope.wasm"), "http://127.0.0.1:1", ""),
            7,
            "nope.wasm does not exist",
        ),
        (
            tenant(
                "alice",
                &plugin,
                "http://127.0.0.1:1",
                "allow_outbound = [\"127.0.0.1:80\"]",
            ),
            11,
            "expected scheme://host[:port]",
        ),
        (
            format!(
                "{}{}",
                tenant("alice", &plugin, "http://127.0.0.1:1", ""),
                tenant("alice", &plugin, "http://127.0.0.1:1", "")
            ),
            12,
            "duplicate key",
        ),
    ];
    for (text, line, expected) in cases {
        let config = dir.write(false, &[text]);
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"))
            .args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--store",
                "memory",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        let located = format!("{}:{line}:", config.display());
        assert!(stderr.contains(&located), "expected {located}: {stderr}");
        assert!(stderr.contains(expected), "expected {expected}: {stderr}");
    }
}

#[tokio::test]
async fn compiled_plugins_are_cached_and_a_damaged_artifact_is_compiled_again() {
    let _alone = cpu_heavy().await;
    let dir = tempfile::tempdir().unwrap();
    let runtime = settle::runtime::Runtime::new(
        settle::store::Store::open("memory").unwrap(),
        Some(dir.path().to_path_buf()),
    )
    .unwrap();
    let plugin = runtime.load_plugin(&plugin_path()).expect("loads");
    let artifacts: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    let name = artifacts[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    // The key: the component's digest, the engine's compatibility hash and
    // settle's version.
    assert!(name.starts_with(&plugin.digest), "{name}");
    assert!(
        name.ends_with(&format!("-{}.cwasm", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );
    let good = std::fs::metadata(&artifacts[0]).unwrap().len();

    std::fs::write(&artifacts[0], b"damaged").unwrap();
    runtime.load_plugin(&plugin_path()).expect("compiled again");
    assert_eq!(std::fs::metadata(&artifacts[0]).unwrap().len(), good);
}

#[tokio::test]
async fn stdio_serves_the_one_tenant_it_is_told_to() {
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use rmcp::{ClientLifecycleMode, ClientServiceExt};
    let sim = sim(Duration::from_millis(100)).await;
    let dir = Dir::new();
    let config = dir.write(
        false,
        &[
            tenant("alice", &plugin_path(), &sim.base_url(), ""),
            tenant("mallory", &hostile_plugin_path(), "http://127.0.0.1:9", ""),
        ],
    );
    let settle = |extra: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"));
        command
            .args(["serve", "--stdio", "--store", "memory", "--config"])
            .arg(&config)
            .args(extra)
            .env("SETTLE_CACHE_DIR", cache_dir())
            .stdin(std::process::Stdio::piped());
        command
    };

    // Two tenants and no --tenant: stdio cannot choose.
    let output = settle(&[])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("choose one with --tenant"), "{stderr}");

    let command = settle(&["--tenant", "mallory"]).configure(|c| {
        c.stderr(std::process::Stdio::null());
    });
    let client = rmcp::model::ClientConfig::new(
        Default::default(),
        rmcp::model::Implementation::new("t", "0"),
    )
    .serve_with_lifecycle(
        TokioChildProcess::new(command).unwrap(),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("stdio client connects");
    let tools = client.list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "ping"),
        "mallory's plugin: {tools:?}"
    );
}

#[tokio::test]
async fn a_tenant_needs_no_device_settings() {
    let dir = Dir::new();
    let hello = dir.copy(&hello_plugin_path(), "hello.wasm");
    let table = format!(
        "[tenant.hello]\nplugin = {:?}\ntoken_file = \"hello.token\"\nplugin_config = {{ greeting = \"Hej\" }}\n",
        hello.to_str().unwrap()
    );
    let t = Tenants::start(&dir.write(false, &[table])).await;
    let client = t.client("hello").await;
    let hello = complete(call(&client, "hello", json!({"name": "Bob"})).await);
    assert_eq!(structured(&hello)["greeting"], "Hej, Bob!");
    t.server.stop().await;
}
