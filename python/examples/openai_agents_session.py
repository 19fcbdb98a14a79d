"""An OpenAI Agents SDK agent whose session lives in convlog (no network).

    python python/examples/openai_agents_session.py [STORE_DIR]

Two runs share a ``ConvlogSession``: the second run's request carries the
first run's history, tool call included. The model is scripted (it answers
from the request, as a real one would), so the example needs no API key; with
a real model, drop ``model=`` and set ``OPENAI_API_KEY``. At the end it shows
what convlog recorded: each SDK item is an entry in the neutral model
(``convlog inspect STORE_DIR`` and the provider renders read them), with the
item itself kept verbatim beside it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any, Optional, Union

from agents import (
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Runner,
    Tool,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam

import convlog
from convlog.integrations.openai_agents import ConvlogSession


@function_tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: 18C and sunny"


class ScriptedModel(Model):
    """Asks for the weather tool once per question, then answers from its result."""

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
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else input
        last = items[-1]
        if last.get("type") == "function_call_output":
            text = f"{last['output']} (I remember {len(items)} items of this conversation.)"
            output: list[Any] = [
                ResponseOutputMessage(
                    id=f"msg_{len(items)}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
                )
            ]
        else:
            city = "Paris" if "Paris" in str(last.get("content")) else "Rome"
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call_{len(items)}",
                    name="get_weather",
                    arguments=f'{{"city":"{city}"}}',
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

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
        raise NotImplementedError("this example uses Runner.run")
        yield  # an async generator, as the interface declares


async def main(directory: str) -> None:
    set_tracing_disabled(True)
    with convlog.Store.open(directory) as store:
        session = ConvlogSession("user-42", store)
        agent = Agent(name="Assistant", model=ScriptedModel(), tools=[get_weather])
        for question in ["What is the weather in Paris?", "And in Rome?"]:
            result = await Runner.run(agent, question, session=session)
            print(f"> {question}\n{result.final_output}")
        print(f"\nThe session holds {len(await session.get_items())} items; convlog has:")
        for entry in store.conversation("user-42").entries:
            calls = [f"{c['name']}({c['arguments']}) {c['status']}" for c in entry["tool_calls"]]
            text = entry["content"] or ", ".join(calls) or ""
            print(f"  turn {entry['turn']} {entry['role']:9} {text}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="convlog-agents-")))
