"""A real graph killed mid-node resumes from convlog without re-running finished parallel tasks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from langgraph_support.graph import runs

SUPPORT = Path(__file__).resolve().parent / "langgraph_support"
CHILD_DEADLINE_S = 300.0
"""Generous bound on one child's run on a loaded machine (only a hang reaches it)."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    tests = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH", "")) if p)
    return env


def _run(store: Path, counts: Path, thread: str, mode: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(SUPPORT / "run_graph.py"), str(store), str(counts), thread, mode],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _start_and_kill(store: Path, counts: Path, thread: str) -> None:
    """Start a turn, wait until the ``rome`` call blocks (the others' results stored), SIGKILL."""
    child = subprocess.Popen(
        [sys.executable, str(SUPPORT / "run_graph.py"), str(store), str(counts), thread, "start"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = counts / "blocked"
    wake = threading.Event()
    try:
        waited = 0.0
        while not marker.exists():
            assert child.poll() is None, f"the child ended before blocking: {child.communicate()}"
            assert waited < CHILD_DEADLINE_S, "the child did not reach the blocking call"
            wake.wait(0.02)
            waited += 0.02
        os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=CHILD_DEADLINE_S)
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def test_sigkill_mid_tool_node_resumes_without_rerunning_finished_calls(tmp_path: Path) -> None:
    killed_store, killed_counts = tmp_path / "killed", tmp_path / "killed-counts"
    whole_store, whole_counts = tmp_path / "whole", tmp_path / "whole-counts"
    killed_counts.mkdir()
    whole_counts.mkdir()

    _start_and_kill(killed_store, killed_counts, "thread-1")
    # Killed inside the tool node: paris and oslo finished and their results are
    # stored as pending writes; rome started and never finished.
    assert (runs(killed_counts, "paris"), runs(killed_counts, "oslo"), runs(killed_counts, "rome")) == (1, 1, 1)
    assert runs(killed_counts, "model") == 1

    resumed = _run(killed_store, killed_counts, "thread-1", "resume")
    # Only the unfinished call ran again; the finished parallel calls did not.
    assert runs(killed_counts, "paris") == 1
    assert runs(killed_counts, "oslo") == 1
    assert runs(killed_counts, "rome") == 2
    assert runs(killed_counts, "model") == 2

    whole = _run(whole_store, whole_counts, "thread-1", "whole")
    assert (runs(whole_counts, "paris"), runs(whole_counts, "rome"), runs(whole_counts, "oslo")) == (1, 1, 1)
    assert resumed == whole
    assert [m["type"] for m in whole] == ["human", "ai", "tool", "tool", "tool", "ai"]
    assert whole[-1]["content"] == "Report 1: oslo: 12C; paris: 15C; rome: 12C"
