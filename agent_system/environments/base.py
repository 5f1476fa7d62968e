"""The single-environment interface and the action projection shared by every text environment.

An environment here is one episode-playing instance that speaks text: ``reset(seed)`` starts an episode and
``step(action)`` plays one already-projected action. Batching, groups, history windows and worker processes live in
``agent_system.environments.manager``; the model-output parsing lives in :func:`project_action`. Environments are
registered by name (``env.env_name``) with :func:`register_env` and built with :func:`make_env`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def project_action(text: str, tag: str = "action") -> Optional[str]:
    """Parse the action out of one model output.

    The action is the content of the LAST ``<tag>…</tag>`` pair (so a model that drafts and then corrects itself is
    judged on its final answer), stripped of surrounding whitespace; tag names are matched case-insensitively.

    Args:
        text: the decoded response of one step (special tokens already removed).
        tag: the tag name (``env.action_tag``, default ``action``).
    Returns:
        The action string, or None when there is no complete non-empty tag pair — the caller then marks the step's
        action invalid (``is_action_valid=False``) and the environment state does not change.
    """
    pattern = (
        ACTION_RE
        if tag == "action"
        else re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL | re.IGNORECASE)
    )
    found = pattern.findall(text or "")
    if not found:
        return None
    action = found[-1].strip()
    return action or None


@dataclass
class StepResult:
    """What one environment instance returns from ``reset``/``step``.

    Attributes:
        text: the observation shown to the model (plain text, without the task instruction or history).
        anchor: the raw observation used by GiGPO to group identical states (a hashable value, a numpy array or a
            dict; compared by value, see ``verl.trainer.ppo.gigpo.canonicalize_anchor``).
        reward: float reward of the step (0.0 for ``reset``).
        done: whether the episode ended (won, lost or out of steps).
        info: ``won`` (bool), ``is_action_valid`` (bool; True for ``reset``), ``admissible_actions`` (list[str] where
            the environment has them), plus environment-specific keys.
    """

    text: str
    anchor: Any
    reward: float = 0.0
    done: bool = False
    info: Dict[str, Any] = field(default_factory=dict)


class TextEnv:
    """One text environment instance. Subclasses implement :meth:`reset` and :meth:`step`.

    ``instruction`` is the task description shown to the model once per prompt (rules, the action format with
    ``<action>…</action>``, the list of legal actions). Instances must be deterministic given the ``seed`` passed to
    ``reset`` so that the ``env.rollout.n`` copies of one task start from the same state.
    """

    instruction: str = ""
    # the trainer's global step of the episode (set before each reset by the environment manager): a reward that
    # depends on the step, such as ToolRL's scheduled RLLA rewards, reads it; 0 outside training
    training_step: int = 0

    def reset(self, seed: int) -> StepResult:  # pragma: no cover - interface
        raise NotImplementedError

    def step(self, action: Optional[str]) -> StepResult:  # pragma: no cover - interface
        """Play ``action`` (None = the model's output had no parseable action: return the unchanged state with
        ``info['is_action_valid']=False`` and reward 0)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


_REGISTRY: Dict[str, Callable[..., TextEnv]] = {}


def register_env(name: str) -> Callable:
    """Class decorator: make a :class:`TextEnv` subclass available as ``env.env_name=<name>``."""

    def wrap(cls):
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"environment {name!r} is already registered by {_REGISTRY[name].__name__}")
        _REGISTRY[name] = cls
        return cls

    return wrap


def available_envs() -> List[str]:
    """Names accepted by ``env.env_name``."""
    return sorted(_REGISTRY)


def env_class(name: str):
    """The class registered as ``name``. Raises ValueError for an unknown name (listing the registered ones)."""
    if name not in _REGISTRY:
        raise ValueError(f"env.env_name={name!r} is not a registered environment; expected one of {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def make_env(name: str, **kwargs) -> TextEnv:
    """Build one environment instance ``name`` with its keyword settings (``env.<name>.*`` in the config).

    Raises:
        ValueError: unknown name (the message lists the registered ones).
    """
    return env_class(name)(**kwargs)


def split_step(result: StepResult) -> Tuple[str, Any, float, bool, Dict[str, Any]]:
    """``(text, anchor, reward, done, info)`` of a :class:`StepResult`, with ``won``/``is_action_valid`` defaulted."""
    info = dict(result.info)
    info.setdefault("won", False)
    info.setdefault("is_action_valid", True)
    return result.text, result.anchor, float(result.reward), bool(result.done), info
