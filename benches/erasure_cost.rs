//! The cost of encryption at rest (docs/erasure.md), against the same
//! store in the clear, in one run: rounds alternate between the two so
//! that the load of a shared machine falls on both alike.
//!
//! 1. Appends/s: one thread appending one-event batches of a ~700-byte
//!    user message, spread over 100 conversations, under
//!    `Durability::None` (the CPU cost: encoding, sealing, framing; no
//!    fsync, which would hide it) and under `Durability::Sync` (what a
//!    durable append pays). The conversations exist before the timing
//!    starts: making a conversation's key costs an fsync of the key table,
//!    once per conversation, which is not what is measured here.
//! 2. Read-and-fold latency (`Store::conversation`) of one 200-entry
//!    conversation (~700-byte entries), from the log (no snapshot) and
//!    from a snapshot.
//!
//! Run with `cargo bench --bench erasure_cost`. Environment:
//! `CONVLOG_BENCH_ROUNDS` (default 5), `CONVLOG_BENCH_APPENDS` (appends per
//! round under None, default 20000; a tenth of it under Sync),
//! `CONVLOG_BENCH_READS` (reads per round, default 300),
//! `CONVLOG_BENCH_DIR` (scratch stores; default `target/bench-tmp`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use convlog::erasure::StoreKey;
use convlog::model::ConversationEntry;
use convlog::{Durability, Store, StoreOptions};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn options(encrypted: bool, durability: Durability) -> StoreOptions {
    StoreOptions::new()
        .durability(durability)
        .encryption(encrypted.then(|| StoreKey::from_bytes([5; 32])))
}

fn text(index: usize) -> String {
    format!("{index:08} {}", "lorem ipsum dolor sit amet ".repeat(25))
}

fn scratch(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Appends/s of `count` one-event batches.
fn appends(root: &Path, encrypted: bool, durability: Durability, count: usize) -> f64 {
    let dir = scratch(
        root,
        if encrypted {
            "append-sealed"
        } else {
            "append-clear"
        },
    );
    let store = Store::open(&dir, options(encrypted, durability)).unwrap();
    let events: Vec<_> = (0..count)
        .map(|index| {
            ConversationEntry::user(
                format!("eval-{}", index / 100),
                (index / 100) as u64,
                text(index),
            )
            .recorded_in(&format!("conversation-{}", index % 100))
        })
        .collect();
    // Each conversation's first append makes its key (a key-table record
    // and an fsync, once per conversation): made before the timing.
    for conversation in 0..100 {
        let entry = ConversationEntry::user("eval-setup", 0, "setup");
        store
            .append(&[entry.recorded_in(&format!("conversation-{conversation}"))])
            .unwrap();
    }
    let start = Instant::now();
    for event in &events {
        store.append(std::slice::from_ref(event)).unwrap();
    }
    store.sync().unwrap();
    let rate = count as f64 / start.elapsed().as_secs_f64();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

/// A store with one 200-entry conversation among 50 others.
fn read_store(root: &Path, encrypted: bool, snapshot: bool) -> Store {
    let name = format!(
        "read-{}-{}",
        if encrypted { "sealed" } else { "clear" },
        if snapshot { "snapshot" } else { "log" }
    );
    let dir = scratch(root, &name);
    let store = Store::open(&dir, options(encrypted, Durability::None)).unwrap();
    for index in 0..200 {
        for other in 0..50 {
            if index % 20 == 0 {
                let entry = ConversationEntry::user("eval", index as u64, text(index));
                store
                    .append(&[entry.recorded_in(&format!("other-{other}"))])
                    .unwrap();
            }
        }
        let entry = ConversationEntry::user("eval", index as u64, text(index));
        store.append(&[entry.recorded_in("target")]).unwrap();
    }
    if snapshot {
        store.snapshot().unwrap();
    }
    drop(store);
    Store::open(&dir, options(encrypted, Durability::None)).unwrap()
}

/// Median microseconds of `reads` reads of the target.
fn read_latency(store: &Store, reads: usize) -> f64 {
    let mut times: Vec<f64> = (0..reads)
        .map(|_| {
            let start = Instant::now();
            let slice = store.conversation("target").unwrap();
            assert_eq!(slice.len(), 200);
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn summary(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:.0} [{:.0}..{:.0}]",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1]
    )
}

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

fn main() {
    let rounds = env("CONVLOG_BENCH_ROUNDS", 5);
    let count = env("CONVLOG_BENCH_APPENDS", 20_000);
    let reads = env("CONVLOG_BENCH_READS", 300);
    let root = std::env::var_os("CONVLOG_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench-tmp"));
    std::fs::create_dir_all(&root).unwrap();
    println!("load average at start: {}", load());
    let stores: Vec<(bool, bool, Store)> =
        [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .map(|(encrypted, snapshot)| {
                (encrypted, snapshot, read_store(&root, encrypted, snapshot))
            })
            .collect();
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); 8];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); 4];
    for round in 0..rounds {
        let clear_none = appends(&root, false, Durability::None, count);
        let sealed_none = appends(&root, true, Durability::None, count);
        let clear_sync = appends(&root, false, Durability::Sync, count / 10);
        let sealed_sync = appends(&root, true, Durability::Sync, count / 10);
        let latencies: Vec<f64> = stores
            .iter()
            .map(|(_, _, store)| read_latency(store, reads))
            .collect();
        for (slot, value) in [clear_none, sealed_none, clear_sync, sealed_sync]
            .into_iter()
            .chain(latencies.iter().copied())
            .enumerate()
        {
            results[slot].push(value);
        }
        ratios[0].push(sealed_none / clear_none);
        ratios[1].push(sealed_sync / clear_sync);
        ratios[2].push(latencies[1] / latencies[0]);
        ratios[3].push(latencies[3] / latencies[2]);
        println!("round {round} done, load average {}", load());
    }
    let ratio = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        format!(
            "{:.2}x [{:.2}..{:.2}]",
            values[values.len() / 2],
            values[0],
            values[values.len() - 1]
        )
    };
    println!("| measure | clear | encrypted | encrypted / clear |");
    println!("|---|---|---|---|");
    let labels = [
        "appends/s, Durability::None",
        "appends/s, Durability::Sync",
        "read 200 entries, from the log (us)",
        "read 200 entries, from a snapshot (us)",
    ];
    for (index, label) in labels.iter().enumerate() {
        let (clear, sealed) = results.split_at_mut(2 * index + 1);
        println!(
            "| {label} | {} | {} | {} |",
            summary(&mut clear[2 * index]),
            summary(&mut sealed[0]),
            ratio(&mut ratios[index])
        );
    }
    println!("load average at end: {}", load());
    drop(stores);
}
