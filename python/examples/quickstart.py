"""convlog from Python in one file: record a conversation, die mid tool call,
resume, render for two providers, curate, verify.

    python python/examples/quickstart.py [STORE_DIR]

Without an argument the store goes in a new temporary directory.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import convlog


def recorded(conversation_id: str, **entry: Any) -> dict[str, Any]:
    return {"type": "conversation_recorded", "conversation_id": conversation_id, "entry": entry}


def main(directory: Path) -> None:
    path = directory / "store"
    calls = [
        {"call_id": "call_paris", "name": "weather", "arguments": '{"city":"paris"}'},
        {"call_id": "call_rome", "name": "weather", "arguments": '{"city":"rome"}'},
    ]
    # A host records each step the moment it happens, then dies while the
    # Rome call runs.
    with convlog.Store.open(path) as store:
        store.append(
            [
                recorded("trip", evaluation_id="e1", role="system", content="You report weather."),
                recorded("trip", evaluation_id="e1", role="user", content="Weather in Paris and Rome?"),
                recorded("trip", evaluation_id="e1", role="assistant", turn=1, tool_calls=calls),
            ]
        )
        store.append(
            [
                {"type": "tool_status", "conversation_id": "trip", "evaluation_id": "e1",
                 "call_id": "call_rome", "status": "running"},
                recorded("trip", evaluation_id="e1", role="tool", turn=1, tool_call_id="call_paris",
                         tool_name="weather", content="18C, sunny"),
            ]
        )

    # A new host: what is left?
    with convlog.Store.open(path) as store:
        state = store.resume("trip")
        print("finished:", [c["call"]["call_id"] for c in state["finished_calls"]])
        print("to run again:", [c["call"]["call_id"] for c in state["unfinished_calls"]])

        # Never send an unfinished call to a provider.
        anthropic = store.render("trip", "anthropic")
        print("anthropic messages:", len(anthropic["body"]["messages"]),
              "left out:", anthropic["unfinished_calls"])

        # Run the call again, marked as resumed, and finish the evaluation.
        call = state["unfinished_calls"][0]["call"]
        store.append(
            [
                {"type": "tool_status", "conversation_id": "trip", "evaluation_id": "e1",
                 "call_id": call["call_id"], "status": "running", "resumed": True},
                recorded("trip", evaluation_id="e1", role="tool", turn=state["turn"],
                         sequence=state["next_sequence"], tool_call_id=call["call_id"],
                         tool_name=call["name"], content="21C"),
                recorded("trip", evaluation_id="e1", role="assistant", turn=state["next_turn"],
                         content="Paris: 18C. Rome: 21C."),
            ]
        )
        assert store.resume("trip")["finished"]
        openai = store.render("trip", "openai", history=convlog.HistoryManager.sliding_window(2))
        print("openai, curated to a window of 2:", [m["role"] for m in openai["messages"]])

    report = convlog.verify(path)
    print(f"verified: {report['events']} events in {report['segments']} segment(s)")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as temporary:
            main(Path(temporary))
