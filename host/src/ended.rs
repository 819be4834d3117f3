//! The views of tasks that ended, kept by the runner so that `tasks/get` of
//! an ended task is answered without a plugin call.
//!
//! Agents poll `tasks/get`, and most of what they poll has ended (a task
//! ends once, and is read until its result is fetched and after). Served by
//! the plugin, each read costs a fresh instance, the task's record decoded
//! and rendered again, for an answer that cannot change: the contract says
//! a task in a terminal status never changes again. So when a plugin
//! reports such a change (`task-changed`), the runner keeps the `detailed`
//! rendering it was given, as it was given, and answers from it. It never
//! reads it: the plugin stays the only one who knows what a task says.
//!
//! Kept only for a plugin that imports `forget-tasks`, which it calls
//! before it removes a task: a plugin that cannot tell the runner a task
//! is gone is asked every time, so no answer outlives its task. While such
//! a plugin serves, the views kept before are dropped ([`forget_all`]: at
//! start, and at a swap to or from it), so none is left to answer for a
//! task that went meanwhile. That drop can fail (the store failing), so
//! before such a plugin serves, the runner first records on the store that
//! the tenant's views are no longer vouched for ([`disown`]); a plugin
//! that keeps views then starts only after they are dropped ([`vouch`]),
//! in this run or after a restart.
//!
//! A view is stored with an fsync'd write after the change it shows was
//! committed, so that write puts the change on disk too, and serving the
//! view never tells of a change a crash could undo; a view lost in a crash
//! only sends the next read to the plugin again. If the store was opened
//! again after a disk error before the call's flush (the change may be
//! lost), the call's views are withdrawn ([`Pending::withdraw`]).
//!
//! Views are stored compressed (`pack`): kept for every task until its
//! plugin forgets it, plain views doubled the store (1,000,000 tasks: the
//! embedded store 2.1 GB before views, 4.2 GB with them; Redis, which holds
//! it all in memory, 1.5 GB and 3.2 GB).

use crate::bindings::settle::plugin::types::TaskView;
use crate::store::{Store, StoreResult};
use std::sync::{Arc, Mutex};

/// The first byte of a packed view. No JSON text starts with a NUL, so no
/// view the fourteenth round stored plain can be taken for a packed one.
const PACKED: u8 = 0;

/// The largest view kept. A bigger one (no real task's is near it) is left
/// to the plugin, and a stored value that claims more is not read: a
/// damaged or foreign value costs no more than this to reject.
const MAX_VIEW_BYTES: usize = 16 << 20;

/// The namespace of `tenant_namespace`'s ended views. Tenant namespaces
/// are `a-z`, `0-9`, `-` and `_` (`config::tenant::valid_name`), so no
/// tenant's own namespace can be this one, and a plugin's bucket cannot
/// reach it.
pub fn namespace(tenant_namespace: &str) -> String {
    format!("{tenant_namespace}.ended")
}

/// The namespace of `tenant_namespace`'s mark that its views may have
/// outlived their tasks (see [`namespace`] for why no tenant can reach it).
fn marks(tenant_namespace: &str) -> String {
    format!("{tenant_namespace}.ended-marks")
}

/// The mark's key: present while a plugin that cannot forget tasks may
/// have served since the views were last dropped.
const UNVOUCHED: &str = "unvouched";

/// Before a plugin that cannot forget tasks serves the tenant: records,
/// durably, that its views can no longer be vouched for, then drops them
/// (answering how many). The record is what matters: if the drop fails, a
/// later plugin that keeps views drops them before it serves ([`vouch`]),
/// even after a restart. An error when the record could not be written;
/// a failed drop is only logged, since this plugin never serves views.
pub async fn disown(store: &Store, tenant_namespace: &str) -> StoreResult<usize> {
    store
        .on_write()
        .set(&marks(tenant_namespace), UNVOUCHED, b"1".to_vec())
        .await?;
    match forget_all(store, tenant_namespace).await {
        Ok(count) => Ok(count),
        Err(e) => {
            tracing::warn!(
                namespace = %tenant_namespace,
                "the views of ended tasks kept before were not dropped; they are not served, \
                 and are dropped before a plugin that keeps views serves: {e}"
            );
            Ok(0)
        }
    }
}

