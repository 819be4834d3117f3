//! The scheduler, driven directly: due tasks are advanced by their tenant's
//! plugin, one call per group, and tasks of a tenant this runner does not
//! serve are left for the runner that does.

use crate::common::*;
use settle::bindings::settle::plugin::types::{
    CallOutcome, CallRequest, ClientContext, TaskStatus,
};
use settle::scheduler::{Scheduler, now_ms};
use settle::store::Wake;
use settle::tenant::Tenants;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A task-aware 2026-07-28 client, as the plugin sees it.
fn task_client() -> ClientContext {
    ClientContext {
        protocol_version: "2026-07-28".into(),
        tasks: true,
        elicitation: false,
        sampling: false,
        roots: false,
        client_name: Some("scheduler-test".into()),
        client_version: None,
    }
}

/// Starts a scheduler; the returned token stops it.
fn start(
    runtime: &Arc<settle::runtime::Runtime>,
    tenants: &Arc<Tenants>,
    lease: Duration,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let scheduler = Scheduler {
        runtime: runtime.clone(),
        tenants: tenants.clone(),
        lease,
    };
    (stop.clone(), tokio::spawn(scheduler.run(stop)))
}

#[tokio::test]
async fn due_tasks_of_one_group_are_advanced_in_one_call_and_end() {
    let runtime = memory_runtime();
    let tenants = Arc::new(Tenants::new([bare_tenant(
        &runtime,
        "t",
        &fixtures_plugin_path(),
        &[],
    )]));
    let tenant = tenants.get("t").unwrap();
    // Two tasks due at once, in the fixtures' one group.
    let mut ids = Vec::new();
    for label in ["a", "b"] {
        let request = CallRequest {
            name: "slow_compute".into(),
            arguments: serde_json::json!({"seconds": 0, "label": label}).to_string(),
            client: task_client(),
            input_responses: None,
            request_state: None,
        };
        let outcome = runtime.call_tool(&tenant, &request, None).await.unwrap();
        let Ok(CallOutcome::Task(view)) = outcome else {
            panic!("expected a task, got {outcome:?}");
        };
        assert_eq!(view.status, TaskStatus::Working);
        ids.push(view.task_id);
    }
    let (stop, scheduler) = start(&runtime, &tenants, Duration::from_secs(30));
    for id in &ids {
        eventually(&format!("task {id} completes"), async || {
            let view = runtime.get_task(&tenant, id).await.unwrap().unwrap();
            match view.status {
                TaskStatus::Completed => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
    let metrics = tenant.context.metrics.render();
    assert!(
        metrics.contains(r#"settle_plugin_calls_total{tenant="t",call="advance",outcome="ok"} 1"#),
        "one advance for the group: {metrics}"
    );
    stop.cancel();
    tokio::time::timeout(DEADLINE, scheduler)
        .await
        .expect("the scheduler stops when told")
        .unwrap();
}

#[tokio::test]
async fn due_tasks_of_a_tenant_not_served_here_are_left_leased() {
    let runtime = memory_runtime();
    let tenants = Arc::new(Tenants::new([bare_tenant(
        &runtime,
        "t",
        &hello_plugin_path(),
        &[],
    )]));
    let store = runtime.store().clone();
    let wake = Wake {
        task_id: "x".into(),
        group: "g".into(),
        at_ms: 1,
    };
    store.schedule("ghost", &[wake]).await.unwrap();
    let lease = Duration::from_secs(60);
    let (stop, scheduler) = start(&runtime, &tenants, lease);
    // Claimed (its wake moved a lease ahead), but neither advanced nor
    // dropped: the runner that serves `ghost` takes it when the lease ends.
    let due = eventually("the ghost's task is claimed", async || {
        match store.next_due_ms().await.unwrap() {
            Some(at) if at > now_ms() => Ok(at),
            other => Err(format!("next due at {other:?}")),
        }
    })
    .await;
    assert!(due <= now_ms() + lease.as_millis() as u64);
    stop.cancel();
    tokio::time::timeout(DEADLINE, scheduler)
        .await
        .expect("the scheduler stops when told")
        .unwrap();
}

#[tokio::test]
async fn a_failing_advance_is_retried_after_a_second_then_twice_as_long_not_at_its_lease() {
    let runtime = memory_runtime();
    let tenants = Arc::new(Tenants::new([bare_tenant(
        &runtime,
        "t",
        &hostile_plugin_path(),
        &[],
    )]));
    let store = runtime.store().clone();
    let namespace = tenants.get("t").unwrap().context.namespace.clone();
    // The hostile plugin's advance panics for this group.
    let wake = Wake {
        task_id: "x".into(),
        group: "trap".into(),
        at_ms: 1,
    };
    store.schedule(&namespace, &[wake]).await.unwrap();
    let lease = Duration::from_secs(60);
    let started = now_ms();
    let (stop, scheduler) = start(&runtime, &tenants, lease);
    let retry_wake = async |after: u64| {
        eventually("the failed advance's retry is set", async || {
            match store.next_due_ms().await.unwrap() {
                Some(at) if at > after && at < now_ms() + 30_000 => Ok(at),
                other => Err(format!("next due at {other:?}")),
            }
        })
        .await
    };
    let first = retry_wake(started).await;
    assert!(
        first <= now_ms() + 1_000,
        "a second after the first failure, not the lease: due in {} ms",
        first as i64 - now_ms() as i64
    );
    let second = retry_wake(first).await;
    let third = retry_wake(second).await;
    // Each retry is set when the one before failed, so no earlier than it,
    // and twice as far off.
    assert!(second - first >= 2_000, "{first} then {second}");
    assert!(third - second >= 4_000, "{second} then {third}");
    stop.cancel();
    tokio::time::timeout(DEADLINE, scheduler)
        .await
        .expect("the scheduler stops when told")
        .unwrap();
}
