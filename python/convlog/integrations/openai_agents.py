"""convlog as the OpenAI Agents SDK's session store: :class:`ConvlogSession`.

``ConvlogSession`` implements the SDK's ``Session`` protocol (``openai-agents``
0.24): ``session_id``, ``session_settings``, ``get_items``, ``add_items``,
``pop_item`` and ``clear_session``. It is a drop-in for ``SQLiteSession``::

    from agents import Agent, Runner
    from convlog.integrations.openai_agents import ConvlogSession

    session = ConvlogSession("user-42", "./agent-store")   # or a convlog.Store
    result = await Runner.run(agent, "Hello", session=session)

How items are stored (docs/python.md, "The OpenAI Agents SDK session"):

- The session is the convlog conversation whose id is the session id. Each
  ``add_items`` call is one atomic batch of ``conversation_recorded`` events,
  one entry per item, in order.
- Every item is kept verbatim, as its JSON text in the entry's metadata under
  :data:`ITEM_KEY`; ``get_items`` returns exactly that (JSON-equal to what was
  added, for every item type, known or not).
- Each entry is also the item's neutral form, so ``convlog inspect``, resume
  and the provider renders read SDK sessions: user/system/developer/assistant
  messages become user/system/assistant entries with their text,
  ``function_call`` an assistant entry holding the tool call,
  ``function_call_output`` the ``tool`` entry answering it, ``reasoning`` an
  assistant entry with the reasoning summary. Items with no neutral form
  (computer, shell, MCP, hosted tool calls, unknown types) become text-less
  assistant entries, which renders leave out; their type is in
  :data:`TYPE_KEY`. A run (an ``add_items`` batch that starts with a user
  message) starts a new evaluation.
- ``pop_item`` and ``clear_session`` append a ``custom`` event saying what was
  removed (:data:`POP_KIND`, :data:`CLEAR_KIND`) and a ``messages_replaced``
  event holding what is left, in one atomic batch: the log keeps the removed
  items for audit; later reads no longer return them.

Crash policy (**drop**, as ``convlog export --pending drop``): ``get_items``
never returns a tool call without its output, nor an output without its call
(``function_call``/``function_call_output`` and the other call/output pairs
of :data:`CALL_OUTPUT_TYPES`), and leaves out a reasoning item tied to a call
it leaves out. Such a call stays stored and reappears once its output is
added (an approval resumed later). ``pop_item`` removes the last item
``get_items`` returns.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar, Union, cast

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "convlog.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install openai-agents"
    ) from exc

from .._convlog import Store
from .._errors import ConflictError, ConversationNotFoundError, ConvlogError
from .._types import Durability

__all__ = [
    "CALL_ID_KEY",
    "CALL_OUTPUT_TYPES",
    "CLEAR_KIND",
    "ITEM_KEY",
    "POP_KIND",
    "TYPE_KEY",
    "ConvlogSession",
]

ITEM_KEY = "openai_agents.item"
"""Entry metadata key holding the SDK item verbatim (its JSON text)."""

TYPE_KEY = "openai_agents.type"
"""Entry metadata key holding the item's type (``message`` when it has none)."""

CALL_ID_KEY = "openai_agents.call_id"
"""Entry metadata key holding the item's ``call_id``, when it has one (a
session read from the store pairs calls and outputs without parsing items)."""

POP_KIND = "openai_agents.pop_item"
"""Kind of the custom event ``pop_item`` records: payload ``{"item": ...}``."""

CLEAR_KIND = "openai_agents.clear_session"
"""Kind of the custom event ``clear_session`` records: payload
``{"items": N, "entries": N}`` (the SDK items and all entries removed)."""

CALL_OUTPUT_TYPES: Mapping[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "tool_search_call": "tool_search_output",
}
"""Call item type -> the output item type that answers it (paired by ``call_id``)."""

_OUTPUT_TYPES = frozenset(CALL_OUTPUT_TYPES.values())

OPENAI_ROLE_KEY = "convlog.openai_role"
"""convlog's metadata key marking a system entry as OpenAI's ``developer`` role
(docs/providers.md)."""

ID_BYTES_MAX = 256
"""convlog's limit on ids (session id, call id, tool name): docs/events.md."""

TEXT_BYTES_MAX = 8 * 1024 * 1024
"""convlog's limit on a text or metadata value: docs/events.md. The largest
item (its JSON text) a session takes."""

