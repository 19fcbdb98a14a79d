//! Appends/s and per-append latency of a store on a three-node JetStream
//! cluster on loopback (R=3), next to the local store (`Durability::Group`,
//! the default) in the same run, at 1, 8, 64 and 256 concurrent writers in
//! all: threads sharing one `Store` (one host), and the same number of
//! threads spread over several host processes (up to `HOSTS_MAX`), each
//! with its own `Store` on its own connection, appending to one store at
//! once; each thread appends one-event batches to its own conversation.
//! An append that gives up (`Error::Conflict` after `APPEND_RACES_MAX`
//! races lost to other hosts) is counted, not timed.
//! Then the latency of resuming a 200-entry conversation: on the writer's
//! store just opened (cold) and again (warm), next to the local store; and
//! from a new host that opened the store from its snapshot bucket, with
//! the snapshot covering the whole conversation, half of it, or nothing,
//! and the host's batch cache off (every batch it reads is a fetch).
//!
//! Run: `cargo bench -p convlog-nats --bench jetstream_append`
//! (`CONVLOG_BENCH_ROUNDS`, default 3: rounds per figure; the medians and
//! [min..max] are printed with the load average). Needs `nats-server`.
//! The bench runs itself as each host process (`HOST_ENV` set).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use convlog::model::{ConversationEntry, Role};
use convlog::store::{Store, StoreBuilder, StoreOptions};
use convlog_nats::JetStreamOptions;

#[path = "../tests/cluster/mod.rs"]
mod cluster;

/// Appends per configuration (split among the writers), at least
/// `APPENDS_PER_WRITER_MIN` each.
const APPENDS_PER_RUN: usize = 1024;
const APPENDS_PER_WRITER_MIN: usize = 4;
const WRITERS: [usize; 4] = [1, 8, 64, 256];
const RESUME_ENTRIES: u64 = 200;
/// The most host processes one store is appended to from at once.
const HOSTS_MAX: usize = 4;
/// Set in a host process: `URL THREADS APPENDS_PER_THREAD`.
const HOST_ENV: &str = "CONVLOG_BENCH_HOST";

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".to_string())
}

fn event(conversation: &str, sequence: u64) -> convlog::Event {
    ConversationEntry::new(
        "eval",
        sequence,
        if sequence.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        },
        Some(format!(
            "turn {sequence} of {conversation}: {}",
            "x".repeat(200)
        )),
    )
    .recorded_in(conversation)
}

/// Appends per writer when `writers` write in all.
fn per_writer(writers: usize) -> usize {
    (APPENDS_PER_RUN / writers).max(APPENDS_PER_WRITER_MIN)
}

/// What a run measured: appends/s, the sorted latencies of the appends
/// that succeeded, and how many gave up (`Error::Conflict` after
/// `APPEND_RACES_MAX` races lost to other hosts).
type Measured = (f64, Vec<Duration>, usize);

/// One run: `writers` threads append to `store`.
fn run(store: &Store, writers: usize) -> Measured {
    run_from(store, writers, per_writer(writers), || {})
}

