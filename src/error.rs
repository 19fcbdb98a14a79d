//! The one error type of convlog.

use std::path::PathBuf;

/// Everything that can go wrong in convlog, with what a user needs to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another writer (another process, or another `Log` in this process)
    /// holds the store's lock.
    #[error("store {path} is locked by another writer: this command needs the lock, and only one process holds it at a time (dump, inspect, tail and verify read beside a running writer; stop the writer, or wait for it, to run this command)")]
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
    #[error("{path} uses format version {version}; this build reads version {supported} (use a matching convlog)")]
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
