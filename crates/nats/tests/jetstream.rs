//! The store on a JetStream log, on real `nats-server`s on loopback: the
//! store's shared behavioural suite (the same bodies the segment log and
//! the memory log run, tests/boundary_suite), the `EventLog` contract,
//! faults (the stream leader SIGKILLed during concurrent appends, two
//! writers racing) and clear errors for bad configuration and input.
//!
//! Each test starts its own cluster and stops it when it ends, also on a
//! panic. Without `nats-server` installed the tests skip, unless
//! `CONVLOG_REQUIRE_NATS=1`.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use convlog::log::{Durability, EventLog, Lsn};
use convlog::model::Role;
use convlog::store::{Store, StoreBuilder, StoreOptions};
use convlog::Error;
use convlog_nats::{JetStreamLog, JetStreamOptions};
use tempfile::TempDir;

mod cluster;
#[path = "../../../tests/boundary_suite/mod.rs"]
mod suite;

use cluster::{wait_for, Cluster, READY_TIMEOUT};
use suite::{said, Backing, Counter};

/// Short timeouts, so a failover is retried quickly.
fn nats_options(replicas: usize) -> JetStreamOptions {
    JetStreamOptions::new()
        .replicas(replicas)
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(2))
        .append_retry_window(READY_TIMEOUT)
}

/// One store (one stream) on the cluster, for one suite body.
struct Jet {
    url: String,
    dir: TempDir,
    /// Another host's snapshot directory.
    second_dir: TempDir,
    replicas: usize,
}

impl Jet {
    fn new(cluster: &Cluster, store: &str, replicas: usize) -> Jet {
        Jet {
            url: cluster.url(store),
            dir: tempfile::tempdir().unwrap(),
            second_dir: tempfile::tempdir().unwrap(),
            replicas,
        }
    }

    fn log(&self) -> JetStreamLog {
        JetStreamLog::open(&self.url, nats_options(self.replicas)).unwrap()
    }
}

impl Backing for Jet {
    fn name(&self) -> &'static str {
        "jetstream log"
    }
    fn open(&self, options: StoreOptions) -> Store {
        StoreBuilder::new(self.dir.path())
            .options(options)
            .reducer(Counter)
            .open_on(self.log())
            .unwrap()
    }
    fn open_follower(&self) -> Store {
        StoreBuilder::new(self.dir.path())
            .reducer(Counter)
            .open_on(JetStreamLog::open_follower(&self.url, nats_options(self.replicas)).unwrap())
            .unwrap()
    }
    fn follower_log(&self) -> Box<dyn EventLog> {
        Box::new(JetStreamLog::open_follower(&self.url, nats_options(self.replicas)).unwrap())
    }
    fn open_another_writer(&self) -> Option<Store> {
        Some(
            StoreBuilder::new(self.second_dir.path())
                .reducer(Counter)
                .open_on(self.log())
                .unwrap(),
        )
    }
}

/// A body of the shared suite.
type SuiteBody = fn(&dyn Backing);

/// The shared suite, on a three-node cluster with three replicas: the
/// same bodies tests/log_boundary.rs runs on the segment and memory logs.
#[test]
fn the_store_behaves_on_a_replicated_jetstream_log_as_on_the_local_logs() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let bodies: [(&str, SuiteBody); 7] = [
        (
            "reopen",
            suite::appends_reads_resume_and_reopen_behave_the_same_on_both_logs,
        ),
        (
            "reducers",
            suite::host_reducers_are_folded_observed_and_restored_from_snapshots_on_both_logs,
        ),
        (
            "conditional",
            suite::conditional_appends_conflict_on_both_logs,
        ),
        (
            "compaction",
            suite::compaction_drops_the_prefix_and_reads_of_it_are_compacted_on_both_logs,
        ),
        (
            "follower",
            suite::a_read_only_store_follows_its_writer_on_both_logs,
        ),
        (
            "logview",
            suite::the_log_view_and_the_audit_timeline_read_every_log,
        ),
        ("writers", suite::many_writers_share_one_log),
    ];
    for (store, body) in bodies {
        body(&Jet::new(&cluster, store, 3));
    }
    let contract = Jet::new(&cluster, "contract", 3);
    let log = contract.log();
    suite::check_contract("jetstream log", &log, &log.follower());
    // A follower opened on its own connection sees the same log.
    let follower = JetStreamLog::open_follower(&contract.url, nats_options(3)).unwrap();
    assert_eq!(follower.store_id(), log.store_id());
    assert_eq!(follower.read_from(1).count(), 4);
    assert_eq!(log.replicas(), 3);
}

