//! Hosts that are open while another host compacts the store (purges the
//! stream up to a snapshot in the store's bucket) carry on: a writer that
//! had not read the newest batches, a writer whose index points into the
//! purged prefix (its batch cache off, so nothing stands in for the
//! stream), a read-only follower. They read, resume, append (conditional
//! appends included), snapshot and compact after it, starting again from
//! the snapshot in the bucket where they need to. A host whose snapshots
//! are in a local directory cannot, and the error says what to do.

use std::time::Duration;

use convlog::model::{ConversationEntry, Event, Role, ToolCall, ToolStatus};
use convlog::store::{AppendOptions, Expect, Retention, Store, StoreOptions};
use convlog::Error;
use convlog_nats::{JetStreamLog, JetStreamOptions};

mod cluster;

use cluster::{Cluster, READY_TIMEOUT};

fn nats_options() -> JetStreamOptions {
    JetStreamOptions::new()
        .replicas(1)
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(2))
        .append_retry_window(READY_TIMEOUT)
}

fn compacting() -> StoreOptions {
    StoreOptions::new().retention(Retention::DeleteCoveredBySnapshot)
}

fn said(conversation: &str, position: u64) -> Event {
    let role = if position.is_multiple_of(2) {
        Role::User
    } else {
        Role::Assistant
    };
    ConversationEntry::new("eval", position, role, Some(format!("turn {position}")))
        .recorded_in(conversation)
}

/// Appends `count` entries to `conversation`, one batch each, from `from`.
fn chat(store: &Store, conversation: &str, from: u64, count: u64) {
    for position in from..from + count {
        store.append(&[said(conversation, position)]).unwrap();
    }
}

/// The texts of a conversation's entries, in order.
fn texts(store: &Store, conversation: &str) -> Vec<String> {
    store
        .conversation(conversation)
        .unwrap_or_else(|error| panic!("reading {conversation}: {error}"))
        .entries()
        .map(|entry| entry.content.clone().unwrap_or_default())
        .collect()
}

fn turns(range: std::ops::Range<u64>) -> Vec<String> {
    range.map(|position| format!("turn {position}")).collect()
}

/// The first LSN the stream holds, asked of a new follower.
fn first_lsn(url: &str) -> u64 {
    let probe = JetStreamLog::open_follower(url, nats_options()).unwrap();
    convlog::log::EventLog::first_lsn(&probe)
}

