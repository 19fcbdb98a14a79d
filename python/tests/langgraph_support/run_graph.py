"""Run the test graph on a ConvlogSaver in this process (a child of the kill test).

``python run_graph.py STORE COUNTS_DIR THREAD MODE`` with MODE ``start`` (a new
turn; the call for ``rome`` blocks until the process is killed, once the
``paris`` and ``oslo`` results are in the checkpointer), ``resume`` (continue
the thread from its last checkpoint) or ``whole`` (a new turn, nothing
blocks). Prints the final messages, normalised, as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langgraph_support.graph import ToolHooks, build_graph, normalised, user_message  # noqa: E402

import convlog  # noqa: E402
from convlog.integrations.langgraph import ConvlogSaver  # noqa: E402

CITIES = ("paris", "rome", "oslo")
BLOCK_CITY = "rome"


class MarkingSaver(ConvlogSaver):
    """Leaves a file ``written-<city>`` once a tool result for that city is in the store."""

    counts_dir: Path = Path(".")

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        super().put_writes(config, writes, task_id, task_path)
        for _channel, value in writes:
            for m in value if isinstance(value, list) else [value]:
                if isinstance(m, ToolMessage) and m.tool_call_id:
                    city = m.tool_call_id.rsplit("-", 1)[-1]
                    (self.counts_dir / f"written-{city}").write_text("written")


def main(argv: list[str]) -> int:
    store, counts, thread, mode = argv
    counts_dir = Path(counts)
    hooks = ToolHooks(
        counts_dir=counts_dir,
        block_city=BLOCK_CITY if mode == "start" else None,
        wait_for=tuple(f"written-{c}" for c in CITIES if c != BLOCK_CITY),
    )
    with convlog.Store.open(store) as opened:
        saver = MarkingSaver(opened)
        saver.counts_dir = counts_dir
        graph = build_graph(saver, hooks)
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        if mode == "resume":
            state = graph.invoke(None, config)
        else:
            state = graph.invoke({"messages": [user_message(1, CITIES)]}, config)
    print(json.dumps(normalised(state["messages"]), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
