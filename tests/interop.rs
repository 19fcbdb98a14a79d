//! Snapshot JSON (`convlog::interop`, docs/interop.md): a conversation
//! exported in the session-snapshot shape and imported back gives the same
//! entries; a document written by a host on that session model imports and
//! resumes; bad documents are refused with the field at fault, and a failed
//! import changes nothing.

use convlog::interop::{
    self, ExportOptions, ImportError, ImportMode, ImportOptions, DEFAULT_TYPE, ITEMS_MAX,
    MESSAGE_ID_NAMESPACE,
};
use convlog::model::{ConversationEntry, Event, Reasoning, ToolStatusChanged};
use convlog::resume::PromptIdentity;
use convlog::{ResumeOptions, Store, StoreOptions, Timestamp, ToolCall, ToolStatus};
use proptest::prelude::*;
use serde_json::Value;

const T0: i64 = 1_790_000_000_000_000;

fn at(micros: i64) -> Timestamp {
    Timestamp(T0 + micros)
}

fn open(dir: &std::path::Path, name: &str) -> Store {
    Store::open(dir.join(name), StoreOptions::default()).expect("the store opens")
}

fn timed(mut entry: ConversationEntry, micros: i64) -> ConversationEntry {
    entry.created_at = at(micros);
    entry
}

fn status(call: &str, evaluation: &str, status: ToolStatus, micros: i64) -> Event {
    Event::ToolStatus(ToolStatusChanged::new(
        "trip",
        evaluation,
        call,
        status,
        at(micros),
    ))
}

