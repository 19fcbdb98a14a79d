//! Message control: contexts and access, validated add / set with the
//! seed's error texts, preview and approve, temporary steering, and the
//! seed's message shapes.

use std::path::Path;
use std::sync::Arc;

use convlog::control::message::{to_entries, to_messages};
use convlog::control::{
    AddAiMessage, ContextsReducer, ControlMessage, MessageControl, Principal, STEERING_METADATA,
};
use convlog::history::SlidingWindow;
use convlog::log::LogReader;
use convlog::model::{ConversationEntry, Event, Role, ToolCall, ToolStatus};
use convlog::store::{Store, StoreBuilder};
use serde_json::json;

const NOT_OWNER: &str = "Context does not belong to user";

fn open(dir: &Path) -> MessageControl {
    let store = StoreBuilder::new(dir)
        .reducer(ContextsReducer)
        .open()
        .unwrap();
    MessageControl::new(Arc::new(store))
}

fn alice() -> Principal {
    Principal::user("alice")
}

fn bob() -> Principal {
    Principal::user("bob")
}

/// A control with alice's private context `ctx`.
fn with_private_context(dir: &Path) -> MessageControl {
    let control = open(dir);
    control.create_context(&alice(), "ctx", false).unwrap();
    control
}

/// Every event in the log, read by a separate reader.
fn log_events(dir: &Path) -> Vec<Event> {
    LogReader::open(dir)
        .unwrap()
        .iter()
        .map(|record| convlog::codec::decode_event(&record.unwrap().payload).unwrap())
        .collect()
}

fn next_lsn(control: &MessageControl) -> u64 {
    control.store().log().next_lsn()
}

/// A model that calls a weather tool once, then answers; it keeps what it
/// was shown.
#[derive(Default)]
struct ScriptedModel {
    seen: Vec<Vec<ConversationEntry>>,
}

impl convlog::control::Generator for ScriptedModel {
    fn generate(&mut self, view: &[ConversationEntry]) -> Result<Vec<ConversationEntry>, String> {
        self.seen.push(view.to_vec());
        let number = self.seen.len();
        let call_id = format!("call_w{number}");
        let mut call = ConversationEntry::new("model", 0, Role::Assistant, None);
        call.tool_calls = vec![ToolCall {
            call_id: call_id.clone(),
            name: "weather".into(),
            arguments: "{\"city\":\"Paris\"}".into(),
            status: ToolStatus::Pending,
            started_at: None,
            ended_at: None,
            error: None,
        }];
        let mut result = ConversationEntry::new("model", 1, Role::Tool, Some("sunny".into()));
        result.tool_call_id = Some(call_id);
        result.tool_name = Some("weather".into());
        let answer =
            ConversationEntry::new("model", 2, Role::Assistant, Some("It is sunny.".into()));
        Ok(vec![call, result, answer])
    }
}

fn texts(entries: &[ConversationEntry]) -> Vec<(Role, String)> {
    entries
        .iter()
        .map(|entry| (entry.role, entry.content.clone().unwrap_or_default()))
        .collect()
}

// ---------------------------------------------------------------- access

#[test]
fn a_private_context_is_refused_to_anyone_but_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    let hello = [ControlMessage::human("hello")];
    for principal in [bob(), Principal::Anonymous] {
        let errors = [
            control.messages(&principal, "ctx").unwrap_err(),
            control.entries(&principal, "ctx").unwrap_err(),
            control.context(&principal, "ctx").unwrap_err(),
            control.add_messages(&principal, "ctx", &hello).unwrap_err(),
            control.set_messages(&principal, "ctx", &hello).unwrap_err(),
            control.set_public(&principal, "ctx", true).unwrap_err(),
            control
                .invoke(&principal, "ctx", true, &mut ScriptedModel::default())
                .unwrap_err(),
        ];
        for error in errors {
            assert_eq!(error.to_string(), NOT_OWNER);
            assert!(matches!(error, convlog::Error::NotContextOwner { .. }));
        }
    }
    control.add_messages(&alice(), "ctx", &hello).unwrap();
    assert_eq!(control.messages(&alice(), "ctx").unwrap(), hello);
}