#[test]
fn hosts_open_while_another_compacts_carry_on() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    let url = cluster.url("compacted");
    let compactor = convlog_nats::open_store_shared(&url, compacting(), nats_options()).unwrap();
    chat(&compactor, "talk", 0, 6);
    compactor
        .append(&[
            ConversationEntry::user("run", 0, "Weather in Oslo?").recorded_in("tools"),
            ConversationEntry::assistant_calling(
                "run",
                1,
                [ToolCall::new("call_1", "weather", r#"{"city":"oslo"}"#)],
            )
            .recorded_in("tools"),
        ])
        .unwrap();
    compactor
        .append(&[Event::tool_status(
            "tools",
            "run",
            "call_1",
            ToolStatus::Running,
        )])
        .unwrap();

    // Open now, each on its own connection.
    let uncached = || nats_options().batch_cache_bytes(0);
    // A writer that will not read again before the compaction.
    let behind = convlog_nats::open_store_shared(&url, compacting(), nats_options()).unwrap();
    // Writers that read up to the compaction, keeping no batches in memory:
    // their indexes point into the prefix the compaction purges.
    let conditional = convlog_nats::open_store_shared(&url, compacting(), uncached()).unwrap();
    let snapshotter = convlog_nats::open_store_shared(&url, compacting(), uncached()).unwrap();
    let follower =
        convlog_nats::open_store_shared_read_only(&url, StoreOptions::new(), uncached()).unwrap();
    // A writer with its snapshots in a local directory of its own.
    let local_dir = tempfile::tempdir().unwrap();
    let local =
        convlog_nats::open_store(&url, local_dir.path(), compacting(), nats_options()).unwrap();
    for host in [&behind, &conditional, &snapshotter, &follower, &local] {
        assert_eq!(texts(host, "talk"), turns(0..6));
    }
    // The snapshotter's own snapshot, older than the one the compaction uses.
    let own = snapshotter.snapshot().unwrap();
    assert_eq!(own.lsn, 10);
    let version = conditional.conversation("talk").unwrap().last_lsn();

    chat(&compactor, "talk", 6, 4);
    for host in [&conditional, &snapshotter, &follower] {
        assert_eq!(
            host.refresh().unwrap(),
            14,
            "caught up before the compaction"
        );
    }
    let taken = compactor.snapshot().unwrap();
    assert_eq!(taken.lsn, 14);
    chat(&compactor, "talk", 10, 2);
    let compacted = compactor.compact().unwrap();
    assert_eq!(compacted.note, None, "{compacted:?}");
    assert_eq!(
        first_lsn(&url),
        14,
        "the stream was purged up to the snapshot"
    );

    // A conditional append on a version read before: a clean conflict
    // naming the conversation's version now, not `Compacted`.
    let late = said("talk", 99);
    match conditional.append_with(
        std::slice::from_ref(&late),
        AppendOptions::new().expect(Expect::conversation("talk", version)),
    ) {
        Err(Error::Conflict {
            conversation_id,
            expected,
            actual,
            ..
        }) => {
            assert_eq!(conversation_id.as_deref(), Some("talk"));
            assert_eq!((expected, actual), (version, 15));
        }
        other => panic!("expected a conflict on talk, got {other:?}"),
    }
    // On the version now, it lands.
    let appended = conditional
        .append_with(
            &[said("talk", 12)],
            AppendOptions::new().expect(Expect::conversation("talk", 15)),
        )
        .unwrap();
    assert_eq!(appended, 16..17);

    // The writer that was behind reads, resumes and appends.
    assert_eq!(texts(&behind, "talk"), turns(0..13));
    let resumed = behind.resume("tools", &Default::default()).unwrap();
    let unfinished: Vec<&str> = resumed
        .unfinished_calls
        .iter()
        .map(|call| call.call.call_id.as_str())
        .collect();
    assert_eq!(unfinished, ["call_1"]);
    behind
        .append(&[
            Event::tool_status("tools", "run", "call_1", ToolStatus::Completed),
            ConversationEntry::tool_result("run", 2, "call_1", "weather", "sunny")
                .recorded_in("tools"),
        ])
        .unwrap();
    chat(&behind, "talk", 13, 1);
    assert!(behind
        .resume("tools", &Default::default())
        .unwrap()
        .unfinished_calls
        .is_empty());

    // The snapshotter takes a snapshot (its folds read past the purge, and
    // it never appended, so its handle's own view of the end is old) ...
    let newer = snapshotter.snapshot().unwrap();
    assert_eq!(newer.lsn, 20);
    // ... another host appends after it, and the snapshotter compacts:
    // only what its snapshot covers is dropped.
    chat(&compactor, "talk", 14, 2);
    let dropped = snapshotter.compact().unwrap();
    assert_eq!(dropped.note, None, "{dropped:?}");
    assert_eq!(first_lsn(&url), 20, "purged up to the snapshot, no further");
    assert_eq!(texts(&snapshotter, "talk"), turns(0..16));

    // The follower sees everything, in order.
    assert_eq!(texts(&follower, "talk"), turns(0..16));
    assert_eq!(follower.conversation("tools").unwrap().len(), 3);

    // The compactor sees the other hosts' appends.
    assert_eq!(texts(&compactor, "talk"), turns(0..16));
    assert!(compactor
        .resume("tools", &Default::default())
        .unwrap()
        .unfinished_calls
        .is_empty());

    // A host with its snapshots in its own directory cannot start again
    // from a snapshot, and says what to do.
    let error = local.conversation("talk").unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, Error::SnapshotRestore { .. }),
        "{error:?}: {message}"
    );
    assert!(message.contains("the log starts at LSN"), "{message}");
    assert!(message.contains("snapshot directory"), "{message}");
    assert!(!message.contains("segment"), "{message}");

    // A new host opens from the bucket and sees the same store.
    let fresh = convlog_nats::open_store_shared(&url, compacting(), nats_options()).unwrap();
    assert_eq!(texts(&fresh, "talk"), turns(0..16));
    assert_eq!(fresh.conversation("tools").unwrap().len(), 3);
}
