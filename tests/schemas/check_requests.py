#!/usr/bin/env python3
"""Validates rendered provider requests against the providers' PUBLISHED
request types (their official Python SDKs), with unknown keys forbidden.

Usage: check_requests.py DIR

DIR holds request bodies as written by tests/provider_schemas.rs:

    DIR/valid/<provider>/<case>.json    must validate
    DIR/invalid/<provider>/<case>.json  must be rejected (proves the check is
                                        strict: e.g. `reasoning_content` on an
                                        OpenAI Chat assistant message)

<provider> is convlog's name: openai, openai-responses, anthropic, gemini,
ollama. Each file is the body `RenderedRequest::body()` returns; the checker
adds the fields the SDK types require besides the messages (`model`,
Anthropic's `max_tokens`).

The types, per provider (versions pinned in tests/schemas/requirements.txt):

- openai: `openai.types.chat.completion_create_params.
  CompletionCreateParamsNonStreaming` (its `messages` are
  `ChatCompletionMessageParam`s);
- openai-responses: `openai.types.responses.response_create_params.
  ResponseCreateParamsNonStreaming` (its `input` is a `ResponseInputParam`);
- anthropic: `anthropic.types.message_create_params.
  MessageCreateParamsNonStreaming` (`MessageParam`s; `system` a str or a
  list of `TextBlockParam`), and every content block again against
  `ContentBlockParam` alone (the SDK's content union also admits its
  response models, which allow extra keys);
- gemini: `google.genai.types.Content` for each of `contents` and for
  `system_instruction` (pydantic models that forbid extra keys), validated
  from JSON so `thoughtSignature` must be base64 like the REST API wants;
- ollama: `ollama._types.ChatRequest` for the body and `ollama.Message` for
  each message (ChatRequest alone would accept any mapping as a message).

The OpenAI and Anthropic types are TypedDicts: a pydantic TypeAdapter built
with `extra='forbid'` rejects unknown keys, and the `Iterable[...]` fields
those SDKs use are validated lazily, so every validated iterable is walked
to the end here (without that, nothing inside `tool_calls` or a content
block list would be checked).

Exit status: 0 all valid (and every invalid case rejected); 1 a violation
(each printed: file, location, pydantic's error); 2 usage; 77 an SDK is
missing (printed with the install command), which the Rust test reports as
a skip unless CONVLOG_REQUIRE_SCHEMAS=1.
"""

import json
import os
import sys

SKIP = 77
PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini", "ollama"]
REQUIREMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "requirements.txt")


def load_sdks():
    """Imports the SDKs; exits with SKIP naming what is missing."""
    missing = []
    sdks = {}
    for module in ["pydantic", "openai", "anthropic", "google.genai", "ollama"]:
        try:
            sdks[module] = __import__(module, fromlist=["_"])
        except ImportError as error:
            missing.append(f"{module} ({error})")
    if missing:
        print(
            "missing Python package(s): "
            + ", ".join(missing)
            + f"; install with: python3 -m pip install -r {REQUIREMENTS}"
        )
        sys.exit(SKIP)
    return sdks


def versions():
    from importlib import metadata

    names = ["pydantic", "openai", "anthropic", "google-genai", "ollama"]
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "?"
    return found


def pinned():
    pins = {}
    with open(REQUIREMENTS, encoding="utf-8") as file:
        for line in file:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[name.strip()] = version.strip()
    return pins


class LazyError(Exception):
    """A ValidationError raised while walking a lazily validated iterable,
    with the path of that iterable."""

    def __init__(self, path, error):
        super().__init__(path)
        self.path = path
        self.error = error


