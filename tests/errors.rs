//! `convlog::Error` as a host meets it: every failure of the library is a
//! variant of this one type, matched by name, with the fields a host acts
//! on and a message that says what was wrong and where.
//!
//! Each test provokes the failure through the public API where it can be
//! provoked; the few that need a damaged disk or a race at the wrong moment
//! (a snapshot that cannot be bound, a backup whose source keeps changing)
//! are built by hand to pin their messages.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::json;

use convlog::control::{ContextsReducer, ControlMessage, MessageControl, Principal};
use convlog::history::SummaryPlaceholder;
use convlog::json;
use convlog::log::{Durability, Log, LogOptions, LogReader, Position};
use convlog::model::{ConversationEntry, CustomEvent, Event, Timestamp, ToolCall};
use convlog::provider::{self, Provider, RenderOptions};
use convlog::reducer::Reducer;
use convlog::resume::ResumeOptions;
use convlog::store::{backup, StoreBuilder};
use convlog::Error;

fn custom() -> Event {
    Event::Custom(CustomEvent {
        kind: "k".into(),
        conversation_id: None,
        payload: vec![1],
    })
}

fn control() -> (tempfile::TempDir, MessageControl) {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path())
        .reducer(ContextsReducer)
        .open()
        .unwrap();
    (dir, MessageControl::new(Arc::new(store)))
}

#[test]
fn an_empty_batch_is_empty_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path()).open().unwrap();
    let error = store.append(&[]).unwrap_err();
    assert!(matches!(error, Error::EmptyBatch), "{error:?}");
    assert_eq!(error.to_string(), "a batch needs at least one event");
    assert_eq!(store.log().next_lsn(), 1, "nothing was appended");
}

#[test]
fn impossible_options_are_invalid_option_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions::new().segment_bytes_max(10);
    match Log::open(dir.path(), options) {
        Err(Error::InvalidOption { option, reason }) => {
            assert_eq!(option, "LogOptions::segment_bytes_max");
            assert!(reason.contains("it is 10"), "{reason}");
            assert!(reason.contains("SEGMENT_BYTES_MIN"), "{reason}");
        }
        other => panic!("expected InvalidOption, got {other:?}"),
    }

    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let error = log
        .append_with(&[b"x"], Durability::Periodic(Duration::ZERO))
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidOption {
                option: "durability",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "invalid option durability: Durability::Periodic needs a non-zero interval"
    );

    let tool = ConversationEntry::tool_result("e", 0, "call_1", "t", "done");
    match SummaryPlaceholder::with_entry(100, tool, convlog::history::ApproximateTokens::default())
    {
        Err(Error::InvalidOption { option, reason }) => {
            assert_eq!(option, "SummaryPlaceholder::with_entry summary");
            assert!(reason.contains("must not be a tool result"), "{reason}");
        }
        Err(other) => panic!("expected InvalidOption, got {other:?}"),
        Ok(_) => panic!("a tool result was accepted as a summary entry"),
    }
}

#[test]
fn an_unknown_evaluation_is_evaluation_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path()).open().unwrap();
    store
        .append(&[ConversationEntry::user("e1", 0, "hi").recorded_in("trip")])
        .unwrap();
    let options = ResumeOptions::new().evaluation_id(Some("e9".into()));
    match store.resume("trip", &options) {
        Err(
            ref error @ Error::EvaluationNotFound {
                ref conversation_id,
                ref evaluation_id,
            },
        ) => {
            assert_eq!(
                (conversation_id.as_str(), evaluation_id.as_str()),
                ("trip", "e9")
            );
            assert_eq!(
                error.to_string(),
                r#"conversation "trip" has no evaluation "e9""#
            );
        }
        other => panic!("expected EvaluationNotFound, got {other:?}"),
    }
}

#[test]
fn a_position_of_no_segment_is_position_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.append(&[b"one"]).unwrap();
    drop(log);
    let reader = LogReader::open(dir.path()).unwrap();
    let position = Position {
        segment: 999,
        offset: 64,
    };
    match reader.read_frame(position) {
        Err(
            ref error @ Error::PositionNotFound {
                ref store,
                segment,
                offset,
            },
        ) => {
            assert_eq!(store, dir.path());
            assert_eq!((segment, offset), (999, 64));
            let text = error.to_string();
            assert!(text.contains("no segment starts at LSN 999"), "{text}");
            assert!(text.contains("999:64"), "{text}");
        }
        other => panic!("expected PositionNotFound, got {other:?}"),
    }
}

