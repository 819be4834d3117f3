//! The same contract, checked against every backend: memory, redb, and
//! Redis when `redis-server` is installed (`make test` installs it and sets
//! `SETTLE_REQUIRE_REDIS`, so there it is never skipped). Redis's
//! compare-and-swap and claim are Lua scripts; this is where they are
//! checked apart from the end-to-end tests.

use super::*;

/// What keeps a backend alive for one test (a directory, a server), until
/// it is dropped.
type Keep = Box<dyn std::any::Any>;

/// A redis-server of one test, on a free loopback port, without
/// persistence; killed when dropped.
struct RedisServer {
    child: std::process::Child,
    port: u16,
}

impl RedisServer {
    /// Starts one, or `None` when redis-server is not installed.
    fn start() -> Option<RedisServer> {
        use std::io::{BufRead, BufReader};
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let mut child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let mut lines = BufReader::new(child.stdout.take()?).lines();
        // It says so once it accepts connections; a closed pipe means it
        // exited (the loop ends then, and the connection fails loudly).
        for line in lines.by_ref() {
            if line.ok()?.contains("Ready to accept connections") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Some(RedisServer { child, port })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn backends() -> Vec<(&'static str, Store, Keep)> {
    let dir = tempfile::tempdir().unwrap();
    let file = Store::open_file(&dir.path().join("s.redb")).unwrap();
    let mut all = vec![
        ("memory", Store::memory(), Box::new(()) as Keep),
        ("redb", file, Box::new(dir)),
    ];
    match RedisServer::start() {
        Some(server) => {
            let store = Store::open_redis(&format!("redis://127.0.0.1:{}/0", server.port))
                .expect("redis store");
            all.push(("redis", store, Box::new(server)));
        }
        None if std::env::var_os("SETTLE_REQUIRE_REDIS").is_some() => {
            panic!("redis-server is not installed, and SETTLE_REQUIRE_REDIS is set")
        }
        None => eprintln!(
            "store contract: redis-server is not installed, so the Redis backend is skipped \
             (`make redis` installs it)"
        ),
    }
    all
}

#[tokio::test]
async fn compare_and_swap_writes_only_over_the_expected_value() {
    for (name, store, _keep) in backends().await {
        assert!(
            store
                .compare_and_swap("t", "k", None, b"1".to_vec())
                .await
                .unwrap(),
            "{name}"
        );
        assert!(
            !store
                .compare_and_swap("t", "k", None, b"2".to_vec())
                .await
                .unwrap(),
            "{name}"
        );
        assert!(
            !store
                .compare_and_swap("t", "k", Some(b"0".to_vec()), b"2".to_vec())
                .await
                .unwrap()
        );
        assert!(
            store
                .compare_and_swap("t", "k", Some(b"1".to_vec()), b"2".to_vec())
                .await
                .unwrap()
        );
        assert_eq!(
            store.get("t", "k").await.unwrap(),
            Some(b"2".to_vec()),
            "{name}"
        );
    }
}

fn swap(key: &str, seen: Option<&str>, value: &str) -> Swap {
    Swap {
        key: key.into(),
        seen: seen.map(|s| s.as_bytes().to_vec()),
        value: value.as_bytes().to_vec(),
    }
}

#[tokio::test]
async fn a_swap_of_many_keys_writes_all_of_them_or_none() {
    for (name, store, _keep) in backends().await {
        store.set("t", "a", b"1".to_vec()).await.unwrap();
        let written = store
            .compare_and_swap_many("t", vec![swap("a", Some("1"), "2"), swap("b", None, "x")])
            .await
            .unwrap();
        assert!(written.is_empty(), "{name}: {written:?}");
        let (keys, _) = store.list_keys("t", None).await.unwrap();
        assert_eq!(keys, ["a", "b"], "{name}: a new key is listed");

        // One stale key of three: nothing is written, and it is named.
        let refused = store
            .compare_and_swap_many(
                "t",
                vec![
                    swap("a", Some("2"), "3"),
                    swap("b", None, "y"),
                    swap("c", None, "z"),
                ],
            )
            .await
            .unwrap();
        assert_eq!(refused, [1], "{name}");
        for (key, value) in [("a", Some("2")), ("b", Some("x")), ("c", None)] {
            assert_eq!(
                store.get("t", key).await.unwrap(),
                value.map(|v| v.as_bytes().to_vec()),
                "{name}: {key} unchanged"
            );
        }
        // The same key in another namespace is another key.
        let other = store
            .compare_and_swap_many("u", vec![swap("a", None, "u")])
            .await
            .unwrap();
        assert!(other.is_empty(), "{name}");
        assert_eq!(store.get("t", "a").await.unwrap(), Some(b"2".to_vec()));
        assert!(
            store
                .compare_and_swap_many("t", Vec::new())
                .await
                .unwrap()
                .is_empty(),
            "{name}: nothing to swap"
        );
    }
}

#[tokio::test]
async fn namespaces_do_not_see_each_other() {
    for (name, store, _keep) in backends().await {
        store.set("alice", "task/1", b"a".to_vec()).await.unwrap();
        assert_eq!(store.get("bob", "task/1").await.unwrap(), None, "{name}");
        let (keys, _) = store.list_keys("bob", None).await.unwrap();
        assert!(keys.is_empty(), "{name}");
        let (keys, next) = store.list_keys("alice", None).await.unwrap();
        assert_eq!(keys, ["task/1"], "{name}");
        assert_eq!(next, None);
    }
}

#[tokio::test]
async fn batches_write_and_delete_in_their_namespace_and_are_listed() {
    for (name, store, _keep) in backends().await {
        store.set("u", "b", b"other".to_vec()).await.unwrap();
        let pairs = vec![
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
            ("c".to_string(), b"3".to_vec()),
        ];
        store.set_many("t", pairs).await.unwrap();
        let keys = ["a", "b", "c"].map(String::from);
        let got = store.get_many("t", &keys).await.unwrap();
        assert_eq!(
            got,
            [
                Some(b"1".to_vec()),
                Some(b"2".to_vec()),
                Some(b"3".to_vec())
            ],
            "{name}"
        );
        let (listed, _) = store.list_keys("t", None).await.unwrap();
        assert_eq!(
            listed, keys,
            "{name}: a batch's keys are listed like any other"
        );
        store
            .delete_many(
                "t",
                &["a".to_string(), "c".to_string(), "missing".to_string()],
            )
            .await
            .unwrap();
        let (listed, _) = store.list_keys("t", None).await.unwrap();
        assert_eq!(listed, ["b"], "{name}");
        assert_eq!(
            store.get("u", "b").await.unwrap(),
            Some(b"other".to_vec()),
            "{name}: another namespace's key of the same name is untouched"
        );
        store.set_many("t", Vec::new()).await.unwrap();
        store.delete_many("t", &[]).await.unwrap();
    }
}

#[tokio::test]
async fn list_keys_pages_with_a_cursor() {
    for (name, store, _keep) in backends().await {
        for i in 0..(LIST_PAGE + 5) {
            store.set("t", &format!("k{i:05}"), vec![]).await.unwrap();
        }
        store.set("u", "k0", vec![]).await.unwrap();
        let (first, cursor) = store.list_keys("t", None).await.unwrap();
        assert_eq!(first.len(), LIST_PAGE, "{name}");
        let (rest, end) = store.list_keys("t", cursor).await.unwrap();
        assert_eq!(rest.len(), 5, "{name}");
        assert_eq!(end, None, "{name}");
        assert_eq!(rest[0], format!("k{:05}", LIST_PAGE));
    }
}

#[tokio::test]
async fn increment_counts_and_rejects_non_numbers() {
    for (name, store, _keep) in backends().await {
        assert_eq!(store.increment("t", "c", 5).await.unwrap(), 5, "{name}");
        assert_eq!(store.increment("t", "c", -2).await.unwrap(), 3, "{name}");
        store.set("t", "x", b"abc".to_vec()).await.unwrap();
        assert!(matches!(
            store.increment("t", "x", 1).await,
            Err(StoreError::Corrupt(_))
        ));
    }
}

fn wake(id: &str, group: &str, at_ms: u64) -> Wake {
    Wake {
        task_id: id.into(),
        group: group.into(),
        at_ms,
    }
}

#[tokio::test]
async fn due_tasks_are_claimed_in_time_order_and_leased() {
    for (name, store, _keep) in backends().await {
        store
            .schedule(
                "t",
                &[
                    wake("a", "dev1", 100),
                    wake("b", "dev1", 50),
                    wake("c", "dev2", 500),
                ],
            )
            .await
            .unwrap();
        // Rescheduling moves a task rather than adding a second wake.
        store.schedule("t", &[wake("a", "dev1", 60)]).await.unwrap();
        assert_eq!(store.next_due_ms().await.unwrap(), Some(50), "{name}");
        let due = store.claim_due(100, 1_000, 10).await.unwrap();
        let ids: Vec<&str> = due.iter().map(|d| d.task_id.as_str()).collect();
        assert_eq!(ids, ["b", "a"], "{name}");
        assert_eq!(due[0].group, "dev1");
        assert_eq!(due[0].namespace, "t");
        // Claimed tasks are leased, not gone: they come back when it ends.
        assert!(
            store.claim_due(200, 1_000, 10).await.unwrap().is_empty(),
            "{name}"
        );
        assert_eq!(
            store.claim_due(1_100, 1_000, 10).await.unwrap().len(),
            3,
            "{name}"
        );
        store
            .unschedule("t", &["a".into(), "b".into(), "c".into()])
            .await
            .unwrap();
        assert_eq!(store.next_due_ms().await.unwrap(), None, "{name}");
    }
}

#[tokio::test]
async fn a_failed_advance_brings_forward_only_the_leases_nobody_moved() {
    for (name, store, _keep) in backends().await {
        store
            .schedule(
                "t",
                &[
                    wake("a", "dev", 10),
                    wake("b", "dev", 10),
                    wake("c", "dev", 10),
                ],
            )
            .await
            .unwrap();
        store.schedule("u", &[wake("a", "dev", 10)]).await.unwrap();
        assert_eq!(store.claim_due(100, 1_000, 10).await.unwrap().len(), 4);
        // The advance rescheduled b and ended c before it failed.
        store
            .schedule("t", &[wake("b", "dev", 5_000)])
            .await
            .unwrap();
        store.unschedule("t", &["c".into()]).await.unwrap();
        let ids: Vec<String> = ["a", "b", "c", "never"].map(String::from).into();
        assert_eq!(
            store.retry_leased("t", &ids, 1_100, 300).await.unwrap(),
            1,
            "{name}"
        );
        assert_eq!(store.next_due_ms().await.unwrap(), Some(300), "{name}");
        let due = store.claim_due(300, 1_000, 10).await.unwrap();
        let due: Vec<(&str, &str, &str)> = due
            .iter()
            .map(|d| (d.namespace.as_str(), d.task_id.as_str(), d.group.as_str()))
            .collect();
        assert_eq!(due, [("t", "a", "dev")], "{name}: only a, of its tenant");
        // A lease taken again since is not the one the retry names.
        assert_eq!(
            store.retry_leased("t", &ids, 1_100, 400).await.unwrap(),
            0,
            "{name}"
        );
        assert_eq!(
            store.claim_due(1_100, 1_000, 10).await.unwrap().len(),
            1,
            "{name}: u's a keeps its lease"
        );
    }
}

#[tokio::test]
async fn claim_respects_its_limit() {
    for (name, store, _keep) in backends().await {
        let wakes: Vec<Wake> = (0..10).map(|i| wake(&format!("t{i}"), "g", i)).collect();
        store.schedule("n", &wakes).await.unwrap();
        assert_eq!(
            store.claim_due(100, 10, 4).await.unwrap().len(),
            4,
            "{name}"
        );
    }
}

#[tokio::test]
async fn redb_keeps_data_and_schedule_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = Store::open_file(&path).unwrap();
        store.set("t", "k", b"v".to_vec()).await.unwrap();
        store.schedule("t", &[wake("a", "g", 42)]).await.unwrap();
    }
    let store = Store::open_file(&path).unwrap();
    assert_eq!(store.get("t", "k").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(store.next_due_ms().await.unwrap(), Some(42));
}

#[tokio::test]
async fn a_calls_writes_are_seen_at_once_and_owe_a_flush() {
    for (name, store, _keep) in backends().await {
        let call = store.deferring();
        call.set("t", "k", b"v".to_vec()).await.unwrap();
        assert!(
            call.compare_and_swap("t", "c", None, b"1".to_vec())
                .await
                .unwrap(),
            "{name}"
        );
        // Every reader sees them before any flush.
        assert_eq!(
            store.get("t", "k").await.unwrap(),
            Some(b"v".to_vec()),
            "{name}"
        );
        assert_eq!(
            store.get("t", "c").await.unwrap(),
            Some(b"1".to_vec()),
            "{name}"
        );
        call.flush_owed().await.unwrap();
        assert!(!store.any_unflushed(), "{name}: flushed");
    }
}

#[tokio::test]
async fn redb_tells_which_values_are_not_on_disk_yet() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_file(&dir.path().join("s.redb")).unwrap();
    let (writer, reader) = (store.deferring(), store.deferring());
    writer.set("t", "k", b"v".to_vec()).await.unwrap();
    assert!(writer.owes_flush());
    writer.schedule("t", &[wake("a", "g", 42)]).await.unwrap();
    assert!(store.unflushed("t", "k"));
    assert!(!store.unflushed("t", "other"), "only the keys written");
    assert!(!store.unflushed("u", "k"), "in their namespace");

    // A call that only reads owes a flush only when what it read is
    // not on disk yet.
    reader.get("t", "other").await.unwrap();
    assert!(!reader.owes_flush(), "what it read is on disk");
    reader.get("t", "k").await.unwrap();
    assert!(reader.owes_flush(), "it read the writer's unflushed value");
    // The reader's flush puts the writer's write on disk.
    reader.flush_owed().await.unwrap();
    assert!(!reader.owes_flush());
    assert!(!store.unflushed("t", "k"));
    assert!(!store.any_unflushed(), "the schedule is on disk too");

    // A write acknowledged on disk leaves nothing unflushed.
    writer.flush_owed().await.unwrap();
    writer.set("t", "k", b"w".to_vec()).await.unwrap();
    store.set("t", "j", b"x".to_vec()).await.unwrap();
    assert!(
        !store.unflushed("t", "k"),
        "an fsync'd commit covers every commit before it"
    );
}

#[tokio::test]
async fn redb_puts_unflushed_writes_on_disk_when_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = Store::open_file(&path).unwrap();
        let call = store.deferring();
        call.set("t", "k", b"v".to_vec()).await.unwrap();
        call.schedule("t", &[wake("a", "g", 42)]).await.unwrap();
        assert!(store.any_unflushed());
    }
    let store = Store::open_file(&path).unwrap();
    assert_eq!(store.get("t", "k").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(store.next_due_ms().await.unwrap(), Some(42));
}

