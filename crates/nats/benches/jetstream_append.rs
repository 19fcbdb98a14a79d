//! Appends/s and per-append latency of a store on a three-node JetStream
//! cluster on loopback (R=3), next to the local store (`Durability::Group`,
//! the default) in the same run, at 1, 8, 64 and 256 concurrent writers
//! (threads sharing one `Store`, each appending one-event batches to its
//! own conversation); then the latency of resuming a 200-entry
//! conversation from the cluster, on a store just opened (cold) and again
//! (warm), next to the local store.
//!
//! Run: `cargo bench -p convlog-nats --bench jetstream_append`
//! (`CONVLOG_BENCH_ROUNDS`, default 3: rounds per figure; the medians and
//! [min..max] are printed with the load average). Needs `nats-server`.

use std::path::Path;
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

/// One run: `writers` threads append to `store`; returns appends/s and the
/// sorted per-append latencies.
fn run(store: &Store, writers: usize) -> (f64, Vec<Duration>) {
    let per_writer = (APPENDS_PER_RUN / writers).max(APPENDS_PER_WRITER_MIN);
    let barrier = Barrier::new(writers + 1);
    let mut started = Instant::now();
    let mut latencies: Vec<Duration> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|writer| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let conversation = format!("w{writer}-{}", uuid::Uuid::new_v4().simple());
                    barrier.wait();
                    (0..per_writer as u64)
                        .map(|sequence| {
                            let at = Instant::now();
                            store.append(&[event(&conversation, sequence)]).unwrap();
                            at.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        barrier.wait();
        started = Instant::now();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().unwrap())
            .collect()
    });
    let elapsed = started.elapsed();
    latencies.sort();
    (latencies.len() as f64 / elapsed.as_secs_f64(), latencies)
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
}

fn figures(rounds: &mut Figures, (rate, latencies): (f64, Vec<Duration>)) {
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

fn main() {
    let rounds: usize = std::env::var("CONVLOG_BENCH_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(3);
    let Some(cluster) = cluster::Cluster::start(3) else {
        eprintln!("no nats-server: nothing measured");
        return;
    };
    let nats = || {
        JetStreamOptions::new()
            .replicas(3)
            .request_timeout(Duration::from_secs(10))
    };
    println!("load before: {}", load());
    println!("| writers | store | appends/s | p50 ms | p99 ms |\n|---|---|---|---|---|");
    for writers in WRITERS {
        let mut jet = Figures {
            rate: Vec::new(),
            p50: Vec::new(),
            p99: Vec::new(),
        };
        let mut local = Figures {
            rate: Vec::new(),
            p50: Vec::new(),
            p99: Vec::new(),
        };
        for round in 0..rounds {
            // Interleaved: a local round, then a cluster round.
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
        }
        for (name, figures) in [("local (Group)", local), ("JetStream R=3", jet)] {
            println!(
                "| {writers} | {name} | {} | {} | {} |",
                format_range(figures.rate, "", 0),
                format_range(figures.p50, "", 3),
                format_range(figures.p99, "", 3),
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
        let time_resume = |store: &Store| {
            let at = Instant::now();
            let state = store.resume(conversation, &Default::default()).unwrap();
            let took = at.elapsed().as_secs_f64() * 1e3;
            assert_eq!(state.entries.len() as u64, RESUME_ENTRIES);
            took
        };
        let local = open_local(local_dir.path());
        cold_local.push(time_resume(&local));
        warm_local.push(time_resume(&local));
        let jet =
            convlog_nats::open_store(&url, snapshots.path(), StoreOptions::new(), nats()).unwrap();
        cold_jet.push(time_resume(&jet));
        warm_jet.push(time_resume(&jet));
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
    println!("load after: {}", load());
}
