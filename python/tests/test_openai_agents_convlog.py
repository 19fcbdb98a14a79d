"""What ConvlogSession records in convlog: neutral entries beside the verbatim
items, evaluations and turns, the audit of pop_item and clear_session, the
state shared by session objects, writes by others, read-only followers,
limits, and the flusher that appends concurrent sessions together."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, SessionSettings, function_tool, set_tracing_disabled

import convlog
import convlog.integrations.openai_agents as openai_agents
from convlog.integrations.openai_agents import (
    CALL_ID_KEY,
    CLEAR_KIND,
    ITEM_KEY,
    POP_KIND,
    TYPE_KEY,
    ConvlogSession,
)
from openai_agents_support.scripted import ScriptedModel, call, say

set_tracing_disabled(True)  # no trace export: nothing may reach the network


@pytest.fixture
def store(tmp_path: Path) -> Iterator[convlog.Store]:
    with convlog.Store.open(tmp_path / "store") as opened:
        yield opened


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def entries(store: convlog.Store, session_id: str) -> list[dict[str, Any]]:
    return store.conversation(session_id).entries


@pytest.mark.asyncio
async def test_a_run_is_recorded_as_neutral_entries(store: convlog.Store) -> None:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return f"{city}: 18C"

    model = ScriptedModel([[call("get_weather", '{"city":"Paris"}', "call_w")], [say("It is 18C.")]])
    session = ConvlogSession("run", store)
    agent = Agent(name="a", model=model, tools=[get_weather])
    await Runner.run(agent, "Weather in Paris?", session=session, run_config=RunConfig(tracing_disabled=True))

    items = await session.get_items()
    got = entries(store, "run")
    assert [e["role"] for e in got] == ["user", "assistant", "tool", "assistant"]
    assert [json.loads(e["metadata"][ITEM_KEY]) for e in got] == items
    assert [e["metadata"][TYPE_KEY] for e in got] == [
        "message", "function_call", "function_call_output", "message",
    ]
    assert [e["metadata"].get(CALL_ID_KEY) for e in got] == [None, "call_w", "call_w", None]
    assert got[0]["content"] == "Weather in Paris?"
    (tool_call,) = got[1]["tool_calls"]
    assert (tool_call["call_id"], tool_call["name"], tool_call["arguments"]) == (
        "call_w", "get_weather", '{"city":"Paris"}',
    )
    assert tool_call["status"] == "completed"  # its result entry completed it
    assert (got[2]["tool_call_id"], got[2]["tool_name"], got[2]["content"]) == (
        "call_w", "get_weather", "Paris: 18C",
    )
    assert got[3]["content"] == "It is 18C."
    assert len({e["evaluation_id"] for e in got}) == 1
    assert [e["turn"] for e in got] == [0, 1, 1, 2]
    assert [e["sequence"] for e in got] == [0, 1, 2, 3]


@pytest.mark.asyncio
async def test_each_run_is_an_evaluation(store: convlog.Store) -> None:
    session = ConvlogSession("runs", store)
    await session.add_items([user("one")])
    await session.add_items([{"role": "assistant", "content": "1"}])
    await session.add_items([user("two")])
    conversation = store.conversation("runs")
    assert len(conversation.evaluations) == 2
    first, second = conversation.evaluations
    assert [e["evaluation_id"] for e in conversation.entries] == [first, first, second]
    # A new session object continues where the store says.
    again = ConvlogSession("runs-2", store)
    await again.add_items([user("a"), {"role": "assistant", "content": "b"}])
    assert [e["turn"] for e in entries(store, "runs-2")] == [0, 1]


@pytest.mark.asyncio
async def test_items_without_a_neutral_form(store: convlog.Store) -> None:
    session = ConvlogSession("opaque", store)
    future_item: Any = {"type": "x_future_item", "data": [1, {"a": None}]}
    developer: Any = {"role": "developer", "content": "Be brief."}
    long_name: Any = {"type": "function_call", "call_id": "c1", "name": "n" * 300, "arguments": "{}"}
    await session.add_items([developer, copy.deepcopy(future_item), copy.deepcopy(long_name)])
    got = entries(store, "opaque")
    assert (got[0]["role"], got[0]["content"], got[0]["metadata"]["convlog.openai_role"]) == (
        "system", "Be brief.", "developer",
    )
    for entry, kind in zip(got[1:], ["x_future_item", "function_call"]):
        assert (entry["role"], entry["content"], entry["tool_calls"]) == ("assistant", None, [])
        assert entry["metadata"][TYPE_KEY] == kind
    assert json.loads(got[2]["metadata"][ITEM_KEY]) == long_name


@pytest.mark.asyncio
async def test_text_without_a_utf8_form_is_kept_verbatim(store: convlog.Store) -> None:
    """A lone surrogate is valid in JSON text (escaped) but has no UTF-8 form:
    the item keeps it; the neutral entry goes without that text."""
    session = ConvlogSession("surrogate", store)
    item = user("half a pair: \ud83d")
    await session.add_items([item])
    assert await session.get_items() == [item]
    assert entries(store, "surrogate")[0]["content"] is None


@pytest.mark.asyncio
async def test_pop_item_keeps_what_it_removed_in_the_log(store: convlog.Store) -> None:
    session = ConvlogSession("audit", store)
    await session.add_items([user("kept"), user("removed")])
    assert await session.pop_item() == user("removed")
    assert [e["content"] for e in entries(store, "audit")] == ["kept"]
    events = [event for _, event in store.events(conversation_id="audit")]
    assert [e["type"] for e in events] == [
        "conversation_recorded", "conversation_recorded", "custom", "messages_replaced",
    ]
    assert json.loads(events[1]["entry"]["metadata"][ITEM_KEY]) == user("removed")  # still in the log
    assert events[2]["kind"] == POP_KIND
    assert json.loads(events[2]["payload"]) == {"item": user("removed")}
    assert [e["content"] for e in events[3]["entries"]] == ["kept"]


@pytest.mark.asyncio
async def test_clear_session_keeps_what_it_removed_in_the_log(store: convlog.Store) -> None:
    session = ConvlogSession("cleared", store)
    await session.add_items([user("a"), user("b")])
    await session.clear_session()
    await session.clear_session()  # nothing left: nothing recorded
    assert entries(store, "cleared") == []
    events = [event for _, event in store.events(conversation_id="cleared")]
    assert [e["type"] for e in events] == [
        "conversation_recorded", "conversation_recorded", "custom", "messages_replaced",
    ]
    assert events[2]["kind"] == CLEAR_KIND
    assert json.loads(events[2]["payload"]) == {"items": 2, "entries": 2}
    assert events[3]["entries"] == []


@pytest.mark.asyncio
async def test_popping_an_output_leaves_its_call_unfinished(store: convlog.Store) -> None:
    session = ConvlogSession("reopen", store)
    fc: Any = {"type": "function_call", "call_id": "c9", "name": "t", "arguments": "{}"}
    out: Any = {"type": "function_call_output", "call_id": "c9", "output": "r"}
    await session.add_items([user("q"), fc, out])
    assert await session.pop_item() == out
    got = entries(store, "reopen")
    assert got[1]["tool_calls"][0]["status"] == "pending"  # no result answers it now
    assert await session.get_items() == [user("q")]  # the call alone is not handed out


@pytest.mark.asyncio
async def test_session_objects_of_one_id_share_their_state(store: convlog.Store) -> None:
    first, second = ConvlogSession("same", store), ConvlogSession("same", store)
    await first.add_items([user("1")])
    assert await second.get_items() == [user("1")]
    await asyncio.gather(
        *(session.add_items([user(f"{n}")]) for n in range(2, 22) for session in (first, second))
    )
    assert len(await first.get_items()) == 41
    assert await first.get_items() == await second.get_items()
    last = (await first.get_items(limit=1))[0]
    assert await second.pop_item() == last
    assert len(await first.get_items()) == 40


@pytest.mark.asyncio
async def test_writes_by_others_are_noticed(store: convlog.Store) -> None:
    session = ConvlogSession("shared-conversation", store)
    await session.add_items([user("a"), user("b")])
    assert len(await session.get_items()) == 2
    # The host replaces the conversation's messages itself (as `convlog
    # set-messages` would), keeping the first.
    first = entries(store, "shared-conversation")[0]
    store.append([
        {"type": "messages_replaced", "conversation_id": "shared-conversation",
         "entries": [{k: first[k] for k in ("evaluation_id", "role", "content", "metadata")}]},
    ])
    assert await session.get_items() == [user("a")]
    # An entry another writer records (no SDK item in it) is not an item.
    store.append([
        {"type": "conversation_recorded", "conversation_id": "shared-conversation",
         "entry": {"evaluation_id": "host", "role": "user", "content": "from the host"}},
    ])
    assert await session.get_items() == [user("a")]
    await session.add_items([user("c")])
    assert await session.get_items() == [user("a"), user("c")]
    assert await session.pop_item() == user("c")
    assert [e["content"] for e in entries(store, "shared-conversation")] == ["a", "from the host"]


@pytest.mark.asyncio
async def test_a_read_only_store_follows_the_writer(tmp_path: Path, store: convlog.Store) -> None:
    writer = ConvlogSession("followed", store)
    with convlog.Store.open(tmp_path / "store", read_only=True) as follower_store:
        follower = ConvlogSession("followed", follower_store)
        assert await follower.get_items() == []
        await writer.add_items([user("1")])
        assert await follower.get_items() == [user("1")]
        await writer.add_items([user("2")])
        assert await follower.get_items() == [user("1"), user("2")]
        with pytest.raises(convlog.ReadOnlyError):
            await follower.add_items([user("3")])
        assert await writer.get_items() == [user("1"), user("2")]


@pytest.mark.asyncio
async def test_a_path_opens_one_store_for_its_sessions(tmp_path: Path) -> None:
    path = tmp_path / "by-path"
    a, b = ConvlogSession("a", path), ConvlogSession("b", str(path))
    assert a.store is b.store
    await a.add_items([user("x")])
    await b.add_items([user("y")])
    a.close()
    assert await b.get_items() == [user("y")]
    b.close()
    assert a.store.closed
    with convlog.Store.open(path) as reopened:
        assert ConvlogSession("a", reopened).store is reopened
        assert [e["content"] for e in entries(reopened, "a")] == ["x"]


@pytest.mark.asyncio
async def test_bad_input_is_refused_with_what_and_where(store: convlog.Store) -> None:
    with pytest.raises(ValueError, match="session_id must be 1 to 256 bytes"):
        ConvlogSession("s" * 257, store)
    with pytest.raises(ValueError, match="session_id"):
        ConvlogSession("", store)
    with pytest.raises(TypeError, match="Unknown session settings: limt"):
        ConvlogSession("settings", store, session_settings={"limt": 3})
    assert ConvlogSession("settings", store, session_settings={"limit": 3}).session_settings == (
        SessionSettings(limit=3)
    )
    session = ConvlogSession("bad", store)
    with pytest.raises(TypeError, match="item 1 is not JSON-serializable"):
        unserializable: Any = {"role": "user", "content": object()}
        await session.add_items([user("ok"), unserializable])
    with pytest.raises(TypeError, match="item 0 is a str, not a dict"):
        not_a_dict: Any = "text"
        await session.add_items([not_a_dict])
    with pytest.raises(ValueError, match="item 0 is .* bytes of JSON"):
        await session.add_items([user("x" * (openai_agents.TEXT_BYTES_MAX + 1))])
    with pytest.raises(ValueError, match="10001 items in one call"):
        await session.add_items([user("x")] * (openai_agents.ADD_ITEMS_MAX + 1))
    assert await session.get_items() == []  # nothing of a refused call was stored
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        await session.get_items()


@pytest.mark.asyncio
async def test_a_large_item_is_kept_verbatim_only(store: convlog.Store) -> None:
    session = ConvlogSession("large", store)
    # Near the per-item limit: its text beside its JSON would near 16 MiB an event.
    big = user("x" * (openai_agents.TEXT_BYTES_MAX - 100))
    await session.add_items([big, user("small")])
    assert await session.get_items() == [big, user("small")]
    got = entries(store, "large")
    assert (got[0]["role"], got[0]["content"]) == ("assistant", None)
    assert got[1]["content"] == "small"


class _RefusingStore:
    """The real store, except that it refuses any batch holding a poisoned
    item (as the store would refuse bad input): the flusher must fail only
    the call that brought it."""

    def __init__(self, store: convlog.Store) -> None:
        self.store = store
        self.batches: list[int] = []

    def append(self, events: list[dict[str, Any]], expect_conversation: Any = None) -> range:
        self.batches.append(len(events))
        if any("poison" in json.dumps(event) for event in events):
            raise convlog.InvalidEventError("refused: the batch holds poison")
        return self.store.append(events, expect_conversation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.mark.asyncio
async def test_concurrent_sessions_are_appended_together_and_fail_alone(store: convlog.Store) -> None:
    sessions = [ConvlogSession(f"f{n}", store) for n in range(6)]
    for session in sessions:
        await session.add_items([user("first")])
    flusher = sessions[0]._state.flusher
    refusing = _RefusingStore(store)
    flusher.store = refusing  # type: ignore[assignment]
    try:
        results = await asyncio.gather(
            *(
                s.add_items([user("poison" if n == 3 else f"second {n}")])
                for n, s in enumerate(sessions)
            ),
            return_exceptions=True,
        )
    finally:
        flusher.store = store
    assert [type(r).__name__ for r in results] == ["NoneType"] * 3 + ["InvalidEventError"] + ["NoneType"] * 2
    assert refusing.batches[0] > 1  # the calls went together first
    for n, session in enumerate(sessions):
        expected = [user("first")] + ([] if n == 3 else [user(f"second {n}")])
        assert await session.get_items() == expected
        assert [e["content"] for e in entries(store, f"f{n}")] == [i["content"] for i in expected]


@pytest.mark.asyncio
async def test_a_cancelled_add_items_is_stored_or_not_never_half(store: convlog.Store) -> None:
    session = ConvlogSession("cancelled", store)
    task = asyncio.ensure_future(session.add_items([user("a"), user("b")]))
    await asyncio.sleep(0)  # let it submit its batch (no timing: one loop turn)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # add_items waited for its batch before re-raising the cancellation: stored.
    assert await session.get_items() == [user("a"), user("b")]


def test_the_example_runs(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "openai_agents_session.py"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(
        [sys.executable, str(example), str(tmp_path / "store")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Rome: 18C and sunny (I remember 7 items" in done.stdout
    assert "The session holds 8 items" in done.stdout


@pytest.mark.asyncio
async def test_a_session_read_back_from_the_store(tmp_path: Path, store: convlog.Store) -> None:
    """No state of the session left in the process: a new session object
    reads it from the store (pairing included) and continues its run."""
    from test_openai_agents_protocol import CATALOGUE

    stored: list[Any] = copy.deepcopy(CATALOGUE) + [
        {"type": "reasoning", "id": "rs_9", "summary": []},
        {"type": "function_call", "call_id": "call_9", "name": "late", "arguments": "{}"},
        {"type": "custom_tool_call_output", "call_id": "call_orphan", "output": "x"},
    ]
    session = ConvlogSession("reread", store)
    await session.add_items(copy.deepcopy(stored))
    expected = await session.get_items()
    assert expected == CATALOGUE
    del session
    openai_agents._recent.clear()  # the process keeps no state of it now
    gc.collect()
    again = ConvlogSession("reread", store)
    assert await again.get_items() == expected
    with convlog.Store.open(tmp_path / "store", read_only=True) as follower:
        assert await ConvlogSession("reread", follower).get_items() == expected
    # It continues the same run: the output of the late call completes it.
    await again.add_items([{"type": "function_call_output", "call_id": "call_9", "output": "done"}])
    got = entries(store, "reread")
    assert len({e["evaluation_id"] for e in got}) == 1
    assert [e["sequence"] for e in got] == list(range(len(stored) + 1))
    assert got[-1]["turn"] == got[-3]["turn"]  # the output has its call's turn
    assert got[-3]["tool_calls"][0]["status"] == "completed"
    assert (await again.get_items())[-3:] == stored[-3:-1] + [
        {"type": "function_call_output", "call_id": "call_9", "output": "done"}
    ]


@pytest.mark.asyncio
async def test_resume_and_every_render_read_an_sdk_session(store: convlog.Store) -> None:
    """A session the SDK wrote, with a call left without its output (an
    approval never resumed): resume reports it unfinished, and every provider
    render drops it (or answers it with an error), never sending it dangling."""
    from test_openai_agents_protocol import CATALOGUE

    session = ConvlogSession("rendered", store)
    await session.add_items(copy.deepcopy(CATALOGUE))
    await session.add_items([
        user("Book Rome"),
        {"type": "function_call", "call_id": "call_book", "name": "book", "arguments": '{"city":"Rome"}'},
    ])
    state = store.resume("rendered")
    assert [u["call"]["call_id"] for u in state["unfinished_calls"]] == ["call_book"]
    assert state["finished"] is False
    first_run = store.conversation("rendered").evaluations[0]
    finished = store.resume("rendered", evaluation_id=first_run)
    assert sorted(f["call"]["call_id"] for f in finished["finished_calls"]) == ["call_1", "call_2"]
    for provider in ("openai", "openai-responses", "anthropic", "gemini", "ollama"):
        dropped = store.render("rendered", provider)
        assert dropped["unfinished_calls"] == ["call_book"], provider
        assert "call_book" not in json.dumps(dropped["body"]), provider
        assert "call_1" in json.dumps(dropped["body"]) or provider == "ollama", provider
        answered = store.render("rendered", provider, pending="error")
        assert "tool call was interrupted before it finished" in json.dumps(answered["body"]), provider
    openai = store.render("rendered", "openai")["body"]["messages"]
    assert [m["role"] for m in openai[:3]] == ["system", "developer", "user"]
    assert {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"} in openai


@pytest.mark.asyncio
async def test_a_session_object_per_request_finds_the_cache(store: convlog.Store) -> None:
    first = ConvlogSession("per-request", store)
    await first.add_items([user("1")])
    state = first._state
    first.close()
    del first
    gc.collect()
    second = ConvlogSession("per-request", store)
    assert second._state is state  # kept: no reading the conversation again
    assert await second.get_items() == [user("1")]
    kept = weakref.ref(state)
    del second, state
    for n in range(openai_agents.STATES_KEPT_MAX):
        ConvlogSession(f"other-{n}", store)
    gc.collect()
    assert kept() is None  # the least recently used went
    assert await ConvlogSession("per-request", store).get_items() == [user("1")]
