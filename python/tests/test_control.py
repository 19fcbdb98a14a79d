"""Message control: contexts, owners, validated adds and sets with the exact
error texts, generation through a Python callable."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import convlog


@pytest.fixture
def control(store: convlog.Store) -> convlog.MessageControl:
    control = store.message_control()
    control.create_context("alice", "ctx_123")
    return control


def call(call_id: str) -> dict[str, Any]:
    return {"type": "tool_call", "tool_call_id": call_id, "tool_name": "search", "tool_input": {"q": "x"}}


def response(call_id: str) -> dict[str, Any]:
    return {"type": "tool_response", "tool_call_id": call_id, "tool_output": "found"}


def test_contexts_have_owners_and_a_public_flag(store: convlog.Store, control: convlog.MessageControl) -> None:
    info = control.context("alice", "ctx_123")
    assert info["context_id"] == "ctx_123" and info["owner"] == "alice" and info["public"] is False
    with pytest.raises(convlog.NotContextOwnerError) as foreign:
        control.messages("bob", "ctx_123")
    assert str(foreign.value) == "Context does not belong to user"
    assert foreign.value.context_id == "ctx_123"
    with pytest.raises(convlog.ContextNotFoundError) as missing:
        control.messages("alice", "ctx_404")
    assert str(missing.value) == "Context with id: ctx_404 does not exist"
    with pytest.raises(convlog.ContextExistsError) as exists:
        control.create_context("alice", "ctx_123")
    assert str(exists.value) == "Context with id: ctx_123 already exists"
    with pytest.raises(convlog.AnonymousPrivateContextError):
        control.create_context(None, "ctx_anon")
    control.create_context(None, "ctx_public", public=True)
    assert control.set_public("alice", "ctx_123", True)["public"] is True
    assert control.messages("bob", "ctx_123") == []
    with pytest.raises(convlog.NotContextOwnerError):
        control.set_public("bob", "ctx_123", False)
    assert [info["context_id"] for info in control.contexts()] == ["ctx_123", "ctx_public"]
    for error in (foreign.value, missing.value, exists.value):
        assert isinstance(error, convlog.MessageControlError)


def test_add_messages_validates_with_the_fixed_texts(store: convlog.Store, control: convlog.MessageControl) -> None:
    applied = control.add_messages("alice", "ctx_123", [
        {"sender": "human", "message": "Hello!"}, {"sender": "ai", "message": "Hi!"}])
    assert applied["lsns"] == range(2, 4)
    assert [entry["role"] for entry in applied["entries"]] == ["user", "assistant"]
    before = store.next_lsn

    with pytest.raises(convlog.ResponsesWithoutCallsError) as orphan:
        control.add_messages("alice", "ctx_123", [response("call_123")])
    assert str(orphan.value) == "Tool responses found without corresponding tool calls: ['call_123']"
    assert orphan.value.call_ids == ["call_123"]

    with pytest.raises(convlog.ResponseBeforeCallError) as early:
        control.add_messages("alice", "ctx_123", [response("call_1"), call("call_1")])
    assert str(early.value) == "Tool response with ID 'call_1' appears before its corresponding tool call"
    assert early.value.call_id == "call_1"

    with pytest.raises(convlog.CallsWithoutResponsesError) as unanswered:
        control.add_messages("alice", "ctx_123", [call("call_1")])
    assert str(unanswered.value) == "Tool calls found without corresponding responses: ['call_1']"

    with pytest.raises(convlog.DuplicateOpenCallIdsError) as twice:
        control.add_messages("alice", "ctx_123", [call("d"), call("d"), response("d"), response("d")])
    assert str(twice.value) == (
        "Tool call IDs used by two open tool calls: ['d'] (each tool call needs its own ID until it is answered)"
    )
    assert store.next_lsn == before, "nothing of a refused list was appended"

    control.add_messages("alice", "ctx_123", [call("call_1"), response("call_1")])
    messages = control.messages("alice", "ctx_123")
    assert messages[-2:] == [call("call_1"), response("call_1")]
    assert messages[0] == {"sender": "human", "message": "Hello!"}


def test_malformed_messages_name_the_message(control: convlog.MessageControl) -> None:
    with pytest.raises(convlog.InvalidEventError) as caught:
        control.add_messages("alice", "ctx_123", [{"sender": "human", "message": "x"}, {"sender": "human", "text": "y"}])
    assert caught.value.index == 1
    assert str(caught.value).startswith("messages[1]: unknown field `text`")


def test_set_messages_replaces_and_keeps_the_old_ones_in_the_log(
    store: convlog.Store, control: convlog.MessageControl
) -> None:
    control.add_messages("alice", "ctx_123", [{"sender": "human", "message": "old"}])
    applied = control.set_messages("alice", "ctx_123", [{"sender": "system", "message": "Summary."}])
    assert [e["content"] for e in control.entries("alice", "ctx_123")] == ["Summary."]
    assert store.event(applied["lsns"].start)["type"] == "messages_replaced"
    contents = [event["entry"]["content"] for _, event in store.events(conversation_id="ctx_123")
                if event["type"] == "conversation_recorded"]
    assert contents == ["old"]
    with pytest.raises(convlog.CallsWithoutResponsesError):
        control.set_messages("alice", "ctx_123", [call("c")])


def test_entries_in_and_out(control: convlog.MessageControl) -> None:
    control.add_entries("alice", "ctx_123", [{"evaluation_id": "e", "role": "user", "content": "hi"}])
    control.set_entries("alice", "ctx_123", [{"evaluation_id": "f", "role": "user", "content": "new"}])
    assert [(e["evaluation_id"], e["content"]) for e in control.entries("alice", "ctx_123")] == [("f", "new")]


def _model(shown: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    return [{"evaluation_id": "g", "role": "assistant", "content": f"I saw {len(shown)} messages"}]


def test_chat_and_generate_through_a_python_callable(store: convlog.Store) -> None:
    control = store.message_control(convlog.HistoryManager.sliding_window(1))
    control.create_context("alice", "c")
    generation = control.chat("alice", "c", "Hello", _model)
    assert generation["response"] == "I saw 1 messages"
    assert [e["content"] for e in generation["stored"]] == ["Hello", "I saw 1 messages"]
    steered = control.generate("alice", "c", _model, ["Be brief."], save_ai_messages=False)
    assert steered["model_view"][-1]["content"] == "Be brief."
    assert steered["stored"] == []
    assert len(control.entries("alice", "c")) == 2, "an unsaved generation stores nothing"
    saved = control.add_ai_message("alice", "c", _model, message="Pre-written.")
    assert saved["response"] == "Pre-written."
    with pytest.raises(ValueError, match="exactly one of"):
        control.add_ai_message("alice", "c", _model)


def test_a_failing_model_is_generation_failed_with_its_cause(store: convlog.Store) -> None:
    control = store.message_control()
    control.create_context("alice", "c")

    def broken(shown: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
        raise RuntimeError("model is down")

    with pytest.raises(convlog.GenerationFailedError) as caught:
        control.chat("alice", "c", "Hello", broken)
    assert "model is down" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert [e["content"] for e in control.entries("alice", "c")] == ["Hello"], "the human message stays"


def test_async_message_control(store_path: Path) -> None:
    async def main() -> None:
        async with await convlog.AsyncStore.open(store_path) as store:
            control = store.message_control()
            await control.create_context("alice", "c")
            await control.add_messages("alice", "c", [{"sender": "human", "message": "hi"}])
            assert (await control.messages("alice", "c")) == [{"sender": "human", "message": "hi"}]
            with pytest.raises(convlog.ContextNotFoundError):
                await control.entries("alice", "nope")

    asyncio.run(main())
