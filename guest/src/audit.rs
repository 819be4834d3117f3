//! The audit trail: one record per command as it ends, kept apart from the
//! live tasks (which disappear after their TTL) in the tenant's own bucket,
//! so it is per tenant and works on every store the runner has.
//!
//! A record says who asked (the client's self-reported name and version),
//! what (tool, arguments), what was sent and observed, the outcome and its
//! reason, and when it was accepted, sent and ended. Commands that never
//! became a device command are recorded too, with `sent: null`: those the
//! safety gate stopped (`gated`) and those a person declined (`declined`).
//!
//! Layout: `audit/meta` holds the sequence numbers in use (`oldest..next`);
//! each record is `audit/entry/<seq>`. Appending reserves a number with
//! compare-and-swap and drops the oldest records beyond the count cap;
//! records past the age limit are dropped as later ones are appended, and
//! are never served meanwhile.

use crate::platform::{CasUpdate, Platform, cas_update};
pub use crate::task::ClientInfo;
use crate::task::{DECLINED, Stage, Status, TaskRecord};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};

const META: &str = "audit/meta";

/// The trail as an MCP resource; a query filters it
/// (`settle://audit?device=…&status=…&since=…&until=…&limit=…`). Its
/// subscribers hear of every record appended.
pub const URI: &str = "settle://audit";

/// The template clients see for it.
pub const TEMPLATE: &str = "settle://audit{?id,device,status,since,until,limit}";

fn entry_key(seq: u64) -> String {
    format!("audit/entry/{seq:020}")
}

/// How long records are kept (`audit_retention_ms`, 30 days by default)
/// and how many at most (`audit_max_records`, 10,000; 0 keeps none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Retention {
    pub max_age_ms: u64,
    pub max_records: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age_ms: 30 * 24 * 3600 * 1000,
            max_records: 10_000,
        }
    }
}

impl Retention {
    /// Reads the two settings through `lookup`; a value that is not a
    /// number is an error naming its key.
    pub fn from_lookup(
        lookup: &dyn Fn(&str) -> Result<Option<String>, String>,
    ) -> Result<Retention, String> {
        let defaults = Retention::default();
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match lookup(key)? {
                None => Ok(default),
                Some(text) => text.trim().parse().map_err(|_| {
                    format!("plugin configuration: {key} must be a number, not {text:?}")
                }),
            }
        };
        Ok(Retention {
            max_age_ms: number("audit_retention_ms", defaults.max_age_ms)?,
            max_records: number("audit_max_records", defaults.max_records)?,
        })
    }

    fn of(platform: &dyn Platform) -> Result<Retention, String> {
        Retention::from_lookup(&|key| platform.config(key))
    }
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Failed,
    Cancelled,
    /// Stopped by the safety gate and not confirmed: not sent.
    Gated,
    /// A person said no: not sent.
    Declined,
}

impl Outcome {
    pub fn parse(text: &str) -> Option<Outcome> {
        serde_json::from_value(Json::String(text.to_string())).ok()
    }
}

/// One audit record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The task's id, or a fresh id for a command that never became one.
    pub id: String,
    pub device_id: String,
    pub tool: String,
    pub client: ClientInfo,
    pub arguments: Json,
    pub outcome: Outcome,
    /// The values sent to the device; `null` when nothing was sent.
    pub sent: Option<Map<String, Json>>,
    /// The values the device last reported for them, when read.
    pub observed: Option<Map<String, Json>>,
    /// Why it ended so (`not_applied`, `gate`, …), when it did not complete.
    pub reason: Option<String>,
    pub message: String,
    pub accepted_at_ms: u64,
    pub sent_at_ms: Option<u64>,
    pub ended_at_ms: u64,
}

impl Entry {
    /// The record of a task that has just ended.
    pub fn of_task(task: &TaskRecord) -> Entry {
        let sent_at_ms = match task.stage {
            Stage::Sent { at_ms, .. } => Some(at_ms),
            _ => None,
        };
        let outcome = match task.status {
            Status::Completed => Outcome::Completed,
            Status::Cancelled if task.status_message == DECLINED => Outcome::Declined,
            Status::Cancelled => Outcome::Cancelled,
            _ => Outcome::Failed,
        };
        let values = |pick: &dyn Fn(&crate::task::FieldState) -> Option<Json>| {
            let map: Map<String, Json> = task
                .fields
                .iter()
                .filter_map(|f| Some((f.field.name().to_string(), pick(f)?)))
                .collect();
            (!map.is_empty()).then_some(map)
        };
        Entry {
            id: task.id.clone(),
            device_id: task.device_id.clone(),
            tool: task.tool.clone(),
            client: task.client.clone().unwrap_or_default(),
            arguments: task.arguments.clone().unwrap_or(Json::Null),
            outcome,
            sent: sent_at_ms.and_then(|_| values(&|f| Some(json!(f.sent)))),
            observed: values(&|f| f.observed.as_ref().map(|v| json!(v))),
            reason: task.failure.as_ref().map(|f| f.reason.as_str().to_string()),
            message: task.status_message.clone(),
            accepted_at_ms: task.created_at_ms,
            sent_at_ms,
            ended_at_ms: task.ended_at_ms.unwrap_or(task.updated_at_ms),
        }
    }