/// A store opened by URL, read-only beside its writer, and reopened: the
/// store identity is kept with the stream.
#[test]
fn a_store_opens_by_url_and_keeps_its_identity_with_the_stream() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    let url = cluster.url("byurl");
    let dir = tempfile::tempdir().unwrap();
    let store =
        convlog_nats::open_store(&url, dir.path(), StoreOptions::new(), nats_options(1)).unwrap();
    store
        .append(&[
            said("a", 0, Role::User, "hello"),
            said("a", 1, Role::Assistant, "hi"),
        ])
        .unwrap();
    let reader =
        convlog_nats::open_store_read_only(&url, dir.path(), StoreOptions::new(), nats_options(1))
            .unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.conversation("a").unwrap().len(), 2);
    let resumed = reader.resume("a", &Default::default()).unwrap();
    assert_eq!(resumed.entries.len(), 2);
    drop(store);
    let id = JetStreamLog::open_follower(&url, nats_options(1))
        .unwrap()
        .store_id();
    let again = JetStreamLog::open(&url, nats_options(1).expect_store_id(id)).unwrap();
    assert_eq!(again.store_id(), id);
    assert_eq!(again.next_lsn(), 3);
}

/// The writer serves recent batches from memory; a purge drops them there
/// too: reading a dropped locator on the writer is `Compacted`, as on a
/// fresh handle.
#[test]
fn the_writer_answers_compacted_for_batches_it_dropped() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    let url = cluster.url("dropped");
    let log = JetStreamLog::open(&url, nats_options(1)).unwrap();
    let locators: Vec<_> = (0..4u8)
        .map(|batch| {
            log.append(&[vec![batch], vec![batch]], Durability::Group)
                .unwrap()
                .1
        })
        .collect();
    assert_eq!(log.read_batch(locators[0]).unwrap()[0].lsn, 1);
    let before = log.binding_at(5).unwrap();
    assert_eq!(log.drop_before(6).unwrap().first_lsn, 5);
    assert_eq!(log.binding_at(5).unwrap(), before);
    for handle in [
        &log,
        &JetStreamLog::open_follower(&url, nats_options(1)).unwrap(),
    ] {
        assert!(
            matches!(
                handle.read_batch(locators[0]),
                Err(Error::Compacted {
                    next_present: 5,
                    ..
                })
            ),
            "{handle:?}"
        );
        assert_eq!(handle.read_batch(locators[2]).unwrap()[0].lsn, 5);
    }
}

/// The log is synchronous but may be used from inside a host's async
/// runtime (a current-thread one, the strictest): it runs its requests on
/// its own runtime, never `block_on` inside the host's, and dropping it
/// there does not panic.
#[test]
fn the_log_works_from_inside_a_hosts_async_runtime() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    let url = cluster.url("inside");
    let host = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let lsns = host.block_on(async {
        let log = JetStreamLog::open(&url, nats_options(1)).unwrap();
        let (lsns, locator) = log
            .append(&[b"from async".to_vec()], Durability::Group)
            .unwrap();
        assert_eq!(log.read_batch(locator).unwrap()[0].payload, b"from async");
        drop(log);
        lsns
    });
    assert_eq!(lsns, 1..2);
}