/// After a disk error the file is closed and opened again, and what was
/// committed without its fsync may be gone: a call that wrote, or read
/// such a value, before the reopen is told so by its flushes (before a
/// command leaves, before its answer), never that it is on disk. A call
/// from after the reopen flushes as usual, and the data on disk is served.
#[tokio::test]
async fn writes_not_on_disk_when_the_file_is_opened_again_are_reported_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_file(&dir.path().join("s.redb")).unwrap();
    store.set("t", "durable", b"d".to_vec()).await.unwrap();
    let (writer, reader, idle) = (store.deferring(), store.deferring(), store.deferring());
    writer.set("t", "k", b"v".to_vec()).await.unwrap();
    reader.get("t", "k").await.unwrap();
    idle.get("t", "durable").await.unwrap();
    assert!(reader.owes_flush(), "it read a value not on disk");

    store.fail_and_reopen();

    for (name, call) in [("writer", &writer), ("reader", &reader)] {
        let lost = call.flush().await.unwrap_err().to_string();
        assert!(lost.contains("were lost"), "{name}: {lost}");
        let lost = call.flush_owed().await.unwrap_err().to_string();
        assert!(lost.contains("were lost"), "{name}: {lost}");
    }
    idle.flush_owed().await.unwrap();
    assert_eq!(
        store.get("t", "durable").await.unwrap(),
        Some(b"d".to_vec())
    );
    let after = store.deferring();
    after.set("t", "k2", b"w".to_vec()).await.unwrap();
    after.flush().await.unwrap();
    after.flush_owed().await.unwrap();
    assert!(!store.any_unflushed());
}

