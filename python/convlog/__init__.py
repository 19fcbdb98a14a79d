"""convlog: an embedded, durable, event-sourced store for LLM agent
conversations.

>>> import convlog
>>> with convlog.Store.open("/tmp/store") as store:  # doctest: +SKIP
...     store.append([{"type": "conversation_recorded", "conversation_id": "c",
...                    "entry": {"evaluation_id": "e", "role": "user", "content": "hi"}}])
range(1, 2)

See docs/python.md for the API, the errors, asyncio and the multi-process
pattern (one writer process, read-only openers beside it).
"""

from __future__ import annotations

from ._async import AsyncMessageControl, AsyncStore, AsyncTail
from ._convlog import (
    Conversation,
    EventIter,
    HistoryManager,
    MessageControl,
    Store,
    Tail,
    __version__,
    ingest,
    render,
    verify,
)
from ._types import Durability, Entry, Event, Generator, Pending, Provider, StrPath
from ._errors import (
    AnonymousPrivateContextError,
    CallsWithoutResponsesError,
    CompactedError,
    ConflictError,
    ContextExistsError,
    ContextNotFoundError,
    ConversationNotFoundError,
    ConvlogError,
    CorruptedError,
    DuplicateCallIdError,
    DuplicateOpenCallIdsError,
    EvaluationNotFoundError,
    EventNotFoundError,
    GenerationFailedError,
    InvalidEventError,
    InvalidOptionError,
    LimitExceededError,
    LockedError,
    MessageControlError,
    NotAStoreError,
    NotContextOwnerError,
    PromptMismatchError,
    ProviderFormatError,
    ReadOnlyError,
    ResponseBeforeCallError,
    ResponsesWithoutCallsError,
    StoreClosedError,
    StoreIOError,
)

__all__ = [
    "AnonymousPrivateContextError",
    "AsyncMessageControl",
    "AsyncStore",
    "AsyncTail",
    "CallsWithoutResponsesError",
    "CompactedError",
    "ConflictError",
    "ContextExistsError",
    "ContextNotFoundError",
    "Conversation",
    "ConversationNotFoundError",
    "ConvlogError",
    "CorruptedError",
    "DuplicateCallIdError",
    "DuplicateOpenCallIdsError",
    "Durability",
    "Entry",
    "Event",
    "EvaluationNotFoundError",
    "EventIter",
    "EventNotFoundError",
    "GenerationFailedError",
    "Generator",
    "HistoryManager",
    "InvalidEventError",
    "InvalidOptionError",
    "LimitExceededError",
    "LockedError",
    "MessageControl",
    "MessageControlError",
    "NotAStoreError",
    "NotContextOwnerError",
    "Pending",
    "PromptMismatchError",
    "Provider",
    "ProviderFormatError",
    "ReadOnlyError",
    "ResponseBeforeCallError",
    "ResponsesWithoutCallsError",
    "Store",
    "StoreClosedError",
    "StoreIOError",
    "StrPath",
    "Tail",
    "__version__",
    "ingest",
    "render",
    "verify",
]