/// Before a plugin that keeps views serves the tenant: drops the views a
/// plugin that cannot forget tasks may have left stale ([`disown`]'s
/// mark, or `after_disowned` when the caller knows one served), then
/// clears the mark. Answers how many views were dropped; an error when
/// they could not be, and the plugin must not serve views.
pub async fn vouch(
    store: &Store,
    tenant_namespace: &str,
    after_disowned: bool,
) -> StoreResult<usize> {
    let marks = marks(tenant_namespace);
    if !after_disowned && store.get(&marks, UNVOUCHED).await?.is_none() {
        return Ok(0);
    }
    let dropped = forget_all(store, tenant_namespace).await?;
    if let Err(e) = store.on_write().delete(&marks, UNVOUCHED).await {
        // Left, it only costs another drop of views that are sound.
        tracing::warn!(namespace = %tenant_namespace, "the views were dropped, but not the mark that asked for it: {e}");
    }
    Ok(dropped)
}

/// The `detailed` view of `task_id`, if the task ended and its plugin
/// has not forgotten it.
pub async fn read(
    store: &Store,
    tenant_namespace: &str,
    task_id: &str,
) -> StoreResult<Option<String>> {
    let Some(bytes) = store.get(&namespace(tenant_namespace), task_id).await? else {
        return Ok(None);
    };
    Ok(unpack(bytes))
}

/// `view` as stored: [`PACKED`], its length (4 bytes, little-endian) and
/// its LZ4 block. `None` for a view over [`MAX_VIEW_BYTES`].
fn pack(view: &str) -> Option<Vec<u8>> {
    if view.len() > MAX_VIEW_BYTES {
        return None;
    }
    // Packed in place after the header: one buffer, no copy.
    const HEADER: usize = 5;
    let mut packed = vec![0; HEADER + lz4_flex::block::get_maximum_output_size(view.len())];
    packed[0] = PACKED;
    packed[1..HEADER].copy_from_slice(&u32::try_from(view.len()).ok()?.to_le_bytes());
    let length = lz4_flex::block::compress_into(view.as_bytes(), &mut packed[HEADER..]).ok()?;
    packed.truncate(HEADER + length);
    Some(packed)
}

/// The view `bytes` holds: packed by [`pack`], or plain text as the first
/// runner to keep views stored them (a store it wrote is read as it is).
/// `None` for anything else, which is not a view this runner wrote: the
/// plugin answers.
fn unpack(bytes: Vec<u8>) -> Option<String> {
    let text = match bytes.split_first() {
        Some((&PACKED, packed)) => {
            let (length, block) = lz4_flex::block::uncompressed_size(packed).ok()?;
            if length > MAX_VIEW_BYTES {
                return None;
            }
            let text = lz4_flex::block::decompress(block, length).ok()?;
            (text.len() == length).then_some(text)?
        }
        _ => bytes,
    };
    // Packed from a WIT string, so UTF-8.
    String::from_utf8(text).ok()
}

/// Drops the views of `task_ids` (the plugin is removing the tasks).
pub async fn forget(store: &Store, tenant_namespace: &str, task_ids: &[String]) -> StoreResult<()> {
    store
        .delete_many(&namespace(tenant_namespace), task_ids)
        .await
}

/// Drops every view the tenant has; returns how many there were.
///
/// For when views and tasks may have parted: a plugin that cannot say when
/// it removes a task (no `forget-tasks`) has taken over, or is handing over
/// to one that can. While such a plugin serves, its tasks may go without a
/// word, so a view kept from before could later answer for a task that no
/// longer exists; dropped, the next read of each task asks the plugin.
pub async fn forget_all(store: &Store, tenant_namespace: &str) -> StoreResult<usize> {
    let namespace = namespace(tenant_namespace);
    let mut forgotten = 0;
    loop {
        // Each page is deleted before the next is listed, so the first
        // page is always the next one.
        let (keys, _) = store.list_keys(&namespace, None).await?;
        if keys.is_empty() {
            return Ok(forgotten);
        }
        store.delete_many(&namespace, &keys).await?;
        forgotten += keys.len();
    }
}

/// The views one call's ended tasks left to store. They are written once,
/// at the end of the call (a device's reading may end a hundred tasks at
/// once, and one write for all of them costs far less than one each).
#[derive(Clone, Default)]
pub struct Pending(Arc<Mutex<Views>>);

/// Ended tasks' views: (task id, its `detailed` text [`pack`]ed).
type Views = Vec<(String, Vec<u8>)>;

impl Pending {
    /// Keeps `task`'s view if it ended.
    pub fn note(&self, task: &TaskView) {
        if !task.status.is_terminal() {
            return;
        }
        match pack(&task.detailed) {
            Some(packed) => self.lock().push((task.task_id.clone(), packed)),
            None => tracing::debug!(
                task = %task.task_id,
                "an ended task's view of {} bytes is not kept; the plugin answers for it",
                task.detailed.len()
            ),
        }
    }

