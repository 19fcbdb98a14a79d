"""Type aliases of the package (importable at run time, used by the stubs)."""

from __future__ import annotations

from os import PathLike
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Union

#: One event in its JSON form (docs/events.md), as a dict.
Event = dict[str, Any]
#: One entry (message) in its JSON form, as a dict.
Entry = dict[str, Any]
#: A path given to ``Store.open``.
StrPath = Union[str, "PathLike[str]"]
#: ``Store.open``'s durability.
Durability = Literal["group", "sync", "none", "periodic"]
#: A provider ``render`` and ``ingest`` speak.
Provider = Literal["openai", "openai-responses", "anthropic", "gemini", "ollama"]
#: What ``render`` does with unfinished calls: leave them out, or answer
#: each with an error result.
Pending = Literal["drop", "error", "synthetic-error"]
#: A host model for message control: entries shown -> entries produced.
Generator = Callable[[list[Entry]], Iterable[Mapping[str, Any]]]
