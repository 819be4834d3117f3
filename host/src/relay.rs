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

use crate::events::{Hub, Notice};
use crate::store::Relay;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const CHANNEL: &str = "settle:events";

/// Back-off between reconnection attempts.
const RETRY: Duration = Duration::from_secs(1);

#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    origin: String,
    notice: Notice,
}

/// Starts relaying `hub`'s notices the way the shared store says.
pub fn start(relay: Relay, hub: Arc<Hub>) {
    match relay {
        Relay::Redis(client) => start_redis(client, hub),
    }
}

/// Relays through Redis pub/sub on the store's server.
fn start_redis(client: redis::Client, hub: Arc<Hub>) {
    let origin = format!("{:032x}", rand::random::<u128>());
    let (outbox, mut notices) = mpsc::unbounded_channel::<Notice>();
    hub.relay_to(outbox);

    let publisher = client.clone();
    let me = origin.clone();
    tokio::spawn(async move {
        let mut connection = None;
        while let Some(notice) = notices.recv().await {
            let message = match serde_json::to_string(&Envelope {
                origin: me.clone(),
                notice,
            }) {
                Ok(message) => message,
                Err(e) => {
                    tracing::error!("relay: cannot encode a notice: {e}");
                    continue;
                }
            };
            if connection.is_none() {
                connection = publisher.get_multiplexed_async_connection().await.ok();
            }
            let Some(conn) = connection.as_mut() else {
                tracing::warn!("relay: redis unreachable; a notice to other replicas is lost");
                continue;
            };
            let sent: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                .arg(CHANNEL)
                .arg(&message)
                .query_async(conn)
                .await;
            if let Err(e) = sent {
                tracing::warn!(
                    "relay: publishing failed ({e}); a notice to other replicas is lost"
                );
                connection = None;
            }
        }
    });

    tokio::spawn(async move {
        loop {
            match subscribe(&client, &origin, &hub).await {
                Ok(()) => tracing::warn!("relay: the redis subscription ended; resubscribing"),
                Err(e) => tracing::warn!("relay: {e}; resubscribing in {RETRY:?}"),
            }
            tokio::time::sleep(RETRY).await;
        }
    });
}

async fn subscribe(client: &redis::Client, origin: &str, hub: &Hub) -> redis::RedisResult<()> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(CHANNEL).await?;
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let payload: String = match message.get_payload() {
            Ok(payload) => payload,
            Err(e) => {
                tracing::warn!("relay: unreadable message: {e}");
                continue;
            }
        };
        match serde_json::from_str::<Envelope>(&payload) {
            Ok(envelope) if envelope.origin != origin => hub.deliver_remote(envelope.notice),
            Ok(_) => {}
            Err(e) => tracing::warn!("relay: unreadable notice: {e}"),
        }
    }
    Ok(())
}