/// A call whose writes a flush put on disk (before its command left, say)
/// is not told they were lost when the file is opened again later in the
/// call: the reopen kept them. What it writes after the reopen is owed
/// afresh, and a failed flush leaves the call still owing.
#[tokio::test]
async fn writes_a_flush_put_on_disk_are_not_reported_lost_by_a_later_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_file(&dir.path().join("s.redb")).unwrap();
    let call = store.deferring();
    call.set("t", "sent", b"v".to_vec()).await.unwrap();
    call.flush().await.unwrap();
    assert!(!call.owes_flush(), "what it wrote is on disk");
    store.fail_and_reopen();
    call.flush_owed().await.unwrap();
    assert_eq!(store.get("t", "sent").await.unwrap(), Some(b"v".to_vec()));

    call.set("t", "late", b"w".to_vec()).await.unwrap();
    store.fail_and_reopen();
    let lost = call.flush().await.unwrap_err().to_string();
    assert!(lost.contains("were lost"), "{lost}");
    assert!(call.owes_flush(), "a failed flush leaves it owing");
    let lost = call.flush_owed().await.unwrap_err().to_string();
    assert!(lost.contains("were lost"), "{lost}");
}

/// A panic in the writer's commit (a redb bug met on a damaged file) fails
/// the writes of that commit with the reason; the writer lives on, opens
/// the file again, and the next write works. What was durable before is
/// still there, and the failed write is not.
#[tokio::test]
async fn a_panic_in_a_commit_fails_its_writes_and_the_writer_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_file(&dir.path().join("s.redb")).unwrap();
    store.set("t", "before", b"b".to_vec()).await.unwrap();
    store.panic_in_next_commit();
    let failed = store.set("t", "lost", b"x".to_vec()).await.unwrap_err();
    assert!(
        failed.to_string().contains("panicked while committing"),
        "{failed}"
    );
    store.set("t", "after", b"a".to_vec()).await.unwrap();
    assert_eq!(store.get("t", "before").await.unwrap(), Some(b"b".to_vec()));
    assert_eq!(store.get("t", "after").await.unwrap(), Some(b"a".to_vec()));
    assert_eq!(store.get("t", "lost").await.unwrap(), None);
}
