//! Snapshots in the store's JetStream object store bucket
//! (`convlog_nats::SnapshotBucket`), on real `nats-server`s: a snapshot
//! one host takes opens the store on another, foreign or edited snapshot
//! objects are skipped by the core's own checks, compaction after a
//! snapshot leaves a store any host opens from the bucket.

use std::path::Path;
use std::time::Duration;

use convlog::model::{ConversationEntry, Event, Role};
use convlog::storage::Storage;
use convlog::store::{Retention, StoreOptions};
use convlog::Error;
use convlog_nats::{JetStreamLog, JetStreamOptions, SnapshotBucket};

mod cluster;

use cluster::{Cluster, READY_TIMEOUT};

fn nats_options(replicas: usize) -> JetStreamOptions {
    JetStreamOptions::new()
        .replicas(replicas)
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(2))
        .append_retry_window(READY_TIMEOUT)
}

fn said(conversation: &str, position: u64, role: Role, text: &str) -> Event {
    ConversationEntry::new("eval", position, role, Some(text.to_string())).recorded_in(conversation)
}

/// Appends `count` entries to `conversation`, one batch each, from `from`.
fn chat(store: &convlog::Store, conversation: &str, from: u64, count: u64) {
    for position in from..from + count {
        let role = if position % 2 == 0 {
            Role::User
        } else {
            Role::Assistant
        };
        store
            .append(&[said(
                conversation,
                position,
                role,
                &format!("turn {position}"),
            )])
            .unwrap();
    }
}

/// The bytes of a snapshot object, read through the bucket's `Storage`.
fn object_bytes(bucket: &SnapshotBucket, path: &Path) -> Vec<u8> {
    let file = bucket.open_read(path).unwrap();
    let mut bytes = vec![0u8; file.size_bytes().unwrap() as usize];
    assert_eq!(file.read_at(&mut bytes, 0).unwrap(), bytes.len());
    bytes
}

/// Uploads `bytes` as the snapshot object `name`, as the store writes one.
fn plant(bucket: &SnapshotBucket, name: &str, bytes: &[u8]) {
    let snapshots = bucket.dir().join("snapshots");
    let temporary = snapshots.join(format!("{name}.tmp"));
    let file = bucket.create(&temporary).unwrap();
    file.write_all_at(bytes, 0).unwrap();
    bucket.rename(&temporary, &snapshots.join(name)).unwrap();
}

/// A three-node cluster, three replicas: host A snapshots, host B (another
/// connection to another node, no local directory) opens from that
/// snapshot and replays only what follows; after compaction a third host
/// opens the store from the bucket alone, which a host with an empty local
/// snapshot directory cannot.
#[test]
fn a_snapshot_one_host_takes_opens_the_store_on_another() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let options = || StoreOptions::new().retention(Retention::DeleteCoveredBySnapshot);
    let host_a =
        convlog_nats::open_store_shared(&cluster.node_url(0, "shared"), options(), nats_options(3))
            .unwrap();
    chat(&host_a, "talk", 0, 10);
    let taken = host_a.snapshot().unwrap();
    assert_eq!(taken.lsn, 11);
    assert_eq!(taken.conversations, 1);
    assert!(
        taken
            .path
            .to_string_lossy()
            .ends_with("/shared/snapshots/00000000000000000011.snap"),
        "{}",
        taken.path.display()
    );
    chat(&host_a, "talk", 10, 2);

    let host_b = convlog_nats::open_store_shared_read_only(
        &cluster.node_url(1, "shared"),
        StoreOptions::new(),
        nats_options(3),
    )
    .unwrap();
    let report = host_b.open_report();
    assert_eq!(report.snapshot.as_ref().map(|(_, lsn)| *lsn), Some(11));
    assert!(report.skipped_snapshots.is_empty(), "{report:?}");
    assert_eq!(
        report.replayed_events, 2,
        "replay starts after the snapshot"
    );
    assert_eq!(host_b.conversation("talk").unwrap().len(), 12);
    assert_eq!(
        host_b
            .resume("talk", &Default::default())
            .unwrap()
            .entries
            .len(),
        12
    );

    // Compaction purges the stream up to the snapshot.
    let compacted = host_a.compact().unwrap();
    assert_eq!(compacted.note, None, "{compacted:?}");
    drop(host_a);
    drop(host_b);
    let probe =
        JetStreamLog::open_follower(&cluster.node_url(2, "shared"), nats_options(3)).unwrap();
    assert!(
        convlog::log::EventLog::first_lsn(&probe) > 1,
        "the stream was purged"
    );

    // A host with an empty local snapshot directory cannot open it ...
    let empty = tempfile::tempdir().unwrap();
    let refused = convlog_nats::open_store(
        &cluster.node_url(2, "shared"),
        empty.path(),
        StoreOptions::new(),
        nats_options(3),
    );
    assert!(refused.is_err(), "the log no longer starts at LSN 1");
    // ... a host on the bucket does, and writes on.
    let host_c =
        convlog_nats::open_store_shared(&cluster.node_url(2, "shared"), options(), nats_options(3))
            .unwrap();
    assert_eq!(
        host_c.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(11)
    );
    assert_eq!(host_c.conversation("talk").unwrap().len(), 12);
    chat(&host_c, "talk", 12, 1);
    assert_eq!(host_c.conversation("talk").unwrap().len(), 13);
}

