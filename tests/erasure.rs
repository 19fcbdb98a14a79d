//! Encryption at rest and erasure (docs/erasure.md): what is sealed, what a
//! store opened without its key says, `Store::erase` and what it leaves,
//! snapshots and compaction of an encrypted store, read-only openers.

use std::path::{Path, PathBuf};

use convlog::erasure::{Erasure, StoreKey, ERASED_KIND, KEY_MADE_KIND, KEY_TABLE_FILE};
use convlog::log::LogReader;
use convlog::model::{ConversationEntry, CustomEvent, Event, Role, ToolCall, ToolStatus};
use convlog::{Error, Retention, Store, StoreOptions};

const SECRET: &str = "SECRET-7f3a-the-users-address";

fn key() -> StoreKey {
    StoreKey::from_bytes([0x42; 32])
}

fn encrypted() -> StoreOptions {
    StoreOptions::new().encryption(Some(key()))
}

/// A conversation whose every sealed field holds `SECRET`: content,
/// reasoning, tool arguments, a tool result, metadata.
fn secret_turns(conversation: &str) -> Vec<Event> {
    let mut question = ConversationEntry::user("eval-1", 0, format!("where do I live? {SECRET}"));
    question
        .metadata
        .insert("note".into(), format!("meta {SECRET}"));
    let mut answer = ConversationEntry::new("eval-1", 1, Role::Assistant, None);
    answer.tool_calls.push(ToolCall {
        call_id: "call-1".into(),
        name: "lookup".into(),
        arguments: format!("{{\"q\":\"{SECRET}\"}}"),
        status: ToolStatus::Pending,
        started_at: None,
        ended_at: None,
        error: None,
    });
    let mut result =
        ConversationEntry::new("eval-1", 2, Role::Tool, Some(format!("found {SECRET}")));
    result.tool_call_id = Some("call-1".into());
    vec![
        question.recorded_in(conversation),
        answer.recorded_in(conversation),
        result.recorded_in(conversation),
    ]
}

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else if std::fs::read(&path)
            .unwrap()
            .windows(needle.len())
            .any(|window| window == needle.as_bytes())
        {
            found.push(path);
        }
    }
    found
}

fn custom_events(dir: &Path, kind: &str) -> Vec<(u64, CustomEvent)> {
    LogReader::open(dir)
        .unwrap()
        .iter()
        .map(|record| record.unwrap())
        .filter_map(|record| match record.event().unwrap() {
            Event::Custom(custom) if custom.kind == kind => Some((record.lsn, custom)),
            _ => None,
        })
        .collect()
}

#[test]
fn content_is_sealed_at_rest_and_reads_back_whole() {
    let turns = secret_turns("ctx");
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Store::open(plain_dir.path(), StoreOptions::new()).unwrap();
    plain.append(&turns).unwrap();
    plain.snapshot().unwrap();
    // The check below can see the secret when it is there.
    assert!(!files_containing(plain_dir.path(), SECRET).is_empty());

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    assert!(store.is_encrypted());
    let lsns = store.append(&turns).unwrap();
    // The key event goes first in the batch; the caller's LSNs are its own.
    assert_eq!(lsns, 2..5);
    store.append(&secret_turns("other")).unwrap();
    store.snapshot().unwrap();
    let entries = |slice: convlog::ConversationSlice| -> Vec<ConversationEntry> {
        slice.entries().cloned().collect()
    };
    assert_eq!(
        entries(store.conversation("ctx").unwrap()),
        entries(plain.conversation("ctx").unwrap()),
        "the folded conversation is the same as in the clear"
    );
    store
        .append(&[
            ConversationEntry::assistant("eval-1", 3, format!("tail {SECRET}")).recorded_in("ctx"),
        ])
        .unwrap();
    drop(store);
    assert_eq!(files_containing(dir.path(), SECRET), Vec::<PathBuf>::new());
    // Reopened from the (sealed) snapshot and the tail.
    let store = Store::open(dir.path(), encrypted()).unwrap();
    let slice = store.conversation("ctx").unwrap();
    assert_eq!(slice.len(), 4);
    let last = slice.entries().last().unwrap();
    assert!(last.content.as_deref().unwrap().contains(SECRET));
    assert_eq!(custom_events(dir.path(), KEY_MADE_KIND).len(), 2);
    assert_eq!(store.conversation_ids(), ["ctx", "other"]);
}

