"""python/examples/quickstart.py runs as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"


def test_quickstart_runs(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "finished: ['call_paris']"
    assert lines[1] == "to run again: ['call_rome']"
    assert lines[2] == "anthropic messages: 3 left out: ['call_rome']"
    assert lines[-1] == "verified: 8 events in 1 segment(s)"