#[test]
fn an_unknown_context_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let control = open(dir.path());
    let error = control
        .add_messages(&alice(), "ctx_123", &[ControlMessage::human("hi")])
        .unwrap_err();
    assert_eq!(error.to_string(), "Context with id: ctx_123 does not exist");
    assert!(matches!(error, convlog::Error::ContextNotFound { .. }));
    assert_eq!(
        control
            .messages(&Principal::Anonymous, "nope")
            .unwrap_err()
            .to_string(),
        "Context with id: nope does not exist"
    );
    assert_eq!(next_lsn(&control), 1, "nothing was appended");
}

#[test]
fn a_public_context_is_open_to_everyone_but_only_its_owner_changes_it() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    control.set_public(&alice(), "ctx", true).unwrap();
    control
        .add_messages(&bob(), "ctx", &[ControlMessage::human("from bob")])
        .unwrap();
    control.messages(&Principal::Anonymous, "ctx").unwrap();
    assert_eq!(
        control
            .set_public(&bob(), "ctx", false)
            .unwrap_err()
            .to_string(),
        NOT_OWNER
    );
    let info = control.set_public(&alice(), "ctx", false).unwrap();
    assert!(!info.public);
    assert_eq!(
        control.messages(&bob(), "ctx").unwrap_err().to_string(),
        NOT_OWNER
    );
}

#[test]
fn anonymous_contexts_are_public_and_unowned() {
    let dir = tempfile::tempdir().unwrap();
    let control = open(dir.path());
    assert!(matches!(
        control.create_context(&Principal::Anonymous, "anon", false),
        Err(convlog::Error::AnonymousPrivateContext { .. })
    ));
    let info = control
        .create_context(&Principal::Anonymous, "anon", true)
        .unwrap();
    assert_eq!((info.owner, info.public), (None, true));
    control
        .add_messages(&bob(), "anon", &[ControlMessage::human("hi")])
        .unwrap();
    assert_eq!(
        control
            .set_public(&Principal::Anonymous, "anon", false)
            .unwrap_err()
            .to_string(),
        NOT_OWNER
    );
}

#[test]
fn a_context_is_created_once() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    let error = control.create_context(&bob(), "ctx", true).unwrap_err();
    assert_eq!(error.to_string(), "Context with id: ctx already exists");
    assert_eq!(
        control.context(&alice(), "ctx").unwrap().owner.as_deref(),
        Some("alice")
    );
}

#[test]
fn ownership_survives_reopening_with_and_without_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    {
        let control = with_private_context(dir.path());
        control.create_context(&bob(), "public", true).unwrap();
    }
    {
        let control = open(dir.path());
        assert_eq!(
            control.messages(&bob(), "ctx").unwrap_err().to_string(),
            NOT_OWNER
        );
        assert!(control.context(&alice(), "public").unwrap().public);
        control.store().snapshot().unwrap();
        control.create_context(&bob(), "after", false).unwrap();
    }
    let control = open(dir.path());
    assert!(control.store().open_report().snapshot.is_some());
    assert_eq!(control.registry().unwrap().len(), 3);
    assert_eq!(
        control.messages(&bob(), "ctx").unwrap_err().to_string(),
        NOT_OWNER
    );
    assert_eq!(
        control.messages(&alice(), "after").unwrap_err().to_string(),
        NOT_OWNER
    );
    assert!(control.registry().unwrap().rejected().is_empty());
}

// ---------------------------------------------------------------- validation

