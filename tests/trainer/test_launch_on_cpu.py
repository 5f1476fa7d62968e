"""``verl.trainer.launch``: what a ``recipe=`` command line becomes, and the launch-path keys that are refused rather
than ignored (hand-worked cases; the recipes' resolved values are checked against the old scripts in
``test_recipes_golden_on_cpu.py``)."""

from __future__ import annotations

import pytest

from verl.trainer.config_errors import ConfigError
from verl.trainer.launch import LaunchError, launch_overrides


def test_no_recipe_passes_the_command_line_unchanged():
    line = ["algorithm.adv_estimator=grpo", "data.train_batch_size=512", "--cfg", "job"]
    assert launch_overrides(line, {"TRAIN_BATCH_SIZE": "3", "N_GPUS": "4"}) == line
    with pytest.raises(LaunchError, match="hardware=gpu chooses a recipe's hardware defaults"):
        launch_overrides(["hardware=gpu"], {})


def test_order_hardware_and_variables():
    assert launch_overrides(["recipe=grpo", "trainer.seed=3"], {"N_GPUS": "0", "LR": "2e-4"}) == [
        "+recipe=grpo",
        "+hardware=cpu",
        "actor_rollout_ref.actor.optim.lr=2e-4",
        "trainer.seed=3",
    ]
    # several GPUs: Ray drives one worker per GPU; the agent's environments step in Ray workers as before
    assert launch_overrides(["recipe=agent"], {"N_GPUS": "3"}) == [
        "+recipe=agent",
        "+hardware=gpu",
        "trainer.n_gpus_per_node=3",
        "trainer.single_process=false",
        "env.use_ray_workers=true",
    ]
    assert launch_overrides(["recipe=router"], {"N_GPUS": "1"})[:2] == ["+recipe=router_option_a", "+hardware=gpu"]
    assert launch_overrides(["recipe=router", "hardware=cpu"], {"ROUTER_RECIPE": "option_a"})[:2] == [
        "+recipe=router_option_a",
        "+hardware=cpu",
    ]


def test_each_family_reads_the_variables_its_script_read():
    env = {
        "N_GPUS": "0",
        "PROJECT_NAME": "p",
        "ROLLOUT_TP_SIZE": "2",
        "BUDGET_B": "0.5",
        "MODEL": "m",
        "BASE_MODEL": "b",
        "TASKS_PER_STEP": "5",
    }
    grpo = launch_overrides(["recipe=grpo"], env)  # train_grpo.sh fixed the project (TinyZero), read the TP size
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in grpo
    assert not any(o.startswith(("trainer.project_name", "router.", "data.train_batch_size")) for o in grpo)
    router = launch_overrides(["recipe=router"], env)  # run_router_training.sh read the project, fixed the TP size
    assert {"trainer.project_name=p", "router.budget_B=0.5"} <= set(router)
    assert not any(o.startswith("actor_rollout_ref.rollout.tensor_model_parallel_size") for o in router)
    assert "data.train_batch_size=5" in launch_overrides(["recipe=agent"], env)
    assert launch_overrides(["recipe=async_tiny"], env, app="main_async") == [
        "+recipe=async_tiny",
        "actor_rollout_ref.model.path=m",
    ]  # run_async.sh read MODEL, not BASE_MODEL


@pytest.mark.parametrize(
    "args, env, app, message",
    [
        (["recipe=nope"], {"N_GPUS": "0"}, "main_ppo", "recipe=nope: no verl/trainer/config/recipe/nope.yaml"),
        (["recipe=grpo", "hardware=tpu"], {}, "main_ppo", "hardware=tpu: expected cpu or gpu"),
        (["recipe=async_tiny", "hardware=gpu"], {}, "main_async", "the async recipes take no hardware group"),
        (["recipe=async_tiny"], {}, "main_ppo", "recipe=async_tiny is a recipe for main_async, not main_ppo"),
        (
            ["recipe=grpo"],
            {"N_GPUS": "0", "TOTAL_STEPS": "2.5"},
            "main_ppo",
            "TOTAL_STEPS=2.5: expected a whole number, or null (it sets trainer.total_training_steps)",
        ),
        (
            ["recipe=router"],
            {"N_GPUS": "0", "IRRELEVANCE_FRACTION": "1.5"},
            "main_ppo",
            "IRRELEVANCE_FRACTION=1.5: expected a number from 0 to 1 (it sets router.irrelevance_fraction)",
        ),
        (
            ["recipe=router"],
            {"ROUTER_RECIPE": "ridge", "N_GPUS": "0"},
            "main_ppo",
            "ROUTER_RECIPE=ridge: expected option_a or value_ridge",
        ),
    ],
)
def test_bad_launches_name_what_is_wrong(args, env, app, message):
    with pytest.raises(LaunchError) as err:
        launch_overrides(args, env, app=app)
    assert message in str(err.value)


def test_irrelevance_rows_need_the_router_and_the_discovered_file():
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import resolve_data_files

    with pytest.raises(ConfigError, match=r"router.irrelevance_fraction=0.5 .* needs router.enable=true"):
        resolve_data_files(load_default_config(["router.irrelevance_fraction=0.5"]))
    with pytest.raises(ConfigError, match="data.train_files=x.parquet is set"):
        resolve_data_files(
            load_default_config(["router.enable=true", "router.irrelevance_fraction=0.5", "data.train_files=x.parquet"])
        )


@pytest.mark.parametrize(
    "override",
    [
        "trainer.plot_on_finish=true",
        "trainer.deterministic=true",
        "router.irrelevance_fraction=0.5",
    ],
)
def test_the_async_mode_refuses_the_launch_keys_it_does_not_run(override):
    """(trainer.build_sft_preset and reward_model.switches are read by main_async now: the SFT preset is built by
    main_ppo's resolve_models, the switches reach the env actors' reward managers.)"""
    from hydra import compose, initialize_config_dir

    from conftest import REPO_ROOT
    from verl.async_rl.config import typed_async_config

    with initialize_config_dir(config_dir=str(REPO_ROOT / "verl/trainer/config"), version_base=None):
        config = compose(config_name="async_trainer", overrides=[override])
    with pytest.raises(ConfigError, match=f"{override.split('=')[0]}=.*the async mode does not read it"):
        typed_async_config(config)


def test_a_built_sft_preset_is_kept_without_looking_for_data(tmp_path, monkeypatch):
    from verl.trainer.sft_presets import run_sft

    (tmp_path / "models" / "tiny-sft").mkdir(parents=True)
    (tmp_path / "models" / "tiny-sft" / "config.json").write_text("{}")
    monkeypatch.setenv("TOOLRL_CACHE", str(tmp_path))
    environ = {"SFT_DATA_DIR": str(tmp_path / "no_data")}  # the data search would fail here
    assert run_sft("tiny-sft", environ) == tmp_path / "models" / "tiny-sft"
    with pytest.raises(FileNotFoundError, match="no_data"):
        run_sft("tiny-sft", {**environ, "SFT_FORCE": "1"})
