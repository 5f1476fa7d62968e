"""Every key of the shipped trainer YAML is read by some code or refused by a rule (issue 21: no silent no-ops).

The check walks every leaf of ``ppo_trainer.yaml`` and requires one of: the key's name occurs in the package code
(``verl``, ``agent_system``, ``rlvcr``: read through an attribute or a string), the key is in
``unsupported_config_checks.UNSUPPORTED`` (values nothing implements are refused at load), or it is one of the few keys read by
someone else, listed below with the reason. A name occurring in code is a necessary condition, not a proof of use:
the test catches a key that nothing mentions at all, which is how a key added to the YAML and forgotten looks."""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conftest import REPO_ROOT
from verl.trainer.unsupported_config_checks import UNSUPPORTED, supported_values

# keys read outside the packages, or governed by a switch that is itself refused
READ_ELSEWHERE = {
    "hydra.job.chdir": "read by Hydra itself",
    "reward_model.model.input_tokenizer": "a model-based reward only (reward_model.enable=true is refused)",
    "reward_model.model.fsdp_config.min_num_params": "a model-based reward only (reward_model.enable=true is refused)",
}


def _leaves(node: DictConfig, prefix: str = ""):
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and len(child) > 0:
            yield from _leaves(child, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def _package_source() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8")
        for package in ("verl", "agent_system", "rlvcr")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
    )


def test_every_yaml_key_is_read_or_refused():
    config = OmegaConf.load(REPO_ROOT / "verl" / "trainer" / "config" / "ppo_trainer.yaml")
    source = _package_source()
    refused = {key for key, _, _ in UNSUPPORTED}
    orphans = [
        key
        for key in _leaves(config)
        if key not in refused
        and key not in READ_ELSEWHERE
        and not re.search(rf"\b{re.escape(key.split('.')[-1])}\b", source)
    ]
    assert orphans == [], f"keys that no code reads and no rule refuses: {orphans}"


def test_the_check_finds_an_orphan(tmp_path):
    """The walk sees a key that nothing mentions (the test above is not vacuous)."""
    config = OmegaConf.create({"trainer": {"save_freq": 1, "a_key_nobody_reads_xyz": 2}})
    source = _package_source()
    orphans = [k for k in _leaves(config) if not re.search(rf"\b{re.escape(k.split('.')[-1])}\b", source)]
    assert orphans == ["trainer.a_key_nobody_reads_xyz"]


def test_refusal_rules_name_existing_keys():
    """Every rule of UNSUPPORTED names a key of the YAML, with the YAML's default among the supported values."""
    config = OmegaConf.load(Path(REPO_ROOT) / "verl" / "trainer" / "config" / "ppo_trainer.yaml")
    for key, supported, _ in UNSUPPORTED:
        assert OmegaConf.select(config, key, default="<missing>") in supported_values(supported), key
