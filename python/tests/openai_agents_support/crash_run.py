"""Child process of the kill test: a real ``agents.Runner.run`` on a session.

    crash_run.py BACKEND STORE SESSION_ID PHASE MARKER

BACKEND is ``convlog`` (a ``ConvlogSession`` on the convlog store STORE) or
``sqlite`` (the SDK's ``SQLiteSession`` on the database file STORE). PHASE:

- ``tool``: the model asks for the ``block`` tool; the tool creates MARKER,
  prints ``TOOL_STARTED`` and blocks until the parent kills the process (it
  reads its standard input, which the parent never writes; on end of input,
  the parent being gone, it exits).
- ``approval``: the model asks for ``block_approved``, which needs an
  approval: the run stops with the call pending approval (the SDK stores the
  call without an output); the host approves it and resumes the run, and the
  tool blocks as above.
- ``next``: a new run with the input ``again``; the model answers with a
  message. Prints, on its last line, a JSON object: ``request`` (the input
  items of the model request the SDK built), ``items`` (``get_items()``
  after the run) and, for convlog, ``calls`` (each recorded tool call's
  status in the neutral entries).

The model is scripted (no network); tracing is off.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, Union

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled

import convlog
from convlog.integrations.openai_agents import ConvlogSession
from openai_agents_support.scripted import ScriptedModel, call, say


def _block(marker: str) -> str:
    Path(marker).write_text("started")
    print("TOOL_STARTED", flush=True)
    sys.stdin.readline()  # never written: blocks until SIGKILL
    os._exit(3)  # the parent went away without killing us


async def main(backend: str, store_path: str, session_id: str, phase: str, marker: str) -> None:
    set_tracing_disabled(True)
    store = None
    session: Union[ConvlogSession, SQLiteSession]
    if backend == "convlog":
        store = convlog.Store.open(store_path)
        session = ConvlogSession(session_id, store)
    else:
        session = SQLiteSession(session_id, store_path)

    @function_tool
    async def block(city: str) -> str:
        """Looks the city up (blocks: the test kills the process here)."""
        return await asyncio.to_thread(_block, marker)

    @function_tool(needs_approval=True)
    async def block_approved(city: str) -> str:
        """Books the city (needs an approval; blocks like ``block``)."""
        return await asyncio.to_thread(_block, marker)

    config = RunConfig(tracing_disabled=True)
    if phase == "tool":
        model = ScriptedModel([[call("block", '{"city":"Paris"}', "call_block")]])
        agent = Agent(name="a", model=model, tools=[block, block_approved])
        await Runner.run(agent, "go", session=session, run_config=config)
        raise AssertionError("the tool returned")
    if phase == "approval":
        model = ScriptedModel([[call("block_approved", '{"city":"Rome"}', "call_approved")]])
        agent = Agent(name="a", model=model, tools=[block, block_approved])
        result = await Runner.run(agent, "go", session=session, run_config=config)
        assert [i.raw_item.call_id for i in result.interruptions] == ["call_approved"]  # type: ignore[union-attr]
        state = result.to_state()
        state.approve(result.interruptions[0])
        await Runner.run(agent, state, session=session, run_config=config)
        raise AssertionError("the tool returned")
    assert phase == "next", phase
    model = ScriptedModel([[say("answered", "msg_next")]])
    agent = Agent(name="a", model=model, tools=[block, block_approved])
    result = await Runner.run(agent, "again", session=session, run_config=config)
    assert result.final_output == "answered"
    report: dict[str, Any] = {"request": model.requests[0], "items": await session.get_items()}
    if store is not None:
        report["calls"] = {
            tool_call["call_id"]: tool_call["status"]
            for entry in store.conversation(session_id).entries
            for tool_call in entry["tool_calls"]
        }
    print(json.dumps(report), flush=True)
    session.close()
    if store is not None:
        store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
