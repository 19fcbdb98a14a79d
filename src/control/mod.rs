//! Message control as library operations: contexts with an
//! owner and a public flag, validated `add_messages` / `set_messages`,
//! preview and approve, and temporary steering.
//!
//! The store keeps the complete history: previews and steering only change
//! what is returned or what the model is shown, `set_messages` records one
//! `messages_replaced` event and leaves the old messages in the log.
//!
//! A [`MessageControl`] wraps a store opened with the [`ContextsReducer`]:
//!
//! ```
//! use std::sync::Arc;
//! use convlog::control::{ControlMessage, ContextsReducer, MessageControl, Principal};
//! use convlog::store::StoreBuilder;
//!
//! # let dir = tempfile::tempdir().unwrap();
//! let store = StoreBuilder::new(dir.path()).reducer(ContextsReducer).open().unwrap();
//! let control = MessageControl::new(Arc::new(store));
//! let alice = Principal::user("alice");
//! control.create_context(&alice, "ctx_123", false).unwrap();
//! control
//!     .add_messages(&alice, "ctx_123", &[ControlMessage::human("Hello!"), ControlMessage::ai("Hi!")])
//!     .unwrap();
//! let error = control
//!     .add_messages(&alice, "ctx_123", &[ControlMessage::tool_response("call_123", "done")])
//!     .unwrap_err();
//! assert_eq!(error.to_string(), "Tool responses found without corresponding tool calls: ['call_123']");
//! let bob = Principal::user("bob");
//! assert_eq!(control.messages(&bob, "ctx_123").unwrap_err().to_string(), "Context does not belong to user");
//! ```
//!
//! Validation and append are atomic against every other writer of the
//! store, not only this `MessageControl`: an add appends with
//! [`Store::append_with`] with an [`Expect`], expecting the conversation at the version it
//! validated against. When another writer (another `MessageControl` on the
//! same store, or the host appending directly) got there first, the add
//! reads the conversation again, places and validates its messages again
//! and retries, up to [`CONFLICT_RETRIES_MAX`] times; then it fails with
//! the store's [`crate::Error::Conflict`]. So two concurrent
//! `add_messages` can never both answer the same call. Operations of one
//! `MessageControl` on the same context are also serialized by a lock, so
//! they do not retry against each other.
//!
//! Every operation fails with [`crate::Error`]; message control's own
//! failures are its variants `ContextNotFound`, `NotContextOwner`,
//! `ContextExists`, `AnonymousPrivateContext`, `ResponsesWithoutCalls`,
//! `ResponseBeforeCall`, `CallsWithoutResponses`, `DuplicateOpenCallIds` and
//! `GenerationFailed`, whose texts are fixed (`docs/history.md`):
//!
//! ```
//! # use std::sync::Arc;
//! # use convlog::control::{ContextsReducer, MessageControl, Principal};
//! # use convlog::store::StoreBuilder;
//! # let dir = tempfile::tempdir().unwrap();
//! # let store = StoreBuilder::new(dir.path()).reducer(ContextsReducer).open().unwrap();
//! # let control = MessageControl::new(Arc::new(store));
//! match control.messages(&Principal::user("alice"), "ctx_404") {
//!     Err(convlog::Error::ContextNotFound { context_id }) => assert_eq!(context_id, "ctx_404"),
//!     other => panic!("expected ContextNotFound, got {other:?}"),
//! }
//! ```

mod contexts;
mod generate;
pub mod message;
mod validate;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;
use uuid::Uuid;

use crate::conversation::ConversationSlice;
use crate::history::{CurationContext, HistoryManager};
use crate::log::Lsn;
use crate::model::{ConversationEntry, Event, MessagesReplaced, Role, Timestamp};
use crate::store::{AppendOptions, Expect, Store};
use crate::{Error, Result};

pub use contexts::{
    context_created_event, context_visibility_event, ContextInfo, ContextRegistry, ContextsReducer,
    Principal, CONTEXT_CREATED, CONTEXT_VISIBILITY,
};
pub use generate::{
    steered_view, steering_entry, AddAiMessage, Generation, Generator, STEERING_METADATA,
};
pub use message::{ChatMessage, ControlMessage, Sender, ToolCallMessage, ToolResponseMessage};
pub use validate::validate_added;

