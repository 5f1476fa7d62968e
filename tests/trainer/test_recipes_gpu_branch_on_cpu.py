"""Every recipe's GPU branch composes and fits the data the project finds by itself, found on a CPU.

The ``gpu`` hardware is forced (``hardware=gpu``); each recipe then goes through ``prepare_config`` (data discovery,
router labels and irrelevance rows, every row checked, the model path resolved) and ``build_trainer`` (datasets and
dataloaders: a batch larger than the data fails here). Placing the models is where a CPU machine stops: one
``error:`` line, exit status 2, no word about resuming. The real SmolLM2-135M preset is built from its GGUF package
once; its SFT preset is stood in for by the same folder, and ``tiny-route-qa`` by ``tiny`` (only their tokenizers are
read before the models are placed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from verl.trainer.route_qa.warm_start import WarmStart

RECIPES = sorted(p.stem for p in (REPO_ROOT / "verl/trainer/config/recipe").glob("*.yaml") if p.stem != "async_tiny")


@pytest.fixture(scope="module")
def gpu_model_cache(tmp_path_factory):
    """A ``TOOLRL_CACHE`` whose ``smollm2-135m`` is the real preset and whose ``smollm2-135m-sft`` points to it."""
    from verl.utils.model_presets import prepare_model

    real = Path(prepare_model("smollm2-135m"))
    cache = tmp_path_factory.mktemp("gpu_cache")
    (cache / "models").mkdir()
    for name in ("smollm2-135m", "smollm2-135m-sft"):
        (cache / "models" / name).symlink_to(real, target_is_directory=True)
    tiny = Path(prepare_model("tiny"))  # the route_qa warm start stood in for by its base, with its record
    stand_in = cache / "models" / "tiny-route-qa"
    stand_in.mkdir()
    for f in tiny.iterdir():
        (stand_in / f.name).symlink_to(f)
    (stand_in / "warm_start.json").write_text(json.dumps({"settings": asdict(WarmStart())}))
    return cache


def test_every_recipe_is_tested():
    assert {
        "router_value_ridge",
        "router_option_a",
        "grpo",
        "ppo",
        "grpo_smollm2_sft_cpu",
        "gspo",
        "cispo",
        "agent",
        "router_route_qa",
    } <= set(RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_gpu_branch_composes_and_builds_its_dataloaders(recipe, gpu_model_cache, monkeypatch, caplog):
    from verl.trainer.config_errors import ConfigError
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import build_trainer, prepare_config

    from verl.utils.reward_score.rlla import SWITCH_ENV_VARS

    monkeypatch.setenv("TOOLRL_CACHE", str(gpu_model_cache))
    for name in ("DATA_DIR", "N_GPUS"):
        monkeypatch.delenv(name, raising=False)
    for name in SWITCH_ENV_VARS.values():  # a recipe's reward_model.switches sets them: undone after the test
        monkeypatch.setenv(name, "")
    config = load_default_config([f"recipe={recipe}", "hardware=gpu", "trainer.val_before_train=false"], environ={})
    assert (config.trainer.device, config.trainer.n_gpus_per_node, config.trainer.single_process) == ("cuda", 1, True)
    caplog.set_level("INFO")
    config = prepare_config(config)
    trainer = build_trainer(config)
    assert trainer.steps_per_epoch >= 1 and len(trainer.train_dataset) >= int(config.data.train_batch_size)
    assert any(r.getMessage().startswith("train: ") and " steps/epoch" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match="trainer.device=cuda .* but torch sees no CUDA device"):
        trainer.init_workers()


def test_n_gpus_1_on_a_cpu_stops_with_one_error_line_where_the_device_is_placed(gpu_model_cache):
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "N_GPUS", "BASE_MODEL", "ROUTER_RECIPE")}
    env.update(N_GPUS="1", TOOLRL_CACHE=str(gpu_model_cache), PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", "run_router_training.sh", "trainer.val_before_train=false"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "trainer.device=cuda" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "resume" not in proc.stderr.lower()
    assert "recipe router_option_a on gpu (1 GPU(s))" in proc.stderr
    assert " steps/epoch" in proc.stderr  # the dataloaders were built first
