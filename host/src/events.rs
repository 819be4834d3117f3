//! Change notices, from plugins to whoever follows them.
//!
//! A plugin reports every task change it stores (`runner.task-changed`) and
//! every resource change (`runner.resource-updated`); a swap reports a new
//! tool list. Followers register what they want to hear about: a `tools/call`
//! waiting inline for its task, a `subscriptions/listen` stream following
//! task ids and resources, a legacy `resources/subscribe`. Publishing looks
//! up only the followers of that one task or resource, so its cost does not
//! grow with the number of tasks or streams.

use crate::bindings::settle::plugin::types::{TaskStatus, TaskView};
use prometheus_client::metrics::counter::Counter;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// Notices one follower may have waiting before it counts as stuck. A
/// follower that falls this far behind is dropped (its stream ends, and the
/// client listens again) rather than holding memory without bound.
pub const FOLLOWER_BACKLOG: usize = 4096;

/// Notices waiting to be relayed to the other replicas, at most. The relay
/// publishes them in batches, far faster than tasks change, so a backlog
/// this long means the shared store is slow or unreachable. Notices past
/// it are dropped, counted and logged, rather than held without bound
/// (when they were, a burst of 300,000 tasks ending on Redis queued half a
/// GiB in each replica, docs/performance.md, twenty-second round):
/// followers elsewhere still see the tasks' states with `tasks/get`.
pub const RELAY_BACKLOG: usize = 16_384;

/// How often at most a replica logs the notices its relay dropped.
const DROPPED_LOG_EVERY: Duration = Duration::from_secs(10);

/// One notice.
#[derive(Clone, Debug)]
pub enum Event {
    /// A task changed; the view is what `get-task` returns now.
    Task(Arc<TaskView>),
    /// The resource with this URI changed.
    ResourceUpdated(String),
    /// The tenant's tool list changed (a plugin swap).
    ToolsListChanged,
    /// The tenant's prompt list changed.
    PromptsListChanged,
    /// The tenant's resource list changed.
    ResourcesListChanged,
}

/// What a follower wants to hear about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Changes of these tasks.
    pub task_ids: HashSet<String>,
    /// Updates of these resources.
    pub resources: HashSet<String>,
    /// List changes.
    pub tools_list: bool,
    /// List changes.
    pub prompts_list: bool,
    /// List changes.
    pub resources_list: bool,
}

impl Interest {
    /// Interest in one task.
    pub fn task(task_id: &str) -> Interest {
        Interest {
            task_ids: [task_id.to_string()].into(),
            ..Interest::default()
        }
    }

    /// Whether it asked for `event`, a change of a list.
    fn wants_list(&self, event: &Event) -> bool {
        match event {
            Event::ToolsListChanged => self.tools_list,
            Event::PromptsListChanged => self.prompts_list,
            Event::ResourcesListChanged => self.resources_list,
            Event::Task(_) | Event::ResourceUpdated(_) => false,
        }
    }
}

