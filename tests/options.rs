//! Every options struct built through its builder: each value set reaches
//! what it configures (the store, the log, a reader, resume, rendering,
//! the audit views, token estimates). The structs are `#[non_exhaustive]`,
//! so a host cannot write them as literals; the `compile_fail` doctest on
//! `StoreOptions` shows that.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use convlog::audit::{self, HtmlOptions, TailFormat, TailOptions, TailStart, TextOptions};
use convlog::audit::{Timeline, TimelineOptions};
use convlog::history::{ApproximateTokens, TokenEstimator};
use convlog::log::{Durability, Log, LogOptions, LogReader, ReaderOptions};
use convlog::model::{ConversationEntry, Event, ToolCall};
use convlog::provider::{self, DisplayName, PendingCalls, Provider, RenderOptions};
use convlog::resume::ResumeOptions;
use convlog::storage::sim::SimStorage;
use convlog::storage::Storage;
use convlog::store::{Retention, Store, StoreOptions};
use convlog::Error;

/// Appends `events` as one batch.
fn record(store: &Store, events: Vec<Event>) {
    store.append(&events).unwrap();
}

/// `count` user messages of about 200 bytes in conversation `c`, one batch
/// each, from sequence `first`.
fn fill(store: &Store, first: u64, count: u64) {
    for sequence in first..first + count {
        let text = format!("{sequence:04} {}", "x".repeat(200));
        record(
            store,
            vec![ConversationEntry::user("e1", sequence, text).recorded_in("c")],
        );
    }
}

fn snapshot_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("snapshots"))
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            !name.to_string_lossy().ends_with(".tmp")
        })
        .count()
}

#[test]
fn store_options_reach_the_store_and_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions::new()
        .durability(Durability::Sync)
        .segment_bytes_max(4096)
        .retention(Retention::DeleteCoveredBySnapshot)
        .snapshots_kept(1);
    // The fields stay readable.
    assert_eq!(options.log.durability, Durability::Sync);
    assert_eq!(options.log.segment_bytes_max, 4096);
    assert_eq!(options.retention, Retention::DeleteCoveredBySnapshot);
    assert_eq!(options.snapshots_kept, 1);
    assert_eq!(options.snapshot_every_events, None);

    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.log().durability(), Durability::Sync);
    fill(&store, 0, 100);
    // 100 events of about 200 bytes: many segments of 4 KiB (the default
    // 64 MiB would hold them all in one).
    let segments = common::segment_paths(dir.path()).len();
    assert!(segments > 3, "{segments} segments");
    store.snapshot().unwrap();
    // `DeleteCoveredBySnapshot` lets compaction delete (`KeepAll` would not).
    let compacted = store.compact().unwrap();
    assert!(!compacted.removed.is_empty(), "{compacted:?}");
    fill(&store, 100, 5);
    store.snapshot().unwrap();
    assert_eq!(snapshot_files(dir.path()), 1, "snapshots_kept(1)");
}

#[test]
fn store_log_setters_and_log_options_combine() {
    let options = StoreOptions::new()
        .log(LogOptions::new().salvage(true).segment_bytes_max(8192))
        .durability(Durability::None)
        .snapshot_every_events(Some(1_000))
        .snapshot_every_bytes(Some(1 << 20));
    assert!(options.log.salvage);
    assert_eq!(options.log.segment_bytes_max, 8192);
    assert_eq!(options.log.durability, Durability::None);
    assert_eq!(options.snapshot_every_events, Some(1_000));
    assert_eq!(options.snapshot_every_bytes, Some(1 << 20));
    // `log` replaces every log setting, those set before it included.
    let replaced = StoreOptions::new()
        .durability(Durability::Sync)
        .log(LogOptions::new());
    assert_eq!(replaced.log.durability, Durability::Group);

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.log().durability(), Durability::None);
}

#[test]
fn store_storage_setter_keeps_the_store_off_the_real_disk() {
    let storage = SimStorage::new(7);
    let outside = tempfile::tempdir().unwrap();
    let dir = outside.path().join("on-the-simulated-disk");
    let store = Store::open(&dir, StoreOptions::new().storage(Arc::new(storage.clone()))).unwrap();
    fill(&store, 0, 3);
    store.sync().unwrap();
    drop(store);
    assert!(!dir.exists(), "nothing on the real file system");
    assert!(!storage.list_dir(&dir).unwrap().is_empty());
    // A reader reads through the storage it is given.
    let reader =
        LogReader::open_with(&dir, ReaderOptions::new().storage(Arc::new(storage))).unwrap();
    assert_eq!(reader.iter().count(), 3);
}

