//! One runner at a time per conversation of a store, within a process.
//!
//! Two runners driving one conversation at once would both see its
//! unfinished calls and both run them, and each would fold a copy of the
//! conversation the other's appends never reach. A run, a resume and an
//! answer claim the conversation first; a second claim while the first is
//! held fails with [`RunError::Busy`]. Only one process can write a store
//! (its directory lock), so claims within the process cover every writer.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};

use convlog::Store;

use super::RunError;

/// The claimed conversations: the store (by the address of its shared
/// handle) and the conversation id.
static CLAIMED: LazyLock<Mutex<HashSet<(usize, String)>>> = LazyLock::new(Mutex::default);

/// A held claim; dropping it (also when the run's future is dropped)
/// releases the conversation.
pub(super) struct Claim {
    key: (usize, String),
}

impl Claim {
    /// Claims `conversation_id` of `store`, or fails with
    /// [`RunError::Busy`] while another runner holds it.
    pub(super) fn take(store: &Arc<Store>, conversation_id: &str) -> Result<Claim, RunError> {
        let key = (Arc::as_ptr(store) as usize, conversation_id.to_string());
        let mut claimed = CLAIMED.lock().unwrap_or_else(|poison| poison.into_inner());
        if !claimed.insert(key.clone()) {
            return Err(RunError::Busy {
                conversation_id: conversation_id.to_string(),
            });
        }
        Ok(Claim { key })
    }

    /// Whether the claim is of `store`.
    pub(super) fn is_of(&self, store: &Arc<Store>) -> bool {
        self.key.0 == Arc::as_ptr(store) as usize
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        CLAIMED
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .remove(&self.key);
    }
}