fn assert_rejected(control: &MessageControl, messages: &[ControlMessage], expected: &str) {
    let before = next_lsn(control);
    let stored = control.entries(&alice(), "ctx").unwrap();
    let added = control.add_messages(&alice(), "ctx", messages).unwrap_err();
    assert_eq!(added.to_string(), expected, "add_messages");
    let set = control.set_messages(&alice(), "ctx", messages).unwrap_err();
    assert_eq!(set.to_string(), expected, "set_messages");
    assert_eq!(next_lsn(control), before, "nothing was appended");
    assert_eq!(control.entries(&alice(), "ctx").unwrap(), stored);
}

#[test]
fn a_response_without_its_call_is_refused_with_the_seed_wording() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    control
        .add_messages(&alice(), "ctx", &[ControlMessage::human("before")])
        .unwrap();
    assert_rejected(
        &control,
        &[ControlMessage::tool_response("call_123", "output")],
        "Tool responses found without corresponding tool calls: ['call_123']",
    );
    assert_rejected(
        &control,
        &[
            ControlMessage::human("valid"),
            ControlMessage::tool_call("ok", "search", json!({})),
            ControlMessage::tool_response("ok", "fine"),
            ControlMessage::tool_response("a", "x"),
            ControlMessage::tool_response("b", "y"),
            ControlMessage::tool_response("ok", "answered twice"),
        ],
        "Tool responses found without corresponding tool calls: ['a', 'b', 'ok']",
    );
}

#[test]
fn a_response_before_its_call_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    assert_rejected(
        &control,
        &[
            ControlMessage::tool_response("call_1", "too early"),
            ControlMessage::tool_call("call_1", "search", json!({"q": "x"})),
        ],
        "Tool response with ID 'call_1' appears before its corresponding tool call",
    );
}

#[test]
fn a_call_without_its_response_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    assert_rejected(
        &control,
        &[
            ControlMessage::human("search please"),
            ControlMessage::tool_call("call_1", "search", json!({"q": "x"})),
            ControlMessage::tool_call("call_2", "search", json!({"q": "y"})),
            ControlMessage::tool_response("call_2", "found"),
        ],
        "Tool calls found without corresponding responses: ['call_1']",
    );
}

#[test]
fn a_response_may_answer_a_call_the_conversation_left_open() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    // An agent recorded a call and died before its result.
    let mut call = ConversationEntry::new("eval-1", 0, Role::Assistant, None);
    call.tool_calls = vec![ToolCall {
        call_id: "call_9".into(),
        name: "lookup".into(),
        arguments: "{}".into(),
        status: ToolStatus::Running,
        started_at: None,
        ended_at: None,
        error: None,
    }];
    control.store().append(&[call.recorded_in("ctx")]).unwrap();

    let applied = control
        .add_messages(
            &alice(),
            "ctx",
            &[ControlMessage::tool_response("call_9", "late result")],
        )
        .unwrap();
    let result = &applied.entries[0];
    assert_eq!(
        (result.evaluation_id.as_str(), result.sequence),
        ("eval-1", 1)
    );
    assert_eq!(result.tool_name.as_deref(), Some("lookup"));
    let slice = control.store().conversation("ctx").unwrap();
    assert_eq!(
        slice.tool_call("call_9").unwrap().1.status,
        ToolStatus::Completed
    );
    // Now answered: a second response is an orphan.
    assert_rejected(
        &control,
        &[ControlMessage::tool_response("call_9", "again")],
        "Tool responses found without corresponding tool calls: ['call_9']",
    );
}

#[test]
fn concurrent_responses_to_one_open_call_are_serialized() {
    let dir = tempfile::tempdir().unwrap();
    let control = Arc::new(with_private_context(dir.path()));
    control
        .add_messages(&alice(), "ctx", &[ControlMessage::human("go")])
        .unwrap();
    let mut call = ConversationEntry::new("eval-1", 5, Role::Assistant, None);
    call.tool_calls = vec![ToolCall {
        call_id: "only".into(),
        name: "t".into(),
        arguments: "{}".into(),
        status: ToolStatus::Pending,
        started_at: None,
        ended_at: None,
        error: None,
    }];
    control.store().append(&[call.recorded_in("ctx")]).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|thread| {
            let control = Arc::clone(&control);
            std::thread::spawn(move || {
                control
                    .add_messages(
                        &alice(),
                        "ctx",
                        &[ControlMessage::tool_response(
                            "only",
                            format!("from {thread}"),
                        )],
                    )
                    .is_ok()
            })
        })
        .collect();
    let successes = threads
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .filter(|ok| *ok)
        .count();
    assert_eq!(successes, 1);
}