NEUTRAL_ITEM_BYTES_MAX = 6 * 1024 * 1024
"""Items larger than this (JSON text) get no neutral text: the entry holds
the item verbatim only, so it stays within convlog's 16 MiB per event (a
neutral text is at most as long as the item's JSON)."""

ADD_ITEMS_MAX = 10_000
"""Items one ``add_items`` call takes at most (one atomic batch)."""

ADD_BYTES_MAX = 24 * 1024 * 1024
"""Bytes of items (JSON text) one ``add_items`` call takes at most: with
their neutral texts they stay within convlog's 64 MiB per batch."""

APPEND_ATTEMPTS_MAX = 64
"""Conditional appends ``pop_item`` and ``clear_session`` try before giving
up when other writers keep changing the same conversation (each conflict
re-reads it)."""

INLINE_CHECK_EVENTS_MAX = 256
"""``get_items`` checks at most this many new events of the store in the
caller's thread (they tell whether its cached items are still exact); more,
or a cache to read again, go to a worker thread."""

FLUSH_EVENTS_MAX = 4096
"""Events of ``add_items`` calls appended together in one batch at most."""

FLUSH_BYTES_MAX = 16 * 1024 * 1024
"""Bytes of items (JSON text) appended together in one batch at most (the
store takes 64 MiB per batch)."""

STATES_KEPT_MAX = 256
"""Sessions whose state (their cached items) the process keeps after their
last session object is gone, the most recently used first."""

SESSION_WORKERS_MAX = 64
"""Threads running the sessions' blocking store calls (shared by all
sessions of the process): enough for concurrent appends to share fsyncs."""

_NEUTRAL_ENTRY_FIELDS = (
    "message_id",
    "evaluation_id",
    "sequence",
    "turn",
    "role",
    "content",
    "reasoning",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "is_error",
    "finish_reason",
    "prompt_ns",
    "prompt_key",
    "created_at",
    "metadata",
)

_T = TypeVar("_T")

_executor_lock = threading.Lock()
_executor: Optional[ThreadPoolExecutor] = None


def _session_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=SESSION_WORKERS_MAX, thread_name_prefix="convlog-session"
            )
        return _executor


async def _run(function: Callable[[], _T], *, mutation: bool) -> _T:
    """Run ``function`` in a session worker thread. A mutation is waited for
    even when the caller is cancelled, and the cancellation re-raised after
    it (as the SDK's own sessions do): a cancelled ``add_items`` is either
    stored or not, never still running."""
    future = asyncio.get_running_loop().run_in_executor(_session_executor(), function)
    if not mutation:
        return await future
    return await _await_mutation(future)


async def _await_mutation(future: asyncio.Future[_T]) -> _T:
    """The outcome of ``future``, waited for despite the caller's cancellation
    (re-raised after it)."""
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError as exc:
        cancelled: Optional[asyncio.CancelledError] = exc  # ours, or the future's
    while not future.done():
        try:
            await asyncio.wait({future})
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
    try:
        result = future.result()
    except BaseException:
        if cancelled is not None:
            raise cancelled from None
        raise
    if cancelled is not None:
        raise cancelled
    return result


# Stores opened from a path, shared by every session of the process that names it.
_path_stores_lock = threading.Lock()
_path_stores: dict[str, tuple[Store, int]] = {}


def _acquire_path_store(path: Union[str, "os.PathLike[str]"], durability: Durability) -> Store:
    key = str(Path(path).expanduser().resolve())
    with _path_stores_lock:
        held = _path_stores.get(key)
        if held is not None and not held[0].closed:
            _path_stores[key] = (held[0], held[1] + 1)
            return held[0]
        store = Store.open(key, durability)
        _path_stores[key] = (store, 1)
        return store


def _release_path_store(store: Store) -> None:
    with _path_stores_lock:
        for key, (held, count) in list(_path_stores.items()):
            if held is store:
                if count <= 1:
                    del _path_stores[key]
                    store.close()
                else:
                    _path_stores[key] = (held, count - 1)
                return


@dataclass(frozen=True)
class _Item:
    """One stored item: its JSON text and what pairing needs."""

    raw: str
    pair: Optional[tuple[str, str]]  # (output type, call id) shared by a call and its output
    is_call: bool
    is_reasoning: bool


def _classify(raw: str, item: Mapping[str, Any]) -> _Item:
    kind = item.get("type")
    call_id = item.get("call_id")
    pair: Optional[tuple[str, str]] = None
    is_call = False
    if isinstance(kind, str) and isinstance(call_id, str):
        if kind in CALL_OUTPUT_TYPES:
            pair = (CALL_OUTPUT_TYPES[kind], call_id)
            is_call = True
        elif kind in _OUTPUT_TYPES:
            pair = (kind, call_id)
    return _Item(raw, pair, is_call, kind == "reasoning")


