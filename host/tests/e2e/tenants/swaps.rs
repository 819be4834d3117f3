//! Swapping a tenant's plugin while it serves: under load, mid-task,
//! refused when broken, by the watcher, SIGHUP and the admin endpoint.

use super::*;

#[tokio::test]
async fn a_swap_under_continuous_load_fails_no_call() {
    let _alone = cpu_heavy().await;
    let s = Swappable::start(100, false).await;
    let t = &s.tenants;
    let (original, plugin) = (&s.original, &s.plugin);
    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut loads = Vec::new();
    for _ in 0..4 {
        let client = Arc::new(t.client("alice").await);
        loads.push(neighbour_load(
            client,
            stop.clone(),
            ok.clone(),
            failed.clone(),
        ));
    }
    const SWAPS: u32 = 6;
    for n in 1..=SWAPS {
        replace(plugin, &variant(original, n));
        let (status, swap) = t.reload("alice").await;
        assert_eq!(
            (status, swap["result"].as_str()),
            (200, Some("loaded")),
            "{swap}"
        );
        assert_eq!(swap["tools_changed"], false, "{swap}");
    }
    stop.store(true, Ordering::Relaxed);
    for load in loads {
        load.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("swap under load: {SWAPS} swaps, {ok} calls succeeded, {failed} failed");
    assert!(ok > 0);
    assert_eq!(failed, 0);
    let metrics = t.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"settle_plugin_swaps_total{tenant="alice",status="loaded"} "#
        ),
        SWAPS as f64
    );
    s.stop().await;
}

#[tokio::test]
async fn a_task_started_before_a_swap_completes_after_it() {
    let _alone = cpu_heavy().await;
    // Long enough that compiling the new version ends first.
    let s = Swappable::start(8_000, false).await;
    let t = &s.tenants;
    let (original, plugin) = (&s.original, &s.plugin);
    let alice = t.client("alice").await;
    let created = structured(&complete(
        call(
            &alice,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 25}),
        )
        .await,
    ));
    assert_eq!(created["status"], "working", "{created}");
    let id = created["taskId"].as_str().unwrap().to_string();

    replace(plugin, &variant(original, 1));
    let (_, swap) = t.reload("alice").await;
    assert_eq!(swap["result"], "loaded", "{swap}");
    let before = structured(&complete(
        call(&alice, "get_task", json!({"task_id": id})).await,
    ));
    assert_eq!(
        before["status"], "working",
        "the swap came before the end: {before}"
    );

    let done = wait_for_end(&alice, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    s.stop().await;
}

#[tokio::test]
async fn a_broken_plugin_is_refused_and_the_old_one_keeps_serving() {
    let s = Swappable::start(100, false).await;
    let t = &s.tenants;
    let plugin = &s.plugin;
    let alice = t.client("alice").await;

    // An empty component: valid, but it exports nothing.
    let empty_component = b"\0asm\x0d\0\x01\0".to_vec();
    for (bytes, expected) in [
        (
            b"not wasm at all".to_vec(),
            "is not a valid WebAssembly component",
        ),
        (
            empty_component,
            "does not fit the settle:plugin/mcp-plugin world",
        ),
    ] {
        replace(plugin, &bytes);
        let (status, swap) = t.reload("alice").await;
        assert_eq!(
            (status, swap["result"].as_str()),
            (422, Some("refused")),
            "{swap}"
        );
        let reason = swap["reason"].as_str().unwrap();
        assert!(reason.contains(expected), "{reason}");
        assert!(reason.contains("alice.wasm"), "{reason}");
        let state = structured(&complete(
            call(
                &alice,
                "get_device_state",
                json!({"device_id": "ac-living"}),
            )
            .await,
        ));
        assert_eq!(
            state["deviceId"], "ac-living",
            "the old plugin serves: {state}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn the_watcher_swaps_a_changed_file_and_refuses_a_broken_one() {
    let s = Swappable::start(100, true).await;
    let t = &s.tenants;
    let (original, plugin) = (&s.original, &s.plugin);
    let alice = t.client("alice").await;
    let swaps = |status: &'static str| {
        let t = &t;
        async move {
            metric(
                &t.metrics().await,
                &format!(r#"settle_plugin_swaps_total{{tenant="alice",status="{status}"}} "#),
            )
        }
    };
    let wait_for = |status: &'static str, count: f64| {
        let swaps = &swaps;
        async move {
            eventually(&format!("a {status} swap"), async || {
                let seen = swaps(status).await;
                match seen >= count {
                    true => Ok(()),
                    false => Err(format!("{seen} {status} swaps")),
                }
            })
            .await
        }
    };
    replace(plugin, b"garbage");
    wait_for("refused", 1.0).await;
    let state = structured(&complete(
        call(
            &alice,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    ));
    assert_eq!(state["deviceId"], "ac-living");
    replace(plugin, &variant(original, 7));
    wait_for("loaded", 1.0).await;
    let state = structured(&complete(
        call(
            &alice,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    ));
    assert_eq!(state["deviceId"], "ac-living");
    s.stop().await;
}

#[tokio::test]
async fn a_new_tool_list_reaches_listening_clients() {
    let s = Swappable::start(100, false).await;
    let t = &s.tenants;
    let plugin = &s.plugin;
    let mut listen = Listen::open_with_token(
        &t.url("alice"),
        Some(&token("alice")),
        9,
        json!({"toolsListChanged": true}),
        json!({}),
    )
    .await;
    let ack = listen.next(DEADLINE).await.expect("acknowledged");
    assert!(ack.get("error").is_none(), "{ack}");

    replace(plugin, &std::fs::read(hostile_plugin_path()).unwrap());
    let (_, swap) = t.reload("alice").await;
    assert_eq!(swap["tools_changed"], true, "{swap}");
    let notice = listen.next(DEADLINE).await.expect("a notification");
    assert_eq!(
        notice["method"], "notifications/tools/list_changed",
        "{notice}"
    );
    let tools = t.client("alice").await.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|tool| tool.name == "ping"), "{tools:?}");
    s.stop().await;
}

#[tokio::test]
async fn settle_reload_signals_the_server_to_swap() {
    let sim = sim(Duration::from_millis(100)).await;
    let dir = Dir::new();
    let original = std::fs::read(plugin_path()).unwrap();
    let plugin = dir.copy(&plugin_path(), "alice.wasm");
    let config = dir.write(false, &[tenant("alice", &plugin, &sim.base_url(), "")]);
    let pid_file = dir.path("settle.pid");
    let process = Process::start_with(&[
        "--config",
        config.to_str().unwrap(),
        "--store",
        "memory",
        "--pid-file",
        pid_file.to_str().unwrap(),
    ])
    .await;
    replace(&plugin, &variant(&original, 3));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["reload", "--pid-file", pid_file.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    eventually("the server swaps on SIGHUP", async || {
        match process.log().contains("plugin swapped") {
            true => Ok(()),
            false => Err(process.log()),
        }
    })
    .await;
    let url = process.url.replace("{tenant}", "alice");
    let alice =
        modern_http_client_with_token(&url, Some(&token("alice")), Declares::default()).await;
    let state = structured(&complete(
        call(
            &alice,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    ));
    assert_eq!(state["deviceId"], "ac-living");

    // Without a server behind the pid file, reload says so.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .args([
            "reload",
            "--pid-file",
            dir.path("missing.pid").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read it"));
}
