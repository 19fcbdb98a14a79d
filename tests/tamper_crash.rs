//! Crashes during a tamper key rotation, on the simulated disk
//! (`storage::sim`): a power cut after each possible number of operations
//! of the writer's open with the rotated key file and its first append
//! (the frame that records the rotation), then a power loss or a process
//! crash. After recovery the writer opens with the new key file (twice,
//! agreeing), the events before the rotation read whole, the batch of the
//! rotation is wholly there or wholly absent (there when it was
//! acknowledged), and the store verifies: its checksums, and with the new
//! key file every frame's tag and the checkpoint signed before the
//! rotation. The epochs found are epoch 0 alone (the rotation never
//! reached the disk) or epoch 0 then epoch 1 at the rotation batch; the
//! writer goes on in epoch 1 either way.

mod common;

use std::path::Path;
use std::sync::Arc;

use convlog::log::LogOptions;
use convlog::model::{ConversationEntry, Event};
use convlog::storage::sim::SimStorage;
use convlog::tamper::{self, TamperKey, TamperOptions};
use convlog::{Error, Store, StoreOptions};

const STORE: &str = "/store";

/// Power cuts tried: every count from 0 to this (the open and the first
/// append of a rotation take about a dozen mutating operations).
const OPERATIONS_MAX: u64 = 24;

/// Seeds per power cut (each decides the fate of every unsynced write).
const SEEDS: u64 = 4;

/// The key file before the rotation: epoch 0.
fn old_key() -> TamperKey {
    TamperKey::from_seed([0x31; 32])
}

/// The key file after it: epochs 0 and 1.
fn new_key() -> TamperKey {
    old_key().rotated_with_seed([0x32; 32]).unwrap()
}

fn options(storage: &SimStorage, key: TamperKey) -> StoreOptions {
    StoreOptions::new()
        .log(LogOptions::new().storage(Arc::new(storage.clone())))
        .tamper(Some(TamperOptions::new(key)))
}

fn turns(conversation: &str) -> Vec<Event> {
    (0..3)
        .map(|sequence| {
            ConversationEntry::user("eval-1", sequence, format!("{conversation} {sequence}"))
                .recorded_in(conversation)
        })
        .collect()
}

/// Entries of `conversation`, or `None` when it has none.
fn entries(store: &Store, conversation: &str) -> Option<usize> {
    match store.conversation(conversation) {
        Ok(slice) => Some(slice.len()),
        Err(Error::ConversationNotFound { .. }) => None,
        Err(error) => panic!("reading {conversation:?}: {error}"),
    }
}

/// The store's checks and the tamper check of the crashed disk, copied to
/// real files; returns the key epochs the log uses.
fn verified(disk: &SimStorage, checkpoint: &tamper::Checkpoint, context: &str) -> Vec<u32> {
    let copy = tempfile::tempdir().unwrap();
    common::copy_out(disk, Path::new(STORE), copy.path());
    convlog::store::verify(copy.path(), &mut |_| {})
        .unwrap_or_else(|error| panic!("{context}: verify: {error}"));
    let report = tamper::verify(copy.path(), Some(&new_key()), None, Some(checkpoint))
        .unwrap_or_else(|error| panic!("{context}: tamper verify: {error}"));
    report.epochs.iter().map(|(epoch, _)| *epoch).collect()
}

#[test]
fn a_crash_during_a_key_rotation_leaves_a_store_that_verifies_with_the_new_key() {
    let (mut rotated, mut not_yet) = (0, 0);
    for operations in 0..=OPERATIONS_MAX {
        for seed in 0..SEEDS {
            let disk = SimStorage::new(seed);
            let checkpoint = {
                let store = Store::open(STORE, options(&disk, old_key())).unwrap();
                store.append(&turns("before")).unwrap();
                store.checkpoint().unwrap()
            };
            disk.power_cut_after(operations);
            let result = Store::open(STORE, options(&disk, new_key()))
                .and_then(|store| store.append(&turns("after")));
            let crashed = if seed % 2 == 0 {
                disk.crash(seed * 7919 + operations)
            } else {
                disk.process_crash()
            };
            let context = format!(
                "power cut after {operations} operations, seed {seed} (rotation -> {:?})",
                result.as_ref().map(|_| ()).map_err(ToString::to_string)
            );
            let mut seen = Vec::new();
            for open in 0..2 {
                let store = Store::open(STORE, options(&crashed, new_key()))
                    .unwrap_or_else(|error| panic!("{context}: open {open}: {error}"));
                assert_eq!(entries(&store, "before"), Some(3), "{context}");
                let after = entries(&store, "after");
                assert!(
                    matches!(after, None | Some(3)),
                    "{context}: half a batch: {after:?}"
                );
                if result.is_ok() {
                    assert_eq!(after, Some(3), "{context}: an acknowledged batch is lost");
                }
                seen.push(after);
            }
            assert_eq!(seen[0], seen[1], "{context}: two opens disagree");
            let epochs = verified(&crashed, &checkpoint, &context);
            match seen[0] {
                Some(_) => {
                    assert_eq!(epochs, [0, 1], "{context}");
                    rotated += 1;
                }
                None => {
                    assert_eq!(epochs, [0], "{context}");
                    not_yet += 1;
                }
            }
            // The writer goes on with the new key file: the log is in
            // epoch 1 from its next frame on, and still verifies.
            {
                let store = Store::open(STORE, options(&crashed, new_key())).unwrap();
                store.append(&turns("later")).unwrap();
            }
            assert_eq!(
                verified(&crashed, &checkpoint, &context),
                [0, 1],
                "{context}"
            );
        }
    }
    // Both outcomes occur: the cuts land before and after the rotation
    // frame is durable.
    assert!(
        rotated > 0 && not_yet > 0,
        "rotated {rotated}, not yet {not_yet}"
    );
}
