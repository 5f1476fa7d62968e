"""An MCP server's tools as tools: the official ``mcp`` SDK (2.x) over stdio.

Reference: ``docs/tools.md``. :class:`MCPToolset` starts the server command as a subprocess, connects an ``mcp.Client``
to it on an asyncio event loop of its own (a background thread, so the synchronous rollout can call it), lists the
server's tools and wraps each as a remote :class:`~agent_system.tools.base.Tool` whose schema is the server's input
schema. A call the server reports as an error (``is_error``), a call past ``timeout_s`` and a lost connection are
failed results. Install the SDK with ``pip install 'toolrl-router[mcp]'``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Sequence

from agent_system.tools.base import FAMILIES, Tool, ToolRegistry

__all__ = ["MCPToolset"]


def _require_mcp():
    try:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError as err:
        raise ImportError(
            f"the MCP client tool needs the official MCP SDK (mcp>=2): pip install 'toolrl-router[mcp]' ({err})"
        ) from None
    return Client, StdioServerParameters


def _content_text(result: Any) -> str:
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    return "\n".join(parts)


class MCPToolset:
    """The tools of one MCP server reached over stdio.

    Args:
        command: the server's executable (e.g. ``sys.executable``).
        args: its arguments (e.g. ``["server.py"]``).
        env: extra environment variables for the server.
        family: the family of every tool (str) or per tool name (dict; unnamed tools are ``other``).
        timeout_s: per-call limit (seconds); also the limit on connecting.

    Raises:
        ImportError: the ``mcp`` SDK is not installed. RuntimeError: the server did not start or answer in time.
        ValueError: an unknown family.

    Use as a context manager or call :meth:`close`; the server process ends with the connection.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        family: str | dict[str, str] = "other",
        timeout_s: float = 30.0,
    ) -> None:
        client_cls, params_cls = _require_mcp()
        self.timeout_s = float(timeout_s)
        self._family = family
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-client", daemon=True)
        self._thread.start()
        self._client = client_cls(params_cls(command=command, args=list(args), env=env))
        self._closed = False
        self._queue: asyncio.Queue | None = None
        self._done = concurrent.futures.Future()
        ready: concurrent.futures.Future = concurrent.futures.Future()
        asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop).add_done_callback(
            lambda f: self._done.set_result(None)
        )
        try:
            listing = ready.result(self.timeout_s)
        except BaseException as err:
            self.close()
            what = "timed out" if isinstance(err, concurrent.futures.TimeoutError) else f"{type(err).__name__}: {err}"
            raise RuntimeError(
                f"MCP server {command} {' '.join(args)}: could not connect and list tools ({what})"
            ) from None
        self.tools = ToolRegistry(self._wrap(t) for t in listing.tools)

    async def _serve(self, ready: concurrent.futures.Future) -> None:
        """The connection's one task: enter the client, list the tools, then run calls until told to stop (the SDK's
        task groups must be entered and left in the same task)."""
        self._queue = asyncio.Queue()
        pending: set = set()

        async def one(name: str, arguments: dict, result: concurrent.futures.Future) -> None:
            try:
                result.set_result(await asyncio.wait_for(self._client.call_tool(name, arguments), self.timeout_s))
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                result.set_exception(err)

        try:
            async with self._client as client:
                ready.set_result(await client.list_tools())
                while (item := await self._queue.get()) is not None:
                    task = asyncio.ensure_future(one(*item))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                for task in list(pending):
                    task.cancel()
        except BaseException as err:  # noqa: BLE001 - reported to whoever waits
            if not ready.done():
                ready.set_exception(err)

    def _call(self, name: str, arguments: dict):
        if self._closed or self._queue is None or self._done.done():
            raise RuntimeError("the MCP connection is closed")
        result: concurrent.futures.Future = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (name, arguments, result))
        try:
            return result.result(self.timeout_s + 5.0)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError, TimeoutError):
            raise TimeoutError(f"no answer from the MCP server within {self.timeout_s:g}s") from None

    def _wrap(self, spec: Any) -> Tool:
        family = self._family if isinstance(self._family, str) else self._family.get(spec.name, "other")
        if family not in FAMILIES:
            raise ValueError(f"MCP tool {spec.name!r}: family must be one of {FAMILIES}, got {family!r}")
        schema = dict(spec.input_schema or {"type": "object", "properties": {}})
        schema.pop("title", None)

        def call(arguments: dict, _name: str = spec.name) -> str:
            result = self._call(_name, arguments)
            text = _content_text(result)
            if result.is_error:
                raise RuntimeError(text or "the server reported an error")
            return text

        return Tool(spec.name, family, spec.description or "", schema, call, remote=True)

    def schemas(self) -> list[dict]:
        """The server's tools as OpenAI function schemas."""
        return self.tools.schemas()

    def call(self, name: str, arguments: dict):
        """Call one tool; a :class:`~agent_system.tools.result.ToolResult` (failed for an unknown tool)."""
        from agent_system.tools.base import failed

        t = self.tools.get(name)
        return failed(name, f"unknown MCP tool {name!r}") if t is None else t.invoke(arguments)

    def close(self) -> None:
        """Close the connection (ending the server process) and stop the event loop thread."""
        if self._closed:
            return
        self._closed = True
        if self._queue is not None and not self._done.done():
            self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
            try:
                self._done.result(10.0)
            except concurrent.futures.TimeoutError:
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)

    def __enter__(self) -> "MCPToolset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
