"""The OpenAI Agents SDK ``Session`` protocol, run against ``ConvlogSession`` and
the SDK's own ``SQLiteSession``: both must pass. Where they differ on purpose
(the crash policy), the test says which backend does what."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional, Union

import pytest
from agents import (
    Agent,
    Runner,
    RunState,
    SessionSettings,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session

import convlog
from convlog.integrations.openai_agents import ConvlogSession
from openai_agents_support.scripted import ScriptedModel, call, dangling, say

set_tracing_disabled(True)  # no trace export: nothing may reach the network

AnySession = Union[ConvlogSession, SQLiteSession]
Factory = Callable[..., AnySession]

BACKENDS = ["convlog", "sqlite"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[convlog.Store]:
    with convlog.Store.open(tmp_path / "store") as opened:
        yield opened


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(backend: str, tmp_path: Path, store: convlog.Store) -> Iterator[Factory]:
    """Sessions of one store (convlog) or one database file (SQLite)."""
    opened: list[AnySession] = []

    def factory(session_id: str, limit: Optional[int] = None) -> AnySession:
        settings = SessionSettings(limit=limit) if limit is not None else None
        session: AnySession
        if backend == "convlog":
            session = ConvlogSession(session_id, store, session_settings=settings)
        else:
            session = SQLiteSession(session_id, tmp_path / "agents.db", session_settings=settings)
        opened.append(session)
        return session

    yield factory
    for session in opened:
        session.close()


def _json(items: Any) -> Any:
    """The JSON value of items (what "JSON-equal" compares)."""
    return json.loads(json.dumps(items))


def user(text: str) -> Any:
    return {"role": "user", "content": text}


# Every kind of item the SDK may store, with its optional fields, plus types
# convlog's neutral model does not know. Calls come with their outputs (a call
# without one is the crash policy's business, tested below).
CATALOGUE: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": "Prefer metric units."},
    {"role": "user", "content": "Weather in Paris? \u00e9\u00e8 \U0001f600"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "and this picture"},
            {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "input_file", "file_id": "file-123"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Need the weather tool."}],
        "encrypted_content": "gAAAAABopaque==",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
    {
        "type": "function_call",
        "call_id": "call_2",
        "name": "get_map",
        "arguments": "not json at all",
    },
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [
            {"type": "input_text", "text": "map attached"},
            {"type": "input_image", "image_url": "https://example.invalid/map.png"},
        ],
    },
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_3",
        "action": {"type": "click", "x": 10, "y": 20, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "call_3",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
        "acknowledged_safety_checks": [],
    },
    {"type": "custom_tool_call", "call_id": "call_4", "name": "grammar", "input": "x = 1"},
    {"type": "custom_tool_call_output", "call_id": "call_4", "output": "ok"},
    {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "call_5",
        "action": {"type": "exec", "command": ["ls", "-l"], "env": {}},
        "status": "completed",
    },
    {"type": "local_shell_call_output", "id": "call_5", "call_id": "call_5", "output": "total 0"},
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "fs", "tools": [{"name": "read", "input_schema": {}}]},
    {
        "type": "mcp_call",
        "id": "mcp_1",
        "server_label": "fs",
        "name": "read",
        "arguments": "{}",
        "output": "contents",
        "error": None,
    },
    {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "fs", "name": "write", "arguments": "{}"},
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "paris"}},
    {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed", "results": None},
    {"type": "item_reference", "id": "msg_old"},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
    {"type": "x_future_item", "payload": {"nested": [1, 2.5, None, True, {"k": "v"}]}},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "It is 18C.", "annotations": [], "logprobs": []},
            {"type": "refusal", "refusal": "No map."},
        ],
    },
]


@pytest.mark.asyncio
async def test_is_a_session(make: Factory) -> None:
    session = make("s1")
    assert isinstance(session, Session)
    assert session.session_id == "s1"
    assert session.session_settings is not None and session.session_settings.limit is None


@pytest.mark.asyncio
async def test_empty_session(make: Factory) -> None:
    session = make("empty")
    assert await session.get_items() == []
    assert await session.get_items(limit=3) == []
    assert await session.pop_item() is None
    await session.clear_session()
    await session.add_items([])
    assert await session.get_items() == []


@pytest.mark.asyncio
async def test_every_item_type_round_trips(make: Factory) -> None:
    session = make("catalogue")
    await session.add_items(copy.deepcopy(CATALOGUE))
    assert _json(await session.get_items()) == _json(CATALOGUE)


@pytest.mark.asyncio
async def test_batches_keep_their_order(make: Factory) -> None:
    session = make("batches")
    for start in range(0, len(CATALOGUE), 4):
        await session.add_items(copy.deepcopy(CATALOGUE[start : start + 4]))
    assert _json(await session.get_items()) == _json(CATALOGUE)


@pytest.mark.asyncio
async def test_items_survive_a_new_session_object(make: Factory) -> None:
    first = make("durable")
    await first.add_items(copy.deepcopy(CATALOGUE))
    second = make("durable")
    assert _json(await second.get_items()) == _json(CATALOGUE)


@pytest.mark.asyncio
async def test_limit_gives_the_latest_items_in_order(make: Factory) -> None:
    session = make("limit")
    items = [user(f"m{i}") for i in range(5)]
    await session.add_items(items)
    assert await session.get_items(limit=2) == items[3:]
    assert await session.get_items(limit=1) == items[4:]
    assert await session.get_items(limit=5) == items
    assert await session.get_items(limit=50) == items
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == items  # SQLite's LIMIT: negative is all
    assert await session.get_items() == items


@pytest.mark.asyncio
async def test_settings_limit_applies_and_an_explicit_limit_wins(make: Factory) -> None:
    session = make("settings", limit=2)
    assert session.session_settings is not None and session.session_settings.limit == 2
    items = [user(f"m{i}") for i in range(4)]
    await session.add_items(items)
    assert await session.get_items() == items[2:]
    assert await session.get_items(limit=3) == items[1:]


@pytest.mark.asyncio
async def test_pop_item_removes_the_latest(make: Factory) -> None:
    session = make("pop")
    items = [user(f"m{i}") for i in range(3)]
    await session.add_items(items)
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    await session.add_items([user("m3")])
    assert await session.get_items() == [items[0], items[1], user("m3")]
    assert await session.pop_item() == user("m3")
    assert await session.pop_item() == items[1]
    assert await session.pop_item() == items[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []
    assert await make("pop").get_items() == []


@pytest.mark.asyncio
async def test_clear_session_removes_everything(make: Factory) -> None:
    session = make("clear")
    await session.add_items(copy.deepcopy(CATALOGUE))
    await session.clear_session()
    assert await session.get_items() == []
    assert await make("clear").get_items() == []
    await session.add_items([user("again")])
    assert await session.get_items() == [user("again")]


@pytest.mark.asyncio
async def test_sessions_are_separate(make: Factory) -> None:
    a, b = make("a"), make("b")
    await a.add_items([user("for a")])
    await b.add_items([user("for b")])
    await a.clear_session()
    assert await a.get_items() == []
    assert await b.get_items() == [user("for b")]


@pytest.mark.asyncio
async def test_returned_items_are_copies(make: Factory) -> None:
    session = make("copies")
    item: Any = {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    await session.add_items([item])
    item["content"][0]["text"] = "changed by the caller"
    got: Any = await session.get_items()
    assert got[0]["content"][0]["text"] == "hi"
    got[0]["content"][0]["text"] = "changed again"
    assert _json(await session.get_items()) == [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


@pytest.mark.asyncio
async def test_runner_reads_and_writes_the_session(make: Factory) -> None:
    session = make("runner")
    model = ScriptedModel([[say("Hi there", "msg_a")], [say("Still here", "msg_b")]])
    agent = Agent(name="assistant", model=model)
    first = await Runner.run(agent, "Hello", session=session)
    assert first.final_output == "Hi there"
    second = await Runner.run(agent, "Are you there?", session=session)
    assert second.final_output == "Still here"
    request: Any = model.requests[1]
    assert [i.get("role") for i in request] == ["user", "assistant", "user"]
    assert request[0] == user("Hello") and request[2] == user("Are you there?")
    stored: Any = await session.get_items()
    assert len(stored) == 4 and stored[3]["id"] == "msg_b"


@pytest.mark.asyncio
async def test_concurrent_tasks_on_many_sessions(make: Factory) -> None:
    sessions = [make(f"task-{n}") for n in range(8)]

    async def writer(session: AnySession, n: int) -> None:
        for i in range(10):
            await session.add_items([user(f"{n}:{i}")])

    await asyncio.gather(*(writer(s, n) for n, s in enumerate(sessions)))
    for n, session in enumerate(sessions):
        assert await session.get_items() == [user(f"{n}:{i}") for i in range(10)]


@pytest.mark.asyncio
async def test_concurrent_tasks_on_one_session(make: Factory) -> None:
    session = make("shared")
    await asyncio.gather(*(session.add_items([user(f"m{i}"), user(f"m{i}b")]) for i in range(20)))
    got: Any = await session.get_items()
    assert sorted(item["content"] for item in got) == sorted(
        [f"m{i}" for i in range(20)] + [f"m{i}b" for i in range(20)]
    )
    for index in range(0, 40, 2):  # each batch stays together
        assert got[index + 1]["content"] == got[index]["content"] + "b"


def test_threads_with_their_own_event_loops(make: Factory) -> None:
    sessions = [make(f"thread-{n}") for n in range(4)]
    shared = make("thread-shared")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        async def run() -> None:
            for i in range(10):
                await sessions[n].add_items([user(f"{n}:{i}")])
                await shared.add_items([user(f"{n}:{i}")])
                assert (await sessions[n].get_items(limit=1)) == [user(f"{n}:{i}")]

        try:
            asyncio.run(run())
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    async def check() -> None:
        for n, session in enumerate(sessions):
            assert await session.get_items() == [user(f"{n}:{i}") for i in range(10)]
        got: Any = await shared.get_items()
        assert len(got) == 40
        for n in range(4):
            assert [i["content"] for i in got if i["content"].startswith(f"{n}:")] == [
                f"{n}:{i}" for i in range(10)
            ]

    asyncio.run(check())


# ----------------------------------------------------------- the crash policy

CALL: Any = {"type": "function_call", "call_id": "call_x", "name": "lookup", "arguments": "{}"}
OUTPUT: Any = {"type": "function_call_output", "call_id": "call_x", "output": "found"}
REASONING: Any = {"type": "reasoning", "id": "rs_x", "summary": []}


@pytest.mark.asyncio
async def test_a_call_without_its_output(make: Factory, backend: str) -> None:
    """ConvlogSession never hands out a call without its output (nor the
    reasoning that led to it); SQLiteSession returns what it stored and leaves
    the SDK's request builder to drop it."""
    session = make("dangling")
    stored: list[Any] = [user("q"), copy.deepcopy(REASONING), copy.deepcopy(CALL)]
    await session.add_items(copy.deepcopy(stored))
    got = await session.get_items()
    if backend == "convlog":
        assert got == [user("q")]
        assert await session.get_items(limit=1) == [user("q")]
    else:
        assert _json(got) == stored
    # Its output arrives later (an approval resumed): the pair is whole again.
    await session.add_items([copy.deepcopy(OUTPUT)])
    assert _json(await session.get_items()) == stored + [OUTPUT]


