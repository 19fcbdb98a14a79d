"""asyncio twins of the blocking calls: :class:`AsyncStore`.

Each method runs the native call in a worker thread (``asyncio.to_thread``);
the native calls release the GIL, so the event loop and other threads run
meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional

from ._convlog import Conversation, HistoryManager, Store, Tail
from ._convlog import MessageControl as _MessageControl
from ._types import Durability, Event, Pending, Provider, StrPath

#: Events ``AsyncStore.events`` reads per call in a worker thread.
EVENTS_CHUNK = 256


class AsyncStore:
    """A :class:`convlog.Store` whose blocking methods are awaitable.

    Open with ``await AsyncStore.open(path, ...)`` (same arguments as
    ``Store.open``) or wrap an open store: ``AsyncStore(store)``. The wrapped
    store is ``.store``. ``async with`` closes it.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    async def open(
        cls,
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
    ) -> "AsyncStore":
        store = await asyncio.to_thread(
            Store.open,
            path,
            durability,
            read_only,
            interval_ms=interval_ms,
            snapshot_every_events=snapshot_every_events,
            key_file=key_file,
            tamper_key_file=tamper_key_file,
            checkpoint_file=checkpoint_file,
            checkpoint_every_events=checkpoint_every_events,
            on_checkpoint=on_checkpoint,
        )
        return cls(store)

    async def __aenter__(self) -> "AsyncStore":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)

    @property
    def closed(self) -> bool:
        return self.store.closed

    @property
    def path(self) -> str:
        return self.store.path

    @property
    def read_only(self) -> bool:
        return self.store.read_only

    @property
    def next_lsn(self) -> int:
        return self.store.next_lsn

    @property
    def encrypted(self) -> bool:
        return self.store.encrypted

    @property
    def tamper_evident(self) -> bool:
        return self.store.tamper_evident

    async def append(
        self,
        events: Iterable[Mapping[str, Any]],
        expect_conversation: Optional[tuple[str, int]] = None,
    ) -> range:
        # Converted to plain lists here, so a generator is not consumed in
        # the worker thread while the caller's loop may still change it.
        batch = list(events)
        return await asyncio.to_thread(self.store.append, batch, expect_conversation)

    async def conversation(self, conversation_id: str) -> Conversation:
        return await asyncio.to_thread(self.store.conversation, conversation_id)

    async def contains_conversation(self, conversation_id: str) -> bool:
        return await asyncio.to_thread(self.store.contains_conversation, conversation_id)

    async def conversation_ids(self) -> list[str]:
        return await asyncio.to_thread(self.store.conversation_ids)

    async def events(
        self,
        from_lsn: int = 0,
        *,
        conversation_id: Optional[str] = None,
        kinds: Optional[Sequence[str]] = None,
    ) -> AsyncIterator[tuple[int, Event]]:
        """The events of ``Store.events`` as an async iterator (read in
        chunks of ``EVENTS_CHUNK`` per worker-thread call)."""
        iterator = self.store.events(from_lsn, conversation_id=conversation_id, kinds=kinds)
        while True:
            chunk = await asyncio.to_thread(_next_chunk, iterator, EVENTS_CHUNK)
            for item in chunk:
                yield item
            if len(chunk) < EVENTS_CHUNK:
                return

    async def event(self, lsn: int) -> Event:
        return await asyncio.to_thread(self.store.event, lsn)

    async def tail(
        self,
        from_lsn: Optional[int] = None,
        *,
        conversation_id: Optional[str] = None,
        kinds: Optional[Sequence[str]] = None,
        idle_timeout: Optional[float] = None,
        poll_interval: float = 0.05,
    ) -> "AsyncTail":
        """``Store.tail`` for asyncio: ``tail = await store.tail()`` starts it
        (from the end of the log unless ``from_lsn`` is given), then
        ``async for lsn, event in tail`` waits for the writer in a worker
        thread, so the loop keeps running."""
        tail = await asyncio.to_thread(
            self.store.tail,
            from_lsn,
            conversation_id=conversation_id,
            kinds=kinds,
            idle_timeout=idle_timeout,
            poll_interval=poll_interval,
        )
        return AsyncTail(tail)

    async def sync(self) -> None:
        await asyncio.to_thread(self.store.sync)

    async def refresh(self) -> int:
        return await asyncio.to_thread(self.store.refresh)

    async def snapshot(self) -> int:
        return await asyncio.to_thread(self.store.snapshot)

    async def resume(
        self,
        conversation_id: str,
        *,
        evaluation_id: Optional[str] = None,
        prompt: Optional[tuple[Optional[str], Optional[str]]] = None,
    ) -> dict[str, Any]:
        return await asyncio.to_thread(
            self.store.resume, conversation_id, evaluation_id=evaluation_id, prompt=prompt
        )

    async def recorded_result(self, conversation_id: str, call_id: str) -> Optional[Event]:
        return await asyncio.to_thread(self.store.recorded_result, conversation_id, call_id)

    async def render(
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
    ) -> dict[str, Any]:
        return await asyncio.to_thread(
            self.store.render,
            conversation_id,
            provider,
            evaluation_id=evaluation_id,
            history=history,
            record_curation=record_curation,
            pending=pending,
            default_system_prompt=default_system_prompt,
            display_name=display_name,
            include_reasoning=include_reasoning,
            openai_reasoning_content=openai_reasoning_content,
        )

    async def curate(
        self,
        conversation_id: str,
        manager: HistoryManager,
        *,
        record: bool = True,
        prompt_name: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> dict[str, Any]:
        return await asyncio.to_thread(
            self.store.curate,
            conversation_id,
            manager,
            record=record,
            prompt_name=prompt_name,
            session_id=session_id,
        )

    async def erase(self, conversation_id: str, by: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.store.erase, conversation_id, by)

    async def erased_conversations(self) -> list[str]:
        return await asyncio.to_thread(self.store.erased_conversations)

    async def is_erased(self, conversation_id: str) -> bool:
        return await asyncio.to_thread(self.store.is_erased, conversation_id)

    async def checkpoint(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.store.checkpoint)

    def message_control(self, history: Optional[HistoryManager] = None) -> "AsyncMessageControl":
        """Message control with awaitable methods."""
        return AsyncMessageControl(self.store.message_control(history))


class AsyncMessageControl:
    """A :class:`convlog.MessageControl` whose methods are awaitable (each
    runs in a worker thread; a generator callable runs there too)."""

    def __init__(self, control: _MessageControl) -> None:
        self.control = control

    async def create_context(
        self, principal: Optional[str], context_id: str, public: bool = False
    ) -> dict[str, Any]:
        return await asyncio.to_thread(self.control.create_context, principal, context_id, public)

    async def context(self, principal: Optional[str], context_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.control.context, principal, context_id)

    async def contexts(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.control.contexts)

    async def set_public(self, principal: Optional[str], context_id: str, public: bool) -> dict[str, Any]:
        return await asyncio.to_thread(self.control.set_public, principal, context_id, public)

    async def entries(self, principal: Optional[str], context_id: str) -> list[Event]:
        return await asyncio.to_thread(self.control.entries, principal, context_id)

    async def messages(self, principal: Optional[str], context_id: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.control.messages, principal, context_id)

    async def add_messages(
        self, principal: Optional[str], context_id: str, messages: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]:
        batch = list(messages)
        return await asyncio.to_thread(self.control.add_messages, principal, context_id, batch)

    async def set_messages(
        self, principal: Optional[str], context_id: str, messages: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]:
        batch = list(messages)
        return await asyncio.to_thread(self.control.set_messages, principal, context_id, batch)

    async def add_entries(
        self, principal: Optional[str], context_id: str, entries: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]:
        batch = list(entries)
        return await asyncio.to_thread(self.control.add_entries, principal, context_id, batch)

    async def set_entries(
        self, principal: Optional[str], context_id: str, entries: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]:
        batch = list(entries)
        return await asyncio.to_thread(self.control.set_entries, principal, context_id, batch)


class AsyncTail:
    """An async iterator over a started :class:`convlog.Tail`."""

    def __init__(self, tail: Tail) -> None:
        self.tail = tail

    def __aiter__(self) -> "AsyncTail":
        return self

    async def __anext__(self) -> tuple[int, Event]:
        item = await asyncio.to_thread(_next_or_none, self.tail)
        if item is None:
            raise StopAsyncIteration
        return item

    @property
    def next_lsn(self) -> int:
        return self.tail.next_lsn


def _next_chunk(iterator: Any, size: int) -> list[tuple[int, Event]]:
    chunk: list[tuple[int, Event]] = []
    for item in iterator:
        chunk.append(item)
        if len(chunk) == size:
            break
    return chunk


def _next_or_none(iterator: Any) -> Optional[tuple[int, Event]]:
    try:
        item: tuple[int, Event] = next(iterator)
        return item
    except StopIteration:
        return None