def _summary(entry: Mapping[str, Any], metadata: Mapping[str, str]) -> Optional[dict[str, Any]]:
    """What pairing and turns need of a recorded item (its type, role and call
    id), read from its entry without parsing it; None when the entry does not
    say (then the item is parsed)."""
    kind = metadata.get(TYPE_KEY)
    if kind is None:
        return None
    call_id = metadata.get(CALL_ID_KEY)
    if call_id is None and (kind in CALL_OUTPUT_TYPES or kind in _OUTPUT_TYPES):
        return None
    if kind == "message":
        return {"role": entry.get("role")}
    return {"type": kind, "call_id": call_id}


def _paired(items: Sequence[_Item]) -> list[_Item]:
    """The items without a call that has no output, and the reverse: see
    :func:`_paired_indexes`."""
    return [items[index] for index in _paired_indexes(items)]


def _paired_indexes(items: Sequence[_Item]) -> list[int]:
    """The indexes of the items without a call that has no output, an output that has no
    call, and a reasoning item tied to a call left out (the next item that is
    not reasoning is that call: the Responses API rejects reasoning without
    the item it led to)."""
    calls = {item.pair for item in items if item.pair is not None and item.is_call}
    outputs = {item.pair for item in items if item.pair is not None and not item.is_call}
    keep = [
        item.pair is None or (item.pair in outputs if item.is_call else item.pair in calls)
        for item in items
    ]
    if all(keep):
        return list(range(len(items)))
    next_kept_call: Optional[bool] = None  # whether the next non-reasoning item is a call kept
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if item.is_reasoning:
            if next_kept_call is False:
                keep[index] = False
        else:
            next_kept_call = keep[index] if item.is_call else None
    return [index for index, kept in enumerate(keep) if kept]


def _text_of(content: Any) -> Optional[str]:
    """The text of a message's content: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, Mapping):
                continue
            if part.get("type") in ("input_text", "output_text", "text", "summary_text"):
                text = part.get("text")
            elif part.get("type") == "refusal":
                text = part.get("refusal")
            else:
                continue
            if isinstance(text, str):
                texts.append(text)
        return "".join(texts) if texts else None
    return None


def _utf8_len(text: str) -> Optional[int]:
    """The UTF-8 length of ``text``; None when it has no UTF-8 form (a lone
    surrogate, which JSON text can carry escaped)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def _bounded(text: Optional[str]) -> Optional[str]:
    """A text convlog takes as a neutral text, else None (the item keeps it
    verbatim)."""
    if text is None:
        return None
    size = _utf8_len(text)
    return text if size is not None and size <= TEXT_BYTES_MAX else None


def _is_id(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    size = _utf8_len(value)
    return size is not None and 0 < size <= ID_BYTES_MAX


def _is_user_message(item: Mapping[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


_USER_SIDE_TYPES = _OUTPUT_TYPES | {"mcp_approval_response"}


def _side(item: Mapping[str, Any]) -> Optional[bool]:
    """True for what a model produces (messages of the assistant, reasoning,
    calls), False for what the host sends (user/system messages, outputs),
    None for items that say neither (references, unknown types)."""
    kind = item.get("type")
    if kind is None or kind == "message":
        return item.get("role") == "assistant"
    if not isinstance(kind, str):
        return None
    if kind in _USER_SIDE_TYPES:
        return False
    if kind == "reasoning" or kind.endswith("_call") or kind.startswith("mcp_"):
        return True
    return None


@dataclass
class _Run:
    """Where the next entry goes: the evaluation (run), its turn and next
    sequence (given explicitly: the store then has nothing to look up), the
    call ids its entries hold (a call id twice in one evaluation is not
    representable)."""

    evaluation_id: Optional[str] = None
    turn: int = 0
    assistant_last: bool = False
    next_sequence: int = 0
    calls: set[str] = field(default_factory=set)

    def copy(self) -> _Run:
        return _Run(
            self.evaluation_id, self.turn, self.assistant_last, self.next_sequence, set(self.calls)
        )


def _neutral(
    item: Mapping[str, Any], run: _Run, call_name: Callable[[str], Optional[str]]
) -> dict[str, Any]:
    """The neutral entry fields of one item (without evaluation, turn, metadata)."""
    kind = item.get("type")
    role = item.get("role")
    if (kind is None or kind == "message") and role in ("user", "system", "developer", "assistant"):
        if role == "developer":
            return {"role": "system", "content": _bounded(_text_of(item.get("content"))),
                    "metadata": {OPENAI_ROLE_KEY: "developer"}}
        return {"role": role, "content": _bounded(_text_of(item.get("content")))}
    call_id = item.get("call_id")
    if kind == "function_call":
        name, arguments = item.get("name"), item.get("arguments")
        if (
            _is_id(call_id)
            and _is_id(name)
            and isinstance(arguments, str)
            and _bounded(arguments) is not None
            and call_id not in run.calls
        ):
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"call_id": call_id, "name": name, "arguments": arguments}],
            }
    elif kind == "function_call_output" and _is_id(call_id):
        output = item.get("output")
        content = output if isinstance(output, str) else _text_of(output)
        if content is None and output is not None:
            content = json.dumps(output)
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "tool_name": call_name(cast(str, call_id)),
            "content": _bounded(content),
        }
    elif kind == "reasoning":
        text = _text_of(item.get("summary")) or _text_of(item.get("content"))
        bounded = _bounded(text)
        if bounded:
            return {"role": "assistant", "content": None, "reasoning": {"text": bounded}}
    return {"role": "assistant", "content": None}


