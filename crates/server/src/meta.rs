//! What the server keeps about a context beyond the core's owner and public
//! flag: its agent, the client's `user_defined` object and its creation
//! time. One custom event of kind [`CONTEXT_META`] per context, appended in
//! the same atomic batch as the core's `convlog.context.created`, folded by
//! [`ServerMetaReducer`].

use std::collections::BTreeMap;
use std::sync::Arc;

use convlog::log::Lsn;
use convlog::model::{CustomEvent, Event};
use convlog::reducer::Reducer;
use serde::{Deserialize, Serialize};

/// Kind of the event carrying a context's server metadata.
pub const CONTEXT_META: &str = "convlog.server.context";

/// A context's server metadata.
///
/// On-disk format: stored in this field order in the
/// `convlog.server.contexts/v1` host slice of snapshots; do not reorder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextMeta {
    /// The agent its generations use.
    pub agent_id: String,
    /// The client's object, as compact JSON text.
    pub user_defined: String,
    /// When it was created, microseconds since the Unix epoch.
    pub created_at: i64,
}

/// Every context's server metadata.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerMeta {
    contexts: Arc<BTreeMap<String, ContextMeta>>,
}

impl ServerMeta {
    /// The metadata of `context_id`, if the server created it.
    pub fn get(&self, context_id: &str) -> Option<&ContextMeta> {
        self.contexts.get(context_id)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    agent_id: String,
    user_defined: serde_json::Value,
    created_at: i64,
}

/// The event recording `meta` for `context_id`.
pub fn context_meta_event(context_id: &str, meta: &ContextMeta) -> Event {
    let user_defined = serde_json::from_str(&meta.user_defined).unwrap_or_default();
    let payload = Payload {
        agent_id: meta.agent_id.clone(),
        user_defined,
        created_at: meta.created_at,
    };
    Event::Custom(CustomEvent {
        kind: CONTEXT_META.to_string(),
        conversation_id: Some(context_id.to_string()),
        payload: serde_json::to_vec(&payload).expect("a plain struct serializes to JSON"),
    })
}

/// Folds [`CONTEXT_META`] events into [`ServerMeta`] (the first per
/// context wins; undecodable ones are skipped).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerMetaReducer;

impl Reducer for ServerMetaReducer {
    type Slice = ServerMeta;

    fn name(&self) -> &str {
        "convlog.server.contexts/v1"
    }

    fn apply(&self, slice: &mut ServerMeta, event: &Event, _lsn: Lsn) {
        let Event::Custom(custom) = event else {
            return;
        };
        if custom.kind != CONTEXT_META {
            return;
        }
        let Some(context_id) = custom.conversation_id.as_deref() else {
            return;
        };
        if slice.contexts.contains_key(context_id) {
            return;
        }
        if let Ok(payload) = serde_json::from_slice::<Payload>(&custom.payload) {
            let meta = ContextMeta {
                agent_id: payload.agent_id,
                user_defined: payload.user_defined.to_string(),
                created_at: payload.created_at,
            };
            Arc::make_mut(&mut slice.contexts).insert(context_id.to_string(), meta);
        }
    }
}

/// Kind of the event that opens or closes a recorded generation of a
/// context: `{"open": true}` once its request's message is saved and the
/// runner starts, `{"open": false}` when the runner returns (an answer,
/// pending calls, the step limit or an error). A server killed or stopped
/// in between leaves the generation open, which is how `resume_on_start`
/// finds a generation interrupted while it waited for the model: the
/// conversation alone cannot tell it from one a client left unanswered.
pub const GENERATION: &str = "convlog.server.generation";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerationPayload {
    open: bool,
}

/// The event opening (`open`) or closing a recorded generation of
/// `context_id`.
pub fn generation_event(context_id: &str, open: bool) -> Event {
    Event::Custom(CustomEvent {
        kind: GENERATION.to_string(),
        conversation_id: Some(context_id.to_string()),
        payload: serde_json::to_vec(&GenerationPayload { open })
            .expect("a plain struct serializes to JSON"),
    })
}

/// The contexts with a recorded generation open (see [`GENERATION`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpenGenerations {
    contexts: Arc<std::collections::BTreeSet<String>>,
}

impl OpenGenerations {
    /// The contexts whose latest recorded generation never closed, by id.
    pub fn contexts(&self) -> impl Iterator<Item = &str> {
        self.contexts.iter().map(String::as_str)
    }

    /// Whether `context_id` has one.
    pub fn contains(&self, context_id: &str) -> bool {
        self.contexts.contains(context_id)
    }
}

/// Folds [`GENERATION`] events into [`OpenGenerations`] (the latest event
/// of a context decides; undecodable ones are skipped).
#[derive(Debug, Clone, Copy, Default)]
pub struct GenerationsReducer;

impl Reducer for GenerationsReducer {
    type Slice = OpenGenerations;

    fn name(&self) -> &str {
        "convlog.server.generations/v1"
    }

    fn apply(&self, slice: &mut OpenGenerations, event: &Event, _lsn: Lsn) {
        let Event::Custom(custom) = event else {
            return;
        };
        if custom.kind != GENERATION {
            return;
        }
        let Some(context_id) = custom.conversation_id.as_deref() else {
            return;
        };
        let Ok(payload) = serde_json::from_slice::<GenerationPayload>(&custom.payload) else {
            return;
        };
        if payload.open != slice.contexts.contains(context_id) {
            let contexts = Arc::make_mut(&mut slice.contexts);
            if payload.open {
                contexts.insert(context_id.to_string());
            } else {
                contexts.remove(context_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_generation_event_of_a_context_decides() {
        let reducer = GenerationsReducer;
        let mut open = OpenGenerations::default();
        reducer.apply(&mut open, &generation_event("a", true), 1);
        reducer.apply(&mut open, &generation_event("b", true), 2);
        reducer.apply(&mut open, &generation_event("a", false), 3);
        assert_eq!(open.contexts().collect::<Vec<_>>(), ["b"]);
        reducer.apply(&mut open, &generation_event("a", true), 4);
        assert!(open.contains("a") && open.contains("b"));
        // Another kind, or a payload this version cannot read, changes nothing.
        let mut other = generation_event("b", false);
        if let Event::Custom(custom) = &mut other {
            custom.payload = br#"{"open": false, "extra": 1}"#.to_vec();
        }
        reducer.apply(&mut open, &other, 5);
        reducer.apply(
            &mut open,
            &context_meta_event(
                "b",
                &ContextMeta {
                    agent_id: "x".into(),
                    user_defined: "{}".into(),
                    created_at: 0,
                },
            ),
            6,
        );
        assert!(open.contains("b"));
    }
}
