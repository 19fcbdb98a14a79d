"""A scripted OpenAI Agents ``Model``: canned responses, recorded requests, no network."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Optional, Union

from agents import (
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    Usage,
)
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam

Responder = Callable[[list[TResponseInputItem]], Sequence[TResponseOutputItem]]


def say(text: str, item_id: str = "msg_scripted") -> TResponseOutputItem:
    """An assistant message output item."""
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call(name: str, arguments: str, call_id: str) -> TResponseOutputItem:
    """A function call output item."""
    return ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=arguments,
        status="completed",
    )


class ScriptedModel(Model):
    """Answers each request with the next canned response (or what a responder
    derives from the request) and records every request's input items."""

    def __init__(self, responses: Sequence[Union[Sequence[TResponseOutputItem], Responder]]) -> None:
        self._responses = list(responses)
        self.requests: list[list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: Optional[str],
        input: Union[str, list[TResponseInputItem]],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Optional[AgentOutputSchemaBase],
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: Optional[str],
        conversation_id: Optional[str],
        prompt: Optional[ResponsePromptParam],
    ) -> ModelResponse:
        items: list[TResponseInputItem] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else copy.deepcopy(input)
        )
        self.requests.append(items)
        if not self._responses:
            raise AssertionError(f"unexpected model request {len(self.requests)}: {items}")
        response = self._responses.pop(0)
        output = response(items) if callable(response) else response
        return ModelResponse(output=list(output), usage=Usage(), response_id=None)

    async def stream_response(
        self,
        system_instructions: Optional[str],
        input: Union[str, list[TResponseInputItem]],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Optional[AgentOutputSchemaBase],
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: Optional[str],
        conversation_id: Optional[str],
        prompt: Optional[ResponsePromptParam],
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model answers Runner.run, not run_streamed")
        yield  # an async generator, as the interface declares


def dangling(items: Sequence[Any]) -> list[str]:
    """Call ids of function calls without an output and outputs without a call."""
    calls = {i.get("call_id") for i in items if isinstance(i, dict) and i.get("type") == "function_call"}
    outputs = {
        i.get("call_id")
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }
    return sorted(str(c) for c in calls ^ outputs)
