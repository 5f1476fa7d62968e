"""Each recipe resolves to what its launch script handed the trainer before the launch path moved into recipes.

``launch_golden/scripts_before_recipes.json`` holds, per case, the resolved config the old shell scripts produced (CPU
and GPU branches, defaults and with launch variables set; ToolRL's own GRPO and PPO lines typed by hand), recorded by
``launch_golden/record.py`` before anything moved. Here every case runs its launch script as it is now (a stub
interpreter records what the script execs: ``main_ppo recipe=...``), composes that command line the way ``main_ppo``
does (``verl.trainer.launch``), resolves the data files (discovery, router labels, irrelevance rows) and compares
every key after ``normalize_config`` on both sides. The only differences allowed are the ones the move made on
purpose, listed in :data:`ON_PURPOSE` with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import REPO_ROOT

sys.path.insert(0, str(Path(__file__).parent / "launch_golden"))  # record.py: the recorder and its helpers
GOLDEN = json.loads((Path(__file__).parent / "launch_golden" / "scripts_before_recipes.json").read_text())
CASES = GOLDEN["cases"]

# the executing tool loop's section, added later: off by default, so every recorded line trains as before
MULTI_TURN_KEYS = {
    f"actor_rollout_ref.rollout.multi_turn.{k}": v
    for k, v in dict(
        enable=False,
        max_assistant_turns=4,
        max_tokens_per_turn=None,
        max_tool_response_length=256,
        tools=[],
        sandbox="process",
        num_workers=2,
        timeout_s=10.0,
        memory_mb=1024,
    ).items()
}
# keys the move added to the YAML: absent from the golden; their defaults keep a ToolRL line unchanged
NEW_KEYS = {
    "router.irrelevance_fraction": 0.0,
    "router.irrelevance_seed": 1,
    "trainer.build_sft_preset": False,
    "trainer.plot_on_finish": False,
    "reward_model.switches": [],
    "trainer.deterministic": False,
    "router.cost_weights.obs_tokens": 0.0,  # the executed calls' cost terms: 0 prices what was priced before
    "router.cost_weights.seconds": 0.0,
    "data.task": None,  # a generated task instead of files: null trains on the files, as before
    "data.task_dir": None,
    "trainer.after_fit": None,
    **MULTI_TURN_KEYS,
}
# keys added to the async mode's YAML since its golden: at these defaults its runs are unchanged
NEW_ASYNC_KEYS = {"async.inference.host": "127.0.0.1", **MULTI_TURN_KEYS}  # the servers bind loopback, as before
# what the scripts did outside the config and a recipe now says in it (the SFT preset on first use, the plots)
SCRIPT_DID = {"trainer.build_sft_preset": True, "trainer.plot_on_finish": True}

GPU_BATCH = {  # ToolRL's 512 / 128 do not fit the 399 rows the project finds: hardware/rlla/gpu.yaml
    "data.train_batch_size": (512, 64),
    "actor_rollout_ref.actor.ppo_mini_batch_size": (128, 16),
    "critic.ppo_mini_batch_size": (128, 16),
}
GPU_DEVICE = {  # hardware/gpu.yaml: one GPU runs the worker in the trainer's process, placed on CUDA (this machine
    # has none, so the old null resolved to cpu here)
    "trainer.single_process": (False, True),
    "trainer.device": ("cpu", "cuda"),
    "actor_rollout_ref.device": ("cpu", "cuda"),
    "critic.device": ("cpu", "cuda"),
}
AGENT_IN_PROCESS = {  # hardware/cpu.yaml and gpu.yaml: the worker in the trainer's process, so the environments too
    "trainer.single_process": (False, True),
    "env.use_ray_workers": (True, False),
}
VAL_BATCH = {"data.val_batch_size": (128, None)}  # deprecated and ignored (validation is one pass): dropped

ON_PURPOSE: dict[str, dict] = {
    "router_cpu": VAL_BATCH,
    "router_option_a_cpu": VAL_BATCH,
    "router_cpu_vars": VAL_BATCH,
    "router_option_a_cpu_no_irrelevance": VAL_BATCH,
    "router_gpu": {**VAL_BATCH, **GPU_BATCH, **GPU_DEVICE},
    "router_value_ridge_gpu": {**VAL_BATCH, **GPU_BATCH, **GPU_DEVICE},
    "grpo_cpu": VAL_BATCH,
    "grpo_cpu_vars": VAL_BATCH,
    "ppo_cpu": VAL_BATCH,
    "grpo_smollm2_sft_cpu": VAL_BATCH,
    "gspo_cpu": VAL_BATCH,
    "cispo_cpu": VAL_BATCH,
    "grpo_gpu": {**VAL_BATCH, **GPU_BATCH, **GPU_DEVICE},
    "ppo_gpu": {**VAL_BATCH, **GPU_BATCH, **GPU_DEVICE},
    "agent_cpu": AGENT_IN_PROCESS,
    "agent_cpu_vars": AGENT_IN_PROCESS,
    "agent_gpu": {**AGENT_IN_PROCESS, **{k: v for k, v in GPU_DEVICE.items() if k != "trainer.single_process"}},
    # the async learner became the synchronous trainer's actor worker and step: the estimator, the sampling
    # temperature and the rollouts per problem are main_ppo's keys now (async_trainer.yaml's defaults keep the old run)
    "async_cpu": {
        "actor_rollout_ref.rollout.n": (1, 2),
        "env.rollout.n": (1, 2),
        "algorithm.adv_estimator": ("gae", "rloo"),
        "algorithm.use_kl_in_reward": (None, False),
        "async.envs.line_world.group_size": (2, None),
        "async.inference.temperature": (1.0, "<absent>"),
        "async.replay.advantage": ("rloo", "<absent>"),
    },
    "toolrl_grpo_line": {},
    "toolrl_ppo_line": {},
}

STUB = r"""#!/usr/bin/env bash
if [ "${1:-}" = "-m" ] && { [ "${2:-}" = verl.trainer.main_ppo ] || [ "${2:-}" = verl.trainer.main_async ]; }; then
  exec "$REAL_PYTHON" -c 'import json, sys; print(json.dumps({"module": sys.argv[1], "args": sys.argv[2:]}))' \
    "$2" "${@:3}" > "$CAPTURE"
