"""A StateGraph with a scripted chat model and a tool node that runs tool calls in parallel.

The model (``ScriptedModel``) answers from the state alone, so a process that
resumes a thread half-way gets the same answers as one that ran it whole:
after a user message it asks for one ``lookup`` call per city named in it
(parallel tool calls, sent to the tool node as one task each with
``Send``); after the tool results it answers with a report of them.

``ToolHooks`` lets a test count tool executions in files (one line per run,
so counts survive a killed process) and make one city's call block until
the process is killed, after the other calls' writes are in the
checkpointer.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallWithContext
from langgraph.types import Send
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _turn(messages: Sequence[BaseMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, HumanMessage))


class ScriptedModel(BaseChatModel):
    """A chat model whose answer is a function of the conversation (no network)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = _turn(messages)
        last = messages[-1]
        if isinstance(last, HumanMessage):
            text = str(last.content)
            cities = [w.strip(" ,?.").lower() for w in text.split(":", 1)[-1].split(",")]
            calls = [
                {"name": "lookup", "args": {"city": c}, "id": f"call-{turn}-{c}", "type": "tool_call"}
                for c in cities
                if c
            ]
            reply = AIMessage(content="", tool_calls=calls, id=f"ai-{turn}-calls")
        else:
            results = []
            for m in reversed(messages):
                if not isinstance(m, ToolMessage):
                    break
                results.append(str(m.content))
            report = "; ".join(sorted(results))
            reply = AIMessage(content=f"Report {turn}: {report}", id=f"ai-{turn}-report")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@dataclass
class ToolHooks:
    """Where tool runs are counted, and which city's call blocks until the process dies."""

    counts_dir: Path | None = None
    block_city: str | None = None
    wait_for: tuple[str, ...] = ()
    """Marker files (in ``counts_dir``) that must exist before the blocking call blocks."""
    padding: int = 0
    """Extra characters in each tool result (to model larger tool outputs)."""

    def count(self, name: str) -> None:
        if self.counts_dir is not None:
            with open(self.counts_dir / f"runs-{name}", "a") as f:
                f.write("run\n")
                f.flush()
                os.fsync(f.fileno())

    def block_forever(self) -> None:
        assert self.counts_dir is not None
        stop = threading.Event()
        while not all((self.counts_dir / m).exists() for m in self.wait_for):
            stop.wait(0.01)
        (self.counts_dir / "blocked").write_text("blocked")
        stop.wait()  # until SIGKILL


def runs(counts_dir: Path, name: str) -> int:
    """How many times ``name`` (a city, or ``model``) ran, per ``ToolHooks.count``."""
    path = counts_dir / f"runs-{name}"
    return len(path.read_text().splitlines()) if path.exists() else 0


def make_tools(hooks: ToolHooks) -> list[BaseTool]:
    @tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        hooks.count(city)
        if hooks.block_city == city:
            hooks.block_forever()
        return f"{city}: {len(city) * 3}C" + "." * hooks.padding

    return [lookup]


def build_graph(checkpointer: BaseCheckpointSaver[Any], hooks: ToolHooks | None = None) -> CompiledStateGraph[Any, Any, Any, Any]:
    hooks = hooks or ToolHooks()
    model = ScriptedModel()

    def agent(state: State) -> dict[str, Any]:
        hooks.count("model")
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: State) -> list[Send] | str:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return [
                Send(
                    "tools",
                    ToolCallWithContext(__type="tool_call_with_context", tool_call=call, state=state),
                )
                for call in last.tool_calls
            ]
        return END

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(make_tools(hooks)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def user_message(turn: int, cities: Sequence[str]) -> HumanMessage:
    return HumanMessage(content="Weather in: " + ", ".join(cities), id=f"user-{turn}")


def normalised(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Messages as dicts without the ids LangGraph makes up (tool results get random ones)."""
    out = []
    for m in messages:
        d = m.model_dump()
        if isinstance(m, ToolMessage):
            d.pop("id", None)
        out.append(d)
    return out
