"""The examples of docs/python.md's sections on tamper evidence and on
encryption at rest and erasure run as written (each in a new directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"

#: The sections whose ```python blocks are whole programs.
RUNNABLE_SECTIONS = ("## Tamper evidence", "## Encryption at rest and erasure")


def examples(section: str) -> list[str]:
    text = DOC.read_text()
    start = text.index(f"\n{section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


@pytest.mark.parametrize("section", RUNNABLE_SECTIONS)
def test_the_section_examples_run(
    section: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = examples(section)
    assert blocks, f"{section} has no example"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, f"{DOC}: {section}", "exec"), {"__name__": "__doc_example__"})
    printed = capsys.readouterr().out
    if section == "## Tamper evidence":
        assert printed.startswith("Truncated 1 signed-store/"), printed
    else:
        assert printed.startswith('conversation "ctx_123" was erased'), printed
