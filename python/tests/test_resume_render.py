"""Resume after a crash, provider renders, ingest, history managers, verify."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import convlog
from conftest import entry_event, user


def _crashed_trip(store: convlog.Store) -> None:
    """A conversation whose Rome call was running when the host died."""
    calls = [
        {"call_id": "call_paris", "name": "weather", "arguments": '{"city":"paris"}'},
        {"call_id": "call_rome", "name": "weather", "arguments": '{"city":"rome"}'},
    ]
    store.append(
        [
            entry_event("trip", evaluation_id="e1", role="system", content="You report weather.",
                        prompt_ns="travel", prompt_key="planner"),
            user("trip", "Weather in Paris and Rome?", evaluation_id="e1"),
            entry_event("trip", evaluation_id="e1", role="assistant", turn=1, tool_calls=calls),
            entry_event("trip", evaluation_id="e1", role="tool", turn=1, tool_call_id="call_paris",
                        tool_name="weather", content="18C"),
        ]
    )
    store.append(
        [{"type": "tool_status", "conversation_id": "trip", "evaluation_id": "e1",
          "call_id": "call_rome", "status": "running"}]
    )


def test_resume_names_unfinished_and_finished_calls(store: convlog.Store) -> None:
    _crashed_trip(store)
    state = store.resume("trip")
    assert state["conversation_id"] == "trip" and state["evaluation_id"] == "e1"
    assert [call["call"]["call_id"] for call in state["unfinished_calls"]] == ["call_rome"]
    assert state["unfinished_calls"][0]["call"]["status"] == "running"
    finished = state["finished_calls"]
    assert [call["call"]["call_id"] for call in finished] == ["call_paris"]
    assert finished[0]["result"]["content"] == "18C"
    assert (state["next_sequence"], state["turn"], state["next_turn"]) == (4, 1, 2)
    assert state["finished"] is False
    assert len(state["entries"]) == 4

    # Run it again, marked resumed, record its result: nothing is left.
    store.append(
        [
            {"type": "tool_status", "conversation_id": "trip", "evaluation_id": "e1",
             "call_id": "call_rome", "status": "running", "resumed": True},
            entry_event("trip", evaluation_id="e1", role="tool", turn=1, sequence=state["next_sequence"],
                        tool_call_id="call_rome", tool_name="weather", content="21C"),
            entry_event("trip", evaluation_id="e1", role="assistant", turn=2, content="18C and 21C."),
        ]
    )
    state = store.resume("trip")
    assert state["unfinished_calls"] == [] and state["finished"] is True
    assert store.recorded_result("trip", "call_rome")["content"] == "21C"  # type: ignore[index]
    assert store.recorded_result("trip", "call_nowhere") is None


def test_resume_checks_the_prompt_identity_and_the_evaluation(store: convlog.Store) -> None:
    _crashed_trip(store)
    assert store.resume("trip", prompt=("travel", "planner"))["evaluation_id"] == "e1"
    with pytest.raises(convlog.PromptMismatchError) as caught:
        store.resume("trip", prompt=("travel", "booker"))
    error = caught.value
    assert (error.conversation_id, error.evaluation_id) == ("trip", "e1")
    assert (error.recorded, error.requested) == ("travel/planner", "travel/booker")
    assert "travel/planner" in str(error) and "travel/booker" in str(error)
    with pytest.raises(convlog.EvaluationNotFoundError) as missing:
        store.resume("trip", evaluation_id="e9")
    assert missing.value.evaluation_id == "e9"
    with pytest.raises(convlog.ConversationNotFoundError):
        store.resume("nowhere")


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini", "ollama"])
def test_render_never_sends_an_unfinished_call(store: convlog.Store, provider: convlog.Provider) -> None:
    _crashed_trip(store)
    request = store.render("trip", provider)
    assert request["provider"] == provider
    assert request["unfinished_calls"] == ["call_rome"]
    text = json.dumps(request["body"])
    assert "call_paris" in text or provider in ("ollama", "gemini")
    assert "call_rome" not in text and "rome" not in text.replace("Rome?", "")
    errored = store.render("trip", provider, pending="error")
    assert errored["unfinished_calls"] == ["call_rome"]
    assert "interrupted" in json.dumps(errored["body"]).lower() or provider == "ollama"


def test_render_shapes_per_provider(store: convlog.Store) -> None:
    _crashed_trip(store)
    anthropic = store.render("trip", "anthropic")
    assert set(anthropic["body"]) == {"system", "messages"}
    assert anthropic["messages"][0]["role"] == "user"
    openai = store.render("trip", "openai")
    assert openai["body"]["messages"][0] == {"role": "system", "content": "You report weather."}
    assert set(store.render("trip", "gemini")["body"]) == {"system_instruction", "contents"}
    assert "input" in store.render("trip", "openai-responses")["body"]
    with pytest.raises(ValueError, match="unknown provider"):
        store.render("trip", "mistral")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown pending-call mode"):
        store.render("trip", "openai", pending="keep")  # type: ignore[arg-type]


def test_render_options_and_module_level_render(store: convlog.Store) -> None:
    store.append([user("c", "hi")])
    request = store.render(
        "c", "openai", default_system_prompt="You are Wolo.", display_name=("Wolo", "CodeHelper")
    )
    assert request["messages"][0] == {"role": "system", "content": "You are CodeHelper."}
    entries = store.conversation("c").entries
    assert convlog.render("openai", entries)["messages"] == [{"role": "user", "content": "hi"}]
    # Entries written by hand get the JSON form's defaults.
    minimal = [{"evaluation_id": "e", "role": "user", "content": "x"}]
    assert convlog.render("anthropic", minimal)["body"] == {"messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(convlog.InvalidEventError) as caught:
        convlog.render("openai", [{"evaluation_id": "e", "role": "robot"}])
    assert caught.value.index == 0 and caught.value.field == "role"
    assert str(caught.value).startswith("entries[0].role: ")


def test_ingest_converts_provider_messages_to_entries_to_record(store: convlog.Store) -> None:
    reply = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city":"paris"}'}}]},
    ]
    entries = convlog.ingest("openai", reply, "eval-1", created_at="2026-01-01T00:00:00Z")
    assert [entry["role"] for entry in entries] == ["user", "assistant"]
    assert entries[1]["tool_calls"][0]["call_id"] == "call_1"
    assert entries[0]["created_at"] == "2026-01-01T00:00:00.000000Z"
    store.append([{"type": "conversation_recorded", "conversation_id": "c", "entry": entry} for entry in entries])
    assert store.render("c", "anthropic")["unfinished_calls"] == ["call_1"]
    with pytest.raises(convlog.ProviderFormatError) as caught:
        convlog.ingest("openai", [{"role": "robot"}], "eval-1")
    assert caught.value.provider == "openai"


def _chat(store: convlog.Store, turns: int) -> list[dict[str, Any]]:
    events = [entry_event("chat", evaluation_id="e", role="system", content="Be brief.")]
    for n in range(1, turns + 1):
        role = "user" if n % 2 else "assistant"
        events.append(entry_event("chat", evaluation_id="e", role=role, content=f"message {n}"))
    store.append(events)
    return store.conversation("chat").entries


def test_history_managers_curate_without_touching_the_store(store: convlog.Store) -> None:
    entries = _chat(store, 10)
    window = convlog.HistoryManager.sliding_window(4)
    assert window.strategy == "sliding_window(4)"
    curated = window.curate(entries)
    assert [e["content"] for e in curated] == ["Be brief.", "message 7", "message 8", "message 9", "message 10"]
    composed = convlog.HistoryManager.composed(
        convlog.HistoryManager.tool_result_truncator(2000), convlog.HistoryManager.sliding_window(4)
    )
    assert composed.strategy == "composed(tool_result_truncator(2000), sliding_window(4))"
    parsed = convlog.HistoryManager.parse("truncate=2000, window=4")
    assert parsed.strategy == composed.strategy
    with pytest.raises(convlog.InvalidOptionError, match='"window" is not a non-negative integer') as bad:
        convlog.HistoryManager.parse("window=lots")
    assert bad.value.option == "window=lots"
    for manager in (
        convlog.HistoryManager.passthrough(),
        convlog.HistoryManager.token_budget(10_000),
        convlog.HistoryManager.tool_pruning(10, keep_recent=1, placeholder="[pruned]"),
        convlog.HistoryManager.summary_placeholder(10_000, "summary"),
    ):
        assert len(manager.curate(entries)) == 11, manager.strategy

    curation = store.curate("chat", window, prompt_name="travel/planner", session_id="s-1")
    assert (curation["original_count"], curation["curated_count"]) == (11, 5)
    assert curation["strategy"] == "sliding_window(4)"
    recorded = store.event(curation["lsn"])
    assert recorded["type"] == "history_curated" and recorded["session_id"] == "s-1"
    assert len(store.conversation("chat")) == 11, "the store is untouched"
    unrecorded = store.curate("chat", window, record=False)
    assert unrecorded["lsn"] is None

    request = store.render("chat", "openai", history=window)
    assert len(request["messages"]) == 5
    before = store.next_lsn
    store.render("chat", "openai", history=window, record_curation=True)
    assert store.next_lsn == before + 1


def test_verify_checks_a_store_beside_its_writer(store: convlog.Store, store_path: Path) -> None:
    store.append([user("c", "x"), user("d", "y")])
    store.snapshot()
    report = convlog.verify(store_path)
    assert report["events"] == 2 and report["next_lsn"] == 3
    assert report["conversations"] == 2
    assert report["torn_tail"] is None
    assert report["snapshots"][0]["ok"] is True
    assert report["chosen_snapshot"]["lsn"] == 3


def test_verify_reports_damage_with_segment_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with convlog.Store.open(path) as store:
        for n in range(20):
            store.append([user("c", f"message number {n} " + "x" * 100)])
    segment = sorted(p for p in path.iterdir() if p.suffix == ".log" or p.name.endswith(".seg"))
    segments = segment or sorted(p for p in path.iterdir() if p.is_file() and p.stat().st_size > 1000)
    target = segments[0]
    data = bytearray(target.read_bytes())
    # A byte inside a frame in the middle of the log (frames end before any
    # space a running writer allocated past them).
    middle = data.index(b"message number 10 ")
    data[middle] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(convlog.CorruptedError) as caught:
        convlog.verify(path)
    assert caught.value.segment == str(target)
    assert 0 < caught.value.offset <= middle
    with pytest.raises(convlog.CorruptedError):
        convlog.Store.open(path)


def test_async_twins_of_resume_render_and_curate(store_path: Path) -> None:
    import asyncio

    async def main() -> None:
        async with await convlog.AsyncStore.open(store_path) as store:
            _crashed_trip(store.store)
            state = await store.resume("trip")
            assert state["unfinished_calls"][0]["call"]["call_id"] == "call_rome"
            assert (await store.recorded_result("trip", "call_paris")) is not None
            assert (await store.render("trip", "anthropic"))["unfinished_calls"] == ["call_rome"]
            curated = await store.curate("trip", convlog.HistoryManager.sliding_window(1), record=False)
            assert curated["original_count"] == 4

    asyncio.run(main())


def test_a_history_manager_written_in_python(store: convlog.Store) -> None:
    entries = _chat(store, 6)

    def last_two(shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [entry for entry in shown if entry["role"] == "system"] + shown[-2:]

    manager = convlog.HistoryManager.custom("last_two", last_two)
    assert manager.strategy == "last_two"
    assert [e["content"] for e in manager.curate(entries)] == ["Be brief.", "message 5", "message 6"]
    composed = convlog.HistoryManager.composed(convlog.HistoryManager.tool_result_truncator(10), manager)
    assert composed.strategy == "composed(tool_result_truncator(10), last_two)"
    assert len(store.render("chat", "openai", history=composed)["messages"]) == 3
    curation = store.curate("chat", manager)
    assert (curation["curated_count"], curation["strategy"]) == (3, "last_two")
    assert store.event(curation["lsn"])["strategy"] == "last_two"


def test_a_failing_python_history_manager_raises_and_records_nothing(store: convlog.Store) -> None:
    _chat(store, 2)

    def broken(shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise RuntimeError("manager bug")

    manager = convlog.HistoryManager.custom("broken", broken)
    before = store.next_lsn
    with pytest.raises(RuntimeError, match="manager bug"):
        store.curate("chat", manager)
    with pytest.raises(RuntimeError, match="manager bug"):
        store.render("chat", "openai", history=manager, record_curation=True)
    with pytest.raises(RuntimeError, match="manager bug"):
        manager.curate(store.conversation("chat").entries)
    assert store.next_lsn == before, "no curation was recorded"
    control = store.message_control(manager)
    control.create_context("alice", "chat")
    with pytest.raises(RuntimeError, match="manager bug"):
        control.generate("alice", "chat", lambda shown: [{"evaluation_id": "g", "role": "assistant", "content": "x"}])
    assert len(control.entries("alice", "chat")) == 3, "nothing generated was saved"
    # The next call is not affected by the earlier failure.
    assert len(convlog.HistoryManager.sliding_window(1).curate(store.conversation("chat").entries)) == 2


def test_a_python_history_manager_may_not_break_tool_pairing(store: convlog.Store) -> None:
    _crashed_trip(store)
    store.append([entry_event("trip", evaluation_id="e1", role="tool", turn=1, tool_call_id="call_rome",
                              tool_name="weather", content="21C")])
    entries = store.conversation("trip").entries
    orphaning = convlog.HistoryManager.custom("drop_calls", lambda shown: [e for e in shown if e["role"] != "assistant"])
    with pytest.raises(ValueError, match="broke tool-call pairing"):
        orphaning.curate(entries)
