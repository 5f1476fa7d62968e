"""Typed tools: a Python function whose OpenAI function schema and argument validation come from its signature.

Reference: ``docs/tools.md``. ``@tool(family=...)`` turns a function with type-annotated parameters and a Google-style
docstring into a :class:`Tool`: the docstring's summary is the tool's description, its ``Args:`` entries the
parameters' descriptions, and a pydantic model built from the signature both validates the arguments a policy wrote
and gives the JSON schema (``model_json_schema``) that the chat template renders with ``tools=[...]``. Every tool
declares its family (``search``, ``calculate`` or ``other``), the unit the router prices.

A tool never raises into the rollout: :meth:`Tool.invoke` returns a :class:`~agent_system.tools.result.ToolResult`,
failed (``ok=False``, content ``"Error: ..."``) when the arguments do not validate (the message names the argument),
the function raises, or it returns something that is neither text nor JSON-serialisable. Tools are loaded by
reference (:class:`ToolSpec`: ``"module:attr"`` or ``"path/to/file.py:attr"``, a tool, a registry or a factory called
with ``kwargs``), which is how a sandbox worker process builds the same tools again.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agent_system.tools.result import ToolResult

__all__ = [
    "FAMILIES",
    "Tool",
    "ToolRegistry",
    "ToolSpec",
    "failed",
    "load_tools",
    "render_output",
    "tool",
]

FAMILIES = ("search", "calculate", "other")
MAX_ERROR_CHARS = 500


class ToolSpec(BaseModel):
    """Where a tool comes from: ``ref`` (``"package.module:attr"`` or ``"path/to/file.py:attr"``) names a
    :class:`Tool`, a :class:`ToolRegistry`, a list of tools, or a factory returning one of these, called with
    ``kwargs``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ref: str
    kwargs: dict[str, Any] = Field(default_factory=dict)


def failed(name: str, reason: str, seconds: float = 0.0) -> ToolResult:
    """A failed call's result: the policy reads ``"Error: <reason>"``."""
    reason = reason[:MAX_ERROR_CHARS]
    return ToolResult(name=name, content=f"Error: {reason}", ok=False, error=reason, seconds=seconds)


def render_output(value: Any) -> str:
    """A tool's return value as observation text: a string as it is, anything else as JSON.

    Raises:
        TypeError: ``value`` is not JSON-serialisable (bytes, objects, NaN, ...).
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"returned {type(value).__name__}, which is neither text nor JSON ({err})") from None


def _validation_message(name: str, err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        where = ".".join(str(x) for x in e["loc"]) or "arguments"
        parts.append(f"argument {where!r}: {e['msg']}")
    return f"{name}: " + "; ".join(parts)


class Tool:
    """One tool: name, family, description, the JSON schema of its parameters, and how to call it.

    Args:
        name: the name the policy calls (unique in a registry).
        family: one of :data:`FAMILIES`.
        description: what the tool does (shown to the policy).
        parameters: JSON schema of the arguments (``{"type": "object", "properties": ..., "required": ...}``).
        call: ``call(arguments: dict) -> Any``, the return value rendered by :func:`render_output`.
        args_model: a pydantic model validating the arguments before ``call`` (None: ``call`` validates).
        remote: the tool runs elsewhere already (an MCP server), so it is called from the trainer process even when
            tools are sandboxed.

    Raises:
        ValueError: an unknown family or an empty name.
    """

    def __init__(
        self,
        name: str,
        family: str,
        description: str,
        parameters: dict,
        call: Callable[[dict], Any],
        args_model: type[BaseModel] | None = None,
        remote: bool = False,
    ) -> None:
        if family not in FAMILIES:
            raise ValueError(f"tool {name!r}: family must be one of {FAMILIES}, got {family!r}")
        if not name or not isinstance(name, str):
            raise ValueError(f"a tool needs a non-empty string name, got {name!r}")
        self.name, self.family, self.description = name, family, description
        self.parameters, self.args_model, self.remote = parameters, args_model, remote
        self._call = call
        self.source: ToolSpec | None = None  # set by load_tools: how a worker process builds this tool again
        self.fn: Callable | None = None  # the decorated function, for @tool tools

    @classmethod
    def from_function(cls, fn: Callable, name: str | None = None, family: str = "other") -> "Tool":
        """A tool from a function with annotated parameters and a Google-style docstring.

        Raises:
            ValueError: a parameter without a type annotation, or ``*args`` / ``**kwargs``.
        """
        from transformers.utils.chat_template_utils import parse_google_format_docstring

        name = name or fn.__name__
        summary, arg_docs, _ = parse_google_format_docstring(inspect.getdoc(fn) or "")
        fields = {}
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ValueError(f"tool {name!r}: *args / **kwargs cannot be described to a policy")
            if param.annotation is inspect.Parameter.empty:
                raise ValueError(f"tool {name!r}: parameter {param.name!r} needs a type annotation")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (param.annotation, Field(default, description=arg_docs.get(param.name)))
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        schema = _clean_schema(model.model_json_schema())
        made = cls(name, family, (summary or "").strip(), schema, lambda args: fn(**args), args_model=model)
        made.fn = fn
        return made

    def schema(self) -> dict:
        """The OpenAI function schema ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: Any) -> dict:
        """The validated arguments (pydantic-coerced when the tool has a model).

        Raises:
            ValueError: not a JSON object, or an argument is missing, unknown or of the wrong type (the message names
                the argument).
        """
        if not isinstance(arguments, dict):
            raise ValueError(f"{self.name}: arguments must be a JSON object, got {type(arguments).__name__}")
        if self.args_model is None:
            return dict(arguments)
        try:
            return dict(self.args_model.model_validate(arguments))
        except ValidationError as err:
            raise ValueError(_validation_message(self.name, err)) from None

    def invoke(self, arguments: Any) -> ToolResult:
        """Validate and call in this process; never raises for the tool's own failures (see the module doc)."""
        start = time.perf_counter()
        try:
            args = self.validate(arguments)
        except ValueError as err:
            return failed(self.name, str(err))
        try:
            value = self._call(args)
        except MemoryError:
            return failed(self.name, f"{self.name} ran out of memory", time.perf_counter() - start)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - a failing tool is an error observation
            return failed(self.name, f"{self.name} raised {type(err).__name__}: {err}", time.perf_counter() - start)
        try:
            content = render_output(value)
        except TypeError as err:
            return failed(self.name, f"{self.name} {err}", time.perf_counter() - start)
        return ToolResult(name=self.name, content=content, seconds=time.perf_counter() - start)

    def __call__(self, *args, **kwargs):
        """A ``@tool`` function stays callable as the plain function."""
        if self.fn is None:
            raise TypeError(f"tool {self.name!r} is not a Python function; use invoke(arguments)")
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, family={self.family!r})"