@pytest.mark.asyncio
async def test_an_output_without_its_call(make: Factory, backend: str) -> None:
    session = make("orphan")
    await session.add_items([user("q"), copy.deepcopy(OUTPUT), user("next")])
    got = await session.get_items()
    if backend == "convlog":
        assert got == [user("q"), user("next")]
    else:
        assert _json(got) == [user("q"), OUTPUT, user("next")]


@pytest.mark.asyncio
async def test_a_limit_that_cuts_a_pair(make: Factory, backend: str) -> None:
    session = make("window")
    await session.add_items([user("q"), copy.deepcopy(CALL), copy.deepcopy(OUTPUT), user("next")])
    got = await session.get_items(limit=2)
    if backend == "convlog":
        assert got == [user("next")]  # the output's call is outside the window
    else:
        assert _json(got) == [OUTPUT, user("next")]
    assert _json(await session.get_items(limit=3)) == [CALL, OUTPUT, user("next")]


@pytest.mark.asyncio
async def test_the_next_request_has_no_dangling_call(make: Factory) -> None:
    """Both backends: the request the SDK builds from a session holding a
    call without its output has no dangling call."""
    session = make("request")
    await session.add_items([user("q"), copy.deepcopy(CALL)])
    model = ScriptedModel([[say("answer")]])
    await Runner.run(Agent(name="a", model=model), "again", session=session)
    assert dangling(model.requests[0]) == []
    assert model.requests[0][-1] == user("again")


