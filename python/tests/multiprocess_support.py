"""Process bodies for test_multiprocess.py (module level, so the "spawn"
start method can import them in the child)."""

from __future__ import annotations

import multiprocessing.queues
from typing import Any

import convlog

#: Longest a child waits for anything before it gives up with an error (a
#: safety net against a hung test, not a timing assumption: every wait ends
#: as soon as what it waits for has happened).
WAIT_SECONDS_MAX = 120.0


def user(conversation_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "conversation_recorded",
        "conversation_id": conversation_id,
        "entry": {"evaluation_id": "e", "role": "user", "content": text},
    }


def try_to_write(path: str) -> tuple[str, str, str]:
    """Opens the store for writing: ("opened", "", "") or the error's class,
    message and path."""
    try:
        with convlog.Store.open(path) as store:
            store.append([user("intruder", "x")])
        return ("opened", "", "")
    except convlog.LockedError as error:
        return ("LockedError", str(error), error.path)
    except Exception as error:  # reported to the test, which fails on it
        return (type(error).__name__, str(error), "")


def writer_process(path: str, requests: "multiprocessing.queues.Queue[Any]",
                   replies: "multiprocessing.queues.Queue[Any]") -> None:
    """The one writer: appends every batch it is sent, replies with the
    LSNs; stops on None."""
    with convlog.Store.open(path) as store:
        replies.put(("ready", store.next_lsn))
        while True:
            request = requests.get(timeout=WAIT_SECONDS_MAX)
            if request is None:
                break
            _worker, batch = request
            store.append(batch)


def worker_process(path: str, worker: int, count: int,
                   requests: "multiprocessing.queues.Queue[Any]",
                   results: "multiprocessing.queues.Queue[Any]") -> None:
    """A host worker: sends its writes to the writer process, reads through
    its own read-only store; puts (worker, what it read of its conversation)
    on `results` once all its writes are there."""
    conversation_id = f"worker-{worker}"
    with convlog.Store.open(path, read_only=True) as store:
        for n in range(count):
            requests.put((worker, [user(conversation_id, f"{worker}:{n}")]))
        # Wait for its events by following the log (no sleep, no timing).
        seen = 0
        tail = store.tail(1, conversation_id=conversation_id, idle_timeout=WAIT_SECONDS_MAX)
        for _lsn, _event in tail:
            seen += 1
            if seen == count:
                break
        if seen != count:
            raise RuntimeError(f"{conversation_id} saw {seen} of {count} events")
        store.refresh()
        contents = [entry["content"] for entry in store.conversation(conversation_id).entries]
        results.put((worker, contents))


def follow(path: str, count: int) -> list[int]:
    """A read-only follower: the LSNs of the first `count` events, waiting
    for the writer."""
    with convlog.Store.open(path, read_only=True) as store:
        lsns = []
        for lsn, _event in store.tail(1, idle_timeout=WAIT_SECONDS_MAX):
            lsns.append(lsn)
            if len(lsns) == count:
                break
        return lsns