def _clean_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A folded entry in the form ``messages_replaced`` takes. Calls of the
    session's own entries go back to their recorded status (pending): the
    results left in the list complete them again."""
    cleaned = {key: entry[key] for key in _NEUTRAL_ENTRY_FIELDS if key in entry}
    metadata = entry.get("metadata") or {}
    if ITEM_KEY in metadata and cleaned.get("tool_calls"):
        cleaned["tool_calls"] = [
            {"call_id": call["call_id"], "name": call["name"], "arguments": call["arguments"]}
            for call in cleaned["tool_calls"]
        ]
    return cleaned


class _State:
    """One session's state in the process, shared by every ``ConvlogSession``
    of the same store and session id: the lock that orders their work and
    the cache of the session's items.

    The cache is exact up to the store's LSN ``seen_next``. Appends through
    this state are plain appends (no other writer of the process reaches the
    conversation through a session, and only one process writes a store);
    a write by anything else (``store.append`` to the same conversation) is
    noticed by the next read or write, which reads the session again.
    """

    def __init__(self, store: Store, session_id: str, flusher: _Flusher) -> None:
        self.store = store
        self.session_id = session_id
        self.flusher = flusher  # held: the store's sessions share it while any lives
        self.lock = threading.Lock()
        self.seen_next: Optional[int] = None
        self.last_lsn = 0  # the conversation's last LSN as the cache has it
        self.own: list[range] = []  # this state's appends at or after seen_next
        self.items: list[_Item] = []
        self.visible: Optional[list[str]] = None
        self.run = _Run()
        self.call_names: dict[str, str] = {}

    # ------------------------------------------------------------------ reads

    def position(self) -> int:
        """The store's next LSN, caught up with the writer for a read-only store."""
        return self.store.refresh() if self.store.read_only else self.store.next_lsn

    def catch_up(self) -> None:
        """Bring the cache up to date with the store (under the lock)."""
        position = self.position()
        if not self.check(position):
            self.load(position)

    def check(self, position: int) -> bool:
        """Whether the cache is exact at ``position`` (then it says so from
        there on): no event of the conversation came since but this state's
        own. False: the session must be read again."""
        if self.seen_next is None:
            return False
        if position == self.seen_next:
            return True
        for lsn, event in self.store.events(self.seen_next, conversation_id=self.session_id):
            if lsn >= position:
                break
            if event.get("type") == "custom" or any(lsn in own for own in self.own):
                continue
            return False  # someone else wrote the conversation
        self.seen_next = position
        self.own = [own for own in self.own if own.stop > position]
        return True

    def load(self, position: int) -> None:
        """Read the session from the store into the cache."""
        try:
            conversation = self.store.conversation(self.session_id)
        except ConversationNotFoundError:
            entries: list[dict[str, Any]] = []
            last_lsn = 0
        else:
            entries = conversation.entries
            last_lsn = conversation.last_lsn
        items: list[_Item] = []
        run = _Run()
        call_names: dict[str, str] = {}
        next_sequences: dict[str, int] = {}
        for entry in entries:
            evaluation_id = str(entry.get("evaluation_id"))
            next_sequences[evaluation_id] = max(
                next_sequences.get(evaluation_id, 0), int(entry.get("sequence") or 0) + 1
            )
            metadata = entry.get("metadata") or {}
            raw = metadata.get(ITEM_KEY)
            if raw is None:
                continue  # an entry another writer recorded: not an SDK item
            item = _summary(entry, metadata)
            if item is None:
                item = json.loads(raw)
            items.append(_classify(raw, item))
            if evaluation_id != run.evaluation_id:
                run = _Run(evaluation_id)
            run.turn = int(entry.get("turn") or 0)
            side = _side(item)
            if side is not None:
                run.assistant_last = side
            for call in entry.get("tool_calls") or ():
                run.calls.add(call["call_id"])
                call_names[call["call_id"]] = call["name"]
        if run.evaluation_id is not None:
            run.next_sequence = next_sequences[run.evaluation_id]
        self.items = items
        self.visible = None
        self.run = run
        self.call_names = call_names
        self.last_lsn = last_lsn
        self.seen_next = position
        self.own = []

    def items_for(self, limit: Optional[int]) -> list[TResponseInputItem]:
        """What ``get_items(limit)`` returns, from the cache (under the lock)."""
        if self.visible is None:
            self.visible = [item.raw for item in _paired(self.items)]
        visible = self.visible
        if limit is not None and 0 <= limit < len(visible):
            # Paired again within the window: an output whose call is before
            # the window would be sent without it.
            window = _paired(self.items)[len(visible) - limit :] if limit else []
            visible = [item.raw for item in _paired(window)]
        return cast(list[TResponseInputItem], json.loads("[" + ",".join(visible) + "]"))

    def get_items(self, limit: Optional[int]) -> list[TResponseInputItem]:
        with self.lock:
            self.catch_up()
            return self.items_for(limit)

    # ----------------------------------------------------------------- writes

    def plan(
        self,
        pairs: Sequence[tuple[str, Mapping[str, Any]]],
        run: _Run,
        names: dict[str, str],
    ) -> tuple[list[dict[str, Any]], _Run]:
        """The events recording ``pairs`` (JSON text, item) after ``run`` (the
        cache's, or the one a previous plan left); the run after them. Call
        names the events add go into ``names``."""
        run = run.copy()
        if run.evaluation_id is None or _is_user_message(pairs[0][1]):
            run = _Run(uuid.uuid4().hex)

        def call_name(call_id: str) -> Optional[str]:
            return names.get(call_id) or self.call_names.get(call_id)

        events: list[dict[str, Any]] = []
        for raw, item in pairs:
            side = _side(item)
            if side and not run.assistant_last:
                run.turn += 1  # a new model response
            if side is not None:
                run.assistant_last = side
            if len(raw) > NEUTRAL_ITEM_BYTES_MAX:
                entry: dict[str, Any] = {"role": "assistant", "content": None}
            else:
                entry = _neutral(item, run, call_name)
            for tool_call in entry.get("tool_calls", ()):
                run.calls.add(tool_call["call_id"])
                names[tool_call["call_id"]] = tool_call["name"]
            kind = item.get("type")
            entry["evaluation_id"] = run.evaluation_id
            entry["sequence"] = run.next_sequence
            run.next_sequence += 1
            entry["turn"] = run.turn
            metadata = entry.setdefault("metadata", {})
            metadata[ITEM_KEY] = raw
            metadata[TYPE_KEY] = kind if isinstance(kind, str) and kind else "message"
            call_id = item.get("call_id")
            if isinstance(call_id, str) and _utf8_len(call_id) is not None:
                metadata[CALL_ID_KEY] = call_id
            events.append(
                {"type": "conversation_recorded", "conversation_id": self.session_id, "entry": entry}
            )
        return events, run

    def recorded(
        self,
        pairs: Sequence[tuple[str, Mapping[str, Any]]],
        run: _Run,
        names: Mapping[str, str],
        lsns: range,
        mine: Sequence[range],
    ) -> None:
        """The cache takes the items ``pairs`` appended in the batch ``lsns``
        (this state's events at ``mine``), and the run state after them."""
        self.items.extend(_classify(raw, item) for raw, item in pairs)
        self.run = run
        self.call_names.update(names)
        self.last_lsn = mine[-1].stop - 1
        self.visible = None
        if lsns.start == self.seen_next:
            self.seen_next = lsns.stop  # the batch's other events are other sessions'
        else:
            self.own.extend(mine)

    def appended(self, lsns: range) -> None:
        """The cache now holds the batch ``lsns`` this state appended."""
        self.last_lsn = lsns.stop - 1
        self.visible = None
        if lsns.start == self.seen_next:
            self.seen_next = lsns.stop  # nothing else came between
        else:
            self.own.append(lsns)

    def replace(
        self, build: Callable[[list[dict[str, Any]]], Optional[list[dict[str, Any]]]]
    ) -> Optional[range]:
        """Append what ``build`` makes of the conversation's entries (None:
        nothing to do), if the conversation did not change since it was read
        (a conditional append); else read it again and retry."""
        for _attempt in range(APPEND_ATTEMPTS_MAX):
            self.catch_up()
            try:
                conversation = self.store.conversation(self.session_id)
            except ConversationNotFoundError:
                return None
            if conversation.last_lsn != self.last_lsn:
                self.load(self.position())
                continue
            events = build(conversation.entries)
            if events is None:
                return None
            try:
                lsns = self.store.append(
                    events, expect_conversation=(self.session_id, conversation.last_lsn)
                )
            except ConflictError:
                self.load(self.position())
                continue
            self.appended(lsns)
            return lsns
        raise ConflictError(
            f"session {self.session_id!r}: other writers changed it during "
            f"{APPEND_ATTEMPTS_MAX} attempts in a row"
        )

    def pop_item(self) -> Optional[TResponseInputItem]:
        with self.lock:
            popped: list[int] = []

            def build(entries: list[dict[str, Any]]) -> Optional[list[dict[str, Any]]]:
                visible = _paired_indexes(self.items)
                if not visible:
                    return None
                index = visible[-1]
                own = [
                    position
                    for position, entry in enumerate(entries)
                    if ITEM_KEY in (entry.get("metadata") or {})
                ]
                target = own[index] if len(own) == len(self.items) else -1
                if target < 0 or entries[target]["metadata"][ITEM_KEY] != self.items[index].raw:
                    raise RuntimeError(
                        f"session {self.session_id!r}: its cached items differ from the "
                        "store's entries at the same LSN (a bug: please report it)"
                    )
                popped[:] = [index]
                payload = '{"item":' + self.items[index].raw + "}"
                return [
                    {
                        "type": "custom",
                        "kind": POP_KIND,
                        "conversation_id": self.session_id,
                        "payload": payload.encode("utf-8"),
                    },
                    {
                        "type": "messages_replaced",
                        "conversation_id": self.session_id,
                        "entries": [
                            _clean_entry(entry)
                            for position, entry in enumerate(entries)
                            if position != target
                        ],
                    },
                ]

            if self.replace(build) is None:
                return None
            item = self.items.pop(popped[0])
            return cast(TResponseInputItem, json.loads(item.raw))

    def clear_session(self) -> None:
        with self.lock:

            def build(entries: list[dict[str, Any]]) -> Optional[list[dict[str, Any]]]:
                if not entries:
                    return None
                payload = json.dumps({"items": len(self.items), "entries": len(entries)})
                return [
                    {
                        "type": "custom",
                        "kind": CLEAR_KIND,
                        "conversation_id": self.session_id,
                        "payload": payload.encode("utf-8"),
                    },
                    {"type": "messages_replaced", "conversation_id": self.session_id, "entries": []},
                ]

            if self.replace(build) is not None:
                self.items = []
                self.run = _Run()
                self.call_names = {}