/// Bad configuration and input get errors that say what and where.
#[test]
fn bad_configuration_and_input_get_clear_errors() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    // An unreachable cluster: a bounded connect timeout.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let error = JetStreamLog::open(
        &format!("nats://127.0.0.1:{port}/s"),
        nats_options(1).connect_timeout(Duration::from_secs(1)),
    )
    .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, Error::Io { .. })
            && text.contains("connect to")
            && text.contains(&port.to_string()),
        "{text}"
    );

    // Streams of the right name that cannot hold a store.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let address = format!("127.0.0.1:{}", cluster.nodes[0].port);
    runtime.block_on(async {
        let client = async_nats::connect(address.as_str()).await.unwrap();
        let context = async_nats::jetstream::new(client);
        context
            .create_stream(async_nats::jetstream::stream::Config {
                name: "convlog-aged".into(),
                subjects: vec!["convlog.aged.>".into()],
                max_age: Duration::from_secs(3600),
                description: Some(
                    "convlog store id=00112233445566778899aabbccddeeff format=1".into(),
                ),
                ..Default::default()
            })
            .await
            .unwrap();
        context
            .create_stream(async_nats::jetstream::stream::Config {
                name: "convlog-orders".into(),
                subjects: vec!["convlog.orders.>".into()],
                description: Some("the orders of the shop".into()),
                ..Default::default()
            })
            .await
            .unwrap();
    });
    let text = JetStreamLog::open(&cluster.url("aged"), nats_options(1))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("convlog-aged") && text.contains("max_age"),
        "{text}"
    );
    let text = JetStreamLog::open(&cluster.url("orders"), nats_options(1))
        .unwrap_err()
        .to_string();
    assert!(text.contains("is not a convlog store"), "{text}");

    // A follower of a store that does not exist.
    let text = JetStreamLog::open_follower(&cluster.url("missing"), nats_options(1))
        .unwrap_err()
        .to_string();
    assert!(text.contains("no stream convlog-missing"), "{text}");

    // A store identity that does not match.
    let log = JetStreamLog::open(&cluster.url("mine"), nats_options(1)).unwrap();
    let text = JetStreamLog::open(
        &cluster.url("mine"),
        nats_options(1).expect_store_id([7; 16]),
    )
    .unwrap_err()
    .to_string();
    assert!(text.contains("not the expected 07070707"), "{text}");

    // A batch over the server's max payload: refused, nothing stored, and
    // the writer goes on.
    let big = vec![0u8; log.max_payload()];
    match log.append(&[big], Durability::Group) {
        Err(Error::LimitExceeded { actual, limit, .. }) => {
            assert!(actual > limit, "{actual} > {limit}")
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    assert_eq!(log.next_lsn(), 1);
    assert_eq!(
        log.append(&[b"fits".to_vec()], Durability::Group)
            .unwrap()
            .0,
        1..2
    );

    // Invalid options.
    assert!(matches!(
        JetStreamLog::open(&cluster.url("x"), JetStreamOptions::new().replicas(0)),
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        JetStreamLog::open("nats://127.0.0.1:1/bad.name", JetStreamOptions::new()),
        Err(Error::InvalidOption { .. })
    ));
}

/// What one racing writer got acknowledged, and how it stopped.
/// Two writers on one stream, appending at once: each append lands right
/// after the last message its handle knows of (the stream's
/// expected-last-sequence check), so one that loses the race stores
/// nothing and is `Conflict`; the handle has learnt the new end and its
/// retry lands after it. The stream holds exactly the acknowledged
/// appends, gap-free, and neither handle is poisoned.
#[test]
fn two_writers_racing_both_append_and_never_interleave() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    let url = cluster.url("race");
    let writers: Vec<JetStreamLog> = (0..2)
        .map(|_| JetStreamLog::open(&url, nats_options(1)).unwrap())
        .collect();
    assert!(writers.iter().all(|log| log.many_writers()));
    let barrier = Barrier::new(2);
    let outcomes: Vec<Vec<(Lsn, Vec<u8>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = writers
            .iter()
            .enumerate()
            .map(|(writer_index, log)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut acked = Vec::new();
                    for i in 0..50 {
                        let payload = format!("w{writer_index}-{i}").into_bytes();
                        loop {
                            match log.append(std::slice::from_ref(&payload), Durability::Group) {
                                Ok((lsns, _)) => {
                                    acked.push((lsns.start, payload));
                                    break;
                                }
                                Err(Error::Conflict {
                                    conversation_id: None,
                                    expected,
                                    actual,
                                    ..
                                }) => assert!(actual > expected, "{expected} -> {actual}"),
                                Err(error) => panic!("writer {writer_index}: {error}"),
                            }
                        }
                    }
                    acked
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    assert!(writers.iter().all(|log| !log.is_poisoned()));
    // The stream holds exactly the acknowledged appends, gap-free.
    let acked: BTreeMap<Lsn, Vec<u8>> = outcomes.into_iter().flatten().collect();
    assert_eq!(acked.len(), 100);
    let follower = JetStreamLog::open_follower(&url, nats_options(1)).unwrap();
    let stored: BTreeMap<Lsn, Vec<u8>> = follower
        .read_from(1)
        .map(|record| record.map(|record| (record.lsn, record.payload)))
        .collect::<convlog::Result<_>>()
        .unwrap();
    assert_eq!(stored, acked);
    assert_eq!(
        stored.keys().copied().collect::<Vec<_>>(),
        (1..=stored.len() as u64).collect::<Vec<_>>()
    );
}

/// Regression for the single-writer design: a second store opened on the
/// stream was poisoned at its first append after the other's
/// (`Error::Poisoned`, "another writer"). Now both append, and each serves
/// the other's events.
#[test]
fn two_stores_on_one_stream_both_append_and_see_each_other() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    let url = cluster.url("stores");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let open = |dir: &TempDir| {
        convlog_nats::open_store(&url, dir.path(), StoreOptions::new(), nats_options(1)).unwrap()
    };
    let (first, second) = (open(&dirs[0]), open(&dirs[1]));
    first.append(&[said("a", 0, Role::User, "first")]).unwrap();
    assert_eq!(
        second
            .append(&[said("a", 1, Role::User, "second")])
            .unwrap(),
        2..3
    );
    for store in [&first, &second] {
        let texts: Vec<String> = store
            .conversation("a")
            .unwrap()
            .entries()
            .filter_map(|entry| entry.content.clone())
            .collect();
        assert_eq!(texts, ["first", "second"]);
    }
}

/// Two hosts (two stores, two connections) race many times on one
/// conversation, each appending a tool call and then its result, both
/// conditionally on the version it read: in every round exactly one wins
/// and the other gets `Conflict` naming the conversation; the conversation
/// holds every winner's call immediately followed by its result, and
/// nothing is unfinished.
#[test]
fn hosts_racing_on_one_conversation_get_one_winner_and_keep_tool_calls_paired() {
    use convlog::model::{ConversationEntry, ToolCall};
    use convlog::store::{AppendOptions, Expect};

    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let url = cluster.url("pairs");
    const ROUNDS: u64 = 25;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let stores: Vec<Store> = dirs
        .iter()
        .map(|dir| {
            convlog_nats::open_store(&url, dir.path(), StoreOptions::new(), nats_options(3))
                .unwrap()
        })
        .collect();
    stores[0]
        .append(&[ConversationEntry::user("eval-1", 0, "go").recorded_in("c")])
        .unwrap();
    let barrier = Barrier::new(2);
    let wins: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(host, store)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut won = Vec::new();
                    for round in 0..ROUNDS {
                        // Both read the same version before either appends.
                        let read = store.conversation("c").unwrap().last_lsn();
                        barrier.wait();
                        let call_id = format!("call-{round}-{host}");
                        let call = ConversationEntry::assistant_calling(
                            "eval-1",
                            1 + 2 * round,
                            [ToolCall::new(&call_id, "weather", "{}")],
                        )
                        .recorded_in("c");
                        let expect = AppendOptions::new().expect(Expect::conversation("c", read));
                        match store.append_with(&[call], expect) {
                            Ok(lsns) => {
                                let result = ConversationEntry::tool_result(
                                    "eval-1",
                                    2 + 2 * round,
                                    &call_id,
                                    "weather",
                                    "18C",
                                )
                                .recorded_in("c");
                                let after = AppendOptions::new()
                                    .expect(Expect::conversation("c", lsns.end - 1));
                                store.append_with(&[result], after).unwrap();
                                won.push(round);
                            }
                            Err(Error::Conflict {
                                conversation_id: Some(id),
                                expected,
                                actual,
                                ..
                            }) => {
                                assert_eq!(id, "c");
                                assert!(actual > expected);
                            }
                            Err(error) => panic!("host {host}, round {round}: {error}"),
                        }
                        // The winner's result is in before the next read.
                        barrier.wait();
                    }
                    won
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    let mut rounds: Vec<u64> = wins.iter().flatten().copied().collect();
    rounds.sort_unstable();
    assert_eq!(
        rounds,
        (0..ROUNDS).collect::<Vec<_>>(),
        "exactly one host wins each round: {wins:?}"
    );
    for store in &stores {
        let slice = store.conversation("c").unwrap();
        let entries: Vec<_> = slice.entries().collect();
        assert_eq!(entries.len() as u64, 1 + 2 * ROUNDS);
        for pair in entries[1..].chunks(2) {
            let call_id = &pair[0].tool_calls[0].call_id;
            assert_eq!(pair[1].tool_call_id.as_ref(), Some(call_id), "{pair:?}");
        }
        let state = store.resume("c", &Default::default()).unwrap();
        assert!(state.unfinished_calls.is_empty());
        assert_eq!(state.finished_calls.len() as u64, ROUNDS);
    }
}

/// SIGKILL the stream's leader while four threads append batches: after
/// the failover every acknowledged batch is there, whole, at its LSNs,
/// nothing twice; the killed node, restarted, catches up.
#[test]
fn a_killed_stream_leader_loses_no_acknowledged_append() {
    let Some(mut cluster) = Cluster::start(3) else {
        return;
    };
    let url = cluster.url("failover");
    let log = Arc::new(JetStreamLog::open(&url, nats_options(3)).unwrap());
    const THREADS: usize = 4;
    const APPENDS: usize = 60;
    let acked_count = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|thread| {
            let log = Arc::clone(&log);
            let acked_count = Arc::clone(&acked_count);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..APPENDS {
                    let batch: Vec<Vec<u8>> = (0..1 + i % 3)
                        .map(|j| format!("t{thread}-{i}-{j}").into_bytes())
                        .collect();
                    match log.append(&batch, Durability::Group) {
                        Ok((lsns, _)) => {
                            acked.push((lsns, batch));
                            acked_count.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(error) => return Err(Box::new((acked, error))),
                    }
                }
                Ok(acked)
            })
        })
        .collect();
    // Kill the leader once appends are flowing.
    wait_for("the first appends", READY_TIMEOUT, || {
        acked_count.load(Ordering::SeqCst) >= 20
    });
    let leader = cluster
        .stream_leader(0, "convlog-failover")
        .expect("the stream has a leader");
    let killed = cluster.index_of(&leader);
    let before = acked_count.load(Ordering::SeqCst);
    cluster.kill(killed);
    eprintln!("killed the stream leader {leader} after {before} acknowledged appends");
    let survivor = (killed + 1) % 3;
    let mut acked = Vec::new();
    for handle in handles {
        match handle.join().unwrap() {
            Ok(batches) => acked.extend(batches),
            Err(failed) => panic!(
                "an append failed across the failover after {} acknowledged: {}\n{}",
                failed.0.len(),
                failed.1,
                cluster.log_of(survivor)
            ),
        }
    }
    assert_eq!(acked.len(), THREADS * APPENDS);
    assert!(
        before < (THREADS * APPENDS) as u64,
        "the leader died while appends were under way"
    );
    assert!(
        cluster
            .stream_leader(survivor, "convlog-failover")
            .is_some_and(|now| now != leader),
        "the stream has a new leader"
    );
    // Read back through a new handle: gap-free, every batch whole at its
    // LSNs, no payload twice.
    let reader = JetStreamLog::open_follower(&url, nats_options(3)).unwrap();
    let records: Vec<_> = reader.read_from(1).collect::<convlog::Result<_>>().unwrap();
    let lsns: Vec<Lsn> = records.iter().map(|record| record.lsn).collect();
    assert_eq!(lsns, (1..=lsns.len() as u64).collect::<Vec<_>>());
    let unique: HashSet<&[u8]> = records
        .iter()
        .map(|record| record.payload.as_slice())
        .collect();
    assert_eq!(unique.len(), records.len(), "no payload is stored twice");
    let by_lsn: BTreeMap<Lsn, &convlog::log::Record> =
        records.iter().map(|record| (record.lsn, record)).collect();
    let acked_events: usize = acked.iter().map(|(_, batch)| batch.len()).sum();
    assert_eq!(
        records.len(),
        acked_events,
        "only acknowledged batches are stored"
    );
    for (lsns, batch) in &acked {
        let held: Vec<&[u8]> = lsns
            .clone()
            .map(|lsn| by_lsn[&lsn].payload.as_slice())
            .collect();
        let sent: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        assert_eq!(held, sent, "the batch at {lsns:?} is whole");
        let positions: HashSet<_> = lsns.clone().map(|lsn| by_lsn[&lsn].position).collect();
        assert_eq!(positions.len(), 1, "one batch is one message");
    }
    // The killed node comes back and catches up with the stream.
    cluster.restart(killed);
    wait_until_current(
        &cluster,
        survivor,
        killed,
        "convlog-failover",
        log.last_sequence().unwrap(),
    );
    // And the writer goes on.
    let (lsns, _) = log.append(&[b"after".to_vec()], Durability::Group).unwrap();
    assert_eq!(lsns.start, acked_events as u64 + 1);
}

