"""Tools the tool tests load by reference (``tests.agent_system.tool_fixtures:<name>``): well-behaved ones and ones that
raise, hang, crash their worker, blow the memory limit or return garbage."""

import os
import time

from agent_system.tools.base import tool


@tool(family="calculate")
def add(a: int, b: int = 1) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@tool
def fails(reason: str) -> str:
    """Raise RuntimeError with the reason.

    Args:
        reason: the message.
    """
    raise RuntimeError(reason)


@tool
def hangs(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "woke up"


@tool
def crashes(code: int) -> str:
    """Kill its own process.

    Args:
        code: the exit status.
    """
    os._exit(code)


@tool
def hogs(megabytes: int) -> str:
    """Allocate memory.

    Args:
        megabytes: how much.
    """
    block = bytearray(megabytes * 1024 * 1024)
    return str(len(block))


@tool
def garbage() -> object:
    """Return something that is neither text nor JSON."""
    return object()


@tool
def prints(text: str) -> dict:
    """Print to stdout, then return a JSON object.

    Args:
        text: what to print.
    """
    print(text, flush=True)
    return {"printed": text, "n": len(text)}


ALL = [add, fails, hangs, crashes, hogs, garbage, prints]
