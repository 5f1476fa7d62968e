"""The key table (verl/trainer/key_table.py): one row for every key of every entry point's composed config, a key an
entry point does not read refused there at load by name, ranges refused where read, and the page it generates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from verl.trainer.config_errors import ConfigError
from verl.trainer.key_table import ENTRY_POINTS, ROWS, check_keys, counts, flat_items, keys_of, rows_of
from verl.trainer.key_table_doc import markdown


CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "verl" / "trainer" / "config")
REPO = Path(__file__).resolve().parents[2]


def _composed(name: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name=name)


@pytest.mark.parametrize(
    "name, tree", [("ppo_trainer", "ppo_trainer"), ("async_trainer", "ppo_trainer"), ("generation", "generation")]
)
def test_every_key_of_every_composed_config_has_exactly_one_row(name, tree):
    config = _composed(name)
    keys = [k for k, _ in flat_items(config) if not k.startswith("hydra")]
    rows = rows_of(tree)
    assert [k for k in keys if k not in rows] == []  # a new key needs its row
    if name != "ppo_trainer":  # the async tree holds every row of the trainer's; generation's its own
        assert sorted(set(rows) - set(keys)) == []  # no row for a key that is gone


def test_the_page_is_current():
    assert (REPO / "docs" / "config_keys.md").read_text() == markdown(), "run python -m verl.trainer.key_table_doc"


def test_counts_add_up():
    c = counts()
    assert set(c) == set(ENTRY_POINTS)
    for point in ENTRY_POINTS:
        total = c[point]["read"] + c[point]["refused"]
        assert total <= len(keys_of(point)) if point == "main_eval" else total == len(keys_of(point))
        assert c[point]["read"] > 0


def _first_unread(entry_point: str, defaults):
    values = dict(flat_items(defaults))
    for key, row in keys_of(entry_point).items():
        if entry_point not in row.read_by and isinstance(values.get(key), (bool, int)) and values[key] is not None:
            return key, values[key]
    raise AssertionError(f"{entry_point} reads every key")


@pytest.mark.parametrize("entry_point", ["main_ppo", "agent", "main_async"])
def test_a_key_the_entry_point_does_not_read_is_refused_naming_both(entry_point):
    from omegaconf import OmegaConf

    from verl.async_rl.config import async_defaults
    from verl.trainer.config_utils import default_config

    defaults = (
        async_defaults() if entry_point == "main_async" else OmegaConf.create(OmegaConf.to_container(default_config()))
    )
    key, value = _first_unread(entry_point, defaults)
    config = OmegaConf.create(OmegaConf.to_container(defaults))
    check_keys(config, defaults, entry_point)  # the defaults pass
    OmegaConf.update(config, key, (not value) if isinstance(value, bool) else value + 7)
    with pytest.raises(ConfigError, match=rf"{entry_point}: {key}=.*{entry_point} does not read it"):
        check_keys(config, defaults, entry_point)


def test_ranges_are_checked_where_the_key_is_read():
    from omegaconf import OmegaConf

    rows = rows_of("generation")
    assert rows["data.n_samples"].allows(1) and not rows["data.n_samples"].allows(0)
    assert rows["rollout.top_p"].allows(1.0) and not rows["rollout.top_p"].allows(0.0)
    assert rows["data.truncation"].allows("left") and not rows["data.truncation"].allows("top")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="generation", overrides=["data.n_samples=0"])
    from verl.trainer.main_generation import _generation_defaults

    with pytest.raises(ConfigError, match=r"data.n_samples=0: expected >= 1"):
        check_keys(OmegaConf.create(OmegaConf.to_container(config)), _generation_defaults(), "main_generation")


def test_every_range_parses_and_admits_the_default():
    """A range the default itself falls outside would refuse every run; each range must also be one the parser
    knows (a typo would make ``allows`` raise)."""
    for tree, name in (("ppo_trainer", "async_trainer"), ("generation", "generation")):
        values = dict(flat_items(_composed(name)))
        for key, row in rows_of(tree).items():
            if row.range and key in values and values[key] not in ("???",):
                assert row.allows(values[key]), (key, row.range, values[key])


def test_main_ppo_refuses_an_agent_key_and_agent_mode_a_single_turn_key(tmp_path):

    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import prepare_config

    with pytest.raises(ConfigError, match=r"main_ppo: env.sokoban.num_boxes=3: main_ppo does not read it"):
        prepare_config(load_default_config(["env.sokoban.num_boxes=3", "trainer.device=cpu"]))
    with pytest.raises(ConfigError, match=r"agent: .*data.prompt_key='question': agent does not read it"):
        prepare_config(
            load_default_config(["env.env_name=line_world", "data.prompt_key=question", "trainer.device=cpu"])
        )


def test_main_async_refuses_what_it_ignored():
    """The keys main_async used to take and drop (custom reward, router, data files, batch sizes); an estimator its
    batches cannot feed is refused by what it reads, one they can is accepted."""
    from verl.async_rl.config import typed_async_config

    for override, message in (
        ("algorithm.adv_estimator=gae", "reads critic values"),
        ("algorithm.adv_estimator=gigpo", "per-step batch fields"),
    ):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            config = compose(config_name="async_trainer", overrides=[override])
        with pytest.raises(ConfigError, match=message):
            typed_async_config(config)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        config = compose(config_name="async_trainer", overrides=["algorithm.adv_estimator=grpo"])
    assert typed_async_config(config).algorithm.adv_estimator == "grpo"
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        config = compose(config_name="async_trainer", overrides=["router.enable=true"])
    with pytest.raises(ConfigError, match=r"router.enable=.*main_async does not read it"):
        typed_async_config(config)
    # read with main_ppo's meaning now: refused only where this run has nothing that reads them (no rlla env), or
    # out of range (tests/async_rl/test_async_rewards_on_cpu.py has the accepted cases)
    for override, message in (
        ("data.train_files=/nonexistent.parquet", "main_async reads it for the envs of kind rlla"),
        ("data.train_batch_size=-5", "expected >= 1"),
        ("custom_reward_function.path=/tmp/reward.py", "score with their environment's step rewards"),
    ):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            config = compose(config_name="async_trainer", overrides=[override])
        with pytest.raises(ConfigError, match=message):
            typed_async_config(config)


def test_rows_name_only_their_trees_entry_points():
    for row in ROWS.values():
        assert row.key and all(p in ENTRY_POINTS for p in row.read_by)


def test_every_numeric_key_declares_its_range():
    """Every int / float key some entry point reads (its schema's type) has a range in the table, so a bad value (0
    epochs, a negative clip ratio or lr, NaN) is refused at load with the key, the value and the range."""
    from verl.async_rl.config import AsyncConfig
    from verl.trainer.config_schema import GenerationConfig, PPOTrainerConfig
    from verl.trainer.config_utils import _field_type_name

    schemas = {"ppo_trainer": PPOTrainerConfig, "generation": GenerationConfig}
    undeclared = []
    for tree, schema in schemas.items():
        for key, row in rows_of(tree).items():
            kind = (
                _field_type_name(AsyncConfig, key[len("async.") :]) if key.startswith("async.") else None
            ) or _field_type_name(schema, key)
            if row.read_by and (kind or "").split(" or ")[0] in ("int", "float") and not row.range:
                undeclared.append(f"{tree}:{key} ({kind})")
    assert not undeclared, "numeric keys without a range: " + ", ".join(undeclared)


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.actor.ppo_epochs=0", "actor_rollout_ref.actor.ppo_epochs=0: expected >= 1"),
        ("actor_rollout_ref.actor.ppo_epochs=-1", "ppo_epochs=-1: expected >= 1"),
        ("actor_rollout_ref.actor.clip_ratio=-0.2", "clip_ratio=-0.2: expected > 0"),
        ("trainer.total_epochs=0", "trainer.total_epochs=0: expected >= 1"),
        ("actor_rollout_ref.actor.optim.lr=-1e-3", "optim.lr=-0.001: expected >= 0"),
        ("actor_rollout_ref.rollout.temperature=-1", "rollout.temperature=-1.0: expected >= 0"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=0", "log_prob_micro_batch_size_per_gpu=0"),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=-1", "ref.log_prob_micro_batch_size_per_gpu=-1"),
        ("actor_rollout_ref.rollout.micro_batch_size=0", "rollout.micro_batch_size=0: expected >= 1"),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0", "ppo_max_token_len_per_gpu=0: expected >= 1"),
        ("router.budget_B=-0.5", "router.budget_B=-0.5: expected >= 0"),
        ("router.lambda_init=-1", "router.lambda_init=-1.0: expected >= 0"),
        ("router.dual_lr=-0.1", "router.dual_lr=-0.1: expected >= 0"),
        ("actor_rollout_ref.actor.entropy_coeff=nan", "entropy_coeff=nan: expected >= 0"),
        ("algorithm.gigpo.default_step_reward=inf", None),  # agent-only key: main_ppo refuses it as unread
        ("trainer.max_invalid_frac=1.5", "trainer.max_invalid_frac=1.5: expected [0, 1]"),
        ("trainer.resume_mode=sometimes", "trainer.resume_mode='sometimes': expected {auto, disable, resume_path}"),
        ("data.truncation=sideways", "data.truncation='sideways': expected {error, left, right, middle}"),
        ("actor_rollout_ref.actor.loss_agg_mode=token-sum", "loss_agg_mode='token-sum': expected {token-mean,"),
    ],
)
def test_bad_values_are_refused_at_load_naming_key_value_and_range(override, message):
    from verl.trainer.config_utils import default_config, typed_config

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        config = typed_config(compose(config_name="ppo_trainer", overrides=[override]))
    with pytest.raises(ConfigError, match=re.escape(message) if message else "does not read it"):
        check_keys(config, default_config(), "main_ppo")