#[test]
fn an_event_without_a_json_form_is_json_encode_with_its_lsn() {
    let mut event = ConversationEntry::user("e", 0, "hi").recorded_in("c");
    if let Event::ConversationRecorded(recorded) = &mut event {
        recorded.created_at = Timestamp(-1);
    }
    match json::to_json_line(42, &event) {
        Err(Error::JsonEncode { lsn, reason }) => {
            assert_eq!(lsn, 42);
            assert!(!reason.is_empty());
        }
        other => panic!("expected JsonEncode, got {other:?}"),
    }
}

#[test]
fn a_rejected_input_line_is_invalid_line_with_line_and_field() {
    let text = r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"robot"}}"#;
    match json::parse_line(3, text, &mut |_, _| Ok(0)) {
        Err(
            ref error @ Error::InvalidLine {
                line,
                ref field,
                ref reason,
            },
        ) => {
            assert_eq!(line, 3);
            assert_eq!(field.as_deref(), Some("entry.role"));
            assert!(reason.contains("robot"), "{reason}");
            assert_eq!(error.to_string(), format!("line 3: entry.role: {reason}"));
        }
        other => panic!("expected InvalidLine, got {other:?}"),
    }
    match json::parse_line(5, "not json", &mut |_, _| Ok(0)) {
        Err(
            ref error @ Error::InvalidLine {
                line: 5,
                field: None,
                ref reason,
            },
        ) => {
            assert_eq!(error.to_string(), format!("line 5: {reason}"));
        }
        other => panic!("expected InvalidLine without a field, got {other:?}"),
    }
}

#[test]
fn provider_failures_are_variants_naming_provider_and_path() {
    let created = Timestamp(0);
    match provider::to_entries(
        Provider::Anthropic,
        &json!([{"role": "user", "content": [{"type": "image", "source": {}}]}]),
        "e",
        0,
        created,
    ) {
        Err(
            ref error @ Error::ProviderUnsupported {
                provider,
                ref path,
                ref what,
            },
        ) => {
            assert_eq!(provider, Provider::Anthropic);
            assert_eq!(path, "messages[0].content[0]");
            assert!(what.contains("image"), "{what}");
            assert!(error.to_string().contains("is not supported"), "{error}");
        }
        other => panic!("expected ProviderUnsupported, got {other:?}"),
    }
    match provider::to_entries(Provider::OpenAiChat, &json!([42]), "e", 0, created) {
        Err(Error::ProviderMalformed { provider, path, .. }) => {
            assert_eq!(provider, Provider::OpenAiChat);
            assert_eq!(path, "messages[0]");
        }
        other => panic!("expected ProviderMalformed, got {other:?}"),
    }
    let call = ToolCall::new("a", "t", "{}");
    let entries = [
        ConversationEntry::assistant_calling("e", 1, [call.clone()]),
        ConversationEntry::assistant_calling("e", 2, [call]),
    ];
    match provider::render(Provider::OpenAiChat, &entries, &RenderOptions::default()) {
        Err(
            ref error @ Error::DuplicateCallId {
                ref call_id,
                first_sequence,
                second_sequence,
            },
        ) => {
            assert_eq!(
                (call_id.as_str(), first_sequence, second_sequence),
                ("a", 1, 2)
            );
            assert_eq!(
                error.to_string(),
                r#"tool call id "a" appears in two assistant entries (sequences 1 and 2); results cannot be paired with calls"#
            );
        }
        other => panic!("expected DuplicateCallId, got {other:?}"),
    }
}

