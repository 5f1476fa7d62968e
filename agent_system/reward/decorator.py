"""``@reward_function``, loading user reward files, and the registry of named rewards.

The API (docs/reward_api.md, "Quick start"):

- ``@reward_function`` (bare) or ``@reward_function(mode="pointwise"|"batch", timeout_s=..., name=...)``;
- pointwise: ``fn(messages: list[Message], ground_truth, **kwargs) -> EvaluateResult``;
- batch: ``fn(rollouts_messages: list[list[Message]], ground_truths: list, **kwargs) -> list[EvaluateResult]``, one
  result per rollout, aligned by index (checked here);
- dict messages become :class:`Message`, returns are coerced (:func:`~agent_system.reward.models.coerce_result`),
  and a function that does not accept ``**kwargs`` is rejected when it is decorated.

``custom_reward_function.path`` / ``.name`` (upstream verl's keys) are resolved by :func:`load_reward_function`; an
undecorated upstream-style ``compute_score(data_source, solution_str, ground_truth, extra_info)`` is adapted
(:func:`adapt_compute_score`). The built-in RLLA reward is registered under ``"rlla"`` (:func:`get_reward_function`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, model_validator

from agent_system.reward.models import EvaluateResult, Message, coerce_result

__all__ = [
    "MODES",
    "RewardFunction",
    "RewardSource",
    "adapt_compute_score",
    "as_reward_function",
    "get_reward_function",
    "load_reward_function",
    "register_reward_function",
    "registered_reward_functions",
    "resolve_source",
    "reward_function",
    "solution_text",
]

MODES = ("pointwise", "batch")
_UPSTREAM_PARAMS = frozenset({"data_source", "solution_str"})
_FILE_MODULE_PREFIX = "_reward_file_"


class RewardSource(BaseModel):
    """Where a worker process can load a reward function from: a file (``path``) or an importable ``module``, plus the
    attribute ``name`` (dotted for nested attributes). Exactly one of ``path`` / ``module``."""

    path: str | None = None
    module: str | None = None
    name: str

    @model_validator(mode="after")
    def _one_origin(self) -> "RewardSource":
        if (self.path is None) == (self.module is None):
            raise ValueError("RewardSource needs exactly one of path / module")
        return self


class RewardFunction:
    """A reward function with its declared mode; calling it converts inputs and checks outputs.

    Args:
        fn: the user's function (see the module docstring for the two signatures).
        mode: ``"pointwise"`` or ``"batch"``.
        timeout_s: per-call time limit in the process sandbox (None: the sandbox's default).
        name: display name (metrics, logs); default ``fn.__name__``.
        source: where a sandbox worker re-loads it; None derives it from ``fn.__module__``/``__qualname__`` when the
            module is importable (not ``__main__``, not a local function).

    Raises:
        ValueError: unknown ``mode`` or a non-positive ``timeout_s``.
        TypeError: ``fn`` is not callable, lacks ``**kwargs``, or cannot take the two positional arguments.
    """

    def __init__(
        self,
        fn: Callable,
        mode: str = "pointwise",
        timeout_s: float | None = None,
        name: str | None = None,
        source: RewardSource | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@reward_function needs a callable, got {type(fn).__name__}")
        if mode not in MODES:
            raise ValueError(f"@reward_function(mode={mode!r}): expected one of {MODES}")
        if timeout_s is not None and not float(timeout_s) > 0:
            raise ValueError(f"@reward_function(timeout_s={timeout_s!r}): must be > 0")
        label = name or getattr(fn, "__name__", type(fn).__name__)
        signature = inspect.signature(fn)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
            raise TypeError(
                f"reward function {label!r} must accept **kwargs (the trainer passes extra keywords "
                "such as data_source, extra_info, step); add **kwargs to its signature"
            )
        try:
            signature.bind(None, None)
        except TypeError:
            first = "messages" if mode == "pointwise" else "rollouts_messages"
            second = "ground_truth" if mode == "pointwise" else "ground_truths"
            raise TypeError(
                f"reward function {label!r} ({mode}) must accept ({first}, {second}, **kwargs); "
                f"its signature is {signature}"
            ) from None
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.mode = mode
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.name = label
        self.source = source or _default_source(fn)

    def __repr__(self) -> str:
        return f"RewardFunction({self.name!r}, mode={self.mode!r}, timeout_s={self.timeout_s})"

    def __call__(self, messages: Sequence, ground_truth: Any, **kwargs: Any) -> EvaluateResult | list[EvaluateResult]:
        """Run the function in this process.

        Pointwise: ``messages`` is one rollout (dicts or :class:`Message`), ``ground_truth`` its ground truth; returns
        one :class:`EvaluateResult`. Batch: ``messages`` is a list of rollouts and ``ground_truth`` the list of their
        ground truths; returns one result per rollout, in order.

        Raises:
            TypeError / ValueError: invalid messages, a return value that cannot be coerced, or (batch) a ground-truth
                list or result list whose length differs from the number of rollouts; whatever ``fn`` raises.
        """
        if self.mode == "pointwise":
            return coerce_result(self.fn(_to_messages(messages), ground_truth, **kwargs))
        rollouts = [_to_messages(rollout) for rollout in messages]
        ground_truths = list(ground_truth)
        if len(ground_truths) != len(rollouts):
            raise ValueError(
                f"batch reward {self.name!r}: {len(rollouts)} rollouts but {len(ground_truths)} ground truths"
            )
        results = self.fn(rollouts, ground_truths, **kwargs)
        if not isinstance(results, (list, tuple)):
            raise TypeError(
                f"batch reward {self.name!r} returned {type(results).__name__}; expected a list with one "
                "EvaluateResult per rollout"
            )
        if len(results) != len(rollouts):
            raise ValueError(
                f"batch reward {self.name!r} returned {len(results)} results for {len(rollouts)} "
                "rollouts; it must return exactly one EvaluateResult per rollout, in input order"
            )
        return [coerce_result(r) for r in results]


def _to_messages(messages: Sequence) -> list[Message]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of Message/dict, got {type(messages).__name__}")
    return [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]


def _default_source(fn: Callable) -> RewardSource | None:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname or module not in sys.modules:
        return None
    if module.startswith(_FILE_MODULE_PREFIX):
        return None  # loaded from a path: load_reward_function records the path instead
    return RewardSource(module=module, name=qualname)


def reward_function(
    fn: Callable | None = None, *, mode: str = "pointwise", timeout_s: float | None = None, name: str | None = None
) -> RewardFunction | Callable[[Callable], RewardFunction]:
    """Declare a reward function: bare ``@reward_function`` or ``@reward_function(mode=..., timeout_s=..., name=...)``.

    Returns a :class:`RewardFunction` (bare form) or a decorator producing one. Raises as :class:`RewardFunction`.
    """
    if fn is not None:
        return RewardFunction(fn, mode=mode, timeout_s=timeout_s, name=name)
    return lambda f: RewardFunction(f, mode=mode, timeout_s=timeout_s, name=name)


def solution_text(messages: Sequence[Message], kwargs: dict[str, Any]) -> str:
    """The text a string-based scorer grades: ``kwargs["solution_str"]`` when the caller gives one (the reward manager
    passes its decoded text, see ``reward_model.decode``), else the text of the last assistant message (``""``)."""
    solution = kwargs.get("solution_str")
    if solution is not None:
        return solution
    return next((m.text() for m in reversed(messages) if m.role == "assistant"), "")


def adapt_compute_score(fn: Callable, name: str | None = None, source: RewardSource | None = None) -> RewardFunction:
    """Wrap an upstream verl ``compute_score(data_source, solution_str, ground_truth, extra_info)`` as a pointwise
    reward: ``solution_str`` is :func:`solution_text`; ``data_source`` and ``extra_info`` come from the keywords."""

    def pointwise(messages: list[Message], ground_truth: Any, **kwargs: Any) -> Any:
        return fn(
            data_source=kwargs.get("data_source"),
            solution_str=solution_text(messages, kwargs),
            ground_truth=ground_truth,
            extra_info=kwargs.get("extra_info"),
        )

    label = name or getattr(fn, "__name__", "compute_score")
    pointwise.__name__ = pointwise.__qualname__ = label
    return RewardFunction(pointwise, name=label, source=source or _default_source(fn))


def as_reward_function(obj: Any, name: str, source: RewardSource | None = None) -> RewardFunction:
    """A :class:`RewardFunction` for an object found in a user file or module: a decorated function as is; an
    upstream-style ``compute_score`` (it has a ``solution_str`` or ``data_source`` parameter) adapted; another
    function taking ``**kwargs`` as a pointwise reward.

    Raises:
        TypeError: ``obj`` is not callable or fits none of these (message names ``name``).
    """
    if isinstance(obj, RewardFunction):
        if source is not None:
            obj.source = source
        return obj
    if not callable(obj):
        raise TypeError(f"reward {name!r} is a {type(obj).__name__}, not a function")
    params = set(inspect.signature(obj).parameters)
    if params & _UPSTREAM_PARAMS:
        return adapt_compute_score(obj, name=name, source=source)
    return RewardFunction(obj, name=name, source=source)


def load_reward_function(path: str, name: str = "compute_score") -> RewardFunction:
    """Import the Python file ``path`` and return its reward ``name`` (``custom_reward_function.path/name``).

    The module is imported once per process under a name derived from the absolute path; the returned function's
    ``source`` is the path, so sandbox workers load the same file.

    Raises:
        FileNotFoundError: ``path`` is not a file. AttributeError: the file defines no ``name``.
        TypeError: see :func:`as_reward_function`; anything the file raises on import.
    """
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"custom_reward_function.path: {path} not found")
    module_name = _FILE_MODULE_PREFIX + hashlib.sha1(path.encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    if not hasattr(module, name):
        raise AttributeError(f"custom_reward_function.name: {path} defines no function {name!r}")
    return as_reward_function(getattr(module, name), name, source=RewardSource(path=path, name=name))


def resolve_source(source: RewardSource) -> RewardFunction:
    """Load the reward a :class:`RewardSource` names (used by sandbox workers).

    Raises: as :func:`load_reward_function`; ``ImportError`` / ``AttributeError`` for a module source.
    """
    if source.path is not None:
        return load_reward_function(source.path, source.name)
    obj: Any = importlib.import_module(source.module)
    for part in source.name.split("."):
        obj = getattr(obj, part)
    return as_reward_function(obj, source.name.rsplit(".", 1)[-1], source=source)


# -------------------- registry of named rewards ----------------------------------------------------------------------
_REGISTRY: dict[str, RewardFunction | RewardSource] = {
    "rlla": RewardSource(module="agent_system.reward.builtin", name="rlla_reward"),
}


def register_reward_function(name: str, reward: RewardFunction | RewardSource) -> None:
    """Register ``reward`` (a function, or a source imported lazily on first use) under ``name``.

    Raises: ValueError: ``name`` is taken. TypeError: ``reward`` is neither type.
    """
    if not isinstance(reward, (RewardFunction, RewardSource)):
        raise TypeError(f"register_reward_function: expected a RewardFunction or RewardSource, got {type(reward)}")
    if name in _REGISTRY:
        raise ValueError(f"a reward named {name!r} is already registered")
    _REGISTRY[name] = reward


def get_reward_function(name: str) -> RewardFunction:
    """The registered reward ``name`` (``"rlla"``: the built-in ToolRL reward).

    Raises: KeyError: unknown name; the message lists the registered ones.
    """
    if name not in _REGISTRY:
        raise KeyError(f"no reward function registered as {name!r}; registered: {sorted(_REGISTRY)}")
    entry = _REGISTRY[name]
    if isinstance(entry, RewardSource):
        entry = _REGISTRY[name] = resolve_source(entry)
    return entry


def registered_reward_functions() -> list[str]:
    """Names accepted by :func:`get_reward_function`."""
    return sorted(_REGISTRY)
