"""langgraph-checkpoint-conformance (0.0.2) against ConvlogSaver: every base and extended test."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.initializer import RegisteredCheckpointer
from langgraph.checkpoint.conformance.report import ProgressCallbacks

import convlog
from convlog.integrations.langgraph import ConvlogSaver

CONFORMANCE_TESTS = 81
"""Base (58) and extended (23) tests in langgraph-checkpoint-conformance 0.0.2."""


@checkpointer_test(name="ConvlogSaver")
async def convlog_checkpointer() -> AsyncGenerator[ConvlogSaver, None]:
    with tempfile.TemporaryDirectory() as path:
        with ConvlogSaver.open(path) as saver:
            yield saver


class ReplayingSaver(ConvlogSaver):
    """A saver that forgets its index and rebuilds it from the log before every read.

    Run through the same suite, it checks that what the events record (puts,
    writes, deletions, copies, prunes) replays into the same answers as the
    live index: what a process sees after opening the store again.
    """

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._rebuild_index()
        return super().get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self._rebuild_index()
        return super().list(config, filter=filter, before=before, limit=limit)


@checkpointer_test(name="ConvlogSaver replayed")
async def convlog_checkpointer_replayed() -> AsyncGenerator[ConvlogSaver, None]:
    with tempfile.TemporaryDirectory() as path:
        store = convlog.Store.open(path)
        try:
            yield ReplayingSaver(store)
        finally:
            store.close()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "registered", [convlog_checkpointer, convlog_checkpointer_replayed], ids=["live", "replayed"]
)
async def test_conformance_all_base_and_extended(registered: RegisteredCheckpointer) -> None:
    report = await validate(registered, progress=ProgressCallbacks.verbose())
    report.print_report()
    failures = [f for r in report.results.values() for f in r.failures]
    assert failures == []
    assert report.passed_all_base()
    assert report.passed_all(), report.to_dict()
    ran = sum(r.tests_passed for r in report.results.values())
    assert ran == CONFORMANCE_TESTS
