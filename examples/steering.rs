//! The four cases of message control's add-ai-message with a prompt:
//! `save_system_message` × `save_ai_messages`. For each, a fresh context
//! holds one human question; a scripted model (no network) answers, and the
//! example prints what the model saw and what the store kept. Case 2 then
//! approves its preview; case 3 shows the next generation is unsteered.
//!
//! ```sh
//! cargo run --example steering
//! ```

use std::sync::Arc;

use convlog::control::{
    AddAiMessage, ContextsReducer, ControlMessage, Generation, MessageControl, Principal,
    STEERING_METADATA,
};
use convlog::model::{ConversationEntry, Role};
use convlog::store::StoreBuilder;

const QUESTION: &str = "How do I sort a list in Python?";
const PROMPT: &str = "Consider the user is a beginner.";

/// Answers plainly when a system message asks for a beginner, tersely
/// otherwise.
fn scripted_model(view: &[ConversationEntry]) -> Result<Vec<ConversationEntry>, String> {
    let for_beginner = view.iter().any(|entry| {
        entry.role == Role::System
            && entry
                .content
                .as_deref()
                .is_some_and(|text| text.contains("beginner"))
    });
    let answer = if for_beginner {
        "Call sorted(your_list): it gives you a new list, smallest first."
    } else {
        "sorted(xs) or xs.sort(); key= and reverse= as needed."
    };
    Ok(vec![ConversationEntry::assistant("model", 0, answer)])
}

fn line(entry: &ConversationEntry) -> String {
    let role = match entry.role {
        Role::System if entry.metadata.contains_key(STEERING_METADATA) => "system (temporary)",
        Role::System => "system",
        Role::User => "human",
        Role::Assistant => "ai",
        Role::Tool => "tool",
    };
    format!("{role:>18}: {}", entry.content.as_deref().unwrap_or(""))
}

fn show(title: &str, entries: &[ConversationEntry]) {
    println!("  {title}:");
    if entries.is_empty() {
        println!("{:>20}", "(nothing)");
    }
    for entry in entries {
        println!("  {}", line(entry));
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let user = Principal::user("alice");
    for (case, save_system_message, save_ai_messages) in [
        (1, true, true),
        (2, true, false),
        (3, false, true),
        (4, false, false),
    ] {
        let dir = tempfile::tempdir()?;
        let store = StoreBuilder::new(dir.path())
            .reducer(ContextsReducer)
            .open()?;
        let control = MessageControl::new(Arc::new(store));
        control.create_context(&user, "ctx_123", false)?;
        control.add_messages(&user, "ctx_123", &[ControlMessage::human(QUESTION)])?;

        let generation: Generation = control.add_ai_message(
            &user,
            "ctx_123",
            AddAiMessage::Prompt {
                prompt: PROMPT.to_string(),
                save_system_message,
                save_ai_messages,
            },
            &mut scripted_model,
        )?;

        println!(
            "Case {case}: save_system_message={save_system_message}, save_ai_messages={save_ai_messages}"
        );
        show("the model saw", &generation.model_view);
        show("returned (generated_messages)", &generation.generated);
        show("stored in the context", &control.entries(&user, "ctx_123")?);
        if case == 2 {
            // Preview: approve later through add_messages, as message control does.
            control.add_messages(&user, "ctx_123", &generation.generated_messages())?;
            show(
                "stored after approving the preview",
                &control.entries(&user, "ctx_123")?,
            );
        }
        if case == 3 {
            // The steering was for one generation: the next one is unsteered.
            let next = control.invoke(&user, "ctx_123", false, &mut scripted_model)?;
            show("the next generation saw", &next.model_view);
            show("and answered (not saved)", &next.generated);
        }
        println!();
    }
    Ok(())
}