@pytest.mark.asyncio
async def test_pop_item_of_a_session_with_a_dangling_call(make: Factory, backend: str) -> None:
    session = make("pop-dangling")
    await session.add_items([user("q"), copy.deepcopy(CALL)])
    popped = await session.pop_item()
    if backend == "convlog":
        # The last item get_items returns; the call stays stored, unseen.
        assert popped == user("q")
        assert await session.get_items() == []
        await session.add_items([copy.deepcopy(OUTPUT)])
        assert _json(await session.get_items()) == [CALL, OUTPUT]
    else:
        assert _json(popped) == CALL
        assert await session.get_items() == [user("q")]



@pytest.mark.asyncio
async def test_an_approved_call_resumed_completes(make: Factory) -> None:
    """The SDK stores a call that waits for an approval without its output;
    the approved run adds the output and the answer (the state round-trips
    through JSON, as a host resuming in another process does)."""

    @function_tool(needs_approval=True)
    def book(city: str) -> str:
        """Books a trip."""
        return f"booked {city}"

    session = make("approval")
    model = ScriptedModel([[call("book", '{"city":"Rome"}', "call_book")], [say("Booked.")]])
    agent = Agent(name="a", model=model, tools=[book])
    first = await Runner.run(agent, "Book Rome", session=session)
    assert len(first.interruptions) == 1
    state = await RunState.from_json(agent, first.to_state().to_json())
    state.approve(state.get_interruptions()[0])
    second = await Runner.run(agent, state, session=session)
    assert second.final_output == "Booked."
    items: Any = await session.get_items()
    assert [i.get("type", "message") for i in items] == [
        "message", "function_call", "function_call_output", "message",
    ]
    assert items[2]["output"] == "booked Rome"
    assert dangling(model.requests[1]) == []


@pytest.mark.asyncio
async def test_a_streamed_run_records_the_same_items(make: Factory) -> None:
    @function_tool
    def lookup(city: str) -> str:
        """Looks a city up."""
        return f"{city}: found"

    from agents.testing import ScriptedModel as SDKScriptedModel
    from agents.testing import assistant_message, function_call

    session = make("streamed")
    model = SDKScriptedModel(
        [[function_call("lookup", {"city": "Oslo"}, call_id="call_s")], [assistant_message("Found.")]]
    )
    result = Runner.run_streamed(Agent(name="a", model=model, tools=[lookup]), "Oslo?", session=session)
    async for _ in result.stream_events():
        pass
    assert result.final_output == "Found."
    items: Any = await session.get_items()
    assert [i.get("type", "message") for i in items] == [
        "message", "function_call", "function_call_output", "message",
    ]
    assert items[2]["output"] == "Oslo: found"
