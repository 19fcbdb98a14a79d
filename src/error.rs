//! The one error type of convlog.

use std::path::PathBuf;

/// Everything that can go wrong in convlog, with what a user needs to act on it.
///
/// Every public function of the library fails with this one type: the
/// store and log, backups, the JSON event form (`InvalidLine`), the
/// provider conversions (`ProviderMalformed`, `ProviderUnsupported`,
/// `DuplicateCallId`) and message control (`ContextNotFound`,
/// `NotContextOwner`, ... with their fixed texts). Each variant has one
/// meaning and carries, as named fields, what a host needs to act on it.
/// The enum is `#[non_exhaustive]`: match the variants you handle and end
/// with a wildcard arm.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let store = convlog::StoreBuilder::new(dir.path()).open().unwrap();
/// match store.conversation("missing") {
///     Ok(slice) => println!("{} entries", slice.entries().count()),
///     Err(convlog::Error::ConversationNotFound { conversation_id }) => {
///         println!("no conversation {conversation_id:?} yet")
///     }
///     Err(other) => panic!("{other}"),
/// }
/// ```
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

    /// The log's bytes are intact (every checksum holds) but its keyed chain
    /// or a signed checkpoint proves they are not what the writer wrote:
    /// someone edited, removed, reordered, inserted, replayed or rolled back
    /// frames (see `docs/tamper.md`). Accidental damage is `Corrupted`.
    #[error("store {store} was tampered with: {kind} at LSN {lsn} ({} {}, offset {offset}): {detail}", kind.file_kind(), segment.display())]
    Tampered {
        /// The store directory.
        store: PathBuf,
        /// What kind of tampering the evidence shows.
        kind: crate::tamper::TamperKind,
        /// The LSN where the evidence is (the first event of the frame at
        /// fault, the LSN a checkpoint covers, or a snapshot's LSN).
        lsn: u64,
        /// The file holding the evidence: the segment holding that frame
        /// (the last segment for a missing tail), or, for
        /// [`TamperKind::SnapshotChanged`](crate::tamper::TamperKind::SnapshotChanged),
        /// the snapshot file ([`TamperKind::file_kind`](crate::tamper::TamperKind::file_kind)
        /// says which; the message names it so).
        segment: PathBuf,
        /// Byte offset of the evidence in that file (a frame's, or a
        /// snapshot's tag).
        offset: u64,
        /// What was found, in words.
        detail: String,
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

    /// The conversation was erased ([`Store::erase`](crate::Store::erase)):
    /// its key is destroyed, so its content can never be read again.
    #[error("conversation {conversation_id:?} was erased: its key is destroyed and its content cannot be read")]
    Erased {
        /// The conversation asked for.
        conversation_id: String,
    },

    /// A key file was refused (its permissions, its place, its content).
    #[error("key file {path}: {reason}")]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },

    /// An encrypted store's keys: opened without its store key or with
    /// another, a damaged key table, or an erasure it cannot do.
    #[error("store {store}: {reason}")]
    Encryption {
        /// The store directory.
        store: PathBuf,
        /// What is wrong.
        reason: String,
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

    /// The store needs a snapshot to serve its events and none it has can
    /// be used (the log segments a snapshot covers were compacted away, and
    /// the snapshot is damaged, missing or of another log). Reading the
    /// whole log cannot stand in for it.
    #[error("snapshot {path}: {reason}")]
    SnapshotRestore {
        /// The snapshot file, or the snapshot directory when no snapshot
        /// is usable.
        path: PathBuf,
        /// What is wrong, and why nothing else can stand in.
        reason: String,
    },

    /// A snapshot file fails its checks (header, directory, a
    /// conversation's slice). Where the log still holds the events it
    /// covers, the store reads them instead and this is only reported.
    #[error("snapshot {path} is damaged: {reason}")]
    SnapshotDamaged {
        /// The snapshot file.
        path: PathBuf,
        /// The check that failed.
        reason: String,
    },

    /// A snapshot could not be written; the store and its log are
    /// unchanged, and no snapshot file was put in place.
    #[error("snapshot {path} was not written: {reason}")]
    SnapshotWrite {
        /// The snapshot file that was to be written.
        path: PathBuf,
        /// Why it could not be.
        reason: String,
    },

    /// A host reducer's slice failed to encode (its `Serialize` returned an
    /// error) while a snapshot was written. No snapshot was written.
    #[error("host slice {reducer:?} does not encode: {reason}; no snapshot was written")]
    SliceEncode {
        /// The reducer's name (`Reducer::name`).
        reducer: String,
        /// The encoder's error.
        reason: String,
    },

    /// Writing a snapshot panicked (a host slice's `Serialize` panicked).
    /// The panic was caught; no snapshot was written.
    #[error("writing a snapshot of store {store} panicked: {message}; no snapshot was written")]
    SnapshotPanicked {
        /// The store directory.
        store: PathBuf,
        /// The panic's message.
        message: String,
    },

    /// Compaction found its snapshot no longer matches the log (the files
    /// changed under the store) and deleted nothing.
    #[error("compaction of store {store} deleted nothing: snapshot {snapshot} does not match the log: {reason}")]
    CompactionRefused {
        /// The store directory.
        store: PathBuf,
        /// The snapshot compaction was to rely on.
        snapshot: PathBuf,
        /// How it differs from the log.
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

    /// An append of no events: a batch needs at least one. Nothing was
    /// written.
    #[error("a batch needs at least one event")]
    EmptyBatch,

    /// An option (of a store, a log or a history manager) set to a value
    /// that can never be valid. Nothing was opened or created.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option (`LogOptions::segment_bytes_max`).
        option: &'static str,
        /// What is wrong with its value.
        reason: String,
    },

    /// The conversation exists but has no evaluation with this id.
    #[error("conversation {conversation_id:?} has no evaluation {evaluation_id:?}")]
    EvaluationNotFound {
        /// The conversation.
        conversation_id: String,
        /// The evaluation asked for.
        evaluation_id: String,
    },

    /// A log position ([`crate::log::Position`]) names a segment that the
    /// log does not hold (and never held below its first segment, which
    /// would be [`Error::Compacted`]): the position is not from this log.
    #[error("store {store}: no segment starts at LSN {segment}, so position {segment}:{offset} is not from this log")]
    PositionNotFound {
        /// The store directory.
        store: PathBuf,
        /// The first LSN of the segment the position names.
        segment: u64,
        /// The byte offset it names in that segment.
        offset: u64,
    },

    /// An event has no JSON form (a time before 1970 has no RFC 3339 form
    /// here).
    #[error("the event at LSN {lsn} has no JSON form: {reason}")]
    JsonEncode {
        /// The event's LSN.
        lsn: u64,
        /// Why.
        reason: String,
    },

    /// A backup cannot be written to this destination: nothing was copied.
    #[error("backup destination {destination}: {reason}")]
    BackupDestination {
        /// The destination directory.
        destination: PathBuf,
        /// What is wrong with it (not empty, inside the store, holds an
        /// interrupted backup).
        reason: String,
    },

    /// A finished backup does not verify as the copy of what was read: do
    /// not use it.
    #[error("the backup at {destination} does not verify: {reason}")]
    BackupVerify {
        /// The backup's directory.
        destination: PathBuf,
        /// What differs.
        reason: String,
    },

    /// The source store's segments kept disappearing while a backup listed
    /// them (a compaction loop?). Nothing was copied.
    #[error("the segments of {store} kept disappearing while the backup listed them ({attempts} attempts); is a compaction loop running?")]
    BackupSourceChanging {
        /// The source store.
        store: PathBuf,
        /// How many listings were tried.
        attempts: usize,
    },

    /// A curation spec ([`crate::history::parse_curation`]) with an item
    /// that is not `key=value`, a value that is not a count, or an unknown
    /// key.
    #[error("{reason}")]
    InvalidCuration {
        /// The item at fault (`window=lots`).
        item: String,
        /// What is wrong, naming the item's key or text.
        reason: String,
    },

    /// An input line of JSON events (`docs/events.md`) was rejected.
    #[error("line {line}: {}{reason}", match .field { Some(field) => format!("{field}: "), None => String::new() })]
    InvalidLine {
        /// The line number (1-based).
        line: u64,
        /// Path of the field at fault (`entry.role`, `[1].conversation_id`),
        /// or `None` when the line as a whole is at fault (it is not JSON).
        field: Option<String>,
        /// What is wrong.
        reason: String,
    },

    /// Provider JSON (given to [`crate::provider::to_entries`]) does not
    /// have the provider's shape.
    #[error("{provider} messages, at {path}: {reason}")]
    ProviderMalformed {
        /// The provider.
        provider: crate::provider::Provider,
        /// JSON path of the offending value (`messages[3].content[1]`).
        path: String,
        /// What is wrong.
        reason: String,
    },

    /// Provider JSON holds a content kind convlog does not store (images,
    /// documents, server tools, ...): refused rather than silently dropped.
    #[error("{provider} messages, at {path}: {what} is not supported (convlog stores text, reasoning, tool calls and tool results)")]
    ProviderUnsupported {
        /// The provider.
        provider: crate::provider::Provider,
        /// JSON path of the offending value.
        path: String,
        /// What it is.
        what: String,
    },

    /// Rendering for a provider ([`crate::provider::render`]) found two
    /// assistant entries holding a call with the same id, so results cannot
    /// be paired with calls.
    #[error("tool call id {call_id:?} appears in two assistant entries (sequences {first_sequence} and {second_sequence}); results cannot be paired with calls")]
    DuplicateCallId {
        /// The call id.
        call_id: String,
        /// Sequence of the first assistant entry holding it.
        first_sequence: u64,
        /// Sequence of the second.
        second_sequence: u64,
    },

    /// Message control: no context with this id was created. The text is
    /// fixed (`docs/history.md`).
    #[error("Context with id: {context_id} does not exist")]
    ContextNotFound {
        /// The id asked for.
        context_id: String,
    },

    /// Message control: the context is private and the acting principal is
    /// not its owner (or the operation is reserved to the owner). The text
    /// is fixed.
    #[error("Context does not belong to user")]
    NotContextOwner {
        /// The context.
        context_id: String,
    },

    /// Message control: a context with this id was already created. The
    /// text is fixed.
    #[error("Context with id: {context_id} already exists")]
    ContextExists {
        /// The id.
        context_id: String,
    },

    /// Message control: an anonymous principal asked for a private
    /// context; it can only create public ones (with no owner).
    #[error("an anonymous principal can only create public contexts")]
    AnonymousPrivateContext {
        /// The context it asked for.
        context_id: String,
    },

    /// Message control: tool responses name calls that neither the list
    /// nor the conversation has open. The text is fixed; call ids are
    /// listed like a Python list (`['call_1']`).
    #[error("Tool responses found without corresponding tool calls: {}", python_list(.call_ids))]
    ResponsesWithoutCalls {
        /// Their call ids, in list order.
        call_ids: Vec<String>,
    },

    /// Message control: a tool response comes before the call it answers.
    /// The text is fixed.
    #[error("Tool response with ID '{call_id}' appears before its corresponding tool call")]
    ResponseBeforeCall {
        /// The first such call id.
        call_id: String,
    },

    /// Message control: tool calls of the list that no later response in
    /// it answers. The text is fixed.
    #[error("Tool calls found without corresponding responses: {}", python_list(.call_ids))]
    CallsWithoutResponses {
        /// Their call ids, in list order.
        call_ids: Vec<String>,
    },

    /// Message control: a call id that another call still open
    /// (unanswered) already uses, in the list or in the conversation: a
    /// response could not tell the two calls apart. (Checked before the
    /// three pairing rules.) The text is fixed.
    #[error("Tool call IDs used by two open tool calls: {} (each tool call needs its own ID until it is answered)", python_list(.call_ids))]
    DuplicateOpenCallIds {
        /// The repeated call ids, in list order of their second use.
        call_ids: Vec<String>,
    },

    /// Message control: the host's model failed; what was saved before it
    /// ran stays saved.
    #[error("generation failed: {reason}")]
    GenerationFailed {
        /// The context the generation was for.
        context_id: String,
        /// The model's error.
        reason: String,
    },

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

/// A host's `match` on [`Error`] needs a wildcard arm: `Error` is
/// `#[non_exhaustive]`, so naming every variant of this release is not
/// enough (a later release may add one). This does not compile:
///
/// ```compile_fail,E0004
/// use convlog::Error;
///
/// fn name(error: &Error) -> &'static str {
///     match error {
///         Error::Locked { .. } => "Locked",
///         Error::Corrupted { .. } => "Corrupted",
///         Error::Poisoned { .. } => "Poisoned",
///         Error::Tampered { .. } => "Tampered",
///         Error::UnsupportedVersion { .. } => "UnsupportedVersion",
///         Error::InvalidEvent { .. } => "InvalidEvent",
///         Error::ConversationNotFound { .. } => "ConversationNotFound",
///         Error::Erased { .. } => "Erased",
///         Error::KeyFile { .. } => "KeyFile",
///         Error::Encryption { .. } => "Encryption",
///         Error::PromptMismatch { .. } => "PromptMismatch",
///         Error::SnapshotRestore { .. } => "SnapshotRestore",
///         Error::SnapshotDamaged { .. } => "SnapshotDamaged",
///         Error::SnapshotWrite { .. } => "SnapshotWrite",
///         Error::SliceEncode { .. } => "SliceEncode",
///         Error::SnapshotPanicked { .. } => "SnapshotPanicked",
///         Error::CompactionRefused { .. } => "CompactionRefused",
///         Error::UndecodableEvent { .. } => "UndecodableEvent",
///         Error::Io { .. } => "Io",
///         Error::LimitExceeded { .. } => "LimitExceeded",
///         Error::EmptyBatch => "EmptyBatch",
///         Error::InvalidOption { .. } => "InvalidOption",
///         Error::InvalidCuration { .. } => "InvalidCuration",
///         Error::EvaluationNotFound { .. } => "EvaluationNotFound",
///         Error::PositionNotFound { .. } => "PositionNotFound",
///         Error::JsonEncode { .. } => "JsonEncode",
///         Error::BackupDestination { .. } => "BackupDestination",
///         Error::BackupVerify { .. } => "BackupVerify",
///         Error::BackupSourceChanging { .. } => "BackupSourceChanging",
///         Error::InvalidLine { .. } => "InvalidLine",
///         Error::ProviderMalformed { .. } => "ProviderMalformed",
///         Error::ProviderUnsupported { .. } => "ProviderUnsupported",
///         Error::DuplicateCallId { .. } => "DuplicateCallId",
///         Error::ContextNotFound { .. } => "ContextNotFound",
///         Error::NotContextOwner { .. } => "NotContextOwner",
///         Error::ContextExists { .. } => "ContextExists",
///         Error::AnonymousPrivateContext { .. } => "AnonymousPrivateContext",
///         Error::ResponsesWithoutCalls { .. } => "ResponsesWithoutCalls",
///         Error::ResponseBeforeCall { .. } => "ResponseBeforeCall",
///         Error::CallsWithoutResponses { .. } => "CallsWithoutResponses",
///         Error::DuplicateOpenCallIds { .. } => "DuplicateOpenCallIds",
///         Error::GenerationFailed { .. } => "GenerationFailed",
///         Error::NotAStore { .. } => "NotAStore",
///         Error::Compacted { .. } => "Compacted",
///         Error::DirectoryNotEmpty { .. } => "DirectoryNotEmpty",
///         Error::LogMissing { .. } => "LogMissing",
///         Error::ReducerPanicked { .. } => "ReducerPanicked",
///         Error::ReadOnly { .. } => "ReadOnly",
///         Error::Conflict { .. } => "Conflict",
///     }
/// }
/// ```
///
/// With a wildcard arm it does:
///
/// ```
/// use convlog::Error;
///
/// fn advice(error: &Error) -> &'static str {
///     match error {
///         Error::Locked { .. } => "wait for the writer",
///         Error::Conflict { .. } => "read again and retry",
///         Error::ContextNotFound { .. } => "404",
///         _ => "report it",
///     }
/// }
/// assert_eq!(advice(&Error::EmptyBatch), "report it");
/// ```
#[cfg(doctest)]
pub struct NonExhaustiveDoctests;

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

/// `ids` as Python prints a list of strings: `['a', 'b']`.
fn python_list(ids: &[String]) -> String {
    let items: Vec<String> = ids.iter().map(|id| python_repr(id)).collect();
    format!("[{}]", items.join(", "))
}

/// A string as Python's `repr` prints it: single quotes unless the text has
/// a single quote and no double quote.
fn python_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for character in text.chars() {
        match character {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ if character == quote => {
                out.push('\\');
                out.push(character);
            }
            _ if character.is_control() => out.push_str(&format!("\\x{:02x}", character as u32)),
            _ => out.push(character),
        }
    }
    out.push(quote);
    out
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

#[cfg(test)]
mod tests {
    use super::python_list;

    #[test]
    fn lists_print_like_python() {
        let ids = |items: &[&str]| {
            items
                .iter()
                .map(|item| item.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(python_list(&ids(&["call_123"])), "['call_123']");
        assert_eq!(python_list(&ids(&["a", "b"])), "['a', 'b']");
        assert_eq!(python_list(&ids(&[])), "[]");
        assert_eq!(python_list(&ids(&["it's"])), "[\"it's\"]");
        assert_eq!(python_list(&ids(&["a'\"b"])), "['a\\'\"b']");
        assert_eq!(
            python_list(&ids(&["back\\slash\n"])),
            "['back\\\\slash\\n']"
        );
    }

    /// The `compile_fail` doctest proves that a match needs a wildcard only
    /// if it names every variant: keep its list whole.
    #[test]
    fn the_non_exhaustive_doctest_names_every_variant() {
        let source = include_str!("error.rs");
        let start = source.find("pub enum Error {").expect("the enum");
        let end = start + source[start..].find("\n}\n").expect("its end");
        let variants: Vec<&str> = source[start..end]
            .lines()
            .filter_map(|line| line.strip_prefix("    "))
            .filter(|line| line.starts_with(|c: char| c.is_ascii_uppercase()))
            .filter_map(|line| line.split([' ', ',', '{', '(']).next())
            .collect();
        assert!(variants.len() > 40, "{variants:?}");
        for variant in variants {
            assert!(
                source.contains(&format!("///         Error::{variant} ")),
                "the compile_fail doctest does not name Error::{variant}"
            );
        }
    }
}
