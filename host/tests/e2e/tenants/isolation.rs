//! What one tenant cannot do to another: read its tasks, reach hosts off
//! its allow-list, or slow it down with a hostile plugin.

use super::*;

#[tokio::test]
async fn one_tenant_can_never_read_update_or_cancel_anothers_task() {
    let (_sim, _dir, t) = alice_and_bob(1_500).await;
    let alice = t.client("alice").await;
    let bob = t.client("bob").await;
    let created = structured(&complete(
        call(
            &alice,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 23}),
        )
        .await,
    ));
    let id = created["taskId"].as_str().unwrap().to_string();

    let text = error_text(&complete(
        call(&bob, "get_task", json!({"task_id": id})).await,
    ));
    assert!(text.contains("no such task"), "{text}");
    let text = error_text(&complete(
        call(&bob, "cancel_task", json!({"task_id": id})).await,
    ));
    assert!(text.contains("no such task"), "{text}");
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/cancel", json!({"taskId": id})),
        (
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"confirm-1": {"action": "accept"}}}),
        ),
    ] {
        let (_, body) = t.rpc("bob", method, params, &id).await;
        assert_eq!(body["error"]["code"], -32602, "{method}: {body}");
    }

    // Alice's task was untouched by all of that, and completes.
    let done = wait_for_end(&alice, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    t.server.stop().await;
}

#[tokio::test]
async fn a_forbidden_host_is_denied_and_works_once_allowed() {
    let sim = sim(Duration::from_millis(100)).await;
    let target = format!("{}/api/v1/devices", sim.base_url());
    let dir = Dir::new();
    let hostile = hostile_plugin_path();
    // Mallory's own device API is elsewhere; the simulator is not hers.
    let denied = dir.write(
        false,
        &[tenant("mallory", &hostile, "http://127.0.0.1:9", "")],
    );
    let t = Tenants::start(&denied).await;
    let client = t.client("mallory").await;
    let result = complete(call(&client, "fetch", json!({"url": target})).await);
    let text = error_text(&result);
    assert!(text.contains("denied"), "{text}");
    assert!(text.contains(&sim.base_url()), "{text}");
    let metrics = t.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"settle_outbound_denied_total{tenant="mallory"} "#
        ),
        1.0,
        "{metrics}"
    );
    t.server.stop().await;

    let allowed = dir.write(
        false,
        &[tenant(
            "mallory",
            &hostile,
            "http://127.0.0.1:9",
            &format!(
                "allow_outbound = [\"http://127.0.0.1:9\", {:?}]",
                sim.base_url()
            ),
        )],
    );
    let t = Tenants::start(&allowed).await;
    let client = t.client("mallory").await;
    let result = structured(&complete(
        call(&client, "fetch", json!({"url": target})).await,
    ));
    assert_eq!(result["status"], 200, "{result}");
    t.server.stop().await;
}

