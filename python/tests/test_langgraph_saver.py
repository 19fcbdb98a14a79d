"""ConvlogSaver beyond the conformance suite: what it stores, deltas, deletions kept in the log,
thread ids, reopening, followers, concurrency, and its size against SqliteSaver."""

from __future__ import annotations

import asyncio
import operator
import random
import sqlite3
from pathlib import Path
from typing import Annotated, Any

import ormsgpack
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointMetadata, empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict
from langgraph_support.graph import ToolHooks, build_graph, normalised, user_message

import convlog
from convlog.integrations import langgraph as lg
from convlog.integrations.langgraph import (
    DELTA_CHAIN_MAX,
    KIND_CHECKPOINT,
    KIND_DELETE,
    KINDS,
    ConvlogSaver,
    conversation_id_for_thread,
)


def _config(thread: str, checkpoint_id: str | None = None, ns: str = "") -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Checkpoint:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def _meta(step: int, **extra: Any) -> CheckpointMetadata:
    md: dict[str, Any] = {"source": "loop", "step": step, "parents": {}, **extra}
    return md  # type: ignore[return-value]


def _payloads(store: convlog.Store, kind: str) -> list[dict[str, Any]]:
    return [ormsgpack.unpackb(e["payload"]) for _, e in store.events(0, kinds=[kind])]


def _log_bytes(store: convlog.Store) -> int:
    return sum(len(e["payload"]) for _, e in store.events(0, kinds=KINDS))


# ------------------------------------------------------------------ storage


def test_unchanged_channel_values_are_not_stored_again(tmp_path: Path) -> None:
    with ConvlogSaver.open(tmp_path) as saver:
        big = "x" * 10_000
        c1 = saver.put(_config("t"), _checkpoint({"big": big, "n": 1}, {"big": 1, "n": 1}), _meta(0), {"big": 1, "n": 1})
        # Only "n" changed: "big" keeps version 1 and is not in new_versions.
        c2 = saver.put(c1, _checkpoint({"big": big, "n": 2}, {"big": 1, "n": 2}), _meta(1), {"n": 2})
        # A repeated (channel, version) is not stored again either.
        saver.put(c2, _checkpoint({"big": big, "n": 2}, {"big": 1, "n": 2}), _meta(2), {"big": 1, "n": 2})
        stored = [[node["c"] for node in p["s"]] for p in _payloads(saver.store, KIND_CHECKPOINT)]
        assert stored == [["big", "n"], ["n"], []]
        tup = saver.get_tuple(c2)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"big": big, "n": 2}
        assert _log_bytes(saver.store) < 12_000


def test_growing_list_is_stored_as_deltas_and_reads_back_exactly(tmp_path: Path) -> None:
    steps = DELTA_CHAIN_MAX * 2 + 5  # past two chain limits
    rng = random.Random(7)
    messages: list[dict[str, Any]] = []
    expected: dict[str, list[dict[str, Any]]] = {}
    whole_bytes = 0
    with ConvlogSaver.open(tmp_path) as saver:
        config = _config("t")
        for step in range(steps):
            messages = messages + [{"role": "user", "text": "".join(rng.choice("abcdef ") for _ in range(300))}]
            if step % 9 == 4:
                messages[0] = {"role": "system", "text": f"edited at {step}"}  # a change in the middle
            cp = _checkpoint({"messages": messages}, {"messages": step + 1})
            config = saver.put(config, cp, _meta(step), {"messages": step + 1})
            expected[cp["id"]] = list(messages)
            whole_bytes += len(saver.serde.dumps_typed(messages)[1])
        nodes = [p["s"][0] for p in _payloads(saver.store, KIND_CHECKPOINT)]
        assert sum(1 for n in nodes if "o" in n) >= steps - 4 - steps // DELTA_CHAIN_MAX
        assert max(int(n.get("k", 0)) for n in nodes) == DELTA_CHAIN_MAX
        assert _log_bytes(saver.store) * 8 < whole_bytes
    # A new process rebuilds every version from the log.
    with ConvlogSaver.open(tmp_path) as reopened:
        listed = list(reopened.list(_config("t")))
        assert len(listed) == steps
        for tup in listed:
            assert tup.checkpoint["channel_values"]["messages"] == expected[tup.checkpoint["id"]]


