//! The platform of the component: the runner's imports, through the SDK.

use super::{CasDecision, Kv, Level, Platform, Swap, Wake};
use crate::bindings::settle::plugin::types::{TaskStatus, TaskView};
use crate::host;
use crate::task::{Status, TaskRecord, tool_result};
use std::cell::OnceCell;
use std::collections::BTreeMap;

/// The runner's imports. Opening the bucket is the only work done up front;
/// the configuration is read whole, once, when a key is first asked for.
pub struct WasiPlatform {
    kv: WasiKv,
    config: OnceCell<Result<BTreeMap<String, String>, String>>,
}

impl WasiPlatform {
    pub fn open() -> Result<WasiPlatform, String> {
        Ok(WasiPlatform {
            kv: WasiKv(host::Kv::open()?),
            config: OnceCell::new(),
        })
    }
}

struct WasiKv(host::Kv);

/// The most keys or wakes sent in one host call: well under what the
/// runner takes (10,000), so a batch is never refused for its length.
const BATCH: usize = 1_000;

impl Kv for WasiKv {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.0.get(key)
    }

    fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, String> {
        self.0.get_many(keys)
    }

    fn delete(&self, key: &str) -> Result<(), String> {
        self.0.delete(key)
    }

    fn set_many(&self, pairs: &[(String, Vec<u8>)]) -> Result<(), String> {
        pairs
            .chunks(BATCH)
            .try_for_each(|chunk| self.0.set_many(chunk))
    }

    fn delete_many(&self, keys: &[String]) -> Result<(), String> {
        keys.chunks(BATCH)
            .try_for_each(|chunk| self.0.delete_many(chunk))
    }

    fn swap_many(&self, swaps: Vec<Swap>) -> Result<Vec<u32>, String> {
        let swaps: Vec<host::Swap> = swaps
            .into_iter()
            .map(|swap| host::Swap {
                key: swap.key,
                seen: swap.seen,
                value: swap.value,
            })
            .collect();
        self.0.swap_many(&swaps)
    }

    fn cas(&self, key: &str, decide: &mut CasDecision<'_>) -> Result<(), String> {
        self.0.cas_update(key, |current| {
            Ok(match decide(current)? {
                Some(bytes) => host::CasUpdate::Write(bytes, ()),
                None => host::CasUpdate::Keep(()),
            })
        })
    }
}

impl Platform for WasiPlatform {
    fn now_ms(&self) -> u64 {
        host::now_ms()
    }

    fn random_id(&self) -> String {
        host::random_id()
    }

    fn config(&self, key: &str) -> Result<Option<String>, String> {
        // Settings read about twenty keys per call: one `get-all` instead
        // of a host call each.
        let all = self
            .config
            .get_or_init(|| host::config_all().map(|pairs| pairs.into_iter().collect()));
        Ok(all.as_ref().map_err(Clone::clone)?.get(key).cloned())
    }

    fn kv(&self) -> &dyn Kv {
        &self.kv
    }

    fn schedule(&self, wakes: &[Wake]) -> Result<(), String> {
        // One host call per chunk: the runner writes a call's wakes in one
        // commit.
        wakes.chunks(BATCH).try_for_each(|chunk| {
            let chunk: Vec<(&str, &str, u64)> = chunk
                .iter()
                .map(|w| (w.task_id.as_str(), w.group.as_str(), w.at_ms))
                .collect();
            host::schedule_many(&chunk)
        })
    }

    fn unschedule(&self, task_ids: &[String]) -> Result<(), String> {
        host::unschedule(task_ids)
    }

    fn forget_tasks(&self, task_ids: &[String]) -> Result<(), String> {
        host::forget_tasks(task_ids)
    }

    fn task_changed(&self, task: &TaskRecord, detailed: serde_json::Value) {
        host::task_changed(&rendered_view(task, detailed));
    }

    fn resource_updated(&self, uri: &str) {
        host::resource_updated(uri);
    }

    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Error => host::Level::Error,
            Level::Warn => host::Level::Warn,
            Level::Info => host::Level::Info,
            Level::Debug => host::Level::Debug,
        };
        host::log(level, message);
    }
}

/// Both renderings of a task, as the runner receives them.
pub fn task_view(record: &TaskRecord) -> TaskView {
    rendered_view(record, record.to_detailed_json())
}

/// [`task_view`], with the detailed rendering already made.
fn rendered_view(record: &TaskRecord, detailed: serde_json::Value) -> TaskView {
    let (detailed, tool_result) = detailed_and_tool_result(record, detailed);
    TaskView {
        task_id: record.id.clone(),
        status: match record.status {
            Status::Working => TaskStatus::Working,
            Status::InputRequired => TaskStatus::InputRequired,
            Status::Completed => TaskStatus::Completed,
            Status::Failed => TaskStatus::Failed,
            Status::Cancelled => TaskStatus::Cancelled,
        },
        detailed,
        tool_result,
    }
}

/// The texts of the detailed task and of the tool result that stands for
/// it. A completed task's detailed rendering carries that very result, so
/// its text is written once and placed in both.
fn detailed_and_tool_result(
    record: &TaskRecord,
    mut detailed: serde_json::Value,
) -> (String, String) {
    let completed_result = match detailed.as_object_mut() {
        Some(fields) if record.status == Status::Completed => fields.remove("result"),
        _ => None,
    };
    let Some(result) = completed_result else {
        let tool = tool_result(record.to_tool_json(), false);
        return (crate::json::text(&detailed), crate::json::text(&tool));
    };
    let result = crate::json::text(&result);
    let mut text = crate::json::text(&detailed);
    // `{...}` becomes `{...,"result":<result>}`.
    text.pop();
    if text.len() > 1 {
        text.push(',');
    }
    text.push_str("\"result\":");
    text.push_str(&result);
    text.push('}');
    (text, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Comparison, Field, Value};
    use crate::task::{FieldState, Timing, Verdict};
    use serde_json::Value as Json;

    fn record(status: Status) -> TaskRecord {
        let field = FieldState {
            field: Field::Power,
            sent: Value::Choice("on".into()),
            baseline: Some(Value::Choice("off".into())),
            observed: Some(Value::Choice("on".into())),
            readable: true,
            comparison: Comparison::CaseInsensitive,
            verdict: Verdict::default(),
        };
        let timing = Timing {
            ttl_ms: 300_000,
            poll_interval_ms: 1_000,
            settle_window_ms: 10_000,
            stable_reads: 2,
            dense_read_ms: 200,
        };
        let mut record = TaskRecord::new(
            "t1".into(),
            "set_power_mode",
            "ac-1",
            vec![field],
            timing,
            1_000,
        );
        record.status = status;
        record
    }

    #[test]
    fn both_texts_are_the_renderings_they_stand_for() {
        for status in [
            Status::Working,
            Status::InputRequired,
            Status::Completed,
            Status::Failed,
            Status::Cancelled,
        ] {
            let record = record(status);
            let (detailed, tool) = detailed_and_tool_result(&record, record.to_detailed_json());
            let detailed: Json = serde_json::from_str(&detailed).unwrap();
            let tool: Json = serde_json::from_str(&tool).unwrap();
            assert_eq!(detailed, record.to_detailed_json(), "{status:?}");
            assert_eq!(
                tool,
                tool_result(record.to_tool_json(), false),
                "{status:?}"
            );
            if status == Status::Completed {
                assert_eq!(detailed["result"], tool);
            }
        }
    }
}