// ---------------------------------------------------------------- add and set

#[test]
fn add_messages_appends_one_batch_that_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    let messages = vec![
        ControlMessage::human("Search for user data"),
        ControlMessage::ai("Let me look."),
        ControlMessage::tool_call(
            "call_1",
            "database_search",
            json!({"table": "users", "query": "active"}),
        ),
        ControlMessage::tool_response("call_1", "Found 100 active users"),
        ControlMessage::ai("There are 100 active users."),
    ];
    let applied = control.add_messages(&alice(), "ctx", &messages).unwrap();
    assert_eq!(
        applied.entries.len(),
        4,
        "the AI text and its call share an entry"
    );
    assert_eq!(applied.lsns.end - applied.lsns.start, 4);
    assert_eq!(control.messages(&alice(), "ctx").unwrap(), messages);
    let entries = control.entries(&alice(), "ctx").unwrap();
    assert_eq!(
        entries[1].tool_calls[0].arguments,
        r#"{"query":"active","table":"users"}"#
    );
    assert_eq!(entries[2].tool_name.as_deref(), Some("database_search"));
    assert_eq!(
        entries.iter().map(|entry| entry.turn).collect::<Vec<_>>(),
        [0, 1, 1, 2],
        "each assistant entry starts a turn"
    );
    // One frame (atomic batch): a reader sees the four events in one frame.
    let records: Vec<_> = LogReader::open(dir.path())
        .unwrap()
        .iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(records.len(), 5, "the context event and the batch");
    assert!(records[1..]
        .iter()
        .all(|record| record.position == records[1].position));
    assert_ne!(records[0].position, records[1].position);
    // An empty list appends nothing.
    let before = next_lsn(&control);
    assert!(control
        .add_messages(&alice(), "ctx", &[])
        .unwrap()
        .entries
        .is_empty());
    assert_eq!(next_lsn(&control), before);
}

#[test]
fn set_messages_replaces_in_one_event_and_the_log_keeps_the_old_messages() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    control
        .add_messages(
            &alice(),
            "ctx",
            &[
                ControlMessage::human("old question"),
                ControlMessage::ai("old answer"),
            ],
        )
        .unwrap();
    let fresh = vec![
        ControlMessage::system("This is a fresh conversation"),
        ControlMessage::human("Hello, starting over"),
    ];
    let applied = control.set_messages(&alice(), "ctx", &fresh).unwrap();
    assert_eq!(applied.lsns.end - applied.lsns.start, 1, "one event");
    assert_eq!(control.messages(&alice(), "ctx").unwrap(), fresh);

    let events = log_events(dir.path());
    let old: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Event::ConversationRecorded(recorded) => recorded.entry.content.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(
        old,
        ["old question", "old answer"],
        "the old messages stay in the log"
    );
    let Some(Event::MessagesReplaced(replaced)) = events.last() else {
        panic!("the last event replaces the messages");
    };
    assert_eq!(to_messages(&replaced.entries), fresh);
    // Adding after a reset continues the new evaluation.
    let added = control
        .add_messages(&alice(), "ctx", &[ControlMessage::ai("Hi again")])
        .unwrap();
    assert_eq!(
        added.entries[0].evaluation_id,
        replaced.entries[0].evaluation_id
    );
    assert_eq!(added.entries[0].sequence, 2);
    // An empty list resets the conversation.
    control.set_messages(&alice(), "ctx", &[]).unwrap();
    assert!(control.messages(&alice(), "ctx").unwrap().is_empty());
}