    /// Drops what is pending for `task_ids`: a task forgotten in the call
    /// that ended it leaves no view behind.
    pub fn drop_for(&self, task_ids: &[String]) {
        self.lock().retain(|(id, _)| !task_ids.contains(id));
    }

    /// Writes what is pending, on disk when this returns. It comes last in
    /// a call that wrote the tasks' records, whose writes must reach the
    /// disk before its answer anyway: one fsync'd commit covers them all
    /// ([`Store::on_write`]), instead of this write and then a flush, two
    /// jobs for the store's writer: with those two, creating tasks with 8
    /// clients while others ended ran 7 % slower than before views were
    /// kept; with one, 1 % (medians of seven runs, docs/performance.md).
    /// A failure is logged, not raised: the plugin answers for a task
    /// whose view is missing.
    ///
    /// Returns the ids it wrote: if the call's own flush then finds its
    /// writes lost to a reopen of the store after a disk error, the caller
    /// takes them back with [`Pending::withdraw`].
    pub async fn store(&self, store: &Store, tenant_namespace: &str) -> Vec<String> {
        let views = std::mem::take(&mut *self.lock());
        if views.is_empty() {
            return Vec::new();
        }
        let ids: Vec<String> = views.iter().map(|(id, _)| id.clone()).collect();
        let written = store
            .on_write()
            .set_many(&namespace(tenant_namespace), views)
            .await;
        match written {
            Ok(()) => ids,
            Err(e) => {
                tracing::warn!(
                    namespace = tenant_namespace,
                    "the views of {} ended tasks were not kept; the plugin answers for them: {e}",
                    ids.len()
                );
                Vec::new()
            }
        }
    }

    /// Drops views [`Pending::store`] wrote for changes that did not reach
    /// the disk (the store was opened again after a disk error before the
    /// call's flush): a view must not answer for a change that was lost.
    /// Best effort: if this fails too, it is logged.
    pub async fn withdraw(store: &Store, tenant_namespace: &str, ids: &[String]) {
        if ids.is_empty() {
            return;
        }
        if let Err(e) = forget(&store.on_write(), tenant_namespace, ids).await {
            tracing::error!(
                namespace = tenant_namespace,
                "views of {} tasks whose ends were lost could not be dropped: {e}",
                ids.len()
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Views> {
        // A panic while holding it leaves a plain list, still usable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completed task's view as the tasks extension shapes one: its
    /// result once as text, once as structured content. The runner never
    /// reads what the result says; any plugin's will do.
    fn completed_view() -> String {
        let result = r#"{"requested":{"level":3},"observed":{"level":3,"state":"on"},"reads":2,"note":"the reported state matches the requested one"}"#;
        let text = serde_json::to_string(result).unwrap();
        format!(
            r#"{{"taskId":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"completed","statusMessage":"the reported state matches the requested one","createdAt":"2026-12-04T15:00:00Z","lastUpdatedAt":"2026-12-04T15:00:31Z","ttlMs":14940000,"pollIntervalMs":1000,"result":{{"content":[{{"type":"text","text":{text}}}],"structuredContent":{result},"isError":false}}}}"#
        )
    }

    #[test]
    fn a_view_is_stored_packed_and_read_back_as_given() {
        let view = completed_view();
        let packed = pack(&view).unwrap();
        assert!(
            packed.len() < view.len() * 3 / 4,
            "{} bytes packed to {}",
            view.len(),
            packed.len()
        );
        assert_eq!(unpack(packed).as_deref(), Some(view.as_str()));
        assert_eq!(unpack(pack("").unwrap()).as_deref(), Some(""));
    }

    #[test]
    fn a_plain_view_stored_before_views_were_packed_is_read_as_it_is() {
        let view = completed_view();
        assert_eq!(unpack(view.clone().into_bytes()), Some(view));
    }

    #[test]
    fn a_value_that_is_not_a_whole_view_is_not_read() {
        let packed = pack(&completed_view()).unwrap();
        assert_eq!(
            unpack(packed[..packed.len() - 4].to_vec()),
            None,
            "cut short"
        );
        assert_eq!(unpack(packed[..3].to_vec()), None, "its length cut short");
        assert_eq!(unpack(vec![0xff, 0xfe, b'{']), None, "not UTF-8");

        // A length that is not the block's: too short, too long, too big.
        let with_length = |length: u32| {
            let mut value = packed.clone();
            value[1..5].copy_from_slice(&length.to_le_bytes());
            unpack(value)
        };
        assert_eq!(with_length(10), None);
        assert_eq!(with_length(completed_view().len() as u32 + 1), None);
        assert_eq!(with_length(u32::MAX), None, "never allocated");
        assert_eq!(pack(&" ".repeat(MAX_VIEW_BYTES + 1)), None);
    }
}