def force(value, path=""):
    """Walks a validated value to the end: pydantic validates `Iterable`
    fields lazily (a ValidatorIterator), raising only when iterated; such an
    error's location starts at the iterable, so `path` is carried along."""
    from pydantic import ValidationError

    if isinstance(value, dict):
        return {key: force(item, f"{path}.{key}" if path else str(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [force(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if type(value).__name__ == "ValidatorIterator":
        items = []
        try:
            for item in value:
                items.append(item)
        except ValidationError as error:
            raise LazyError(path, error) from None
        return [force(item, f"{path}[{index}]") for index, item in enumerate(items)]
    return value


class Checker:
    def __init__(self):
        from pydantic import ConfigDict, TypeAdapter
        from openai.types.chat import completion_create_params
        from openai.types.responses import response_create_params
        from anthropic.types import message_create_params
        from google.genai import types as genai_types
        import ollama
        from ollama._types import ChatRequest

        # TypeAdapter refuses a config for a TypedDict itself; wrapped in a
        # one-element list the config applies to it and to every TypedDict
        # inside (checked by self_test).
        strict = ConfigDict(extra="forbid")
        self.openai_chat = TypeAdapter(
            list[completion_create_params.CompletionCreateParamsNonStreaming], config=strict
        )
        self.openai_responses = TypeAdapter(
            list[response_create_params.ResponseCreateParamsNonStreaming], config=strict
        )
        self.anthropic = TypeAdapter(
            list[message_create_params.MessageCreateParamsNonStreaming], config=strict
        )
        # The Anthropic SDK's message content union also admits its
        # *response* models (`ToolUseBlock`, ...), pydantic models that allow
        # extra keys and win the union: each block is checked again against
        # the request block params alone (`ContentBlockParam`).
        from anthropic.types import ContentBlockParam, TextBlockParam

        self.anthropic_blocks = TypeAdapter(list[list[ContentBlockParam]], config=strict)
        self.anthropic_system = TypeAdapter(list[list[TextBlockParam]], config=strict)
        self.gemini_content = genai_types.Content
        self.ollama_request = ChatRequest
        self.ollama_message = ollama.Message

    def errors(self, provider, body):
        """Pydantic's errors for one request body, as (location, message)."""
        from pydantic import ValidationError

        try:
            if provider == "openai":
                force(self.openai_chat.validate_python([{"model": "gpt-4o", **body}]))
            elif provider == "openai-responses":
                force(self.openai_responses.validate_python([{"model": "gpt-4o", **body}]))
            elif provider == "anthropic":
                force(
                    self.anthropic.validate_python(
                        [{"model": "claude-sonnet-4-5", "max_tokens": 1024, **body}]
                    )
                )
                found = []
                for index, message in enumerate(body.get("messages", [])):
                    content = message.get("content")
                    if isinstance(content, list):
                        try:
                            force(self.anthropic_blocks.validate_python([content]))
                        except ValidationError as error:
                            found.extend(located(error, f"messages[{index}].content"))
                        except LazyError as lazy:
                            found.extend(located(lazy.error, f"messages[{index}].content"))
                if isinstance(body.get("system"), list):
                    try:
                        force(self.anthropic_system.validate_python([body["system"]]))
                    except ValidationError as error:
                        found.extend(located(error, "system"))
                    except LazyError as lazy:
                        found.extend(located(lazy.error, "system"))
                return found
            elif provider == "gemini":
                return self.gemini_errors(body)
            elif provider == "ollama":
                found = []
                self.ollama_request.model_validate(
                    {"model": "llama3.1", **body}, extra="forbid"
                )
                for index, message in enumerate(body.get("messages", [])):
                    try:
                        self.ollama_message.model_validate(message, extra="forbid")
                    except ValidationError as error:
                        found.extend(located(error, f"messages[{index}]"))
                return found
            else:
                return [("", f"unknown provider {provider!r}")]
        except ValidationError as error:
            return located(error, "")
        except LazyError as lazy:
            return located(lazy.error, lazy.path)
        return []

    def gemini_errors(self, body):
        from pydantic import ValidationError

        found = []
        for key in body:
            if key not in ("contents", "system_instruction"):
                found.append((key, "not a field of a generateContent request"))
        items = [(f"contents[{index}]", content) for index, content in enumerate(body.get("contents", []))]
        if "system_instruction" in body:
            items.append(("system_instruction", body["system_instruction"]))
        for where, content in items:
            try:
                self.gemini_content.model_validate_json(json.dumps(content))
            except ValidationError as error:
                found.extend(located(error, where))
        return found


def located(error, prefix):
    out = []
    for detail in error.errors():
        where = ".".join(str(part) for part in detail["loc"])
        if not prefix and where.startswith("0."):
            where = where[2:]  # the one-element list the adapters wrap
        if prefix.startswith("[0]"):
            prefix = prefix[4:]
        out.append((f"{prefix}.{where}" if prefix else where, f"{detail['type']}: {detail['msg']}"))
    return out


def self_test(checker):
    """The check must really be strict: known-bad requests are rejected."""
    bad = {
        "openai": {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello", "reasoning_content": "x"},
            ]
        },
        "openai-responses": {"input": [{"type": "function_call_output", "call_id": "c", "output": "x", "bogus": 1}]},
        "openai-responses/reasoning": {
            "input": [{"type": "reasoning", "id": "rs_1", "summary": [], "bogus": 1}]
        },
        "openai-responses/message": {
            "input": [
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "x", "annotations": [], "bogus": 1}]}
            ]
        },
        "openai/tool_call": {
            "messages": [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "n", "arguments": "{}", "bogus": 1}}]},
                {"role": "tool", "tool_call_id": "c", "content": "x"},
            ]
        },
        "anthropic/thinking": {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]},
            ]
        },
        "ollama/message": {"messages": [{"role": "tool", "content": "x", "tool_call_id": "c"}]},
        "anthropic": {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}, "bogus": 1}]},
            ]
        },
        "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi", "bogus": 1}]}]},
        "ollama": {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "n", "arguments": {}, "bogus": 1}}]}]},
    }
    broken = [case for case, body in bad.items() if not checker.errors(case.split("/")[0], body)]
    if broken:
        print(f"the schema check is not strict: it accepts unknown keys for {broken}")
        sys.exit(1)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    root = sys.argv[1]
    load_sdks()
    checker = Checker()
    self_test(checker)
    found = versions()
    pins = pinned()
    drift = [f"{name} {found[name]} (pinned {pins[name]})" for name in pins if name in found and found[name] != pins[name]]
    print("provider schema check with " + ", ".join(f"{name} {version}" for name, version in found.items()))
    if drift:
        print("note: versions differ from tests/schemas/requirements.txt: " + ", ".join(drift))
    failures = 0
    counts = {"valid": 0, "invalid": 0}
    for expectation in ["valid", "invalid"]:
        for provider in PROVIDERS:
            folder = os.path.join(root, expectation, provider)
            if not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                if not name.endswith(".json"):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as file:
                    body = json.load(file)
                errors = checker.errors(provider, body)
                counts[expectation] += 1
                if expectation == "valid" and errors:
                    failures += 1
                    print(f"INVALID {provider} {path}:")
                    for where, message in errors[:12]:
                        print(f"    {where}: {message}")
                    if len(errors) > 12:
                        print(f"    ... {len(errors) - 12} more")
                elif expectation == "invalid" and not errors:
                    failures += 1
                    print(f"ACCEPTED {provider} {path}: expected the published types to reject it")
    print(
        f"checked {counts['valid']} request(s) that must validate and "
        f"{counts['invalid']} that must be rejected: {failures} failure(s)"
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