/// Waits (on states, bounded by `READY_TIMEOUT`) until node `killed`,
/// restarted, holds `stream` up to `last` and is current, asking node
/// `via`.
fn wait_until_current(cluster: &Cluster, via: usize, killed: usize, stream: &str, last: u64) {
    let killed_name = cluster.nodes[killed].name.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let address = format!("127.0.0.1:{}", cluster.nodes[via].port);
    wait_for(&format!("{killed_name} catching up"), READY_TIMEOUT, || {
        runtime.block_on(async {
            let Ok(client) = async_nats::connect(address.as_str()).await else {
                return false;
            };
            let context = async_nats::jetstream::new(client);
            let Ok(stream) = context.get_stream(stream).await else {
                return false;
            };
            let Ok(info) = stream.get_info().await else {
                return false;
            };
            info.state.last_sequence == last
                && info.cluster.is_some_and(|cluster| {
                    cluster.replicas.iter().any(|peer| {
                        peer.name == killed_name && peer.current && peer.lag.unwrap_or(0) == 0
                    })
                })
        })
    });
}

/// The store URL a host process of
/// `host_processes_appending_through_a_leader_failover_lose_and_duplicate_nothing`
/// appends to, and its number.
const WRITER_URL_VARIABLE: &str = "CONVLOG_NATS_TEST_WRITER_URL";
const WRITER_INDEX_VARIABLE: &str = "CONVLOG_NATS_TEST_WRITER_INDEX";
/// Batches each host process appends.
const HOST_APPENDS: u64 = 40;

