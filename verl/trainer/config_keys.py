"""Which keys a trainer config may hold: every key ``ppo_trainer.yaml`` defines, the open sections whose keys are the
user's, and the retired keys older checkpoints saved. ``config_utils.load_default_config`` refuses the rest at load
(:func:`check_known_keys`) with the closest defined spelling.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from verl.trainer.config_errors import ConfigError

# Sections whose keys are the user's (their YAML default is an empty mapping): ``+section.anything=...`` is accepted.
OPEN_SECTIONS = (
    "actor_rollout_ref.model.override_config",
    "critic.model.override_config",
    "env.textworld.settings",
    "actor_rollout_ref.rollout.engine_kwargs",
)


def _unknown_keys(config: DictConfig, base: DictConfig, prefix: str = "") -> list[str]:
    unknown = []
    for key in config.keys():
        path = f"{prefix}{key}"
        if path in OPEN_SECTIONS:
            continue
        if key not in base:
            unknown.append(path)
            continue
        child, base_child = config._get_node(key), base._get_node(key)
        if isinstance(child, DictConfig) and isinstance(base_child, DictConfig) and not base_child._is_none():
            unknown.extend(_unknown_keys(child, base_child, path + "."))
    return unknown


# derived fields that older versions saved into checkpoint configs (``global_step_N/config.yaml``) and nothing reads
# any more: dropped when such a config is read back (``drop_retired_keys``)
RETIRED_KEYS = ("actor_rollout_ref.actor.compute_dtype", "critic.compute_dtype")


def drop_retired_keys(saved: DictConfig) -> list[str]:
    """Remove :data:`RETIRED_KEYS` from a saved config in place (so a checkpoint written before they were retired
    still loads); returns the ones found."""
    found = []
    for key in RETIRED_KEYS:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(saved, parent)
        if isinstance(node, DictConfig) and leaf in node:
            with open_dict(node):
                node.pop(leaf)
            found.append(key)
    return found


def check_known_keys(config: DictConfig) -> None:
    """Refuse keys that ``ppo_trainer.yaml`` does not define, such as ``+actor_rollout_ref.actor.optim.lrr=1e-5``
    (Hydra's ``+`` adds a key that nothing would read). Keys under :data:`OPEN_SECTIONS` are accepted; below a key
    whose default is null this check lets a mapping through, and ``config_utils.typed_config`` then accepts it only where the
    schema types that key ``Any`` (e.g. ``data.train_files``). A config that is already typed is not checked again.

    Raises:
        ConfigError: naming every unknown key and, where one exists, the defined key of the closest spelling.
    """
    import difflib

    base = OmegaConf.load(Path(__file__).parent / "config" / "ppo_trainer.yaml")  # no defaults list: the YAML is all
    from verl.trainer.config_schema import PPOTrainerConfig

    if OmegaConf.get_type(config) is PPOTrainerConfig:
        return  # typed_config already refused every key the schema lacks; its derived fields are the code's
    unknown = _unknown_keys(config, base)
    if not unknown:
        return
    defined = list(_flat_keys(base))
    lines = []
    for path in unknown:
        close = difflib.get_close_matches(path, defined, n=1, cutoff=0.8)
        lines.append(f"{path}" + (f" (did you mean {close[0]}?)" if close else ""))
    raise ConfigError(
        "unknown config key(s), not defined in ppo_trainer.yaml and read by nothing:\n  "
        + "\n  ".join(lines)
        + f"\nOpen sections that accept new keys: {', '.join(OPEN_SECTIONS)}."
    )


def _flat_keys(config: DictConfig, prefix: str = ""):
    for key in config.keys():
        node = config._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none():
            yield from _flat_keys(node, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"