/// A conversation with every kind of call and field convlog holds: calls
/// pending, running, completed by a result, failed by a status with its
/// error, failed by an error result, completed by a status without a
/// result; reasoning, finish reasons, metadata, empty and absent content,
/// empty prompt parts, two evaluations.
fn rich_events() -> Vec<Event> {
    let mut system = timed(ConversationEntry::system("eval-1", 0, "You plan trips."), 0);
    system.prompt_ns = Some("trips".into());
    system.prompt_key = Some("planner".into());
    let user = timed(ConversationEntry::user("eval-1", 1, "Weather in Paris?"), 1);
    let mut ask = timed(
        ConversationEntry::assistant("eval-1", 2, "Let me look.")
            .with_tool_call(ToolCall::new("c1", "weather", r#"{"city":"paris"}"#))
            .with_tool_call(ToolCall::new("c2", "forecast", "not json"))
            .with_tool_call(ToolCall::new("c3", "book", "{}"))
            .with_turn(1),
        2,
    );
    ask.reasoning = Some(Reasoning {
        text: Some("The user wants weather.".into()),
        signature: Some("sig==".into()),
        redacted: false,
    });
    ask.finish_reason = Some("tool_calls".into());
    ask.metadata
        .insert("openai.role".into(), "assistant".into());
    let c1_result = timed(
        ConversationEntry::tool_result("eval-1", 3, "c1", "weather", "18C").with_turn(1),
        20,
    );
    let c2_error = timed(
        ConversationEntry::tool_error("eval-1", 4, "c2", "forecast", "bad arguments").with_turn(1),
        30,
    );
    let mut answer = timed(
        ConversationEntry::assistant("eval-1", 5, "Sunny, 18C.").with_turn(2),
        40,
    );
    answer.finish_reason = Some("stop".into());
    let mut system2 = timed(
        ConversationEntry::system("eval-2", 0, "You plan trips."),
        50,
    );
    system2.prompt_ns = Some(String::new());
    let mut quiet = timed(ConversationEntry::user("eval-2", 1, ""), 51);
    quiet.metadata.insert("k".into(), "v".into());
    let mut calling = timed(
        ConversationEntry::assistant_calling(
            "eval-2",
            2,
            [
                ToolCall::new("d1", "search", "{}"),
                ToolCall::new("d2", "search", "{}"),
                ToolCall::new("d3", "search", "{}"),
                ToolCall::new("d4", "search", "{}"),
            ],
        )
        .with_turn(1),
        52,
    );
    calling.reasoning = Some(Reasoning {
        text: None,
        signature: Some("opaque".into()),
        redacted: true,
    });
    let mut empty_text = timed(ConversationEntry::assistant("eval-2", 3, ""), 53);
    empty_text.content = Some(String::new());
    let mut no_content = timed(
        ConversationEntry::tool_result("eval-2", 4, "d3", "search", "x"),
        70,
    );
    no_content.content = None;
    let mut failed_with_error =
        ToolStatusChanged::new("trip", "eval-2", "d2", ToolStatus::Failed, at(61));
    failed_with_error.error = Some("quota".into());
    vec![
        system.recorded_in("trip"),
        user.recorded_in("trip"),
        ask.recorded_in("trip"),
        status("c1", "eval-1", ToolStatus::Running, 10),
        status("c3", "eval-1", ToolStatus::Running, 11),
        c1_result.recorded_in("trip"),
        c2_error.recorded_in("trip"),
        answer.recorded_in("trip"),
        system2.recorded_in("trip"),
        quiet.recorded_in("trip"),
        calling.recorded_in("trip"),
        empty_text.recorded_in("trip"),
        status("d1", "eval-2", ToolStatus::Running, 60),
        status("d2", "eval-2", ToolStatus::Running, 60),
        Event::ToolStatus(failed_with_error),
        status("d3", "eval-2", ToolStatus::Completed, 65),
        no_content.recorded_in("trip"),
    ]
}

/// Exports `trip` of `source` and imports it into a new store; returns both
/// stores' entries.
fn round_trip(events: &[Event]) -> (Vec<ConversationEntry>, Vec<ConversationEntry>, String) {
    let dir = tempfile::tempdir().unwrap();
    let source = open(dir.path(), "source");
    source.append(events).expect("the events are recorded");
    let slice = source.conversation("trip").unwrap();
    let json = interop::slice_to_json(&slice, &ExportOptions::default()).unwrap();
    let target = open(dir.path(), "target");
    let report = interop::import(&target, &json, &ImportOptions::default()).expect("it imports");
    assert_eq!(report.conversation_id, "trip");
    assert_eq!(report.entries, slice.len());
    let copied = target.conversation("trip").unwrap();
    (
        slice.entries().cloned().collect(),
        copied.entries().cloned().collect(),
        json,
    )
}

#[test]
fn a_rich_conversation_round_trips_exactly() {
    let (original, copied, json) = round_trip(&rich_events());
    assert_eq!(copied, original, "document:\n{json}");
    let calls: Vec<(&str, ToolStatus)> = original
        .iter()
        .flat_map(|entry| &entry.tool_calls)
        .map(|call| (call.call_id.as_str(), call.status))
        .collect();
    assert_eq!(
        calls,
        [
            ("c1", ToolStatus::Completed),
            ("c2", ToolStatus::Failed),
            ("c3", ToolStatus::Running),
            ("d1", ToolStatus::Running),
            ("d2", ToolStatus::Failed),
            ("d3", ToolStatus::Completed),
            ("d4", ToolStatus::Pending),
        ],
        "the conversation holds every status"
    );
}

#[test]
fn the_document_has_the_documented_shape() {
    let (original, _, json) = round_trip(&rich_events());
    let document: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(document["version"], "1");
    assert!(Timestamp::parse_rfc3339(document["created_at"].as_str().unwrap()).is_ok());
    assert_eq!(document["convlog"]["conversation_id"], "trip");
    let slices = document["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0]["slice_type"], DEFAULT_TYPE);
    assert_eq!(slices[0]["item_type"], DEFAULT_TYPE);
    let items = slices[0]["items"].as_array().unwrap();
    assert_eq!(items.len(), original.len());
    let documented = [
        "role",
        "content",
        "evaluation_id",
        "sequence",
        "tool_calls",
        "tool_call_id",
        "tool_name",
        "turn",
        "prompt_ns",
        "prompt_key",
        "created_at",
        "message_id",
    ];
    for (item, entry) in items.iter().zip(&original) {
        let keys: Vec<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for key in &keys {
            assert!(
                documented.contains(key) || *key == "convlog",
                "unexpected key {key}"
            );
        }
        for key in documented {
            assert!(keys.contains(&key), "{key} missing from {item}");
        }
        assert_eq!(item["message_id"], entry.message_id.to_string());
        assert!(item["content"].is_string() && item["prompt_ns"].is_string());
        for call in item["tool_calls"].as_array().unwrap() {
            assert!(["pending", "completed", "failed"].contains(&call["status"].as_str().unwrap()));
        }
    }
    // The running call c3 is pending in the documented field (a resume runs
    // it again), running in the extension.
    let ask = &items[2];
    assert_eq!(ask["tool_calls"][2]["status"], "pending");
    let exact = &ask["convlog"]["tool_calls"];
    let c3 = exact
        .as_array()
        .unwrap()
        .iter()
        .find(|call| call["call_id"] == "c3")
        .unwrap();
    assert_eq!(c3["status"], "running");
    assert_eq!(ask["convlog"]["reasoning"]["signature"], "sig==");
    // The first user message has nothing the documented fields miss.
    assert!(items[1].get("convlog").is_none());
}

#[test]
fn type_names_are_configurable_and_chosen_on_import() {
    let dir = tempfile::tempdir().unwrap();
    let source = open(dir.path(), "source");
    source.append(&rich_events()).unwrap();
    let slice = source.conversation("trip").unwrap();
    let named = interop::slice_to_json(
        &slice,
        &ExportOptions::new().type_name("myhost.sessions:InnerMessage"),
    )
    .unwrap();
    let document: Value = serde_json::from_str(&named).unwrap();
    assert_eq!(
        document["slices"][0]["slice_type"],
        "myhost.sessions:InnerMessage"
    );
    // Found by its type name by default.
    let plan = interop::plan_import(&named, &ImportOptions::default()).unwrap();
    assert_eq!(plan.entries, slice.len());

    let other =
        interop::slice_to_json(&slice, &ExportOptions::new().type_name("myhost:Message")).unwrap();
    let error = interop::plan_import(&other, &ImportOptions::default()).unwrap_err();
    assert_eq!(error.path, "slices");
    assert!(error.reason.contains("myhost:Message"), "{error}");
    let plan =
        interop::plan_import(&other, &ImportOptions::new().item_type("myhost:Message")).unwrap();
    assert_eq!(plan.entries, slice.len());
}

#[test]
fn documented_only_keeps_statuses_and_ids_but_not_the_extras() {
    let dir = tempfile::tempdir().unwrap();
    let source = open(dir.path(), "source");
    source.append(&rich_events()).unwrap();
    let slice = source.conversation("trip").unwrap();
    let json = interop::slice_to_json(&slice, &ExportOptions::new().documented_only()).unwrap();
    assert!(!json.contains("\"convlog\""), "no extension: {json}");
    let target = open(dir.path(), "target");
    let options = ImportOptions::new().conversation("copy");
    interop::import(&target, &json, &options).unwrap();
    let copied = target.conversation("copy").unwrap();
    let statuses = |entries: Vec<&ConversationEntry>| -> Vec<(Uuid, Vec<ToolStatus>)> {
        entries
            .iter()
            .map(|entry| {
                (
                    entry.message_id,
                    entry.tool_calls.iter().map(|call| call.status).collect(),
                )
            })
            .collect()
    };
    let running_as_pending: Vec<(Uuid, Vec<ToolStatus>)> = statuses(slice.entries().collect())
        .into_iter()
        .map(|(id, calls)| {
            let calls = calls
                .into_iter()
                .map(|status| match status {
                    ToolStatus::Running => ToolStatus::Pending,
                    other => other,
                })
                .collect();
            (id, calls)
        })
        .collect();
    assert_eq!(statuses(copied.entries().collect()), running_as_pending);
    // The failed call d2 had no result: failed at its assistant's time.
    let (_, d2) = copied.tool_call("d2").unwrap();
    assert_eq!((d2.status, d2.ended_at), (ToolStatus::Failed, Some(at(52))));
    // Reasoning is the extension's.
    assert!(copied.entries().all(|entry| entry.reasoning.is_none()));
}

use uuid::Uuid;

/// A document as a host built on the session model writes it: the
/// documented fields only, evaluations listed by id (the later one first),
/// times with `+00:00`, message ids from that host; one item without a
/// message id.
const HOST_DOCUMENT: &str = r#"{
  "version": "1",
  "created_at": "2026-09-21T10:00:09.000000+00:00",
  "slices": [
    {
      "slice_type": "hostapp.runtime.inner_messages:InnerMessage",
      "item_type": "hostapp.runtime.inner_messages:InnerMessage",
      "items": [
        {"role": "system", "content": "You plan trips.", "evaluation_id": "1b7a2b9e-0000-4000-8000-000000000002",
         "sequence": 0, "tool_calls": [], "tool_call_id": null, "tool_name": null, "turn": 0,
         "prompt_ns": "trips", "prompt_key": "planner", "created_at": "2026-09-21T10:00:05.000000+00:00",
         "message_id": "0c9a3f51-6a5e-4f45-9d49-3a0b7c1e0001"},
        {"role": "assistant", "content": "", "evaluation_id": "1b7a2b9e-0000-4000-8000-000000000002",
         "sequence": 1, "tool_calls": [
            {"call_id": "call_a", "name": "weather", "arguments": "{\"city\": \"rome\"}", "status": "completed"},
            {"call_id": "call_b", "name": "book", "arguments": "{}", "status": "pending"}
         ], "tool_call_id": null, "tool_name": null, "turn": 1,
         "prompt_ns": "trips", "prompt_key": "planner", "created_at": "2026-09-21T10:00:06.000000+00:00",
         "message_id": "0c9a3f51-6a5e-4f45-9d49-3a0b7c1e0002"},
        {"role": "tool", "content": "{\"temp\": 21}", "evaluation_id": "1b7a2b9e-0000-4000-8000-000000000002",
         "sequence": 2, "tool_calls": [], "tool_call_id": "call_a", "tool_name": "weather", "turn": 1,
         "prompt_ns": "trips", "prompt_key": "planner", "created_at": "2026-09-21T10:00:07.000000+00:00"},
        {"role": "system", "content": "You plan trips.", "evaluation_id": "9f00aa00-0000-4000-8000-000000000001",
         "sequence": 0, "tool_calls": [], "tool_call_id": null, "tool_name": null, "turn": 0,
         "prompt_ns": "trips", "prompt_key": "planner", "created_at": "2026-09-21T09:00:00.000000+00:00",
         "message_id": "0c9a3f51-6a5e-4f45-9d49-3a0b7c1e0003"},
        {"role": "assistant", "content": "Hello.", "evaluation_id": "9f00aa00-0000-4000-8000-000000000001",
         "sequence": 1, "tool_calls": [], "tool_call_id": null, "tool_name": null, "turn": 1,
         "prompt_ns": "trips", "prompt_key": "planner", "created_at": "2026-09-21T09:00:01.000000+00:00",
         "message_id": "0c9a3f51-6a5e-4f45-9d49-3a0b7c1e0004"}
      ]
    },
    {"slice_type": "hostapp.plans:Plan", "item_type": "hostapp.plans:Plan", "items": [{"steps": 3}]}
  ]
}"#;

#[test]
fn a_host_document_imports_and_resumes_with_its_unfinished_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), "store");
    let options = ImportOptions::new().conversation("restored");
    let report = interop::import(&store, HOST_DOCUMENT, &options).expect("it imports");
    assert_eq!(report.entries, 5);
    assert_eq!(report.generated_message_ids, 1);
    // Evaluations in the order of their first messages' times, not the
    // document's (by id).
    assert_eq!(
        report.evaluations,
        [
            "9f00aa00-0000-4000-8000-000000000001",
            "1b7a2b9e-0000-4000-8000-000000000002"
        ]
    );
    let state = store
        .resume(
            "restored",
            &ResumeOptions::new().prompt(Some(PromptIdentity {
                namespace: Some("trips".into()),
                key: Some("planner".into()),
            })),
        )
        .expect("the latest evaluation resumes with its prompt identity");
    assert_eq!(state.evaluation_id, "1b7a2b9e-0000-4000-8000-000000000002");
    let unfinished: Vec<&str> = state
        .unfinished_calls
        .iter()
        .map(|unfinished| unfinished.call.call_id.as_str())
        .collect();
    assert_eq!(unfinished, ["call_b"]);
    assert_eq!(state.next_sequence, 3);
    assert_eq!(state.turn, 1);
    let finished = &state.finished_calls[0];
    assert_eq!(finished.call.call_id, "call_a");
    assert_eq!(finished.call.status, ToolStatus::Completed);
    assert_eq!(
        finished
            .result
            .as_ref()
            .and_then(|result| result.content.as_deref()),
        Some("{\"temp\": 21}")
    );
    // The assistant's "" is no text; times are UTC.
    let slice = store.conversation("restored").unwrap();
    let (ask, _) = slice.tool_call("call_b").unwrap();
    assert_eq!(ask.content, None);
    assert_eq!(
        ask.created_at,
        Timestamp::parse_rfc3339("2026-09-21T10:00:06Z").unwrap()
    );
    // The item without a message id got the documented name-based one.
    let result = slice.tool_result("call_a").unwrap();
    assert_eq!(
        result.message_id,
        Uuid::new_v5(
            &MESSAGE_ID_NAMESPACE,
            b"1b7a2b9e-0000-4000-8000-000000000002\n2\n0"
        )
    );

    // A merge of the same document records nothing new.
    let before = store.conversation("restored").unwrap();
    interop::import(
        &store,
        HOST_DOCUMENT,
        &options.clone().mode(ImportMode::Merge),
    )
    .unwrap();
    let after = store.conversation("restored").unwrap();
    assert!(after.entries().eq(before.entries()));
}