fi
exec "$REAL_PYTHON" "$@"
"""


def _nested(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _normalized(config, module: str) -> dict:
    """Resolved, typed and normalized (deprecated keys mapped, device and derived values filled), flattened."""
    from verl.trainer.config_utils import normalize_config, typed_config

    if module.endswith("main_ppo"):
        config = normalize_config(typed_config(config))
    from record import flat, relative  # noqa: PLC0415  (tests/trainer/launch_golden)

    container = OmegaConf.to_container(config, resolve=True)
    container.pop("hydra", None)
    return {k: relative(v) for k, v in flat(container).items()}


def _launched(script: str, env_vars: dict, args: list, tmp_path: Path) -> dict:
    """What ``script`` execs now: ``{"module": ..., "args": [...]}`` (recorded by the stub interpreter)."""
    from record import LAUNCH_VARS  # noqa: PLC0415  (tests/trainer/launch_golden)

    stub, capture = tmp_path / "python", tmp_path / "capture.json"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith("SFT_")}
    env.update(PYTHON=str(stub), REAL_PYTHON=sys.executable, CAPTURE=str(capture), **env_vars)
    proc = subprocess.run(["bash", script, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and capture.is_file(), proc.stderr[-3000:]
    return json.loads(capture.read_text())


def _compose_now(case: dict, tmp_path: Path) -> tuple[dict, dict]:
    """(the normalized config as the launch path now resolves the case, the reward switches it turns on)."""
    from hydra import compose, initialize_config_dir

    from verl.trainer.launch import launch_overrides
    from verl.trainer.main_ppo import resolve_data_files

    if case["script"] is None:
        module, args = case["module"], case["args"]
    else:
        launched = _launched(case["script"], case["env"], case["args"], tmp_path)
        module, args = launched["module"], launched["args"]
    app = module.rsplit(".", 1)[-1]
    name = "async_trainer" if app == "main_async" else "ppo_trainer"
    environ = {k: v for k, v in case["env"].items()}
    with initialize_config_dir(config_dir=str(REPO_ROOT / "verl" / "trainer" / "config"), version_base=None):
        config = compose(config_name=name, overrides=launch_overrides(args, environ, app=app))
    if app == "main_ppo":
        from verl.trainer.config_utils import typed_config

        config = typed_config(config)
        resolve_data_files(config)
    from verl.utils.reward_score.rlla import SWITCH_ENV_VARS

    names = set(SWITCH_ENV_VARS.values())
    switches = {k for k, v in environ.items() if k in names and v == "1"}
    if "reward_model" in config:
        switches |= set(config.reward_model.switches) - {k for k, v in environ.items() if k in names and v != "1"}
    return _normalized(config, module), switches


@pytest.mark.parametrize("name", sorted(CASES))
def test_recipe_resolves_as_its_script_did(name, tmp_path, monkeypatch):
    case = CASES[name]
    for key in ("DATA_DIR", "N_GPUS"):
        monkeypatch.delenv(key, raising=False)
    if "DATA_DIR" in case["env"]:
        monkeypatch.setenv("DATA_DIR", case["env"]["DATA_DIR"])
    now, switches_now = _compose_now(case, tmp_path)
    old_flat = dict(case["config"])
    if case["module"].endswith("main_ppo"):  # the keys the YAML did not have yet, at their defaults
        old_flat.update({k: v for k, v in NEW_KEYS.items() if k not in old_flat})
    old_config = OmegaConf.create(_nested(old_flat))
    if case["module"].endswith("main_ppo"):
        from verl.trainer.config_utils import typed_config

        old_config = typed_config(old_config)
    before = _normalized(old_config, case["module"])
    on_purpose = ON_PURPOSE[name]
    expected_new = dict(NEW_KEYS)
    if case["script"] is not None and case["module"].endswith("main_ppo"):
        expected_new.update(SCRIPT_DID)
    differ = []
    for key in sorted(set(before) | set(now)):
        if key.removeprefix("actor_rollout_ref.") in NEW_KEYS and key not in case["config"]:
            continue  # a new key (and the actor's copy of the router section)
        if key in NEW_ASYNC_KEYS and key not in case["config"]:
            assert now.get(key) == NEW_ASYNC_KEYS[key], (key, now.get(key))
            continue
        old, new = before.get(key, "<absent>"), now.get(key, "<absent>")
        if key in on_purpose:
            assert (old, new) == on_purpose[key], (key, old, new)
        elif old != new:
            differ.append(f"{key}: {old!r} -> {new!r}")
    assert not differ, "\n".join(differ)
    for key in set(on_purpose) - set(before) - set(now):
        raise AssertionError(f"{key} is listed as changed on purpose but is in neither config")
    # the new keys: their defaults where nothing set them (a ToolRL line), what the script did where it did it
    if case["module"].endswith("main_ppo"):
        assert {k: now[k] for k in ("trainer.build_sft_preset", "trainer.plot_on_finish")} == {
            k: expected_new[k] for k in ("trainer.build_sft_preset", "trainer.plot_on_finish")
        }
    # ToolRL's reward switches: the ones on are the same (a script's `export REFINEDREWARD=1` is now the recipe's
    # reward_model.switches, a user's variable still wins)
    switches_before = {k for k, v in case["switches"].items() if v == "1"}
    assert switches_now == switches_before