/// Batch `i` of host `host`: 1 to 3 events of its own conversation.
fn host_batch(host: u64, i: u64) -> Vec<convlog::model::Event> {
    (0..1 + i % 3)
        .map(|j| {
            said(
                &format!("h{host}"),
                i * 3 + j,
                Role::User,
                &format!("h{host}-{i}-{j}"),
            )
        })
        .collect()
}

/// Several host processes append to one store (each through its own
/// `Store`, racing the others for the stream's end) while the stream
/// leader is SIGKILLed: every append a host saw acknowledged is there
/// after the failover, whole (one message) at the LSNs it was given,
/// nothing is stored twice or unacknowledged, the LSNs are gap-free, and
/// the killed node, restarted, catches up.
#[test]
fn host_processes_appending_through_a_leader_failover_lose_and_duplicate_nothing() {
    use std::io::{BufRead, BufReader, Write};

    if let Ok(url) = std::env::var(WRITER_URL_VARIABLE) {
        // A host: append, report each acknowledgement, then end.
        let host: u64 = std::env::var(WRITER_INDEX_VARIABLE)
            .unwrap()
            .parse()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store =
            convlog_nats::open_store(&url, dir.path(), StoreOptions::new(), nats_options(3))
                .unwrap();
        println!("OPEN");
        std::io::stdout().flush().unwrap();
        for i in 0..HOST_APPENDS {
            let lsns = store.append(&host_batch(host, i)).unwrap();
            println!("ACK {host} {i} {} {}", lsns.start, lsns.end);
            std::io::stdout().flush().unwrap();
        }
        // Its conversation, read through the index it shares with the
        // other hosts' batches.
        let events: u64 = (0..HOST_APPENDS).map(|i| 1 + i % 3).sum();
        let own = store.conversation(&format!("h{host}")).unwrap();
        assert_eq!(own.len() as u64, events);
        println!("DONE");
        return;
    }
    let Some(mut cluster) = Cluster::start(3) else {
        return;
    };
    const HOSTS: u64 = 3;
    let url = cluster.url("hostfail");
    // The stream exists before the hosts race to open it.
    drop(JetStreamLog::open(&url, nats_options(3)).unwrap());
    let (lines, received) = std::sync::mpsc::channel::<String>();
    let mut hosts: Vec<std::process::Child> = (0..HOSTS)
        .map(|host| {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "host_processes_appending_through_a_leader_failover_lose_and_duplicate_nothing",
                    "--nocapture",
                ])
                .env(WRITER_URL_VARIABLE, &url)
                .env(WRITER_INDEX_VARIABLE, host.to_string())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = BufReader::new(child.stdout.take().unwrap());
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in stdout.lines().map_while(Result::ok) {
                    if lines.send(line).is_err() {
                        break;
                    }
                }
            });
            child
        })
        .collect();
    drop(lines);
    // (host, batch) -> LSNs, as the hosts report them.
    let mut acked: BTreeMap<(u64, u64), (Lsn, Lsn)> = BTreeMap::new();
    let mut done = 0;
    let mut killed = None;
    let mut take = |line: &str, acked: &mut BTreeMap<(u64, u64), (Lsn, Lsn)>| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["ACK", host, i, start, end] => {
                let number = |word: &str| word.parse::<u64>().unwrap();
                let fresh = acked
                    .insert((number(host), number(i)), (number(start), number(end)))
                    .is_none();
                assert!(fresh, "{line}: acknowledged twice");
            }
            ["DONE"] => done += 1,
            _ => {}
        }
    };
    loop {
        let line = match received.recv_timeout(READY_TIMEOUT * 2) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(error) => panic!("no word from the hosts: {error}"),
        };
        take(&line, &mut acked);
        // Kill the leader once every host has appended a few batches.
        if killed.is_none() && acked.len() as u64 >= 3 * HOSTS {
            let leader = cluster
                .stream_leader(0, "convlog-hostfail")
                .expect("the stream has a leader");
            let index = cluster.index_of(&leader);
            cluster.kill(index);
            eprintln!(
                "killed the stream leader {leader} after {} acknowledged appends",
                acked.len()
            );
            killed = Some((index, leader, acked.len() as u64));
        }
    }
    for host in &mut hosts {
        assert!(host.wait().unwrap().success(), "a host process failed");
    }
    let (killed, leader, before) = killed.expect("the leader was killed");
    assert_eq!(done, HOSTS);
    assert_eq!(acked.len() as u64, HOSTS * HOST_APPENDS);
    assert!(
        before < HOSTS * HOST_APPENDS,
        "the leader died while appends were under way"
    );
    let survivor = (killed + 1) % 3;
    assert!(
        cluster
            .stream_leader(survivor, "convlog-hostfail")
            .is_some_and(|now| now != leader),
        "the stream has a new leader"
    );
    // Read back through a new handle.
    let reader = JetStreamLog::open_follower(&url, nats_options(3)).unwrap();
    let records: Vec<_> = reader.read_from(1).collect::<convlog::Result<_>>().unwrap();
    let lsns: Vec<Lsn> = records.iter().map(|record| record.lsn).collect();
    assert_eq!(
        lsns,
        (1..=lsns.len() as u64).collect::<Vec<_>>(),
        "gap-free"
    );
    let unique: HashSet<&[u8]> = records
        .iter()
        .map(|record| record.payload.as_slice())
        .collect();
    assert_eq!(unique.len(), records.len(), "no event is stored twice");
    let acked_events: u64 = acked.values().map(|(start, end)| end - start).sum();
    assert_eq!(
        records.len() as u64,
        acked_events,
        "only acknowledged batches are stored"
    );
    for (&(host, i), &(start, end)) in &acked {
        // Events carry a fresh id and time: compare by their texts.
        let held: Vec<&convlog::log::Record> = records[(start - 1) as usize..(end - 1) as usize]
            .iter()
            .collect();
        assert_eq!(
            held.len() as u64,
            1 + i % 3,
            "host {host}'s batch {i}: {start}..{end}"
        );
        for (j, record) in held.iter().enumerate() {
            let event = format!("{:?}", record.event().unwrap());
            let text = format!("{:?}", format!("h{host}-{i}-{j}"));
            assert!(
                event.contains(&text),
                "host {host}'s batch {i} is whole at {start}..{end}: {event}"
            );
        }
        let positions: HashSet<_> = held.iter().map(|record| record.position).collect();
        assert_eq!(positions.len(), 1, "one batch is one message");
    }
    // The killed node comes back and catches up.
    cluster.restart(killed);
    let last = reader.read_from(1).last().unwrap().unwrap().position.offset;
    wait_until_current(&cluster, survivor, killed, "convlog-hostfail", last);
}