// ---------------------------------------------------------------- generation

#[test]
fn preview_holds_generated_messages_until_they_are_approved() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    let mut model = ScriptedModel::default();
    let before = next_lsn(&control);
    let preview = control
        .chat(&alice(), "ctx", "What is the weather?", false, &mut model)
        .unwrap();
    assert!(!preview.saved_ai_messages);
    assert_eq!(preview.response, "It is sunny.");
    assert_eq!(
        next_lsn(&control),
        before + 1,
        "only the human message was saved"
    );
    assert_eq!(
        texts(&control.entries(&alice(), "ctx").unwrap()),
        [(Role::User, "What is the weather?".to_string())]
    );
    assert_eq!(
        serde_json::to_value(preview.generated_messages()).unwrap(),
        json!([
            {"type": "tool_call", "tool_call_id": "call_w1", "tool_name": "weather", "tool_input": {"city": "Paris"}},
            {"type": "tool_response", "tool_call_id": "call_w1", "tool_output": "sunny"},
            {"sender": "ai", "message": "It is sunny."}
        ])
    );

    control.approve(&alice(), &preview).unwrap();
    control.approve(&alice(), &preview).unwrap();
    let stored = control.entries(&alice(), "ctx").unwrap();
    assert_eq!(stored.len(), 4, "approving twice records the messages once");
    assert_eq!(stored[3].content.as_deref(), Some("It is sunny."));
    assert_eq!(
        control
            .store()
            .conversation("ctx")
            .unwrap()
            .tool_call("call_w1")
            .unwrap()
            .1
            .status,
        ToolStatus::Completed
    );

    // The seed's way: approve through add_messages.
    let second = control.invoke(&alice(), "ctx", false, &mut model).unwrap();
    control
        .add_messages(&alice(), "ctx", &second.generated_messages())
        .unwrap();
    assert_eq!(control.entries(&alice(), "ctx").unwrap().len(), 7);
}

#[test]
fn steering_reaches_the_model_but_is_never_stored() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    control
        .add_messages(
            &alice(),
            "ctx",
            &[ControlMessage::human("Tell me about Paris")],
        )
        .unwrap();
    let mut model = ScriptedModel::default();
    let steering = "Respond in a formal tone and keep it brief";
    let generation = control
        .add_ai_message(
            &alice(),
            "ctx",
            AddAiMessage::Prompt {
                prompt: steering.into(),
                save_system_message: false,
                save_ai_messages: true,
            },
            &mut model,
        )
        .unwrap();
    let seen = model.seen.last().unwrap();
    let last = seen.last().unwrap();
    assert_eq!(
        (last.role, last.content.as_deref()),
        (Role::System, Some(steering))
    );
    assert_eq!(
        last.metadata.get(STEERING_METADATA).map(String::as_str),
        Some("true")
    );
    assert_eq!(generation.model_view, *seen);

    let stored = control.entries(&alice(), "ctx").unwrap();
    assert_eq!(stored.len(), 4, "the human message and the 3 generated");
    assert!(stored.iter().all(|entry| entry.role != Role::System));
    let in_log = log_events(dir.path())
        .iter()
        .any(|event| serde_json::to_string(event).unwrap().contains(steering));
    assert!(!in_log, "the steering text is nowhere in the log");
}

