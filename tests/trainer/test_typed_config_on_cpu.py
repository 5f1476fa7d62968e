"""The typed config (verl/trainer/config_schema.py, verl/workers/config.py): the YAML and the dataclasses hold the same
keys, values are converted or refused with the key's full name at load and on assignment, workers keep their
section's type, and derived fields are not user keys."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from conftest import REPO_ROOT
from verl.trainer.config_schema import PPOTrainerConfig, derived_keys
from verl.trainer.config_keys import OPEN_SECTIONS, check_known_keys
from verl.trainer.config_utils import ConfigError, default_section, load_default_config, normalize_config, typed_config
from verl.workers.config import ActorConfig, ActorRolloutRefConfig, CriticConfig, worker_section

YAML = REPO_ROOT / "verl/trainer/config/ppo_trainer.yaml"


def _yaml_tree() -> DictConfig:
    raw = OmegaConf.load(YAML)
    del raw["hydra"]
    return raw


def _leaf_paths(node: DictConfig, prefix: str = "") -> set[str]:
    out = set()
    for key in node.keys():
        child = node._get_node(key)
        path = f"{prefix}{key}"
        if isinstance(child, DictConfig) and len(child) and path not in OPEN_SECTIONS:
            out |= _leaf_paths(child, path + ".")
        else:
            out.add(path)
    return out


def test_schema_and_yaml_define_the_same_keys():
    typed = typed_config(_yaml_tree())  # the YAML alone: no key the schema lacks, no field the YAML leaves MISSING
    assert OmegaConf.get_type(typed) is PPOTrainerConfig
    yaml_keys = _leaf_paths(_yaml_tree())
    schema_keys = _leaf_paths(typed)
    assert schema_keys - yaml_keys == set(derived_keys())
    assert yaml_keys <= schema_keys
    # the derived fields are filled by code, never by the YAML: each starts as None
    assert all(OmegaConf.select(typed, key) is None for key in derived_keys())


def test_every_section_is_typed():
    config = load_default_config()
    assert OmegaConf.get_type(config.actor_rollout_ref) is ActorRolloutRefConfig
    assert OmegaConf.get_type(config.actor_rollout_ref.actor) is ActorConfig
    assert OmegaConf.get_type(config.critic) is CriticConfig

    def walk(node: DictConfig, path: str):
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_none() and f"{path}{key}" not in OPEN_SECTIONS:
                assert dataclasses.is_dataclass(OmegaConf.get_type(child)), f"{path}{key} is untyped"
                walk(child, f"{path}{key}.")

    walk(config, "")


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.save_freq=abc", "trainer.save_freq must be of type int: Value 'abc'"),
        (
            "actor_rollout_ref.actor.optim.lr=fast",
            "actor_rollout_ref.actor.optim.lr must be of type float: Value 'fast'",
        ),
        ("router.greedy_eval=maybe", "router.greedy_eval must be of type bool: Value 'maybe' is not a valid bool"),
        ("data.train_batch_size=1.5", "data.train_batch_size must be of type int: Value '1.5'"),
        ("trainer.cpu_threads=x", "trainer.cpu_threads must be of type int or null: Value 'x'"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_at_load_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_default_config([override])
    assert str(err.value).startswith(message)


def test_values_are_converted_to_their_field_types():
    config = load_default_config(["router.budget_B=1", "trainer.cpus_per_worker=1", "data.max_prompt_length=256"])
    assert isinstance(config.router.budget_B, float) and isinstance(config.trainer.cpus_per_worker, float)
    assert config.actor_rollout_ref.rollout.prompt_length == 256  # interpolations still follow their source


def test_assignment_is_checked_after_load():
    config = load_default_config()
    with pytest.raises(ValidationError, match="trainer.total_epochs"):
        config.trainer.total_epochs = "many"


def test_a_section_replaced_by_hand_must_still_hold_every_key():
    raw = _yaml_tree()
    raw.router = {"enable": True}
    with pytest.raises(ConfigError, match=r"router\.budget_B.*router\.cost_weights\.any_tool"):
        typed_config(raw)


def test_derived_fields_are_not_user_keys():
    config = load_default_config()
    normalize_config(config)  # fills actor_rollout_ref.device / router, critic.rollout_n ...
    assert config.actor_rollout_ref.device == "cpu" and config.critic.rollout_n == 1
    assert OmegaConf.get_type(config.actor_rollout_ref.router) is OmegaConf.get_type(config.router)
    check_known_keys(config)  # a typed config: the schema owns its derived fields
    with pytest.raises(ConfigError, match=r"unknown config key.*\n  actor_rollout_ref\.device"):
        check_known_keys(_composed(["+actor_rollout_ref.device=cuda"]))  # a user cannot set one


def _composed(overrides):
    """The Hydra composition alone (no key check, no typing): what main_ppo receives before prepare_config."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(YAML.parent), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def test_worker_sections_keep_their_type_and_resolve_interpolations():
    config = load_default_config(["data.max_response_length=77"])
    section = worker_section(config.actor_rollout_ref, ActorRolloutRefConfig)
    assert OmegaConf.get_type(section) is ActorRolloutRefConfig
    assert section.rollout.response_length == 77
    section.actor.ppo_mini_batch_size = 3
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size != 3  # the caller's config is untouched
    # a hand-built plain section is checked the same way
    plain = OmegaConf.create(OmegaConf.to_container(config.critic, resolve=True))
    plain.ppo_epochs = "two"
    with pytest.raises(ValidationError, match="ppo_epochs"):
        worker_section(plain, CriticConfig)


