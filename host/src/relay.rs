//! Carrying change notices between replicas that share a store, the way
//! the store's backend says ([`crate::store::Relay`]): Redis pub/sub.
//!
//! A task may be created through one replica, advanced by the scheduler of
//! another, and followed (a `tools/call` waiting inline, a listen stream)
//! through a third. Every replica publishes its notices on one Redis
//! channel and delivers the others' to its own followers. Each message
//! names the replica that sent it, so nobody hears its own notices twice.
//! A replica that loses Redis reconnects and resubscribes; notices sent
//! meanwhile are lost (followers still see the task's state with
//! `tasks/get`).
//!
//! A task's change travels as the task's id alone
//! ([`NoticeEvent::TaskChanged`]): the replica that hears it reads the
//! task's view only if someone there follows the task, which in a burst
//! of tasks ending is almost never. Notices wait for the relay in a
//! bounded queue ([`RELAY_BACKLOG`]) and go out together, every one
//! waiting in one round trip; what finds the queue full (Redis slow or
//! gone) is dropped and counted, not held without bound.

use crate::bindings::settle::plugin::types::TaskView;
use crate::events::{Hub, Notice, NoticeEvent, RELAY_BACKLOG};
use crate::store::Relay;
use futures::StreamExt;
use futures::future::BoxFuture;
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const CHANNEL: &str = "settle:events";

/// Back-off between reconnection attempts.
const RETRY: Duration = Duration::from_secs(1);

/// Notices published in one round trip, at most.
const PUBLISH_BATCH: usize = 512;

#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    origin: String,
    notice: Notice,
}

/// Reads a task's current view: `(tenant name, task id)` to the view its
/// plugin gives, or `None` when there is none to give (the tenant or the
/// task gone, the plugin failing).
pub type ViewOf = Arc<dyn Fn(String, String) -> BoxFuture<'static, Option<TaskView>> + Send + Sync>;

/// Starts relaying `hub`'s notices the way the shared store says; those
/// dropped for want of room are counted in `dropped`. A task change
/// arrives as the task's id; for a task followed here, `view_of` reads
/// the view to deliver.
pub fn start(relay: Relay, hub: Arc<Hub>, dropped: Counter, view_of: ViewOf) {
    match relay {
        Relay::Redis(client) => start_redis(client, hub, dropped, view_of),
    }
}

/// Relays through Redis pub/sub on the store's server.
fn start_redis(client: redis::Client, hub: Arc<Hub>, dropped: Counter, view_of: ViewOf) {
    let origin = format!("{:032x}", rand::random::<u128>());
    let (outbox, notices) = mpsc::channel::<Notice>(RELAY_BACKLOG);
    hub.relay_to(outbox, dropped);
    tokio::spawn(publish(
        client.clone(),
        origin.clone(),
        notices,
        hub.clone(),
    ));
    tokio::spawn(async move {
        loop {
            match subscribe(&client, &origin, &hub, &view_of).await {
                Ok(()) => tracing::warn!("relay: the redis subscription ended; resubscribing"),
                Err(e) => tracing::warn!("relay: {e}; resubscribing in {RETRY:?}"),
            }
            tokio::time::sleep(RETRY).await;
        }
    });
}