/// `writers` threads append `per_writer` batches each to `store`, once
/// `ready` returned (every thread waits for it).
fn run_from(store: &Store, writers: usize, per_writer: usize, ready: impl FnOnce()) -> Measured {
    let barrier = Barrier::new(writers + 1);
    let mut started = Instant::now();
    let outcomes: Vec<Option<Duration>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|writer| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let conversation = format!("w{writer}-{}", uuid::Uuid::new_v4().simple());
                    barrier.wait();
                    (0..per_writer as u64)
                        .map(|sequence| {
                            let at = Instant::now();
                            match store.append(&[event(&conversation, sequence)]) {
                                Ok(_) => Some(at.elapsed()),
                                Err(convlog::Error::Conflict {
                                    conversation_id: None,
                                    ..
                                }) => None,
                                Err(error) => panic!("append: {error}"),
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        ready();
        barrier.wait();
        started = Instant::now();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().unwrap())
            .collect()
    });
    let elapsed = started.elapsed();
    let gave_up = outcomes.iter().filter(|outcome| outcome.is_none()).count();
    let mut latencies: Vec<Duration> = outcomes.into_iter().flatten().collect();
    latencies.sort();
    (
        latencies.len() as f64 / elapsed.as_secs_f64(),
        latencies,
        gave_up,
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Median and range of `values`.
fn summary(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

fn format_range(values: Vec<f64>, unit: &str, decimals: usize) -> String {
    let (median, min, max) = summary(values);
    format!("{median:.decimals$} {unit} [{min:.decimals$}..{max:.decimals$}]")
}

struct Figures {
    rate: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    /// Appends that gave up, and appends tried, over all rounds.
    gave_up: usize,
    tried: usize,
}

fn figures(rounds: &mut Figures, (rate, latencies, gave_up): Measured) {
    rounds.gave_up += gave_up;
    rounds.tried += latencies.len() + gave_up;
    rounds.rate.push(rate);
    rounds
        .p50
        .push(percentile(&latencies, 0.50).as_secs_f64() * 1e3);
    rounds
        .p99
        .push(percentile(&latencies, 0.99).as_secs_f64() * 1e3);
}

fn open_local(dir: &Path) -> Store {
    StoreBuilder::new(dir).open().unwrap()
}

fn nats() -> JetStreamOptions {
    JetStreamOptions::new()
        .replicas(3)
        .request_timeout(Duration::from_secs(10))
}

fn new_figures() -> Figures {
    Figures {
        rate: Vec::new(),
        p50: Vec::new(),
        p99: Vec::new(),
        gave_up: 0,
        tried: 0,
    }
}

/// A host process appending to a store (this bench, run with `HOST_ENV`).
/// Dropping it kills the process if it still runs.
struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    fn start(url: &str, threads: usize, per_thread: usize) -> Host {
        let mut child = Command::new(std::env::current_exe().expect("the bench's path"))
            .env(HOST_ENV, format!("{url} {threads} {per_thread}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a host process starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Host {
            child,
            stdin,
            stdout,
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        let read = self
            .stdout
            .read_line(&mut line)
            .expect("a line from a host");
        assert!(read > 0, "a host process ended early");
        line.trim_end().to_string()
    }
}

/// A host process: opens the store (snapshots in its bucket), starts its
/// threads, prints `ready`, waits for a line on stdin, appends, then prints
/// its per-append latencies in nanoseconds on one line.
fn host_main(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [url, threads, per_thread] = parts[..] else {
        panic!("{HOST_ENV} is {spec:?}, not \"URL THREADS APPENDS\"");
    };
    let threads: usize = threads.parse().expect("a thread count");
    let per_thread: usize = per_thread.parse().expect("an append count");
    let store = convlog_nats::open_store_shared(url, StoreOptions::new(), nats()).unwrap();
    let (_, latencies, gave_up) = run_from(&store, threads, per_thread, || {
        let mut stdout = std::io::stdout();
        writeln!(stdout, "ready").unwrap();
        stdout.flush().unwrap();
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
    });
    let nanos: Vec<String> = latencies
        .iter()
        .map(|latency| latency.as_nanos().to_string())
        .collect();
    println!("{gave_up}");
    println!("{}", nanos.join(" "));
}

/// `writers` threads in all, spread over up to `HOSTS_MAX` host processes
/// (each on its own connection, to the nodes in turn), append to the store
/// `store` at once; appends/s from the go to the last report.
fn run_hosts(cluster: &cluster::Cluster, store: &str, writers: usize) -> Measured {
    let hosts = writers.min(HOSTS_MAX);
    let threads = writers / hosts;
    // Created before the hosts race to open it.
    drop(
        convlog_nats::open_store_shared(&cluster.url(store), StoreOptions::new(), nats()).unwrap(),
    );
    let mut running: Vec<Host> = (0..hosts)
        .map(|host| {
            Host::start(
                &cluster.node_url(host % cluster.nodes.len(), store),
                threads,
                per_writer(writers),
            )
        })
        .collect();
    for host in &mut running {
        assert_eq!(host.line(), "ready");
    }
    let started = Instant::now();
    for host in &mut running {
        let stdin = host.stdin.as_mut().expect("piped");
        writeln!(stdin, "go").unwrap();
        stdin.flush().unwrap();
    }
    let mut latencies: Vec<Duration> = Vec::new();
    let mut gave_up = 0;
    for host in &mut running {
        gave_up += host.line().parse::<usize>().expect("a count");
        let line = host.line();
        if line.is_empty() {
            continue;
        }
        latencies.extend(
            line.split(' ')
                .map(|nanos| Duration::from_nanos(nanos.parse().expect("nanoseconds"))),
        );
    }
    let elapsed = started.elapsed();
    latencies.sort();
    (
        latencies.len() as f64 / elapsed.as_secs_f64(),
        latencies,
        gave_up,
    )
}

/// A new host resumes the 200-entry conversation of store `store`, which
/// a writer appended one entry per batch, with a snapshot (in the bucket)
/// after `snapshot_after` entries, if any; the host keeps a batch cache
/// or not. Returns (open, first resume, again) in ms.
fn bucket_resume(
    cluster: &cluster::Cluster,
    store: &str,
    snapshot_after: Option<u64>,
    cache: bool,
) -> (f64, f64, f64) {
    let conversation = "resume-me";
    {
        let writer = convlog_nats::open_store_shared(
            &cluster.node_url(0, store),
            StoreOptions::new(),
            nats(),
        )
        .unwrap();
        for sequence in 0..RESUME_ENTRIES {
            writer.append(&[event(conversation, sequence)]).unwrap();
            if snapshot_after == Some(sequence + 1) {
                writer.snapshot().unwrap();
            }
        }
    }
    let options = if cache {
        nats()
    } else {
        nats().batch_cache_bytes(0)
    };
    let at = Instant::now();
    let host =
        convlog_nats::open_store_shared(&cluster.node_url(1, store), StoreOptions::new(), options)
            .unwrap();
    let open = at.elapsed().as_secs_f64() * 1e3;
    assert_eq!(
        host.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        snapshot_after.map(|entries| entries + 1)
    );
    let first = time_resume(&host, conversation);
    let again = time_resume(&host, conversation);
    (open, first, again)
}

fn time_resume(store: &Store, conversation: &str) -> f64 {
    let at = Instant::now();
    let state = store.resume(conversation, &Default::default()).unwrap();
    let took = at.elapsed().as_secs_f64() * 1e3;
    assert_eq!(state.entries.len() as u64, RESUME_ENTRIES);
    took
}

fn main() {
    if let Ok(spec) = std::env::var(HOST_ENV) {
        host_main(&spec);
        return;
    }
    let rounds: usize = std::env::var("CONVLOG_BENCH_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(3);
    let Some(cluster) = cluster::Cluster::start(3) else {
        eprintln!("no nats-server: nothing measured");
        return;
    };
    println!("load before: {}", load());
    println!(
        "| writers | store | appends/s | p50 ms | p99 ms | gave up |\n|---|---|---|---|---|---|"
    );
    for writers in WRITERS {
        let mut local = new_figures();
        let mut jet = new_figures();
        let mut hosts = new_figures();
        for round in 0..rounds {
            // Interleaved: a local round, then the cluster from one host,
            // then from several host processes.
            let dir = tempfile::tempdir().unwrap();
            let store = open_local(dir.path());
            figures(&mut local, run(&store, writers));
            drop(store);
            let snapshots = tempfile::tempdir().unwrap();
            let store = convlog_nats::open_store(
                &cluster.url(&format!("bench-{writers}-{round}")),
                snapshots.path(),
                StoreOptions::new(),
                nats(),
            )
            .unwrap();
            figures(&mut jet, run(&store, writers));
            drop(store);
            figures(
                &mut hosts,
                run_hosts(&cluster, &format!("hosts-{writers}-{round}"), writers),
            );
        }
        let processes = writers.min(HOSTS_MAX);
        for (name, figures) in [
            ("local (Group)".to_string(), local),
            ("JetStream R=3, 1 host".to_string(), jet),
            (
                format!(
                    "JetStream R=3, {processes} host process{}",
                    if processes == 1 { "" } else { "es" }
                ),
                hosts,
            ),
        ] {
            println!(
                "| {writers} | {name} | {} | {} | {} | {} of {} |",
                format_range(figures.rate, "", 0),
                format_range(figures.p50, "", 3),
                format_range(figures.p99, "", 3),
                figures.gave_up,
                figures.tried,
            );
        }
        println!("load: {}", load());
    }

    // Resume of a 200-entry conversation.
    let mut cold_jet = Vec::new();
    let mut warm_jet = Vec::new();
    let mut cold_local = Vec::new();
    let mut warm_local = Vec::new();
    for round in 0..rounds {
        let conversation = "resume-me";
        let local_dir = tempfile::tempdir().unwrap();
        let snapshots = tempfile::tempdir().unwrap();
        let url = cluster.url(&format!("resume-{round}"));
        {
            let local = open_local(local_dir.path());
            let jet = convlog_nats::open_store(&url, snapshots.path(), StoreOptions::new(), nats())
                .unwrap();
            for sequence in 0..RESUME_ENTRIES {
                local.append(&[event(conversation, sequence)]).unwrap();
                jet.append(&[event(conversation, sequence)]).unwrap();
            }
        }
        let local = open_local(local_dir.path());
        cold_local.push(time_resume(&local, conversation));
        warm_local.push(time_resume(&local, conversation));
        let jet =
            convlog_nats::open_store(&url, snapshots.path(), StoreOptions::new(), nats()).unwrap();
        cold_jet.push(time_resume(&jet, conversation));
        warm_jet.push(time_resume(&jet, conversation));
    }
    println!(
        "\n| resume of {RESUME_ENTRIES} entries | first after open ms | again ms |\n|---|---|---|"
    );
    println!(
        "| local | {} | {} |",
        format_range(cold_local, "", 3),
        format_range(warm_local, "", 3)
    );
    println!(
        "| JetStream R=3 | {} | {} |",
        format_range(cold_jet, "", 3),
        format_range(warm_jet, "", 3)
    );
    println!("load: {}", load());

    // Resume from a new host on another node that opened from the bucket.
    println!(
        "\n| a new host resumes {RESUME_ENTRIES} entries | open ms | first resume ms | again ms |\n|---|---|---|---|"
    );
    let cases: [(&str, Option<u64>, bool); 4] = [
        (
            "snapshot covers all 200, batch cache off",
            Some(RESUME_ENTRIES),
            false,
        ),
        (
            "snapshot covers the first 100, batch cache off",
            Some(RESUME_ENTRIES / 2),
            false,
        ),
        ("no snapshot, batch cache off", None, false),
        ("no snapshot, batch cache on", None, true),
    ];
    for (case, (name, snapshot_after, cache)) in cases.into_iter().enumerate() {
        let (mut open, mut first, mut again) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (o, f, a) = bucket_resume(
                &cluster,
                &format!("bucket-{case}-{round}"),
                snapshot_after,
                cache,
            );
            open.push(o);
            first.push(f);
            again.push(a);
        }
        println!(
            "| {name} | {} | {} | {} |",
            format_range(open, "", 3),
            format_range(first, "", 3),
            format_range(again, "", 3)
        );
    }
    println!("load after: {}", load());
}
