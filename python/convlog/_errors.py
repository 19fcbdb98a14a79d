"""convlog's exceptions: one hierarchy under :class:`ConvlogError`.

The native module raises these with the Rust error's text as the message and
the error's fields as attributes (``LockedError.path``,
``CorruptedError.segment`` / ``.offset``, ...). Every instance also has
``kind``: the name of the Rust ``convlog::Error`` variant (``"Locked"``,
``"Poisoned"``, ...), so errors without a class of their own can still be told
apart.
"""

from __future__ import annotations

from typing import Optional


class ConvlogError(Exception):
    """Base of every convlog error."""

    kind: str = "Error"


class LockedError(ConvlogError):
    """Another writer (another process, or another open ``Store`` in this one)
    holds the store's lock. Open it with ``read_only=True`` beside the writer,
    or write from one process (docs/python.md, "Many processes")."""

    path: str


class CorruptedError(ConvlogError):
    """A record failed its checks where a torn write cannot explain it."""

    segment: str
    offset: int
    reason: str


class TamperedError(ConvlogError):
    """The store's bytes are intact (every checksum holds) but its keyed
    chain or a signed checkpoint proves they are not what the writer wrote:
    someone edited, removed, reordered, inserted, replayed or rolled back
    events, or put back an older copy (docs/tamper.md). Accidental damage is
    :class:`CorruptedError`, never this.

    ``tamper_kind`` names what the evidence shows, by the Rust
    ``TamperKind`` variant: ``"ContentChanged"``, ``"Forged"``,
    ``"Inserted"``, ``"Deleted"``, ``"Reordered"``, ``"Replayed"``,
    ``"Truncated"``, ``"RolledBack"``, ``"IdentityChanged"``, ``"Stripped"``,
    ``"ForgedCheckpoint"``, ``"RetiredKey"``, ``"SnapshotChanged"``;
    ``description`` says it in words; ``lsn``, ``segment`` and ``offset``
    say where; ``detail`` what was found."""

    path: str
    tamper_kind: str
    description: str
    lsn: int
    segment: str
    offset: int
    detail: str


class ErasedError(ConvlogError):
    """The conversation was erased (``Store.erase``): its key is destroyed
    and its content can never be read again, by anyone. Not a ``KeyError``:
    an erased conversation is not a missing one, and cannot be written to
    again."""

    conversation_id: str


class KeyFileError(ConvlogError):
    """A key file was refused: group or others may read it (``chmod 600``),
    it is not a key file of its kind, or it is missing."""

    path: str
    reason: str


class EncryptionError(ConvlogError):
    """An encrypted store's keys: opened without its store key or with
    another, a missing or damaged key table, or an erasure it cannot do
    (a store opened without a key, a conversation recorded in the clear)."""

    path: str
    reason: str


class UndecodableEventError(ConvlogError):
    """A record whose checksum holds but whose payload is not an event, or a
    sealed event that does not open under its conversation's key (its bytes
    changed)."""

    lsn: int
    reason: str


class ConversationNotFoundError(ConvlogError, KeyError):
    """No event of this conversation was ever recorded."""

    conversation_id: str

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EvaluationNotFoundError(ConvlogError, KeyError):
    """The conversation has no evaluation with this id."""

    conversation_id: str
    evaluation_id: str

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class EventNotFoundError(ConvlogError, KeyError):
    """The log holds no event at this LSN."""

    lsn: int

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PromptMismatchError(ConvlogError):
    """Resuming with another prompt than the evaluation started with."""

    conversation_id: str
    evaluation_id: str
    recorded: str
    requested: str


class ConflictError(ConvlogError):
    """A conditional append found the conversation at another version than
    expected; nothing was appended. Read again, decide again, retry."""

    path: str
    conversation_id: Optional[str]
    expected: int
    actual: int


class InvalidEventError(ConvlogError, ValueError):
    """An event given to ``append`` is malformed; nothing of its batch was
    stored. ``index`` is the event's position in the batch, ``field`` the path
    of the field at fault inside it (``entry.role``), ``reason`` what is
    wrong."""

    index: Optional[int]
    field: Optional[str]
    reason: str


class LimitExceededError(ConvlogError, ValueError):
    """Input larger than a named limit; nothing was written."""

    what: str
    actual: int
    limit: int
    constant: str


class ReadOnlyError(ConvlogError):
    """The store was opened read-only; this needs the writer."""

    path: str
    operation: str


class NotAStoreError(ConvlogError):
    """A read-only open of a directory that holds no store."""

    path: str


class StoreClosedError(ConvlogError):
    """A call on a store after ``close()``."""

    path: str


class InvalidOptionError(ConvlogError, ValueError):
    """An option with a value that can never be valid."""

    option: str
    reason: str


class CompactedError(ConvlogError):
    """Events a reader needed were compacted away."""

    path: str
    first_missing: int
    next_present: int


class ProviderFormatError(ConvlogError, ValueError):
    """Provider messages that do not have the provider's shape, or hold a
    content kind convlog does not store."""

    provider: str
    field: str
    reason: str


class DuplicateCallIdError(ConvlogError):
    """Two assistant entries hold a call with the same id."""

    call_id: str
    first_sequence: int
    second_sequence: int


class StoreIOError(ConvlogError, OSError):
    """An operating-system I/O error on a named file."""

    path: str
    operation: str


class MessageControlError(ConvlogError):
    """Base of the message-control errors, whose messages are fixed texts
    (docs/history.md)."""


class ContextNotFoundError(MessageControlError):
    """``Context with id: {context_id} does not exist``."""

    context_id: str


class NotContextOwnerError(MessageControlError):
    """``Context does not belong to user``."""

    context_id: str


class ContextExistsError(MessageControlError):
    """``Context with id: {context_id} already exists``."""

    context_id: str


class AnonymousPrivateContextError(MessageControlError):
    """An anonymous principal asked for a private context."""

    context_id: str


class ResponsesWithoutCallsError(MessageControlError):
    """``Tool responses found without corresponding tool calls: [...]``."""

    call_ids: list[str]


class ResponseBeforeCallError(MessageControlError):
    """``Tool response with ID '...' appears before its corresponding tool call``."""

    call_id: str


class CallsWithoutResponsesError(MessageControlError):
    """``Tool calls found without corresponding responses: [...]``."""

    call_ids: list[str]


class DuplicateOpenCallIdsError(MessageControlError):
    """``Tool call IDs used by two open tool calls: [...] ...``."""

    call_ids: list[str]


class GenerationFailedError(MessageControlError):
    """The host's model failed; what was saved before it ran stays saved."""

    context_id: str
    reason: str


__all__ = [
    "EncryptionError",
    "ErasedError",
    "KeyFileError",
    "TamperedError",
    "UndecodableEventError",
    "AnonymousPrivateContextError",
    "CallsWithoutResponsesError",
    "CompactedError",
    "ConflictError",
    "ContextExistsError",
    "ContextNotFoundError",
    "ConversationNotFoundError",
    "ConvlogError",
    "CorruptedError",
    "DuplicateCallIdError",
    "DuplicateOpenCallIdsError",
    "EvaluationNotFoundError",
    "EventNotFoundError",
    "GenerationFailedError",
    "InvalidEventError",
    "InvalidOptionError",
    "LimitExceededError",
    "LockedError",
    "MessageControlError",
    "NotAStoreError",
    "NotContextOwnerError",
    "PromptMismatchError",
    "ProviderFormatError",
    "ReadOnlyError",
    "ResponseBeforeCallError",
    "ResponsesWithoutCallsError",
    "StoreClosedError",
    "StoreIOError",
]