/// The message-control texts are an HTTP contract (`docs/history.md`): they
/// stay exactly as they were when they were `ControlError`'s.
#[test]
fn message_control_failures_are_variants_with_their_fixed_texts() {
    let (_dir, control) = control();
    let alice = Principal::user("alice");
    let bob = Principal::user("bob");

    match control.messages(&alice, "ctx_404") {
        Err(ref error @ Error::ContextNotFound { ref context_id }) => {
            assert_eq!(context_id, "ctx_404");
            assert_eq!(error.to_string(), "Context with id: ctx_404 does not exist");
        }
        other => panic!("expected ContextNotFound, got {other:?}"),
    }
    match control.create_context(&Principal::Anonymous, "ctx_anon", false) {
        Err(ref error @ Error::AnonymousPrivateContext { ref context_id }) => {
            assert_eq!(context_id, "ctx_anon");
            assert_eq!(
                error.to_string(),
                "an anonymous principal can only create public contexts"
            );
        }
        other => panic!("expected AnonymousPrivateContext, got {other:?}"),
    }
    control.create_context(&alice, "ctx", false).unwrap();
    match control.create_context(&alice, "ctx", false) {
        Err(ref error @ Error::ContextExists { ref context_id }) => {
            assert_eq!(context_id, "ctx");
            assert_eq!(error.to_string(), "Context with id: ctx already exists");
        }
        other => panic!("expected ContextExists, got {other:?}"),
    }
    match control.messages(&bob, "ctx") {
        Err(ref error @ Error::NotContextOwner { ref context_id }) => {
            assert_eq!(context_id, "ctx");
            assert_eq!(error.to_string(), "Context does not belong to user");
        }
        other => panic!("expected NotContextOwner, got {other:?}"),
    }

    let call = |id: &str| ControlMessage::tool_call(id, "search", json!({}));
    let response = |id: &str| ControlMessage::tool_response(id, "done");
    match control.add_messages(&alice, "ctx", &[response("call_123")]) {
        Err(ref error @ Error::ResponsesWithoutCalls { ref call_ids }) => {
            assert_eq!(call_ids, &["call_123".to_string()]);
            assert_eq!(
                error.to_string(),
                "Tool responses found without corresponding tool calls: ['call_123']"
            );
        }
        other => panic!("expected ResponsesWithoutCalls, got {other:?}"),
    }
    match control.add_messages(&alice, "ctx", &[response("call_1"), call("call_1")]) {
        Err(ref error @ Error::ResponseBeforeCall { ref call_id }) => {
            assert_eq!(call_id, "call_1");
            assert_eq!(
                error.to_string(),
                "Tool response with ID 'call_1' appears before its corresponding tool call"
            );
        }
        other => panic!("expected ResponseBeforeCall, got {other:?}"),
    }
    match control.add_messages(&alice, "ctx", &[call("call_1")]) {
        Err(ref error @ Error::CallsWithoutResponses { ref call_ids }) => {
            assert_eq!(call_ids, &["call_1".to_string()]);
            assert_eq!(
                error.to_string(),
                "Tool calls found without corresponding responses: ['call_1']"
            );
        }
        other => panic!("expected CallsWithoutResponses, got {other:?}"),
    }
    match control.add_messages(&alice, "ctx", &[call("d"), call("d"), response("d")]) {
        Err(ref error @ Error::DuplicateOpenCallIds { ref call_ids }) => {
            assert_eq!(call_ids, &["d".to_string()]);
            assert_eq!(
                error.to_string(),
                "Tool call IDs used by two open tool calls: ['d'] (each tool call needs its own ID until it is answered)"
            );
        }
        other => panic!("expected DuplicateOpenCallIds, got {other:?}"),
    }
    let mut failing = |_: &[ConversationEntry]| -> Result<Vec<ConversationEntry>, String> {
        Err("model overloaded".to_string())
    };
    match control.generate(&alice, "ctx", &[], true, &mut failing) {
        Err(
            ref error @ Error::GenerationFailed {
                ref context_id,
                ref reason,
            },
        ) => {
            assert_eq!(
                (context_id.as_str(), reason.as_str()),
                ("ctx", "model overloaded")
            );
            assert_eq!(error.to_string(), "generation failed: model overloaded");
        }
        other => panic!("expected GenerationFailed, got {other:?}"),
    }
}

/// A host slice whose `Serialize` fails.
#[derive(Default, Clone, Deserialize)]
struct Unencodable(u64);

impl Serialize for Unencodable {
    fn serialize<S: Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this slice refuses to encode"))
    }
}

struct UnencodableReducer;

impl Reducer for UnencodableReducer {
    type Slice = Unencodable;
    fn name(&self) -> &str {
        "unencodable/v1"
    }
    fn apply(&self, slice: &mut Unencodable, _event: &Event, _lsn: u64) {
        slice.0 += 1;
    }
}