@dataclass
class _Request:
    """One ``add_items`` call waiting for the flusher."""

    state: _State
    pairs: Sequence[tuple[str, Mapping[str, Any]]]
    size: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


def _settle(outcomes: Sequence[tuple[asyncio.Future[None], Optional[BaseException]]]) -> None:
    for future, error in outcomes:
        if not future.done():
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


class _Flusher:
    """Appends the ``add_items`` calls of a store's sessions. Calls that
    arrive while an append is under way go together in the next one: one
    atomic batch, one fsync and one thread hop for all of them (each call's
    items stay one atomic, contiguous run of events)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.queue: list[_Request] = []
        self.running = False

    def submit(self, request: _Request) -> None:
        with self.lock:
            self.queue.append(request)
            if self.running:
                return
            self.running = True
        try:
            _session_executor().submit(self.drain)
        except BaseException:
            with self.lock:
                self.running = False
            raise

    def drain(self) -> None:
        while True:
            with self.lock:
                taken, events, size = 0, 0, 0
                for request in self.queue:
                    if taken and (
                        events + len(request.pairs) > FLUSH_EVENTS_MAX
                        or size + request.size > FLUSH_BYTES_MAX
                    ):
                        break
                    taken, events, size = taken + 1, events + len(request.pairs), size + request.size
                batch = self.queue[:taken]
                del self.queue[:taken]
                if not batch:
                    self.running = False
                    return
            outcomes: list[Optional[BaseException]]
            try:
                outcomes = self.flush(batch)
            except BaseException as error:  # reported to every caller of the batch
                outcomes = [error] * len(batch)
            by_loop: dict[int, tuple[asyncio.AbstractEventLoop, list[Any]]] = {}
            for request, outcome in zip(batch, outcomes):
                by_loop.setdefault(id(request.loop), (request.loop, []))[1].append(
                    (request.future, outcome)
                )
            for loop, settled in by_loop.values():
                try:
                    loop.call_soon_threadsafe(_settle, settled)
                except RuntimeError:
                    pass  # that event loop is closed: nobody waits any more

    def flush(self, batch: Sequence[_Request]) -> list[Optional[BaseException]]:
        """Appends the batch's items; the error of each request (None: stored)."""
        states = sorted({id(r.state): r.state for r in batch}.values(), key=id)
        for state in states:
            state.lock.acquire()
        try:
            if len(batch) > 1:
                try:
                    self.append_together(batch, states)
                    return [None] * len(batch)
                except ConvlogError:
                    pass  # one call's bad input fails all: append each alone to tell
            outcomes: list[Optional[BaseException]] = []
            for request in batch:
                try:
                    self.append_together([request], [request.state])
                    outcomes.append(None)
                except ConvlogError as error:
                    outcomes.append(error)
            return outcomes
        finally:
            for state in states:
                state.lock.release()

    def append_together(self, batch: Sequence[_Request], states: Sequence[_State]) -> None:
        for state in states:
            state.catch_up()
        runs = {id(state): state.run for state in states}
        names: dict[int, dict[str, str]] = {id(state): {} for state in states}
        # Per state: its items in order and where its events sit in the batch.
        pairs: dict[int, list[tuple[str, Mapping[str, Any]]]] = {id(s): [] for s in states}
        spans: dict[int, list[tuple[int, int]]] = {id(s): [] for s in states}
        events: list[dict[str, Any]] = []
        for request in batch:
            key = id(request.state)
            planned, runs[key] = request.state.plan(request.pairs, runs[key], names[key])
            spans[key].append((len(events), len(planned)))
            pairs[key].extend(request.pairs)
            events.extend(planned)
        lsns = self.store.append(events)
        for state in states:
            key = id(state)
            mine = [range(lsns.start + at, lsns.start + at + count) for at, count in spans[key]]
            state.recorded(pairs[key], runs[key], names[key], lsns, mine)


