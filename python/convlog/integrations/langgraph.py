"""A LangGraph checkpointer that keeps its checkpoints in a convlog store.

``ConvlogSaver`` implements ``langgraph.checkpoint.base.BaseCheckpointSaver``
(langgraph-checkpoint 4.x) with the sync and async methods ``put``,
``put_writes``, ``get_tuple``, ``list``, ``delete_thread``, ``copy_thread``,
``delete_for_runs`` and ``prune``.

Storage (``docs/python.md``, "The LangGraph checkpointer", says the same):

- Everything is recorded as ``custom`` events (``docs/events.md``) with the
  kinds below, on one conversation per LangGraph thread:
  ``langgraph:<thread_id>``, or ``langgraph#<sha256 of thread_id>`` when that
  would be longer than convlog's 256-byte id limit (the thread id is then
  also carried in each payload). A checkpoint namespace is a field of the
  payloads, so a thread's subgraph checkpoints share its conversation.
- Payloads are msgpack maps (ormsgpack). Values go through the saver's
  ``serde`` (``dumps_typed``/``loads_typed``), as with every LangGraph saver.
- A ``put`` is one event (the checkpoint, its metadata and its new channel
  values) and a ``put_writes`` one event, each appended as an atomic batch.
- A channel value is stored once per (thread, namespace, channel, version),
  only for the channels in ``new_versions``: values that did not change
  between checkpoints are not stored again. A value may be stored as a
  delta (copy ranges and literal bytes) against the channel's last stored
  value of at least ``DELTA_MIN_BYTES``, so a growing message list costs the
  new messages, not the whole list; at most ``DELTA_CHAIN_MAX`` deltas
  follow a whole value. Deltas name their base by LSN: the saver needs a
  store that keeps its whole log (the default).
- Deletions (``delete_thread``, ``delete_for_runs``, ``prune``) are events
  too: the log keeps what was deleted for audit, reads no longer return it.
- Open reads every ``langgraph.*`` event once (``Store.events(kinds=...)``)
  to build an in-memory index: per checkpoint its LSN, parent and metadata,
  per write and per stored value where it is. Decoded payloads and rebuilt
  values are kept in bounded caches (filled at open and by writes); a miss
  reads the event by LSN (``Store.event``).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar, cast

import ormsgpack
from langchain_core.runnables import RunnableConfig
from typing_extensions import Self
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

import convlog

__all__ = [
    "ConvlogSaver",
    "KIND_CHECKPOINT",
    "KIND_COPY",
    "KIND_DELETE",
    "KIND_WRITES",
    "KINDS",
    "UnreadableEventError",
    "conversation_id_for_thread",
]

KIND_CHECKPOINT = "langgraph.checkpoint"
"""One checkpoint, its metadata and the channel values new in it (whole or as deltas)."""
KIND_WRITES = "langgraph.writes"
"""The writes of one ``put_writes`` call (one task, one checkpoint)."""
KIND_DELETE = "langgraph.delete"
"""A deletion: the whole thread, or listed checkpoints with their writes."""
KIND_COPY = "langgraph.copy"
"""``copy_thread``: the target thread gets the source thread's checkpoints."""
KINDS = [KIND_CHECKPOINT, KIND_WRITES, KIND_DELETE, KIND_COPY]

CONVERSATION_PREFIX = "langgraph:"
"""Conversation id of a thread: this prefix and the thread id."""
HASHED_CONVERSATION_PREFIX = "langgraph#"
"""Conversation id of a thread whose id is too long: this prefix and its SHA-256."""
ID_BYTES_MAX = 256
"""convlog's limit on a conversation id (``docs/events.md``)."""

DELTA_CHAIN_MAX = 32
"""Most deltas between a stored value and the whole value it is rebuilt from."""
DELTA_MIN_BYTES = 512
"""Values smaller than this are always stored whole."""
DELTA_OPS_MAX = 64
"""Most copy/literal operations in one delta (past them the rest is literal)."""
DELTA_FINDS_MAX = 256
"""Most searches of the whole base value while making one delta."""
_PROBE_BYTES = 32
_GLOBAL_STEP_BYTES = 48
_RESYNC_SKIP_BYTES = 64
_RESYNC_WINDOW_BYTES = 256