#[test]
fn create_in_nonempty_dir_reaches_the_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"the host's").unwrap();
    assert!(matches!(
        Store::open(dir.path(), StoreOptions::new()),
        Err(Error::DirectoryNotEmpty { .. })
    ));
    let store = Store::open(dir.path(), StoreOptions::new().create_in_nonempty_dir(true)).unwrap();
    fill(&store, 0, 1);
    drop(store);
    let log = Log::open(dir.path(), LogOptions::new().create_in_nonempty_dir(true)).unwrap();
    assert_eq!(log.next_lsn(), 2);
}

/// A store of several small segments whose first segment is damaged in
/// its middle.
fn damaged_store(dir: &Path) {
    let store = Store::open(dir, StoreOptions::new().segment_bytes_max(4096)).unwrap();
    fill(&store, 0, 60);
    drop(store);
    let segments = common::segment_paths(dir);
    assert!(segments.len() > 2);
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&segments[0], bytes).unwrap();
}

#[test]
fn salvage_reaches_the_store_the_log_and_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    damaged_store(dir.path());
    // A reader stops quietly at the damage only when asked to.
    let strict = LogReader::open(dir.path()).unwrap();
    assert!(strict.iter().any(|record| record.is_err()));
    let salvaging = LogReader::open_with(dir.path(), ReaderOptions::new().salvage(true)).unwrap();
    let read = salvaging
        .iter()
        .collect::<convlog::Result<Vec<_>>>()
        .unwrap();
    assert!(!read.is_empty() && read.len() < 60, "{} read", read.len());

    let options = StoreOptions::new().segment_bytes_max(4096);
    assert!(matches!(
        Store::open(dir.path(), options.clone()),
        Err(Error::Corrupted { .. })
    ));
    let store = Store::open(dir.path(), options.salvage(true)).unwrap();
    assert!(store.open_report().recovery.salvaged.is_some());
}

#[test]
fn log_options_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogOptions::new()
            .durability(Durability::Sync)
            .segment_bytes_max(4096),
    )
    .unwrap();
    assert_eq!(log.durability(), Durability::Sync);
    for index in 0..40u8 {
        log.append(&[[index; 300]]).unwrap();
    }
    assert!(common::segment_paths(dir.path()).len() > 1);
    // Validation stays on open, with a clear error.
    let error = Log::open(
        tempfile::tempdir().unwrap().path(),
        LogOptions::new().segment_bytes_max(10),
    )
    .unwrap_err();
    assert!(
        matches!(
            &error,
            convlog::Error::InvalidOption { option, reason }
                if option.ends_with("segment_bytes_max") && reason.contains("it is 10")
        ),
        "{error}"
    );
}

fn two_evaluations(dir: &Path) -> Store {
    let store = Store::open(dir, StoreOptions::new()).unwrap();
    let call = ToolCall::new("call_1", "weather", r#"{"city":"Oslo"}"#);
    record(
        &store,
        vec![
            ConversationEntry::user("e1", 1, "Weather in Oslo?").recorded_in("c"),
            ConversationEntry::assistant_calling("e1", 2, [call]).recorded_in("c"),
            ConversationEntry::user("e2", 1, "And in Bergen?").recorded_in("c"),
        ],
    );
    store
}

#[test]
fn resume_options_choose_the_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_evaluations(dir.path());
    let latest = store.resume("c", &ResumeOptions::new()).unwrap();
    assert_eq!(latest.evaluation_id, "e2");
    let options = ResumeOptions::new().evaluation_id(Some("e1".to_string()));
    let first = store.resume("c", &options).unwrap();
    assert_eq!(first.evaluation_id, "e1");
    assert_eq!(first.unfinished_calls.len(), 1);
}

