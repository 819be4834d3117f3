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
        for _ in 0..self.spec.tasks {
            let id = self.create().await;
            if rand::random_bool(self.spec.follow_share) {
                self.follow(&id).await;
            } else {
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..300))).await;
            }
        }
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
                    self.ledger.trouble("create answered without taskId", &view.to_string());
                }
                Answer::ToolError(text) => self.ledger.trouble("create refused", &text),
                Answer::Unanswered(why) => self.ledger.trouble("create unanswered", &why),
            }
            tokio::time::sleep(Duration::from_millis(rand::random_range(100..400))).await;
        }
    }

    /// Polls `get_task` through random replicas until the task ends (or the
    /// follow times out; the checker looks again at the end).
    async fn follow(&self, id: &str) {
        let until = Instant::now() + self.spec.follow_for;
        while Instant::now() < until {
            tokio::time::sleep(self.spec.poll).await;
            let replica = rand::random_range(0..self.clients.len());
            match self
                .clients
                .call(replica, "get_task", json!({"task_id": id}))
                .await
            {
                Answer::Ok(view) => {
                    self.ledger.observe(&view);
                    // A task waiting for a person (the device settled on
                    // another value) is left to be superseded or expire.
                    if is_terminal(&view) || view["status"] == "input_required" {
                        return;
                    }
                }
                Answer::ToolError(text) => self.ledger.trouble("get_task refused", &text),
                Answer::Unanswered(why) => self.ledger.trouble("get_task unanswered", &why),
            }
        }
    }
}