    pub fn to_json(&self) -> Json {
        serde_json::to_value(self).expect("audit records serialize")
    }
}

/// The sequence numbers in use.
#[derive(Clone, Copy, Default, Serialize, Deserialize)]
struct Meta {
    oldest: u64,
    next: u64,
}

fn meta(bytes: Option<&[u8]>) -> Result<Meta, String> {
    bytes
        .map(|b| serde_json::from_slice(b).map_err(|e| format!("store: {META} is unreadable: {e}")))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// Appends a record, and drops those past the count cap and (every few
/// appends) the age limit.
pub fn append(platform: &dyn Platform, entry: &Entry) -> Result<(), String> {
    append_many(platform, std::slice::from_ref(entry))
}

/// Appends records in order, with one number reservation, one write of
/// them all and one removal of those past the count cap: a device reading
/// that ends a hundred tasks costs three store round trips, not three
/// hundred (each waiting for its own commit, and all of them racing for
/// `audit/meta`).
pub fn append_many(platform: &dyn Platform, entries: &[Entry]) -> Result<(), String> {
    if entries.is_empty() {
        return Ok(());
    }
    let retention = Retention::of(platform)?;
    if retention.max_records == 0 {
        return Ok(());
    }
    let kv = platform.kv();
    let count = entries.len() as u64;
    let (first, oldest, dropped) = cas_update(kv, META, |current| {
        let mut m = meta(current)?;
        let first = m.next;
        m.next += count;
        let before = m.oldest;
        m.oldest = m.oldest.max(m.next.saturating_sub(retention.max_records));
        let bytes = serde_json::to_vec(&m).expect("audit meta serializes");
        Ok(CasUpdate::Write(bytes, (first, m.oldest, before..m.oldest)))
    })?;
    // A batch longer than the cap keeps only its newest records.
    let records: Vec<(String, Vec<u8>)> = (first..)
        .zip(entries)
        .filter(|(seq, _)| *seq >= oldest)
        .map(|(seq, entry)| {
            let bytes = serde_json::to_vec(entry).expect("audit records serialize");
            (entry_key(seq), bytes)
        })
        .collect();
    kv.set_many(&records)?;
    let dropped: Vec<String> = dropped.filter(|seq| *seq < first).map(entry_key).collect();
    kv.delete_many(&dropped)?;
    platform.resource_updated(URI);
    if (first..first + count).any(|seq| seq % AGE_CHECK_EVERY == 0) {
        drop_expired(platform, retention)?;
    }
    Ok(())
}

/// Appends are this many apart when they look for expired records.
const AGE_CHECK_EVERY: u64 = 16;

/// Drops the oldest records while they are past the age limit.
fn drop_expired(platform: &dyn Platform, retention: Retention) -> Result<(), String> {
    let kv = platform.kv();
    let now = platform.now_ms();
    let m = meta(kv.get(META)?.as_deref())?;
    let seqs: Vec<u64> = (m.oldest..m.next.min(m.oldest + 64)).collect();
    let keys: Vec<String> = seqs.iter().map(|s| entry_key(*s)).collect();
    let mut expired_to = m.oldest;
    for (seq, bytes) in seqs.iter().zip(kv.get_many(&keys)?) {
        let expired = match bytes.and_then(|b| serde_json::from_slice::<Entry>(&b).ok()) {
            Some(entry) => now.saturating_sub(entry.ended_at_ms) > retention.max_age_ms,
            // Reserved but not written yet (or lost): only well behind the
            // newest is it given up.
            None => m.next - seq > 64,
        };
        if !expired {
            break;
        }
        expired_to = seq + 1;
    }
    if expired_to == m.oldest {
        return Ok(());
    }
    let moved = cas_update(kv, META, |current| {
        let mut fresh = meta(current)?;
        if fresh.oldest >= expired_to {
            return Ok(CasUpdate::Keep(false));
        }
        fresh.oldest = expired_to;
        Ok(CasUpdate::Write(
            serde_json::to_vec(&fresh).expect("audit meta serializes"),
            true,
        ))
    })?;
    if moved {
        let expired: Vec<String> = (m.oldest..expired_to).map(entry_key).collect();
        kv.delete_many(&expired)?;
    }
    Ok(())
}

/// Which records to serve.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// One record, by its id (a task id).
    pub id: Option<String>,
    pub device: Option<String>,
    pub outcome: Option<Outcome>,
    /// Ended at or after (ms since the epoch).
    pub since_ms: Option<u64>,
    /// Ended before.
    pub until_ms: Option<u64>,
    /// At most this many, newest first.
    pub limit: usize,
}

