"""A small MCP server over stdio for convlog-agent's MCP tests.

Run by crates/agent/tests/mcp.rs as `python3 server.py`. Uses the MCP
Python SDK (`pip install 'mcp==2.3.0'`): `MCPServer` in 2.x, `FastMCP` in
1.x (the same decorator API).
"""

import asyncio
import json
import os
import subprocess
import sys

try:
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.utilities.types import Image
except ImportError:  # the 1.x SDK
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError
    from mcp.server.fastmcp.utilities.types import Image

server = Server("convlog-test")

# Parties waiting in `meet`, by meeting name.
_meetings = {}


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Returns its text unchanged."""
    return text


@server.tool()
def call_meta(ctx: Context) -> str:
    """Returns the `convlog/` keys of the request's `_meta`, as JSON."""
    meta = ctx.request_context.meta
    if meta is None:
        items = {}
    elif isinstance(meta, dict):
        items = meta
    else:
        items = meta.model_dump()
    return json.dumps(
        {key: value for key, value in items.items() if key.startswith("convlog/")},
        sort_keys=True,
    )


@server.tool(name="files.read")
def files_read(path: str) -> str:
    """Has a name MCP allows and OpenAI and Anthropic refuse (a dot)."""
    return f"read {path}"


@server.tool()
def fail(message: str) -> str:
    """Always fails, so the result is an error (isError) carrying the message."""
    raise ToolError(message)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps for the given number of seconds, then answers."""
    await asyncio.sleep(seconds)
    return f"slept {seconds} s"


@server.tool()
async def meet(meeting: str, parties: int) -> str:
    """Returns once `parties` calls of this tool with the same meeting name
    are in progress at the same time (never, when calls run one by one)."""
    state = _meetings.setdefault(meeting, {"arrived": 0, "event": asyncio.Event()})
    state["arrived"] += 1
    if state["arrived"] >= parties:
        state["event"].set()
    await state["event"].wait()
    return f"met {parties} at {meeting}"


@server.tool()
def note(path: str, text: str) -> str:
    """Appends a line of text to the file at `path` (so a test counts the
    calls that ran) and returns the text."""
    with open(path, "a") as file:
        file.write(text + "\n")
    return text


@server.tool()
async def wait_file(path: str) -> str:
    """Blocks until the file at `path` exists, then returns its contents
    (a tool that runs until the test lets it finish)."""
    while not os.path.exists(path):
        await asyncio.sleep(0.05)
    with open(path) as file:
        return file.read()


@server.tool()
def picture() -> Image:
    """Returns a 4-byte 'image' (not a real PNG; the client only counts bytes)."""
    return Image(data=b"\x89PNG", format="png")


@server.tool()
def environment(name: str) -> str:
    """The value of an environment variable of the server process, or '(unset)'."""
    return os.environ.get(name, "(unset)")


@server.tool()
def working_directory() -> str:
    """The server process's working directory."""
    return os.getcwd()


@server.tool()
def process_id() -> int:
    """The server process's id."""
    return os.getpid()


@server.tool()
def start_helper() -> int:
    """Starts a helper process that sleeps for an hour (holding none of the
    server's standard streams) and returns its process id."""
    helper = subprocess.Popen(
        ["sleep", "3600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return helper.pid


@server.tool()
def exit(code: int) -> str:
    """Writes a farewell to standard error and ends the process at once."""
    sys.stderr.write(f"server exiting with code {code}\n")
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    server.run()
