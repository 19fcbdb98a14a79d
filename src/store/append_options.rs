//! Per-call settings of [`Store::append_with`](super::Store::append_with).

use super::Expect;
use crate::log::Durability;

/// Settings for one append; the defaults are the store's.
///
/// ```
/// use convlog::model::ConversationEntry;
/// use convlog::{AppendOptions, Durability, Expect, Store, StoreOptions};
///
/// # fn main() -> convlog::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), StoreOptions::default())?;
/// let hello = ConversationEntry::user("eval-1", 0, "Hello");
/// // Durable before it returns, whatever the store's default, and only if
/// // the conversation has no event yet.
/// let options = AppendOptions::new()
///     .durability(Durability::Sync)
///     .expect(Expect::conversation("ctx", 0));
/// store.append_with(&[hello.recorded_in("ctx")], options)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppendOptions {
    /// When the append is acknowledged; `None`: the store's default
    /// ([`StoreOptions`](super::StoreOptions)' durability).
    pub durability: Option<Durability>,
    /// Append only if a conversation (or the store) is still at this
    /// version; otherwise nothing is appended and the error is
    /// [`Error::Conflict`](crate::Error::Conflict). `None`: unconditional.
    pub expect: Option<Expect>,
}

impl AppendOptions {
    /// The store's defaults: its durability, no condition.
    pub fn new() -> AppendOptions {
        AppendOptions::default()
    }

    /// Acknowledges this append with `durability` instead of the store's.
    pub fn durability(mut self, durability: Durability) -> AppendOptions {
        self.durability = Some(durability);
        self
    }

    /// Appends only if the version `expect` names still holds.
    pub fn expect(mut self, expect: Expect) -> AppendOptions {
        self.expect = Some(expect);
        self
    }
}