/// The most records one read returns.
pub const MAX_LIMIT: usize = 1000;

impl Filter {
    /// From a `settle://audit?id=…&device=…&status=…&since=…&until=…&limit=…`
    /// query; times are ms since the epoch.
    pub fn parse_query(query: &str) -> Result<Filter, String> {
        let mut filter = Filter {
            limit: 100,
            ..Filter::default()
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            let number = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("{key} must be ms since the epoch, not {v:?}"))
            };
            match key {
                "id" => filter.id = Some(value),
                "device" => filter.device = Some(value),
                "status" => {
                    filter.outcome = Some(Outcome::parse(&value).ok_or_else(|| {
                        format!(
                            "status must be completed, failed, cancelled, gated or declined, not {value:?}"
                        )
                    })?)
                }
                "since" => filter.since_ms = Some(number(&value)?),
                "until" => filter.until_ms = Some(number(&value)?),
                "limit" => {
                    filter.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| format!("limit must be 1..={MAX_LIMIT}, not {value:?}"))?
                }
                other => return Err(format!("unknown audit filter {other:?}")),
            }
        }
        Ok(filter)
    }

    fn matches(&self, entry: &Entry) -> bool {
        self.id.as_ref().is_none_or(|id| *id == entry.id)
            && self.device.as_ref().is_none_or(|d| *d == entry.device_id)
            && self.outcome.is_none_or(|o| o == entry.outcome)
            && self.since_ms.is_none_or(|t| entry.ended_at_ms >= t)
            && self.until_ms.is_none_or(|t| entry.ended_at_ms < t)
    }
}

/// The records that match, newest first; those past the age limit are left
/// out even before they are dropped.
pub fn list(platform: &dyn Platform, filter: &Filter) -> Result<Vec<Entry>, String> {
    let retention = Retention::of(platform)?;
    let now = platform.now_ms();
    let kv = platform.kv();
    let m = meta(kv.get(META)?.as_deref())?;
    let mut out = Vec::new();
    let mut end = m.next;
    // Newest first, a page at a time, until enough match.
    while end > m.oldest && out.len() < filter.limit {
        let start = end.saturating_sub(PAGE).max(m.oldest);
        let keys: Vec<String> = (start..end).rev().map(entry_key).collect();
        for bytes in kv.get_many(&keys)?.into_iter().flatten() {
            let Ok(entry) = serde_json::from_slice::<Entry>(&bytes) else {
                continue;
            };
            if now.saturating_sub(entry.ended_at_ms) <= retention.max_age_ms
                && filter.matches(&entry)
            {
                out.push(entry);
            }
        }
        end = start;
    }
    out.truncate(filter.limit);
    Ok(out)
}

/// Records read per round trip.
const PAGE: u64 = 200;