@pytest.mark.parametrize("seed", range(40))
def test_delta_ops_rebuild_the_new_bytes(seed: int) -> None:
    rng = random.Random(seed)
    old = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 31, 500, 5000])))
    new = bytearray(old)
    for _ in range(rng.randrange(6)):
        at = rng.randrange(len(new) + 1)
        what = rng.randrange(3)
        chunk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        if what == 0:
            new[at:at] = chunk
        elif what == 1:
            del new[at : at + len(chunk)]
        else:
            new[at : at + len(chunk)] = chunk
    if seed % 5 == 0:
        new = bytearray(rng.randrange(256) for _ in range(700))  # nothing in common
    ops = lg._delta_ops(old, bytes(new))
    assert lg._apply_delta(old, ops) == bytes(new)


def test_smaller_than_sqlite_saver_on_a_real_graph(tmp_path: Path) -> None:
    """The same 20 turns (100 checkpoints) of the test graph in both savers."""
    turns = 20
    conn = sqlite3.connect(tmp_path / "sqlite.db", check_same_thread=False)
    sqlite_saver = SqliteSaver(conn)
    with ConvlogSaver.open(tmp_path / "convlog") as saver:
        for cp_saver in (saver, sqlite_saver):
            graph = build_graph(cp_saver, ToolHooks())
            config: RunnableConfig = {"configurable": {"thread_id": "t"}}
            for turn in range(1, turns + 1):
                graph.invoke({"messages": [user_message(turn, ["paris", "rome", "oslo"])]}, config)
        final = saver.get_tuple(_config("t"))
        final_sqlite = sqlite_saver.get_tuple(_config("t"))
        assert final is not None and final_sqlite is not None
        # Tool results get random ids: compare the rest.
        assert normalised(final.checkpoint["channel_values"]["messages"]) == normalised(
            final_sqlite.checkpoint["channel_values"]["messages"]
        )
        assert len(final.checkpoint["channel_values"]["messages"]) == turns * 6
        assert len(list(saver.list(_config("t")))) == len(list(sqlite_saver.list(_config("t"))))
    conn.close()
    convlog_bytes = sum(p.stat().st_size for p in (tmp_path / "convlog").rglob("*") if p.is_file())
    sqlite_bytes = sum(p.stat().st_size for p in tmp_path.glob("sqlite.db*"))
    # At 20 turns the gap is already wide; it grows with the thread (docs/performance.md).
    assert convlog_bytes * 4 < sqlite_bytes, (convlog_bytes, sqlite_bytes)


# ------------------------------------------------------------------ deletions and the log


def test_deletions_are_recorded_and_the_log_keeps_what_was_deleted(tmp_path: Path) -> None:
    with ConvlogSaver.open(tmp_path) as saver:
        c1 = saver.put(_config("a"), _checkpoint({"k": "v1"}, {"k": 1}), _meta(0, run_id="r1"), {"k": 1})
        c2 = saver.put(c1, _checkpoint({"k": "v2"}, {"k": 2}), _meta(1, run_id="r2"), {"k": 2})
        saver.put_writes(c2, [("k", "w")], "task-1")
        saver.put(_config("b"), _checkpoint({}, {}), _meta(0, run_id="r1"), {})
        saver.delete_for_runs(["r1"])
        assert saver.get_tuple(c1) is None
        assert saver.get_tuple(_config("b")) is None
        saver.prune(["a"])  # c2 is the latest: nothing to prune
        saver.delete_thread("a")
        assert saver.get_tuple(c2) is None
        deletes = [(e["conversation_id"], ormsgpack.unpackb(e["payload"])) for _, e in saver.store.events(0, kinds=[KIND_DELETE])]
        assert deletes == [
            (conversation_id_for_thread("a"), {"d": [["", c1["configurable"]["checkpoint_id"]]], "r": "delete_for_runs", "u": ["r1"]}),
            (conversation_id_for_thread("b"), {"d": [["", _only_id(saver, "b")]], "r": "delete_for_runs", "u": ["r1"]}),
            (conversation_id_for_thread("a"), {"a": True, "r": "delete_thread"}),
        ]
        # Everything put is still in the log.
        assert len(_payloads(saver.store, KIND_CHECKPOINT)) == 3
    with ConvlogSaver.open(tmp_path) as reopened:
        assert list(reopened.list(None)) == []
        # A deleted thread can be used again.
        c = reopened.put(_config("a"), _checkpoint({"k": "new"}, {"k": 1}), _meta(0), {"k": 1})
        tup = reopened.get_tuple(c)
        assert tup is not None and tup.checkpoint["channel_values"] == {"k": "new"}