/// What a notice is about, for [`Hub::is_heard`].
#[derive(Clone, Copy, Debug)]
pub enum Topic<'a> {
    /// A change of this task.
    Task(&'a str),
    /// An update of the resource with this URI.
    Resource(&'a str),
    /// A change of a list ([`Event::ToolsListChanged`] and the like).
    List(&'a Event),
}

type Key = (String, String);

#[derive(Default)]
struct Registry {
    next_id: u64,
    followers: HashMap<u64, Follower>,
    by_task: HashMap<Key, HashSet<u64>>,
    by_resource: HashMap<Key, HashSet<u64>>,
}

struct Follower {
    tenant: String,
    interest: Interest,
    sender: mpsc::Sender<Event>,
}

/// The runner-wide registry of followers.
#[derive(Default)]
pub struct Hub {
    registry: Mutex<Registry>,
    /// Where notices go to reach the other replicas, when there are any.
    outbox: OnceLock<mpsc::Sender<Notice>>,
    /// Notices the relay had no room for.
    dropped: Dropped,
}

/// Notices dropped because the relay's backlog was full: counted for
/// `/metrics`, and logged with the count since the last line, at most once
/// every [`DROPPED_LOG_EVERY`] and once more when the relay has caught up
/// ([`Hub::report_relay_drops`]).
#[derive(Default)]
struct Dropped {
    counter: OnceLock<Counter>,
    since: Mutex<DroppedSince>,
}

#[derive(Default)]
struct DroppedSince {
    count: u64,
    logged_at: Option<std::time::Instant>,
}

impl Dropped {
    fn lock(&self) -> std::sync::MutexGuard<'_, DroppedSince> {
        self.since.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note(&self) {
        if let Some(counter) = self.counter.get() {
            counter.inc();
        }
        let mut since = self.lock();
        since.count += 1;
        if since
            .logged_at
            .is_none_or(|at| at.elapsed() >= DROPPED_LOG_EVERY)
        {
            since.log();
        }
    }

    /// Logs the drops not logged yet, if any.
    fn report(&self) {
        let mut since = self.lock();
        if since.count > 0 {
            since.log();
        }
    }
}

impl DroppedSince {
    fn log(&mut self) {
        tracing::warn!(
            "relay: {} notices to other replicas dropped: {RELAY_BACKLOG} were already waiting \
             (is the shared store slow or unreachable?); followers there see those tasks' \
             states with tasks/get",
            self.count
        );
        self.count = 0;
        self.logged_at = Some(std::time::Instant::now());
    }
}

/// A notice as it travels between replicas sharing a store.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Notice {
    /// Whose notice it is.
    pub tenant: String,
    /// What happened.
    pub event: NoticeEvent,
}

/// [`Event`], in a form that crosses process boundaries.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NoticeEvent {
    /// A task changed: its id only. A replica with a follower of the task
    /// reads its view itself (`relay`); one without, which in a burst is
    /// nearly every notice, has nothing more to do. Relaying each task's
    /// views instead (a few KB a notice) could not keep up with a burst of
    /// tasks ending (docs/performance.md, twenty-second round).
    TaskChanged {
        /// The task's id.
        task_id: String,
    },
    /// A task changed, with its views: what replicas sent before
    /// [`NoticeEvent::TaskChanged`], still delivered when one arrives
    /// from such a replica.
    Task {
        /// The task's id.
        task_id: String,
        /// Its status, as [`TaskStatus::as_str`] spells it.
        status: String,
        /// Its detailed view.
        detailed: String,
        /// Its tool-result view.
        tool_result: String,
    },
    /// A resource changed.
    Resource {
        /// Its URI.
        uri: String,
    },
    /// The tool list changed.
    ToolsList,
    /// The prompt list changed.
    PromptsList,
    /// The resource list changed.
    ResourcesList,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts following; notices published from now on arrive in order.
    pub fn follow(self: &Arc<Self>, tenant: &str, interest: Interest) -> Following {
        let (sender, receiver) = mpsc::channel(FOLLOWER_BACKLOG);
        let mut registry = self.lock();
        registry.next_id += 1;
        let id = registry.next_id;
        for task in &interest.task_ids {
            registry
                .by_task
                .entry((tenant.to_string(), task.clone()))
                .or_default()
                .insert(id);
        }
        for uri in &interest.resources {
            registry
                .by_resource
                .entry((tenant.to_string(), uri.clone()))
                .or_default()
                .insert(id);
        }
        registry.followers.insert(
            id,
            Follower {
                tenant: tenant.to_string(),
                interest,
                sender,
            },
        );
        Following {
            id,
            receiver,
            hub: self.clone(),
        }
    }

    /// Sends every notice published here to the other replicas too, through
    /// `outbox`; a notice that finds it full is dropped ([`RELAY_BACKLOG`])
    /// and counted in `dropped`.
    pub fn relay_to(&self, outbox: mpsc::Sender<Notice>, dropped: Counter) {
        let _ = self.dropped.counter.set(dropped);
        let _ = self.outbox.set(outbox);
    }

    /// Logs the notices the relay dropped since it last said, if any: the
    /// relay calls it when it has caught up, so that the last of a run of
    /// drops is logged too, not only the first of every ten seconds.
    pub fn report_relay_drops(&self) {
        self.dropped.report();
    }

    fn relay(&self, tenant: &str, event: NoticeEvent) {
        let Some(outbox) = self.outbox.get() else {
            return;
        };
        let notice = Notice {
            tenant: tenant.to_string(),
            event,
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = outbox.try_send(notice) {
            self.dropped.note();
        }
    }

    /// A task of `tenant` changed.
    pub fn publish_task(&self, tenant: &str, view: TaskView) {
        self.relay(
            tenant,
            NoticeEvent::TaskChanged {
                task_id: view.task_id.clone(),
            },
        );
        self.deliver_task(tenant, view);
    }

    /// Whether anyone here follows `task_id` of `tenant`.
    pub fn follows_task(&self, tenant: &str, task_id: &str) -> bool {
        self.lock()
            .by_task
            .contains_key(&(tenant.to_string(), task_id.to_string()))
    }

    /// Delivers `view` of a task of `tenant` to its followers here, and
    /// relays nothing: for a change another replica made (see
    /// [`NoticeEvent::TaskChanged`]).
    pub fn deliver_task(&self, tenant: &str, view: TaskView) {
        let key = (tenant.to_string(), view.task_id.clone());
        let event = Event::Task(Arc::new(view));
        self.deliver(|r| r.by_task.get(&key).cloned().unwrap_or_default(), event);
    }

    /// A resource of `tenant` changed.
    pub fn publish_resource(&self, tenant: &str, uri: &str) {
        self.relay(
            tenant,
            NoticeEvent::Resource {
                uri: uri.to_string(),
            },
        );
        self.deliver_resource(tenant, uri);
    }

    fn deliver_resource(&self, tenant: &str, uri: &str) {
        let key = (tenant.to_string(), uri.to_string());
        let event = Event::ResourceUpdated(uri.to_string());
        self.deliver(
            |r| r.by_resource.get(&key).cloned().unwrap_or_default(),
            event,
        );
    }

    /// A notice another replica published: delivered to followers here,
    /// not relayed again. A [`NoticeEvent::TaskChanged`] carries no view to
    /// deliver: the relay reads the task for its followers here, if any,
    /// and gives the view to [`Hub::deliver_task`].
    pub fn deliver_remote(&self, notice: Notice) {
        let tenant = notice.tenant.as_str();
        match notice.event {
            NoticeEvent::TaskChanged { .. } => {}
            NoticeEvent::Task {
                task_id,
                status,
                detailed,
                tool_result,
            } => match TaskStatus::parse(&status) {
                Some(status) => self.deliver_task(
                    tenant,
                    TaskView {
                        task_id,
                        status,
                        detailed,
                        tool_result,
                    },
                ),
                None => tracing::warn!("relay: a task notice with unknown status {status:?}"),
            },
            NoticeEvent::Resource { uri } => self.deliver_resource(tenant, &uri),
            NoticeEvent::ToolsList => self.deliver_list_changed(tenant, Event::ToolsListChanged),
            NoticeEvent::PromptsList => {
                self.deliver_list_changed(tenant, Event::PromptsListChanged)
            }
            NoticeEvent::ResourcesList => {
                self.deliver_list_changed(tenant, Event::ResourcesListChanged)
            }
        }
    }

    /// A list of `tenant` changed; `event` says which.
    pub fn publish_list_changed(&self, tenant: &str, event: Event) {
        let notice = match event {
            Event::ToolsListChanged => Some(NoticeEvent::ToolsList),
            Event::PromptsListChanged => Some(NoticeEvent::PromptsList),
            Event::ResourcesListChanged => Some(NoticeEvent::ResourcesList),
            _ => None,
        };
        if let Some(notice) = notice {
            self.relay(tenant, notice);
        }
        self.deliver_list_changed(tenant, event);
    }

    fn deliver_list_changed(&self, tenant: &str, event: Event) {
        self.deliver(
            |r| {
                r.followers
                    .iter()
                    .filter(|(_, f)| f.tenant == tenant && f.interest.wants_list(&event))
                    .map(|(id, _)| *id)
                    .collect()
            },
            event.clone(),
        );
    }

    fn deliver(&self, targets: impl FnOnce(&Registry) -> HashSet<u64>, event: Event) {
        let mut registry = self.lock();
        let mut stuck = Vec::new();
        for id in targets(&registry) {
            if let Some(follower) = registry.followers.get(&id)
                && follower.sender.try_send(event.clone()).is_err()
            {
                stuck.push(id);
            }
        }
        for id in stuck {
            tracing::warn!("a follower fell {FOLLOWER_BACKLOG} notices behind; ending its stream");
            remove(&mut registry, id);
        }
    }

    /// Whether a notice about `topic` of `tenant` would reach anyone: a
    /// follower here that asked for it, or other replicas (this runner
    /// relays, and cannot see their followers). A notice nobody hears
    /// needs nothing put on disk before it, and is not published: a
    /// follower registered after this answer follows changes from its
    /// acknowledgement on, and this change was made before.
    pub fn is_heard(&self, tenant: &str, topic: Topic<'_>) -> bool {
        if self.outbox.get().is_some() {
            return true;
        }
        let registry = self.lock();
        match topic {
            Topic::Task(task_id) => registry
                .by_task
                .contains_key(&(tenant.to_string(), task_id.to_string())),
            Topic::Resource(uri) => registry
                .by_resource
                .contains_key(&(tenant.to_string(), uri.to_string())),
            Topic::List(event) => registry
                .followers
                .values()
                .any(|f| f.tenant == tenant && f.interest.wants_list(event)),
        }
    }

    /// How many followers are registered (for tests and metrics).
    pub fn followers(&self) -> usize {
        self.lock().followers.len()
    }
}

fn remove(registry: &mut Registry, id: u64) {
    let Some(follower) = registry.followers.remove(&id) else {
        return;
    };
    for task in follower.interest.task_ids {
        let key = (follower.tenant.clone(), task);
        if let Some(ids) = registry.by_task.get_mut(&key) {
            ids.remove(&id);
            if ids.is_empty() {
                registry.by_task.remove(&key);
            }
        }
    }
    for uri in follower.interest.resources {
        let key = (follower.tenant.clone(), uri);
        if let Some(ids) = registry.by_resource.get_mut(&key) {
            ids.remove(&id);
            if ids.is_empty() {
                registry.by_resource.remove(&key);
            }
        }
    }
}

/// A registered follower; unregisters when dropped.
pub struct Following {
    id: u64,
    receiver: mpsc::Receiver<Event>,
    hub: Arc<Hub>,
}

impl Following {
    /// The next notice; `None` once the hub dropped this follower.
    pub async fn next(&mut self) -> Option<Event> {
        self.receiver.recv().await
    }

    /// The task's view once it has ended, or `None` if it did not end
    /// within `wait`.
    pub async fn task_ended_within(&mut self, wait: Duration) -> Option<Arc<TaskView>> {
        let ended = async {
            while let Some(event) = self.next().await {
                if let Event::Task(view) = event
                    && view.status.is_terminal()
                {
                    return Some(view);
                }
            }
            None
        };
        tokio::time::timeout(wait, ended).await.ok().flatten()
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        remove(&mut self.hub.lock(), self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: &str, terminal: bool) -> TaskView {
        TaskView {
            task_id: id.into(),
            status: if terminal {
                TaskStatus::Completed
            } else {
                TaskStatus::Working
            },
            detailed: "{}".into(),
            tool_result: "{}".into(),
        }
    }

    #[tokio::test]
    async fn a_follower_sees_its_task_end_and_nothing_else() {
        let hub = Arc::new(Hub::default());
        let mut f = hub.follow("t", Interest::task("a"));
        hub.publish_task("t", view("a", false));
        hub.publish_task("t", view("b", true));
        hub.publish_task("other", view("a", true));
        assert!(
            f.task_ended_within(Duration::from_millis(20))
                .await
                .is_none()
        );
        hub.publish_task("t", view("a", true));
        assert!(
            f.task_ended_within(Duration::from_secs(5))
                .await
                .unwrap()
                .status
                .is_terminal()
        );
    }

    #[tokio::test]
    async fn a_full_relay_drops_what_other_replicas_would_hear_and_nothing_here() {
        let hub = Arc::new(Hub::default());
        let (outbox, mut sent) = mpsc::channel(2);
        let dropped = Counter::default();
        hub.relay_to(outbox, dropped.clone());
        let mut follower = hub.follow("t", Interest::task("c"));
        hub.publish_task("t", view("a", true));
        hub.publish_task("t", view("b", true));
        hub.publish_task("t", view("c", true));
        assert_eq!(dropped.get(), 1, "no room for the third");
        assert_eq!(
            follower
                .task_ended_within(Duration::from_secs(5))
                .await
                .expect("followers here hear it all the same")
                .task_id,
            "c"
        );
        let relayed_id = |notice: Notice| match notice.event {
            NoticeEvent::TaskChanged { task_id } => task_id,
            other => panic!("not a task notice: {other:?}"),
        };
        assert_eq!(relayed_id(sent.recv().await.unwrap()), "a");
        assert_eq!(relayed_id(sent.recv().await.unwrap()), "b");
        assert!(sent.try_recv().is_err(), "the dropped one is not queued");

        // Once the relay caught up, notices go again.
        hub.publish_task("t", view("d", true));
        assert_eq!(relayed_id(sent.recv().await.unwrap()), "d");
        assert_eq!(dropped.get(), 1);
    }

    #[tokio::test]
    async fn a_task_change_crosses_replicas_as_its_id_and_an_older_replicas_views_still_arrive() {
        let here = Arc::new(Hub::default());
        let (outbox, mut sent) = mpsc::channel(RELAY_BACKLOG);
        here.relay_to(outbox, Counter::default());
        let mut view = view("a", true);
        view.status = TaskStatus::Cancelled;
        view.detailed = "x".repeat(4096);
        here.publish_task("t", view);
        let wire = serde_json::to_string(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(
            wire, r#"{"tenant":"t","event":{"kind":"task_changed","task_id":"a"}}"#,
            "the id, not the views"
        );

        let there = Arc::new(Hub::default());
        assert!(!there.follows_task("t", "a"));
        let mut follower = there.follow("t", Interest::task("a"));
        assert!(there.follows_task("t", "a"));
        assert!(!there.follows_task("u", "a"), "another tenant's");
        // The id alone delivers nothing: the relay reads the view.
        there.deliver_remote(serde_json::from_str(&wire).unwrap());
        assert!(follower.receiver.try_recv().is_err());

        // A replica of an earlier version sends the views, and they arrive.
        let older = r#"{"tenant":"t","event":{"kind":"task","task_id":"a","status":"cancelled","detailed":"{}","tool_result":"{}"}}"#;
        there.deliver_remote(serde_json::from_str(older).unwrap());
        let ended = follower
            .task_ended_within(Duration::from_secs(5))
            .await
            .expect("the notice arrives");
        assert_eq!(ended.status, TaskStatus::Cancelled);

        // A status this replica does not know is dropped, not guessed.
        let unknown = older.replace("cancelled", "paused");
        there.deliver_remote(serde_json::from_str(&unknown).unwrap());
        assert!(follower.receiver.try_recv().is_err());
    }

    #[tokio::test]
    async fn each_change_reaches_each_follower_once() {
        let hub = Arc::new(Hub::default());
        let mut both = hub.follow(
            "t",
            Interest {
                task_ids: ["a".to_string(), "b".to_string()].into(),
                ..Interest::default()
            },
        );
        hub.publish_task("t", view("a", false));
        hub.publish_task("t", view("b", false));
        let mut seen = Vec::new();
        for _ in 0..2 {
            if let Some(Event::Task(v)) = both.next().await {
                seen.push(v.task_id.clone());
            }
        }
        assert_eq!(seen, ["a", "b"]);
        assert!(both.receiver.try_recv().is_err(), "nothing more");
    }

    #[tokio::test]
    async fn dropping_a_follower_unregisters_it() {
        let hub = Arc::new(Hub::default());
        let f1 = hub.follow("t", Interest::task("a"));
        let f2 = hub.follow("t", Interest::task("a"));
        drop(f1);
        assert_eq!(hub.followers(), 1);
        drop(f2);
        assert_eq!(hub.followers(), 0);
        assert!(hub.lock().by_task.is_empty());
    }

    #[tokio::test]
    async fn a_follower_that_falls_too_far_behind_is_ended() {
        let hub = Arc::new(Hub::default());
        let mut f = hub.follow("t", Interest::task("a"));
        for _ in 0..=FOLLOWER_BACKLOG {
            hub.publish_task("t", view("a", false));
        }
        assert_eq!(hub.followers(), 0);
        let mut n = 0;
        while f.next().await.is_some() {
            n += 1;
        }
        assert_eq!(
            n, FOLLOWER_BACKLOG,
            "what was queued is still delivered, then the stream ends"
        );
    }

    #[tokio::test]
    async fn list_changes_reach_only_interested_followers_of_the_tenant() {
        let hub = Arc::new(Hub::default());
        let mut yes = hub.follow(
            "t",
            Interest {
                tools_list: true,
                ..Interest::default()
            },
        );
        let mut no = hub.follow("t", Interest::default());
        let mut other = hub.follow(
            "u",
            Interest {
                tools_list: true,
                ..Interest::default()
            },
        );
        hub.publish_list_changed("t", Event::ToolsListChanged);
        assert!(matches!(yes.next().await, Some(Event::ToolsListChanged)));
        assert!(no.receiver.try_recv().is_err());
        assert!(other.receiver.try_recv().is_err());
    }

    /// A notice is heard by a follower of the tenant that asked for it, or
    /// by other replicas whenever this runner relays; by no one else.
    #[test]
    fn a_notice_is_heard_only_by_who_asked_or_by_other_replicas() {
        let hub = Arc::new(Hub::default());
        let tools = Event::ToolsListChanged;
        let prompts = Event::PromptsListChanged;
        assert!(!hub.is_heard("t", Topic::Task("a")));
        assert!(!hub.is_heard("t", Topic::Resource("r")));
        assert!(!hub.is_heard("t", Topic::List(&tools)));

        let task = hub.follow("t", Interest::task("a"));
        let rest = hub.follow(
            "t",
            Interest {
                resources: ["r".to_string()].into(),
                tools_list: true,
                ..Interest::default()
            },
        );
        assert!(hub.is_heard("t", Topic::Task("a")));
        assert!(!hub.is_heard("t", Topic::Task("b")));
        assert!(!hub.is_heard("u", Topic::Task("a")), "another tenant's");
        assert!(hub.is_heard("t", Topic::Resource("r")));
        assert!(!hub.is_heard("t", Topic::Resource("s")));
        assert!(hub.is_heard("t", Topic::List(&tools)));
        assert!(!hub.is_heard("t", Topic::List(&prompts)));
        assert!(!hub.is_heard("u", Topic::List(&tools)));

        drop((task, rest));
        assert!(!hub.is_heard("t", Topic::Task("a")), "followers gone");
        assert!(!hub.is_heard("t", Topic::Resource("r")));
        let (outbox, _sent) = mpsc::channel(RELAY_BACKLOG);
        hub.relay_to(outbox, Counter::default());
        assert!(hub.is_heard("t", Topic::Task("a")), "other replicas may");
    }
}
