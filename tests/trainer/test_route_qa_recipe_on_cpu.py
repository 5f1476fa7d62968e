"""The route_qa recipe's parts: the task generated once (data.task), the warm-start preset, the after_fit hook, and the
whole launch at a tiny size ending with the test table, the criteria and the plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verl.trainer.config_errors import ConfigError
from verl.utils.dataset.route_qa import ensure_task, write_task


@pytest.fixture(scope="module")
def small_task(tmp_path_factory):
    out = tmp_path_factory.mktemp("route_qa_small")
    write_task(out, train=24, val=6, test=12)
    return out


def test_ensure_task_writes_the_task_once(tmp_path):
    first = ensure_task(tmp_path / "task")
    meta = json.loads((first / "meta.json").read_text())
    assert meta["sizes"] == {"train": 3000, "val": 300, "test": 1200} and meta["seed"] == 0
    stamp = (first / "train.parquet").stat().st_mtime_ns
    assert ensure_task(tmp_path / "task") == first and (first / "train.parquet").stat().st_mtime_ns == stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_ensure_task_writes_into_an_empty_folder_and_refuses_a_full_one(tmp_path):
    (tmp_path / "empty").mkdir()
    assert (ensure_task(tmp_path / "empty") / "meta.json").is_file()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no task"):
        ensure_task(tmp_path / "other")


def test_data_task_fills_the_files_and_the_tool_kwargs(small_task):
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import resolve_data_files

    config = resolve_data_files(load_default_config(["recipe=router_route_qa", f"data.task_dir={small_task}"]))
    assert config.data.train_files == str(small_task / "train.parquet")
    assert config.data.val_files == str(small_task / "val.parquet")
    search = config.actor_rollout_ref.rollout.multi_turn.tools[1]
    assert search["kwargs"]["corpus_path"] == f"{small_task}/corpus.jsonl"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.task=gsm8k"], "data.task=gsm8k: expected route_qa"),
        (["data.task=route_qa", "data.train_files=x.parquet"], "leave them null"),
        (["data.task=route_qa", "router.enable=true", "router.irrelevance_fraction=0.25"], "set it to 0"),
        (["data.task_dir=/tmp/somewhere"], "data.task is null"),
    ],
)
def test_data_task_refuses_what_it_would_ignore(overrides, message):
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import resolve_data_files

    with pytest.raises(ConfigError, match=message):
        resolve_data_files(load_default_config(overrides))


def test_after_fit_references_are_checked_at_load():
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import load_after_fit
    from verl.trainer.route_qa.finish import after_fit

    assert load_after_fit(None) is None
    assert load_after_fit("verl.trainer.route_qa.finish:after_fit") is after_fit
    for ref, message in (
        ("verl.trainer.route_qa.finish", "expected 'package.module:function'"),
        ("verl.no_such_module:f", "does not import"),
        ("verl.trainer.route_qa.finish:nope", "has no function 'nope'"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_after_fit(ref)
    # what the route_qa hook needs is refused before the run (main_ppo calls its check first)
    after_fit.check(load_default_config(["recipe=router_route_qa"]))
    for overrides, message in (
        (["data.task=null"], "needs data.task=route_qa"),
        (["trainer.save_freq=-1"], "save_freq > 0"),
    ):
        with pytest.raises(ConfigError, match=message):
            after_fit.check(load_default_config(["recipe=router_route_qa", *overrides]))


def test_random_routing_curve_runs_from_answer_to_the_tool_routes():
    from verl.trainer.route_qa.evaluate import SETTINGS
    from verl.trainer.route_qa.finish import random_curve

    correct = {"ANSWER": [1, 0, 0, 0], "SEARCH": [0, 1, 1, 0], "CALCULATE": [1, 1, 1, 1], "BOTH": [1, 1, 1, 1]}
    table = {
        s: {
            "correct": np.array(correct[s], bool),
            "used_tool": np.full(4, s != "ANSWER"),
            "calls": np.full(4, int(s != "ANSWER")),
        }
        for s in SETTINGS
    }
    curve = random_curve(table, points=3)
    assert [p["cost"] for p in curve] == pytest.approx([0.0, 0.5, 1.0])
    # B = 0: always ANSWER (1/4 right); B = 1: SEARCH or CALCULATE at even odds ((2/4 + 4/4) / 2); linear between
    assert [p["accuracy"] for p in curve] == pytest.approx([0.25, 0.5, 0.75])
    # a largest spend that rounding puts a hair above what a tool route may take still draws (q = 1/2)
    table["SEARCH"]["used_tool"] = np.array([True, False, False, False] * 3)
    table["CALCULATE"]["used_tool"] = np.array([True] * 4 + [False] * 8)
    for s in SETTINGS:
        for k in ("correct", "calls"):
            table[s][k] = np.resize(table[s][k], 12)
    table["ANSWER"]["used_tool"] = np.zeros(12, bool)
    table["BOTH"]["used_tool"] = np.ones(12, bool)
    assert len(random_curve(table)) == 11


def test_the_warm_start_preset_is_built_once_with_its_record(small_task, tmp_path):
    from verl.trainer.route_qa.warm_start import WarmStart, build_warm_start

    target = build_warm_start(tmp_path / "preset", WarmStart(copy_steps=3, sft_steps=2), data_dir=small_task)
    record = json.loads((target / "warm_start.json").read_text())
    assert record["settings"]["copy_steps"] == 3 and record["data_dir"] == str(small_task)
    assert set(record["seconds"]) == {"data", "copy_warmup", "traces", "sft"}
    assert len((target / "copy_warmup.jsonl").read_text().splitlines()) == 3
    assert (target / "config.json").is_file() and (target / "model.safetensors").is_file()
    assert not (target / "sft_train.parquet").exists() and not (target / "copy_warmup").exists()
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    assert build_warm_start(target, WarmStart(copy_steps=3, sft_steps=2), data_dir=small_task) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp
    # a preset built with other settings (an older version's) is refused, not used as if it were this one
    with pytest.raises(RuntimeError, match=r"copy_steps: built 3, expected 4.*delete the folder"):
        build_warm_start(target, WarmStart(copy_steps=4, sft_steps=2), data_dir=small_task)
    (target / "warm_start.json").write_text('{"settings": null}')
    with pytest.raises(RuntimeError, match="no readable warm_start.json"):
        build_warm_start(target, WarmStart(copy_steps=3, sft_steps=2), data_dir=small_task)
    (target / "warm_start.json").unlink()
    with pytest.raises(RuntimeError, match="no readable warm_start.json"):
        build_warm_start(target, WarmStart(copy_steps=3, sft_steps=2), data_dir=small_task)


def test_the_warm_start_cli_builds_other_settings_only_into_another_folder(capsys):
    from verl.trainer.route_qa.warm_start import main

    with pytest.raises(SystemExit) as exit_info:  # the preset folder would then be refused by every run
        main(["--copy_steps", "5"])
    assert exit_info.value.code == 2 and "need --output" in capsys.readouterr().err


def test_the_recipe_trains_and_ends_with_the_criteria_and_the_plot(small_task, tmp_path, tiny_model_dir):
    """The whole launch at a tiny size: the task from data.task_dir, a router step on executed tools, a checkpoint,
    then after_fit plays the 12 test questions under every setting and writes the summary and the plot."""
    import os
    import subprocess
    import sys

    from conftest import REPO_ROOT

    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "recipe=router_route_qa",
        f"data.task_dir={small_task}",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "data.train_batch_size=8",
        "data.max_response_length=48",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "trainer.total_training_steps=1",
        "trainer.save_freq=1",
        f"trainer.default_local_dir={ckpt}",
        f"trainer.run_dir={run_dir}",
        "trainer.logger=[console]",
    ]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["summary"]["questions"] == 12 and summary["checkpoint"].endswith("global_step_1")
    for name in ("route_shares", "payoff", "loose_budget", "budget"):
        assert "holds" in summary[name]
    assert summary["budget"]["policy_cost_last_third"] is not None  # read from the run's metrics.jsonl
    assert (run_dir / "plots" / "route_qa.png").stat().st_size > 10_000
    assert len(summary["random_curve"]) == 11