/// How many locks serialize operations per context (by hash of the id).
const CONTEXT_LOCKS: usize = 64;

/// How many times an add validates again and retries after another writer
/// of the store appended to the context between its read and its append.
pub const CONFLICT_RETRIES_MAX: usize = 8;

/// What an add or set stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// LSNs of the events appended (empty when nothing was).
    pub lsns: Range<Lsn>,
    /// The entries as stored, in order.
    pub entries: Vec<ConversationEntry>,
}

/// Message control over a store opened with [`ContextsReducer`].
pub struct MessageControl {
    store: Arc<Store>,
    locks: Vec<Mutex<()>>,
    manager: Option<Arc<dyn HistoryManager>>,
}

impl std::fmt::Debug for MessageControl {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("MessageControl")
            .field("store", &self.store)
            .field(
                "manager",
                &self.manager.as_ref().map(|manager| manager.strategy()),
            )
            .finish()
    }
}

impl MessageControl {
    /// Message control over `store`.
    ///
    /// # Panics
    ///
    /// If the store was opened without [`ContextsReducer`] registered.
    pub fn new(store: Arc<Store>) -> MessageControl {
        let _ = store.slice::<ContextsReducer>();
        MessageControl {
            store,
            locks: (0..CONTEXT_LOCKS).map(|_| Mutex::new(())).collect(),
            manager: None,
        }
    }

    /// Curates what the model is shown in generations with `manager` (the
    /// stored history is untouched).
    pub fn with_history_manager(mut self, manager: Arc<dyn HistoryManager>) -> MessageControl {
        self.manager = Some(manager);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Every context. Fails when the store no longer serves host slices
    /// (a reducer panicked, or a failed fsync took back folded events).
    pub fn registry(&self) -> Result<ContextRegistry> {
        self.store.slice::<ContextsReducer>()
    }

    fn lock(&self, context_id: &str) -> parking_lot::MutexGuard<'_, ()> {
        let mut hasher = DefaultHasher::new();
        context_id.hash(&mut hasher);
        self.locks[(hasher.finish() % CONTEXT_LOCKS as u64) as usize].lock()
    }

    /// The context, if `principal` may use it.
    fn authorize(&self, principal: &Principal, context_id: &str) -> Result<ContextInfo> {
        let registry = self.registry()?;
        let info = registry
            .get(context_id)
            .ok_or_else(|| Error::ContextNotFound {
                context_id: context_id.to_string(),
            })?;
        if !info.allows(principal) {
            return Err(Error::NotContextOwner {
                context_id: context_id.to_string(),
            });
        }
        Ok(info.clone())
    }

    /// Creates context `context_id` owned by `principal`. An anonymous
    /// principal can only create public contexts (with no owner).
    pub fn create_context(
        &self,
        principal: &Principal,
        context_id: &str,
        public: bool,
    ) -> Result<ContextInfo> {
        if principal.id().is_none() && !public {
            return Err(Error::AnonymousPrivateContext {
                context_id: context_id.to_string(),
            });
        }
        let _guard = self.lock(context_id);
        if self.registry()?.get(context_id).is_some() {
            return Err(Error::ContextExists {
                context_id: context_id.to_string(),
            });
        }
        self.store
            .append(&[context_created_event(context_id, principal.id(), public)])?;
        self.authorize(principal, context_id)
    }

    /// The context's metadata, if `principal` may use it.
    pub fn context(&self, principal: &Principal, context_id: &str) -> Result<ContextInfo> {
        self.authorize(principal, context_id)
    }

    /// Makes the context public or private; only its owner may.
    pub fn set_public(
        &self,
        principal: &Principal,
        context_id: &str,
        public: bool,
    ) -> Result<ContextInfo> {
        let _guard = self.lock(context_id);
        let info = self.authorize(principal, context_id)?;
        if !info.is_owned_by(principal) {
            return Err(Error::NotContextOwner {
                context_id: context_id.to_string(),
            });
        }
        if info.public != public {
            self.store
                .append(&[context_visibility_event(context_id, public)])?;
        }
        self.authorize(principal, context_id)
    }

