//! Generation building blocks: the host's model, temporary steering, and
//! what a generation returns (held, not saved, until approved).

use crate::model::{ConversationEntry, Role, Timestamp};

use super::message::{to_messages, ControlMessage};

/// The host's model (and tool loop): given what it is shown, returns the
/// messages one generation produced, in order (tool calls, their results,
/// the final response). Their evaluation ids and sequences are replaced
/// when they are placed in a conversation; message ids are kept.
pub trait Generator {
    /// Generates from `view`; an error is reported as
    /// [`crate::Error::GenerationFailed`].
    fn generate(&mut self, view: &[ConversationEntry]) -> Result<Vec<ConversationEntry>, String>;
}

impl<F> Generator for F
where
    F: FnMut(&[ConversationEntry]) -> Result<Vec<ConversationEntry>, String>,
{
    fn generate(&mut self, view: &[ConversationEntry]) -> Result<Vec<ConversationEntry>, String> {
        self(view)
    }
}

/// Metadata key marking a temporary steering entry.
pub const STEERING_METADATA: &str = "convlog.steering";

/// A temporary steering entry: a system message with `text`, marked with
/// metadata `convlog.steering=true`, for one generation only.
pub fn steering_entry(text: &str) -> ConversationEntry {
    let mut entry = ConversationEntry::new("convlog-steering", 0, Role::System, Some(text.into()));
    entry.created_at = Timestamp(0);
    entry
        .metadata
        .insert(STEERING_METADATA.to_string(), "true".to_string());
    entry
}

/// What the model is shown: `history` followed by one system entry per
/// steering text. Nothing of it is stored.
pub fn steered_view(history: &[ConversationEntry], steering: &[String]) -> Vec<ConversationEntry> {
    let mut view = history.to_vec();
    view.extend(steering.iter().map(|text| steering_entry(text)));
    view
}

/// What the model returned for one request, and what was saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The context.
    pub context_id: String,
    /// The final AI text (the last assistant content), or the pre-written
    /// message.
    pub response: String,
    /// Whether the generated messages were saved.
    pub saved_ai_messages: bool,
    /// Every message the model produced, placed after the conversation as
    /// it stood (held here when not saved: approve them with
    /// [`super::MessageControl::approve`] or `add_messages`).
    pub generated: Vec<ConversationEntry>,
    /// What the model was shown: the (curated) history and any temporary
    /// steering. Empty for a pre-written message.
    pub model_view: Vec<ConversationEntry>,
    /// Everything this request stored, in order (the human or system
    /// message saved before generating, then the generated messages if
    /// saved).
    pub stored: Vec<ConversationEntry>,
}

impl Generation {
    /// The generated messages as message-control messages.
    pub fn generated_messages(&self) -> Vec<ControlMessage> {
        to_messages(&self.generated)
    }
}

/// The last assistant text of `generated`.
pub(crate) fn response_of(generated: &[ConversationEntry]) -> String {
    generated
        .iter()
        .rev()
        .filter(|entry| entry.role == Role::Assistant)
        .find_map(|entry| entry.content.clone().filter(|content| !content.is_empty()))
        .unwrap_or_default()
}

/// An add-AI-message request ([`super::MessageControl::add_ai_message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddAiMessage {
    /// A pre-written AI message, always saved; the model is not called.
    Message(String),
    /// A system prompt given to the model before it generates.
    Prompt {
        /// The prompt text.
        prompt: String,
        /// Save the prompt as a system message (else it only steers this
        /// one generation).
        save_system_message: bool,
        /// Save what the model generated (else it is only returned).
        save_ai_messages: bool,
    },
}