def _only_id(saver: ConvlogSaver, thread: str) -> str:
    ids = [p["i"] for _, e in saver.store.events(0, kinds=[KIND_CHECKPOINT]) if e["conversation_id"] == conversation_id_for_thread(thread) for p in [ormsgpack.unpackb(e["payload"])]]
    assert len(ids) == 1
    return str(ids[0])


def test_prune_rejects_an_unknown_strategy(tmp_path: Path) -> None:
    with ConvlogSaver.open(tmp_path) as saver:
        with pytest.raises(ValueError, match="unknown strategy 'oldest'"):
            saver.prune(["t"], strategy="oldest")


def test_copy_thread_shares_stored_values(tmp_path: Path) -> None:
    with ConvlogSaver.open(tmp_path) as saver:
        big = "y" * 20_000
        c1 = saver.put(_config("src"), _checkpoint({"big": big}, {"big": 1}), _meta(0), {"big": 1})
        saver.put_writes(c1, [("big", "w")], "task")
        before = _log_bytes(saver.store)
        saver.copy_thread("src", "dst")
        assert _log_bytes(saver.store) - before < 100
        saver.delete_thread("src")
    with ConvlogSaver.open(tmp_path) as reopened:
        tup = reopened.get_tuple(_config("dst"))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"big": big}
        assert tup.pending_writes == [("task", "big", "w")]
        assert reopened.get_tuple(_config("src")) is None


# ------------------------------------------------------------------ writes


def test_put_writes_keeps_regular_writes_and_replaces_special_ones(tmp_path: Path) -> None:
    with ConvlogSaver.open(tmp_path) as saver:
        c = saver.put(_config("t"), _checkpoint({}, {}), _meta(0), {})
        saver.put_writes(c, [("a", 1), ("b", 2)], "task-1", "~__pregel_pull, n1")
        saver.put_writes(c, [("a", 100)], "task-1", "~__pregel_pull, n1")  # already stored: kept
        saver.put_writes(c, [(ERROR, "first")], "task-0", "~__pregel_pull, n0")
        saver.put_writes(c, [(ERROR, "second")], "task-0", "~__pregel_pull, n0")  # special: replaced
        expected = [("task-0", ERROR, "second"), ("task-1", "a", 1), ("task-1", "b", 2)]
        tup = saver.get_tuple(c)
        assert tup is not None and tup.pending_writes == expected
        assert len(list(saver.store.events(0, kinds=[lg.KIND_WRITES]))) == 3  # the ignored one was not appended
    with ConvlogSaver.open(tmp_path) as reopened:
        tup = reopened.get_tuple(c)
        assert tup is not None and tup.pending_writes == expected


def test_concurrent_async_writes_are_all_recorded(tmp_path: Path) -> None:
    async def run(saver: ConvlogSaver) -> RunnableConfig:
        c = await saver.aput(_config("t"), _checkpoint({}, {}), _meta(0), {})
        await asyncio.gather(*(saver.aput_writes(c, [("ch", i)], f"task-{i:02}") for i in range(16)))
        return c

    with ConvlogSaver.open(tmp_path) as saver:
        c = asyncio.run(run(saver))
    with ConvlogSaver.open(tmp_path) as reopened:
        tup = reopened.get_tuple(c)
        assert tup is not None
        assert tup.pending_writes == [(f"task-{i:02}", "ch", i) for i in range(16)]


# ------------------------------------------------------------------ threads and processes


