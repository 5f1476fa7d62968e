"""A tiny MCP server the MCP client test starts over stdio: ``python mcp_echo_server.py``."""

import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def boom() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


@server.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"


if __name__ == "__main__":
    server.run()