def _clean_schema(schema: dict) -> dict:
    """pydantic's schema without its ``title`` keys (noise in a prompt)."""
    if isinstance(schema, dict):
        return {k: _clean_schema(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


def tool(fn: Callable | None = None, *, name: str | None = None, family: str = "other"):
    """Decorator: ``@tool`` or ``@tool(family="calculate", name=...)`` turns a function into a :class:`Tool`
    (:meth:`Tool.from_function`)."""
    if fn is not None:
        return Tool.from_function(fn, name=name, family=family)
    return lambda f: Tool.from_function(f, name=name, family=family)


class ToolRegistry:
    """Tools by name, in the order added.

    Raises:
        ValueError: two tools with one name.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool) -> None:
        if not isinstance(t, Tool):
            raise TypeError(f"expected a Tool, got {type(t).__name__}")
        if t.name in self._tools:
            raise ValueError(f"two tools named {t.name!r}")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict]:
        """Every tool's OpenAI function schema, in order (``tools=`` of a chat template)."""
        return [t.schema() for t in self]

    def families(self) -> dict[str, str]:
        """Tool name -> family."""
        return {t.name: t.family for t in self}

    @classmethod
    def from_specs(cls, specs: Iterable[ToolSpec | dict | str]) -> "ToolRegistry":
        """Load every spec (:func:`load_tools`) into one registry."""
        registry = cls()
        for spec in specs:
            for t in load_tools(spec):
                registry.add(t)
        return registry


def _resolve(ref: str) -> Any:
    module_part, sep, attr = ref.rpartition(":")
    if not sep or not module_part or not attr:
        raise ValueError(f"tool reference {ref!r}: expected 'package.module:attr' or 'path/to/file.py:attr'")
    if module_part.endswith(".py"):
        path = Path(module_part).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"tool reference {ref!r}: no file {path}")
        spec = importlib.util.spec_from_file_location(f"_toolrl_tools_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_part)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"tool reference {ref!r}: {module_part} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_tools(spec: ToolSpec | dict | str) -> list[Tool]:
    """The tools a spec names (a string is ``ToolSpec(ref=...)``); each remembers its spec as ``source``.

    Raises:
        ValueError: the reference does not resolve, or ``kwargs`` given for something that is not a factory.
        TypeError: it resolves to something that is not a tool, a registry, a list of tools or a factory of them.
    """
    spec = ToolSpec(ref=spec) if isinstance(spec, str) else ToolSpec.model_validate(spec)
    obj = _resolve(spec.ref)
    if not isinstance(obj, (Tool, ToolRegistry, list, tuple)) and callable(obj):
        obj = obj(**spec.kwargs)
    elif spec.kwargs:
        raise ValueError(
            f"tool reference {spec.ref!r}: kwargs given but it names a {type(obj).__name__}, not a factory"
        )
    tools = [obj] if isinstance(obj, Tool) else list(obj) if isinstance(obj, (ToolRegistry, list, tuple)) else None
    if tools is None or not all(isinstance(t, Tool) for t in tools):
        raise TypeError(
            f"tool reference {spec.ref!r} gave {type(obj).__name__}: expected a Tool, a ToolRegistry or a list of them"
        )
    for t in tools:
        t.source = spec
    return tools