/// The four `save_system_message` / `save_ai_messages` cases of
/// `/chat/add-ai-message`.
#[test]
fn the_four_add_ai_message_cases() {
    let cases = [
        // (save_system_message, save_ai_messages, roles stored after the human message)
        (
            true,
            true,
            vec![Role::System, Role::Assistant, Role::Tool, Role::Assistant],
        ),
        (true, false, vec![Role::System]),
        (
            false,
            true,
            vec![Role::Assistant, Role::Tool, Role::Assistant],
        ),
        (false, false, vec![]),
    ];
    for (save_system_message, save_ai_messages, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let control = with_private_context(dir.path());
        control
            .add_messages(&alice(), "ctx", &[ControlMessage::human("hi")])
            .unwrap();
        let mut model = ScriptedModel::default();
        let generation = control
            .add_ai_message(
                &alice(),
                "ctx",
                AddAiMessage::Prompt {
                    prompt: "Consider the user is a beginner".into(),
                    save_system_message,
                    save_ai_messages,
                },
                &mut model,
            )
            .unwrap();
        let case = format!(
            "save_system_message={save_system_message}, save_ai_messages={save_ai_messages}"
        );
        let stored = control.entries(&alice(), "ctx").unwrap();
        let roles: Vec<Role> = stored[1..].iter().map(|entry| entry.role).collect();
        assert_eq!(roles, expected, "{case}");
        assert_eq!(generation.saved_ai_messages, save_ai_messages, "{case}");
        assert_eq!(generation.generated.len(), 3, "{case}");
        let ids = |entries: &[ConversationEntry]| {
            entries
                .iter()
                .map(|entry| entry.message_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&generation.stored), ids(&stored[1..]), "{case}");
        // The model saw the prompt as its last message either way.
        let seen = &model.seen[0];
        assert_eq!(seen.len(), 2, "{case}");
        assert_eq!(
            seen[1].content.as_deref(),
            Some("Consider the user is a beginner")
        );
        assert_eq!(
            seen[1].metadata.contains_key(STEERING_METADATA),
            !save_system_message
        );
    }
}

#[test]
fn a_pre_written_ai_message_is_always_saved_and_the_model_is_not_called() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    let mut model = ScriptedModel::default();
    let generation = control
        .add_ai_message(
            &alice(),
            "ctx",
            AddAiMessage::Message("I have processed your request successfully.".into()),
            &mut model,
        )
        .unwrap();
    assert!(model.seen.is_empty());
    assert!(generation.saved_ai_messages && generation.generated.is_empty());
    assert_eq!(
        control.messages(&alice(), "ctx").unwrap(),
        [ControlMessage::ai(
            "I have processed your request successfully."
        )]
    );
}

#[test]
fn a_failed_generation_saves_nothing_generated() {
    let dir = tempfile::tempdir().unwrap();
    let control = with_private_context(dir.path());
    let mut failing = |_: &[ConversationEntry]| -> Result<Vec<ConversationEntry>, String> {
        Err("rate limited".to_string())
    };
    let error = control
        .invoke(&alice(), "ctx", true, &mut failing)
        .unwrap_err();
    assert_eq!(error.to_string(), "generation failed: rate limited");
    // A model that leaves a call unanswered: its messages are refused whole.
    let mut dangling = |_: &[ConversationEntry]| -> Result<Vec<ConversationEntry>, String> {
        Ok(to_entries(
            &[ControlMessage::tool_call("c", "t", json!({}))],
            "m",
            0,
        ))
    };
    let error = control
        .invoke(&alice(), "ctx", true, &mut dangling)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Tool calls found without corresponding responses: ['c']"
    );
    assert!(control.entries(&alice(), "ctx").unwrap().is_empty());
}

#[test]
fn a_history_manager_curates_what_the_model_sees_not_what_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path())
        .reducer(ContextsReducer)
        .open()
        .unwrap();
    let control =
        MessageControl::new(Arc::new(store)).with_history_manager(Arc::new(SlidingWindow::new(1)));
    control.create_context(&alice(), "ctx", false).unwrap();
    let history: Vec<ControlMessage> = (0..6)
        .map(|index| ControlMessage::human(format!("m{index}")))
        .collect();
    control.add_messages(&alice(), "ctx", &history).unwrap();
    let mut model = ScriptedModel::default();
    control.invoke(&alice(), "ctx", true, &mut model).unwrap();
    assert_eq!(texts(&model.seen[0]), [(Role::User, "m5".to_string())]);
    assert_eq!(control.entries(&alice(), "ctx").unwrap().len(), 9);
}