def test_long_thread_ids_map_to_a_hashed_conversation(tmp_path: Path) -> None:
    long_id = "t" * 300
    assert conversation_id_for_thread("abc") == "langgraph:abc"
    hashed = conversation_id_for_thread(long_id)
    assert hashed.startswith("langgraph#") and len(hashed) == len("langgraph#") + 64
    with ConvlogSaver.open(tmp_path) as saver:
        c = saver.put(_config(long_id), _checkpoint({"k": 1}, {"k": 1}), _meta(0), {"k": 1})
        saver.put_writes(c, [("k", 2)], "task")
        assert [e["conversation_id"] for _, e in saver.store.events(0, kinds=KINDS)] == [hashed, hashed]
    with ConvlogSaver.open(tmp_path) as reopened:
        tup = reopened.get_tuple(_config(long_id))
        assert tup is not None
        assert tup.config["configurable"]["thread_id"] == long_id
        assert tup.checkpoint["channel_values"] == {"k": 1} and tup.pending_writes == [("task", "k", 2)]
        assert [t.config["configurable"]["thread_id"] for t in reopened.list(None)] == [long_id]


def test_a_read_only_follower_sees_the_writer_after_refresh(tmp_path: Path) -> None:
    with ConvlogSaver.open(tmp_path) as writer:
        c1 = writer.put(_config("t"), _checkpoint({"k": 1}, {"k": 1}), _meta(0), {"k": 1})
        with convlog.Store.open(tmp_path, read_only=True) as follower_store:
            follower = ConvlogSaver(follower_store)
            tup = follower.get_tuple(_config("t"))
            assert tup is not None and tup.config == c1
            c2 = writer.put(c1, _checkpoint({"k": 2}, {"k": 2}), _meta(1), {"k": 2})
            follower_store.refresh()
            tup = follower.get_tuple(_config("t"))
            assert tup is not None and tup.config == c2
            assert tup.checkpoint["channel_values"] == {"k": 2}


def test_two_savers_on_one_store_see_each_other(tmp_path: Path) -> None:
    with convlog.Store.open(tmp_path) as store:
        first, second = ConvlogSaver(store), ConvlogSaver(store)
        c1 = first.put(_config("t"), _checkpoint({"k": 1}, {"k": 1}), _meta(0), {"k": 1})
        c2 = second.put(c1, _checkpoint({"k": 2}, {"k": 2}), _meta(1), {"k": 2})
        first.put_writes(c2, [("k", 3)], "task")
        for saver in (first, second):
            tup = saver.get_tuple(_config("t"))
            assert tup is not None and tup.config == c2 and tup.pending_writes == [("task", "k", 3)]
            assert [t.config for t in saver.list(_config("t"))] == [c2, c1]


def test_a_channel_that_alternates_with_a_tiny_value_still_gets_deltas(tmp_path: Path) -> None:
    """LangGraph's ``__pregel_tasks`` holds the sends of one step and ``[]`` the next:
    the delta base is the channel's last value of at least DELTA_MIN_BYTES, not its last value."""
    with ConvlogSaver.open(tmp_path) as saver:
        config = _config("t")
        tasks: list[str] = []
        for step in range(12):
            tasks = tasks + ["task %d " % step + "z" * 400]
            value: list[str] = tasks if step % 2 == 0 else []
            config = saver.put(config, _checkpoint({"tasks": value}, {"tasks": step + 1}), _meta(step), {"tasks": step + 1})
        nodes = [p["s"][0] for p in _payloads(saver.store, KIND_CHECKPOINT)]
        big = nodes[4::2]  # from the first step whose base (step 2) is large enough
        assert all("o" in n for n in big), [sorted(n) for n in big]
        tup = saver.get_tuple(config)
        assert tup is not None and tup.checkpoint["channel_values"] == {"tasks": []}


