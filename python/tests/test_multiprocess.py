"""Many processes on one store: the supported pattern is one writer process
plus read-only openers (docs/python.md, "Many processes"). A second process
that tries to write gets a LockedError that says what to do; readers never
hit a lock."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import convlog
import multiprocess_support as support
from conftest import user

#: "spawn": children never inherit an open store (a forked child would
#: inherit the writer's lock file descriptor; docs/python.md says to open
#: stores after fork).
CONTEXT = multiprocessing.get_context("spawn")


def test_writers_in_other_processes_get_a_locked_error_that_says_what_to_do(
    store: convlog.Store, store_path: Path
) -> None:
    store.append([user("c", "x")])
    with ProcessPoolExecutor(max_workers=4, mp_context=CONTEXT) as pool:
        results = list(pool.map(support.try_to_write, [str(store_path)] * 8))
    for kind, message, path in results:
        assert kind == "LockedError", message
        assert path == str(store_path)
        assert "read_only=True" in message and "one process writes a store at a time" in message
    assert store.conversation_ids() == ["c"], "nothing was written by the others"


def test_read_only_openers_in_many_processes_follow_the_writer(
    store: convlog.Store, store_path: Path
) -> None:
    store.append([user("c", "first")])
    with ProcessPoolExecutor(max_workers=4, mp_context=CONTEXT) as pool:
        futures = [pool.submit(support.follow, str(store_path), 40) for _ in range(4)]
        for n in range(39):
            store.append([user("c", f"message {n}")])
        results = [future.result(timeout=support.WAIT_SECONDS_MAX) for future in futures]
    assert all(lsns == list(range(1, 41)) for lsns in results)


def test_one_writer_process_serves_the_writes_of_many_workers(store_path: Path) -> None:
    convlog.Store.open(store_path).close()  # create it, so read-only opens find a store
    requests: Any = CONTEXT.Queue()
    replies: Any = CONTEXT.Queue()
    results: Any = CONTEXT.Queue()
    writer = CONTEXT.Process(target=support.writer_process, args=(str(store_path), requests, replies))
    writer.start()
    workers = []
    try:
        assert replies.get(timeout=support.WAIT_SECONDS_MAX)[0] == "ready"
        for worker in range(4):
            process = CONTEXT.Process(
                target=support.worker_process, args=(str(store_path), worker, 10, requests, results)
            )
            process.start()
            workers.append(process)
        seen = dict(results.get(timeout=support.WAIT_SECONDS_MAX) for _ in workers)
    finally:
        for process in workers:
            process.join(timeout=support.WAIT_SECONDS_MAX)
        requests.put(None)
        writer.join(timeout=support.WAIT_SECONDS_MAX)
    assert writer.exitcode == 0
    assert [process.exitcode for process in workers] == [0] * 4
    for worker in range(4):
        assert seen[worker] == [f"{worker}:{n}" for n in range(10)]
    with convlog.Store.open(store_path, read_only=True) as reader:
        assert reader.next_lsn == 41
        assert reader.conversation_ids() == [f"worker-{n}" for n in range(4)]


def test_a_killed_writer_leaves_no_lock_and_loses_nothing_acknowledged(store_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, convlog
        store = convlog.Store.open({str(store_path)!r})
        for n in range(25):
            store.append([{{"type": "conversation_recorded", "conversation_id": "c",
                           "entry": {{"evaluation_id": "e", "role": "user", "content": str(n)}}}}])
        print("acknowledged", store.next_lsn - 1, flush=True)
        sys.stdin.read()  # wait to be killed, holding the lock
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.split() == ["acknowledged", "25"], line
        # While it runs: a read-only opener sees everything; a writer is locked out.
        with convlog.Store.open(store_path, read_only=True) as reader:
            assert len(reader.conversation("c")) == 25
        try:
            convlog.Store.open(store_path)
            raise AssertionError("a second writer opened the store")
        except convlog.LockedError:
            pass
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL
    with convlog.Store.open(store_path) as store:  # the lock died with the process
        assert [entry["content"] for entry in store.conversation("c").entries] == [str(n) for n in range(25)]