// One thread for everything (settle, the simulator, both clients): a
// plugin that spins must hand the thread back at every epoch tick (10 ms),
// with a chance for the runtime to read sockets, though it runs on a
// connection's task, where wakes of the task itself are absorbed
// (`self_wake`). With wasmtime's default yield (a plain self-wake) the
// neighbour got one or two calls through in the whole spin; with tokio's
// yield, about 40.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_plugin_hands_its_thread_back_at_every_tick() {
    let _alone = cpu_heavy().await;
    let (_sim, _dir, t) = alice_and_mallory("call_timeout_ms = 2000").await;
    let alice = Arc::new(t.client("alice").await);
    let mallory = t.client("mallory").await;
    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let load = neighbour_load(alice.clone(), stop.clone(), ok.clone(), failed.clone());
    // The neighbour is being served before the spin starts.
    eventually("the neighbour's first call", async || {
        match ok.load(Ordering::Relaxed) {
            0 => Err("no call answered yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    let before = ok.load(Ordering::Relaxed);
    let err = mallory
        .call_tool_once(CallToolRequestParams::new("spin").with_arguments(args(json!({}))))
        .await
        .expect_err("the spin is stopped");
    let during = ok.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert!(err.to_string().contains("deadline"), "{err}");
    println!("neighbour calls answered during a 2 s spin on the same thread: {during}");
    assert!(
        during >= 8,
        "the spinning plugin kept the thread: {during} neighbour calls in 2 s"
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    t.server.stop().await;
}

// Two worker threads, as `settle serve` has on a 2-core machine: a plugin
// that spins holds one of them for an epoch tick at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_plugin_is_contained_and_its_neighbour_keeps_being_served() {
    let _alone = cpu_heavy().await;
    let (_sim, _dir, t) = alice_and_mallory("memory_mib = 16\ncall_timeout_ms = 1000").await;
    let alice = Arc::new(t.client("alice").await);
    let mallory = t.client("mallory").await;

    // Something of Alice's for Mallory to look for.
    let created = structured(&complete(
        call(
            &alice,
            "set_temperature",
            json!({"device_id": "ac-bedroom", "temperature": 22}),
        )
        .await,
    ));
    let alice_task = created["taskId"].as_str().unwrap().to_string();

    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let load = neighbour_load(alice.clone(), stop.clone(), ok.clone(), failed.clone());

    let fault = |tool: &'static str| {
        let mallory = &mallory;
        async move {
            let started = Instant::now();
            let err = mallory
                .call_tool_once(CallToolRequestParams::new(tool).with_arguments(args(json!({}))))
                .await
                .expect_err("the call fails");
            (err.to_string(), started.elapsed())
        }
    };
    let (spin, took) = fault("spin").await;
    assert!(spin.contains("exceeded its deadline of 1s"), "{spin}");
    assert!(
        took < Duration::from_secs(5),
        "stopped at its deadline: {took:?}"
    );
    let (bomb, _) = fault("bomb").await;
    assert!(
        bomb.contains("exceeded its memory limit of 16 MiB"),
        "{bomb}"
    );
    let (trap, _) = fault("trap").await;
    assert!(trap.contains("plugin trapped"), "{trap}");

    // Alice's keys, by every name Mallory can think of.
    for (bucket, key) in [
        ("default", format!("task/{alice_task}")),
        ("default", format!("../alice/task/{alice_task}")),
        ("default", format!("alice/task/{alice_task}")),
        ("alice", format!("task/{alice_task}")),
    ] {
        let seen = structured(&complete(
            call(&mallory, "peek", json!({"bucket": bucket, "key": key})).await,
        ));
        assert!(seen["value"].is_null(), "{bucket}/{key}: {seen}");
        assert!(
            seen["keys"].as_array().is_none_or(|k| k.is_empty()),
            "{seen}"
        );
    }
    let escape = structured(&complete(call(&mallory, "escape", json!({})).await));
    assert_eq!(escape["files"], false, "{escape}");
    assert_eq!(escape["environment"], json!([]), "{escape}");
    assert_eq!(escape["socket"], false, "{escape}");

    // Again, now that the neighbour has been running a while.
    let (spin, _) = fault("spin").await;
    assert!(spin.contains("deadline"), "{spin}");
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("neighbour calls during the hostile run: {ok} succeeded, {failed} failed");
    assert!(ok > 10, "the neighbour was served: {ok}");
    assert_eq!(failed, 0);

    // Mallory itself still answers a well-behaved call.
    let pong = structured(&complete(call(&mallory, "ping", json!({})).await));
    assert_eq!(pong["pong"], true);

    let metrics = t.metrics().await;
    for kind in ["deadline", "memory", "trap"] {
        assert!(
            metric(
                &metrics,
                &format!(r#"settle_plugin_faults_total{{tenant="mallory",kind="{kind}"}} "#)
            ) >= 1.0,
            "{kind}: {metrics}"
        );
    }
    assert_eq!(
        metric(
            &metrics,
            r#"settle_plugin_faults_total{tenant="alice",kind="deadline"} "#
        ),
        0.0
    );
    assert!(!metrics.contains(&token("alice")) && !metrics.contains(&token("mallory")));
    assert!(!metrics.contains("ac-bedroom") && !metrics.contains(&alice_task));
    t.server.stop().await;
}

#[tokio::test]
async fn a_hostile_fault_is_logged_with_the_tenant_name() {
    let dir = Dir::new();
    let config = dir.write(
        false,
        &[tenant(
            "mallory",
            &hostile_plugin_path(),
            "http://127.0.0.1:9",
            "call_timeout_ms = 500",
        )],
    );
    let process =
        Process::start_with(&["--config", config.to_str().unwrap(), "--store", "memory"]).await;
    let url = process.url.replace("{tenant}", "mallory");
    let client =
        modern_http_client_with_token(&url, Some(&token("mallory")), Declares::default()).await;
    let err = client
        .call_tool_once(CallToolRequestParams::new("trap").with_arguments(args(json!({}))))
        .await
        .expect_err("the trap fails the call");
    assert!(err.to_string().contains("trapped"), "{err}");
    eventually(
        "the fault is logged with the tenant",
        async || match process.log().contains("tenant=mallory") {
            true => Ok(()),
            false => Err(process.log()),
        },
    )
    .await;
    let log = process.log();
    assert!(log.contains("plugin trapped"), "{log}");
    assert!(log.contains("hostile plugin trapped on purpose"), "{log}");
}

// A call takes the tenant's spare instance, made while the call before it
// ran (`settle::instances`): back-to-back calls are the case where a spare
// is taken, and each must still find an instance that served nothing.
#[tokio::test]
async fn every_call_runs_in_an_instance_that_served_no_call_before() {
    let (_sim, _dir, t) = alice_and_mallory("").await;
    let mallory = t.client("mallory").await;
    for n in 0..20 {
        let seen = structured(&complete(call(&mallory, "remember", json!({})).await));
        assert_eq!(seen["calls_seen"], 1, "call {n}: {seen}");
    }
    // Back to back, each call alone, so spares were made and taken: the
    // calls above ran in spares, not only in instances made for them.
    let metrics = t.metrics().await;
    let ahead = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"settle_plugin_instances_total{tenant="mallory",made="ahead"} "#)
        })
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        ahead >= 1,
        "no call of mallory's ran in a spare:\n{metrics}"
    );
    // Each call, alone, retired its instance to the slot instead of
    // dropping it before its answer, and the next call's spare-making
    // dropped it. Twenty calls later the slot holds the last call's
    // retired instance and at most one spare: more would be a leak of
    // pool slots.
    let waiting = metrics
        .lines()
        .find_map(|l| l.strip_prefix("settle_plugin_instances_waiting "))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no settle_plugin_instances_waiting:\n{metrics}"));
    assert!(
        (1..=2).contains(&waiting),
        "{waiting} instances wait after twenty calls of one tenant:\n{metrics}"
    );
    t.server.stop().await;
}

// A spare is made ahead of its call, possibly long before: the call's
// deadline must count from the call's start, not from the spare's making.
#[tokio::test]
async fn a_call_on_a_spare_made_long_before_gets_its_whole_deadline() {
    let timeout = Duration::from_millis(500);
    let (_sim, _dir, t) = alice_and_mallory("call_timeout_ms = 500").await;
    let mallory = t.client("mallory").await;
    complete(call(&mallory, "ping", json!({})).await);
    // Not a wait for a condition: the subject of the test is that the
    // spare made during `ping` has outlived a whole call timeout.
    tokio::time::sleep(timeout + Duration::from_millis(200)).await;
    let started = Instant::now();
    let err = mallory
        .call_tool_once(CallToolRequestParams::new("spin").with_arguments(args(json!({}))))
        .await
        .expect_err("the spin is stopped");
    let ran = started.elapsed();
    assert!(err.to_string().contains("deadline"), "{err}");
    assert!(
        ran >= timeout - Duration::from_millis(50),
        "the spin was stopped after {ran:?}, before its {timeout:?}"
    );
    t.server.stop().await;
}
