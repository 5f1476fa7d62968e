"""Where a router checkpoint's pieces live and how they load (``docs/router.md``, "Inference"): the HF export of the
actor, the router head, the training config, and a value head's price and route values from ``data.pt``. Used by
:mod:`verl.router.infer` and by the evidence scripts that re-price a value head offline.

``CKPT`` is a trainer checkpoint ``.../global_step_N`` (or its ``actor/`` subdirectory)::

    global_step_N/config.yaml                          the resolved training config (router:, data:)
    global_step_N/actor/huggingface/                   HF export of the actor (config, safetensors, tokenizer)
    global_step_N/actor/router_world_size_W_rank_0.pt  {"head": RouterHead state_dict, "optimizer": ...}
    global_step_N/data.pt                              driver state (a value head's λ and route values)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from verl.router.head import RouterHead
from verl.router.value import RouteValueBaseline, policy_baseline

CONFIG_FILE = "config.yaml"
HF_DIR = "huggingface"
ROUTER_FILE_GLOB = "router_world_size_*_rank_0.pt"


@dataclass(frozen=True)
class CheckpointFiles:
    """Where the pieces of a ``global_step_N`` checkpoint live."""

    step_dir: Path
    actor_dir: Path
    hf_dir: Path
    router_file: Path
    config_file: Path


def resolve_checkpoint(path: str | os.PathLike) -> CheckpointFiles:
    """Locate the HF export, the router head file and ``config.yaml`` of a checkpoint.

    Args:
        path: ``.../global_step_N`` or ``.../global_step_N/actor``.

    Raises:
        FileNotFoundError: the directory, ``actor/huggingface/``, the router file (the run needs ``router.enable``)
            or ``config.yaml`` is missing; the message names the path looked at.
        ValueError: several ``router_world_size_*_rank_0.pt`` files in one actor directory.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"--checkpoint {root}: not a directory")
    if (root / "actor" / HF_DIR).is_dir():
        step_dir, actor_dir = root, root / "actor"
    elif (root / HF_DIR).is_dir():
        step_dir, actor_dir = root.parent, root
    else:
        steps = sorted(
            root.glob("global_step_*"),
            key=lambda d: int(d.name.split("_")[-1]) if d.name.split("_")[-1].isdigit() else -1,
        )
        if steps:  # an experiment's checkpoint folder, not one checkpoint
            raise FileNotFoundError(
                f"--checkpoint {root}: this is a folder of checkpoints; give one of them, e.g. the newest, {steps[-1]}"
            )
        raise FileNotFoundError(
            f"--checkpoint {root}: no actor/{HF_DIR}/ (nor {HF_DIR}/) export; save checkpoints "
            "with 'hf_model' in checkpoint.save_contents"
        )
    routers = sorted(actor_dir.glob(ROUTER_FILE_GLOB))
    if not routers:
        raise FileNotFoundError(
            f"--checkpoint {root}: no {ROUTER_FILE_GLOB} in {actor_dir} (was the run trained with router.enable=true?)"
        )
    if len(routers) > 1:
        raise ValueError(f"--checkpoint {root}: several router files in {actor_dir}: {[p.name for p in routers]}")
    config_file = step_dir / CONFIG_FILE
    if not config_file.is_file():
        raise FileNotFoundError(f"--checkpoint {root}: the training config {config_file} is missing")
    return CheckpointFiles(step_dir, actor_dir, actor_dir / HF_DIR, routers[0], config_file)


def load_checkpoint_config(config_file: str | os.PathLike) -> DictConfig:
    """The checkpoint's training config, typed: the saved values over the current defaults (a checkpoint written
    before a key existed gets its default), every value checked against ``config_schema``.

    Raises:
        ValueError: no ``router`` / ``data`` section, or a saved key or value the current config does not accept
            (the file and the key are named).
    """
    from verl.trainer.config_keys import drop_retired_keys
    from verl.trainer.config_utils import default_config

    saved = OmegaConf.load(config_file)
    drop_retired_keys(saved)  # derived fields older versions saved (e.g. compute_dtype): nothing reads them
    for section in ("router", "data"):
        if not isinstance(saved.get(section), DictConfig):
            raise ValueError(f"{config_file}: no {section!r} section (not a router training config)")
    try:
        return OmegaConf.merge(default_config(), saved)
    except Exception as err:  # noqa: BLE001 - omegaconf's validation errors name the key
        raise ValueError(f"{config_file}: {str(err).splitlines()[0]}") from None


def load_router_head(router_file: str | os.PathLike, router_cfg: DictConfig, hidden_size: int) -> RouterHead:
    """Build the :class:`RouterHead` the run trained (``router.head``, ``pooling``, ``detach_backbone``) and load
    the ``head`` weights of ``router_file`` (CPU, eval mode).

    Raises:
        KeyError: the file holds no ``head`` entry.
        ValueError: the weights do not fit the configured head (file and head type named).
    """
    state = torch.load(router_file, map_location="cpu", weights_only=True)
    if not isinstance(state, Mapping) or "head" not in state:
        raise KeyError(
            f"{router_file}: expected a dict with a 'head' state_dict, got "
            f"{sorted(state) if isinstance(state, Mapping) else type(state).__name__}"
        )
    head = RouterHead(
        hidden_size,
        head=router_cfg.head,
        pooling=router_cfg.pooling,
        detach_backbone=bool(router_cfg.detach_backbone),
        input_norm=OmegaConf.select(router_cfg, "input_norm", default="none"),
    )
    try:
        head.load_state_dict(state["head"])
    except RuntimeError as exc:
        raise ValueError(
            f"{router_file}: head weights do not fit router.head={head.head_type!r} with hidden size "
            f"{hidden_size}: {exc}"
        ) from exc
    return head.eval()


def load_value_policy(
    step_dir: str | os.PathLike, router_cfg: DictConfig
) -> Optional[tuple[torch.Tensor, torch.Tensor, float, float]]:
    """For ``router.loss_mode=value``: the arguments that turn the head's output into the run's routing policy
    (:func:`verl.router.value.value_policy_logits`) — the running route baselines and costs and λ from the
    checkpoint's ``data.pt`` (the baseline is zero with ``router.value_fit=ridge``, whose head predicts the whole
    reward), and ``router.value_temperature`` — as ``(baseline [3], cost [3], λ, τ)``; None for
    ``loss_mode=pg`` (the head's output is the policy).

    Raises:
        FileNotFoundError: no ``data.pt`` in ``step_dir``.
        KeyError: ``data.pt`` holds no router state with route values (the path is named).
    """
    if OmegaConf.select(router_cfg, "loss_mode", default="pg") != "value":
        return None
    path = Path(step_dir) / "data.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: router.loss_mode=value routes with the run's λ and route values, which "
            "live in the checkpoint's data.pt"
        )
    state = torch.load(path, map_location="cpu", weights_only=False)
    router_state = state.get("router") if isinstance(state, Mapping) else None
    if not isinstance(router_state, Mapping) or "route_values" not in router_state:
        raise KeyError(f"{path}: no router route values (expected data.pt['router']['route_values'])")
    values = RouteValueBaseline(float(router_cfg.value_baseline_decay))
    values.load_state_dict(router_state["route_values"])
    baseline = policy_baseline(values.reward, OmegaConf.select(router_cfg, "value_fit", default="sgd"))
    return baseline, values.cost, float(router_state["lagrange"]["lambda"]), float(router_cfg.value_temperature)