/// Regression: a host slice that fails to encode was `InvalidArgument`, as
/// if the host had passed a bad argument to `snapshot`.
#[test]
fn a_host_slice_that_does_not_encode_is_slice_encode_naming_the_reducer() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path())
        .reducer(UnencodableReducer)
        .open()
        .unwrap();
    store.append(&[custom()]).unwrap();
    match store.snapshot() {
        Err(
            ref error @ Error::SliceEncode {
                ref reducer,
                ref reason,
            },
        ) => {
            assert_eq!(reducer, "unencodable/v1");
            assert!(reason.contains("this slice refuses to encode"), "{reason}");
            assert!(
                error.to_string().contains("no snapshot was written"),
                "{error}"
            );
        }
        other => panic!("expected SliceEncode, got {other:?}"),
    }
    let snapshots = dir.path().join("snapshots");
    let written = std::fs::read_dir(&snapshots)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(".snap"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(written, 0, "no snapshot file was put in place");
}

#[test]
fn backup_destinations_that_cannot_be_used_are_backup_destination() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    StoreBuilder::new(&store)
        .open()
        .unwrap()
        .append(&[custom()])
        .unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("notes.txt"), b"mine").unwrap();
    match backup(&store, &full, &mut |_| {}) {
        Err(
            ref error @ Error::BackupDestination {
                ref destination,
                ref reason,
            },
        ) => {
            assert_eq!(destination, &full);
            assert!(reason.contains("notes.txt"), "{reason}");
            assert!(error.to_string().contains("is not empty"), "{error}");
        }
        other => panic!("expected BackupDestination, got {other:?}"),
    }
    let inside = store.join("copy");
    match backup(&store, &inside, &mut |_| {}) {
        Err(Error::BackupDestination {
            destination,
            reason,
        }) => {
            assert_eq!(destination, inside);
            assert!(reason.contains("inside the store"), "{reason}");
        }
        other => panic!("expected BackupDestination, got {other:?}"),
    }
}

/// The variants a test cannot provoke without a damaged disk or a race at
/// the wrong moment: their messages say what and where.
#[test]
fn hard_to_provoke_variants_say_what_and_where() {
    let path = PathBuf::from("/data/store/snapshots/00000000000000000042.snap");
    let cases: Vec<(Error, &str)> = vec![
        (
            Error::SnapshotWrite {
                path: path.clone(),
                reason: "cannot bind a snapshot at LSN 42 to the log".into(),
            },
            "snapshot /data/store/snapshots/00000000000000000042.snap was not written: cannot bind a snapshot at LSN 42 to the log",
        ),
        (
            Error::SnapshotDamaged {
                path: path.clone(),
                reason: "the directory fails its checksum".into(),
            },
            "snapshot /data/store/snapshots/00000000000000000042.snap is damaged: the directory fails its checksum",
        ),
        (
            Error::SnapshotPanicked {
                store: "/data/store".into(),
                message: "boom".into(),
            },
            "writing a snapshot of store /data/store panicked: boom; no snapshot was written",
        ),
        (
            Error::CompactionRefused {
                store: "/data/store".into(),
                snapshot: path.clone(),
                reason: "the chain value differs".into(),
            },
            "compaction of store /data/store deleted nothing: snapshot /data/store/snapshots/00000000000000000042.snap does not match the log: the chain value differs",
        ),
        (
            Error::BackupVerify {
                destination: "/backups/b1".into(),
                reason: "it holds LSNs 1..5, not the 1..9 that was copied".into(),
            },
            "the backup at /backups/b1 does not verify: it holds LSNs 1..5, not the 1..9 that was copied",
        ),
        (
            Error::BackupSourceChanging {
                store: "/data/store".into(),
                attempts: 16,
            },
            "the segments of /data/store kept disappearing while the backup listed them (16 attempts); is a compaction loop running?",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text, "{error:?}");
    }
}

/// A host's `match` must have a wildcard arm: a variant added later does
/// not break it. (That a match without one does not compile is the
/// `compile_fail` doctest on `convlog::error::Error`.)
#[test]
fn a_host_matches_with_a_wildcard() {
    fn advice(error: &Error) -> &'static str {
        match error {
            Error::Locked { .. } => "wait for the writer",
            Error::Conflict { .. } => "read again and retry",
            Error::ContextNotFound { .. } => "404",
            Error::NotContextOwner { .. } => "403",
            _ => "report it",
        }
    }
    assert_eq!(advice(&Error::EmptyBatch), "report it");
    assert_eq!(
        advice(&Error::NotContextOwner {
            context_id: "c".into()
        }),
        "403"
    );
}