// ---------------------------------------------------------------- shapes

#[test]
fn the_seed_json_shapes_round_trip() {
    let seed = json!([
        {"sender": "human", "message": "Search for user data"},
        {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "database_search",
         "tool_input": {"table": "users", "query": "active"}},
        {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "Found 100 active users"},
        {"sender": "ai", "message": "Here are the results"},
        {"sender": "system", "message": "Be brief"}
    ]);
    let messages: Vec<ControlMessage> = serde_json::from_value(seed.clone()).unwrap();
    assert_eq!(messages[0], ControlMessage::human("Search for user data"));
    assert_eq!(serde_json::to_value(&messages).unwrap(), seed);
    let entries = to_entries(&messages, "e", 10);
    assert_eq!(
        entries
            .iter()
            .map(|entry| (entry.role, entry.sequence))
            .collect::<Vec<_>>(),
        [
            (Role::User, 10),
            (Role::Assistant, 11),
            (Role::Tool, 12),
            (Role::Assistant, 13),
            (Role::System, 14)
        ]
    );
    assert_eq!(to_messages(&entries), messages);
}

#[test]
fn malformed_messages_are_refused_with_a_reason() {
    let error = |value| {
        serde_json::from_value::<ControlMessage>(value)
            .unwrap_err()
            .to_string()
    };
    assert!(error(json!({"message": "no sender"})).contains("\"sender\""));
    assert!(
        error(json!({"type": "tool_result", "tool_call_id": "x"})).contains("unknown message type")
    );
    assert!(error(json!({"type": "tool_call", "tool_name": "t"})).contains("tool_call_id"));
    assert!(error(json!({"sender": "robot", "message": "x"})).contains("robot"));
    assert!(error(json!("text")).contains("JSON object"));
}

#[test]
fn tool_calls_group_into_assistant_entries() {
    let messages = [
        ControlMessage::ai("Two lookups."),
        ControlMessage::tool_call("a", "search", json!({"q": 1})),
        ControlMessage::tool_call("b", "search", serde_json::Value::Null),
        ControlMessage::tool_call("a", "search", json!("not an object")),
        ControlMessage::tool_response("a", "A"),
    ];
    let entries = to_entries(&messages, "e", 0);
    assert_eq!(
        entries.len(),
        3,
        "a repeated call id starts a new assistant entry"
    );
    assert_eq!(entries[0].content.as_deref(), Some("Two lookups."));
    let ids = |entry: &ConversationEntry| {
        entry
            .tool_calls
            .iter()
            .map(|call| call.call_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&entries[0]), ["a", "b"]);
    assert_eq!(
        entries[0].tool_calls[1].arguments, "{}",
        "a missing input is {{}}"
    );
    assert_eq!(ids(&entries[1]), ["a"]);
    assert_eq!(entries[1].content, None);
    assert_eq!(
        entries[1].tool_calls[0].arguments, "not an object",
        "a string is verbatim"
    );
    // Back: arguments that are not JSON come back as a string input.
    let back = to_messages(&entries);
    assert_eq!(
        back[3],
        ControlMessage::tool_call("a", "search", json!("not an object"))
    );
    assert_eq!(back[2], ControlMessage::tool_call("b", "search", json!({})));
}

#[test]
fn failed_tool_results_keep_their_error_flag() {
    let mut result = ConversationEntry::new("e", 1, Role::Tool, Some("boom".into()));
    result.tool_call_id = Some("c".into());
    result.is_error = true;
    let messages = to_messages(&[result]);
    assert_eq!(
        serde_json::to_value(&messages).unwrap(),
        json!([{"type": "tool_response", "tool_call_id": "c", "tool_output": "boom", "is_error": true}])
    );
    assert!(to_entries(&messages, "e", 0)[0].is_error);
}

#[test]
#[should_panic(expected = "reducer was registered")]
fn a_store_without_the_contexts_reducer_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), Default::default()).unwrap());
    MessageControl::new(store);
}