    /// The conversation's folded slice (`None` before its first message).
    fn slice(&self, context_id: &str) -> Result<Option<ConversationSlice>> {
        match self.store.conversation(context_id) {
            Ok(slice) => Ok(Some(slice)),
            Err(Error::ConversationNotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn stored_entries(&self, context_id: &str) -> Result<Vec<ConversationEntry>> {
        Ok(self
            .slice(context_id)?
            .map(|slice| slice.entries().cloned().collect())
            .unwrap_or_default())
    }

    /// Every stored entry of the context, in order.
    pub fn entries(
        &self,
        principal: &Principal,
        context_id: &str,
    ) -> Result<Vec<ConversationEntry>> {
        self.authorize(principal, context_id)?;
        self.stored_entries(context_id)
    }

    /// Every stored message of the context as message-control messages
    /// (tool calls visible).
    pub fn messages(&self, principal: &Principal, context_id: &str) -> Result<Vec<ControlMessage>> {
        Ok(message::to_messages(&self.entries(principal, context_id)?))
    }

    /// Appends `messages` to the context atomically (one batch), after
    /// [`validate_added`] against the stored conversation. On any error
    /// nothing is appended.
    ///
    /// The entries continue the conversation's latest evaluation (a new
    /// `control-<uuid>` one when it has no entries), with the next
    /// sequences; each assistant entry advances the turn; a response to a
    /// stored call takes that call's tool name.
    pub fn add_messages(
        &self,
        principal: &Principal,
        context_id: &str,
        messages: &[ControlMessage],
    ) -> Result<Applied> {
        let entries = message::to_entries(messages, "control", 0);
        self.add_placed(principal, context_id, entries)
    }

    /// Appends neutral `entries` as they are (their evaluation ids and
    /// sequences are the caller's), with the same validation and atomicity
    /// as [`MessageControl::add_messages`].
    pub fn add_entries(
        &self,
        principal: &Principal,
        context_id: &str,
        entries: Vec<ConversationEntry>,
    ) -> Result<Applied> {
        let _guard = self.lock(context_id);
        self.authorize(principal, context_id)?;
        self.append_validated(context_id, |_| entries.clone())
    }

    /// Approves a held generation: appends its generated messages, placed
    /// after the conversation as it stands now, like
    /// [`MessageControl::add_messages`] (same validation; message ids are
    /// kept, so approving twice records them once).
    pub fn approve(&self, principal: &Principal, generation: &Generation) -> Result<Applied> {
        self.add_placed(
            principal,
            &generation.context_id,
            generation.generated.clone(),
        )
    }

    fn add_placed(
        &self,
        principal: &Principal,
        context_id: &str,
        entries: Vec<ConversationEntry>,
    ) -> Result<Applied> {
        let _guard = self.lock(context_id);
        self.authorize(principal, context_id)?;
        self.append_validated(context_id, |slice| place(slice, entries.clone()))
    }

    /// Reads the conversation, makes the entries to add from it
    /// (`prepare`), validates them against it and appends them if the
    /// conversation is still at the version read; on a conflict, all of it
    /// again (see the module documentation).
    fn append_validated(
        &self,
        context_id: &str,
        prepare: impl Fn(Option<&ConversationSlice>) -> Vec<ConversationEntry>,
    ) -> Result<Applied> {
        let mut retries = 0;
        loop {
            let slice = self.slice(context_id)?;
            let version = slice.as_ref().map_or(0, ConversationSlice::last_lsn);
            let entries = prepare(slice.as_ref());
            let existing: Vec<ConversationEntry> = slice
                .as_ref()
                .map(|slice| slice.entries().cloned().collect())
                .unwrap_or_default();
            validate_added(&existing, &entries)?;
            if entries.is_empty() {
                return Ok(Applied {
                    lsns: 0..0,
                    entries,
                });
            }
            let events: Vec<Event> = entries
                .iter()
                .map(|entry| entry.clone().recorded_in(context_id))
                .collect();
            match self.store.append_with(
                &events,
                AppendOptions::new().expect(Expect::conversation(context_id, version)),
            ) {
                Ok(lsns) => return Ok(Applied { lsns, entries }),
                Err(Error::Conflict { .. }) if retries < CONFLICT_RETRIES_MAX => {
                    retries += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Replaces every message of the context with `messages` atomically
    /// (one `messages_replaced` event), after the same validation as
    /// [`MessageControl::add_messages`] against an empty conversation. The
    /// old messages stay in the log. The new entries form one new
    /// evaluation (`control-<uuid>`), sequences from 0.
    pub fn set_messages(
        &self,
        principal: &Principal,
        context_id: &str,
        messages: &[ControlMessage],
    ) -> Result<Applied> {
        let entries = message::to_entries(messages, &new_evaluation_id(), 0);
        let entries = number_turns(entries, 0);
        self.set_entries(principal, context_id, entries)
    }

    /// Replaces every message of the context with neutral `entries` as they
    /// are, like [`MessageControl::set_messages`].
    pub fn set_entries(
        &self,
        principal: &Principal,
        context_id: &str,
        entries: Vec<ConversationEntry>,
    ) -> Result<Applied> {
        let _guard = self.lock(context_id);
        self.authorize(principal, context_id)?;
        validate_added(&[], &entries)?;
        let event = Event::MessagesReplaced(MessagesReplaced {
            conversation_id: context_id.to_string(),
            entries: entries.clone(),
            at: Timestamp::now(),
        });
        let lsns = self.store.append(&[event])?;
        Ok(Applied { lsns, entries })
    }

    /// The core of every generating request: shows the model the stored
    /// history (curated by the history manager, if any) followed by the
    /// temporary `steering` system messages, and saves what it generated
    /// when `save_ai_messages` (validated like `add_messages`; on a
    /// validation error nothing generated is saved). Steering is never
    /// stored.
    pub fn generate(
        &self,
        principal: &Principal,
        context_id: &str,
        steering: &[String],
        save_ai_messages: bool,
        generator: &mut dyn Generator,
    ) -> Result<Generation> {
        self.authorize(principal, context_id)?;
        let slice = self.slice(context_id)?;
        let history: Vec<ConversationEntry> = slice
            .as_ref()
            .map(|slice| slice.entries().cloned().collect())
            .unwrap_or_default();
        let curated = match &self.manager {
            Some(manager) => {
                let mut context = CurationContext::new().with_store(&self.store);
                if let Some(slice) = &slice {
                    context = context.with_conversation(slice);
                }
                manager.curate(&history, &context)
            }
            None => history,
        };
        let model_view = steered_view(&curated, steering);
        let generated =
            generator
                .generate(&model_view)
                .map_err(|reason| Error::GenerationFailed {
                    context_id: context_id.to_string(),
                    reason,
                })?;
        let generated = place(slice.as_ref(), generated);
        let stored = if save_ai_messages {
            self.add_placed(principal, context_id, generated.clone())?
                .entries
        } else {
            Vec::new()
        };
        Ok(Generation {
            context_id: context_id.to_string(),
            response: generate::response_of(&generated),
            saved_ai_messages: save_ai_messages,
            generated: if save_ai_messages {
                stored.clone()
            } else {
                generated
            },
            model_view,
            stored,
        })
    }

    /// A chat request: saves the human `message` at once, then
    /// generates; the generated messages are saved when `save_ai_messages`
    /// and held in the returned [`Generation`] otherwise.
    pub fn chat(
        &self,
        principal: &Principal,
        context_id: &str,
        message: &str,
        save_ai_messages: bool,
        generator: &mut dyn Generator,
    ) -> Result<Generation> {
        let human = self.add_messages(principal, context_id, &[ControlMessage::human(message)])?;
        let mut generation =
            self.generate(principal, context_id, &[], save_ai_messages, generator)?;
        generation.stored.splice(0..0, human.entries);
        Ok(generation)
    }

    /// An invoke request: generates from the stored history with no
    /// new message.
    pub fn invoke(
        &self,
        principal: &Principal,
        context_id: &str,
        save_ai_messages: bool,
        generator: &mut dyn Generator,
    ) -> Result<Generation> {
        self.generate(principal, context_id, &[], save_ai_messages, generator)
    }

    /// An add-AI-message request:
    ///
    /// - [`AddAiMessage::Message`]: saves the AI message; the model is not
    ///   called and nothing is generated.
    /// - [`AddAiMessage::Prompt`]: with `save_system_message`, the prompt is
    ///   saved as a system message before the model runs (it stays even if
    ///   the model fails); without, it steers this generation only and is
    ///   never stored. The generated messages are saved per
    ///   `save_ai_messages`. The four combinations are the cases 1-4 of
    ///   `docs/history.md`.
    pub fn add_ai_message(
        &self,
        principal: &Principal,
        context_id: &str,
        request: AddAiMessage,
        generator: &mut dyn Generator,
    ) -> Result<Generation> {
        match request {
            AddAiMessage::Message(text) => {
                let applied =
                    self.add_messages(principal, context_id, &[ControlMessage::ai(text.clone())])?;
                Ok(Generation {
                    context_id: context_id.to_string(),
                    response: text,
                    saved_ai_messages: true,
                    generated: Vec::new(),
                    model_view: Vec::new(),
                    stored: applied.entries,
                })
            }
            AddAiMessage::Prompt {
                prompt,
                save_system_message,
                save_ai_messages,
            } => {
                if save_system_message {
                    let system = self.add_messages(
                        principal,
                        context_id,
                        &[ControlMessage::system(prompt)],
                    )?;
                    let mut generation =
                        self.generate(principal, context_id, &[], save_ai_messages, generator)?;
                    generation.stored.splice(0..0, system.entries);
                    Ok(generation)
                } else {
                    self.generate(
                        principal,
                        context_id,
                        &[prompt],
                        save_ai_messages,
                        generator,
                    )
                }
            }
        }
    }
}

fn new_evaluation_id() -> String {
    format!("control-{}", Uuid::new_v4().simple())
}

/// Places `entries` after the conversation: in its latest evaluation (a new
/// one when it has none) with the next sequences and turns; a response to a
/// stored call takes that call's tool name when it has none.
fn place(
    slice: Option<&ConversationSlice>,
    mut entries: Vec<ConversationEntry>,
) -> Vec<ConversationEntry> {
    let latest = slice.and_then(ConversationSlice::latest_evaluation);
    let evaluation_id = latest.map_or_else(new_evaluation_id, str::to_string);
    let (first_sequence, turn) = match (slice, latest) {
        (Some(slice), Some(latest)) => (
            slice.next_sequence(latest),
            slice
                .evaluation(latest)
                .iter()
                .map(|entry| entry.turn)
                .max()
                .unwrap_or(0),
        ),
        _ => (0, 0),
    };
    for (offset, entry) in (0u64..).zip(entries.iter_mut()) {
        entry.evaluation_id = evaluation_id.clone();
        // Saturating, never wrapping: a sequence past SEQUENCE_MAX is then
        // refused by validation, naming the limit.
        entry.sequence = first_sequence.saturating_add(offset);
        if entry.role == Role::Tool && entry.tool_name.is_none() {
            entry.tool_name = entry
                .tool_call_id
                .as_deref()
                .and_then(|call_id| slice?.tool_call(call_id))
                .map(|(_, call)| call.name.clone());
        }
    }
    number_turns(entries, turn)
}

/// Each assistant entry starts the next turn after `turn`; other entries
/// carry the current one.
fn number_turns(mut entries: Vec<ConversationEntry>, mut turn: u32) -> Vec<ConversationEntry> {
    for entry in &mut entries {
        if entry.role == Role::Assistant {
            // Stored turns are at most TURN_MAX (< u32::MAX): no wrap; a
            // saturated turn is refused by validation, naming TURN_MAX.
            turn = turn.saturating_add(1);
        }
        entry.turn = turn;
    }
    entries
}
