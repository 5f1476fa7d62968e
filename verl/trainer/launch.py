"""The launch path: ``recipe=<name>`` on the command line of ``main_ppo`` (and ``main_async``).

A recipe is one file, ``verl/trainer/config/recipe/<name>.yaml``, applied over the trainer's YAML, with the
hardware, ``cpu`` or ``gpu``, picked here from ``torch.cuda.device_count()`` unless the command line says
``hardware=cpu|gpu`` or ``N_GPUS`` is set. The recipe takes its sizes for that hardware from
``hardware/<family>/<hw>.yaml`` (its defaults list); ``hardware/<hw>.yaml`` holds only what the device decides
(nodes, workers, in-process or Ray, the device), which no recipe sets. The order, each later one winning::

    ppo_trainer.yaml < hardware/<family>/<hw>.yaml < recipe/<name>.yaml < hardware/<hw>.yaml
        < what the hardware implies (trainer.n_gpus_per_node; Ray for more than one GPU)
        < the launch variables below (ToolRL's and the design's: BASE_MODEL, TRAIN_BATCH_SIZE, ...)
        < key=value on the command line

Without ``recipe=`` the command line is passed on unchanged: a ToolRL launch line (``main_ppo key=value ...``)
resolves exactly as in ToolRL, and the launch variables are not read (ToolRL's scripts expand them themselves).

``recipe=router`` is the main job's recipe for the hardware: ``router_value_ridge`` without a GPU, ``router_option_a``
with one (``ROUTER_RECIPE=option_a|value_ridge`` chooses). ``docs/recipes.md`` lists the recipes.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence

from verl.trainer.config_errors import ConfigError

logger = logging.getLogger(__name__)

RECIPE_ALIASES = {"router": {"cpu": "router_value_ridge", "gpu": "router_option_a"}}
ROUTER_RECIPES = {"option_a": "router_option_a", "value_ridge": "router_value_ridge"}  # ROUTER_RECIPE's values

# ToolRL's and the design's launch variables, read only with a recipe: variable -> (config key, what it takes). Each
# family of recipes reads exactly the ones its launch script read (variables_for). Kinds: int, int_or_null, float,
# fraction (0 to 1), bool, str; a variable set to the empty string counts as unset.
LAUNCH_VARIABLES: dict[str, tuple[str, str]] = {  # the RLLA recipes (train_grpo.sh, train_ppo.sh, examples/)
    "BASE_MODEL": ("actor_rollout_ref.model.path", "str"),
    "EXPERIMENT_NAME": ("trainer.experiment_name", "str"),
    "RUN_DIR": ("trainer.run_dir", "str"),
    "TRAIN_BATCH_SIZE": ("data.train_batch_size", "int"),
    "PPO_MINI_BATCH_SIZE": ("actor_rollout_ref.actor.ppo_mini_batch_size", "int"),
    "MICRO_BATCH_PER_GPU": ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "int"),
    "ROLLOUT_N": ("actor_rollout_ref.rollout.n", "int"),
    "ROLLOUT_NAME": ("actor_rollout_ref.rollout.name", "str"),
    "ROLLOUT_TP_SIZE": ("actor_rollout_ref.rollout.tensor_model_parallel_size", "int"),
    "MAX_PROMPT_LENGTH": ("data.max_prompt_length", "int"),
    "MAX_RESPONSE_LENGTH": ("data.max_response_length", "int"),
    "FILTER_OVERLONG": ("data.filter_overlong_prompts", "bool"),
    "LR": ("actor_rollout_ref.actor.optim.lr", "float"),
    "TOTAL_EPOCHS": ("trainer.total_epochs", "int"),
    "TOTAL_STEPS": ("trainer.total_training_steps", "int_or_null"),
    "SAVE_FREQ": ("trainer.save_freq", "int"),
    "TEST_FREQ": ("trainer.test_freq", "int"),
    "SHARED_PROMPT": ("actor_rollout_ref.model.use_shared_prompt", "bool"),
    "FUSED_KERNELS": ("actor_rollout_ref.model.use_fused_kernels", "bool"),
    "SINGLE_PROCESS": ("trainer.single_process", "bool"),
}
ROUTER_VARIABLES: dict[str, tuple[str, str]] = {  # the router recipes (run_router_training.sh): the RLLA ones but
    # ROLLOUT_TP_SIZE (the script fixed it at 1), and these
    **{name: kind for name, kind in LAUNCH_VARIABLES.items() if name != "ROLLOUT_TP_SIZE"},
    "PROJECT_NAME": ("trainer.project_name", "str"),
    "BUDGET_B": ("router.budget_B", "float"),
    "IRRELEVANCE_FRACTION": ("router.irrelevance_fraction", "fraction"),
    "IRRELEVANCE_SEED": ("router.irrelevance_seed", "int"),
}
AGENT_VARIABLES: dict[str, tuple[str, str]] = {  # the agent recipe (examples/gigpo_trainer/run_agent.sh)
    **{
        name: LAUNCH_VARIABLES[name]
        for name in (
            "BASE_MODEL",
            "EXPERIMENT_NAME",
            "RUN_DIR",
            "MAX_PROMPT_LENGTH",
            "MAX_RESPONSE_LENGTH",
            "LR",
            "TOTAL_STEPS",
            "SAVE_FREQ",
            "TEST_FREQ",
        )
    },
    "ENV_NAME": ("env.env_name", "str"),
    "ESTIMATOR": ("algorithm.adv_estimator", "str"),
    "TASKS_PER_STEP": ("data.train_batch_size", "int"),
    "GROUP_N": ("actor_rollout_ref.rollout.n", "int"),  # episodes per task
    "MAX_TURNS": ("env.max_steps", "int"),
    "VAL_TASKS": ("env.val_tasks", "int"),
    "MICRO_BATCH": ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "int"),
}
ASYNC_VARIABLES: dict[str, tuple[str, str]] = {  # main_async's recipes (examples/async/run_async.sh)
    "MODEL": ("actor_rollout_ref.model.path", "str"),
    "STEPS": ("trainer.total_training_steps", "int_or_null"),
    "NAME": ("trainer.experiment_name", "str"),
}
# Read by the code itself, not mapped to a key: DATA_DIR (data discovery, verl.utils.dataset.rlla_data), N_GPUS (the
# hardware, below), ROUTER_RECIPE (recipe=router), the reward switches (WITHLENGTH, REFINEDREWARD, ...: read by the
# reward when it scores; a recipe turns them on with reward_model.switches), PYTHON (scripts/ensure_env.sh).

_EXPECTED = {
    "int": "an integer",
    "int_or_null": "a whole number, or null",
    "float": "a number such as 1e-4",
    "fraction": "a number from 0 to 1",
    "bool": "True or False",
    "str": "a value",
}
_PATTERNS = {
    "int": r"-?[0-9]+",
    "int_or_null": r"[0-9]+|null",
    "float": r"[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?",
    "fraction": r"0*\.[0-9]+|0+(\.0*)?|1(\.0*)?",
    "bool": r"[Tt]rue|[Ff]alse",
    "str": r".+",
}


class LaunchError(ConfigError):
    """A launch variable or a ``recipe=`` / ``hardware=`` choice is wrong; the message names it."""


def _group_choice(args: Sequence[str], group: str) -> tuple[str | None, list[str]]:
    """``(choice, remaining args)`` for ``group=X`` / ``+group=X`` / ``++group=X`` among ``args`` (the last wins)."""
    choice, rest = None, []
    for arg in args:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == group:
            choice = value
        else:
            rest.append(arg)
    return choice, rest


def gpu_count(environ: Mapping[str, str]) -> int:
    """``N_GPUS`` when set (a whole number), else ``torch.cuda.device_count()``.

    Raises:
        LaunchError: ``N_GPUS`` is not a whole number.
    """
    value = environ.get("N_GPUS", "")
    if value != "":
        if not re.fullmatch(r"[0-9]+", value):
            raise LaunchError(f"N_GPUS={value}: expected a whole number of GPUs (0: CPU)")
        return int(value)
    import torch

    return torch.cuda.device_count()


def variable_overrides(environ: Mapping[str, str], table: Mapping[str, tuple[str, str]]) -> list[str]:
    """``key=value`` for every variable of ``table`` set (non-empty) in ``environ``, in the table's order.

    Raises:
        LaunchError: a value of the wrong kind, naming the variable, what it expects and the key it sets.
    """
    overrides = []
    for name, (key, kind) in table.items():
        value = environ.get(name, "")
        if value == "":
            continue
        if not re.fullmatch(_PATTERNS[kind], value):
            raise LaunchError(f"{name}={value}: expected {_EXPECTED[kind]} (it sets {key})")
        overrides.append(f"{key}={value}")
    return overrides


def recipe_family(recipe: str) -> str:
    """``agent`` for ``recipe=agent``, ``async`` for the async recipes, ``router`` for the router's, ``rlla`` for the
    rest (the family names the launch variables a recipe reads: :func:`variables_for`)."""
    if recipe == "agent" or recipe.startswith("async"):
        return recipe.split("_")[0]
    return "router" if recipe.startswith("router") else "rlla"


def variables_for(family: str) -> dict[str, tuple[str, str]]:
    """The launch variables a recipe family reads: what its launch script read before the recipes existed."""
    return {"agent": AGENT_VARIABLES, "async": ASYNC_VARIABLES, "router": ROUTER_VARIABLES}.get(
        family, LAUNCH_VARIABLES
    )


def launch_overrides(
    args: Sequence[str], environ: Mapping[str, str] | None = None, *, app: str = "main_ppo"
) -> list[str]:
    """The Hydra command line for ``args`` (the module docstring gives the order).

    With ``recipe=<name>`` (or ``+recipe=``): ``+recipe=<name>`` and ``+hardware=<cpu|gpu>`` (appended to the
    defaults list, so they apply over the app's YAML), what the hardware implies, the launch variables set in
    ``environ``, then the other ``args`` as given. Without it, ``args`` unchanged (a ``hardware=`` alone is refused:
    it means nothing without a recipe).

    Args:
        args: the command line after the module name (Hydra flags such as ``--cfg job`` pass through).
        environ: the environment (default ``os.environ``).
        app: ``main_ppo`` or ``main_async`` (its recipes take no hardware group; its own variables apply).

    Raises:
        LaunchError: an unknown recipe or hardware, ``ROUTER_RECIPE`` / ``N_GPUS`` / a launch variable of the wrong
            kind, or ``hardware=`` without a recipe.
    """
    from pathlib import Path

    environ = os.environ if environ is None else environ
    recipe, rest = _group_choice(args, "recipe")
    hardware, rest = _group_choice(rest, "hardware")
    if recipe is None:
        if hardware is not None:
            raise LaunchError(
                f"hardware={hardware} chooses a recipe's hardware defaults: give recipe=<name> too (docs/recipes.md)"
            )
        return list(args)
    if hardware not in (None, "cpu", "gpu"):
        raise LaunchError(f"hardware={hardware}: expected cpu or gpu")
    if recipe_family(recipe) == "async":  # the async mode runs on one CPU layout (docs/async.md): no hardware group
        if hardware is not None:
            raise LaunchError(
                f"hardware={hardware}: the async recipes take no hardware group (the async mode runs "
                f"on CPU; docs/async.md)"
            )
        gpus, hardware = 0, "cpu"
    elif hardware is None:
        gpus = gpu_count(environ)
        hardware = "gpu" if gpus > 0 else "cpu"
    else:
        gpus = max(1, gpu_count(environ)) if hardware == "gpu" else 0
    if recipe in RECIPE_ALIASES:
        chosen = environ.get("ROUTER_RECIPE", "")
        if chosen and chosen not in ROUTER_RECIPES:
            raise LaunchError(f"ROUTER_RECIPE={chosen}: expected {' or '.join(ROUTER_RECIPES)}")
        recipe = ROUTER_RECIPES[chosen] if chosen else RECIPE_ALIASES[recipe][hardware]
    config_dir = Path(__file__).parent / "config"
    if not (config_dir / "recipe" / f"{recipe}.yaml").is_file():
        known = sorted(p.stem for p in (config_dir / "recipe").glob("*.yaml")) + sorted(RECIPE_ALIASES)
        raise LaunchError(f"recipe={recipe}: no verl/trainer/config/recipe/{recipe}.yaml; recipes: {', '.join(known)}")
    family = recipe_family(recipe)
    if (app == "main_async") != (family == "async"):
        raise LaunchError(
            f"recipe={recipe} is a recipe for {'main_async' if family == 'async' else 'main_ppo'}, not {app}"
        )
    out = [f"+recipe={recipe}"]
    if family != "async":  # the async mode runs on CPU only (docs/async.md): no hardware group
        # the recipe first: its defaults list takes its family's sizes for ${hardware} (hardware/<family>/<hw>.yaml)
        out.append(f"+hardware={hardware}")
        if hardware == "gpu":
            out.append(f"trainer.n_gpus_per_node={gpus}")
            if gpus > 1:  # one worker per GPU, driven by Ray (and the agent's environments in Ray workers, as before)
                out.append("trainer.single_process=false")
                if family == "agent":
                    out.append("env.use_ray_workers=true")
    out += variable_overrides(environ, variables_for(family))
    logger.info("recipe %s on %s (%s)", recipe, hardware, f"{gpus} GPU(s)" if gpus else "no GPU")
    return out + rest
