//! Crashes during erasure and key creation, on the simulated disk
//! (`storage::sim`): a power cut after each possible number of operations
//! of `Store::erase` (and of the append that makes a conversation's key),
//! then a power loss or a process crash. After recovery the store opens,
//! every event in the log decodes, the other conversation reads whole, and
//! the erased conversation is either wholly readable (the crash came before
//! the erasure was durable) or erased (`Error::Erased`), never half; an
//! erasure that returned Ok is always erased; a second open agrees. The
//! store is tamper-evident too, and after recovery it verifies: its
//! checksums (`store::verify`) and every frame's keyed tag
//! (`tamper::verify` with the key).

mod common;

use std::path::Path;
use std::sync::Arc;

use convlog::erasure::{StoreKey, ERASED_KIND};
use convlog::log::LogOptions;
use convlog::model::{ConversationEntry, Event};
use convlog::storage::sim::SimStorage;
use convlog::tamper::{TamperKey, TamperOptions};
use convlog::{Error, Store, StoreOptions};

const STORE: &str = "/store";

/// Power cuts tried: every count from 0 to this (an erasure takes about a
/// dozen mutating operations, key creation about ten).
const OPERATIONS_MAX: u64 = 24;

/// Seeds per power cut (each decides the fate of every unsynced write).
const SEEDS: u64 = 6;

fn options(storage: &SimStorage) -> StoreOptions {
    StoreOptions::new()
        .log(LogOptions::new().storage(Arc::new(storage.clone())))
        .encryption(Some(StoreKey::from_bytes([9; 32])))
        .tamper(Some(TamperOptions::new(tamper_key())))
}

fn tamper_key() -> TamperKey {
    TamperKey::from_seed([0x19; 32])
}

/// The crashed disk, recovered, copied to real files: its checksums and
/// its keyed chain verify.
fn verifies(disk: &SimStorage, context: &str) {
    let copy = tempfile::tempdir().unwrap();
    common::copy_out(disk, Path::new(STORE), copy.path());
    convlog::store::verify(copy.path(), &mut |_| {})
        .unwrap_or_else(|error| panic!("{context}: verify: {error}"));
    convlog::tamper::verify(copy.path(), Some(&tamper_key()), None, None)
        .unwrap_or_else(|error| panic!("{context}: tamper verify: {error}"));
}

fn turns(conversation: &str) -> Vec<Event> {
    (0..3)
        .map(|sequence| {
            ConversationEntry::user(
                "eval-1",
                sequence,
                format!("{conversation} says {sequence}"),
            )
            .recorded_in(conversation)
        })
        .collect()
}

/// What reading `conversation` gives: `Some(n)` entries, or `None` erased.
fn read(store: &Store, conversation: &str) -> Result<Option<usize>, String> {
    match store.conversation(conversation) {
        Ok(slice) => Ok(Some(slice.len())),
        Err(Error::Erased { .. }) => Ok(None),
        Err(error) => Err(format!("reading {conversation:?}: {error}")),
    }
}

/// Opens the crashed disk twice and checks it; returns what `gone` reads.
fn recover(disk: &SimStorage, context: &str) -> Option<usize> {
    let mut seen = Vec::new();
    for open in 0..2 {
        let store = Store::open(STORE, options(disk))
            .unwrap_or_else(|error| panic!("{context}: open {open} failed: {error}"));
        for record in store.log().iter_from(1) {
            let record = record.unwrap_or_else(|error| panic!("{context}: {error}"));
            convlog::codec::decode_event(&record.payload)
                .unwrap_or_else(|error| panic!("{context}: LSN {}: {error}", record.lsn));
        }
        assert_eq!(read(&store, "kept").unwrap(), Some(3), "{context}");
        let gone = read(&store, "gone").unwrap_or_else(|error| panic!("{context}: {error}"));
        assert!(
            matches!(gone, None | Some(3)),
            "{context}: the conversation is half there: {gone:?}"
        );
        if gone.is_none() {
            assert_eq!(store.erased_conversations(), ["gone"], "{context}");
            let erasures = store
                .log()
                .iter_from(1)
                .filter(|record| {
                    convlog::codec::custom_kind(&record.as_ref().unwrap().payload)
                        == Some(ERASED_KIND)
                })
                .count();
            assert_eq!(erasures, 1, "{context}: the log records the erasure once");
        }
        seen.push(gone);
    }
    assert_eq!(seen[0], seen[1], "{context}: two opens disagree");
    verifies(disk, context);
    seen[0]
}

#[test]
fn a_crash_during_erasure_leaves_the_conversation_whole_or_erased() {
    let (mut erased, mut whole) = (0, 0);
    for operations in 0..=OPERATIONS_MAX {
        for seed in 0..SEEDS {
            let disk = SimStorage::new(seed);
            let store = Store::open(STORE, options(&disk)).unwrap();
            store.append(&turns("gone")).unwrap();
            store.append(&turns("kept")).unwrap();
            if seed % 2 == 1 {
                store.snapshot().unwrap();
            }
            disk.power_cut_after(operations);
            let result = store.erase("gone", "ops");
            drop(store);
            let power_loss = seed % 3 != 0;
            let crashed = if power_loss {
                disk.crash(seed * 7919 + operations)
            } else {
                disk.process_crash()
            };
            let context = format!(
                "power cut after {operations} operations, seed {seed}, {} (erase -> {:?})",
                if power_loss {
                    "power loss"
                } else {
                    "process crash"
                },
                result.as_ref().map(|_| ()).map_err(ToString::to_string)
            );
            let gone = recover(&crashed, &context);
            if result.is_ok() {
                assert_eq!(
                    gone, None,
                    "{context}: an erasure that returned Ok came undone"
                );
            }
            match gone {
                None => erased += 1,
                Some(_) => whole += 1,
            }
        }
    }
    // Both outcomes occur: the cuts land before and after the point of no
    // return.
    assert!(erased > 0 && whole > 0, "erased {erased}, whole {whole}");
}

#[test]
fn a_crash_while_a_conversations_key_is_made_leaves_it_absent_or_whole() {
    for operations in 0..=OPERATIONS_MAX {
        for seed in 0..SEEDS {
            let disk = SimStorage::new(seed);
            let store = Store::open(STORE, options(&disk)).unwrap();
            store.append(&turns("kept")).unwrap();
            disk.power_cut_after(operations);
            let result = store.append(&turns("new"));
            drop(store);
            let crashed = if seed % 2 == 0 {
                disk.crash(seed + 31 * operations)
            } else {
                disk.process_crash()
            };
            let context = format!("power cut after {operations} operations, seed {seed}");
            let store = Store::open(STORE, options(&crashed))
                .unwrap_or_else(|error| panic!("{context}: open failed: {error}"));
            assert_eq!(read(&store, "kept").unwrap(), Some(3), "{context}");
            match store.conversation("new") {
                Ok(slice) => assert_eq!(slice.len(), 3, "{context}"),
                Err(Error::ConversationNotFound { .. }) => {
                    assert!(result.is_err(), "{context}: an acknowledged batch is lost")
                }
                Err(error) => panic!("{context}: {error}"),
            }
            // The store goes on: the conversation can be (re)made and erased.
            store.append(&turns("new")).unwrap();
            store.erase("new", "ops").unwrap();
            assert!(matches!(
                store.conversation("new"),
                Err(Error::Erased { .. })
            ));
            drop(store);
            verifies(&crashed, &context);
        }
    }
}
