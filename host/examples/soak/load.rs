//! The load: one lane per device sending `set_temperature` commands through
//! either replica at random. A lane retries a command until a replica
//! acknowledges it (each try counts as an attempt, since an unanswered one
//! may have reached the device), then either follows the task to its end
//! or, now and then, sends the next command at once so it supersedes.

use super::ledger::{Acked, Ledger, is_terminal};
use super::mcp::{Answer, Clients};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a lane behaves.
#[derive(Clone, Debug)]
pub struct LaneSpec {
    /// Acknowledged tasks this lane creates.
    pub tasks: usize,
    /// Share of tasks followed to their end before the next is sent.
    pub follow_share: f64,
    /// How long a follow waits at most (TTL plus margin).
    pub follow_for: Duration,
    /// Time between `get_task` polls.
    pub poll: Duration,
}

pub struct Lane {
    pub device: String,
    pub spec: LaneSpec,
    pub clients: Arc<Clients>,
    pub ledger: Arc<Ledger>,
}

/// A temperature the safety gate lets through without confirmation
/// (18..=28 in steps of 0.5).
fn temperature() -> f64 {
    18.0 + 0.5 * rand::random_range(0..=20) as f64
}

impl Lane {
    pub async fn run(self) {
        let mut watchers = tokio::task::JoinSet::new();
        for _ in 0..self.spec.tasks {
            let id = self.create().await;
            let follow = follow(
                self.clients.clone(),
                self.ledger.clone(),
                id,
                self.spec.clone(),
            );
            if rand::random_bool(self.spec.follow_share) {
                follow.await;
            } else {
                // Still watched to its end (an ended task is removed from
                // the store after its TTL, so its end must be seen before).
                watchers.spawn(follow);
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..300))).await;
            }
        }
        watchers.join_all().await;
    }

    /// Sends one command until it is acknowledged; returns the task id.
    async fn create(&self) -> String {
        let temperature = temperature();
        loop {
            let replica = rand::random_range(0..self.clients.len());
            self.ledger.attempt(&self.device);
            let arguments = json!({"device_id": self.device, "temperature": temperature});
            match self
                .clients
                .call(replica, "set_temperature", arguments)
                .await
            {
                Answer::Ok(view) => {
                    if let Some(id) = view["taskId"].as_str() {
                        self.ledger.acked(Acked {
                            id: id.to_string(),
                            device: self.device.clone(),
                            temperature,
                        });
                        self.ledger.observe(&view);
                        return id.to_string();
                    }
                    self.ledger
                        .trouble("create answered without taskId", &view.to_string());
                }
                Answer::ToolError(text) => self.ledger.trouble("create refused", &text),
                Answer::Unanswered(why) => self.ledger.trouble("create unanswered", &why),
            }
            tokio::time::sleep(Duration::from_millis(rand::random_range(100..400))).await;
        }
    }
}

/// Polls `get_task` through random replicas until the task ends (or the
/// follow times out; the checker looks again at the end). At a question
/// for a person it hands the watch to [`follow_slowly`] and returns.
async fn follow(clients: Arc<Clients>, ledger: Arc<Ledger>, id: String, spec: LaneSpec) {
    let until = Instant::now() + spec.follow_for;
    while Instant::now() < until {
        tokio::time::sleep(spec.poll).await;
        let replica = rand::random_range(0..clients.len());
        match clients
            .call(replica, "get_task", json!({"task_id": id}))
            .await
        {
            Answer::Ok(view) => {
                ledger.observe(&view);
                if is_terminal(&view) {
                    return;
                }
                // A task waiting for a person (the device settled on
                // another value) is not answered: the lane goes on (its
                // next command supersedes it), the watch slows down.
                if view["status"] == "input_required" {
                    tokio::spawn(follow_slowly(
                        clients.clone(),
                        ledger.clone(),
                        id.clone(),
                        until,
                    ));
                    return;
                }
            }
            Answer::ToolError(text) => ledger.trouble("get_task refused", &text),
            Answer::Unanswered(why) => ledger.trouble("get_task unanswered", &why),
        }
    }
}

/// The rest of a follow, once a second, in the background.
async fn follow_slowly(clients: Arc<Clients>, ledger: Arc<Ledger>, id: String, until: Instant) {
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let replica = rand::random_range(0..clients.len());
        if let Answer::Ok(view) = clients
            .call(replica, "get_task", json!({"task_id": id}))
            .await
        {
            ledger.observe(&view);
            if is_terminal(&view) {
                return;
            }
        }
    }
}