VALUE_CACHE_BYTES = 64 * 1024 * 1024
"""Budget of the cache of rebuilt channel values (bytes, by LSN)."""
PAYLOAD_CACHE_BYTES = 64 * 1024 * 1024
"""Budget of the cache of decoded event payloads (by LSN), filled as events are read or written."""

PRUNE_STRATEGIES = ("keep_latest", "delete")

Version = str | int | float
Durability = Literal["group", "sync", "none", "periodic"]

K = TypeVar("K")
V = TypeVar("V")


class UnreadableEventError(convlog.ConvlogError):
    """A ``langgraph.*`` event in the store that ConvlogSaver did not write and cannot read.

    ``lsn`` and ``event_kind`` name the event; the saver does not skip it (its
    index would silently miss a checkpoint, a write or a deletion).
    """

    def __init__(self, lsn: int, event_kind: str, error: Exception) -> None:
        super().__init__(f"event {lsn} ({event_kind}): a payload ConvlogSaver cannot read: {error!r}")
        self.lsn = lsn
        self.event_kind = event_kind


def conversation_id_for_thread(thread_id: str) -> str:
    """The convlog conversation that holds a LangGraph thread's checkpoints."""
    cid = CONVERSATION_PREFIX + thread_id
    if len(cid.encode("utf-8")) <= ID_BYTES_MAX:
        return cid
    return HASHED_CONVERSATION_PREFIX + hashlib.sha256(thread_id.encode("utf-8")).hexdigest()


class _Lru(Generic[K, V]):
    """A least-recently-used map bounded by the sum of its entries' sizes."""

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._used = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def get(self, key: K) -> V | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[0]

    def put(self, key: K, value: V, size: int) -> None:
        if size > self._budget:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._used -= old[1]
        self._items[key] = (value, size)
        self._used += size
        while self._used > self._budget:
            _, (_, dropped) = self._items.popitem(last=False)
            self._used -= dropped


@dataclass
class _Checkpoint:
    lsn: int
    parent: str | None
    metadata: dict[str, Any]


@dataclass(frozen=True)
class _Ref:
    """Where a stored value is: an item of a checkpoint event's values or of a writes event's rows."""

    lsn: int
    pos: int
    depth: int
    """Deltas between it and the whole value it is rebuilt from."""


@dataclass(frozen=True)
class _Write:
    ref: _Ref
    channel: str
    task_path: str


@dataclass
class _Thread:
    # namespace -> checkpoint id -> checkpoint
    checkpoints: dict[str, dict[str, _Checkpoint]] = field(default_factory=dict)
    # (namespace, checkpoint id) -> (task id, idx) -> write
    writes: dict[tuple[str, str], dict[tuple[str, int], _Write]] = field(default_factory=dict)
    # (namespace, channel, version) -> stored value
    blobs: dict[tuple[str, str, Version], _Ref] = field(default_factory=dict)
    # (namespace, channel) -> the last stored value of at least DELTA_MIN_BYTES (delta base)
    last_value: dict[tuple[str, str], _Ref] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not any(self.checkpoints.values()) and not self.writes and not self.blobs


# ---------------------------------------------------------------- deltas


def _common_prefix(a: bytes, ai: int, b: bytes, bi: int) -> int:
    """Length of the common prefix of ``a[ai:]`` and ``b[bi:]``."""
    n = min(len(a) - ai, len(b) - bi)
    done = 0
    step = 256
    while done < n:
        m = min(step, n - done)
        if a[ai + done : ai + done + m] == b[bi + done : bi + done + m]:
            done += m
            step = min(step * 2, 1 << 20)
            continue
        lo, hi = 0, m - 1  # a prefix of length lo matches; length hi + 1 does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if a[ai + done : ai + done + mid] == b[bi + done : bi + done + mid]:
                lo = mid
            else:
                hi = mid - 1
        return done + lo
    return n