/// A snapshot object of another store, or one edited in the bucket, is
/// skipped on open by the core's checks, exactly as a local snapshot
/// file would be, and the store opens correctly without it. A follower of
/// a store without a bucket opens with no snapshot; paths outside the
/// snapshot directory (the key table of an encrypted store) are refused.
#[test]
fn foreign_and_edited_snapshot_objects_are_skipped() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    let mine = cluster.url("mine");
    let theirs = cluster.url("theirs");
    let store =
        convlog_nats::open_store_shared(&mine, StoreOptions::new(), nats_options(1)).unwrap();
    chat(&store, "a", 0, 4);
    let own = store.snapshot().unwrap();
    assert_eq!(own.lsn, 5);
    let other =
        convlog_nats::open_store_shared(&theirs, StoreOptions::new(), nats_options(1)).unwrap();
    chat(&other, "b", 0, 8);
    let foreign = other.snapshot().unwrap();
    assert_eq!(foreign.lsn, 9);
    chat(&store, "a", 4, 6);
    drop(store);

    let log = JetStreamLog::open(&mine, nats_options(1)).unwrap();
    let bucket = SnapshotBucket::open(&log).unwrap();
    assert_eq!(bucket.bucket_name(), "convlog-mine");
    let their_log = JetStreamLog::open_follower(&theirs, nats_options(1)).unwrap();
    let their_bucket = SnapshotBucket::open(&their_log).unwrap();
    // Their snapshot at LSN 9, planted in my bucket: newer than mine.
    let name = "00000000000000000009.snap";
    plant(&bucket, name, &object_bytes(&their_bucket, &foreign.path));
    let mut names = bucket.list_dir(&bucket.dir().join("snapshots")).unwrap();
    names.sort();
    assert_eq!(names, ["00000000000000000005.snap", name]);

    let reopened =
        convlog_nats::open_store_shared_read_only(&mine, StoreOptions::new(), nats_options(1))
            .unwrap();
    let report = reopened.open_report().clone();
    assert_eq!(
        report.snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(5),
        "{report:?}"
    );
    assert_eq!(report.skipped_snapshots.len(), 1, "{report:?}");
    assert!(report.skipped_snapshots[0].0.ends_with(name));
    assert!(
        report.skipped_snapshots[0]
            .1
            .contains("not this store's snapshot"),
        "{report:?}"
    );
    assert_eq!(reopened.conversation("a").unwrap().len(), 10);
    assert!(matches!(
        reopened.conversation("b"),
        Err(Error::ConversationNotFound { .. })
    ));
    drop(reopened);

    // My own snapshot, edited in the bucket (a byte of its header flipped):
    // damaged, skipped, and the store replays from the start.
    let own_path = bucket
        .dir()
        .join("snapshots")
        .join("00000000000000000005.snap");
    let mut edited = object_bytes(&bucket, &own_path);
    edited[20] ^= 0xff;
    bucket
        .remove_file(&bucket.dir().join("snapshots").join(name))
        .unwrap();
    plant(&bucket, "00000000000000000005.snap", &edited);
    let reopened =
        convlog_nats::open_store_shared_read_only(&mine, StoreOptions::new(), nats_options(1))
            .unwrap();
    let report = reopened.open_report();
    assert_eq!(report.snapshot, None, "{report:?}");
    assert_eq!(report.skipped_snapshots.len(), 1, "{report:?}");
    assert!(
        report.skipped_snapshots[0].1.contains("checksum"),
        "{report:?}"
    );
    assert_eq!(report.replayed_events, 10);
    assert_eq!(reopened.conversation("a").unwrap().len(), 10);

    // Outside the snapshot directory: refused, saying why.
    let outside = bucket.create(&bucket.dir().join("keys")).unwrap_err();
    assert_eq!(outside.kind(), std::io::ErrorKind::Unsupported);
    assert!(outside.to_string().contains("snapshot bucket"), "{outside}");
    assert!(!bucket.exists(&bucket.dir().join("keys")));

    // A follower of a store whose writer keeps snapshots locally: no
    // bucket, no snapshot, nothing created.
    let local = cluster.url("local");
    let dir = tempfile::tempdir().unwrap();
    let writer =
        convlog_nats::open_store(&local, dir.path(), StoreOptions::new(), nats_options(1)).unwrap();
    chat(&writer, "c", 0, 2);
    let follower =
        convlog_nats::open_store_shared_read_only(&local, StoreOptions::new(), nats_options(1))
            .unwrap();
    assert_eq!(follower.open_report().snapshot, None);
    assert_eq!(follower.conversation("c").unwrap().len(), 2);
    let follower_log = JetStreamLog::open_follower(&local, nats_options(1)).unwrap();
    let no_bucket = SnapshotBucket::open(&follower_log).unwrap();
    assert!(!no_bucket.exists(&no_bucket.dir().join("snapshots")));
    // A read-only store takes no snapshot.
    assert!(matches!(follower.snapshot(), Err(Error::ReadOnly { .. })));
}

