"""Text environments for multi-turn agent training (``env.env_name``).

Importing the package registers the built-in environments: each module's ``@register_env`` runs on import. Optional
packages (gym-sokoban, textworld) are imported by an environment's constructor, so a missing extra fails only when
that environment is built. ``base`` holds the registry and imports none of them (no import cycle).
"""

import importlib

from agent_system.environments import toy_envs  # noqa: F401  (line_world)

for _module in ("sokoban_env", "textworld_env", "rlla_multiturn"):
    try:
        importlib.import_module(f"agent_system.environments.{_module}")
    except ModuleNotFoundError as _exc:  # a module of this package removed on purpose; other errors surface
        if _exc.name != f"agent_system.environments.{_module}":
            raise