#[test]
fn an_encrypted_store_does_not_open_without_its_key() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), encrypted())
        .unwrap()
        .append(&secret_turns("ctx"))
        .unwrap();
    let without = Store::open(dir.path(), StoreOptions::new()).unwrap_err();
    assert!(
        matches!(&without, Error::Encryption { reason, .. } if reason.contains("open it with its store key")),
        "{without}"
    );
    let read_only = Store::open_read_only(dir.path(), StoreOptions::new()).unwrap_err();
    assert!(matches!(read_only, Error::Encryption { .. }), "{read_only}");
    let wrong = StoreOptions::new().encryption(Some(StoreKey::from_bytes([1; 32])));
    let wrong = Store::open(dir.path(), wrong).unwrap_err();
    assert!(
        matches!(&wrong, Error::Encryption { reason, .. } if reason.contains("not this store's key")),
        "{wrong}"
    );
}

#[test]
fn erasure_destroys_one_conversation_and_leaves_the_rest_verifiable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    store.append(&secret_turns("gone")).unwrap();
    store.append(&secret_turns("kept")).unwrap();
    let kept = store.conversation("kept").unwrap();
    let report = store.erase("gone", "ticket 4711").unwrap();
    let lsn = report.lsn.expect("this call erased it");
    let erased = |result: convlog::Result<_>| matches!(result, Err(Error::Erased { conversation_id }) if conversation_id == "gone");
    assert!(erased(store.conversation("gone").map(|_| ())));
    let again = ConversationEntry::user("eval-2", 0, "more").recorded_in("gone");
    assert!(erased(store.append(&[again]).map(|_| ())));
    assert_eq!(store.conversation("kept").unwrap(), kept);
    assert_eq!(store.conversation_ids(), ["kept"]);
    assert_eq!(store.erased_conversations(), ["gone"]);
    assert!(store.is_erased("gone") && store.contains_conversation("gone"));
    // Erasing again is done already.
    assert_eq!(store.erase("gone", "twice").unwrap().lsn, None);
    drop(store);

    // The audit trail: one erasure event, who and which.
    let events = custom_events(dir.path(), ERASED_KIND);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, lsn);
    let erasure = Erasure::from_event(&Event::Custom(events[0].1.clone()))
        .unwrap()
        .unwrap();
    assert_eq!(
        (erasure.conversation_id.as_str(), erasure.by.as_str()),
        ("gone", "ticket 4711")
    );
    // The log, its chain and the other conversation verify.
    convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    assert!(erased(store.conversation("gone").map(|_| ())));
    assert_eq!(store.conversation("kept").unwrap(), kept);
    // A snapshot after the erasure holds nothing of it.
    let info = store.snapshot().unwrap();
    assert_eq!(info.conversations, 1);
    assert!(erased(store.conversation("gone").map(|_| ())));
}

/// The erasure's claim: a copy of the key table taken before the erasure
/// (a stale backup) put back beside the log still does not read the
/// conversation, because the log records the erasure.
#[test]
fn an_old_key_table_put_back_does_not_undo_the_erasure() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    store.append(&secret_turns("gone")).unwrap();
    drop(store);
    let table = dir.path().join(KEY_TABLE_FILE);
    let before = std::fs::read(&table).unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    store.erase("gone", "ops").unwrap();
    drop(store);
    let after = std::fs::read(&table).unwrap();
    assert!(
        after.len() < before.len() + 100,
        "the key record is gone, not appended to"
    );
    std::fs::write(&table, &before).unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    assert!(matches!(
        store.conversation("gone"),
        Err(Error::Erased { .. })
    ));
}