#[test]
fn render_options_reach_the_rendered_request() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_evaluations(dir.path());
    let conversation = store.conversation("c").unwrap();
    let options = RenderOptions::new()
        .pending(PendingCalls::SyntheticError)
        .default_system_prompt(Some("You are Wolo.".to_string()))
        .display_name(Some(DisplayName::new("Wolo", "CodeHelper")))
        .include_reasoning(false);
    assert!(!options.include_reasoning);
    let request = provider::render(Provider::OpenAiChat, conversation.entries(), &options).unwrap();
    assert_eq!(request.messages[0]["role"], "system");
    assert_eq!(request.messages[0]["content"], "You are CodeHelper.");
    // The pending call is answered with an error result, not dropped.
    assert!(request
        .messages
        .iter()
        .any(|message| message["role"] == "tool" && message["tool_call_id"] == "call_1"));
    let dropped = provider::render(
        Provider::OpenAiChat,
        conversation.entries(),
        &RenderOptions::new(),
    )
    .unwrap();
    assert!(!dropped
        .messages
        .iter()
        .any(|message| message["role"] == "tool" || message["role"] == "system"));
}

#[test]
fn audit_options_reach_the_views() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_evaluations(dir.path());
    let cut =
        Timeline::from_store(&store, "c", &TimelineOptions::new().text_chars(Some(5))).unwrap();
    let whole =
        Timeline::from_store(&store, "c", &TimelineOptions::new().text_chars(None)).unwrap();
    let cut_json = serde_json::to_string(&cut).unwrap();
    assert!(cut_json.contains("\"truncated\":true"), "{cut_json}");
    assert!(!serde_json::to_string(&whole)
        .unwrap()
        .contains("\"truncated\":true"));

    let text = |options: &TextOptions| {
        let mut out = Vec::new();
        audit::write_timeline_text_with(&mut out, &whole, options).unwrap();
        String::from_utf8(out).unwrap()
    };
    assert!(text(&TextOptions::new().color(true).width(120)).contains('\u{1b}'));
    assert!(!text(&TextOptions::new().show_reasoning(true)).contains('\u{1b}'));

    let mut page = Vec::new();
    let html = HtmlOptions::new()
        .title(Some("Trip to Oslo".to_string()))
        .store(Some("the-store".to_string()))
        .generated_at(None);
    audit::write_html(&mut page, &whole, &html).unwrap();
    let page = String::from_utf8(page).unwrap();
    assert!(page.contains("<title>Trip to Oslo</title>"), "{page}");
    assert!(page.contains("the-store"));

    drop(store);
    let mut out = Vec::new();
    let tail = TailOptions::new()
        .start(TailStart::Beginning)
        .format(TailFormat::Json)
        .conversation(Some("c".to_string()))
        .max_events(Some(2))
        .follow(false)
        .idle_timeout(None)
        .poll_interval(Duration::from_millis(10));
    let report = audit::tail(dir.path(), &mut out, &tail, &mut || false).unwrap();
    assert_eq!(report.printed, 2);
    assert_eq!(String::from_utf8(out).unwrap().lines().count(), 2);
}

#[test]
fn approximate_tokens_settings_reach_the_estimate() {
    let entry = ConversationEntry::user("e1", 1, "abcdefgh"); // 8 bytes
    assert_eq!(ApproximateTokens::new().estimate(&entry), 8 / 4 + 4);
    let estimator = ApproximateTokens::new()
        .bytes_per_token(1)
        .message_overhead(0)
        .call_overhead(100);
    assert_eq!(estimator.estimate(&entry), 8);
    let calling = ConversationEntry::assistant_calling("e1", 2, [ToolCall::new("a", "b", "c")]);
    assert_eq!(estimator.estimate(&calling), 3 + 100);
}

/// Regression: a zero snapshot threshold and `snapshots_kept(0)` were taken
/// silently (a snapshot after every append; 0 read as 1). Each is refused
/// by name when the store opens, before anything is created.
#[test]
fn store_options_that_can_never_be_valid_are_refused_by_name() {
    let cases = [
        (
            StoreOptions::new().snapshot_every_events(Some(0)),
            "StoreOptions::snapshot_every_events",
        ),
        (
            StoreOptions::new().snapshot_every_bytes(Some(0)),
            "StoreOptions::snapshot_every_bytes",
        ),
        (
            StoreOptions::new().snapshots_kept(0),
            "StoreOptions::snapshots_kept",
        ),
    ];
    for (options, named) in cases {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("store");
        for opened in [
            Store::open(&dir, options.clone()),
            Store::open_read_only(&dir, options.clone()),
        ] {
            match opened {
                Err(convlog::Error::InvalidOption { option, .. }) => assert_eq!(option, named),
                other => panic!("{named}: expected InvalidOption, got {other:?}"),
            }
        }
        assert!(!dir.exists(), "{named}: nothing was created");
    }
}
