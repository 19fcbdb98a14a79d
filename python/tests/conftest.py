"""Shared fixtures of the package's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import convlog


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A directory for a new store (not created yet)."""
    return tmp_path / "store"


@pytest.fixture
def store(store_path: Path) -> Iterator[convlog.Store]:
    """A new store opened for writing, closed after the test."""
    with convlog.Store.open(store_path) as opened:
        yield opened


def user(conversation_id: str, text: str, evaluation_id: str = "eval-1", **entry: Any) -> dict[str, Any]:
    """A conversation_recorded event of a user entry."""
    return {
        "type": "conversation_recorded",
        "conversation_id": conversation_id,
        "entry": {"evaluation_id": evaluation_id, "role": "user", "content": text, **entry},
    }


def entry_event(conversation_id: str, **entry: Any) -> dict[str, Any]:
    """A conversation_recorded event of any entry."""
    return {"type": "conversation_recorded", "conversation_id": conversation_id, "entry": entry}