def _common_suffix(a: bytes, a_start: int, b: bytes, b_start: int) -> int:
    """Length of the common suffix of ``a[a_start:]`` and ``b[b_start:]``."""
    n = min(len(a) - a_start, len(b) - b_start)
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _delta_ops(old: bytes, new: bytes) -> list[bytes | tuple[int, int]]:
    """Copy ranges of ``old`` and literal bytes that make ``new``.

    Greedy and cheap: the common prefix; after each difference a probe of
    ``old`` looked for just ahead in ``new`` (what an append to a list or a
    changed field leaves), else probes of ``new`` looked for anywhere in
    ``old`` (``bytes.find``, at most ``DELTA_FINDS_MAX`` of them); at the end
    the common suffix. What it cannot match is literal.
    """
    ops: list[bytes | tuple[int, int]] = []
    i = j = _common_prefix(old, 0, new, 0)
    if i:
        ops.append((0, i))
    finds = DELTA_FINDS_MAX
    while i < len(new) and len(ops) < DELTA_OPS_MAX:
        found: tuple[int, int] | None = None
        for skip in range(_RESYNC_SKIP_BYTES):
            jj = j + skip
            if jj + _PROBE_BYTES > len(old):
                break
            k = new.find(old[jj : jj + _PROBE_BYTES], i, i + _RESYNC_WINDOW_BYTES + _PROBE_BYTES)
            if k >= 0:
                found = (k, jj)
                break
        if found is None:
            for k in range(i, len(new) - _PROBE_BYTES + 1, _GLOBAL_STEP_BYTES):
                if finds == 0:
                    break
                finds -= 1
                jj = old.find(new[k : k + _PROBE_BYTES])
                if jj >= 0:
                    while k > i and jj > 0 and new[k - 1] == old[jj - 1]:
                        k, jj = k - 1, jj - 1
                    found = (k, jj)
                    break
        if found is None:
            break
        k, jj = found
        m = _PROBE_BYTES + _common_prefix(old, jj + _PROBE_BYTES, new, k + _PROBE_BYTES)
        if k > i:
            ops.append(new[i:k])
        ops.append((jj, m))
        i, j = k + m, jj + m
    if i < len(new):
        s = _common_suffix(old, j, new, i)
        if s >= _PROBE_BYTES:
            if len(new) - s > i:
                ops.append(new[i : len(new) - s])
            ops.append((len(old) - s, s))
        else:
            ops.append(new[i:])
    return ops


def _whole(type_: str, data: bytes) -> dict[str, Any]:
    return {"y": type_, "d": data}


def _node_size(node: dict[str, Any]) -> int:
    """The size of a stored value's bytes (whole, or once its delta is applied)."""
    data = node.get("d")
    return len(data) if isinstance(data, bytes) else int(node.get("z", 0))


def _record_size(record: dict[str, Any]) -> int:
    """About how many bytes a payload takes (for the cache's budget)."""
    size = 64
    for value in record.values():
        if isinstance(value, bytes):
            size += len(value)
        elif isinstance(value, list):
            size += sum(_record_size(v) if isinstance(v, dict) else len(v) if isinstance(v, bytes) else 16 for v in value)
    return size


def _delta_size(ops: list[bytes | tuple[int, int]]) -> int:
    return sum(len(op) + 2 if isinstance(op, bytes) else 10 for op in ops)


def _apply_delta(base: bytes, ops: Sequence[Any]) -> bytes:
    out = bytearray()
    for op in ops:
        if isinstance(op, bytes):
            out += op
        else:
            off, n = op
            out += base[off : off + n]
    return bytes(out)


# ---------------------------------------------------------------- the saver


class ConvlogSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a convlog store.

    ``ConvlogSaver(store)`` uses an open ``convlog.Store`` (the caller closes
    it); ``ConvlogSaver.open(path)`` opens one that ``close()`` (or leaving
    the ``with`` block) closes. Opening reads the store's ``langgraph.*``
    events once to build the index (see the module docstring).

    One process writes a store at a time (convlog's lock). A saver on a
    read-only store reads; it sees what the writer appended after
    ``store.refresh()``.
    """

    store: convlog.Store

    def __init__(
        self,
        store: convlog.Store,
        *,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self._owns_store = False
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._next_lsn = 0
        self._values: _Lru[tuple[int, int], tuple[str, bytes]] = _Lru(VALUE_CACHE_BYTES)
        self._payloads: _Lru[int, dict[str, Any]] = _Lru(PAYLOAD_CACHE_BYTES)
        with self._lock:
            self._catch_up()

    @classmethod
    def open(
        cls,
        path: str | PathLike[str],
        *,
        durability: Durability = "group",
        serde: SerializerProtocol | None = None,
    ) -> Self:
        """Open (or create) the store at ``path`` and a saver on it; ``close()`` closes both."""
        store = convlog.Store.open(str(path), durability=durability)
        try:
            saver = cls(store, serde=serde)
        except BaseException:
            store.close()
            raise
        saver._owns_store = True
        return saver

    def close(self) -> None:
        """Close the store if this saver opened it (``ConvlogSaver.open``)."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------ index

    def _rebuild_index(self) -> None:
        """Forget the index and the caches and build them again from the log (as open does)."""
        with self._lock:
            self._threads = {}
            self._next_lsn = 0
            self._values = _Lru(VALUE_CACHE_BYTES)
            self._payloads = _Lru(PAYLOAD_CACHE_BYTES)
            self._catch_up()

    def _thread_of(self, conversation_id: str | None, payload: dict[str, Any]) -> str | None:
        t = payload.get("t")
        if isinstance(t, str):
            return t
        if conversation_id is not None and conversation_id.startswith(CONVERSATION_PREFIX):
            return conversation_id[len(CONVERSATION_PREFIX) :]
        return None

    def _catch_up(self) -> None:
        """Apply the ``langgraph.*`` events appended since the index was last brought up to date."""
        end = self.store.next_lsn
        if end <= self._next_lsn:
            return
        for lsn, event in self.store.events(self._next_lsn, kinds=KINDS):
            raw = event["payload"]
            kind = str(event["kind"])
            try:
                payload = ormsgpack.unpackb(raw)
                if not isinstance(payload, dict):
                    raise TypeError(f"the payload is a msgpack {type(payload).__name__}, not a map")
                thread_id = self._thread_of(event.get("conversation_id"), payload)
                if thread_id is None:
                    raise ValueError(
                        f"conversation {event.get('conversation_id')!r} is not a thread's "
                        f"({CONVERSATION_PREFIX}<thread_id>) and the payload names no thread (t)"
                    )
                self._apply(lsn, kind, thread_id, payload)
            except (ormsgpack.MsgpackDecodeError, KeyError, IndexError, TypeError, ValueError) as error:
                raise UnreadableEventError(lsn, kind, error) from error
            # Kept (bounded): reading one event by LSN later costs far more.
            self._payloads.put(lsn, payload, len(raw))
            self._next_lsn = lsn + 1
        self._next_lsn = max(end, self._next_lsn)

    def _apply(self, lsn: int, kind: str, thread_id: str, p: dict[str, Any]) -> None:
        if kind == KIND_CHECKPOINT:
            t = self._threads.setdefault(thread_id, _Thread())
            metadata = self.serde.loads_typed((p["m"][0], p["m"][1]))
            t.checkpoints.setdefault(p["n"], {})[p["i"]] = _Checkpoint(
                lsn=lsn, parent=p["p"], metadata=metadata if isinstance(metadata, dict) else {}
            )
            for pos, node in enumerate(p["s"]):
                ref = _Ref(lsn=lsn, pos=pos, depth=int(node.get("k", 0)))
                t.blobs.setdefault((p["n"], node["c"], node["v"]), ref)
                if _node_size(node) >= DELTA_MIN_BYTES:
                    t.last_value[(p["n"], node["c"])] = ref
        elif kind == KIND_WRITES:
            t = self._threads.setdefault(thread_id, _Thread())
            stored = t.writes.setdefault((p["n"], p["i"]), {})
            for pos, row in enumerate(p["w"]):
                ref = _Ref(lsn=lsn, pos=pos, depth=int(row.get("k", 0)))
                wkey = (cast(str, p["k"]), int(row["x"]))
                write = _Write(ref=ref, channel=row["c"], task_path=p["p"])
                if wkey[1] < 0:
                    stored[wkey] = write
                else:
                    stored.setdefault(wkey, write)
                if _node_size(row) >= DELTA_MIN_BYTES:
                    t.last_value[(p["n"], row["c"])] = ref
        elif kind == KIND_DELETE:
            t_opt = self._threads.get(thread_id)
            if t_opt is None:
                return
            if p.get("a"):
                del self._threads[thread_id]
                return
            for ns, cid in p.get("d", []):
                t_opt.checkpoints.get(ns, {}).pop(cid, None)
                t_opt.writes.pop((ns, cid), None)
        elif kind == KIND_COPY:
            source = self._threads.get(p["s"])
            if source is None:
                return
            t = self._threads.setdefault(thread_id, _Thread())
            for ns, cps in source.checkpoints.items():
                target_cps = t.checkpoints.setdefault(ns, {})
                for cid, cp in cps.items():
                    target_cps.setdefault(cid, _Checkpoint(cp.lsn, cp.parent, dict(cp.metadata)))
            for cp_key, writes in source.writes.items():
                target_writes = t.writes.setdefault(cp_key, {})
                for wkey, w in writes.items():
                    target_writes.setdefault(wkey, w)
            for bkey, blob in source.blobs.items():
                t.blobs.setdefault(bkey, blob)
            for lkey, ref in source.last_value.items():
                t.last_value.setdefault(lkey, ref)

    def _append(self, thread_id: str, records: list[tuple[str, dict[str, Any]]]) -> range:
        """Append one atomic batch for a thread and apply it to the index."""
        cid = conversation_id_for_thread(thread_id)
        if not cid.startswith(CONVERSATION_PREFIX):
            for _, payload in records:
                payload["t"] = thread_id
        events = [
            {
                "type": "custom",
                "kind": kind,
                "conversation_id": cid,
                "payload": ormsgpack.packb(payload),
            }
            for kind, payload in records
        ]
        lsns = self.store.append(events)
        if lsns.start != self._next_lsn:
            # Someone else appended since the last catch-up: read it all, ours included.
            self._catch_up()
        else:
            for lsn, (kind, payload) in zip(lsns, records):
                self._apply(lsn, kind, thread_id, payload)
            self._next_lsn = lsns.stop
        return lsns

    # ------------------------------------------------------------ reading

    def _payload(self, lsn: int) -> dict[str, Any]:
        hit = self._payloads.get(lsn)
        if hit is not None:
            return hit
        raw = self.store.event(lsn)["payload"]
        payload = cast(dict[str, Any], ormsgpack.unpackb(raw))
        self._payloads.put(lsn, payload, len(raw))
        return payload

    def _node(self, ref: _Ref) -> dict[str, Any]:
        """The stored value node: a blob payload, or a row of a writes payload."""
        payload = self._payload(ref.lsn)
        return cast(dict[str, Any], payload["w" if "w" in payload else "s"][ref.pos])

    def _value(self, ref: _Ref) -> tuple[str, bytes]:
        """The serde type and bytes of a stored value, deltas applied."""
        key = (ref.lsn, ref.pos)
        hit = self._values.get(key)
        if hit is not None:
            return hit
        node = self._node(ref)
        type_ = cast(str, node["y"])
        if "d" in node:
            data = cast(bytes, node["d"])
        else:
            base = _Ref(lsn=int(node["b"]), pos=int(node["q"]), depth=int(node["k"]) - 1)
            data = _apply_delta(self._value(base)[1], node["o"])
        self._values.put(key, (type_, data), len(data))
        return type_, data

    def _load_values(self, t: _Thread, ns: str, versions: ChannelVersions) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for channel, version in versions.items():
            ref = t.blobs.get((ns, channel, version))
            if ref is None:
                continue
            values[channel] = self.serde.loads_typed(self._value(ref))
        return values

    def _tuple(self, thread_id: str, ns: str, cid: str, t: _Thread, cp: _Checkpoint) -> CheckpointTuple:
        p = self._payload(cp.lsn)
        checkpoint = cast(Checkpoint, self.serde.loads_typed((p["c"][0], p["c"][1])))
        checkpoint["channel_values"] = self._load_values(t, ns, checkpoint["channel_versions"])
        metadata = cast(CheckpointMetadata, self.serde.loads_typed((p["m"][0], p["m"][1])))
        stored = t.writes.get((ns, cid), {})
        pending: list[PendingWrite] = []
        for (task_id, idx), w in sorted(
            stored.items(), key=lambda kv: writes_sort_key(kv[1].task_path, kv[0][0], kv[0][1])
        ):
            pending.append((task_id, w.channel, self.serde.loads_typed(self._value(w.ref))))
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cp.parent}}
                if cp.parent
                else None
            ),
            pending_writes=pending,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or the thread's latest."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", "") or "")
        with self._lock:
            self._catch_up()
            t = self._threads.get(thread_id)
            if t is None:
                return None
            cps = t.checkpoints.get(ns)
            if not cps:
                return None
            cid = get_checkpoint_id(config)
            if cid is None:
                cid = max(cps)
            cp = cps.get(cid)
            if cp is None:
                return None
            return self._tuple(thread_id, ns, cid, t, cp)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id), as ``SqliteSaver`` lists them.

        ``config`` narrows to a thread, a namespace and a checkpoint id when it
        names them; ``filter`` keeps checkpoints whose metadata has each key
        equal to the given value; ``before`` keeps ids below its
        ``checkpoint_id``; ``limit`` caps the count.
        """
        configurable: dict[str, Any] = dict(config["configurable"]) if config else {}
        want_thread = configurable.get("thread_id")
        want_ns = configurable.get("checkpoint_ns")
        want_id = configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        with self._lock:
            self._catch_up()
            if want_thread is not None:
                threads = [str(want_thread)] if str(want_thread) in self._threads else []
            else:
                threads = list(self._threads)
            found: list[tuple[str, str, str]] = []
            for thread_id in threads:
                t = self._threads[thread_id]
                for ns, cps in t.checkpoints.items():
                    if want_ns is not None and ns != want_ns:
                        continue
                    for cid, cp in cps.items():
                        if want_id and cid != want_id:
                            continue
                        if before_id is not None and cid >= before_id:
                            continue
                        if filter and not all(cp.metadata.get(k) == v for k, v in filter.items()):
                            continue
                        found.append((cid, thread_id, ns))
            found.sort(reverse=True)
            if limit is not None:
                found = found[: max(limit, 0)]
            result = [
                self._tuple(thread_id, ns, cid, self._threads[thread_id], self._threads[thread_id].checkpoints[ns][cid])
                for cid, thread_id, ns in found
            ]
        yield from result

    # ------------------------------------------------------------ writing

    def _value_node(self, t: _Thread, ns: str, channel: str, type_: str, data: bytes) -> dict[str, Any]:
        """How to store a value: whole, or as a delta against the channel's last stored value."""
        base = t.last_value.get((ns, channel))
        if base is not None and base.depth < DELTA_CHAIN_MAX and len(data) >= DELTA_MIN_BYTES:
            ops = _delta_ops(self._value(base)[1], data)
            if _delta_size(ops) * 2 <= len(data):
                return {"y": type_, "b": base.lsn, "q": base.pos, "k": base.depth + 1, "o": ops, "z": len(data)}
        return _whole(type_, data)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record a checkpoint and the channel values of ``new_versions`` in one atomic batch."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", "") or "")
        c: dict[str, Any] = dict(checkpoint)
        values = cast(dict[str, Any], c.pop("channel_values"))
        nodes: list[dict[str, Any]] = []
        fresh: list[tuple[str, bytes]] = []  # (type, bytes) of the values stored, as nodes
        with self._lock:
            self._catch_up()
            t = self._threads.get(thread_id) or _Thread()
            for channel, version in new_versions.items():
                if channel not in values:
                    continue  # an empty channel: nothing to store, reads skip it
                if (ns, channel, version) in t.blobs:
                    continue  # stored once per version
                type_, data = self.serde.dumps_typed(values[channel])
                node = self._value_node(t, ns, channel, type_, data)
                node.update(c=channel, v=version)
                nodes.append(node)
                fresh.append((type_, data))
            record: dict[str, Any] = {
                "n": ns,
                "i": checkpoint["id"],
                "p": configurable.get("checkpoint_id"),
                "c": list(self.serde.dumps_typed(c)),
                "m": list(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
                "s": nodes,
            }
            lsn = self._append(thread_id, [(KIND_CHECKPOINT, record)]).start
            for pos, value in enumerate(fresh):
                self._values.put((lsn, pos), value, len(value[1]))
            self._payloads.put(lsn, record, _record_size(record))
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record a task's writes for a checkpoint.

        As in ``SqliteSaver``: a regular write whose (task, index) is already
        stored is kept as it was; special writes (errors, interrupts, ...)
        replace theirs.
        """
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", "") or "")
        cid = str(configurable["checkpoint_id"])
        with self._lock:
            self._catch_up()
            t = self._threads.get(thread_id)
            stored = t.writes.get((ns, cid), {}) if t is not None else {}
            replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
            rows: list[dict[str, Any]] = []
            fresh: list[tuple[int, str, bytes]] = []
            for idx, (channel, value) in enumerate(writes):
                widx = WRITES_IDX_MAP.get(channel, idx)
                if not replace and (task_id, widx) in stored:
                    continue
                type_, data = self.serde.dumps_typed(value)
                row = self._value_node(t, ns, channel, type_, data) if t is not None else _whole(type_, data)
                row.update(x=widx, c=channel)
                fresh.append((len(rows), type_, data))
                rows.append(row)
            if not rows:
                return
            record: dict[str, Any] = {"n": ns, "i": cid, "k": task_id, "p": task_path, "w": rows}
            lsns = self._append(thread_id, [(KIND_WRITES, record)])
            for pos, type_, data in fresh:
                self._values.put((lsns[0], pos), (type_, data), len(data))
            self._payloads.put(lsns[0], record, _record_size(record))

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints and writes (recorded; the log keeps them)."""
        thread_id = str(thread_id)
        with self._lock:
            self._catch_up()
            if thread_id not in self._threads:
                return
            self._append(thread_id, [(KIND_DELETE, {"a": True, "r": "delete_thread"})])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their writes."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        with self._lock:
            self._catch_up()
            for thread_id, t in list(self._threads.items()):
                doomed = [
                    [ns, cid]
                    for ns, cps in t.checkpoints.items()
                    for cid, cp in cps.items()
                    if cp.metadata.get("run_id") in wanted
                ]
                if doomed:
                    self._append(
                        thread_id,
                        [(KIND_DELETE, {"d": doomed, "r": "delete_for_runs", "u": sorted(wanted)})],
                    )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Give the target thread every checkpoint and write of the source thread.

        Recorded as one ``langgraph.copy`` event on the target's conversation;
        the copies share the source's stored values (no value is written twice).
        """
        source, target = str(source_thread_id), str(target_thread_id)
        with self._lock:
            self._catch_up()
            t = self._threads.get(source)
            if t is None or t.is_empty() or source == target:
                return
            self._append(target, [(KIND_COPY, {"s": source})])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep each namespace's latest checkpoint; ``"delete"``: delete the threads."""
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"prune: unknown strategy {strategy!r}; expected one of {PRUNE_STRATEGIES}")
        with self._lock:
            self._catch_up()
            for raw in thread_ids:
                thread_id = str(raw)
                t = self._threads.get(thread_id)
                if t is None:
                    continue
                if strategy == "delete":
                    self._append(thread_id, [(KIND_DELETE, {"a": True, "r": "prune:delete"})])
                    continue
                doomed: list[list[str]] = []
                for ns, cps in t.checkpoints.items():
                    if not cps:
                        continue
                    keep = max(cps)
                    doomed.extend([ns, cid] for cid in cps if cid != keep)
                if doomed:
                    self._append(thread_id, [(KIND_DELETE, {"d": doomed, "r": "prune:keep_latest"})])

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a counter and a random tiebreak, as ``SqliteSaver``'s."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # ------------------------------------------------------------ async

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