/// The host process of `a_host_killed_mid_tool_call_is_resumed_from_another_process`.
const HOST_URL_VARIABLE: &str = "CONVLOG_NATS_TEST_HOST_URL";

/// A host process records a tool call as running and is SIGKILLed before
/// its result; another process opens the store by URL, finds the call
/// unfinished, records its result and the evaluation is finished.
#[test]
fn a_host_killed_mid_tool_call_is_resumed_from_another_process() {
    use convlog::model::{ConversationEntry, Event, ToolCall, ToolStatus};
    use std::io::{BufRead, BufReader, Write};

    if let Ok(url) = std::env::var(HOST_URL_VARIABLE) {
        // The host: record, say so, and wait to be killed.
        let dir = tempfile::tempdir().unwrap();
        let store =
            convlog_nats::open_store(&url, dir.path(), StoreOptions::new(), nats_options(3))
                .unwrap();
        store
            .append(&[ConversationEntry::user("eval-1", 0, "weather in Paris?").recorded_in("c")])
            .unwrap();
        store
            .append(&[ConversationEntry::assistant_calling(
                "eval-1",
                1,
                [ToolCall::new("call_1", "weather", r#"{"city":"paris"}"#)],
            )
            .with_turn(1)
            .recorded_in("c")])
            .unwrap();
        store
            .append(&[Event::tool_status(
                "c",
                "eval-1",
                "call_1",
                ToolStatus::Running,
            )])
            .unwrap();
        println!("RECORDED");
        std::io::stdout().flush().unwrap();
        loop {
            std::thread::park();
        }
    }
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let url = cluster.url("hosts");
    let mut host = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_host_killed_mid_tool_call_is_resumed_from_another_process",
            "--nocapture",
        ])
        .env(HOST_URL_VARIABLE, &url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(host.stdout.take().unwrap());
    let recorded = stdout
        .lines()
        .map_while(Result::ok)
        .any(|line| line.trim() == "RECORDED");
    host.kill().unwrap();
    host.wait().unwrap();
    assert!(recorded, "the host process recorded its tool call");

    let dir = tempfile::tempdir().unwrap();
    let store =
        convlog_nats::open_store(&url, dir.path(), StoreOptions::new(), nats_options(3)).unwrap();
    let state = store.resume("c", &Default::default()).unwrap();
    let unfinished: Vec<&str> = state
        .unfinished_calls
        .iter()
        .map(|call| call.call.call_id.as_str())
        .collect();
    assert_eq!(unfinished, ["call_1"]);
    store
        .append(&[
            ConversationEntry::tool_result("eval-1", 2, "call_1", "weather", "18C")
                .with_turn(1)
                .recorded_in("c"),
        ])
        .unwrap();
    let state = store.resume("c", &Default::default()).unwrap();
    assert!(state.unfinished_calls.is_empty());
    assert_eq!(state.finished_calls.len(), 1);
}
