//! The one error type of convlog.

use std::path::PathBuf;

/// Everything that can go wrong in convlog, with what a user needs to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another writer (another process, or another `Log` in this process)
    /// holds the store's lock.
    #[error("store {path} is locked by another writer: this command needs the lock, and only one process holds it at a time (dump, inspect, tail, verify, resume, export, stats and backup read beside a running writer; stop the writer, or wait for it, to run this command)")]
    Locked {
        /// The store directory.
        path: PathBuf,
    },

    /// A record or header failed its checks somewhere a torn write cannot
    /// explain. Nothing was dropped; open with salvage to keep what precedes it.
    #[error("segment {segment} is corrupted at offset {offset}: {reason}")]
    Corrupted {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the damage in that file.
        offset: u64,
        /// What check failed.
        reason: String,
    },

    /// An earlier write or fsync failed; the writer acknowledges nothing more.
    #[error("the writer of store {store} stopped after an I/O failure ({cause}); reopen the store to continue")]
    Poisoned {
        /// The store directory.
        store: PathBuf,
        /// The failure that poisoned the writer.
        cause: String,
    },

    /// A file written by another version of convlog's format.
    #[error("{path} uses format version {version}; this build reads version {supported}{}", version_advice(*version, *supported))]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Its format version.
        version: u32,
        /// The version this build reads.
        supported: u32,
    },

    /// An event failed validation; nothing of its batch was stored.
    #[error("event {index} of the batch: {field}")]
    InvalidEvent {
        /// Position of the event in the batch (0-based).
        index: usize,
        /// The field at fault and why.
        field: crate::model::InvalidField,
    },

    /// No event of this conversation was ever recorded.
    #[error("conversation {conversation_id:?} does not exist in the store")]
    ConversationNotFound {
        /// The conversation asked for.
        conversation_id: String,
    },

    /// Resuming with a prompt that is not the one the evaluation started with.
    #[error("conversation {conversation_id:?}, evaluation {evaluation_id:?} was started with prompt {recorded}, not {requested}")]
    PromptMismatch {
        /// The conversation.
        conversation_id: String,
        /// The evaluation.
        evaluation_id: String,
        /// The prompt identity recorded on its system entry (namespace/key).
        recorded: String,
        /// The prompt identity the host asked to resume with.
        requested: String,
    },

    /// A snapshot could not be used and nothing else can stand in for it
    /// (the log segments it covers were compacted away).
    #[error("snapshot {path}: {reason}")]
    SnapshotRestore {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A record's checksum is good but its payload is not a convlog event.
    #[error("the event at LSN {lsn} does not decode: {reason}")]
    UndecodableEvent {
        /// Its LSN.
        lsn: u64,
        /// Why.
        reason: String,
    },

    /// An operating-system I/O error on a named file.
    #[error("{operation} {path}: {source}")]
    Io {
        /// What convlog was doing.
        operation: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Input larger than a named limit; nothing was written.
    #[error("{what} is {actual}, over the limit of {limit} ({constant})")]
    LimitExceeded {
        /// What was too large.
        what: &'static str,
        /// Its size.
        actual: u64,
        /// The limit.
        limit: u64,
        /// The name of the constant that sets the limit.
        constant: &'static str,
    },

    /// An argument that can never be valid (for example an empty batch).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The store directory holds no convlog store.
    #[error("{path} is not a convlog store (no segment files)")]
    NotAStore {
        /// The directory that was opened.
        path: PathBuf,
    },

    /// A reader needed events whose segments compaction deleted (a snapshot
    /// covers them) before it could read them. Nothing was skipped: the read
    /// stops here.
    #[error("store {store}: the events from LSN {first_missing} to {} are no longer in the log: compaction deleted their segments (a snapshot covers them); the log continues at LSN {next_present}", .next_present - 1)]
    Compacted {
        /// The store directory.
        store: PathBuf,
        /// The first LSN the reader needed and could not read.
        first_missing: u64,
        /// The first LSN the log still holds after the gap.
        next_present: u64,
    },

    /// A store was to be created in a directory that holds other files and
    /// no store. Nothing was written. A store is created only in a missing
    /// or empty directory, unless `LogOptions::create_in_nonempty_dir`.
    #[error("{path} is not empty and holds no convlog store (it holds {}); a store is created only in a new or empty directory", listing(.entries, *.total))]
    DirectoryNotEmpty {
        /// The directory.
        path: PathBuf,
        /// The first few of its entries, in name order.
        entries: Vec<String>,
        /// How many entries it holds.
        total: usize,
    },

    /// The directory once held a store (its `LOCK` file is there) but no
    /// segment file is left: the log was deleted. Nothing is created over it.
    #[error("{path} holds a convlog store's LOCK file but no segment file: its log was deleted (restore the segments from a backup, or remove LOCK to start an empty store here)")]
    LogMissing {
        /// The store directory.
        path: PathBuf,
    },

    /// A host reducer, or an observer of one, panicked. The panic was caught
    /// and the store poisoned: host slices are no longer served and appends
    /// are refused (events already committed stay in the log). Fix the
    /// reducer and reopen the store.
    #[error("{} {reducer:?} panicked at LSN {lsn}: {message}; the store serves no host slices and accepts no appends until it is reopened", if *.observer { "an observer of host reducer" } else { "host reducer" })]
    ReducerPanicked {
        /// The reducer's name (`Reducer::name`).
        reducer: String,
        /// Whether it was one of the reducer's observers, not the reducer.
        observer: bool,
        /// The LSN of the event being folded or observed.
        lsn: u64,
        /// The panic's message.
        message: String,
    },

    /// The store was opened read-only ([`crate::Store::open_read_only`]):
    /// it never writes, so this operation is refused. Open the store for
    /// writing (one process at a time holds its lock) to do it.
    #[error("store {store} is open read-only: {operation} needs the writer (open the store with Store::open in the process that holds its lock)")]
    ReadOnly {
        /// The store directory.
        store: PathBuf,
        /// What was refused (`append`, `snapshot`, `compact`, `sync`).
        operation: &'static str,
    },

    /// A conditional append ([`crate::AppendOptions::expect`]) found the
    /// conversation (or the store) at another version than the caller
    /// read: another appender got there first. Nothing was appended. Read
    /// the conversation again, decide again, and retry.
    #[error("conflict in store {store}: {} is at version {actual}, not the expected {expected}; nothing was appended (read it again and retry)", match .conversation_id { Some(id) => format!("conversation {id:?}"), None => "the store".to_string() })]
    Conflict {
        /// The store directory.
        store: PathBuf,
        /// The conversation whose version was expected; `None` when the
        /// whole store's was ([`crate::store::Expect::Store`]).
        conversation_id: Option<String>,
        /// The version the caller read: the LSN of the conversation's last
        /// event (`ConversationSlice::last_lsn`, 0 for none), or the
        /// store's next LSN.
        expected: u64,
        /// The version found when the append was tried.
        actual: u64,
    },
}

/// `a, b and 3 more`: some names of a directory's entries.
fn listing(entries: &[String], total: usize) -> String {
    let names = entries
        .iter()
        .map(|name| format!("{name:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    match total.saturating_sub(entries.len()) {
        0 => names,
        more => format!("{names} and {more} more"),
    }
}

/// What to do about a store of another format version.
fn version_advice(version: u32, supported: u32) -> String {
    if version < supported {
        format!(
            ". This build does not read version {version} stores; migrate the events: with the convlog release that wrote it run `convlog dump OLD_STORE > events.jsonl`, then with this one `convlog append NEW_STORE --durability none < events.jsonl` (docs/format.md, section 11)"
        )
    } else {
        " (written by a newer convlog: use that release or a later one)".to_string()
    }
}

/// `Result` with convlog's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            operation,
            path,
            source,
        }
    }
}
