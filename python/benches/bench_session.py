"""ConvlogSession against the OpenAI Agents SDK's SQLiteSession, side by side
in one run, on the same disk (issue 13; results in docs/performance.md).

    python python/benches/bench_session.py [--dir DIR] [--rounds 7] [--ops 50]

- ``add_items`` of one item (what ``Runner`` does per step), durable: the
  convlog store with ``durability="group"`` (fsynced before ``add_items``
  returns), SQLite in WAL mode with its default ``synchronous=FULL`` (the WAL
  fsynced at each commit). 1 and 16 sessions writing concurrently (asyncio
  tasks of one process, one store / one database file), each session doing
  ``--ops`` calls in a row. Reported: the time per ``add_items`` call (the
  round's wall time over the calls of all sessions), median of the rounds.
- ``get_items()`` of a 200-item session (a realistic mix of messages, calls
  and outputs), median per call: "warm" (nothing written since the last read),
  "after another session wrote" (before each read, so ConvlogSession checks
  the log for its conversation), "by a new session object" (the previous one
  closed and gone, as a host making a session object per request does;
  SQLite opens a connection) and "first read in the process" (ConvlogSession
  on a store object of its own, read-only, opened outside the timing: it
  reads the conversation from the store; SQLite: a new SQLiteSession).

Each round starts from fresh files. Ratios are SQLiteSession's time over
ConvlogSession's (above 1: ConvlogSession is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Union

from agents import SQLiteSession

import convlog
from convlog.integrations.openai_agents import ConvlogSession

Session = Union[ConvlogSession, SQLiteSession]


def _item(n: int) -> Any:
    kind = n % 4
    if kind == 0:
        return {"role": "user", "content": f"question {n}: what is the weather in city {n}?"}
    if kind == 1:
        return {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": "get_weather",
            "arguments": f'{{"city":"city {n}"}}',
            "status": "completed",
        }
    if kind == 2:
        return {"type": "function_call_output", "call_id": f"call_{n - 1}", "output": f"{n}C, sunny"}
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": f"It is {n}C and sunny.", "annotations": []}],
    }


class Backend:
    """Opens sessions of one backend in a fresh directory."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.store: Union[convlog.Store, None] = None
        self.sessions: list[Session] = []
        if name == "convlog":
            self.store = convlog.Store.open(root / "store", "group")

    def session(self, session_id: str) -> Session:
        session: Session
        if self.store is not None:
            session = ConvlogSession(session_id, self.store)
        else:
            session = SQLiteSession(session_id, self.root / "agents.db")
        self.sessions.append(session)
        return session

    def close(self) -> None:
        for session in self.sessions:
            session.close()
        if self.store is not None:
            self.store.close()


def _fresh(base: Path, name: str) -> Backend:
    root = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=base))
    return Backend(name, root)


def _dispose(backend: Backend) -> None:
    backend.close()
    shutil.rmtree(backend.root, ignore_errors=True)


async def _add_items_round(base: Path, name: str, sessions: int, ops: int) -> float:
    """Seconds per add_items call with `sessions` sessions writing at once."""
    backend = _fresh(base, name)
    try:
        opened = [backend.session(f"s{n}") for n in range(sessions)]
        for session in opened:  # create the sessions (schema, first event) outside the timing
            await session.add_items([_item(0)])

        async def writer(session: Session) -> None:
            for n in range(ops):
                await session.add_items([_item(n + 1)])

        started = time.perf_counter()
        await asyncio.gather(*(writer(session) for session in opened))
        elapsed = time.perf_counter() - started
        for session in opened:
            assert len(await session.get_items()) == ops + 1
        return elapsed / (sessions * ops)
    finally:
        _dispose(backend)


async def _get_items_round(base: Path, name: str, size: int, reads: int, mode: str) -> float:
    """Median seconds per get_items() of a `size`-item session. `mode`: "warm"
    (read again), "after writes" (another session wrote before each read),
    "new object" (each read by a new session object, the previous ones gone:
    no cache in the process)."""
    backend = _fresh(base, name)
    try:
        session = backend.session("reader")
        other = backend.session("other")
        await session.add_items([_item(n) for n in range(size)])
        await other.add_items([_item(0)])
        assert len(await session.get_items()) == size
        times: list[float] = []
        for n in range(reads):
            if mode == "after writes":
                await other.add_items([_item(n + 1)])
            reader: Union[convlog.Store, None] = None
            if mode == "new object":
                backend.sessions.remove(session)
                session.close()
                del session
                gc.collect()
                session = backend.session("reader")
            elif mode == "first read":
                backend.sessions.remove(session)
                session.close()
                if backend.store is not None:
                    # A store object of its own: nothing of the session cached.
                    reader = convlog.Store.open(backend.root / "store", read_only=True)
                    session = ConvlogSession("reader", reader)
                else:
                    session = SQLiteSession("reader", backend.root / "agents.db")
                backend.sessions.append(session)
            started = time.perf_counter()
            items = await session.get_items()
            times.append(time.perf_counter() - started)
            assert len(items) == size
            if reader is not None:
                backend.sessions.remove(session)
                session.close()
                reader.close()
                session = backend.session("reader")
        return statistics.median(times)
    finally:
        _dispose(backend)


async def _rounds(rounds: int, run: Callable[[str], Awaitable[float]]) -> dict[str, list[float]]:
    """Each backend's figure of each round, the backends alternating within each round."""
    results: dict[str, list[float]] = {"convlog": [], "sqlite": []}
    for _ in range(rounds):
        for name in results:
            results[name].append(await run(name))
    return results


def _us(values: list[float]) -> str:
    """The median, and the range over the rounds in brackets."""
    return (
        f"{statistics.median(values) * 1e6:,.0f} us "
        f"[{min(values) * 1e6:,.0f}–{max(values) * 1e6:,.0f}]"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go (default: the temp dir)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=50, help="add_items calls per session per round")
    parser.add_argument("--items", type=int, default=200, help="items of the get_items session")
    parser.add_argument("--reads", type=int, default=50, help="get_items calls per round")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    command = "python python/benches/bench_session.py " + " ".join(sys.argv[1:])
    print(f"command: {command.strip()}")
    print(f"directory: {base}; rounds: {args.rounds}; median of the rounds\n")
    rows: list[tuple[str, list[float], list[float]]] = []
    for sessions in (1, 16):
        result = await _rounds(
            args.rounds, lambda name: _add_items_round(base, name, sessions, args.ops)
        )
        label = f"add_items, 1 item, durable, {sessions} session{'s' if sessions > 1 else ''}"
        rows.append((label, result["sqlite"], result["convlog"]))
    labels = {
        "warm": "warm",
        "after writes": "after another session wrote",
        "new object": "by a new session object",
        "first read": "first read in the process",
    }
    for mode, label in labels.items():
        result = await _rounds(
            args.rounds,
            lambda name: _get_items_round(base, name, args.items, args.reads, mode),
        )
        rows.append((f"get_items() of {args.items} items, {label}", result["sqlite"], result["convlog"]))
    print("| operation | SQLiteSession | ConvlogSession | ratio of medians |")
    print("|---|---|---|---|")
    for label, sqlite, ours in rows:
        ratio = statistics.median(sqlite) / statistics.median(ours)
        print(f"| {label} | {_us(sqlite)} | {_us(ours)} | {ratio:.1f}× |")


if __name__ == "__main__":
    asyncio.run(main())