/// Whether the bucket `bucket`'s stream answers direct gets (any replica
/// may answer them, also one that has not stored the newest object yet).
fn bucket_allows_direct_gets(cluster: &Cluster, bucket: &str) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let address = format!("127.0.0.1:{}", cluster.nodes[0].port);
    let stream = format!("OBJ_{bucket}");
    runtime.block_on(async move {
        let client = async_nats::connect(address).await.unwrap();
        let jetstream = async_nats::jetstream::new(client);
        let stream = jetstream.get_stream(&stream).await.unwrap();
        stream.cached_info().config.allow_direct
    })
}

/// Snapshot objects are read from the bucket stream's leader, never by a
/// direct get a lagging replica may answer "not found" (a snapshot just
/// written, read back by its writer or by a host opening from it): a
/// writer turns direct gets off, also on a bucket made with them on.
#[test]
fn snapshot_objects_are_read_from_the_leader() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    // A bucket as the object store API makes one: direct gets on.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let address = format!("127.0.0.1:{}", cluster.nodes[0].port);
    runtime.block_on(async move {
        let client = async_nats::connect(address).await.unwrap();
        let jetstream = async_nats::jetstream::new(client);
        jetstream
            .create_object_store(async_nats::jetstream::object_store::Config {
                bucket: "convlog-made".to_string(),
                ..Default::default()
            })
            .await
            .unwrap();
    });
    assert!(bucket_allows_direct_gets(&cluster, "convlog-made"));
    for store in ["made", "new"] {
        let writer = convlog_nats::open_store_shared(
            &cluster.url(store),
            StoreOptions::new(),
            nats_options(1),
        )
        .unwrap();
        assert!(
            !bucket_allows_direct_gets(&cluster, &format!("convlog-{store}")),
            "{store}"
        );
        chat(&writer, "a", 0, 3);
        assert_eq!(writer.snapshot().unwrap().lsn, 4);
        let reader = convlog_nats::open_store_shared_read_only(
            &cluster.url(store),
            StoreOptions::new(),
            nats_options(1),
        )
        .unwrap();
        assert_eq!(
            reader.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
            Some(4)
        );
    }
}
