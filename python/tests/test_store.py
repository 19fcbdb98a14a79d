"""The Store API: open/close, append (with conditions), reads, events, errors."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import convlog
from conftest import entry_event, user


def test_append_returns_the_lsns_and_the_conversation_folds(store: convlog.Store) -> None:
    lsns = store.append([user("trip", "Weather in Paris?"), user("trip", "And Rome?")])
    assert lsns == range(1, 3)
    assert store.next_lsn == 3
    conversation = store.conversation("trip")
    assert conversation.conversation_id == "trip"
    assert [entry["content"] for entry in conversation.entries] == ["Weather in Paris?", "And Rome?"]
    assert [entry["sequence"] for entry in conversation.entries] == [0, 1]
    assert conversation.last_lsn == 2
    assert conversation.evaluations == ["eval-1"]
    assert len(conversation) == 2
    first = conversation.entries[0]
    assert first["role"] == "user" and first["metadata"] == {} and first["tool_calls"] == []
    assert first["created_at"].endswith("Z") and len(first["message_id"]) == 36


def test_sequences_continue_from_the_store(store: convlog.Store) -> None:
    store.append([user("c", "one")])
    store.append([user("c", "two"), user("c", "other", evaluation_id="eval-2")])
    entries = store.conversation("c").entries
    assert [(e["evaluation_id"], e["sequence"]) for e in entries] == [
        ("eval-1", 0),
        ("eval-1", 1),
        ("eval-2", 0),
    ]


def test_concurrent_appends_with_omitted_sequences_never_share_one(store: convlog.Store) -> None:
    threads = [
        threading.Thread(target=lambda: [store.append([user("c", "x")]) for _ in range(20)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sequences = [entry["sequence"] for entry in store.conversation("c").entries]
    assert sorted(sequences) == list(range(80))


def test_tool_calls_fold_with_their_status(store: convlog.Store) -> None:
    calls = [
        {"call_id": "call_1", "name": "weather", "arguments": '{"city":"paris"}'},
        {"call_id": "call_2", "name": "weather", "arguments": '{"city":"rome"}'},
    ]
    store.append([entry_event("trip", evaluation_id="e", role="assistant", turn=1, tool_calls=calls)])
    store.append(
        [
            {"type": "tool_status", "conversation_id": "trip", "evaluation_id": "e", "call_id": "call_1", "status": "running"},
            entry_event("trip", evaluation_id="e", role="tool", tool_call_id="call_1", tool_name="weather", content="18C"),
        ]
    )
    entries = store.conversation("trip").entries
    statuses = {call["call_id"]: call["status"] for call in entries[0]["tool_calls"]}
    assert statuses == {"call_1": "completed", "call_2": "pending"}
    assert entries[1]["tool_call_id"] == "call_1"


def test_reads_of_ids_and_contains(store: convlog.Store) -> None:
    assert store.conversation_ids() == []
    assert not store.contains_conversation("b")
    store.append([user("b", "x"), user("a", "y")])
    assert store.conversation_ids() == ["a", "b"]
    assert store.contains_conversation("b")


def test_unknown_conversation_is_conversation_not_found(store: convlog.Store) -> None:
    with pytest.raises(convlog.ConversationNotFoundError) as caught:
        store.conversation("missing")
    assert caught.value.conversation_id == "missing"
    assert caught.value.kind == "ConversationNotFound"
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, convlog.ConvlogError)
    assert str(caught.value) == 'conversation "missing" does not exist in the store'


def test_expect_conversation_appends_only_at_the_version_read(store: convlog.Store) -> None:
    # 0 is the version of a conversation with no event: "must not exist yet".
    store.append([user("c", "first")], expect_conversation=("c", 0))
    with pytest.raises(convlog.ConflictError) as caught:
        store.append([user("c", "again")], expect_conversation=("c", 0))
    assert (caught.value.conversation_id, caught.value.expected, caught.value.actual) == ("c", 0, 1)
    assert "nothing was appended" in str(caught.value)
    last = store.conversation("c").last_lsn
    store.append([user("c", "second")], expect_conversation=("c", last))
    assert [e["content"] for e in store.conversation("c").entries] == ["first", "second"]


def test_custom_payloads_go_in_as_bytes_or_base64_and_come_back_as_bytes(store: convlog.Store) -> None:
    store.append(
        [
            {"type": "custom", "kind": "tokens", "conversation_id": "c", "payload": b"\x00\x01\xff"},
            {"type": "custom", "kind": "cost", "payload": "AAEC"},
            user("c", "hi"),
        ]
    )
    events = list(store.events())
    assert [lsn for lsn, _ in events] == [1, 2, 3]
    assert events[0][1] == {"type": "custom", "kind": "tokens", "conversation_id": "c", "payload": b"\x00\x01\xff"}
    assert events[1][1]["payload"] == b"\x00\x01\x02"
    assert store.event(2)["kind"] == "cost"


def test_events_filters_by_conversation_kind_and_start(store: convlog.Store) -> None:
    store.append(
        [
            user("a", "1"),
            {"type": "custom", "kind": "tokens", "conversation_id": "a", "payload": b"1"},
            user("b", "2"),
            {"type": "custom", "kind": "cost", "conversation_id": "a", "payload": b"2"},
        ]
    )
    assert [lsn for lsn, _ in store.events(conversation_id="a")] == [1, 2, 4]
    assert [lsn for lsn, _ in store.events(kinds=["tokens", "cost"])] == [2, 4]
    assert [lsn for lsn, _ in store.events(conversation_id="a", kinds=["cost"])] == [4]
    assert [lsn for lsn, _ in store.events(3)] == [3, 4]
    assert list(store.events(5)) == []


def test_many_events_come_back_in_order(store: convlog.Store) -> None:
    # More than one native batch (EVENTS_BATCH = 256) of events.
    for start in range(0, 700, 100):
        store.append([user("c", str(n)) for n in range(start, start + 100)])
    lsns = [lsn for lsn, _ in store.events()]
    assert lsns == list(range(1, 701))


def test_event_at_an_lsn_the_log_does_not_hold(store: convlog.Store) -> None:
    store.append([user("c", "x")])
    for lsn in (0, 2, 99):
        with pytest.raises(convlog.EventNotFoundError) as caught:
            store.event(lsn)
        assert caught.value.lsn == lsn
        assert isinstance(caught.value, KeyError)


@pytest.mark.parametrize(
    ("events", "index", "field", "reason"),
    [
        ([user("c", "x"), entry_event("c", evaluation_id="e", role="robot")], 1, "entry.role", "unknown variant `robot`"),
        ([{"type": "conversation_recorded", "entry": {"evaluation_id": "e", "role": "user"}}], 0, "conversation_id", "missing"),
        ([{"type": "tool_status", "conversation_id": "c"}], 0, "evaluation_id", "missing"),
        ([{"type": "renamed"}], 0, "type", "unknown event type"),
        ([{"kind": "k"}], 0, "type", "missing"),
        ([user("c", "x", colour="red")], 0, "entry.colour", "unknown field `colour`"),
        ([user("c", "x"), "not an event"], 1, None, "expected an event (a dict), found str"),
        ([entry_event("c", evaluation_id="e", role="user", content=b"bytes")], 0, "entry.content", "bytes are accepted only as a custom event's payload"),
        ([user("c", "x", metadata={"k": object()})], 0, "entry.metadata.k", "expected a JSON value"),
        ([user("c", "x", sequence=-1)], 0, "entry.sequence", ""),
        ([{"type": "custom", "kind": "k", "payload": "not base64!"}], 0, "payload", "base64"),
        ([entry_event("c", evaluation_id="e", role="tool")], 0, "entry.tool_call_id", "a tool entry needs the call id"),
        ([user("c", "x", created_at="yesterday")], 0, "entry.created_at", "RFC 3339"),
        ([user("c" * 257, "x")], 0, "conversation_id", "ID_BYTES_MAX"),
    ],
)
def test_malformed_events_say_what_and_where_and_store_nothing(
    store: convlog.Store, events: list[Any], index: int, field: str | None, reason: str
) -> None:
    store.append([user("c", "before")])
    with pytest.raises(convlog.InvalidEventError) as caught:
        store.append(events)
    error = caught.value
    assert error.index == index
    assert error.field == field
    assert reason in error.reason
    assert isinstance(error, ValueError)
    where = f"events[{index}]" + (f".{field}" if field else "")
    assert str(error).startswith(where + ": "), str(error)
    assert "nothing of the batch was stored" in str(error)
    assert store.next_lsn == 2, "nothing of the batch was stored"
    assert [e["content"] for e in store.conversation("c").entries] == ["before"]


def test_a_batch_that_is_not_a_list_of_events(store: convlog.Store) -> None:
    with pytest.raises(convlog.InvalidEventError, match="wrap it in a list"):
        store.append(user("c", "x"))  # type: ignore[arg-type]
    with pytest.raises(convlog.InvalidEventError, match="empty array"):
        store.append([])
    with pytest.raises(convlog.InvalidEventError, match="found int"):
        store.append(3)  # type: ignore[arg-type]
    # Any iterable of dicts is a batch.
    assert store.append(user("c", str(n)) for n in range(3)) == range(1, 4)


def test_a_self_referencing_event_is_refused(store: convlog.Store) -> None:
    looped: dict[str, Any] = {}
    looped["again"] = looped
    with pytest.raises(convlog.InvalidEventError, match="NESTING_DEPTH_MAX"):
        store.append([user("c", "x", metadata=looped)])


def test_durability_and_options(store_path: Path) -> None:
    for durability in ("group", "sync", "none"):
        with convlog.Store.open(store_path, durability) as store:
            store.append([user("c", durability)])
            store.sync()
    with convlog.Store.open(store_path, "periodic", interval_ms=10) as store:
        store.append([user("c", "periodic")])
    with pytest.raises(ValueError, match="unknown durability"):
        convlog.Store.open(store_path, "fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval_ms applies only"):
        convlog.Store.open(store_path, "sync", interval_ms=5)
    with convlog.Store.open(store_path, snapshot_every_events=1000) as store:
        assert len(store.conversation("c")) == 4
        assert store.snapshot() == 5


def test_close_releases_the_lock_and_later_calls_fail(store_path: Path) -> None:
    store = convlog.Store.open(store_path)
    store.append([user("c", "x")])
    store.close()
    store.close()  # idempotent
    assert store.closed
    with pytest.raises(convlog.StoreClosedError, match="is closed"):
        store.conversation("c")
    with convlog.Store.open(store_path) as again:  # the lock was released
        assert again.path == str(store_path)
        assert len(again.conversation("c")) == 1
    assert again.closed


def test_a_second_writer_in_the_process_is_locked_out(store: convlog.Store, store_path: Path) -> None:
    with pytest.raises(convlog.LockedError) as caught:
        convlog.Store.open(store_path)
    assert caught.value.path == str(store_path)
    assert "read_only=True" in str(caught.value)
    assert "docs/python.md" in str(caught.value)


def test_read_only_follows_the_writer(store: convlog.Store, store_path: Path) -> None:
    store.append([user("c", "one")])
    with convlog.Store.open(store_path, read_only=True) as reader:
        assert reader.read_only
        assert [e["content"] for e in reader.conversation("c").entries] == ["one"]
        store.append([user("c", "two")])
        assert reader.refresh() == 3
        assert [e["content"] for e in reader.conversation("c").entries] == ["one", "two"]
        with pytest.raises(convlog.ReadOnlyError) as caught:
            reader.append([user("c", "three")])
        assert caught.value.operation == "append"


def test_read_only_open_of_a_directory_without_a_store(tmp_path: Path) -> None:
    with pytest.raises(convlog.NotAStoreError) as caught:
        convlog.Store.open(tmp_path, read_only=True)
    assert caught.value.path == str(tmp_path)


def test_tail_from_an_lsn_stops_after_its_idle_timeout(store: convlog.Store) -> None:
    store.append([user("c", "1"), user("d", "2"), user("c", "3")])
    tail = store.tail(1, conversation_id="c", idle_timeout=0.1)
    assert [lsn for lsn, _ in tail] == [1, 3]
    assert tail.next_lsn == 4


def test_tail_sees_appends_from_another_thread(store: convlog.Store) -> None:
    store.append([user("c", "before")])
    tail = store.tail()  # from the end: only what comes next
    writer = threading.Thread(target=lambda: store.append([user("c", "after")]))
    writer.start()
    lsn, event = next(tail)  # waits for the writer, GIL released
    writer.join()
    assert lsn == 2 and event["entry"]["content"] == "after"


def test_async_store_twins(store_path: Path) -> None:
    async def main() -> None:
        async with await convlog.AsyncStore.open(store_path) as store:
            assert await store.append([user("c", "hi")]) == range(1, 2)
            assert (await store.conversation("c")).entries[0]["content"] == "hi"
            assert await store.conversation_ids() == ["c"]
            assert await store.contains_conversation("c")
            assert [lsn async for lsn, _ in store.events()] == [1]
            await store.append([user("c", str(n)) for n in range(600)])
            assert [lsn async for lsn, _ in store.events(2)] == list(range(2, 602))
            assert [lsn async for lsn, _ in store.events(2, kinds=["none"])] == []
            assert (await store.event(1))["type"] == "conversation_recorded"
            await store.sync()
            assert await store.refresh() == 602
            tail = await store.tail()  # started: from the end of the log
            waiting = asyncio.ensure_future(_first(tail))
            await store.append([user("c", "later")])
            assert (await waiting)[0] == 602
            assert [lsn async for lsn, _ in await store.tail(600, idle_timeout=0.05)] == [600, 601, 602]
        assert store.closed

    asyncio.run(main())


async def _first(tail: convlog.AsyncTail) -> tuple[int, Any]:
    async for item in tail:
        return item
    raise AssertionError("the tail ended")


def test_omitted_sequences_follow_every_other_writer_of_the_store(store: convlog.Store) -> None:
    # Sequences the store fills are cached per conversation; every other
    # path that writes entries must be seen by the next omitted sequence.
    store.append([user("c", "0")])  # fills the cache
    store.append([user("c", "explicit", sequence=7)])
    store.append([user("c", "after explicit")])
    control = store.message_control()
    control.create_context("alice", "c")
    control.add_entries("alice", "c", [{"evaluation_id": "eval-1", "role": "user", "sequence": 20, "content": "control"}])
    store.append([user("c", "after control")])
    store.append([{"type": "messages_replaced", "conversation_id": "c",
                   "entries": [{"evaluation_id": "eval-1", "role": "system", "content": "summary"}]}])
    store.append([user("c", "after replace")])
    sequences = [(e["content"], e["sequence"]) for e in store.conversation("c").entries]
    assert sequences == [("summary", 0), ("after replace", 1)]
    recorded = [(event["entry"]["content"], event["entry"]["sequence"])
                for _, event in store.events(conversation_id="c") if event["type"] == "conversation_recorded"]
    assert recorded == [("0", 0), ("explicit", 7), ("after explicit", 8), ("control", 20),
                        ("after control", 21), ("after replace", 1)]


def test_folded_entries_have_exactly_the_json_form_of_the_recorded_ones(store: convlog.Store) -> None:
    entry: dict[str, Any] = {
        "message_id": "0b6f3c1e-6a39-4d4e-9a57-2f1d8f0c9a11", "evaluation_id": "eval-7", "sequence": 1,
        "turn": 1, "role": "assistant", "content": "Let me look that up.",
        "reasoning": {"text": "need two lookups", "signature": "EqQBCkYIBx", "redacted": False},
        "tool_calls": [
            {"call_id": "call_1", "name": "search", "arguments": '{"q":"paris"}', "status": "running",
             "started_at": "2026-11-22T12:00:00.5Z", "ended_at": None, "error": None},
            {"call_id": "call_2", "name": "search", "arguments": "not json", "status": "failed",
             "started_at": None, "ended_at": "2026-11-22T12:00:01Z", "error": "boom"},
        ],
        "tool_call_id": None, "tool_name": None, "is_error": False, "finish_reason": "tool_calls",
        "prompt_ns": "travel", "prompt_key": "planner", "created_at": "2026-11-22T12:00:00.123456Z",
        "metadata": {"convlog.x": "1", "a": "é"},
    }
    event = {"type": "conversation_recorded", "conversation_id": "ctx", "session_id": "s-1",
             "created_at": "2026-11-22T12:00:00.123456Z", "entry": entry}
    store.append([event])
    folded = store.conversation("ctx").entries[0]
    recorded = store.event(1)["entry"]
    assert folded == recorded
    # Every field given comes back as given (times in their six-digit form).
    expected = {**entry, "tool_calls": [
        {**entry["tool_calls"][0], "started_at": "2026-11-22T12:00:00.500000Z"},
        {**entry["tool_calls"][1], "ended_at": "2026-11-22T12:00:01.000000Z"},
    ]}
    assert store.event(1) == {**event, "entry": expected}
    # Every other event type reads back as written, with its defaults.
    others: list[dict[str, Any]] = [
        {"type": "tool_status", "conversation_id": "ctx", "evaluation_id": "eval-7", "call_id": "call_1",
         "status": "completed", "at": "2026-11-22T12:00:02.000000Z", "error": None, "resumed": True},
        {"type": "history_curated", "conversation_id": "ctx", "strategy": "sliding_window(5)",
         "original_count": 9, "curated_count": 5, "at": "2026-11-22T12:00:03.000000Z",
         "prompt_name": None, "session_id": "s-1"},
        {"type": "custom", "kind": "tokens", "conversation_id": None, "payload": b"\x00\xff"},
        {"type": "messages_replaced", "conversation_id": "ctx", "at": "2026-11-22T12:00:04.000000Z",
         "entries": [{**entry, "tool_calls": []}]},
    ]
    store.append(others)
    assert [event for _, event in store.events(2)] == others
    assert folded["tool_calls"][0]["started_at"] == "2026-11-22T12:00:00.500000Z"
    assert folded["created_at"] == "2026-11-22T12:00:00.123456Z"
    assert folded["reasoning"] == {"text": "need two lookups", "signature": "EqQBCkYIBx", "redacted": False}