#[test]
fn compaction_drops_an_erased_conversations_frames_and_keeps_the_others_readable() {
    let dir = tempfile::tempdir().unwrap();
    let options = encrypted()
        .segment_bytes_max(4096)
        .retention(Retention::DeleteCoveredBySnapshot);
    let store = Store::open(dir.path(), options.clone()).unwrap();
    store.append(&secret_turns("gone")).unwrap();
    store.append(&secret_turns("kept")).unwrap();
    for turn in 0..40 {
        let entry = ConversationEntry::user(format!("eval-{turn}"), 0, "x".repeat(200));
        store.append(&[entry.recorded_in("filler")]).unwrap();
    }
    let kept = store.conversation("kept").unwrap();
    store.erase("gone", "ops").unwrap();
    store.snapshot().unwrap();
    let report = store.compact().unwrap();
    assert!(!report.removed.is_empty(), "{report:?}");
    assert!(
        store.log().first_lsn() > 8,
        "the key events and both conversations' frames are gone"
    );
    drop(store);
    let store = Store::open(dir.path(), options).unwrap();
    // Read from its sealed snapshot slice, with the key from the key table.
    assert_eq!(store.conversation("kept").unwrap(), kept);
    assert!(matches!(
        store.conversation("gone"),
        Err(Error::Erased { .. })
    ));
}

#[test]
fn the_store_refuses_appends_of_its_own_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    store.append(&secret_turns("ctx")).unwrap();
    for kind in [ERASED_KIND, KEY_MADE_KIND, convlog::erasure::SEALED_KIND] {
        let forged = Event::Custom(CustomEvent {
            kind: kind.to_string(),
            conversation_id: Some("ctx".into()),
            payload: b"{}".to_vec(),
        });
        let error = store.append(&[forged]).unwrap_err();
        assert!(
            matches!(&error, Error::InvalidEvent { index: 0, field } if field.field == "kind"),
            "{error}"
        );
    }
    assert_eq!(store.conversation("ctx").unwrap().len(), 3);
}

#[test]
fn a_store_encrypted_later_keeps_its_old_conversations_in_the_clear() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), StoreOptions::new())
        .unwrap()
        .append(&secret_turns("old"))
        .unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    store
        .append(&[ConversationEntry::assistant("eval-1", 3, "still clear").recorded_in("old")])
        .unwrap();
    store.append(&secret_turns("new")).unwrap();
    assert_eq!(store.conversation("old").unwrap().len(), 4);
    let error = store.erase("old", "ops").unwrap_err();
    assert!(
        matches!(&error, Error::Encryption { reason, .. } if reason.contains("recorded in the clear")),
        "{error}"
    );
    let missing = store.erase("never", "ops").unwrap_err();
    assert!(
        matches!(missing, Error::ConversationNotFound { .. }),
        "{missing}"
    );
    store.erase("new", "ops").unwrap();
    assert!(matches!(
        store.conversation("new"),
        Err(Error::Erased { .. })
    ));
}

#[test]
fn a_store_without_a_key_cannot_erase() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    store.append(&secret_turns("ctx")).unwrap();
    let error = store.erase("ctx", "ops").unwrap_err();
    assert!(
        matches!(&error, Error::Encryption { reason, .. } if reason.contains("without a store key")),
        "{error}"
    );
    assert!(!dir.path().join(KEY_TABLE_FILE).exists());
}

#[test]
fn a_read_only_opener_reads_new_keys_and_sees_erasures() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), encrypted()).unwrap();
    writer.append(&secret_turns("first")).unwrap();
    let reader = Store::open_read_only(dir.path(), encrypted()).unwrap();
    assert_eq!(reader.conversation("first").unwrap().len(), 3);
    // A conversation (and key) made after the reader opened.
    writer.append(&secret_turns("second")).unwrap();
    reader.refresh().unwrap();
    assert_eq!(reader.conversation("second").unwrap().len(), 3);
    writer.erase("first", "ops").unwrap();
    reader.refresh().unwrap();
    assert!(matches!(
        reader.conversation("first"),
        Err(Error::Erased { .. })
    ));
    assert_eq!(reader.erased_conversations(), ["first"]);
}