/// Publishes this replica's notices, every one waiting at once in one
/// round trip (a pipeline of `PUBLISH`es, at most [`PUBLISH_BATCH`]). With
/// a round trip each, and each task's views in its notice, the queue of a
/// replica grew past half a GiB in a burst of 300,000 tasks ending
/// (docs/performance.md, twenty-second round).
async fn publish(
    client: redis::Client,
    origin: String,
    mut notices: mpsc::Receiver<Notice>,
    hub: Arc<Hub>,
) {
    let mut connection = None;
    let mut batch = Vec::with_capacity(PUBLISH_BATCH);
    while notices.recv_many(&mut batch, PUBLISH_BATCH).await > 0 {
        let mut pipeline = redis::pipe();
        for notice in batch.drain(..) {
            let envelope = Envelope {
                origin: origin.clone(),
                notice,
            };
            match serde_json::to_string(&envelope) {
                Ok(message) => {
                    pipeline.cmd("PUBLISH").arg(CHANNEL).arg(message).ignore();
                }
                Err(e) => tracing::error!("relay: cannot encode a notice: {e}"),
            }
        }
        let count = pipeline.len();
        if count == 0 {
            continue;
        }
        if connection.is_none() {
            match client.get_multiplexed_async_connection().await {
                Ok(connected) => connection = Some(connected),
                Err(e) => {
                    tracing::warn!(
                        "relay: redis unreachable ({e}); {count} notices to other replicas are \
                         lost, trying again in {RETRY:?}"
                    );
                    // Meanwhile notices wait, up to the backlog's bound.
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            }
        }
        let conn = connection.as_mut().expect("connected just above");
        let sent: redis::RedisResult<()> = pipeline.query_async(conn).await;
        if let Err(e) = sent {
            tracing::warn!(
                "relay: publishing failed ({e}); {count} notices to other replicas are lost"
            );
            connection = None;
        }
        if notices.is_empty() {
            hub.report_relay_drops();
        }
    }
}

async fn subscribe(
    client: &redis::Client,
    origin: &str,
    hub: &Arc<Hub>,
    view_of: &ViewOf,
) -> redis::RedisResult<()> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(CHANNEL).await?;
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let payload = message.get_payload_bytes();
        if is_own(payload, origin) {
            continue;
        }
        match serde_json::from_slice::<Envelope>(payload) {
            Ok(envelope) if envelope.origin != origin => deliver(envelope.notice, hub, view_of),
            Ok(_) => {}
            Err(e) => tracing::warn!("relay: unreadable notice: {e}"),
        }
    }
    Ok(())
}

/// Delivers another replica's notice to the followers here. A task change
/// comes as the task's id: when someone here follows the task, its view is
/// read (on a task of its own, so the subscription reads on meanwhile)
/// and delivered; otherwise nothing is done.
fn deliver(notice: Notice, hub: &Arc<Hub>, view_of: &ViewOf) {
    let NoticeEvent::TaskChanged { task_id } = &notice.event else {
        hub.deliver_remote(notice);
        return;
    };
    if !hub.follows_task(&notice.tenant, task_id) {
        return;
    }
    let read = view_of(notice.tenant.clone(), task_id.clone());
    let (hub, tenant) = (hub.clone(), notice.tenant);
    tokio::spawn(async move {
        if let Some(view) = read.await {
            hub.deliver_task(&tenant, view);
        }
    });
}

/// Whether `payload` is a notice this replica (`origin`) published itself,
/// told from its first bytes: every replica hears its own notices back,
/// as many as it hears from the others, and need not decode them only to
/// drop them. [`Envelope`] names its origin first, so that is where an
/// encoded one starts; anything else is decoded and judged whole.
fn is_own(payload: &[u8], origin: &str) -> bool {
    const START: &[u8] = br#"{"origin":""#;
    payload
        .strip_prefix(START)
        .and_then(|rest| rest.strip_prefix(origin.as_bytes()))
        .is_some_and(|rest| rest.starts_with(b"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(origin: &str) -> String {
        serde_json::to_string(&Envelope {
            origin: origin.to_string(),
            notice: Notice {
                tenant: "t".into(),
                event: NoticeEvent::ToolsList,
            },
        })
        .unwrap()
    }

    #[test]
    fn a_replica_knows_its_own_notices_from_their_first_bytes() {
        let me = format!("{:032x}", 7u128);
        assert!(is_own(encoded(&me).as_bytes(), &me));
        let other = format!("{:032x}", 8u128);
        assert!(!is_own(encoded(&other).as_bytes(), &me));
        // An origin that merely starts like this one's is another's.
        assert!(!is_own(encoded(&format!("{me}0")).as_bytes(), &me));
        // Encoded otherwise (another order, spaces): decoded and judged whole.
        let spaced = encoded(&me).replacen(':', ": ", 1);
        assert!(!is_own(spaced.as_bytes(), &me));
        assert_eq!(
            serde_json::from_str::<Envelope>(&spaced).unwrap().origin,
            me
        );
        assert!(!is_own(b"", &me));
    }
}
