"""ConvlogSaver against langgraph-checkpoint-sqlite's SqliteSaver, side by side in one run.

    .venv/bin/python python/benches/bench_checkpointer.py [--steps 500] [--dir DIR]

1. Records the checkpointer calls of a real graph (python/tests/langgraph_support:
   a scripted model asking for three parallel tool calls per user turn, a tool
   node, five checkpoints per turn) run for ``--steps`` checkpoints on one thread.
2. Replays exactly those ``put`` and ``put_writes`` calls into a fresh
   ConvlogSaver (durability "group": every append fsynced) and a fresh
   SqliteSaver (a file database, WAL, synchronous FULL: every commit fsynced),
   on the same disk, timing the saver calls only.
3. Reports per step (one checkpoint with its writes) the time of put + put_writes,
   the time of get_tuple of the thread's latest checkpoint (in the writing
   process, and first call after opening the store again, which for convlog
   includes building the index), and the bytes on disk after closing.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from langgraph_support.graph import ToolHooks, build_graph, user_message  # noqa: E402

from convlog.integrations.langgraph import ConvlogSaver  # noqa: E402

CITIES = ("paris", "rome", "oslo")
CHECKPOINTS_PER_TURN = 5
THREAD = "bench-thread"
GET_TUPLE_ROUNDS = 200

Call = tuple[str, tuple[Any, ...]]


class RecordingSaver(InMemorySaver):
    """Keeps a deep copy of every put and put_writes call, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self.calls.append(("put", copy.deepcopy((config, checkpoint, metadata, new_versions))))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.calls.append(("put_writes", copy.deepcopy((config, list(writes), task_id, task_path))))
        super().put_writes(config, writes, task_id, task_path)


def record(steps: int, padding: int) -> list[Call]:
    recorder = RecordingSaver()
    graph = build_graph(recorder, ToolHooks(padding=padding))
    config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
    turns = max(1, steps // CHECKPOINTS_PER_TURN)
    for turn in range(1, turns + 1):
        graph.invoke({"messages": [user_message(turn, CITIES)]}, config)
    return recorder.calls


def replay(saver: BaseCheckpointSaver[Any], calls: list[Call]) -> list[float]:
    """Replays the calls; returns the seconds of put + put_writes per checkpoint."""
    per_step: list[float] = []
    acc = 0.0
    for name, args in calls:
        if name == "put":
            if acc:
                per_step.append(acc)
            t0 = time.perf_counter()
            saver.put(*args)
            acc = time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            saver.put_writes(*args)
            acc += time.perf_counter() - t0
    per_step.append(acc)
    return per_step


def time_get_tuple(saver: BaseCheckpointSaver[Any]) -> float:
    config: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    t0 = time.perf_counter()
    for _ in range(GET_TUPLE_ROUNDS):
        assert saver.get_tuple(config) is not None
    return (time.perf_counter() - t0) / GET_TUPLE_ROUNDS


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def first_get_tuple(open_saver: Callable[[], tuple[BaseCheckpointSaver[Any], Callable[[], None]]]) -> tuple[float, float]:
    """Seconds to open, and to answer the first get_tuple after opening."""
    t0 = time.perf_counter()
    saver, close = open_saver()
    t1 = time.perf_counter()
    config: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    assert saver.get_tuple(config) is not None
    t2 = time.perf_counter()
    close()
    return t1 - t0, t2 - t1


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500, help="checkpoints in the thread (default 500)")
    parser.add_argument("--padding", type=int, default=0, help="extra characters per tool result")
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-checkpointer-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        calls = record(args.steps, args.padding)
        n_puts = sum(1 for name, _ in calls if name == "put")
        n_writes = len(calls) - n_puts
        print(f"recorded {n_puts} puts and {n_writes} put_writes in {time.perf_counter() - t0:.1f} s")

        convlog_dir = root / "convlog"
        with ConvlogSaver.open(convlog_dir) as c_saver:
            c_steps = replay(c_saver, calls)
            c_get = time_get_tuple(c_saver)
        with ConvlogSaver.open(root / "convlog-none", durability="none") as n_saver:
            n_steps = replay(n_saver, calls)
        sqlite_file = root / "sqlite" / "checkpoints.sqlite"
        sqlite_file.parent.mkdir()
        conn = sqlite3.connect(sqlite_file, check_same_thread=False)
        s_saver = SqliteSaver(conn)
        s_steps = replay(s_saver, calls)
        s_get = time_get_tuple(s_saver)
        conn.close()

        def open_convlog() -> tuple[BaseCheckpointSaver[Any], Callable[[], None]]:
            saver = ConvlogSaver.open(convlog_dir)
            return saver, saver.close

        def open_sqlite() -> tuple[BaseCheckpointSaver[Any], Callable[[], None]]:
            conn2 = sqlite3.connect(sqlite_file, check_same_thread=False)
            return SqliteSaver(conn2), conn2.close

        c_open, c_first = first_get_tuple(open_convlog)
        s_open, s_first = first_get_tuple(open_sqlite)
        c_bytes = dir_bytes(convlog_dir)
        s_bytes = dir_bytes(sqlite_file.parent)

        c_mean, s_mean = statistics.fmean(c_steps), statistics.fmean(s_steps)
        c_p50, s_p50 = statistics.median(c_steps), statistics.median(s_steps)
        print(f"checkpoints: {len(c_steps)} (one thread, {n_writes} put_writes)")
        print("| measure | ConvlogSaver | SqliteSaver | SqliteSaver / ConvlogSaver |")
        print("|---|---|---|---|")
        print(f"| put + put_writes per step, mean | {us(c_mean)} | {us(s_mean)} | {s_mean / c_mean:.2f}x |")
        print(f"| put + put_writes per step, median | {us(c_p50)} | {us(s_p50)} | {s_p50 / c_p50:.2f}x |")
        print(f"| put + put_writes, last 50 steps, mean | {us(statistics.fmean(c_steps[-50:]))} | {us(statistics.fmean(s_steps[-50:]))} | {statistics.fmean(s_steps[-50:]) / statistics.fmean(c_steps[-50:]):.2f}x |")
        n_mean = statistics.fmean(n_steps)
        print(f"| put + put_writes per step, mean, convlog durability none (no fsync) | {us(n_mean)} | - | - |")
        print(f"| get_tuple (latest), same process | {us(c_get)} | {us(s_get)} | {s_get / c_get:.2f}x |")
        print(f"| open | {us(c_open)} | {us(s_open)} | {s_open / c_open:.2f}x |")
        print(f"| first get_tuple after open | {us(c_first)} | {us(s_first)} | {s_first / c_first:.2f}x |")
        print(f"| bytes on disk | {c_bytes:,} | {s_bytes:,} | {s_bytes / c_bytes:.1f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
