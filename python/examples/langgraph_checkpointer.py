"""LangGraph with its checkpoints in convlog (runs offline: no model is called).

    python python/examples/langgraph_checkpointer.py [STORE_DIR]

A two-node graph keeps a conversation in a thread; the second process-like
step opens the store again and continues the same thread from its last
checkpoint.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import NotRequired, TypedDict

from convlog.integrations.langgraph import ConvlogSaver


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: NotRequired[int]


def reply(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    return {"messages": [AIMessage(content=f"You said: {last.content}")], "turns": state.get("turns", 0) + 1}


def build() -> StateGraph[State, None, State, State]:
    builder: StateGraph[State, None, State, State] = StateGraph(State, input_schema=State, output_schema=State)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def main(path: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "user-42"}}
    with ConvlogSaver.open(path) as saver:
        graph = build().compile(checkpointer=saver)
        first: State = {"messages": [HumanMessage(content="hello")]}
        graph.invoke(first, config)

    # Later (another process, after a restart): the thread goes on from convlog.
    with ConvlogSaver.open(path) as saver:
        graph = build().compile(checkpointer=saver)
        second: State = {"messages": [HumanMessage(content="still there?")]}
        state = graph.invoke(second, config)
        for m in state["messages"]:
            print(f"{m.type:>5}: {m.content}")
        print("turns:", state["turns"], "| checkpoints:", len(list(saver.list(config))))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="convlog-langgraph-"))
