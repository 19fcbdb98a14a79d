//! Message control (`chat`, `invoke`, `add_ai_message` with its four save
//! cases, preview and approve) with the runner as its generator.

mod runner_support;

use std::sync::Arc;

use convlog::control::{AddAiMessage, ContextsReducer, MessageControl, Principal};
use convlog::model::{ConversationEntry, Role, ToolStatus};
use convlog::store::StoreBuilder;
use convlog::Store;
use convlog_agent::{Runner, RunnerGenerator, RunnerOptions, Toolset};
use runner_support::{weather_script, CountingTool, ScriptedClient, Shared};

const CONTEXT: &str = "ctx_123";

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    control: MessageControl,
    client: Arc<ScriptedClient>,
    tool: Arc<CountingTool>,
    generator: RunnerGenerator,
    alice: Principal,
}

fn fixture(
    script: impl Fn(&[ConversationEntry]) -> Result<ConversationEntry, convlog_agent::ModelError>
        + Send
        + Sync
        + 'static,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        StoreBuilder::new(dir.path())
            .reducer(ContextsReducer)
            .open()
            .unwrap(),
    );
    let control = MessageControl::new(Arc::clone(&store));
    let alice = Principal::user("alice");
    control.create_context(&alice, CONTEXT, false).unwrap();
    let client = ScriptedClient::new(script);
    let tool = CountingTool::new("weather");
    let runner = Runner::new(
        Arc::clone(&store),
        client.clone(),
        Toolset::new().with(Shared(Arc::clone(&tool))),
        RunnerOptions::new(),
    );
    let generator =
        RunnerGenerator::new(Arc::new(runner), CONTEXT, tokio::runtime::Handle::current());
    Fixture {
        _dir: dir,
        store,
        control,
        client,
        tool,
        generator,
        alice,
    }
}

fn stored(fixture: &Fixture) -> Vec<ConversationEntry> {
    fixture
        .store
        .conversation(CONTEXT)
        .map(|slice| slice.entries().cloned().collect())
        .unwrap_or_default()
}

fn roles(entries: &[ConversationEntry]) -> Vec<Role> {
    entries.iter().map(|entry| entry.role).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_saves_the_loop_s_messages_or_holds_them_for_approval() {
    let mut fixture = fixture(weather_script(&[&["paris", "rome"]]));
    let generation = fixture
        .control
        .chat(
            &fixture.alice,
            CONTEXT,
            "Weather?",
            true,
            &mut fixture.generator,
        )
        .unwrap();
    assert_eq!(
        roles(&generation.stored),
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(
        generation.response,
        "answer to Weather?: paris: sunny; rome: sunny"
    );
    assert_eq!(stored(&fixture), generation.stored);
    let calls = &generation.stored[1].tool_calls;
    assert!(calls
        .iter()
        .all(|call| call.status == ToolStatus::Completed));
    assert_eq!(fixture.tool.total(), 2);
    runner_support::assert_no_dangling(&fixture.client.requests());

    // Not saved: returned, then approved.
    let preview = fixture
        .control
        .chat(
            &fixture.alice,
            CONTEXT,
            "Again?",
            false,
            &mut fixture.generator,
        )
        .unwrap();
    assert_eq!(roles(&preview.stored), [Role::User]);
    assert_eq!(preview.generated.len(), 4);
    assert_eq!(stored(&fixture).len(), 6);
    let approved = fixture.control.approve(&fixture.alice, &preview).unwrap();
    assert_eq!(approved.entries.len(), 4);
    assert_eq!(stored(&fixture).len(), 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn invoke_generates_from_the_stored_history() {
    let mut fixture = fixture(weather_script(&[&["oslo"]]));
    fixture
        .control
        .add_messages(
            &fixture.alice,
            CONTEXT,
            &[convlog::control::ControlMessage::human("Oslo?")],
        )
        .unwrap();
    let generation = fixture
        .control
        .invoke(&fixture.alice, CONTEXT, true, &mut fixture.generator)
        .unwrap();
    assert_eq!(generation.response, "answer to Oslo?: oslo: sunny");
    assert_eq!(
        roles(&generation.stored),
        [Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(
        fixture.client.requests()[0].len(),
        1,
        "shown the stored history"
    );
}

/// The four save cases of `add_ai_message` with a prompt, and the
/// pre-written message.
#[tokio::test(flavor = "multi_thread")]
async fn add_ai_message_covers_the_four_save_cases() {
    let echo = |view: &[ConversationEntry]| {
        let system: Vec<String> = view
            .iter()
            .filter(|entry| entry.role == Role::System)
            .filter_map(|entry| entry.content.clone())
            .collect();
        Ok(ConversationEntry::assistant(
            "",
            0,
            format!("told: {}", system.join("|")),
        ))
    };
    for (save_system_message, save_ai_messages) in
        [(true, true), (true, false), (false, true), (false, false)]
    {
        let mut fixture = fixture(echo);
        let generation = fixture
            .control
            .add_ai_message(
                &fixture.alice,
                CONTEXT,
                AddAiMessage::Prompt {
                    prompt: "Greet.".into(),
                    save_system_message,
                    save_ai_messages,
                },
                &mut fixture.generator,
            )
            .unwrap();
        let case = format!("system {save_system_message}, ai {save_ai_messages}");
        assert_eq!(generation.response, "told: Greet.", "{case}");
        let mut expected = Vec::new();
        if save_system_message {
            expected.push(Role::System);
        }
        if save_ai_messages {
            expected.push(Role::Assistant);
        }
        assert_eq!(roles(&stored(&fixture)), expected, "{case}");
        assert_eq!(roles(&generation.stored), expected, "{case}");
        assert_eq!(generation.generated.len(), 1, "{case}");
    }

    let mut fixture = fixture(echo);
    let written = fixture
        .control
        .add_ai_message(
            &fixture.alice,
            CONTEXT,
            AddAiMessage::Message("Hello!".into()),
            &mut fixture.generator,
        )
        .unwrap();
    assert_eq!(roles(&written.stored), [Role::Assistant]);
    assert!(
        fixture.client.requests().is_empty(),
        "the model is not called"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_only_a_client_can_answer_is_refused_by_validation_and_nothing_is_saved() {
    let mut fixture = fixture(|_: &[ConversationEntry]| {
        Ok(ConversationEntry::assistant_calling(
            "",
            0,
            [convlog::ToolCall::new("call_ask", "ask_user", "{}")],
        ))
    });
    let error = fixture
        .control
        .chat(
            &fixture.alice,
            CONTEXT,
            "Plan",
            true,
            &mut fixture.generator,
        )
        .unwrap_err();
    assert!(
        matches!(error, convlog::Error::CallsWithoutResponses { .. }),
        "{error:?}"
    );
    assert_eq!(roles(&stored(&fixture)), [Role::User]);
}

#[tokio::test(flavor = "current_thread")]
async fn the_generator_refuses_to_block_a_current_thread_runtime() {
    let mut fixture = fixture(weather_script(&[]));
    let error = fixture
        .control
        .chat(&fixture.alice, CONTEXT, "Hi", true, &mut fixture.generator)
        .unwrap_err();
    assert!(error.to_string().contains("spawn_blocking"), "{error}");
    // From the blocking pool it works.
    let Fixture {
        control,
        mut generator,
        alice,
        ..
    } = fixture;
    let generation =
        tokio::task::spawn_blocking(move || control.invoke(&alice, CONTEXT, true, &mut generator))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(generation.response, "answer to Hi: ");
}
