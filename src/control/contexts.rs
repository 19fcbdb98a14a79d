//! Contexts: conversations with an owner and a public flag, kept durably
//! as custom events and folded by a host reducer.
//!
//! Two event kinds, each a `custom` event whose `conversation_id` is the
//! context id and whose payload is a JSON object:
//!
//! - `convlog.context.created`: `{"owner": "alice", "public": false}`
//!   (`owner` is `null` for a context created anonymously, which is public);
//! - `convlog.context.visibility`: `{"public": true}`.
//!
//! [`ContextsReducer`] folds them into a [`ContextRegistry`]. Register it
//! when opening the store: `StoreBuilder::new(dir).reducer(ContextsReducer)`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::log::Lsn;
use crate::model::{CustomEvent, Event};
use crate::reducer::Reducer;

/// Kind of the event that creates a context.
pub const CONTEXT_CREATED: &str = "convlog.context.created";
/// Kind of the event that makes a context public or private.
pub const CONTEXT_VISIBILITY: &str = "convlog.context.visibility";

/// Who is acting: a user, or nobody authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// No authenticated user: may use public contexts only.
    Anonymous,
    /// An authenticated user id.
    User(String),
}

impl Principal {
    /// The user `id`.
    pub fn user(id: impl Into<String>) -> Principal {
        Principal::User(id.into())
    }

    /// The user id, if any.
    pub fn id(&self) -> Option<&str> {
        match self {
            Principal::Anonymous => None,
            Principal::User(id) => Some(id),
        }
    }
}

/// A context's access metadata.
///
/// On-disk format: field order is part of the `convlog.contexts/v1` host
/// slice in snapshots (stored in this order, without names); do not
/// reorder, insert or remove fields without renaming the reducer.
/// `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextInfo {
    /// The context (= conversation) id.
    pub context_id: String,
    /// Its owner; `None` for a context created anonymously.
    pub owner: Option<String>,
    /// Whether anyone may use it.
    pub public: bool,
    /// LSN of the event that created it.
    pub created_lsn: Lsn,
}

impl ContextInfo {
    /// Whether `principal` may read and write it: anyone if it is public,
    /// else only its owner.
    pub fn allows(&self, principal: &Principal) -> bool {
        self.public || (self.owner.is_some() && self.owner.as_deref() == principal.id())
    }

    /// Whether `principal` owns it.
    pub fn is_owned_by(&self, principal: &Principal) -> bool {
        self.owner.is_some() && self.owner.as_deref() == principal.id()
    }
}

/// Every context, folded from the context events. Cloning is cheap (the
/// maps are shared and copied on the next write).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextRegistry {
    contexts: Arc<BTreeMap<String, ContextInfo>>,
    rejected: Arc<Vec<(Lsn, String)>>,
}

impl ContextRegistry {
    /// The context `context_id`, if it was created.
    pub fn get(&self, context_id: &str) -> Option<&ContextInfo> {
        self.contexts.get(context_id)
    }

    /// Every context, by id.
    pub fn contexts(&self) -> impl Iterator<Item = &ContextInfo> {
        self.contexts.values()
    }

    /// How many contexts there are.
    pub fn len(&self) -> usize {
        self.contexts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty()
    }

    /// Context events the fold kept out (undecodable payload, a second
    /// creation, a change to an unknown context), with their LSNs.
    pub fn rejected(&self) -> &[(Lsn, String)] {
        &self.rejected
    }

    fn reject(&mut self, lsn: Lsn, reason: String) {
        Arc::make_mut(&mut self.rejected).push((lsn, reason));
    }
}

/// The registry's stored form (snapshots).
///
/// On-disk format: field order is part of the `convlog.contexts/v1` host
/// slice (do not reorder; the `Borrowed` form below writes the same fields
/// in the same order). `codec`'s golden tests pin the bytes.
#[derive(Serialize, Deserialize)]
struct StoredRegistry {
    contexts: BTreeMap<String, ContextInfo>,
    rejected: Vec<(Lsn, String)>,
}

impl Serialize for ContextRegistry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Borrowed<'a> {
            contexts: &'a BTreeMap<String, ContextInfo>,
            rejected: &'a Vec<(Lsn, String)>,
        }
        Borrowed {
            contexts: &self.contexts,
            rejected: &self.rejected,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ContextRegistry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ContextRegistry, D::Error> {
        let stored = StoredRegistry::deserialize(deserializer)?;
        Ok(ContextRegistry {
            contexts: Arc::new(stored.contexts),
            rejected: Arc::new(stored.rejected),
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreatedPayload {
    owner: Option<String>,
    public: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct VisibilityPayload {
    public: bool,
}

/// The event that creates context `context_id`.
pub fn context_created_event(context_id: &str, owner: Option<&str>, public: bool) -> Event {
    let payload = CreatedPayload {
        owner: owner.map(str::to_string),
        public,
    };
    custom(CONTEXT_CREATED, context_id, &payload)
}

/// The event that makes context `context_id` public or private.
pub fn context_visibility_event(context_id: &str, public: bool) -> Event {
    custom(
        CONTEXT_VISIBILITY,
        context_id,
        &VisibilityPayload { public },
    )
}

fn custom(kind: &str, context_id: &str, payload: &impl Serialize) -> Event {
    Event::Custom(CustomEvent {
        kind: kind.to_string(),
        conversation_id: Some(context_id.to_string()),
        payload: serde_json::to_vec(payload).expect("a plain struct serializes to JSON"),
    })
}

/// Folds the context events into a [`ContextRegistry`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ContextsReducer;

impl Reducer for ContextsReducer {
    type Slice = ContextRegistry;

    fn name(&self) -> &str {
        "convlog.contexts/v1"
    }

    fn apply(&self, registry: &mut ContextRegistry, event: &Event, lsn: Lsn) {
        let Event::Custom(custom) = event else {
            return;
        };
        if custom.kind != CONTEXT_CREATED && custom.kind != CONTEXT_VISIBILITY {
            return;
        }
        let Some(context_id) = custom.conversation_id.as_deref() else {
            registry.reject(lsn, format!("{} without a conversation_id", custom.kind));
            return;
        };
        if custom.kind == CONTEXT_CREATED {
            match serde_json::from_slice::<CreatedPayload>(&custom.payload) {
                Ok(_) if registry.contexts.contains_key(context_id) => {
                    registry.reject(lsn, format!("context {context_id:?} created again"));
                }
                Ok(created) => {
                    let info = ContextInfo {
                        context_id: context_id.to_string(),
                        public: created.public || created.owner.is_none(),
                        owner: created.owner,
                        created_lsn: lsn,
                    };
                    Arc::make_mut(&mut registry.contexts).insert(context_id.to_string(), info);
                }
                Err(error) => registry.reject(lsn, format!("{CONTEXT_CREATED} payload: {error}")),
            }
        } else {
            match serde_json::from_slice::<VisibilityPayload>(&custom.payload) {
                Ok(change) => match registry
                    .contexts
                    .get(context_id)
                    .map(|info| info.owner.is_some())
                {
                    Some(true) => {
                        if let Some(info) =
                            Arc::make_mut(&mut registry.contexts).get_mut(context_id)
                        {
                            info.public = change.public;
                        }
                    }
                    Some(false) => registry.reject(
                        lsn,
                        format!("context {context_id:?} has no owner and stays public"),
                    ),
                    None => registry.reject(lsn, format!("context {context_id:?} does not exist")),
                },
                Err(error) => {
                    registry.reject(lsn, format!("{CONTEXT_VISIBILITY} payload: {error}"))
                }
            }
        }
    }
}