/// `%XX` escapes and `+` in a query value, decoded; a malformed escape is
/// kept as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_into_filters_and_bad_ones_name_the_problem() {
        let f = Filter::parse_query("device=ac%2Dliving&status=gated&since=5&limit=3").unwrap();
        assert_eq!(f.device.as_deref(), Some("ac-living"));
        assert_eq!(f.outcome, Some(Outcome::Gated));
        assert_eq!((f.since_ms, f.limit), (Some(5), 3));
        assert_eq!(Filter::parse_query("").unwrap().limit, 100);
        assert!(
            Filter::parse_query("status=done")
                .unwrap_err()
                .contains("status must be")
        );
        assert!(
            Filter::parse_query("since=yesterday")
                .unwrap_err()
                .contains("since")
        );
        assert!(
            Filter::parse_query("limit=0")
                .unwrap_err()
                .contains("limit")
        );
        assert!(
            Filter::parse_query("colour=red")
                .unwrap_err()
                .contains("colour")
        );
    }

    #[test]
    fn retention_reads_its_settings_and_names_a_bad_one() {
        let none = |_: &str| Ok(None);
        assert_eq!(Retention::from_lookup(&none).unwrap(), Retention::default());
        let bad = |k: &str| Ok((k == "audit_max_records").then(|| "many".to_string()));
        assert!(
            Retention::from_lookup(&bad)
                .unwrap_err()
                .contains("audit_max_records")
        );
    }

    fn entry(id: &str, device: &str, outcome: Outcome, ended_at_ms: u64) -> Entry {
        Entry {
            id: id.into(),
            device_id: device.into(),
            tool: "set_temperature".into(),
            client: ClientInfo::default(),
            arguments: json!({}),
            outcome,
            sent: None,
            observed: None,
            reason: None,
            message: String::new(),
            accepted_at_ms: ended_at_ms,
            sent_at_ms: None,
            ended_at_ms,
        }
    }

    /// Audit records in the store, served or not.
    fn stored_records(p: &crate::platform::memory::MemoryPlatform) -> usize {
        p.keys()
            .into_iter()
            .filter(|k| k.starts_with("audit/entry/"))
            .count()
    }

    fn ids(entries: &[Entry]) -> Vec<&str> {
        entries.iter().map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn the_count_cap_drops_the_oldest_and_filters_pick() {
        use crate::platform::memory::MemoryPlatform;
        let p = MemoryPlatform::new(1_000, &[("audit_max_records", "3")]);
        for (i, device) in ["a", "b", "a", "b", "a"].iter().enumerate() {
            let outcome = if i % 2 == 0 {
                Outcome::Completed
            } else {
                Outcome::Failed
            };
            append(
                &p,
                &entry(&format!("t{i}"), device, outcome, 1_000 + i as u64),
            )
            .unwrap();
        }
        let all = Filter {
            limit: 100,
            ..Filter::default()
        };
        assert_eq!(ids(&list(&p, &all).unwrap()), ["t4", "t3", "t2"]);
        let stored = stored_records(&p);
        assert_eq!(stored, 3, "dropped records leave the store");
        let a = Filter {
            device: Some("a".into()),
            ..all.clone()
        };
        assert_eq!(ids(&list(&p, &a).unwrap()), ["t4", "t2"]);
        let failed = Filter {
            outcome: Some(Outcome::Failed),
            ..all.clone()
        };
        assert_eq!(ids(&list(&p, &failed).unwrap()), ["t3"]);
        let since = Filter {
            since_ms: Some(1_003),
            ..all.clone()
        };
        assert_eq!(ids(&list(&p, &since).unwrap()), ["t4", "t3"]);
        let one = Filter { limit: 1, ..all };
        assert_eq!(ids(&list(&p, &one).unwrap()), ["t4"]);
    }

    #[test]
    fn a_batch_is_appended_in_order_under_the_count_cap() {
        use crate::platform::memory::MemoryPlatform;
        let p = MemoryPlatform::new(1_000, &[("audit_max_records", "4")]);
        append(&p, &entry("first", "a", Outcome::Completed, 1_000)).unwrap();
        let batch = |names: &[&str]| -> Vec<Entry> {
            names
                .iter()
                .map(|n| entry(n, "a", Outcome::Completed, 1_001))
                .collect()
        };
        append_many(&p, &batch(&["b1", "b2", "b3"])).unwrap();
        let all = Filter {
            limit: 100,
            ..Filter::default()
        };
        assert_eq!(ids(&list(&p, &all).unwrap()), ["b3", "b2", "b1", "first"]);
        // Longer than the cap: only the newest four are kept, and the
        // records before the batch leave the store.
        append_many(&p, &batch(&["c1", "c2", "c3", "c4", "c5"])).unwrap();
        assert_eq!(ids(&list(&p, &all).unwrap()), ["c5", "c4", "c3", "c2"]);
        let stored = stored_records(&p);
        assert_eq!(stored, 4, "nothing past the cap stays in the store");
        append_many(&p, &[]).unwrap();
        assert_eq!(list(&p, &all).unwrap().len(), 4);
    }

    #[test]
    fn records_past_the_age_limit_are_not_served_and_are_dropped() {
        use crate::platform::memory::MemoryPlatform;
        let p = MemoryPlatform::new(0, &[("audit_retention_ms", "1000")]);
        append(&p, &entry("old", "a", Outcome::Completed, 0)).unwrap();
        p.set_now(5_000);
        let all = Filter {
            limit: 100,
            ..Filter::default()
        };
        assert!(list(&p, &all).unwrap().is_empty());
        for i in 0..AGE_CHECK_EVERY {
            append(
                &p,
                &entry(&format!("new{i}"), "a", Outcome::Completed, 5_000),
            )
            .unwrap();
        }
        assert!(
            p.keys().iter().all(|k| k != &entry_key(0)),
            "the expired record is dropped"
        );
        assert_eq!(list(&p, &all).unwrap().len(), AGE_CHECK_EVERY as usize);
    }

    #[test]
    fn no_records_are_kept_when_the_cap_is_zero() {
        use crate::platform::memory::MemoryPlatform;
        let p = MemoryPlatform::new(0, &[("audit_max_records", "0")]);
        append(&p, &entry("t", "a", Outcome::Completed, 0)).unwrap();
        assert!(p.keys().iter().all(|k| !k.starts_with("audit/")));
    }
}
