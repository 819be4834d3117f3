//! `settle:plugin/runner`: scheduling, task change notices, logging, and
//! the compare-and-swap of many keys `wasi:keyvalue` does not have.

use crate::bindings::settle::plugin::runner as wit;
use crate::bindings::settle::plugin::types::TaskView;
use crate::capabilities::kv::{KvCtx, MAX_BATCH_KEYS};
use crate::context::TenantContext;
use crate::ended::Pending;
use crate::events::{Event, Topic};
use crate::store::{Swap, Wake};
use wasmtime::component::{HasData, Linker};

/// The most wakes one call may schedule: bounds the store work one plugin
/// call can cause.
pub const MAX_WAKES_PER_CALL: usize = 10_000;

/// The longest log line kept from a plugin.
pub const MAX_LOG_LINE: usize = 4096;

/// Where a plugin's progress and log notifications go while it serves a
/// client request. The MCP layer implements it; the runtime stays free of
/// protocol types.
pub trait RequestNotifier: Send + Sync {
    /// A `notifications/progress` for the request, if it has a token.
    fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> futures::future::BoxFuture<'static, ()>;

    /// A `notifications/message`, if the client asked for this level.
    fn log(
        &self,
        level: LogLevel,
        logger: Option<String>,
        data: serde_json::Value,
    ) -> futures::future::BoxFuture<'static, ()>;
}

pub use wit::LogLevel;

/// The view the generated `Host` trait is implemented for.
pub struct RunnerView<'a> {
    /// The store and namespace wakes are written to.
    pub kv: &'a KvCtx,
    /// Where task changes are published and logs are attributed.
    pub tenant: &'a TenantContext,
    /// The client request being served, if any.
    pub request: Option<&'a dyn RequestNotifier>,
    /// Where the views of tasks that ended go, if the runner keeps them
    /// for this plugin.
    pub ended: Option<&'a Pending>,
}

struct HasRunner;

impl HasData for HasRunner {
    type Data<'a> = RunnerView<'a>;
}

/// Adds `settle:plugin/runner` to the linker.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> RunnerView<'_>,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasRunner>(linker, view)
}

/// The refusal of a list longer than [`MAX_WAKES_PER_CALL`].
fn too_many() -> wit::ScheduleError {
    wit::ScheduleError::TooMany(MAX_WAKES_PER_CALL as u32)
}

impl RunnerView<'_> {
    /// Whether anyone would hear a notice about `topic`
    /// ([`crate::events::Hub::is_heard`]). A notice nobody hears is not
    /// sent, and what it tells of needs no flush before it: one command at
    /// a time takes two fsyncs instead of three (docs/performance.md,
    /// sixteenth round).
    fn is_heard(&self, topic: Topic<'_>) -> bool {
        self.tenant.events.is_heard(&self.tenant.name, topic)
    }

    /// Puts what the runner has committed on disk before a notice leaves
    /// for listeners: a notice never tells of a change a crash could undo.
    /// `false` (logged) when that failed; the notice is then not sent.
    async fn flushed_before(&self, notice: &str) -> bool {
        match self.kv.store.flush().await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(tenant = %self.tenant.name, "{notice} not sent to listeners: {e}");
                false
            }
        }
    }
}