#[cfg(unix)]
#[test]
fn key_files_are_checked() {
    use std::os::unix::fs::PermissionsExt;
    let keys = tempfile::tempdir().unwrap();
    let path = keys.path().join("store.key");
    let made = StoreKey::generate_file(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let read = StoreKey::from_file(&path).unwrap();
    // The same key: a store made with one opens with the other.
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), StoreOptions::new().encryption(Some(made)))
        .unwrap()
        .append(&secret_turns("ctx"))
        .unwrap();
    let store = Store::open(dir.path(), StoreOptions::new().encryption(Some(read))).unwrap();
    assert_eq!(store.conversation("ctx").unwrap().len(), 3);
    drop(store);
    for exposed in [0o644, 0o640, 0o604, 0o660] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(exposed)).unwrap();
        let error = StoreKey::from_file(&path).unwrap_err();
        assert!(
            matches!(&error, Error::KeyFile { reason, .. } if reason.contains("chmod 600")),
            "{exposed:o}: {error}"
        );
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(
        StoreKey::generate_file(&path).is_err(),
        "never overwrites a key file"
    );
    let bad = keys.path().join("bad.key");
    std::fs::write(&bad, "zz".repeat(32)).unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    let error = StoreKey::from_file(&bad).unwrap_err();
    assert!(
        error.to_string().contains("not a hexadecimal byte"),
        "{error}"
    );
    // A key kept inside the store directory is refused.
    let inside = dir.path().join("inside.key");
    let key = StoreKey::generate_file(&inside).unwrap();
    let error = Store::open(dir.path(), StoreOptions::new().encryption(Some(key))).unwrap_err();
    assert!(
        matches!(&error, Error::KeyFile { reason, .. } if reason.contains("inside the store directory")),
        "{error}"
    );
}

#[test]
fn a_backup_carries_the_key_table_and_reads_with_the_store_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    store.append(&secret_turns("kept")).unwrap();
    store.append(&secret_turns("gone")).unwrap();
    store.erase("gone", "ops").unwrap();
    let kept = store.conversation("kept").unwrap();
    let copies = tempfile::tempdir().unwrap();
    let dest = copies.path().join("backup");
    convlog::store::backup(dir.path(), &dest, &mut |_| {}).unwrap();
    drop(store);
    assert!(dest.join(KEY_TABLE_FILE).exists());
    assert_eq!(files_containing(&dest, SECRET), Vec::<PathBuf>::new());
    let copy = Store::open(&dest, encrypted()).unwrap();
    assert_eq!(copy.conversation("kept").unwrap(), kept);
    assert!(matches!(
        copy.conversation("gone"),
        Err(Error::Erased { .. })
    ));
    drop(copy);
    assert!(matches!(
        Store::open(&dest, StoreOptions::new()),
        Err(Error::Encryption { .. })
    ));
}

/// Host reducers fold the events as appended, opened, both live and when
/// the store replays the log on open: the two slices are the same.
#[test]
fn host_reducers_fold_the_same_events_live_and_on_replay() {
    struct Contents;
    impl convlog::Reducer for Contents {
        type Slice = Vec<String>;
        fn name(&self) -> &str {
            "contents/v1"
        }
        fn apply(&self, slice: &mut Vec<String>, event: &Event, _lsn: u64) {
            slice.push(match event {
                Event::ConversationRecorded(recorded) => {
                    recorded.entry.content.clone().unwrap_or_default()
                }
                Event::Custom(custom) => custom.kind.clone(),
                _ => "other".to_string(),
            });
        }
    }
    let open = |dir: &Path| {
        convlog::StoreBuilder::new(dir)
            .options(encrypted())
            .reducer(Contents)
            .open()
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&secret_turns("a")).unwrap();
    store.append(&secret_turns("b")).unwrap();
    let live = store.slice::<Contents>().unwrap();
    assert_eq!(live.len(), 8);
    assert_eq!(live[0], KEY_MADE_KIND);
    assert!(live[1].contains(SECRET));
    drop(store);
    let replayed = open(dir.path()).slice::<Contents>().unwrap();
    assert_eq!(replayed, live);
}