# The states of the process's sessions, by store and session id; a state
# lives while a session holds it (and holds its store, so the id stays its).
_states_lock = threading.Lock()
_states: "weakref.WeakValueDictionary[tuple[int, str], _State]" = weakref.WeakValueDictionary()


_flushers: "weakref.WeakValueDictionary[int, _Flusher]" = weakref.WeakValueDictionary()
_recent: "OrderedDict[tuple[int, str], _State]" = OrderedDict()


def _state_of(store: Store, session_id: str) -> _State:
    with _states_lock:
        key = (id(store), session_id)
        state = _states.get(key)
        if state is None or state.store is not store:
            flusher = _flushers.get(id(store))
            if flusher is None or flusher.store is not store:
                flusher = _Flusher(store)
                _flushers[id(store)] = flusher
            state = _State(store, session_id, flusher)
            _states[key] = state
        # Kept a while after its last session object goes (a host that makes
        # a session object per request finds its cache again).
        _recent[key] = state
        _recent.move_to_end(key)
        while len(_recent) > STATES_KEPT_MAX:
            _recent.popitem(last=False)
        return state


class ConvlogSession:
    """The OpenAI Agents SDK ``Session`` protocol on a convlog store.

    ``ConvlogSession(session_id, store)``: ``store`` is an open
    :class:`convlog.Store` (shared by any number of sessions; the caller
    closes it) or a path (opened with ``durability``; sessions of the process
    naming the same path share one store, closed with the last
    :meth:`close`). ``session_settings`` (a ``SessionSettings`` or a dict of
    its fields) gives ``get_items`` its default ``limit``; an explicit limit
    wins.

    A session may be used from several asyncio tasks and threads at once,
    and several session objects of one session id at once (they share their
    state); sessions of one store share its group commit.
    """

    session_settings: Optional[SessionSettings] = None

    def __init__(
        self,
        session_id: str,
        store: Union[Store, str, "os.PathLike[str]"],
        *,
        session_settings: Union[SessionSettings, Mapping[str, Any], None] = None,
        durability: Durability = "group",
    ) -> None:
        if not _is_id(session_id):
            raise ValueError(
                f"session_id must be 1 to {ID_BYTES_MAX} bytes of UTF-8 "
                f"(a convlog conversation id), got {session_id!r:.300}"
            )
        self.session_id = session_id
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(
                session_settings
                if isinstance(session_settings, SessionSettings)
                else dict(session_settings)
            )
        )
        if isinstance(store, Store):
            self._store = store
            self._owns_store = False
        else:
            self._store = _acquire_path_store(store, durability)
            self._owns_store = True
        self._state = _state_of(self._store, session_id)
        self._closed = False

    @property
    def store(self) -> Store:
        """The convlog store the session lives in."""
        return self._store

    def close(self) -> None:
        """Release the store if the session opened it from a path (the last
        session of that path closes it). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            _release_path_store(self._store)

    def __repr__(self) -> str:
        return f"ConvlogSession({self.session_id!r}, store={self._store.path!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"ConvlogSession {self.session_id!r} is closed")

    # ---------------------------------------------------------------- protocol

    async def get_items(self, limit: Optional[int] = None) -> list[TResponseInputItem]:
        """The session's items in the order added, the latest ``limit`` when
        given (else ``session_settings.limit``; 0 gives none, a negative limit
        all). Calls without outputs and outputs without calls are left out
        (the crash policy), within the window too."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        self._check_open()
        state = self._state
        # The cache answers without a thread hop when at most a few events
        # were appended since it was exact (a writer's next LSN is in memory;
        # the check reads those events; a read-only store must look further).
        if not self._store.read_only and state.lock.acquire(blocking=False):
            try:
                if state.seen_next is not None:
                    position = state.position()
                    if position - state.seen_next <= INLINE_CHECK_EVENTS_MAX and state.check(position):
                        return state.items_for(limit)
            finally:
                state.lock.release()
        return await _run(lambda: state.get_items(limit), mutation=False)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items as one atomic batch (all or none after a crash),
        durable when this returns as the store's durability says."""
        self._check_open()
        if not items:
            return
        if len(items) > ADD_ITEMS_MAX:
            raise ValueError(
                f"add_items: {len(items)} items in one call; at most {ADD_ITEMS_MAX} "
                "(one atomic batch): add them in several calls"
            )
        # JSON text made here, in the caller's thread: the caller may change
        # its items once this returns control.
        pairs: list[tuple[str, Mapping[str, Any]]] = []
        for index, item in enumerate(cast(list[Any], items)):
            if not isinstance(item, Mapping):
                raise TypeError(f"add_items: item {index} is a {type(item).__name__}, not a dict")
            try:
                raw = json.dumps(item)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"add_items: item {index} is not JSON-serializable: {exc}") from exc
            if len(raw) > TEXT_BYTES_MAX:
                raise ValueError(
                    f"add_items: item {index} is {len(raw)} bytes of JSON; "
                    f"a session keeps at most {TEXT_BYTES_MAX} bytes per item"
                )
            pairs.append((raw, json.loads(raw)))
        size = sum(len(raw) for raw, _ in pairs)  # JSON text is ASCII: bytes
        if size > ADD_BYTES_MAX:
            raise ValueError(
                f"add_items: {size} bytes of items (JSON) in one call; at most "
                f"{ADD_BYTES_MAX} (one atomic batch): add them in several calls"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._state.flusher.submit(_Request(self._state, pairs, size, loop, future))
        await _await_mutation(future)

    async def pop_item(self) -> Optional[TResponseInputItem]:
        """Remove and return the last item ``get_items()`` returns (None when
        it returns none). The log keeps it: a ``POP_KIND`` custom event holds
        it, beside the ``messages_replaced`` event that leaves it out."""
        self._check_open()
        return await _run(self._state.pop_item, mutation=True)

    async def clear_session(self) -> None:
        """Remove every item. The log keeps them: a ``CLEAR_KIND`` custom
        event and a ``messages_replaced`` event with no entries."""
        self._check_open()
        await _run(self._state.clear_session, mutation=True)