#[test]
fn a_host_document_failed_call_fails_with_its_result_as_the_error() {
    let document = HOST_DOCUMENT.replace(r#""status": "completed""#, r#""status": "failed""#);
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), "store");
    interop::import(&store, &document, &ImportOptions::new().conversation("c")).unwrap();
    let slice = store.conversation("c").unwrap();
    let (_, call) = slice.tool_call("call_a").unwrap();
    assert_eq!(call.status, ToolStatus::Failed);
    assert_eq!(call.error.as_deref(), Some("{\"temp\": 21}"));
    assert!(slice.tool_result("call_a").unwrap().is_error);
    assert!(slice.anomalies().is_empty());
}

/// The error for `document`, with its path.
fn refused(document: &str) -> interop::SnapshotError {
    interop::plan_import(document, &ImportOptions::new().conversation("c"))
        .expect_err("the document is refused")
}

#[test]
fn bad_documents_are_refused_with_the_field_at_fault() {
    let item = |fields: &str| {
        format!(
            r#"{{"version": "1", "slices": [{{"slice_type": "a:InnerMessage", "item_type": "a:InnerMessage", "items": [
              {{"role": "user", "content": "hi", "evaluation_id": "e", "sequence": 0, "created_at": "2026-01-01T00:00:00Z"}},
              {{{fields}}}]}}]}}"#
        )
    };
    let base = r#""role": "assistant", "content": "x", "evaluation_id": "e", "sequence": 1, "created_at": "2026-01-01T00:00:01Z""#;
    let cases: Vec<(String, &str, &str)> = vec![
        (item(&base.replace("assistant", "robot")), "slices[0].items[1].role", "not a role"),
        (item(&base.replace("\"sequence\": 1", "\"sequence\": -1")), "slices[0].items[1].sequence", "integer"),
        (item(&base.replace("\"sequence\": 1", "\"sequence\": \"1\"")), "slices[0].items[1].sequence", "must be an integer"),
        (item(&base.replace(", \"sequence\": 1", "")), "slices[0].items[1].sequence", "is missing"),
        (item(&base.replace("\"e\"", "7")), "slices[0].items[1].evaluation_id", "must be a string"),
        (item(&base.replace("2026-01-01T00:00:01Z", "2026-13-01T00:00:01Z")), "slices[0].items[1].created_at", "month 13"),
        (item(&format!(r#"{base}, "message_id": "m-1""#)), "slices[0].items[1].message_id", "not a UUID"),
        (item(&format!(r#"{base}, "tool_calls": [{{"call_id": "c", "name": "t", "arguments": "{{}}", "status": "running"}}]"#)), "slices[0].items[1].tool_calls[0].status", "not a call status"),
        (item(&format!(r#"{base}, "tool_calls": [{{"name": "t"}}]"#)), "slices[0].items[1].tool_calls[0].call_id", "is missing"),
        (item(&format!(r#"{base}, "tool_calls": {{}}"#)), "slices[0].items[1].tool_calls", "must be an array"),
        (item(&base.replace("assistant", "tool")), "slices[0].items[1]", "tool_call_id"),
        (item(&format!(r#"{base}, "convlog": {{"is_eror": true}}"#)), "slices[0].items[1].convlog.is_eror", "unknown field"),
        (item(&format!(r#"{base}, "convlog": {{"tool_calls": [{{"call_id": "c", "status": "done"}}]}}"#)), "slices[0].items[1].convlog.tool_calls[0].status", "done"),
        (item(&format!(r#"{base}, "turn": 4294967296"#)), "slices[0].items[1].turn", "integer from 0 to 2147483647"),
        (item(&format!(r#"{base}, "tool_call_id": "{}""#, "i".repeat(300))), "slices[0].items[1]", "ID_BYTES_MAX"),
        ("[]".to_string(), "", "must be a JSON object"),
        ("{\"slices\": [".to_string(), "", "not JSON"),
        (r#"{"version": "2", "slices": []}"#.to_string(), "version", "unsupported version"),
        (r#"{"version": "1"}"#.to_string(), "slices", "is missing"),
        (r#"{"slices": [{"item_type": "x:Plan", "items": []}]}"#.to_string(), "slices", "no slice"),
        (r#"{"slices": [{"item_type": "x:InnerMessage", "items": []}]}"#.to_string(), "slices[0].items", "holds no items"),
        (r#"{"slices": [{"item_type": "x:InnerMessage", "items": []}, {"item_type": "y:InnerMessage", "items": []}]}"#.to_string(), "slices", "2 slices"),
        (r#"{"slices": [{"item_type": "x:InnerMessage", "items": [{"role": "user", "evaluation_id": "e", "sequence": 0}]}]}"#.to_string(), "slices[0].items[0].created_at", "is missing"),
    ];
    for (document, path, reason) in cases {
        let error = refused(&document);
        assert_eq!(error.path, path, "{error} for {document}");
        assert!(
            error.reason.contains(reason),
            "{error:?} should say {reason:?}"
        );
    }
    let twice = item(&format!(
        r#"{base}, "message_id": "0c9a3f51-6a5e-4f45-9d49-3a0b7c1e0001""#
    ))
    .replace(
        r#""sequence": 0,"#,
        r#""sequence": 0, "message_id": "0c9a3f51-6a5e-4f45-9d49-3a0b7c1e0001","#,
    );
    let error = refused(&twice);
    assert_eq!(error.path, "slices[0].items[1].message_id");
    assert!(error.reason.contains("items[0]"), "{error}");
    let error =
        interop::plan_import(&item(base), &ImportOptions::new().conversation("")).unwrap_err();
    assert!(error.reason.contains("ID_BYTES_MAX"), "{error}");
    // Without a conversation, named by neither the caller nor the document.
    let error = interop::plan_import(&item(base), &ImportOptions::new()).unwrap_err();
    assert!(error.reason.contains("names no conversation"), "{error}");
}

#[test]
fn too_many_items_are_refused_before_they_are_read() {
    let items = vec!["{}"; ITEMS_MAX + 1].join(",");
    let document =
        format!(r#"{{"slices": [{{"item_type": "x:InnerMessage", "items": [{items}]}}]}}"#);
    let error = refused(&document);
    assert_eq!(error.path, "slices[0].items");
    assert!(error.reason.contains("ITEMS_MAX"), "{error}");
}

#[test]
fn a_failed_import_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), "store");
    store.append(&rich_events()).unwrap();
    let slice = store.conversation("trip").unwrap();
    let json = interop::slice_to_json(&slice, &ExportOptions::default()).unwrap();
    let next = store.log().next_lsn();

    // Into a conversation that has events, without merge or replace.
    match interop::import(&store, &json, &ImportOptions::default()) {
        Err(ImportError::NotEmpty {
            conversation_id,
            entries,
        }) => assert_eq!((conversation_id.as_str(), entries), ("trip", slice.len())),
        other => panic!("expected NotEmpty, got {other:?}"),
    }
    // A document whose last item is bad: nothing of the earlier ones.
    let mut document: Value = serde_json::from_str(&json).unwrap();
    let items = document["slices"][0]["items"].as_array_mut().unwrap();
    let last = items.len() - 1;
    items[last]["tool_call_id"] = Value::Null;
    let bad = serde_json::to_string(&document).unwrap();
    let error = interop::import(&store, &bad, &ImportOptions::new().conversation("fresh"))
        .expect_err("the last item is bad");
    assert!(
        error.to_string().contains(&format!("items[{last}]")),
        "{error}"
    );
    assert_eq!(store.log().next_lsn(), next, "nothing was appended");
    assert!(store.conversation("fresh").is_err());
    assert_eq!(store.conversation("trip").unwrap(), slice);
}

#[test]
fn replace_swaps_the_messages_and_merge_adds_the_missing_ones() {
    let dir = tempfile::tempdir().unwrap();
    let source = open(dir.path(), "source");
    source.append(&rich_events()).unwrap();
    let slice = source.conversation("trip").unwrap();
    let json = interop::slice_to_json(&slice, &ExportOptions::default()).unwrap();

    let target = open(dir.path(), "target");
    target
        .append(&[ConversationEntry::user("old", 0, "forget me").recorded_in("trip")])
        .unwrap();
    let replace = ImportOptions::new().mode(ImportMode::Replace);
    interop::import(&target, &json, &replace).unwrap();
    let replaced = target.conversation("trip").unwrap();
    assert!(replaced.entries().eq(slice.entries()));
    assert_eq!(replaced.evaluations(), slice.evaluations());

    // Merge: a conversation with the first three messages gets the rest.
    let partial = open(dir.path(), "partial");
    let first: Vec<ConversationEntry> = slice.entries().take(3).cloned().collect();
    let mut document: Value = serde_json::from_str(&json).unwrap();
    document["slices"][0]["items"]
        .as_array_mut()
        .unwrap()
        .truncate(3);
    let head = serde_json::to_string(&document).unwrap();
    interop::import(&partial, &head, &ImportOptions::default()).unwrap();
    assert!(partial
        .conversation("trip")
        .unwrap()
        .entries()
        .eq(first.iter()));
    let merge = ImportOptions::new().mode(ImportMode::Merge);
    interop::import(&partial, &json, &merge).unwrap();
    assert!(partial
        .conversation("trip")
        .unwrap()
        .entries()
        .eq(slice.entries()));
}

#[test]
fn a_result_recorded_before_its_call_still_round_trips() {
    // The result (sequence 1) sits before its call (sequence 2) in
    // conversation order, but was recorded after the call started (at 5):
    // importing in conversation order, the result would complete the call
    // before its start could be replayed, so the call's state is recorded
    // in its entry.
    let result = timed(ConversationEntry::tool_result("e", 1, "c", "t", "ok"), 20);
    let ask = timed(
        ConversationEntry::assistant_calling("e", 2, [ToolCall::new("c", "t", "{}")]),
        3,
    );
    let events = vec![
        ask.recorded_in("trip"),
        status("c", "e", ToolStatus::Running, 5),
        result.recorded_in("trip"),
    ];
    let (original, copied, json) = round_trip(&events);
    let call = &original[1].tool_calls[0];
    assert_eq!(
        (call.status, call.started_at, call.ended_at),
        (ToolStatus::Completed, Some(at(5)), Some(at(20)))
    );
    let plan = interop::plan_import(&json, &ImportOptions::default()).unwrap();
    assert_eq!(plan.calls_recorded_in_entry, 1);
    assert_eq!(copied, original, "document:\n{json}");
}

#[test]
fn calls_recorded_with_a_status_in_their_entry_round_trip() {
    // A host recorded calls already finished, without times, and a result
    // that disagrees with one of them (kept out as an anomaly).
    let mut failed = ToolCall::new("f", "t", "{}");
    failed.status = ToolStatus::Failed;
    let mut done = ToolCall::new("d", "t", "{}");
    done.status = ToolStatus::Completed;
    let ask = timed(
        ConversationEntry::assistant_calling("e", 0, [failed, done]),
        1,
    );
    let result = timed(ConversationEntry::tool_result("e", 1, "f", "t", "fine"), 2);
    let (original, copied, json) =
        round_trip(&[ask.recorded_in("trip"), result.recorded_in("trip")]);
    assert_eq!(copied, original, "document:\n{json}");
    assert!(!copied[1].is_error);
}

#[test]
fn a_call_id_held_twice_in_one_evaluation_round_trips() {
    // Statuses apply to the last assistant entry holding the id; the first
    // keeps what it was recorded with.
    let first = timed(
        ConversationEntry::assistant_calling("e", 0, [ToolCall::new("c", "t", "{}")]),
        1,
    );
    let second = timed(
        ConversationEntry::assistant_calling("e", 2, [ToolCall::new("c", "t", "{}")]),
        2,
    );
    let events = vec![
        first.recorded_in("trip"),
        status("c", "e", ToolStatus::Running, 3),
        second.recorded_in("trip"),
        status("c", "e", ToolStatus::Running, 4),
        timed(ConversationEntry::tool_result("e", 3, "c", "t", "ok"), 5).recorded_in("trip"),
    ];
    let (original, copied, json) = round_trip(&events);
    assert_eq!(copied, original, "document:\n{json}");
}

/// What happens to one call of a generated conversation.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Nothing,
    Running,
    Result,
    ErrorResult,
    RunningThenResult,
    FailedStatus,
    CompletedStatus,
    /// Recorded in the entry already with this status (no times), then a
    /// result.
    Preset(ToolStatus),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        Just(Fate::Nothing),
        Just(Fate::Running),
        Just(Fate::Result),
        Just(Fate::ErrorResult),
        Just(Fate::RunningThenResult),
        Just(Fate::FailedStatus),
        Just(Fate::CompletedStatus),
        prop_oneof![
            Just(ToolStatus::Running),
            Just(ToolStatus::Completed),
            Just(ToolStatus::Failed)
        ]
        .prop_map(Fate::Preset),
    ]
}

/// Evaluations of turns of calls, each call with its fate, and whether the
/// entries carry text and reasoning.
fn conversation() -> impl Strategy<Value = Vec<Vec<(bool, Vec<Fate>)>>> {
    prop::collection::vec(
        prop::collection::vec((any::<bool>(), prop::collection::vec(fate(), 0..4)), 1..4),
        1..4,
    )
}

fn events_of(evaluations: &[Vec<(bool, Vec<Fate>)>]) -> Vec<Event> {
    let mut events = Vec::new();
    let mut clock = 0;
    let mut tick = || {
        clock += 1;
        clock
    };
    for (e, turns) in evaluations.iter().enumerate() {
        let evaluation = format!("eval-{e}");
        let mut sequence = 0;
        let mut next = || {
            sequence += 1;
            sequence - 1
        };
        events.push(
            timed(
                ConversationEntry::system(&evaluation, next(), "sys"),
                tick(),
            )
            .recorded_in("trip"),
        );
        for (turn, (talk, fates)) in turns.iter().enumerate() {
            let calls = fates.iter().enumerate().map(|(c, fate)| {
                let mut call = ToolCall::new(format!("call-{e}-{turn}-{c}"), "tool", "{}");
                if let Fate::Preset(status) = fate {
                    call.status = *status;
                }
                call
            });
            let mut ask = timed(
                ConversationEntry::assistant_calling(&evaluation, next(), calls),
                tick(),
            )
            .with_turn(turn as u32 + 1);
            if !*talk && fates.is_empty() {
                ask.content = Some(String::new());
            }
            if *talk {
                ask.content = Some(format!("turn {turn}"));
                ask.reasoning = Some(Reasoning {
                    text: Some("think".into()),
                    signature: None,
                    redacted: false,
                });
            }
            events.push(ask.recorded_in("trip"));
            for (c, fate) in fates.iter().enumerate() {
                let call = format!("call-{e}-{turn}-{c}");
                let result = |error: bool, sequence: u64, at: i64| {
                    let entry = if error {
                        ConversationEntry::tool_error(&evaluation, sequence, &call, "tool", "boom")
                    } else {
                        ConversationEntry::tool_result(&evaluation, sequence, &call, "tool", "ok")
                    };
                    timed(entry, at).recorded_in("trip")
                };
                match fate {
                    Fate::Nothing => {}
                    Fate::Running => {
                        events.push(status(&call, &evaluation, ToolStatus::Running, tick()))
                    }
                    Fate::Result => events.push(result(false, next(), tick())),
                    Fate::ErrorResult => events.push(result(true, next(), tick())),
                    Fate::RunningThenResult => {
                        events.push(status(&call, &evaluation, ToolStatus::Running, tick()));
                        events.push(result(false, next(), tick()));
                    }
                    Fate::FailedStatus => {
                        let mut change = ToolStatusChanged::new(
                            "trip",
                            &evaluation,
                            &call,
                            ToolStatus::Failed,
                            at(tick()),
                        );
                        change.error = Some("died".into());
                        events.push(Event::ToolStatus(change));
                    }
                    Fate::CompletedStatus => {
                        events.push(status(&call, &evaluation, ToolStatus::Completed, tick()));
                    }
                    Fate::Preset(_) => events.push(result(false, next(), tick())),
                }
            }
        }
    }
    events
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn generated_conversations_round_trip(evaluations in conversation()) {
        let (original, copied, json) = round_trip(&events_of(&evaluations));
        prop_assert_eq!(copied, original, "document:\n{}", json);
    }
}