def test_default_section_applies_overrides_and_refuses_unknown_keys():
    actor = default_section("actor_rollout_ref.actor", ppo_mini_batch_size=6, **{"policy_loss.loss_mode": "gspo"})
    assert OmegaConf.get_type(actor) is ActorConfig
    assert actor.ppo_mini_batch_size == 6 and actor.policy_loss.loss_mode == "gspo" and actor.optim.lr == 1e-6
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.ppo_mini_bach_size"):
        default_section("actor_rollout_ref.actor", ppo_mini_bach_size=6)
    with pytest.raises(ConfigError, match="not a section"):
        default_section("trainer.save_freq")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"],
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null needs actor_rollout_ref.actor.use_dynamic_bsz=true",
        ),
        (
            ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null"],
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null needs "
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        ),
        (["env.env_name=line_world", "data.tool_format=hermes"], "data.tool_format='hermes' with env.env_name"),
    ],
)
def test_null_micro_batches_need_a_token_budget_and_agent_mode_keeps_toolrl(overrides, message):
    base = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    with pytest.raises(ConfigError) as err:
        from verl.trainer.config_utils import validate_config

        validate_config(normalize_config(load_default_config(base + overrides)), check_files=False)
    assert message in str(err.value)
    # upstream's null with a token budget is accepted
    config = normalize_config(
        load_default_config(base + [overrides[0], "actor_rollout_ref.actor.use_dynamic_bsz=true"])
    )
    if not overrides[0].startswith("env"):
        from verl.trainer.config_utils import validate_config

        validate_config(config, check_files=False)


@pytest.mark.parametrize(
    "override, message",
    [
        (None, None),
        ("async.inference.num_servers=two", "async.inference.num_servers must be of type int"),
        ("algorithm.adv_estimator=gae", "it reads critic values"),
        ("data.tool_format=mistral", "the async mode's environments score ToolRL's format only"),
        (
            "+actor_rollout_ref.model.override_config.attn_implementation=flex_attention",
            "attn_implementation='flex_attention': the async learner and inference servers load the model with sdpa",
        ),
        ("actor_rollout_ref.rollout.cache_implementation=static", "the async inference servers decode with a dynamic"),
    ],
)
def test_the_async_config_is_typed_and_refuses_what_it_does_not_implement(override, message):
    from hydra import compose, initialize_config_dir

    from verl.async_rl.config import AsyncConfig, AsyncEnvSpec, typed_async_config

    with initialize_config_dir(config_dir=str(YAML.parent), version_base=None):
        raw = compose(config_name="async_trainer", overrides=[override] if override else [])
    if message is None:
        typed = typed_async_config(raw)
        assert OmegaConf.get_type(typed) is PPOTrainerConfig and OmegaConf.get_type(typed["async"]) is AsyncConfig
        assert OmegaConf.get_type(typed["async"].envs.line_world) is AsyncEnvSpec
        return
    with pytest.raises(ConfigError, match=message):
        typed_async_config(raw)
