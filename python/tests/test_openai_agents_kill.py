"""A real ``Runner.run`` killed (SIGKILL) mid-tool, then a new process runs
again on the same session: the model request the SDK builds has no call
without its output, and ``ConvlogSession.get_items`` never returns one.

Two ways to be killed mid-tool: a plain tool call (openai-agents 0.24 stores a
call together with its output, after the tool, so only the input is stored
when the process dies), and a call that needed an approval (the SDK stores
the call when the run stops for the approval; the host approves and resumes;
the process dies in the tool, leaving the call without an output for good).
The same runs go against the SDK's ``SQLiteSession``, whose ``get_items``
returns that call; the SDK's request builder drops it there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from openai_agents_support.scripted import dangling

SUPPORT = Path(__file__).resolve().parent / "openai_agents_support"
CHILD_DEADLINE_S = 300.0
"""Generous bound on one child's run on a loaded machine (only a hang reaches it)."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    tests = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH", "")) if p)
    env.pop("OPENAI_API_KEY", None)  # nothing may reach the network
    return env


def _command(backend: str, store: Path, phase: str, marker: Path) -> list[str]:
    script = str(SUPPORT / "crash_run.py")
    return [sys.executable, script, backend, str(store), "sess-1", phase, str(marker)]


def _kill_mid_tool(backend: str, store: Path, phase: str, marker: Path) -> None:
    """Start the run, wait until its tool has started (its line on our pipe;
    the marker file), then SIGKILL it."""
    child = subprocess.Popen(
        _command(backend, store, phase, marker),
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(CHILD_DEADLINE_S, child.kill)
    watchdog.start()
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the tool starts (or the child ends)
        if line.strip() != "TOOL_STARTED":
            child.kill()
            _, err = child.communicate()
            raise AssertionError(f"the child did not reach its tool: {line!r}\n{err}")
        assert marker.read_text() == "started"
        child.send_signal(signal.SIGKILL)
        child.communicate()
        assert child.returncode == -signal.SIGKILL
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.communicate()


def _run_next(backend: str, store: Path, marker: Path) -> dict[str, Any]:
    done = subprocess.run(
        _command(backend, store, "next", marker),
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CHILD_DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


USER_GO = {"role": "user", "content": "go"}
USER_AGAIN = {"role": "user", "content": "again"}


@pytest.mark.parametrize("backend", ["convlog", "sqlite"])
@pytest.mark.parametrize("phase", ["tool", "approval"])
def test_killed_mid_tool_then_run_again(tmp_path: Path, backend: str, phase: str) -> None:
    store = tmp_path / ("store" if backend == "convlog" else "agents.db")
    marker = tmp_path / "tool-started"
    _kill_mid_tool(backend, store, phase, marker)
    report = _run_next(backend, store, marker)

    request, items = report["request"], report["items"]
    # The request the SDK built for the new run: the history, then the new input.
    assert dangling(request) == []
    assert request == [USER_GO, USER_AGAIN]
    call_id = "call_block" if phase == "tool" else "call_approved"
    stored_call = [i for i in items if i.get("call_id") == call_id]
    if backend == "convlog":
        # The session itself never hands the SDK the call without its output.
        assert dangling(items) == []
        assert [i.get("role") for i in items] == ["user", "user", "assistant"]
        if phase == "approval":
            # Still recorded: the neutral entries show it unfinished (resume
            # and `convlog inspect` report it).
            assert report["calls"] == {call_id: "pending"}
        else:
            assert report["calls"] == {}
    elif phase == "approval":
        # SQLiteSession returns the call without its output.
        assert dangling(items) == [call_id] and len(stored_call) == 1
    else:
        assert dangling(items) == []