/// A lost key table (`keys` deleted, or a copy of the store without it):
/// opening with the store key is refused, naming the file and saying what
/// it held, and leaves no new, empty table behind (which would bury the
/// loss); a store opened read-only without a key says the table is missing
/// when a sealed conversation is read. Putting the file back restores reads.
#[test]
fn a_missing_key_table_is_named_and_not_replaced_by_an_empty_one() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), encrypted()).unwrap();
        store.append(&secret_turns("ctx")).unwrap();
    }
    let table = dir.path().join(KEY_TABLE_FILE);
    let kept = std::fs::read(&table).unwrap();
    std::fs::remove_file(&table).unwrap();

    for read_only in [false, true] {
        let opened = if read_only {
            Store::open_read_only(dir.path(), encrypted())
        } else {
            Store::open(dir.path(), encrypted())
        };
        let Err(error) = opened else {
            panic!("a store without its key table is refused");
        };
        let error = error.to_string();
        assert!(error.contains(&table.display().to_string()), "{error}");
        assert!(error.contains("is missing"), "{error}");
        assert!(error.contains("conversation \"ctx\""), "{error}");
        assert!(!table.exists(), "no new table was made");
    }
    let error = Store::open_read_only(dir.path(), StoreOptions::default())
        .unwrap()
        .conversation("ctx")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("key table {} is missing", table.display())),
        "{error}"
    );

    std::fs::write(&table, kept).unwrap();
    let store = Store::open(dir.path(), encrypted()).unwrap();
    assert_eq!(store.conversation("ctx").unwrap().entries().count(), 3);
}

/// A writer opened without the store key on an encrypted store whose key
/// table is missing is refused, whether the open finds the store encrypted
/// in the log it replays or in the snapshot it starts from (which then
/// covers the whole log): it would otherwise append events in the clear,
/// to a sealed conversation or a new one. Nothing is written; a reader
/// still opens; a store that never had a key opens as before.
#[test]
fn a_writer_without_the_key_is_refused_on_an_encrypted_store_without_its_key_table() {
    for snapshot in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), encrypted()).unwrap();
            store.append(&secret_turns("ctx")).unwrap();
            if snapshot {
                // The snapshot covers every event: the open replays nothing.
                store.snapshot().unwrap();
            }
        }
        let table = dir.path().join(KEY_TABLE_FILE);
        std::fs::remove_file(&table).unwrap();
        let before = log_records(dir.path());

        let Err(error) = Store::open(dir.path(), StoreOptions::default()) else {
            panic!("snapshot {snapshot}: a writer without the key is refused");
        };
        assert!(matches!(error, Error::Encryption { .. }), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("opened for writing without its store key"),
            "{message}"
        );
        assert!(message.contains(&table.display().to_string()), "{message}");
        let evidence = if snapshot {
            "its snapshot at LSN 5"
        } else {
            "conversation \"ctx\" at LSN 1"
        };
        assert!(message.contains(evidence), "{message}");
        assert_eq!(log_records(dir.path()), before, "nothing written");
        assert!(!table.exists());

        // A reader opens, and says why the conversation cannot be read.
        let reader = Store::open_read_only(dir.path(), StoreOptions::default()).unwrap();
        assert!(reader.conversation("ctx").is_err());
    }
    // A store that never had a key, with a snapshot and a tail, opens
    // without one as always.
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        store.append(&secret_turns("plain")).unwrap();
        store.snapshot().unwrap();
        store.append(&secret_turns("later")).unwrap();
    }
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store.append(&secret_turns("new")).unwrap();
    assert_eq!(store.conversation("plain").unwrap().len(), 3);
}

/// Every record of the log in `dir`: LSN and payload.
fn log_records(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    LogReader::open(dir)
        .unwrap()
        .iter()
        .map(|record| {
            let record = record.unwrap();
            (record.lsn, record.payload)
        })
        .collect()
}
