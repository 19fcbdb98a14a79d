"""Type stubs of convlog's native module (python/src, PyO3)."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional, final

from ._types import Durability, Entry, Event, Generator, Pending, Provider, StrPath

__version__: str

@final
class Conversation:
    """A conversation's folded state."""

    @property
    def conversation_id(self) -> str: ...
    @property
    def entries(self) -> list[Entry]: ...
    @property
    def evaluations(self) -> list[str]: ...
    @property
    def last_lsn(self) -> int: ...
    @property
    def anomalies(self) -> list[dict[str, Any]]: ...
    def __len__(self) -> int: ...

@final
class EventIter:
    def __iter__(self) -> "EventIter": ...
    def __next__(self) -> tuple[int, Event]: ...

@final
class Tail:
    def __iter__(self) -> "Tail": ...
    def __next__(self) -> tuple[int, Event]: ...
    @property
    def next_lsn(self) -> int: ...

@final
class Store:
    @staticmethod
    def open(
        path: StrPath,
        durability: Durability = "group",
        read_only: bool = False,
        *,
        interval_ms: Optional[int] = None,
        snapshot_every_events: Optional[int] = None,
        key_file: Optional[StrPath] = None,
        tamper_key_file: Optional[StrPath] = None,
        checkpoint_file: Optional[StrPath] = None,
        checkpoint_every_events: Optional[int] = None,
        on_checkpoint: Optional[Callable[[dict[str, Any]], object]] = None,
    ) -> "Store": ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
    @property
    def read_only(self) -> bool: ...
    def __enter__(self) -> "Store": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None: ...
    def append(
        self,
        events: Iterable[Mapping[str, Any]],
        expect_conversation: Optional[tuple[str, int]] = None,
    ) -> range: ...
    def conversation(self, conversation_id: str) -> Conversation: ...
    def contains_conversation(self, conversation_id: str) -> bool: ...
    def conversation_ids(self) -> list[str]: ...
    def events(
        self,
        from_lsn: int = 0,
        *,
        conversation_id: Optional[str] = None,
        kinds: Optional[Sequence[str]] = None,
    ) -> EventIter: ...
    def event(self, lsn: int) -> Event: ...
    def tail(
        self,
        from_lsn: Optional[int] = None,
        *,
        conversation_id: Optional[str] = None,
        kinds: Optional[Sequence[str]] = None,
        idle_timeout: Optional[float] = None,
        poll_interval: float = 0.05,
    ) -> Tail: ...
    @property
    def next_lsn(self) -> int: ...
    def sync(self) -> None: ...
    def refresh(self) -> int: ...
    def snapshot(self) -> int: ...
    def resume(
        self,
        conversation_id: str,
        *,
        evaluation_id: Optional[str] = None,
        prompt: Optional[tuple[Optional[str], Optional[str]]] = None,
    ) -> dict[str, Any]: ...
    def recorded_result(self, conversation_id: str, call_id: str) -> Optional[Entry]: ...
    def render(
        self,
        conversation_id: str,
        provider: Provider,
        *,
        evaluation_id: Optional[str] = None,
        history: Optional[HistoryManager] = None,
        record_curation: bool = False,
        pending: Pending = "drop",
        default_system_prompt: Optional[str] = None,
        display_name: Optional[tuple[str, str]] = None,
        include_reasoning: bool = True,
        openai_reasoning_content: bool = False,
    ) -> dict[str, Any]: ...
    def curate(
        self,
        conversation_id: str,
        manager: HistoryManager,
        *,
        record: bool = True,
        prompt_name: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> dict[str, Any]: ...
    def message_control(self, history: Optional[HistoryManager] = None) -> MessageControl: ...
    def erase(self, conversation_id: str, by: str) -> dict[str, Any]: ...
    @property
    def encrypted(self) -> bool: ...
    def erased_conversations(self) -> list[str]: ...
    def is_erased(self, conversation_id: str) -> bool: ...
    @property
    def tamper_evident(self) -> bool: ...
    def checkpoint(self) -> dict[str, Any]: ...

@final
class HistoryManager:
    @staticmethod
    def passthrough() -> HistoryManager: ...
    @staticmethod
    def sliding_window(window: int) -> HistoryManager: ...
    @staticmethod
    def tool_result_truncator(max_length: int, suffix: Optional[str] = None) -> HistoryManager: ...
    @staticmethod
    def token_budget(budget: int) -> HistoryManager: ...
    @staticmethod
    def tool_pruning(
        token_limit: int, keep_recent: Optional[int] = None, placeholder: Optional[str] = None
    ) -> HistoryManager: ...
    @staticmethod
    def summary_placeholder(token_limit: int, text: str) -> HistoryManager: ...
    @staticmethod
    def composed(*managers: HistoryManager) -> HistoryManager: ...
    @staticmethod
    def custom(strategy: str, curate: Generator) -> HistoryManager: ...
    @staticmethod
    def parse(spec: str) -> HistoryManager: ...
    @property
    def strategy(self) -> str: ...
    def curate(self, entries: Iterable[Mapping[str, Any]]) -> list[Entry]: ...

@final
class MessageControl:
    def create_context(
        self, principal: Optional[str], context_id: str, public: bool = False
    ) -> dict[str, Any]: ...
    def context(self, principal: Optional[str], context_id: str) -> dict[str, Any]: ...
    def contexts(self) -> list[dict[str, Any]]: ...
    def set_public(self, principal: Optional[str], context_id: str, public: bool) -> dict[str, Any]: ...
    def entries(self, principal: Optional[str], context_id: str) -> list[Entry]: ...
    def messages(self, principal: Optional[str], context_id: str) -> list[dict[str, Any]]: ...
    def add_messages(
        self, principal: Optional[str], context_id: str, messages: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]: ...
    def set_messages(
        self, principal: Optional[str], context_id: str, messages: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]: ...
    def add_entries(
        self, principal: Optional[str], context_id: str, entries: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]: ...
    def set_entries(
        self, principal: Optional[str], context_id: str, entries: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]: ...
    def chat(
        self,
        principal: Optional[str],
        context_id: str,
        message: str,
        generator: Generator,
        save_ai_messages: bool = True,
    ) -> dict[str, Any]: ...
    def generate(
        self,
        principal: Optional[str],
        context_id: str,
        generator: Generator,
        steering: Sequence[str] = ...,
        save_ai_messages: bool = True,
    ) -> dict[str, Any]: ...
    def add_ai_message(
        self,
        principal: Optional[str],
        context_id: str,
        generator: Generator,
        *,
        message: Optional[str] = None,
        prompt: Optional[str] = None,
        save_system_message: bool = False,
        save_ai_messages: bool = True,
    ) -> dict[str, Any]: ...

def render(
    provider: Provider,
    entries: Iterable[Mapping[str, Any]],
    *,
    pending: Pending = "drop",
    default_system_prompt: Optional[str] = None,
    display_name: Optional[tuple[str, str]] = None,
    include_reasoning: bool = True,
    openai_reasoning_content: bool = False,
) -> dict[str, Any]: ...
def ingest(
    provider: Provider,
    messages: Any,
    evaluation_id: str,
    first_sequence: int = 0,
    *,
    created_at: Optional[str] = None,
) -> list[Entry]: ...
def verify(
    path: StrPath,
    *,
    key_file: Optional[StrPath] = None,
    tamper_key_file: Optional[StrPath] = None,
    public_key_file: Optional[StrPath] = None,
    head: Optional[StrPath] = None,
) -> dict[str, Any]: ...
def keygen(
    path: StrPath,
    *,
    encryption: bool = False,
    public: Optional[StrPath] = None,
    rotate: Optional[StrPath] = None,
) -> dict[str, Any]: ...