def test_the_example_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    example = Path(__file__).resolve().parent.parent / "examples" / "langgraph_checkpointer.py"
    done = subprocess.run([sys.executable, str(example), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "turns: 2 | checkpoints: 6"


# ------------------------------------------------------------------ real graphs: async, interrupts, subgraphs


class _Counter(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph_with_interrupt_in_subgraph(saver: BaseCheckpointSaver[Any]) -> Any:
    def ask(state: _Counter) -> dict[str, Any]:
        answer = interrupt("name?")
        return {"log": [f"hello {answer}"]}

    sub = StateGraph(_Counter)
    sub.add_node("ask", ask)
    sub.add_edge(START, "ask")
    sub.add_edge("ask", END)

    def before(state: _Counter) -> dict[str, Any]:
        return {"log": ["before"]}

    parent = StateGraph(_Counter)
    parent.add_node("before", before)
    parent.add_node("sub", sub.compile())
    parent.add_edge(START, "before")
    parent.add_edge("before", "sub")
    parent.add_edge("sub", END)
    return parent.compile(checkpointer=saver)


def test_interrupt_in_a_subgraph_resumes_from_a_reopened_store(tmp_path: Path) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    with ConvlogSaver.open(tmp_path) as saver:
        graph = _graph_with_interrupt_in_subgraph(saver)
        out = graph.invoke({"log": []}, config)
        assert [i.value for i in out["__interrupt__"]] == ["name?"]
        namespaces = {ns for p in _payloads(saver.store, KIND_CHECKPOINT) for ns in [p["n"]]}
        assert "" in namespaces and any(ns.startswith("sub:") for ns in namespaces)
    with ConvlogSaver.open(tmp_path) as reopened:
        graph = _graph_with_interrupt_in_subgraph(reopened)
        state = graph.get_state(config, subgraphs=True)
        assert state.next == ("sub",)
        assert [i.value for i in state.interrupts] == ["name?"]
        out = graph.invoke(Command(resume="Ada"), config)
    # The same run in memory, without the reopen, ends the same.
    memory = _graph_with_interrupt_in_subgraph(InMemorySaver())
    memory.invoke({"log": []}, config)
    expected = memory.invoke(Command(resume="Ada"), config)
    assert out == expected
    assert "hello Ada" in out["log"]


def test_a_real_graph_runs_on_the_async_methods(tmp_path: Path) -> None:
    async def run() -> list[Any]:
        async with ConvlogSaver.open(tmp_path) as saver:
            graph = build_graph(saver, ToolHooks())
            config: RunnableConfig = {"configurable": {"thread_id": "t"}}
            for turn in (1, 2):
                await graph.ainvoke({"messages": [user_message(turn, ["paris", "oslo"])]}, config)
            state = await graph.aget_state(config)
            history = [s async for s in graph.aget_state_history(config)]
            assert len(history) == 10
            return list(state.values["messages"])

    messages = asyncio.run(run())
    assert [m.type for m in messages] == ["human", "ai", "tool", "tool", "ai"] * 2
    assert messages[-1].content == "Report 2: oslo: 12C; paris: 15C"


@pytest.mark.parametrize(
    ("conversation_id", "payload", "says"),
    [
        ("langgraph:t", b"\xc1", "invalid type"),
        ("langgraph:t", ormsgpack.packb([1, 2]), "a msgpack list, not a map"),
        ("langgraph:t", ormsgpack.packb({"n": ""}), "KeyError\\('m'\\)"),
        ("someone-else", ormsgpack.packb({"n": ""}), "'someone-else' is not a thread's"),
    ],
)
def test_a_langgraph_event_it_cannot_read_is_a_clear_error(
    tmp_path: Path, conversation_id: str, payload: bytes, says: str
) -> None:
    with ConvlogSaver.open(tmp_path) as saver:
        saver.put(_config("t"), _checkpoint({}, {}), _meta(0), {})
        saver.store.append([{"type": "custom", "kind": KIND_CHECKPOINT, "conversation_id": conversation_id, "payload": payload}])
        with pytest.raises(lg.UnreadableEventError, match=f"event 2 \\(langgraph.checkpoint\\): .*{says}") as raised:
            saver.get_tuple(_config("t"))
        assert (raised.value.lsn, raised.value.event_kind) == (2, KIND_CHECKPOINT)
    with pytest.raises(lg.UnreadableEventError, match="event 2 "):
        ConvlogSaver.open(tmp_path)