impl wit::Host for RunnerView<'_> {
    async fn schedule(
        &mut self,
        wakes: Vec<wit::Wake>,
    ) -> wasmtime::Result<Result<(), wit::ScheduleError>> {
        if wakes.len() > MAX_WAKES_PER_CALL {
            return Ok(Err(too_many()));
        }
        let wakes: Vec<Wake> = wakes
            .into_iter()
            .map(|w| Wake {
                task_id: w.task_id,
                group: w.group,
                at_ms: w.at_ms,
            })
            .collect();
        Ok(self
            .kv
            .store
            .schedule(&self.kv.namespace, &wakes)
            .await
            .map_err(|e| wit::ScheduleError::Store(e.to_string())))
    }

    async fn unschedule(
        &mut self,
        task_ids: Vec<String>,
    ) -> wasmtime::Result<Result<(), wit::ScheduleError>> {
        if task_ids.len() > MAX_WAKES_PER_CALL {
            return Ok(Err(too_many()));
        }
        Ok(self
            .kv
            .store
            .unschedule(&self.kv.namespace, &task_ids)
            .await
            .map_err(|e| wit::ScheduleError::Store(e.to_string())))
    }

    async fn task_changed(&mut self, task: TaskView) -> wasmtime::Result<()> {
        let heard = self.is_heard(Topic::Task(&task.task_id));
        if heard && !self.flushed_before("a change of a task").await {
            return Ok(());
        }
        if task.status.is_terminal() {
            self.tenant
                .metrics
                .task(&self.tenant.name, task.status.as_str());
        }
        // Kept with an fsync'd write at the end of the call, which puts
        // the change it shows on disk too, and withdrawn if the call's
        // writes were lost to a reopen of the store (`Probe::guard`).
        if let Some(ended) = self.ended {
            ended.note(&task);
        }
        if heard {
            self.tenant.events.publish_task(&self.tenant.name, task);
        }
        Ok(())
    }

    async fn forget_tasks(
        &mut self,
        task_ids: Vec<String>,
    ) -> wasmtime::Result<Result<(), wit::ScheduleError>> {
        if task_ids.len() > MAX_WAKES_PER_CALL {
            return Ok(Err(too_many()));
        }
        if let Some(ended) = self.ended {
            ended.drop_for(&task_ids);
        }
        Ok(
            crate::ended::forget(&self.kv.store, &self.kv.namespace, &task_ids)
                .await
                .map_err(|e| wit::ScheduleError::Store(e.to_string())),
        )
    }

    async fn swap_many(
        &mut self,
        swaps: Vec<wit::Swap>,
    ) -> wasmtime::Result<Result<Vec<u32>, wit::ScheduleError>> {
        if swaps.len() > MAX_BATCH_KEYS {
            return Ok(Err(wit::ScheduleError::TooMany(MAX_BATCH_KEYS as u32)));
        }
        let swaps = swaps
            .into_iter()
            .map(|swap| Swap {
                key: swap.key,
                seen: swap.seen,
                value: swap.value,
            })
            .collect();
        Ok(self
            .kv
            .store
            .compare_and_swap_many(&self.kv.namespace, swaps)
            .await
            .map_err(|e| wit::ScheduleError::Store(e.to_string())))
    }

    async fn resource_updated(&mut self, uri: String) -> wasmtime::Result<()> {
        if !self.is_heard(Topic::Resource(&uri))
            || !self.flushed_before("a change of a resource").await
        {
            return Ok(());
        }
        self.tenant.events.publish_resource(&self.tenant.name, &uri);
        Ok(())
    }

    async fn list_changed(&mut self, kind: wit::ListKind) -> wasmtime::Result<()> {
        let event = match kind {
            wit::ListKind::Tools => Event::ToolsListChanged,
            wit::ListKind::Prompts => Event::PromptsListChanged,
            wit::ListKind::Resources => Event::ResourcesListChanged,
        };
        if !self.is_heard(Topic::List(&event)) || !self.flushed_before("a change of a list").await {
            return Ok(());
        }
        self.tenant
            .events
            .publish_list_changed(&self.tenant.name, event);
        Ok(())
    }

    async fn progress(
        &mut self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> wasmtime::Result<()> {
        if let Some(request) = self.request {
            request.progress(progress, total, message).await;
        }
        Ok(())
    }

    async fn notify_log(
        &mut self,
        level: wit::LogLevel,
        logger: Option<String>,
        data: String,
    ) -> wasmtime::Result<()> {
        let Some(request) = self.request else {
            return Ok(());
        };
        // A plugin's log data is JSON by contract; keep plain text if not.
        let data = serde_json::from_str(&data).unwrap_or(serde_json::Value::String(data));
        request.log(level, logger, data).await;
        Ok(())
    }

    async fn log(&mut self, level: wit::Level, message: String) -> wasmtime::Result<()> {
        let message: String = message.chars().take(MAX_LOG_LINE).collect();
        let tenant = &self.tenant.name;
        match level {
            wit::Level::Error => tracing::error!(%tenant, "plugin: {message}"),
            wit::Level::Warn => tracing::warn!(%tenant, "plugin: {message}"),
            wit::Level::Info => tracing::info!(%tenant, "plugin: {message}"),
            wit::Level::Debug => tracing::debug!(%tenant, "plugin: {message}"),
            wit::Level::Trace => tracing::trace!(%tenant, "plugin: {message}"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::settle::plugin::types::TaskStatus;
    use crate::policy::OutboundPolicy;
    use crate::store::Store;
    use wit::Host;

    fn wakes(n: usize) -> Vec<wit::Wake> {
        (0..n)
            .map(|i| wit::Wake {
                task_id: format!("t{i}"),
                group: "g".into(),
                at_ms: 1_000 + i as u64,
            })
            .collect()
    }

    /// A call's store context on `store` and the tenant `t`.
    fn call_on(store: Store) -> (KvCtx, std::sync::Arc<TenantContext>) {
        let kv = KvCtx {
            store,
            namespace: "t".into(),
        };
        (
            kv,
            TenantContext::for_tests("t", OutboundPolicy::new(vec![])),
        )
    }

    /// The runner as a plugin call of `tenant` on `kv` sees it.
    fn runner<'a>(kv: &'a KvCtx, tenant: &'a TenantContext) -> RunnerView<'a> {
        RunnerView {
            kv,
            tenant,
            request: None,
            ended: None,
        }
    }

    #[tokio::test]
    async fn wakes_within_the_limit_are_stored_and_beyond_it_refused_whole() {
        let store = Store::memory();
        let (kv, tenant) = call_on(store.clone());
        let mut view = runner(&kv, &tenant);
        let refused = view.schedule(wakes(MAX_WAKES_PER_CALL + 1)).await.unwrap();
        assert!(
            matches!(refused, Err(wit::ScheduleError::TooMany(n)) if n as usize == MAX_WAKES_PER_CALL),
            "{refused:?}"
        );
        assert_eq!(store.next_due_ms().await.unwrap(), None, "nothing stored");
        view.schedule(wakes(2)).await.unwrap().unwrap();
        assert_eq!(store.next_due_ms().await.unwrap(), Some(1_000));
        let ids: Vec<String> = vec!["x".into(); MAX_WAKES_PER_CALL + 1];
        assert!(matches!(
            view.unschedule(ids).await.unwrap(),
            Err(wit::ScheduleError::TooMany(_))
        ));
        view.unschedule(vec!["t0".into(), "t1".into()])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(store.next_due_ms().await.unwrap(), None);
    }

    /// `swap-many` writes in the tenant's namespace only, all or nothing,
    /// refuses more keys than one call takes, and its writes are owed to
    /// the disk like every other write of the call.
    #[tokio::test]
    async fn swap_many_writes_the_tenants_keys_together_or_none_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_file(&dir.path().join("s.redb")).unwrap();
        let (kv, tenant) = call_on(store.deferring());
        let mut view = runner(&kv, &tenant);
        let swap = |key: &str, seen: Option<&str>, value: &str| wit::Swap {
            key: key.into(),
            seen: seen.map(|s| s.as_bytes().to_vec()),
            value: value.as_bytes().to_vec(),
        };
        store.set("t", "a", b"1".to_vec()).await.unwrap();
        store.set("other", "b", b"theirs".to_vec()).await.unwrap();

        let written = view
            .swap_many(vec![swap("a", Some("1"), "2"), swap("b", None, "mine")])
            .await
            .unwrap()
            .unwrap();
        assert!(written.is_empty(), "{written:?}");
        assert_eq!(store.get("t", "b").await.unwrap(), Some(b"mine".to_vec()));
        assert_eq!(
            store.get("other", "b").await.unwrap(),
            Some(b"theirs".to_vec()),
            "another tenant's key of that name is another key"
        );
        assert!(
            store.unflushed("t", "a"),
            "written without an fsync of its own"
        );
        kv.store.flush_owed().await.unwrap();
        assert!(!store.any_unflushed(), "on disk by the call's flush");

        let refused = view
            .swap_many(vec![swap("a", Some("1"), "3"), swap("c", None, "x")])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(refused, [0], "a changed since it was read");
        assert_eq!(
            store.get("t", "c").await.unwrap(),
            None,
            "so c is not written"
        );

        let too_many = (0..=MAX_BATCH_KEYS)
            .map(|i| swap(&i.to_string(), None, "x"))
            .collect();
        let refused = view.swap_many(too_many).await.unwrap();
        assert!(
            matches!(refused, Err(wit::ScheduleError::TooMany(n)) if n as usize == MAX_BATCH_KEYS),
            "{refused:?}"
        );
        assert_eq!(store.get("t", "0").await.unwrap(), None, "nothing written");
    }

    /// A notice someone hears waits for what came before it to be on
    /// disk; one nobody hears is not sent and leaves the flush to the next
    /// point that needs one (one fsync fewer per command, one at a time).
    #[tokio::test]
    async fn a_notice_flushes_first_only_when_someone_hears_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_file(&dir.path().join("s.redb")).unwrap();
        let (kv, tenant) = call_on(store.deferring());
        let mut view = runner(&kv, &tenant);
        let task = || TaskView {
            task_id: "a".into(),
            status: TaskStatus::Working,
            detailed: "{}".into(),
            tool_result: "{}".into(),
        };
        let uri = "settle://devices/d/state".to_string();

        kv.store.set("t", "record", b"1".to_vec()).await.unwrap();
        view.task_changed(task()).await.unwrap();
        view.resource_updated(uri.clone()).await.unwrap();
        assert!(store.unflushed("t", "record"), "nobody hears: no flush");

        let mut follower = tenant.events.follow(
            "t",
            crate::events::Interest {
                task_ids: ["a".to_string()].into(),
                resources: [uri.clone()].into(),
                ..Default::default()
            },
        );
        view.task_changed(task()).await.unwrap();
        assert!(!store.any_unflushed(), "on disk before the task notice");
        assert!(matches!(follower.next().await, Some(Event::Task(_))));
        kv.store.set("t", "record", b"2".to_vec()).await.unwrap();
        view.resource_updated(uri.clone()).await.unwrap();
        assert!(!store.any_unflushed(), "on disk before the resource notice");
        assert!(matches!(
            follower.next().await,
            Some(Event::ResourceUpdated(u)) if u == uri
        ));
    }

    #[tokio::test]
    async fn a_task_that_ends_is_counted_by_its_status() {
        let (kv, tenant) = call_on(Store::memory());
        let mut view = runner(&kv, &tenant);
        for status in TaskStatus::ALL {
            let task = TaskView {
                task_id: "a".into(),
                status,
                detailed: "{}".into(),
                tool_result: "{}".into(),
            };
            view.task_changed(task).await.unwrap();
        }
        let metrics = tenant.metrics.render();
        for ended in ["completed", "failed", "cancelled"] {
            let line = format!(r#"settle_tasks_total{{tenant="t",status="{ended}"}} 1"#);
            assert!(metrics.contains(&line), "{line} in {metrics}");
        }
        assert!(!metrics.contains(r#"status="working""#), "{metrics}");
    }

    /// The views of tasks that ended are kept when the call is over, and
    /// forgetting a task drops its view, stored or still pending.
    #[tokio::test]
    async fn ended_views_are_kept_after_the_call_and_dropped_when_forgotten() {
        let store = Store::memory();
        let (kv, tenant) = call_on(store.clone());
        let pending = Pending::default();
        let mut view = RunnerView {
            ended: Some(&pending),
            ..runner(&kv, &tenant)
        };
        let change = |id: &str, status| TaskView {
            task_id: id.into(),
            status,
            detailed: format!(r#"{{"taskId":"{id}"}}"#),
            tool_result: "{}".into(),
        };
        view.task_changed(change("a", TaskStatus::Working))
            .await
            .unwrap();
        view.task_changed(change("a", TaskStatus::Completed))
            .await
            .unwrap();
        view.task_changed(change("b", TaskStatus::Failed))
            .await
            .unwrap();
        view.task_changed(change("c", TaskStatus::Cancelled))
            .await
            .unwrap();
        // Ended and removed in the same call: nothing is left behind.
        view.forget_tasks(vec!["c".into()]).await.unwrap().unwrap();
        let read = async |id: &str| crate::ended::read(&store, "t", id).await.unwrap();
        assert_eq!(read("a").await, None, "stored when the call is over");
        pending.store(&store, "t").await;
        assert_eq!(read("a").await.as_deref(), Some(r#"{"taskId":"a"}"#));
        assert_eq!(read("b").await.as_deref(), Some(r#"{"taskId":"b"}"#));
        assert_eq!(read("c").await, None);
        assert_eq!(
            store.list_keys("t", None).await.unwrap().0,
            Vec::<String>::new(),
            "the plugin's bucket does not see them"
        );

        view.forget_tasks(vec!["a".into()]).await.unwrap().unwrap();
        assert_eq!(read("a").await, None);
        assert!(read("b").await.is_some());
        let ids: Vec<String> = vec!["x".into(); MAX_WAKES_PER_CALL + 1];
        assert!(matches!(
            view.forget_tasks(ids).await.unwrap(),
            Err(wit::ScheduleError::TooMany(_))
        ));
    }
}
